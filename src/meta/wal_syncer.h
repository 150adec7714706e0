// meta/wal_syncer.h
// Group commit for synced acknowledgements. Transactions commit with an
// unsynced WAL write (so they release their row locks at once), take a ticket,
// and wait until one background fsync of the WAL (DB::SyncWAL) that started
// after their write returns. One fsync thus covers every commit that finished
// while the previous fsync was running, and row locks are never held across
// an fsync (early lock release: a commit that read another's effects sits
// later in the WAL, so it can only be durable if that one is).
// Caveat: readers may see a committed change a moment before it is durable.
// Threading: thread-safe; owns one thread, joined by the destructor.
#pragma once

#include <condition_variable>
#include <cstdint>
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
  WalSyncer(rocksdb::DB* db, metrics::Registry& registry);
  ~WalSyncer();
  WalSyncer(const WalSyncer&) = delete;
  WalSyncer& operator=(const WalSyncer&) = delete;

  // REQUIRES: the caller's commit (unsynced) has returned. Blocks until the
  // WAL is synced past it; kIoError if the sync failed.
  Result<void> wait_durable();

 private:
  void run();

  rocksdb::DB* db_;
  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  uint64_t issued_ = 0;   // guarded by mu_: tickets handed out
  uint64_t synced_ = 0;   // guarded by mu_: tickets known durable
  uint64_t failed_ = 0;   // guarded by mu_: tickets whose covering sync failed
  bool stop_ = false;     // guarded by mu_
  metrics::Counter* syncs_;
  std::thread thread_;
};

}  // namespace weft::meta
