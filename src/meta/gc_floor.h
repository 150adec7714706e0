// meta/gc_floor.h
// Where the scan of the GC queue (keys G<ino>) may start. The GC worker takes
// items from the front of the queue and deletes each key when its chunks are
// gone, so the front of the key range fills with tombstones; a scan from the
// prefix wades through all of them until compaction drops them (after 80,000
// removals a scan took ~10 ms, once per batch of 64). The floor remembers the
// first live key a scan found, so the next scan seeks past the tombstones,
// and that the queue was empty, so an idle worker scans nothing.
// Invariant: no committed G key is below the floor, and none exists at all
// while empty() holds. Commits that queue an inode lower the floor *after*
// they committed (lower()); a scan may raise it only if no such commit
// happened since the scan took its mark (raise()), because the scan's
// snapshot may have missed that commit. Lowering is always safe: the floor
// is a hint for where to start, never a filter.
// Threading: thread-safe.
#pragma once

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <optional>

#include "meta/types.h"

namespace weft::meta {

class GcFloor {
 public:
  struct Mark {
    Ino floor = 0;
    bool empty = false;  // nothing queued: no need to scan
    uint64_t generation = 0;
  };

  // Taken before a scan opens its iterator.
  Mark mark() const {
    std::lock_guard lock(mu_);
    return Mark{floor_, empty_, generation_};
  }

  // A commit queued `ino` (call after the commit returned).
  void lower(Ino ino) {
    std::lock_guard lock(mu_);
    floor_ = empty_ ? ino : std::min(floor_, ino);
    empty_ = false;
    ++generation_;
  }

  // A scan that began at `m` found `first_live` as its first key (nullopt:
  // none from the floor on). Ignored when a commit queued something since.
  void raise(const Mark& m, std::optional<Ino> first_live) {
    std::lock_guard lock(mu_);
    if (generation_ != m.generation) return;
    if (first_live) {
      floor_ = std::max(floor_, *first_live);
    } else {
      empty_ = true;
    }
  }

 private:
  mutable std::mutex mu_;
  Ino floor_ = 0;       // guarded by mu_
  bool empty_ = false;  // guarded by mu_: false at start (the queue on disk is unknown)
  uint64_t generation_ = 0;  // guarded by mu_: lower() calls so far
};

}  // namespace weft::meta
