// meta/wal_syncer.h
// Group commit for synced acknowledgements. Transactions commit with an
// unsynced WAL write (so they release their row locks at once), then either
// block in wait_durable() or register a callback with when_durable(); both
// complete once one background fsync of the WAL (DB::SyncWAL) that started
// after the call has returned. One fsync thus covers every commit that
// finished while the previous fsync was running, and row locks are never held
// across an fsync (early lock release: a commit that read another's effects
// sits later in the WAL, so it can only be durable if that one is).
// when_durable() lets an RPC I/O thread run a mutation inline and send the
// reply from the callback, so no thread sleeps per request while it waits.
// Caveat: readers may see a committed change a moment before it is durable.
// Gathering (linger): clients that each wait for their ack come back at about
// the same time after a sync. When the previous sync covered k > 1 commits,
// the next one waits until k commits are pending, at most as long as the
// previous sync took (capped at 1 ms), instead of starting at the first
// commit and leaving the others to the sync after it. Without this, 4 clients
// settle into groups of 1 and 3 alternating, each waiting ~2 syncs.
// A failed sync is final: every commit not yet known durable, and every
// later one, completes with kIoError until the store is reopened. After a
// failed fsync the kernel may have dropped the WAL's dirty pages, and a later
// fsync succeeds without them ("fsyncgate"); recovery would then stop at the
// hole and lose commits acknowledged after it.
// Fault points: "meta.wal_sync.delay" sleeps 10 ms per hit (until it stops
// firing) before a sync takes its target, so tests can pile commits up;
// "meta.wal_sync.fail" fails a sync without calling it.
// Threading: thread-safe; owns one thread, joined by the destructor. Callbacks
// run on that thread (or inline in when_durable when the syncer is closing)
// and must not block.
// Invariants: tickets are handed out in order under mu_; a ticket completes
// with the outcome of the first sync whose target covers it; waiting_ is
// ordered by ticket.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "common/metrics.h"
#include "common/status.h"

namespace rocksdb {
class DB;
}

namespace weft::meta {

class WalSyncer {
 public:
  using DurableFn = std::move_only_function<void(Result<void>)>;

  WalSyncer(rocksdb::DB* db, metrics::Registry& registry, bool linger = true);
  ~WalSyncer();
  WalSyncer(const WalSyncer&) = delete;
  WalSyncer& operator=(const WalSyncer&) = delete;

  // REQUIRES: the caller's commit (unsynced) has returned. Blocks until the
  // WAL is synced past it; kIoError if the sync failed.
  Result<void> wait_durable();
  // REQUIRES: as wait_durable. Calls done once the WAL is synced past the
  // caller's commit (kIoError if that sync failed, kUnavailable if closing).
  void when_durable(DurableFn done);

 private:
  struct Waiter {
    uint64_t ticket;
    DurableFn done;
  };

  void run();
  // REQUIRES: mu_ held via lock. Waits for the group to gather (see above).
  void linger(std::unique_lock<std::mutex>& lock);
  // REQUIRES: mu_ held. Moves the callbacks of tickets <= target out.
  std::deque<Waiter> take_covered(uint64_t target);

  rocksdb::DB* db_;
  std::mutex mu_;
  std::condition_variable work_cv_;
  uint64_t issued_ = 0;   // guarded by mu_: tickets handed out
  uint64_t synced_ = 0;   // guarded by mu_: tickets known durable
  uint64_t failed_ = 0;   // guarded by mu_: tickets whose covering sync failed
  bool stop_ = false;     // guarded by mu_
  bool broken_ = false;   // guarded by mu_: a sync failed (final, see above)
  // guarded by mu_: when_durable wakes the syncer once this many commits are
  // pending (1 while idle, the linger target while lingering, never while a
  // sync runs: the syncer looks again after it). The destructor always wakes it.
  static constexpr uint64_t kNoWake = UINT64_MAX;
  uint64_t wake_at_pending_ = 1;
  const bool linger_;
  uint64_t last_batch_ = 0;     // syncer thread only: commits the last sync covered
  int64_t last_sync_us_ = 0;    // syncer thread only: how long it took
  std::deque<Waiter> waiting_;  // guarded by mu_: when_durable callbacks
  metrics::Counter* syncs_;
  metrics::Histogram* sync_us_;
  metrics::Histogram* batch_;
  std::thread thread_;
};

}  // namespace weft::meta
