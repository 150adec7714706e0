// common/free_space.h
// Keeps a store from filling its filesystem. RocksDB aborts the process
// (Debian's build keeps its assertions) when a WAL append failed for lack of
// space and the log writer is used again, and its flushes and compactions
// need room of their own; a chunk target's index lives beside its slabs. So
// every store keeps `reserve` bytes of its filesystem free and answers
// kNoSpace (ENOSPC) to new data below that, long before RocksDB could meet
// a full disk. Writes that free space (removals) are admitted down to a
// quarter of the reserve, so a full store can still be cleaned up.
// The reserve is at most a quarter of the filesystem's size (a small disk
// keeps most of its room for data).
// Free space is statvfs's f_bavail (what an unprivileged writer may use),
// read again when the last reading is older than `max_age`, and on every
// call once it was within twice the reserve (near the edge, always fresh).
// Threading: thread-safe; admit() is lock-free between readings.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

#include "common/status.h"

namespace weft {

class FreeSpaceGuard {
 public:
  enum class Kind : uint8_t { kGrow, kRelease };

  FreeSpaceGuard(std::string dir, uint64_t reserve_bytes,
                 std::chrono::milliseconds max_age = std::chrono::milliseconds(20));

  // kNoSpace with a message naming the directory when a write of `kind`
  // that takes `bytes` more of the filesystem must be refused (the reserve
  // must stay free after it); kIoError when statvfs fails.
  Result<void> admit(Kind kind, uint64_t bytes = 0);
  // A fresh reading of the bytes available on the filesystem.
  Result<uint64_t> available_bytes();
  // What a kGrow write may still take: the bytes available (a reading at
  // most max_age old; the last one if statvfs fails now) minus the reserve,
  // 0 below it. Several stores on one filesystem each see all of it.
  uint64_t headroom_bytes();
  // The reserve in force: the configured one, capped once the filesystem's size is known.
  uint64_t reserve_bytes() const { return reserve_.load(std::memory_order_relaxed); }
  const std::string& dir() const { return dir_; }
  // The filesystem's id as of the last reading, unique across machines: its
  // statvfs f_fsid (unique on one machine only) hashed with the machine's boot
  // id. 0 before a reading, or where the filesystem reports none.
  uint64_t fs_id() const { return fs_id_.load(std::memory_order_relaxed); }

 private:
  const std::string dir_;
  std::atomic<uint64_t> reserve_;
  const int64_t max_age_ns_;
  std::atomic<uint64_t> last_available_{0};
  std::atomic<int64_t> last_read_ns_{0};  // 0: never read
  std::atomic<uint64_t> fs_id_{0};
};

}  // namespace weft
