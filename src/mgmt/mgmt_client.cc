#include "mgmt/mgmt_client.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <optional>

#include <fmt/ranges.h>

#include "common/fault.h"
#include "common/logging.h"
#include "common/durable_file.h"
#include "mgmt/proto_convert.h"
#include "mgmt/service_methods.h"

namespace weft::mgmt {

uint64_t new_incarnation() { return static_cast<uint64_t>(SystemClock::instance().wall_ns()); }

namespace {

Result<void> write_number(const std::string& dir, const char* name, uint64_t number) {
  return replace_file_durably(dir + "/" + name, std::to_string(number) + "\n");
}

}  // namespace

Result<uint64_t> next_incarnation(const std::vector<std::string>& dirs, const Clock& clock) {
  uint64_t last = 0;
  for (const std::string& dir : dirs) {
    const std::string file = dir + "/" + kIncarnationFile;
    std::ifstream in(file);
    if (!in) continue;  // a new directory
    uint64_t recorded = 0;
    if (in >> recorded) last = std::max(last, recorded);
    else WEFT_LOG_WARN("mgmt client: ignoring unreadable incarnation record {}", file);
  }
  const uint64_t wall = static_cast<uint64_t>(clock.wall_ns());
  uint64_t incarnation = std::max(wall, last + 1);
  if (wall <= last)
    WEFT_LOG_WARN("mgmt client: the wall clock is behind the last incarnation recorded ({} ns): using {}", last,
                  incarnation);
  for (const std::string& dir : dirs)
    if (auto written = write_number(dir, kIncarnationFile, incarnation); !written)
      return std::unexpected(written.error().with_context("recording the incarnation"));
  return incarnation;
}

RoutingVersion read_routing_version(const std::vector<std::string>& dirs) {
  RoutingVersion highest = 0;
  for (const std::string& dir : dirs) {
    const std::string file = dir + "/" + kRoutingVersionFile;
    std::ifstream in(file);
    if (!in) continue;
    RoutingVersion recorded = 0;
    if (in >> recorded) highest = std::max(highest, recorded);
    else WEFT_LOG_WARN("mgmt client: ignoring unreadable routing version record {}", file);
  }
  return highest;
}

MgmtClient::MgmtClient(MgmtRpc& rpc, MgmtClientOptions options, const Clock& clock)
    : rpc_(rpc), options_(std::move(options)), lease_(clock) {
  installed_max_ = recorded_ = read_routing_version(options_.state_dirs);
  accept_store_change_ = options_.registration.accept_store_change;
}

MgmtClient::MetaStoreCheck MgmtClient::meta_store_check() const {
  std::lock_guard lock(mu_);
  return meta_store_check_;
}

RoutingVersion MgmtClient::installed_routing_version() const {
  std::lock_guard lock(mu_);
  return installed_max_;
}

void MgmtClient::note_installed(RoutingVersion version) {
  {
    std::lock_guard lock(mu_);
    installed_max_ = std::max(installed_max_, version);
  }
  if (options_.state_dirs.empty()) return;
  std::lock_guard lock(record_mu_);
  if (version <= recorded_) return;
  // Not fatal: a lost record only weakens mgmtd's check after a restart.
  for (const std::string& dir : options_.state_dirs)
    if (auto written = write_number(dir, kRoutingVersionFile, version); !written)
      WEFT_LOG_WARN("mgmt client: recording routing version {} in {}: {}", version, dir, written.error());
  recorded_ = version;
}

void MgmtClient::log_refusal(const Status& s) {
  const int64_t now = SystemClock::instance().wall_ns(), last = refusal_logged_ns_.load();
  if (last != 0 && now - last < 10'000'000'000) return;
  refusal_logged_ns_ = now;
  WEFT_LOG_ERROR("mgmt client {}: mgmtd refuses this server (retrying; the lease runs out meanwhile): {}",
                 options_.registration.address, s.message());
}

MgmtClient::~MgmtClient() { stop(); }

std::string MgmtClient::fence_reason() const {
  std::lock_guard lock(mu_);
  return fence_reason_;
}

void MgmtClient::set_fence_listener(std::function<void(const Status&)> listener) {
  std::lock_guard lock(mu_);
  fence_listener_ = std::move(listener);
}

void MgmtClient::fence(const Status& why) {
  lease_.revoke();
  std::function<void(const Status&)> listener;
  {
    std::lock_guard lock(mu_);
    if (fenced_.exchange(true)) return;
    fence_reason_ = why.message();
    listener = fence_listener_;
  }
  WEFT_LOG_ERROR("mgmt client {}: fenced: {}", options_.registration.address, why.message());
  if (listener) listener(why);
}

Result<void> MgmtClient::register_now() {
  const RegisterRequest& r = options_.registration;
  pb::RegisterRequest req;
  to_proto(r, &req);
  req.set_installed_routing_version(installed_routing_version());
  // The mark now: a re-registration (mgmtd restarted) must not send the one
  // of our start, below what our heartbeats raised mgmtd's record to since.
  if (options_.meta_ids_mark) req.set_meta_ids_issued_below(options_.meta_ids_mark());
  {
    std::lock_guard lock(mu_);
    req.set_accept_store_change(accept_store_change_);
  }
  HeartbeatTicket ticket = lease_.begin_heartbeat();
  auto reply = rpc_.call<pb::RegisterReply>(kRegister, req);
  if (!reply) {
    if (reply.error().code() == Code::kVersionMismatch) log_refusal(reply.error());
    auto why = reply.error().with_context(fmt::format("register {}", r.address));
    if (reply.error().code() == Code::kNotPermitted) fence(why);
    return std::unexpected(why);
  }
  RegisterReply got = from_proto(*reply);
  std::optional<Status> forgotten;  // fenced once the lock is released
  if (got.target_ids.size() != r.targets.size())
    return error(Code::kProtocol, "register {}: {} target ids for {} targets", r.address, got.target_ids.size(),
                 r.targets.size());
  {
    std::lock_guard lock(mu_);
    // Targets keep their ids for the life of the process (a storage server
    // serves under the ids of its first registration). New ones mean mgmtd
    // forgot this node (`weft admin node remove`, or its state was lost):
    // serving under the old ids would take no write, and mgmtd would count
    // the new ones as spares nobody serves. Only a restart joins anew.
    if (!target_ids_.empty() && got.target_ids != target_ids_) {
      auto why = error(Code::kNotPermitted,
                       "register {}: mgmtd forgot this node and gave its targets new ids ({} -> {}); restart this "
                       "server to join as a new node",
                       r.address, fmt::join(target_ids_, ","), fmt::join(got.target_ids, ","));
      forgotten = why.error();
    } else {
      if (last_node_id_ != kInvalidNode && last_node_id_ != got.node_id)
        WEFT_LOG_WARN("mgmt client {}: node id changed {} -> {}", r.address, last_node_id_, got.node_id);
      node_id_ = last_node_id_ = got.node_id;
      target_ids_ = got.target_ids;
      granted_ = got.lease;
      accept_any_version_ = true;
      accept_store_change_ = false;  // the operator's decision was for this start's store
      meta_store_check_ = {
          .checked = got.meta_store_checked, .recorded_mark = got.meta_ids_mark, .serve_after = got.serve_after};
    }
  }
  if (forgotten) {
    fence(*forgotten);
    return std::unexpected(*forgotten);
  }
  registrations_.fetch_add(1);
  WEFT_LOG_INFO("mgmt client {}: registered as node {} (routing version {})", r.address, got.node_id,
                got.routing_version);
  // Routing first, lease second (mgmt/lease.h): never serve writes under a routing
  // mgmtd has replaced. Without routing the lease waits for the next heartbeat.
  if (auto routing = refresh(); !routing) {
    WEFT_LOG_WARN("mgmt client {}: fetching routing after registration: {}", r.address, routing.error());
    return {};
  }
  lease_.on_granted(ticket, got.lease);
  return {};
}

Result<void> MgmtClient::heartbeat_now() {
  HeartbeatRequest hb;
  UsageSource usage;
  {
    std::lock_guard lock(mu_);
    hb.node_id = node_id_;
    if (hb.node_id != kInvalidNode) hb.sync_done.swap(sync_done_);  // else they wait for a heartbeat
    usage = usage_;
  }
  if (hb.node_id == kInvalidNode) return register_now();
  // A heartbeat lost on the way (tests: a server cut off from mgmtd while it keeps serving).
  if (WEFT_FAULT("mgmt_client.heartbeat"))
    return on_heartbeat_error(Status(Code::kUnavailable, "injected fault mgmt_client.heartbeat"),
                              std::move(hb.sync_done));
  hb.incarnation = options_.registration.incarnation;
  hb.installed_routing_version = installed_routing_version();
  if (options_.meta_ids_mark) hb.meta_ids_issued_below = options_.meta_ids_mark();
  hb.meta_store_id = options_.registration.meta_store.store_id;
  if (usage) hb.usage = usage();
  pb::HeartbeatRequest req;
  to_proto(hb, &req);
  HeartbeatTicket ticket = lease_.begin_heartbeat();
  auto reply = rpc_.call<pb::HeartbeatReply>(kHeartbeat, req);
  if (!reply) return on_heartbeat_error(reply.error(), std::move(hb.sync_done));
  HeartbeatReply got = from_proto(*reply);
  RoutingVersion cached = 0;
  bool any_version = false;
  {
    std::lock_guard lock(mu_);
    granted_ = got.lease;
    any_version = accept_any_version_ || !routing_;
  }
  {
    // The version the service serves, not only the one fetched: a hand-over
    // in progress (the routing poll's) finishes first.
    std::lock_guard deliver(deliver_mu_);
    cached = delivered_;
  }
  heartbeats_ok_.fetch_add(1);
  // Routing first, lease second (mgmt/lease.h): a node that mgmtd declared dead
  // meanwhile (its targets are no longer serving) must not take writes under its
  // old routing in between. If the routing cannot be fetched the lease is not
  // extended; the next heartbeat (retry_interval) tries again.
  if (got.routing_version != cached || any_version) {
    if (auto r = refresh(); !r) {
      WEFT_LOG_WARN("mgmt client: routing refresh failed: {}", r.error());
      return std::unexpected(r.error().with_context("heartbeat"));
    }
  }
  lease_.on_granted(ticket, got.lease);
  return {};
}

// Unknown node: re-register now. Replaced: fence. Anything else: retry later
// (the lease runs out on its own if mgmtd stays unreachable).
Result<void> MgmtClient::on_heartbeat_error(const Status& s, std::vector<SyncDoneReport> unsent) {
  {
    std::lock_guard lock(mu_);
    sync_done_.insert(sync_done_.begin(), unsent.begin(), unsent.end());
  }
  if (s.code() == Code::kNotFound) {
    WEFT_LOG_WARN("mgmt client {}: {}; registering again", options_.registration.address, s.message());
    lease_.revoke();
    {
      std::lock_guard lock(mu_);
      node_id_ = kInvalidNode;
    }
    return register_now();
  }
  if (s.code() == Code::kVersionMismatch) log_refusal(s);  // mgmtd is behind: not final
  if (s.code() == Code::kNotPermitted) fence(s);
  return std::unexpected(s.with_context("heartbeat"));
}

Result<std::shared_ptr<const RoutingInfo>> MgmtClient::refresh(uint32_t wait_ms, rpc::CancelToken cancel) {
  pb::GetRoutingRequest req;
  bool force = false;
  {
    std::lock_guard lock(mu_);
    force = accept_any_version_;
    if (routing_ && !force) req.set_known_version(routing_->version);
  }
  req.set_wait_ms(wait_ms);
  auto reply = rpc_.call<pb::GetRoutingReply>(kGetRouting, req, wait_ms + 3000, std::move(cancel));
  if (!reply) return std::unexpected(reply.error().with_context("get routing"));
  if (!reply->unchanged()) {
    WEFT_TRY(RoutingInfo info, from_proto(reply->routing()));
    // A far jump is no version (kRoutingVersionJumpMax): held, it would have
    // this server refuse every later routing as older until it registers
    // again. (After a registration any version is taken: `force`.)
    if (auto held = routing(); !force && held && is_far_version_jump(held->version, info.version))
      return error(Code::kProtocol, "get routing: mgmtd handed out routing version {}, {} past the one held ({})",
                   info.version, info.version - held->version, held->version);
    auto snapshot = std::make_shared<const RoutingInfo>(std::move(info));
    std::lock_guard deliver(deliver_mu_);
    if (install(snapshot, force)) {
      note_installed(snapshot->version);
      RoutingListener listener;
      {
        std::lock_guard lock(mu_);
        listener = listener_;
      }
      if (listener) listener(snapshot);
      delivered_ = snapshot->version;
    }
  }
  return routing();
}

bool MgmtClient::install(std::shared_ptr<const RoutingInfo> routing, bool force) {
  std::lock_guard lock(mu_);
  if (!force && routing_ && routing->version <= routing_->version) return false;
  routing_ = std::move(routing);
  accept_any_version_ = false;
  return true;
}

std::shared_ptr<const RoutingInfo> MgmtClient::routing() const {
  std::lock_guard lock(mu_);
  return routing_;
}

NodeId MgmtClient::node_id() const {
  std::lock_guard lock(mu_);
  return node_id_;
}

std::vector<TargetId> MgmtClient::target_ids() const {
  std::lock_guard lock(mu_);
  return target_ids_;
}

void MgmtClient::set_usage_source(UsageSource source) {
  std::lock_guard lock(mu_);
  usage_ = std::move(source);
}

void MgmtClient::set_routing_listener(RoutingListener listener) {
  std::lock_guard lock(mu_);
  listener_ = std::move(listener);
}

void MgmtClient::report_sync_done(ChainId chain, TargetId target, ChainVersion version) {
  std::lock_guard lock(mu_);
  sync_done_.push_back({.chain_id = chain, .target_id = target, .chain_version = version});
}

Duration MgmtClient::interval() const {
  if (options_.heartbeat_interval > Duration::zero()) return options_.heartbeat_interval;
  std::lock_guard lock(mu_);
  if (granted_ > Duration::zero()) return granted_ / 3;
  return std::chrono::seconds(1);
}

void MgmtClient::start() {
  {
    std::lock_guard lock(loop_mu_);
    stopping_ = false;
  }
  loop_ = std::thread([this] { run(); });
  poll_ = std::thread([this] { poll_routing(); });
}

void MgmtClient::stop() {
  {
    std::lock_guard lock(loop_mu_);
    stopping_ = true;
    if (poll_cancel_) poll_cancel_->cancel();
  }
  loop_cv_.notify_all();
  if (loop_.joinable()) loop_.join();
  if (poll_.joinable()) poll_.join();
}

// Waits at mgmtd for a routing version other than ours. Not before the first
// registration, and not while a re-registration waits for the heartbeat to
// take whatever routing mgmtd has (accept_any_version_): the heartbeat loop
// owns those.
void MgmtClient::poll_routing() {
  std::unique_lock loop_lock(loop_mu_);
  while (!stopping_ && !fenced_) {
    auto cancel = std::make_shared<rpc::CancelSource>();
    poll_cancel_ = cancel;
    loop_lock.unlock();
    bool ready = false;
    {
      std::lock_guard lock(mu_);
      ready = routing_ && !accept_any_version_ && node_id_ != kInvalidNode;
    }
    Duration pause = options_.retry_interval;
    if (ready) {
      const RoutingVersion before = installed_routing_version();
      const auto started = std::chrono::steady_clock::now();
      auto r = refresh(kRoutingLongPollMs, cancel->token());
      if (!r && r.error().code() != Code::kCancelled) WEFT_LOG_DEBUG("mgmt client: routing poll: {}", r.error());
      // An answer at once without a newer version comes from an mgmtd
      // behind ours (it does not wait on a version it does not have): pause,
      // or the poll spins.
      const bool unchanged_at_once = installed_routing_version() == before &&
                                     std::chrono::steady_clock::now() - started < std::chrono::seconds(1);
      if (r) pause = unchanged_at_once ? Duration(std::chrono::seconds(2)) : Duration::zero();
    }
    loop_lock.lock();
    poll_cancel_.reset();
    if (pause > Duration::zero()) loop_cv_.wait_for(loop_lock, pause, [this] { return stopping_; });
  }
}

void MgmtClient::run() {
  std::unique_lock lock(loop_mu_);
  while (!stopping_) {
    lock.unlock();
    Result<void> r = heartbeat_now();
    if (!r) WEFT_LOG_DEBUG("mgmt client {}: {}", options_.registration.address, r.error());
    Duration wait = r ? interval() : std::min(interval(), options_.retry_interval);
    lock.lock();
    if (fenced_) break;
    loop_cv_.wait_for(lock, wait, [this] { return stopping_; });
  }
}

}  // namespace weft::mgmt
