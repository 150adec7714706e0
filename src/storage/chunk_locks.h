// storage/chunk_locks.h
// Per-chunk asynchronous locks of one target. A chain member holds a chunk's
// lock from staging an update until its successor acknowledged and it
// committed, so updates of one chunk (client writes, forwarded updates and
// resync copies) are applied in one order on every replica, and the head
// assigns versions (committed + 1) without races.
// Waiting never blocks a thread: lock() suspends the coroutine; waiters are
// resumed in FIFO order on their own executors.
// Threading: thread-safe. Invariant: a chunk id is in held_ iff a Guard for
// it exists; its deque holds the waiters.
#pragma once

#include <deque>
#include <functional>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "rpc/task.h"
#include "storage/chunk_id.h"

namespace weft::storage {

class ChunkLocks {
 public:
  class Guard {
   public:
    Guard() = default;
    Guard(ChunkLocks* locks, ChunkId id) : locks_(locks), id_(id) {}
    Guard(Guard&& o) noexcept : locks_(std::exchange(o.locks_, nullptr)), id_(o.id_) {}
    Guard& operator=(Guard&& o) noexcept {
      if (this != &o) {
        release();
        locks_ = std::exchange(o.locks_, nullptr);
        id_ = o.id_;
      }
      return *this;
    }
    ~Guard() { release(); }
    void release() {
      if (locks_) std::exchange(locks_, nullptr)->unlock(id_);
    }

   private:
    ChunkLocks* locks_ = nullptr;
    ChunkId id_;
  };

  Task<Guard> lock(ChunkId id);
  bool is_held(const ChunkId& id) const;
  size_t held() const;
  // The chunks locked now. Locking each of them afterwards waits until every
  // update in progress at the time of the call (and queued before) is done.
  std::vector<ChunkId> held_ids() const;

 private:
  struct Enqueue;
  void unlock(const ChunkId& id);

  mutable std::mutex mu_;
  std::unordered_map<ChunkId, std::deque<std::move_only_function<void()>>, ChunkIdHash> held_;
};

}  // namespace weft::storage
