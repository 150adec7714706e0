#include "mgmt/service.h"

#include <limits>

#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>

#include "common/fault.h"
#include "common/logging.h"
#include "mgmt/client_list.h"
#include "mgmt/proto_convert.h"
#include "mgmt/service_methods.h"
#include "rpc/frame.h"
#include "rpc/service.h"

namespace weft::mgmt {
namespace {

// A GetRouting or Status reply carries the whole routing info in its body.
static_assert(kRoutingBytesMax <= rpc::FrameLimits{}.body_max / 2);

using namespace std::chrono_literals;

Result<pb::RegisterReply> do_register(ClusterState& state, const pb::RegisterRequest& req) {
  WEFT_TRY(RegisterRequest request, from_proto(req));
  WEFT_TRY(RegisterReply reply, state.register_node(request));
  pb::RegisterReply out;
  to_proto(reply, &out);
  return out;
}

Result<pb::HeartbeatReply> do_heartbeat(ClusterState& state, const pb::HeartbeatRequest& req) {
  WEFT_TRY(HeartbeatReply reply, state.heartbeat(from_proto(req)));
  pb::HeartbeatReply out;
  to_proto(reply, &out);
  return out;
}

// Appends table `id` and its chains.
template <class Reply>
void add_table(const RoutingInfo& routing, const ChainTableInfo& table, Reply& out, pb::ChainTable* table_out) {
  to_proto(table, table_out);
  for (ChainId c : table.chains) {
    auto it = routing.chains.find(c);
    if (it != routing.chains.end()) to_proto(it->second, out.add_chains());
  }
}

Result<pb::CreateChainTableReply> do_create_table(ClusterState& state, const pb::CreateChainTableRequest& req) {
  ChainTableSpec spec{.replicas = req.replicas(), .chains_per_target = req.chains_per_target()};
  WEFT_TRY(ChainTableId id, state.create_chain_table(spec));
  RoutingInfo routing = state.routing();
  auto it = routing.tables.find(id);
  if (it == routing.tables.end()) return error(Code::kInternal, "mgmt: chain table {} vanished", id);
  pb::CreateChainTableReply out;
  add_table(routing, it->second, out, out.mutable_table());
  out.set_routing_version(routing.version);
  WEFT_LOG_INFO("mgmt: created chain table {} ({} chains of {} replicas)", id, it->second.chains.size(),
                spec.replicas);
  return out;
}

Result<pb::ReplaceTargetReply> do_replace_target(ClusterState& state, const pb::ReplaceTargetRequest& req) {
  WEFT_TRY(std::vector<ChainId> changed, state.replace_target(req.old_target(), req.new_target(), req.force()));
  RoutingInfo routing = state.routing();
  pb::ReplaceTargetReply out;
  for (ChainId c : changed)
    if (auto it = routing.chains.find(c); it != routing.chains.end()) to_proto(it->second, out.add_chains());
  out.set_routing_version(routing.version);
  WEFT_LOG_INFO("mgmt: target {} replaced by target {} in {} chain(s)", req.old_target(), req.new_target(),
                changed.size());
  return out;
}

Result<pb::PromoteTargetReply> do_promote_target(ClusterState& state, const pb::PromoteTargetRequest& req) {
  // The wire field is wider than a chain id: not cut to another chain's.
  if (req.chain() > std::numeric_limits<ChainId>::max())
    return error(Code::kNotFound, "promote target {}: no chain {}", req.target(), req.chain());
  WEFT_RETURN_IF_ERROR(state.promote_target(req.chain(), req.target(), req.force()));
  RoutingInfo routing = state.routing();
  pb::PromoteTargetReply out;
  if (auto it = routing.chains.find(req.chain()); it != routing.chains.end()) to_proto(it->second, out.mutable_chain());
  out.set_routing_version(routing.version);
  return out;
}

Result<pb::RemoveNodeReply> do_remove_node(ClusterState& state, const pb::RemoveNodeRequest& req) {
  WEFT_RETURN_IF_ERROR(state.remove_node(req.node_id()));
  pb::RemoveNodeReply out;
  out.set_routing_version(state.routing_version());
  WEFT_LOG_INFO("mgmt: node {} removed", req.node_id());
  return out;
}

pb::ListChainTablesReply do_list_tables(const ClusterState& state) {
  RoutingInfo routing = state.routing();
  pb::ListChainTablesReply out;
  for (const auto& [id, table] : routing.tables) add_table(routing, table, out, out.add_tables());
  out.set_routing_version(routing.version);
  return out;
}

}  // namespace

Result<MgmtdConfig> MgmtdConfig::from(const Config& config) {
  MgmtdConfig c;
  WEFT_TRY(Config section, config.has("mgmtd") ? config.table("mgmtd") : Config::parse("", config.source()));
  WEFT_TRY(c.data_dir, section.get_string("data_dir", "./weft-data/mgmtd"));
  if (c.data_dir.empty()) return error(Code::kConfig, "{}: key 'mgmtd.data_dir' must not be empty", config.source());
  WEFT_TRY(int64_t lease_ms, section.get_int_in("lease_ms", 3000, 100, 3'600'000));
  WEFT_TRY(int64_t grace_ms, section.get_int_in("grace_ms", 1000, 0, 3'600'000));
  WEFT_TRY(int64_t tick_ms, section.get_int_in("tick_ms", 200, 10, 60'000));
  WEFT_TRY(int64_t client_lease_ms, section.get_int_in("client_lease_ms", 30'000, 300, 3'600'000));
  WEFT_TRY(int64_t client_grace_ms, section.get_int_in("client_grace_ms", 10'000, 0, 3'600'000));
  WEFT_TRY(c.service.refusal_probe.enabled, section.get_bool("probe_refusals", true));
  c.cluster.db_dir = c.data_dir + "/state";
  c.cluster.lease = {.lease = std::chrono::milliseconds(lease_ms), .grace = std::chrono::milliseconds(grace_ms)};
  c.service.tick = std::chrono::milliseconds(tick_ms);
  c.service.client_lease = {.lease = std::chrono::milliseconds(client_lease_ms),
                            .grace = std::chrono::milliseconds(client_grace_ms)};
  c.cluster.client_lease = c.service.client_lease;  // persisted with the server lease (GrantedLeases)
  return c;
}

MgmtService::MgmtService(ClusterState& state, const Clock& clock, MgmtServiceOptions options,
                         metrics::Registry& registry)
    : state_(state),
      clock_(clock),
      options_(options),
      clients_(options.client_lease, clock, registry, state.leases_at_open().client),
      tick_errors_(registry.counter("weft_mgmt_tick_errors_total", "Failed lease checks (persisting failed)")),
      long_polls_(registry.counter("weft_mgmt_routing_long_polls_total", "GetRouting calls that waited")),
      registry_(registry),
      probes_(options.refusal_probe.quiet) {}

MgmtService::~MgmtService() { stop(); }

void MgmtService::register_methods(rpc::Server& server) {
  rpc::add_blocking_method<pb::RegisterRequest, pb::RegisterReply>(
      server, kRegister, "mgmt.register",
      [this](const pb::RegisterRequest& req, rpc::ServerCall&) { return do_register(state_, req); });
  rpc::add_blocking_method<pb::HeartbeatRequest, pb::HeartbeatReply>(
      server, kHeartbeat, "mgmt.heartbeat",
      [this](const pb::HeartbeatRequest& req, rpc::ServerCall&) { return do_heartbeat(state_, req); });
  rpc::add_async_method<pb::GetRoutingRequest, pb::GetRoutingReply>(
      server, kGetRouting, "mgmt.get_routing",
      [this](const pb::GetRoutingRequest& req, rpc::ServerCall&) { return get_routing(req); });
  rpc::add_blocking_method<pb::CreateChainTableRequest, pb::CreateChainTableReply>(
      server, kCreateChainTable, "mgmt.create_chain_table",
      [this](const pb::CreateChainTableRequest& req, rpc::ServerCall&) { return do_create_table(state_, req); });
  rpc::add_blocking_method<pb::ReplaceTargetRequest, pb::ReplaceTargetReply>(
      server, kReplaceTarget, "mgmt.replace_target",
      [this](const pb::ReplaceTargetRequest& req, rpc::ServerCall&) { return do_replace_target(state_, req); });
  rpc::add_blocking_method<pb::PromoteTargetRequest, pb::PromoteTargetReply>(
      server, kPromoteTarget, "mgmt.promote_target",
      [this](const pb::PromoteTargetRequest& req, rpc::ServerCall&) { return do_promote_target(state_, req); });
  rpc::add_blocking_method<pb::RemoveNodeRequest, pb::RemoveNodeReply>(
      server, kRemoveNode, "mgmt.remove_node",
      [this](const pb::RemoveNodeRequest& req, rpc::ServerCall&) -> Result<pb::RemoveNodeReply> {
        WEFT_TRY(pb::RemoveNodeReply out, do_remove_node(state_, req));
        probes_.forget(req.node_id());
        return out;
      });
  rpc::add_blocking_method<pb::ReportRefusalRequest, pb::ReportRefusalReply>(
      server, kReportRefusal, "mgmt.report_refusal",
      [this](const pb::ReportRefusalRequest& req, rpc::ServerCall&) { return report_refusal(req); });
  rpc::add_blocking_method<pb::ListChainTablesRequest, pb::ListChainTablesReply>(
      server, kListChainTables, "mgmt.list_chain_tables",
      [this](const pb::ListChainTablesRequest&, rpc::ServerCall&) -> Result<pb::ListChainTablesReply> {
        return do_list_tables(state_);
      });
  rpc::add_blocking_method<pb::StatusRequest, pb::StatusReply>(
      server, kStatus, "mgmt.status", [this](const pb::StatusRequest&, rpc::ServerCall&) -> Result<pb::StatusReply> {
        pb::StatusReply out;
        to_proto(state_.routing(), out.mutable_routing());
        ClientList page = clients_.list(0, kClientsPerPage);
        for (const ClientInfo& c : page.clients) to_proto(c, out.add_clients());
        out.set_clients_total(clients_.size());
        out.set_now_ns(to_ns(clock_.now()));
        out.set_behind(state_.behind());
        const MetaStoreRecord store = state_.meta_store();
        out.set_meta_store_id(store.store_id);
        out.set_meta_ids_issued_below(store.ids_issued_below);
        return out;
      });
  // Client leases: a mutex and a hash map, cheap enough for the blocking pool
  // never to matter, and kept off ClusterState's lock (which RocksDB writes hold).
  rpc::add_blocking_method<pb::ClientHeartbeatRequest, pb::ClientHeartbeatReply>(
      server, kClientHeartbeat, "mgmt.client_heartbeat",
      [this](const pb::ClientHeartbeatRequest& req, rpc::ServerCall&) -> Result<pb::ClientHeartbeatReply> {
        WEFT_TRY(Duration lease, clients_.heartbeat(req.client_id(), req.label()));
        pb::ClientHeartbeatReply out;
        out.set_lease_ns(std::chrono::duration_cast<std::chrono::nanoseconds>(lease).count());
        return out;
      });
  rpc::add_blocking_method<pb::ListClientsRequest, pb::ListClientsReply>(
      server, kListClients, "mgmt.list_clients",
      [this](const pb::ListClientsRequest& req, rpc::ServerCall&) -> Result<pb::ListClientsReply> {
        ClientList list = clients_.list(req.after_id(), req.ids_only() ? kClientIdsPerPage : kClientsPerPage);
        pb::ListClientsReply out;
        for (const ClientInfo& c : list.clients) {
          if (req.ids_only()) out.add_clients()->set_id(c.id);
          else to_proto(c, out.add_clients());
        }
        out.set_tracked(list.complete);
        out.set_more(list.more);
        out.set_complete(list.complete && !list.more);
        out.set_now_ns(to_ns(clock_.now()));
        return out;
      });
}

std::shared_ptr<const MgmtService::Snapshot> MgmtService::snapshot() {
  std::lock_guard lock(snapshot_mu_);
  // The generation is read before the copy: a report landing in between
  // leaves the copy newer than its stamp, so the next call rebuilds it.
  uint64_t generation = state_.usage_generation();
  if (!snapshot_ || snapshot_->version != state_.routing_version() || snapshot_->usage_generation != generation) {
    auto next = std::make_shared<Snapshot>();
    next->usage_generation = generation;
    RoutingInfo routing = state_.routing();
    next->version = routing.version;
    to_proto(routing, &next->routing);
    snapshot_ = std::move(next);
  }
  return snapshot_;
}

// 1. Unknown or older version: answer with the current snapshot.
// 2. Otherwise wait (timer polls of the version, no thread held) until it
//    changes, wait_ms passes, or the service stops; answer "unchanged" then.
Task<Result<pb::GetRoutingReply>> MgmtService::get_routing(pb::GetRoutingRequest req) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(std::min(req.wait_ms(), kRoutingWaitMsMax));
  bool waited = false;
  while (state_.routing_version() == req.known_version() && !stopping_.load() &&
         std::chrono::steady_clock::now() < deadline) {
    if (!waited) long_polls_.inc();
    waited = true;
    asio::steady_timer timer(co_await asio::this_coro::executor, options_.routing_poll);
    co_await timer.async_wait(use_nothrow);
  }
  if (WEFT_FAULT("mgmt.get_routing.slow")) {  // tests: a loaded mgmtd, a large snapshot
    asio::steady_timer timer(co_await asio::this_coro::executor, std::chrono::milliseconds(5));
    co_await timer.async_wait(use_nothrow);
  }
  pb::GetRoutingReply reply;
  RoutingVersion current = state_.routing_version();
  if (current == req.known_version()) {
    reply.set_unchanged(true);
    reply.set_version(current);
    co_return reply;
  }
  std::shared_ptr<const Snapshot> snap = snapshot();
  reply.set_version(snap->version);
  *reply.mutable_routing() = snap->routing;
  co_return reply;
}

Result<pb::ReportRefusalReply> MgmtService::report_refusal(const pb::ReportRefusalRequest& req) {
  pb::ReportRefusalReply out;
  auto answer = [&](const char* outcome) {
    registry_.counter("weft_mgmt_refusal_reports_total", "Reports of a storage server refusing connections",
                      {{"outcome", outcome}})
        .inc();
    out.set_outcome(outcome);
    return out;
  };
  if (!options_.refusal_probe.enabled) return answer("off");
  WEFT_TRY(rpc::Endpoint reported, rpc::Endpoint::parse(req.address()));
  // A node registers its address as its config spells it ("::1:7000"); peers
  // report it as they print it ("[::1]:7000"). The probe goes where peers connect.
  auto node = state_.storage_node_up_at([&](const std::string& registered) {
    auto at = rpc::Endpoint::parse(registered);
    return at && at->same_address(reported);
  });
  if (!node) return answer("not-up");
  WEFT_TRY(rpc::Endpoint ep, rpc::Endpoint::parse(node->address));
  if (!probes_.begin(node->id, clock_.now())) return answer("probing");
  const TimePoint started = clock_.now();
  const bool refused = probe_refused(ep, options_.refusal_probe);
  probes_.end(node->id, clock_.now());
  if (!refused) return answer("listening");
  WEFT_TRY(bool declared, state_.declare_refusing(node->id, node->incarnation, started));
  return answer(declared ? "declared" : "kept");
}

void MgmtService::start() {
  stopping_ = false;
  ticker_ = std::thread([this] { tick_loop(); });
}

void MgmtService::stop() {
  {
    std::lock_guard lock(tick_mu_);
    stopping_ = true;
  }
  tick_cv_.notify_all();
  if (ticker_.joinable()) ticker_.join();
}

void MgmtService::tick_loop() {
  std::unique_lock lock(tick_mu_);
  while (!stopping_) {
    tick_cv_.wait_for(lock, options_.tick, [this] { return stopping_.load(); });
    if (stopping_) break;
    lock.unlock();
    clients_.expire(options_.tick);
    auto dead = state_.tick(options_.tick);
    if (!dead) {
      tick_errors_.inc();
      WEFT_LOG_ERROR("mgmt: lease check failed: {}", dead.error());
    }
    lock.lock();
  }
}

}  // namespace weft::mgmt
