#include "mgmt/client_table.h"

#include <algorithm>

#include "common/logging.h"

namespace weft::mgmt {
namespace {

Result<void> check_label(uint64_t id, std::string_view label) {
  if (id == 0) return error(Code::kInvalidArgument, "client heartbeat: client id 0 is reserved");
  if (label.size() > kClientLabelBytesMax)
    return error(Code::kInvalidArgument, "client heartbeat: label of {} bytes exceeds {}", label.size(),
                 kClientLabelBytesMax);
  bool printable = std::all_of(label.begin(), label.end(), [](char c) { return c >= 0x20 && c < 0x7f; });
  if (!printable) return error(Code::kInvalidArgument, "client heartbeat: label must be printable ASCII");
  return {};
}

}  // namespace

ClientTable::ClientTable(LeaseConfig lease, const Clock& clock, metrics::Registry& registry, Duration held_lease)
    : lease_(lease),
      clock_(clock),
      complete_at_(clock.now() + std::max(lease.lease, held_lease) + lease.grace),
      live_(registry.gauge("weft_mgmt_clients", "Clients holding a lease")),
      expired_(registry.counter("weft_mgmt_clients_expired_total", "Clients whose lease ran out")),
      rejected_(registry.counter("weft_mgmt_client_heartbeats_rejected_total", "Malformed or excess client heartbeats")),
      last_expire_(clock.now()) {}

Result<Duration> ClientTable::heartbeat(uint64_t id, std::string_view label) {
  if (auto ok = check_label(id, label); !ok) {
    rejected_.inc();
    return std::unexpected(ok.error());
  }
  TimePoint now = clock_.now();
  std::lock_guard lock(mu_);
  auto it = clients_.find(id);
  if (it == clients_.end()) {
    if (clients_.size() >= kClientsMax) {
      rejected_.inc();
      return error(Code::kOverloaded, "client heartbeat: {} clients already hold a lease", kClientsMax);
    }
    it = clients_.emplace(id, ClientInfo{.id = id, .label = std::string(label), .first_seen = now}).first;
    live_.set(static_cast<int64_t>(clients_.size()));
    WEFT_LOG_DEBUG("mgmt: client {:016x} ({}) registered", id, label);
  }
  it->second.last_heartbeat = now;
  it->second.lease_expiry = now + lease_.lease;
  return lease_.lease;
}

size_t ClientTable::expire(Duration period) {
  TimePoint now = clock_.now();
  std::lock_guard lock(mu_);
  const Duration gap = now - last_expire_;
  last_expire_ = now;
  if (period > Duration::zero() && gap > 2 * period) {
    const Duration excused = gap - period;
    WEFT_LOG_WARN("mgmt: the client lease check ran {} ms after the previous one: {} ms excused from every "
                  "client's heartbeat age",
                  std::chrono::duration_cast<std::chrono::milliseconds>(gap).count(),
                  std::chrono::duration_cast<std::chrono::milliseconds>(excused).count());
    for (auto& [id, c] : clients_) c.last_heartbeat = std::min(c.last_heartbeat + excused, now);
  }
  size_t gone = std::erase_if(clients_, [&](const auto& kv) {
    bool dead = now >= kv.second.last_heartbeat + lease_.lease + lease_.grace;
    if (dead) WEFT_LOG_INFO("mgmt: client {:016x} ({}) missed its lease", kv.first, kv.second.label);
    return dead;
  });
  expired_.inc(gone);
  live_.set(static_cast<int64_t>(clients_.size()));
  return gone;
}

ClientList ClientTable::list(uint64_t after, size_t limit) const {
  ClientList out;
  out.complete = clock_.now() >= complete_at_;
  std::lock_guard lock(mu_);
  auto it = clients_.upper_bound(after);
  for (; it != clients_.end() && out.clients.size() < limit; ++it) out.clients.push_back(it->second);
  out.more = it != clients_.end();
  return out;
}

size_t ClientTable::size() const {
  std::lock_guard lock(mu_);
  return clients_.size();
}

}  // namespace weft::mgmt
