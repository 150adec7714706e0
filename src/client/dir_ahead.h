// client/dir_ahead.h
// Statahead for lookups by name: the mount's LOOKUPs and, when
// ClientOptions::statahead_ttl_s is set, the native client's read-only opens
// by path. A first epoch opens every file of a data set by name, and each
// lookup is a meta round trip. When lookups keep missing in one directory,
// the caller lists it once, with attributes (readdir pages carry them), and
// answers the next lookups in it from that listing.
// Rules, so that an answer from a listing is one a lookup could have given:
//   - A listing is trusted for `ttl_s` (the mount's min(entry, attr) timeout:
//     as long as the kernel trusts what a lookup returns), counted from when
//     its fetch started.
//   - Anything changed through this client (create, unlink, rename, setattr, a
//     writable open or close, ...) drops every listing, and a listing whose
//     fetch overlapped such a change is not stored (the generation).
//     Changes by other clients show after ttl_s, as with the kernel's caches.
//   - Names missing from a listing still go to meta: no negative answers, so
//     a file created elsewhere is found at once.
//   - A caller is answered only if it may search the directory (X on the
//     directory's attributes, fetched with the listing; meta's rule).
//   - A directory with more than `entries_max` entries is not kept (its
//     first pages would seldom hold the name), nor is one whose listing
//     failed; neither is tried again for 10 * ttl_s.
// Memory: a listing is dropped (its entries freed) once older than ttl_s, by
// the next find() or store(); at most `dirs_max` listings and
// max(entries_total_max, entries_max) entries in all are kept, the oldest
// listings going first.
// Threading: thread-safe (one mutex; no call into the client under it).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "meta/types.h"

namespace weft {
class Client;
}

namespace weft::client {

class DirAhead {
 public:
  using Cred = meta::Cred;
  using DirEntry = meta::DirEntry;
  using Ino = meta::Ino;
  using Inode = meta::Inode;
  using Clock = std::chrono::steady_clock;
  struct Options {
    double ttl_s = 1.0;                 // 0: statahead off
    size_t entries_max = 4096;          // larger directories are not listed
    size_t dirs_max = 256;              // listings kept at once
    size_t entries_total_max = 65536;   // entries kept across listings (at least entries_max)
    uint32_t misses_before_listing = 2;  // meta lookups in one directory within ttl_s
  };
  struct Hit {
    Inode inode;
    Clock::time_point fetched;  // when the listing's fetch started
  };

  explicit DirAhead(Options o) : o_(o) {}
  bool enabled() const { return o_.ttl_s > 0; }
  const Options& options() const { return o_; }

  // `name` in `dir` from a fresh listing, if `cred` may search `dir`.
  std::optional<Hit> find(Ino dir, std::string_view name, const Cred& cred, Clock::time_point now);
  // Counts a lookup in `dir` that went to meta. True when the caller should
  // list `dir` now: it then calls store() or give_up() (one lister at a time).
  bool note_miss(Ino dir, Clock::time_point now);
  // Taken before a fetch starts, handed back to store().
  uint64_t generation() const;
  // Keeps `entries` (from readdir with attributes) as `dir`'s listing unless
  // something changed here since `generation`.
  void store(Ino dir, const Inode& dir_attr, std::vector<DirEntry> entries, uint64_t generation,
             Clock::time_point fetched);
  // The listing failed or the directory is too large: not again for a while.
  void give_up(Ino dir, Clock::time_point now);
  // Something changed through this client: every listing goes.
  void changed();
  // changed() when `stamp` (a count of changes made here, e.g. mutations
  // sent) differs from the last one given; compare and drop are one step, so
  // no caller can find a listing after another saw the new stamp.
  void sync(uint64_t stamp);
  // Lists `dir` through `client` as `cred` after note_miss said so (its
  // attributes, then every page) and store()s it, or give_up()s on an error
  // or more than entries_max entries.
  void list(Client& client, const Cred& cred, Ino dir);

  size_t listings() const;       // for tests
  size_t entries_total() const;  // for tests: entries across listings
  size_t tracked() const;        // for tests: directories with any state

 private:
  struct Dir {
    Inode attr;
    std::unordered_map<std::string, Inode> entries;
    bool listed = false;
    Clock::time_point fetched;
    uint32_t misses = 0;
    Clock::time_point first_miss;
    bool listing = false;  // a caller is fetching it
    Clock::time_point retry_after;
  };
  Clock::duration ttl() const;
  bool fresh(const Dir& d, Clock::time_point now) const { return d.listed && now - d.fetched < ttl(); }
  size_t entries_cap() const { return std::max(o_.entries_total_max, o_.entries_max); }
  void trim_locked(Clock::time_point now);
  void changed_locked();
  // Drops `d`'s listing (if any) and frees its entries.
  void unlist_locked(Ino ino, Dir& d);
  void unlist_oldest_locked();
  // Drops the listings older than ttl_s at `now`.
  void drop_expired_locked(Clock::time_point now);

  const Options o_;
  mutable std::mutex mu_;
  uint64_t generation_ = 0;              // GUARDED_BY(mu_)
  uint64_t stamp_ = 0;                   // GUARDED_BY(mu_): the last sync()
  std::unordered_map<Ino, Dir> dirs_;    // GUARDED_BY(mu_)
  // GUARDED_BY(mu_): the listed directories by fetch time, oldest first,
  // and their entries in all.
  std::set<std::pair<Clock::time_point, Ino>> by_age_;
  size_t entries_total_ = 0;
};

}  // namespace weft::client
