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
// they committed (lower()). A scan's snapshot may lack a commit that lowered
// the floor after the scan took its mark, so raise() never goes above the
// lowest inode lowered since that mark. Lowering is always safe: the floor is
// a hint for where to start, never a filter. A scan from a cursor (past
// items a worker could not finish) starts at the higher of floor and cursor
// and never raises: it saw nothing below its start.
// Threading: thread-safe; scans (mark() ... raise()) one at a time (the
// caller serializes them: mark() starts a new "lowered since" record).
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
  };

  // Taken before a scan opens its iterator.
  Mark mark() {
    std::lock_guard lock(mu_);
    lowered_since_mark_.reset();
    return Mark{floor_, empty_};
  }

  // A commit queued `ino` (call after the commit returned).
  void lower(Ino ino) {
    std::lock_guard lock(mu_);
    floor_ = empty_ ? ino : std::min(floor_, ino);
    empty_ = false;
    lowered_since_mark_ = std::min(lowered_since_mark_.value_or(ino), ino);
  }

  // The scan that took the last mark found `first_live` as its first key
  // (nullopt: none from the floor on).
  void raise(std::optional<Ino> first_live) {
    std::lock_guard lock(mu_);
    if (lowered_since_mark_) {
      // Queued during the scan: maybe not in its snapshot. Start there at the latest.
      floor_ = std::min(first_live.value_or(*lowered_since_mark_), *lowered_since_mark_);
      empty_ = false;
    } else if (first_live) {
      floor_ = *first_live;
    } else {
      empty_ = true;
    }
  }

 private:
  std::mutex mu_;
  Ino floor_ = 0;       // guarded by mu_
  bool empty_ = false;  // guarded by mu_: false at start (the queue on disk is unknown)
  std::optional<Ino> lowered_since_mark_;  // guarded by mu_: lowest inode lower()ed since mark()
};

}  // namespace weft::meta
