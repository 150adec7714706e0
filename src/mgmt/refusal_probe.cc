#include "mgmt/refusal_probe.h"

#include <unistd.h>

#include <thread>

#include "rpc/client.h"
#include "rpc/sync_channel.h"

namespace weft::mgmt {

bool probe_refused(const rpc::Endpoint& ep, const RefusalProbeOptions& options) {
  rpc::ClientOptions co;
  co.connect_timeout_ms = static_cast<uint32_t>(options.connect_timeout.count());
  for (int i = 0; i < options.attempts; ++i) {
    if (i > 0) std::this_thread::sleep_for(options.between);
    bool refused = false;
    auto fd = rpc::connect_blocking(ep, co, &refused);
    if (fd) ::close(*fd);  // taken: something listens there
    if (!refused) return false;
  }
  return options.attempts > 0;
}

bool RefusalProbes::begin(NodeId node, TimePoint now) {
  std::lock_guard lock(mu_);
  Probe& p = probes_[node];
  if (p.running || (p.ended != TimePoint{} && now < p.ended + quiet_)) return false;
  p.running = true;
  return true;
}

void RefusalProbes::end(NodeId node, TimePoint now) {
  std::lock_guard lock(mu_);
  Probe& p = probes_[node];
  p.running = false;
  p.ended = now;
}

}  // namespace weft::mgmt
