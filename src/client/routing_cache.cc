#include "client/routing_cache.h"

#include <limits>

#include "common/logging.h"
#include "mgmt/mgmt_rpc.h"
#include "mgmt/proto_convert.h"
#include "mgmt/service_methods.h"
#include "proto/mgmt.pb.h"

namespace weft::client {

Result<rpc::Endpoint> routing_endpoint(const std::string& address) {
  if (auto ok = mgmt::check_address(address); !ok)
    return error(Code::kProtocol, "the routing's node address: {}", ok.error().message());
  return rpc::Endpoint::parse(address);
}

namespace {
constexpr auto kRetryDelay = std::chrono::milliseconds(200);
// Between polls of an mgmtd whose routing is older than ours: it answers such
// a poll at once (our version is not its), so without a pause the poll spins.
constexpr auto kBehindDelay = std::chrono::seconds(2);
}  // namespace

RoutingCache::RoutingCache(rpc::IoPool& io, rpc::Client& rpc, std::vector<rpc::Endpoint> mgmtd)
    : rpc_(io, rpc, std::move(mgmtd)) {}

RoutingCache::~RoutingCache() { stop(); }

Result<void> RoutingCache::start() {
  WEFT_TRY(RoutingPtr first, get_routing(version_.load(), 0, nullptr));
  if (!first) return error(Code::kUnavailable, "mgmtd answered without a routing snapshot");
  thread_ = std::thread([this] { run(); });
  return {};
}

void RoutingCache::stop() {
  {
    std::lock_guard lock(loop_mu_);
    stopping_ = true;
    if (poll_cancel_) poll_cancel_->cancel();
  }
  loop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

RoutingPtr RoutingCache::current() const {
  std::lock_guard lock(mu_);
  return current_;
}

void RoutingCache::request_refresh() {
  {
    std::lock_guard lock(loop_mu_);
    refresh_wanted_ = true;
    // An immediate fetch in flight is left to finish (another follows it):
    // cancelling it too, a burst of requests (every retry asks) kept the
    // routing from ever arriving.
    if (poll_cancel_ && poll_long_) poll_cancel_->cancel();
  }
  loop_cv_.notify_all();
}

Result<RoutingPtr> RoutingCache::fetch_fresh() { return get_routing(0, 0, nullptr); }  // 0: never "unchanged"

Result<RoutingPtr> RoutingCache::get_routing(mgmt::RoutingVersion known, uint32_t wait_ms,
                                             const rpc::CancelToken& cancel) {
  proto::mgmt::GetRoutingRequest req;
  // Holding no snapshot yet, ask for one whatever mgmtd's version: a new
  // mgmtd is at version 0, and "unchanged" would leave current() null.
  constexpr mgmt::RoutingVersion kNoneHeld = std::numeric_limits<mgmt::RoutingVersion>::max();
  req.set_known_version(current() ? known : kNoneHeld);
  req.set_wait_ms(wait_ms);
  WEFT_TRY(auto reply, rpc_.call<proto::mgmt::GetRoutingReply>(mgmt::kGetRouting, req, wait_ms + 3000, cancel));
  fetches_.fetch_add(1);
  if (reply.unchanged()) return current();
  WEFT_TRY(mgmt::RoutingInfo info, mgmt::from_proto(reply.routing()));
  // kNoneHeld is no version mgmtd can hand out: held, it would be sent back
  // as "none held", and as never older than anything it would wedge this
  // client (every later snapshot refused as older) until mgmtd restarts
  // from 1 (hostile_routing_test.cc, VersionsBackwardsAndUint64Max).
  if (info.version == kNoneHeld)
    return error(Code::kProtocol, "mgmtd handed out routing version {}, which no routing has", info.version);
  // Nor a far jump (mgmt::is_far_version_jump), which held would wedge this
  // client the same way.
  if (RoutingPtr held = current(); held && mgmt::is_far_version_jump(held->version, info.version))
    return error(Code::kProtocol, "mgmtd handed out routing version {}, {} past the one held: not a version",
                 info.version, info.version - held->version);
  return install(std::move(info));
}

RoutingPtr RoutingCache::install(mgmt::RoutingInfo info) {
  std::lock_guard lock(mu_);
  // Never go back to an older snapshot, except when mgmtd lost its state and
  // counts again from the start (then every version we hold is from before).
  // The same version is taken: its usage figures are newer.
  if (current_ && info.version < current_->version && info.version > 1) {
    older_refused_.fetch_add(1);
    return current_;
  }
  version_ = info.version;
  current_ = std::make_shared<const mgmt::RoutingInfo>(std::move(info));
  return current_;
}

void RoutingCache::run() {
  while (true) {
    auto cancel = std::make_shared<rpc::CancelSource>();
    uint32_t wait_ms = mgmt::kRoutingLongPollMs;
    {
      std::lock_guard lock(loop_mu_);
      if (stopping_) return;
      if (refresh_wanted_) wait_ms = 0;
      refresh_wanted_ = false;
      poll_cancel_ = cancel;
      poll_long_ = wait_ms > 0;
    }
    const uint64_t refused_before = older_refused_.load();
    const mgmt::RoutingVersion known = version_.load();
    const auto started = std::chrono::steady_clock::now();
    auto r = get_routing(known, wait_ms, cancel->token());
    std::unique_lock lock(loop_mu_);
    poll_cancel_.reset();
    if (stopping_) return;
    if (!r && r.error().code() != Code::kCancelled) {
      WEFT_LOG_DEBUG("routing cache: {}", r.error());
      loop_cv_.wait_for(lock, kRetryDelay, [this] { return stopping_; });
    } else if (r && older_refused_.load() != refused_before) {
      // mgmtd's state is older than what this client saw (restored from a
      // backup?): keep ours, say so, and ask again later, not at once.
      if (auto now = std::chrono::steady_clock::now(); now - last_behind_warning_ > std::chrono::minutes(1)) {
        last_behind_warning_ = now;
        WEFT_LOG_WARN("mgmtd's routing is older than this client's (version {}): kept ours; is mgmtd's state from "
                      "a backup?",
                      known);
      }
      loop_cv_.wait_for(lock, kBehindDelay, [this] { return stopping_ || refresh_wanted_; });
    } else if (r && wait_ms > 0 && version_.load() == known &&
               std::chrono::steady_clock::now() - started < kRetryDelay) {
      // A long poll answered at once with nothing new: an mgmtd that ignores
      // wait_ms (broken, or not mgmtd) would otherwise be polled in a tight
      // loop (thousands of GetRouting a second, hostile_routing_test.cc,
      // EagerUnchangedDoesNotSpin). A refresh request still ends the pause.
      loop_cv_.wait_for(lock, kRetryDelay, [this] { return stopping_ || refresh_wanted_; });
    }
  }
}

}  // namespace weft::client
