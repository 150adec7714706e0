#include "meta/read_holds.h"

#include <algorithm>

namespace weft::meta {

ReadHolds::ReadHolds(const Clock& clock, std::chrono::milliseconds hold)
    : clock_(clock),
      hold_(std::max(hold, std::chrono::milliseconds(0))),
      window_start_ns_(clock.now().time_since_epoch().count()) {}

void ReadHolds::restart_window() { window_start_ns_.store(clock_.now().time_since_epoch().count()); }

Result<void> ReadHolds::renew(uint64_t client, std::span<const Ino> inos, uint64_t seq) {
  if (client == 0) return error(Code::kInvalidArgument, "read holds need a client id (the connection announced none)");
  if (inos.size() > kInodesPerClientMax)
    return error(Code::kTooBig, "read holds of {} inodes in one renewal (max {})", inos.size(), kInodesPerClientMax);
  if (hold_.count() == 0) return {};
  const TimePoint now = clock_.now();
  std::lock_guard lock(mu_);
  expire_locked(now);
  auto it = holders_.find(client);
  if (it != holders_.end() && seq != 0 && seq <= it->second.seq) return {};  // a late one: the list stands
  if (auto r = released_.find(client); r != released_.end()) {
    if (seq != 0 && seq <= r->second.seq) return {};  // a late one: the release stands
    released_.erase(r);
  }
  if (it != holders_.end() && std::ranges::equal(it->second.inos, inos)) {
    // The usual renewal (the same files still open): no per-inode work, on
    // an I/O thread, for a list that may name tens of thousands.
    it->second.expires = now + hold_;
    it->second.seq = seq;
    return {};
  }
  const size_t previous = it == holders_.end() ? 0 : it->second.inos.size();
  if (entries_ - previous + inos.size() > kInodesMax) {
    if (it != holders_.end()) {  // what it held stays held: its reads go on
      it->second.expires = now + hold_;
      next_expiry_ = std::min(next_expiry_, it->second.expires);
    }
    return error(Code::kOverloaded, "meta keeps {} read holds already (max {})", entries_, kInodesMax);
  }
  if (it != holders_.end()) {
    drop_locked(it->second.inos);
    entries_ -= previous;
    holders_.erase(it);
  }
  if (inos.empty()) {
    if (seq != 0) {
      released_[client] = Released{now + hold_, seq};
      next_expiry_ = std::min(next_expiry_, now + hold_);
    }
    return {};
  }
  Holder h{now + hold_, std::vector<Ino>(inos.begin(), inos.end()), seq};
  for (Ino ino : h.inos) ++held_[ino];
  entries_ += h.inos.size();
  next_expiry_ = std::min(next_expiry_, h.expires);
  holders_.emplace(client, std::move(h));
  return {};
}

bool ReadHolds::may_collect(Ino ino, int64_t queued_wall_ns) {
  if (hold_.count() == 0) return true;
  const TimePoint now = clock_.now();
  if (now - TimePoint(Duration(window_start_ns_.load())) < hold_) return false;
  if (clock_.wall_ns() - queued_wall_ns < std::chrono::nanoseconds(hold_).count()) return false;
  std::lock_guard lock(mu_);
  expire_locked(now);
  return !held_.contains(ino);
}

size_t ReadHolds::clients() const {
  std::lock_guard lock(mu_);
  return holders_.size();
}

size_t ReadHolds::held() const {
  std::lock_guard lock(mu_);
  return held_.size();
}

void ReadHolds::expire_locked(TimePoint now) {
  if (now < next_expiry_) return;
  next_expiry_ = TimePoint::max();
  for (auto it = holders_.begin(); it != holders_.end();) {
    if (it->second.expires <= now) {
      drop_locked(it->second.inos);
      entries_ -= it->second.inos.size();
      it = holders_.erase(it);
    } else {
      next_expiry_ = std::min(next_expiry_, it->second.expires);
      ++it;
    }
  }
  for (auto it = released_.begin(); it != released_.end();) {
    if (it->second.expires <= now) {
      it = released_.erase(it);
    } else {
      next_expiry_ = std::min(next_expiry_, it->second.expires);
      ++it;
    }
  }
}

void ReadHolds::drop_locked(const std::vector<Ino>& inos) {
  for (Ino ino : inos) {
    auto it = held_.find(ino);
    if (it != held_.end() && --it->second == 0) held_.erase(it);
  }
}

}  // namespace weft::meta
