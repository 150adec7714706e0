#include "mgmt/lease.h"

#include <algorithm>

namespace weft::mgmt {

HeartbeatTicket LeaseKeeper::begin_heartbeat() {
  std::lock_guard lock(mu_);
  return {.sequence = next_sequence_++, .sent_at = clock_.now()};
}

void LeaseKeeper::on_granted(const HeartbeatTicket& ticket, Duration lease) {
  std::lock_guard lock(mu_);
  if (ticket.sequence < revoked_before_ || lease <= Duration::zero()) return;
  if (valid_until_ != TimePoint{} && clock_.now() >= valid_until_) ++gaps_;  // it had run out: a gap ends
  valid_until_ = std::max(valid_until_, ticket.sent_at + lease);
}

void LeaseKeeper::revoke() {
  std::lock_guard lock(mu_);
  revoked_before_ = next_sequence_;
  if (valid_until_ != TimePoint{}) ++gaps_;
  valid_until_ = TimePoint{};
}

uint64_t LeaseKeeper::gaps() const {
  std::lock_guard lock(mu_);
  return gaps_;
}

bool LeaseKeeper::can_serve_writes() const {
  std::lock_guard lock(mu_);
  return clock_.now() < valid_until_;
}

Duration LeaseKeeper::remaining() const {
  std::lock_guard lock(mu_);
  return std::max(Duration::zero(), valid_until_ - clock_.now());
}

TimePoint LeaseKeeper::valid_until() const {
  std::lock_guard lock(mu_);
  return valid_until_;
}

}  // namespace weft::mgmt
