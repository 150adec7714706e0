#include "fuse/dir_cursor.h"

#include <algorithm>

namespace weft::fuse {

Result<void> DirCursor::load(uint64_t start, std::string cookie, const Fetch& fetch) {
  // A page may come back empty without being the last one; give up only if
  // the cookie stops moving. Nothing changes until a page with entries (or
  // the last) is in hand: a failure on the way leaves the page in use, and
  // the cookie it goes on from, as they were.
  for (int empty_pages = 0;; ++empty_pages) {
    auto page = fetch(cookie);
    if (!page) return std::unexpected(page.error());
    if (!page->entries.empty() || page->eof) {
      ++pages_fetched_;
      loaded_ = true;
      reload_ = false;
      cur_start_ = start;
      cur_cookie_ = std::move(cookie);
      cur_ = std::move(page->entries);
      cur_eof_ = page->eof;
      cur_next_ = std::move(page->cookie);
      break;
    }
    if (page->cookie == cookie || empty_pages > 1000) {
      return error(Code::kInternal, "readdir returned an empty page whose cookie does not advance");
    }
    cookie = std::move(page->cookie);
  }
  uint64_t next = cur_start_ + cur_.size();
  if (!cur_eof_ && next > starts_.back().first) starts_.emplace_back(next, cur_next_);
  return {};
}

Result<const meta::DirEntry*> DirCursor::at(uint64_t index, const Fetch& fetch) {
  if (reload_) {
    reload_ = false;
    if (index >= cur_start_ && index < cur_start_ + cur_.size()) {
      // Not from the page's start with the old index: entries removed
      // before `index` since would shift the rest left, past it.
      std::string cookie = index == cur_start_ ? cur_cookie_ : cur_[index - 1 - cur_start_].name;
      while (starts_.back().first > index) starts_.pop_back();  // starts_[0] is 0 <= index
      if (starts_.back().first < index) starts_.emplace_back(index, cookie);
      if (auto loaded = load(index, std::move(cookie), fetch); !loaded) {
        reload_ = true;  // the page in hand is still stale
        return std::unexpected(loaded.error());
      }
    }
  }
  for (;;) {
    if (loaded_ && index >= cur_start_) {
      uint64_t end = cur_start_ + cur_.size();
      if (index < end) return &cur_[index - cur_start_];
      if (cur_eof_) return nullptr;
      WEFT_RETURN_IF_ERROR(load(end, cur_next_, fetch));
      continue;
    }
    // Seek: the last page start at or before `index`.
    auto it =
        std::upper_bound(starts_.begin(), starts_.end(), index, [](uint64_t i, const auto& s) { return i < s.first; });
    --it;  // starts_[0] is 0 <= index
    WEFT_RETURN_IF_ERROR(load(it->first, it->second, fetch));
  }
}

}  // namespace weft::fuse
