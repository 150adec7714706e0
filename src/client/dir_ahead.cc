#include "client/dir_ahead.h"

#include <algorithm>
#include <iterator>

#include "meta/permission.h"
#include "weft/client.h"

namespace weft::client {

namespace {
constexpr uint32_t kPageEntries = 512;
}  // namespace

DirAhead::Clock::duration DirAhead::ttl() const {
  // Clamped to a day: 10 * ttl() must fit the clock's duration.
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(std::min(o_.ttl_s, 86400.0)));
}

std::optional<DirAhead::Hit> DirAhead::find(Ino dir, std::string_view name, const Cred& cred, Clock::time_point now) {
  if (!enabled() || meta::is_dot_or_dotdot(name)) return std::nullopt;
  std::lock_guard lock(mu_);
  drop_expired_locked(now);
  auto it = dirs_.find(dir);
  if (it == dirs_.end() || !fresh(it->second, now)) return std::nullopt;
  const Dir& d = it->second;
  auto e = d.entries.find(std::string(name));
  if (e == d.entries.end()) return std::nullopt;
  if (!meta::check_access(d.attr, cred, meta::kAccessExec)) return std::nullopt;  // meta says why
  return Hit{e->second, d.fetched};
}

bool DirAhead::note_miss(Ino dir, Clock::time_point now) {
  if (!enabled()) return false;
  std::lock_guard lock(mu_);
  if (dirs_.size() >= 4 * o_.dirs_max) trim_locked(now);
  Dir& d = dirs_[dir];
  if (d.listing || now < d.retry_after || fresh(d, now)) return false;
  if (d.misses == 0 || now - d.first_miss >= ttl()) {
    d.misses = 0;
    d.first_miss = now;
  }
  if (++d.misses < o_.misses_before_listing) return false;
  d.misses = 0;
  d.listing = true;
  return true;
}

uint64_t DirAhead::generation() const {
  std::lock_guard lock(mu_);
  return generation_;
}

void DirAhead::store(Ino dir, const Inode& dir_attr, std::vector<DirEntry> entries, uint64_t generation,
                     Clock::time_point fetched) {
  std::lock_guard lock(mu_);
  drop_expired_locked(fetched);
  Dir& d = dirs_[dir];
  d.listing = false;
  if (generation != generation_) return;  // changed meanwhile: the listing may be stale already
  unlist_locked(dir, d);
  std::unordered_map<std::string, Inode> kept;
  kept.reserve(entries.size());
  for (auto& e : entries) {
    if (e.attr.ino == 0) continue;  // a page without attributes: that name goes to meta
    kept.emplace(std::move(e.name), std::move(e.attr));
  }
  if (o_.dirs_max == 0 || kept.size() > entries_cap()) return;
  // Room for it (entries, then listings): the oldest listings go.
  while (!by_age_.empty() && (entries_total_ + kept.size() > entries_cap() || by_age_.size() >= o_.dirs_max))
    unlist_oldest_locked();
  d.attr = dir_attr;
  d.entries = std::move(kept);
  d.listed = true;
  d.fetched = fetched;
  by_age_.emplace(fetched, dir);
  entries_total_ += d.entries.size();
}

void DirAhead::unlist_locked(Ino ino, Dir& d) {
  if (!d.listed) return;
  by_age_.erase({d.fetched, ino});
  entries_total_ -= d.entries.size();
  d.listed = false;
  d.entries = {};  // clear() would keep the buckets
}

void DirAhead::unlist_oldest_locked() {
  const Ino ino = by_age_.begin()->second;
  unlist_locked(ino, dirs_.at(ino));
}

void DirAhead::drop_expired_locked(Clock::time_point now) {
  while (!by_age_.empty() && now - by_age_.begin()->first >= ttl()) unlist_oldest_locked();
}

void DirAhead::give_up(Ino dir, Clock::time_point now) {
  std::lock_guard lock(mu_);
  Dir& d = dirs_[dir];
  d.listing = false;
  unlist_locked(dir, d);
  d.retry_after = now + 10 * ttl();
}

void DirAhead::changed() {
  std::lock_guard lock(mu_);
  changed_locked();
}

void DirAhead::sync(uint64_t stamp) {
  std::lock_guard lock(mu_);
  if (stamp == stamp_) return;
  stamp_ = stamp;
  changed_locked();
}

void DirAhead::changed_locked() {
  ++generation_;
  while (!by_age_.empty()) unlist_oldest_locked();
  // Keep the state of directories being listed or given up on; drop the rest.
  std::erase_if(dirs_, [&](const auto& kv) { return !kv.second.listing && kv.second.retry_after == Clock::time_point{}; });
}

void DirAhead::list(Client& client, const Cred& cred, Ino dir) {
  const auto t0 = Clock::now();
  const uint64_t gen = generation();
  auto attr = client.getattr(cred, dir);
  if (!attr || !attr->is_dir()) {
    give_up(dir, t0);
    return;
  }
  std::vector<DirEntry> entries;
  std::string cookie;
  while (true) {
    auto page = client.readdir(cred, dir, cookie, kPageEntries);
    if (!page || entries.size() + page->entries.size() > o_.entries_max) {
      give_up(dir, t0);
      return;
    }
    std::move(page->entries.begin(), page->entries.end(), std::back_inserter(entries));
    if (page->eof || page->cookie.empty()) break;
    cookie = std::move(page->cookie);
  }
  store(dir, *attr, std::move(entries), gen, t0);
}

size_t DirAhead::listings() const {
  std::lock_guard lock(mu_);
  return by_age_.size();
}

size_t DirAhead::entries_total() const {
  std::lock_guard lock(mu_);
  return entries_total_;
}

size_t DirAhead::tracked() const {
  std::lock_guard lock(mu_);
  return dirs_.size();
}

// Drops what is stale (listings are bounded by store()).
void DirAhead::trim_locked(Clock::time_point now) {
  drop_expired_locked(now);
  std::erase_if(dirs_, [&](const auto& kv) {
    const Dir& d = kv.second;
    return !d.listing && !d.listed && now >= d.retry_after && now - d.first_miss >= ttl();
  });
  // Still crowded (many directories touched within the ttl, or given up on):
  // miss counters and give-ups are cheap to lose, so that a trim runs at most
  // once per 3 * dirs_max new directories and the map stays bounded.
  if (dirs_.size() >= 2 * o_.dirs_max)
    std::erase_if(dirs_, [](const auto& kv) { return !kv.second.listing && !kv.second.listed; });
}

}  // namespace weft::client
