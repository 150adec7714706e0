#include "client/client_lease.h"

#include <unistd.h>

#include <fmt/format.h>

#include "common/logging.h"
#include "mgmt/service_methods.h"
#include "proto/mgmt.pb.h"

namespace weft::client {
namespace {

constexpr auto kRetryInterval = std::chrono::seconds(1);
constexpr auto kDefaultInterval = std::chrono::seconds(10);  // until a lease is known
constexpr uint32_t kHeartbeatTimeoutMs = 5000;

}  // namespace

ClientLease::ClientLease(rpc::IoPool& io, rpc::Client& rpc, std::vector<rpc::Endpoint> mgmtd, uint64_t client_id,
                         std::string label)
    : rpc_(io, rpc, std::move(mgmtd), kHeartbeatTimeoutMs), client_id_(client_id), label_(std::move(label)) {}

ClientLease::~ClientLease() { stop(); }

std::string ClientLease::default_label(std::string_view name) {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  std::string label = fmt::format("{}:{}:{}", host, getpid(), name);
  // The table takes printable ASCII of bounded length (mgmt/client_table.h).
  for (char& c : label)
    if (c < 0x20 || c >= 0x7f) c = '?';
  if (label.size() > 256) label.resize(256);
  return label;
}

Result<Duration> ClientLease::heartbeat() {
  proto::mgmt::ClientHeartbeatRequest req;
  req.set_client_id(client_id_);
  req.set_label(label_);
  WEFT_TRY(auto reply, rpc_.call<proto::mgmt::ClientHeartbeatReply>(mgmt::kClientHeartbeat, req));
  heartbeats_ok_.fetch_add(1);
  return std::chrono::duration_cast<Duration>(std::chrono::nanoseconds(reply.lease_ns()));
}

Result<void> ClientLease::start() {
  auto first = heartbeat();
  Duration interval = first && *first > Duration::zero() ? *first / 3 : kRetryInterval;
  thread_.emplace(interval, [this] { return renew(); });
  if (!first) return std::unexpected(first.error());
  return {};
}

void ClientLease::stop() {
  if (thread_) thread_->stop();
}

Duration ClientLease::renew() {
  auto granted = heartbeat();
  if (granted) {
    if (failures_in_a_row_ > 0)
      WEFT_LOG_INFO("client {:016x}: lease at mgmtd renewed again after {} failed heartbeats", client_id_,
                    failures_in_a_row_);
    failures_in_a_row_ = 0;
    return *granted > Duration::zero() ? *granted / 3 : Duration(kDefaultInterval);
  }
  // Said aloud (a line a minute): once the lease runs out, meta closes this
  // client's write sessions as a dead client's, and its writes then fail
  // with EBADF; the log is where the user learns why.
  ++failures_in_a_row_;
  if (auto held = failure_log_.admit())
    WEFT_LOG_WARN("client {:016x}: lease heartbeat to mgmtd failed ({} in a row): {}; if this lasts past the lease, "
                  "meta closes this client's files open for writing{}",
                  client_id_, failures_in_a_row_, granted.error(), LogThrottle::held_back(*held));
  return Duration(kRetryInterval);
}

}  // namespace weft::client
