// fuse/dir_cursor.h
// Maps FUSE directory offsets (entry indexes) to Weft readdir cookies.
// Weft's readdir hands back a cookie that continues after the last entry of
// a page: that entry's name (meta resumes strictly after a name, whether or
// not it still exists), so the name of any entry continues after it. FUSE
// asks for "entries from offset N". A cursor remembers the cookie that
// starts every page seen so far (memory: one string per page, not per
// entry) and keeps the current page, so a sequential listing costs one
// readdir call per page and a seek back re-reads from the nearest page start.
// Threading: not thread-safe; one per open directory, used under its lock.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "meta/types.h"

namespace weft::fuse {

class DirCursor {
 public:
  using Fetch = std::function<Result<meta::DirPage>(std::string_view cookie)>;

  // The entry at `index` (0-based, Weft entries only: no "." or ".."), or
  // nullptr past the end. The pointer is valid until the next call.
  Result<const meta::DirEntry*> at(uint64_t index, const Fetch& fetch);

  // The next at() that falls in the current page fetches the rest of the
  // listing again first: its entries' attributes may be stale. The fetch
  // continues after the entry before the index asked for (the last one
  // handed out, in a sequential listing), which keeps its index: names
  // added or removed before it since shift nothing, so an entry present
  // throughout the listing is still returned exactly once. Page starts past
  // that index are forgotten (a seek there re-reads from before it).
  void reload_page() { reload_ = loaded_; }

  // Whether at(index) is answered from the page in hand, without a fetch.
  // A reply that stops where this turns false never spans two pages, so the
  // kernel's next request (from the first entry its caller did not take)
  // falls in the page in hand or starts the next one, and is not counted
  // from an older page's start, which entries removed since would shift.
  bool holds(uint64_t index) const {
    if (!loaded_ || reload_ || index < cur_start_) return false;
    return index < cur_start_ + cur_.size() || cur_eof_;
  }

  // Pages loaded so far (a load that failed on the way counts none).
  size_t pages_fetched() const { return pages_fetched_; }

 private:
  Result<void> load(uint64_t start, std::string cookie, const Fetch& fetch);

  std::vector<std::pair<uint64_t, std::string>> starts_{{0, std::string()}};  // ascending
  bool loaded_ = false;
  uint64_t cur_start_ = 0;
  std::string cur_cookie_;  // what the current page was fetched with
  bool reload_ = false;
  std::vector<meta::DirEntry> cur_;
  std::string cur_next_;
  bool cur_eof_ = false;
  size_t pages_fetched_ = 0;
};

}  // namespace weft::fuse
