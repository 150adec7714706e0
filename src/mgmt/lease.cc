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
  const int64_t until = valid_until_ns_.load(std::memory_order_relaxed);
  if (until != 0 && clock_.now().time_since_epoch().count() >= until) ++gaps_;  // it had run out: a gap ends
  valid_until_ns_.store(std::max(until, (ticket.sent_at + lease).time_since_epoch().count()),
                        std::memory_order_release);
}

void LeaseKeeper::revoke() {
  std::lock_guard lock(mu_);
  revoked_before_ = next_sequence_;
  if (valid_until_ns_.load(std::memory_order_relaxed) != 0) ++gaps_;
  valid_until_ns_.store(0, std::memory_order_release);
}

uint64_t LeaseKeeper::gaps() const {
  std::lock_guard lock(mu_);
  return gaps_;
}

bool LeaseKeeper::can_serve_writes() const { return clock_.now() < valid_until(); }

Duration LeaseKeeper::remaining() const { return std::max(Duration::zero(), valid_until() - clock_.now()); }

TimePoint LeaseKeeper::valid_until() const {
  return TimePoint(Duration(valid_until_ns_.load(std::memory_order_acquire)));
}

}  // namespace weft::mgmt
