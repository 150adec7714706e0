// storage/index_committer.h
// Group commit of the chunk index. Every change of the index (commit,
// remove) goes through commit(): the calling thread queues its operations and
// either leads a group or waits for the leader of the group that took them.
// A leader writes all the group's operations in ONE synced RocksDB write
// batch (one WAL append, one WAL sync for the whole group) and makes every
// slab write the group's commits point to durable (one grouped fdatasync per
// slab file: SlabFile::sync_to), in one of two orders:
//   - one flush (when the slabs share the index's device: one_flush): the
//     index record goes first, its WAL sync writing the log's pages without
//     flushing the device (rocks_env.h WalSyncWithoutFlush), then the slab
//     fdatasyncs, whose device flush covers the slots and the record at once.
//     A crash before that flush may keep the record and lose a slot: the
//     group's commits therefore put a restart-check key per chunk
//     (IndexOp::until_next_group), deleted once the flush returned (an
//     unsynced write; else by the next group's batch), and the engine
//     verifies the chunks of the keys it finds at open (chunk_engine.h).
//     Groups run one at a time, so only the last group's slots can be missing. A
//     failure after the record was written is sticky: every later commit
//     fails until the engine is reopened and the restart check has settled
//     the group (otherwise its slots could be reused under a live record).
//   - two flushes (otherwise, and for groups without slab writes): slabs
//     first, then the record, so a slot is durable before the entry that
//     points to it. A failed slab sync fails the group and applies nothing.
// A failed index write is sticky in either order: the record may be on the
// disk (or get there with a later WAL write) although the group failed, so
// its slots must stay allocated and its chunks must not be staged again
// until the engine is reopened and rebuilt from what the index holds.
// A commit returns only after the flush that covers it: acknowledged =
// durable.
// Gathering (linger): writers that each wait for their ack come back at
// about the same time. A leader waits until every announced commit (Intent:
// write() announces itself before it writes its slot) is queued, or, when
// the previous group had k > 1 commits, until k are queued; at most as long
// as the previous group took, capped at linger_us_max. Otherwise most of them
// would be left to the group after it (the idea of meta/wal_syncer.h).
// Threading: thread-safe; no thread of its own (the leader is a caller).
// The committer must be the only writer of the DB while it runs (one_flush
// relies on RocksDB syncing no one else's record without a flush).
// Invariants: groups are written one at a time, in queue order; a request is
// completed exactly once, by the leader of the group that took it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/metrics.h"
#include "common/status.h"
#include "storage/io_ring.h"
#include "storage/slab_file.h"

namespace rocksdb {
class DB;
}

namespace weft::storage {

// One key change: a put (value set) or a delete (no value). A put with
// until_next_group is deleted again once the group is durable, or by the
// next group's batch (restart-check keys: they name the chunks of the last
// group written).
struct IndexOp {
  std::string key;
  std::optional<std::string> value;
  bool until_next_group = false;
};

// A slab write that must be durable before the commit: SlabFile::write's ticket.
struct SlabTicket {
  SlabFile* file = nullptr;
  uint64_t ticket = 0;
};

class IndexCommitter {
 public:
  IndexCommitter(rocksdb::DB* db, IoRing* ring, metrics::Histogram* group_size = nullptr,
                 std::chrono::microseconds linger_us_max = std::chrono::microseconds(2000), bool one_flush = false);
  ~IndexCommitter();
  IndexCommitter(const IndexCommitter&) = delete;
  IndexCommitter& operator=(const IndexCommitter&) = delete;

  // Makes `slab` (if any) durable, then applies `ops` atomically with a
  // synced write; returns once that is durable (or failed).
  Result<void> commit(std::vector<IndexOp> ops, std::optional<SlabTicket> slab);

  // Announces a commit that is on its way (its slot is being written): a
  // leader lingers for announced commits too. Scoped; hold it across commit().
  class Intent {
   public:
    explicit Intent(IndexCommitter& c);
    ~Intent();
    Intent(const Intent&) = delete;
    Intent& operator=(const Intent&) = delete;

   private:
    IndexCommitter& c_;
  };

  // The restart-check keys of a durable group are deleted without a sync
  // (retire_restart_keys): the next group's synced batch makes that durable.
  // A target left idle would keep them across a power cut, and take damage
  // found later in those chunks for a lost last group (rolling an
  // acknowledged version back). The engine's space pass calls this: one WAL
  // sync (with its device flush) while no group runs, when such a delete
  // is not yet durable.
  Result<void> sync_retired_keys();
  bool retired_keys_unsynced() const { return retired_unsynced_.load(std::memory_order_acquire); }

  uint64_t groups() const;  // synced index writes made so far
  // The sticky failure (an index write failed, or a group failed after its
  // record was written), if any: every commit fails with it until the engine
  // is reopened.
  std::optional<Status> failure() const;
  bool failed() const { return failed_flag_.load(std::memory_order_acquire); }  // failure() has a value

 private:
  struct Request {
    std::vector<IndexOp> ops;
    std::optional<SlabTicket> slab;
    bool done = false;
    Result<void> result;
  };

  // REQUIRES: mu_ held via lock, leading_ set by the caller.
  void linger(std::unique_lock<std::mutex>& lock);
  Result<void> write_group(const std::vector<Request*>& group);
  // REQUIRES: called by the leader only (no lock needed for last_keys_).
  Result<void> write_index(const std::vector<Request*>& group, bool without_flush);
  void set_failed(Status s);
  // REQUIRES: called by the leader only, after its group's flush returned.
  void retire_restart_keys();

  rocksdb::DB* db_;
  IoRing* ring_;
  metrics::Histogram* group_size_;
  const std::chrono::microseconds linger_us_max_;
  const bool one_flush_;

  // Leader-only state (one leader at a time; handed over under mu_).
  std::vector<std::string> last_keys_;  // until_next_group keys of the last group written
  // A delete of retire_restart_keys is not yet durable (set by the leader,
  // cleared by the next synced index write or sync_retired_keys).
  std::atomic<bool> retired_unsynced_{false};

  mutable std::mutex failed_mu_;   // failure() is asked from other threads (the storage service)
  std::optional<Status> failed_;   // GUARDED_BY(failed_mu_): sticky, see failure()
  std::atomic<bool> failed_flag_{false};  // failed_ is set

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Request*> queue_;  // GUARDED_BY(mu_): waiting for a leader
  bool leading_ = false;        // GUARDED_BY(mu_): a group is being written
  size_t last_group_ = 0;       // GUARDED_BY(mu_)
  size_t intents_ = 0;          // GUARDED_BY(mu_): announced, not yet completed
  std::chrono::microseconds last_group_us_{0};  // GUARDED_BY(mu_)
  uint64_t groups_ = 0;         // GUARDED_BY(mu_)
};

}  // namespace weft::storage
