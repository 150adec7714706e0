#include "mgmt/refusal_probe.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>

#include <thread>

#include "rpc/client.h"
#include "rpc/sync_channel.h"

namespace weft::mgmt {

bool probe_refused(const rpc::Endpoint& ep, const RefusalProbeOptions& options) {
  // A name would be resolved with no bound on the time (DNS retries) on
  // mgmtd's blocking pool, and may resolve differently here than for the
  // reporter: only numeric addresses are probed.
  unsigned char buf[sizeof(in6_addr)];
  if (::inet_pton(AF_INET, ep.host.c_str(), buf) != 1 && ::inet_pton(AF_INET6, ep.host.c_str(), buf) != 1) return false;
  rpc::ClientOptions co;
  co.local_socket = false;  // the TCP address is what the reporter found refusing
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
  // One probe at a time in all: they run on mgmtd's blocking pool, which
  // heartbeats need (up to ~1 s each; a dead node's peers report it again).
  if (running_) return false;
  if (auto e = ended_.find(node); e != ended_.end() && now < e->second + quiet_) return false;
  running_ = true;
  return true;
}

void RefusalProbes::end(NodeId node, TimePoint now) {
  std::lock_guard lock(mu_);
  running_ = false;
  std::erase_if(ended_, [&](const auto& kv) { return now >= kv.second + quiet_; });  // begin() ignores them
  ended_[node] = now;
}

void RefusalProbes::forget(NodeId node) {
  std::lock_guard lock(mu_);
  ended_.erase(node);
}

size_t RefusalProbes::tracked() const {
  std::lock_guard lock(mu_);
  return ended_.size();
}

}  // namespace weft::mgmt
