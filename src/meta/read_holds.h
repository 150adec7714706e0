// meta/read_holds.h
// Which inodes clients have open, so that the chunk GC keeps the data of a
// file unlinked (or renamed over) while a reader still reads it: POSIX's "an
// open file outlives its last link" for readers, whose opens write nothing at
// meta (ARCHITECTURE.md: thousands of opens at once stay cheap).
// Instead of a record per open, every client tells meta, at least every
// renew_interval() (hold / 4), the inodes it has open now, in one call; meta
// keeps each client's list in memory for `hold` after its last renewal (a
// client that crashed or lost meta loses its holds then).
// A file queued for chunk GC may be collected (may_collect) only when
//   1. it was queued at least `hold` ago (its queued inode's ctime: the
//      unlink, rename or last close that queued it sets it): a reader that
//      opened it before has renewed since (the margin, 3/4 of hold, is for a
//      renewal's way and a late tick),
//   2. the window opened by restart_window() (at construction, again when
//      meta starts serving and when it regains its lease from mgmtd) is
//      `hold` old: a restarted or cut-off meta learns every reader's holds
//      again before it collects anything, and
//   3. no client's unexpired list names it.
// The margin in 1 holds while a client's renewal interval plus its call
// timeout (both hold/4: client/read_holder.h) plus the age of cached
// attributes an open may be answered from (the mount's attr_timeout, 1 s by
// default; statahead's ttl) stay below hold: a file opened from attributes
// fetched before its unlink is held in time then.
// Not covered: a reader whose renewals fail for `hold` (meta unreachable or
// overloaded); its reads then fail with ESTALE, never return zeros
// (client/file_impl.cc, check_not_removed). Condition 1 reads the wall
// clock: a clock stepped forward by more than the margin may let a file go
// early.
// hold 0: holds are off (nothing kept, every file may go at once).
// Holds are not permission-checked: holding an inode only delays its GC.
// Threading: thread-safe.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <span>
#include <unordered_map>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "meta/types.h"

namespace weft::meta {

class ReadHolds {
 public:
  // Inodes one renewal may name, and all clients together.
  static constexpr size_t kInodesPerClientMax = 65536;
  static constexpr size_t kInodesMax = size_t{1} << 22;

  ReadHolds(const Clock& clock, std::chrono::milliseconds hold);

  std::chrono::milliseconds hold() const { return hold_; }
  // How often clients renew (0: holds are off).
  std::chrono::milliseconds renew_interval() const {
    return hold_.count() == 0 ? hold_ : std::max(hold_ / 4, std::chrono::milliseconds(1));
  }

  // Client `client` (non-zero) has exactly `inos` open now: its previous
  // list is replaced; an empty one releases them all. kTooBig past
  // kInodesPerClientMax, kOverloaded when all holds together would pass
  // kInodesMax (the client's previous list stays, renewed). `seq` (0: none)
  // orders a client's renewals: one numbered at or below the last taken is
  // ignored (a renewal that timed out at the client and reached meta after
  // the next must not bring back its older list).
  Result<void> renew(uint64_t client, std::span<const Ino> inos, uint64_t seq = 0);
  // Whether the GC may remove the chunks of `ino`, queued at `queued_wall_ns`.
  bool may_collect(Ino ino, int64_t queued_wall_ns);
  // Nothing may be collected for `hold` from now (condition 2).
  void restart_window();

  size_t clients() const;
  size_t held() const;  // distinct inodes held

 private:
  struct Holder {
    TimePoint expires;
    std::vector<Ino> inos;
    uint64_t seq = 0;  // of the renewal that set the list
  };
  // A client's last numbered renewal after its list emptied (the holder is
  // gone): a late renewal must not bring the list back. Kept for `hold`.
  struct Released {
    TimePoint expires;
    uint64_t seq;
  };
  void expire_locked(TimePoint now);  // REQUIRES(mu_)
  void drop_locked(const std::vector<Ino>& inos);  // REQUIRES(mu_)

  const Clock& clock_;
  const std::chrono::milliseconds hold_;
  std::atomic<int64_t> window_start_ns_;  // TimePoint of the last restart_window(), in ns
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, Holder> holders_;  // GUARDED_BY(mu_)
  std::unordered_map<uint64_t, Released> released_;  // GUARDED_BY(mu_)
  std::unordered_map<Ino, uint32_t> held_;        // GUARDED_BY(mu_): ino -> holders naming it
  size_t entries_ = 0;                            // GUARDED_BY(mu_): sum of the holders' list sizes
  TimePoint next_expiry_ = TimePoint::max();      // GUARDED_BY(mu_): the earliest holder's
};

}  // namespace weft::meta
