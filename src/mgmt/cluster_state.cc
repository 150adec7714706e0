#include "mgmt/cluster_state.h"

#include <algorithm>
#include <map>

#include "common/logging.h"
#include "mgmt/cluster_ops.h"
#include "mgmt/service_methods.h"

namespace weft::mgmt {

// Gauges describing the state; refreshed after every change and every tick.
class ClusterState::Metrics {
 public:
  explicit Metrics(metrics::Registry& r)
      : registry_(r),
        routing_version_(r.gauge("weft_mgmt_routing_version", "Current routing version")),
        heartbeats_(r.counter("weft_mgmt_heartbeats_total", "Heartbeats accepted")),
        registrations_(r.counter("weft_mgmt_registrations_total", "Registrations accepted")),
        declared_dead_(r.counter("weft_mgmt_nodes_declared_dead_total", "Nodes whose lease expired")),
        declared_refusing_(r.counter("weft_mgmt_nodes_declared_refusing_total",
                                     "Nodes declared dead before their lease ran out: nothing listened at their "
                                     "address (mgmtd's probe refused)")),
        ignored_reports_(r.counter("weft_mgmt_ignored_reports_total", "Stale or foreign heartbeat reports")),
        behind_(r.gauge("weft_mgmt_behind",
                        "1: a server reported a routing version above mgmtd's (its state is older than the "
                        "cluster's); mgmtd refuses servers")),
        refused_(r.counter("weft_mgmt_refused_behind_total", "Registrations and heartbeats refused while behind")) {
    for (TargetState s : {TargetState::kServing, TargetState::kSyncing, TargetState::kOffline,
                          TargetState::kLastServing})
      targets_[s] = &r.gauge("weft_mgmt_targets", "Targets per state", {{"state", std::string(to_string(s))}});
    for (NodeState s : {NodeState::kUp, NodeState::kDown})
      nodes_[s] = &r.gauge("weft_mgmt_nodes", "Nodes per state", {{"state", std::string(to_string(s))}});
  }

  void refresh(const PersistedState& state, TimePoint now) {
    routing_version_.set(static_cast<int64_t>(state.routing.version));
    std::map<TargetState, int64_t> per_target;
    for (const auto& [id, t] : state.routing.targets) ++per_target[t.state];
    for (auto& [s, g] : targets_) g->set(per_target[s]);
    std::map<NodeState, int64_t> per_node;
    for (const auto& [id, n] : state.routing.nodes) {
      ++per_node[n.state];
      auto age = std::chrono::duration_cast<std::chrono::milliseconds>(now - n.last_heartbeat);
      labelled(heartbeat_age_, "weft_mgmt_heartbeat_age_ms", "Time since the node's last heartbeat", "node", id)
          .set(age.count());
    }
    for (auto it = heartbeat_age_.begin(); it != heartbeat_age_.end();) {  // removed nodes' series go
      if (state.routing.nodes.contains(it->first)) {
        ++it;
        continue;
      }
      const NodeId id = it->first;
      it = heartbeat_age_.erase(it);  // the pointer first: remove() destroys the gauge
      registry_.remove("weft_mgmt_heartbeat_age_ms", {{"node", std::to_string(id)}});
    }
    for (auto& [s, g] : nodes_) g->set(per_node[s]);
    for (const auto& [id, c] : state.routing.chains)
      labelled(chain_version_, "weft_mgmt_chain_version", "Version of each chain", "chain", id)
          .set(static_cast<int64_t>(c.version));
  }

  metrics::Counter& heartbeats() { return heartbeats_; }
  metrics::Counter& registrations() { return registrations_; }
  metrics::Counter& declared_dead() { return declared_dead_; }
  metrics::Counter& declared_refusing() { return declared_refusing_; }
  metrics::Counter& ignored_reports() { return ignored_reports_; }
  metrics::Gauge& behind() { return behind_; }
  metrics::Counter& refused() { return refused_; }
  size_t heartbeat_series() const { return heartbeat_age_.size(); }

 private:
  template <class Id>
  metrics::Gauge& labelled(std::map<Id, metrics::Gauge*>& cache, const char* name, const char* help,
                           const char* label, Id id) {
    auto [it, added] = cache.try_emplace(id, nullptr);
    if (added) it->second = &registry_.gauge(name, help, {{label, std::to_string(id)}});
    return *it->second;
  }

  metrics::Registry& registry_;
  metrics::Gauge& routing_version_;
  metrics::Counter& heartbeats_;
  metrics::Counter& registrations_;
  metrics::Counter& declared_dead_;
  metrics::Counter& declared_refusing_;
  metrics::Counter& ignored_reports_;
  metrics::Gauge& behind_;
  metrics::Counter& refused_;
  std::map<TargetState, metrics::Gauge*> targets_;
  std::map<NodeState, metrics::Gauge*> nodes_;
  std::map<NodeId, metrics::Gauge*> heartbeat_age_;
  std::map<ChainId, metrics::Gauge*> chain_version_;
};

Result<ClusterOptions> cluster_options_from_config(const Config& table) {
  ClusterOptions o;
  WEFT_TRY(int64_t lease_ms, table.get_int_in("lease_ms", 10'000, 100, 3'600'000));
  WEFT_TRY(int64_t grace_ms, table.get_int_in("grace_ms", 5'000, 0, 3'600'000));
  WEFT_TRY(o.db_dir, table.get_string("db_dir", ""));
  o.lease = {.lease = std::chrono::milliseconds(lease_ms), .grace = std::chrono::milliseconds(grace_ms)};
  return o;
}

ClusterState::ClusterState(ClusterOptions options, const Clock& clock, metrics::Registry& registry)
    : options_(std::move(options)), clock_(clock), metrics_(std::make_unique<Metrics>(registry)) {}

ClusterState::~ClusterState() = default;

Result<std::unique_ptr<ClusterState>> ClusterState::open(ClusterOptions options, const Clock& clock,
                                                         metrics::Registry& registry) {
  if (options.lease.lease <= Duration::zero() || options.lease.grace < Duration::zero())
    return error(Code::kInvalidArgument, "mgmt: lease must be > 0 and grace >= 0");
  std::unique_ptr<ClusterState> state(new ClusterState(std::move(options), clock, registry));
  WEFT_RETURN_IF_ERROR(state->load());
  return state;
}

Result<void> ClusterState::load() {
  std::lock_guard lock(mu_);
  if (!options_.db_dir.empty()) {
    WEFT_TRY(store_, StateStore::open(options_.db_dir));
    WEFT_TRY(state_, store_->load());
    WEFT_RETURN_IF_ERROR(validate_loaded(state_));
  }
  state_.routing.meta_store_id = state_.meta_store.store_id;  // routing shows the record (finalize keeps it so)
  // Leases restart with mgmtd: every node gets a full lease from now, of the
  // longest lease it may hold (one granted before the restart may be longer).
  TimePoint now = clock_.now();
  leases_at_open_ = state_.leases;
  const GrantedLeases held{.server = std::max(state_.leases.server, options_.lease.lease),
                           .client = std::max(state_.leases.client, options_.client_lease.lease)};
  for (auto& [id, node] : state_.routing.nodes) {
    node.last_heartbeat = now;
    node.lease_expiry = now + held.server;
  }
  last_tick_ = now;
  leases_lowered_at_ = now + std::max(held.server + options_.lease.grace, held.client + options_.client_lease.grace);
  reconcile(state_);
  if (!(held == state_.leases)) {  // recorded before anything is granted under the longer lease
    PersistedState next = state_;
    next.leases = held;
    WEFT_RETURN_IF_ERROR(commit(std::move(next)));
  }
  metrics_->refresh(state_, now);
  return {};
}

template <class Fn>
auto ClusterState::mutate(Fn&& fn) -> decltype(fn(std::declval<PersistedState&>())) {
  PersistedState next = state_;
  auto result = fn(next);
  if (!result) return result;
  reconcile(next);
  WEFT_RETURN_IF_ERROR(commit(std::move(next)));
  return result;
}

Result<void> ClusterState::commit(PersistedState next) {
  StoreBatch batch = finalize(state_, next);
  if (store_ && !batch.empty()) {
    auto written = store_->write(batch);
    if (!written) {
      WEFT_LOG_ERROR("mgmt: persisting a state change failed, change dropped: {}", written.error());
      return written;
    }
  }
  if (next.routing.version != state_.routing.version)
    WEFT_LOG_INFO("mgmt: routing version {} -> {}", state_.routing.version, next.routing.version);
  state_ = std::move(next);
  metrics_->refresh(state_, clock_.now());
  return {};
}

Result<void> ClusterState::refuse_if_behind_locked() const {
  if (behind_.empty()) return {};
  return error(Code::kVersionMismatch, "{}", behind_);
}

Result<void> ClusterState::check_reported_locked(RoutingVersion reported, const std::string& who) {
  const RoutingVersion own = state_.routing.version;
  // Garbage, not a history: no cluster makes 2^32 routing changes (raising
  // the versions past it would also wrap them back to 0).
  if (is_far_version_jump(own, reported))
    return error(Code::kInvalidArgument, "{} reports routing version {}, {} past mgmtd's {}: not a version", who,
                 reported, reported - own, own);
  if (reported > own && options_.accept_older_state) {
    // Every routing version bump moves a chain's version by at most one: the
    // chains end above any version the cluster used for them since our state.
    const RoutingVersion gap = reported - own;
    PersistedState next = state_;
    next.routing.version = reported + 1;
    StoreBatch batch;
    for (auto& [id, chain] : next.routing.chains) {
      chain.version += gap + 1;
      batch.puts.emplace_back(chain_key(id), encode_chain(chain));
    }
    batch.puts.emplace_back(meta_key(), encode_meta(next.routing.version, next.ids));
    if (store_) {
      if (auto written = store_->write(batch); !written) {
        WEFT_LOG_ERROR("mgmt: persisting the raised routing version failed: {}", written.error());
        return written;
      }
    }
    WEFT_LOG_WARN("mgmt: {} has routing version {} installed, above mgmtd's {} (--accept-older-state): routing "
                  "version raised to {}, every chain's version by {}; the cluster takes mgmtd's older view",
                  who, reported, own, next.routing.version, gap + 1);
    state_ = std::move(next);
    metrics_->refresh(state_, clock_.now());
    return {};
  }
  if (reported > own && reported > behind_of_) {
    behind_of_ = reported;
    behind_ = fmt::format(
        "mgmtd's routing version {} is below version {} that {} has installed: mgmtd's state is older than the "
        "cluster's: restore its newest state, or start it with --accept-older-state",
        own, reported, who);
    WEFT_LOG_ERROR("mgmt: {}; refusing every server and making no routing change until restarted", behind_);
    metrics_->behind().set(1);
  }
  if (!behind_.empty()) metrics_->refused().inc();
  return refuse_if_behind_locked();
}

void ClusterState::log_lost_target_locked(TargetId target) const {
  std::string copyless;
  for (const auto& [id, chain] : state_.routing.chains) {
    bool holds = std::any_of(chain.entries.begin(), chain.entries.end(),
                             [&](const ChainEntry& e) { return e.target_id == target; });
    if (holds && lost_last_copy(chain)) copyless += fmt::format("{}{}", copyless.empty() ? "" : ", ", id);
  }
  if (copyless.empty()) {
    WEFT_LOG_WARN("mgmt: target {} came back without its data (another data id: a new disk or an emptied "
                  "directory); it syncs from its chains' serving targets", target);
    return;
  }
  WEFT_LOG_ERROR("mgmt: target {} came back without its data (another data id: a new disk or an emptied directory) "
                 "and held the only copy of chain(s) {}: they serve nothing until an operator promotes the best copy "
                 "left (`weft admin target promote CHAIN TARGET`, docs/DEPLOY.md)", target, copyless);
}

Result<RegisterReply> ClusterState::register_node(const RegisterRequest& request) {
  std::lock_guard lock(mu_);
  // Only a well-formed registration may say mgmtd is behind (which stops
  // every server): a malformed one is refused for what it is.
  WEFT_RETURN_IF_ERROR(check_register(request));
  WEFT_RETURN_IF_ERROR(check_reported_locked(request.installed_routing_version, request.address));
  TimePoint now = clock_.now();
  const MetaStoreRecord store_before = state_.meta_store;
  const Duration serve_after = replaced_meta_lease_left(state_, request, now, options_.lease);
  uint64_t mark_before = 0;
  WEFT_TRY(RegisterReply reply, mutate([&](PersistedState& next) -> Result<RegisterReply> {
             auto checked = apply_meta_store(next, request, options_.accept_older_state);
             if (!checked) {  // logged here too: the operator may look at mgmtd first
               log_meta_refusal_locked(request.address, checked.error());
               return std::unexpected(checked.error());
             }
             mark_before = *checked;
             return apply_register(next, request, now, options_.lease.lease);
           }));
  if (request.kind == NodeKind::kMeta) {
    log_meta_store_locked(request, store_before);
    reply.meta_store_checked = request.meta_store.store_id != 0;
    reply.meta_ids_mark = mark_before;
    reply.serve_after = serve_after;
  }
  reply.routing_version = state_.routing.version;
  refusal_watch_[reply.node_id].heard.reset();  // a registering process may not listen yet
  metrics_->registrations().inc();
  for (TargetId t : reply.data_lost) log_lost_target_locked(t);
  return reply;
}

Result<HeartbeatReply> ClusterState::heartbeat(const HeartbeatRequest& request) {
  std::lock_guard lock(mu_);
  // Only a registered node (at its incarnation) may say mgmtd is behind; any
  // other heartbeat is refused for what it is (find_heartbeat_node).
  if (auto node = find_heartbeat_node(state_, request); !node) return std::unexpected(node.error());
  WEFT_RETURN_IF_ERROR(check_reported_locked(request.installed_routing_version,
                                             fmt::format("node {}", request.node_id)));
  return heartbeat_locked(request);
}

void ClusterState::log_meta_store_locked(const RegisterRequest& request, const MetaStoreRecord& before) const {
  const MetaStoreRecord& got = request.meta_store;
  if (got.store_id == 0) {
    WEFT_LOG_WARN("mgmt: meta {} reports no store id (a meta older than the check): its store is not checked "
                  "against the cluster's", request.address);
  } else if (before.store_id == 0) {
    WEFT_LOG_INFO("mgmt: meta {} registered store {:016x} (ids issued below {}) as the cluster's meta store",
                  request.address, got.store_id, got.ids_issued_below);
  } else if (got.store_id != before.store_id || got.ids_issued_below < before.ids_issued_below) {
    if (request.accept_store_change)
      WEFT_LOG_WARN("mgmt: meta {} changes the cluster's meta store from {:016x} (ids issued below {}) to {:016x} "
                    "(ids issued below {}) (--accept-store-change): it raises its next id past {} first",
                    request.address, before.store_id, before.ids_issued_below, got.store_id, got.ids_issued_below,
                    before.ids_issued_below);
    else
      log_older_store_record_locked(request.address, before, got);
  }
}

void ClusterState::log_meta_refusal_locked(const std::string& who, const Status& why) const {
  if (why.code() != Code::kVersionMismatch) {  // final: the meta stops
    WEFT_LOG_ERROR("mgmt: refused meta {}: {}", who, why.message());
  } else if (auto held = newer_store_log_.admit()) {  // retried by the meta
    WEFT_LOG_ERROR("mgmt: refused meta {} (it retries): {}{}", who, why.message(), LogThrottle::held_back(*held));
  }
}

void ClusterState::log_older_store_record_locked(const std::string& who, const MetaStoreRecord& before,
                                                 const MetaStoreRecord& got) const {
  WEFT_LOG_WARN("mgmt: {} serves meta store {:016x} (ids issued below {}), which took over after a store change "
                "mgmtd's state does not know (it recorded store {:016x}, ids issued below {}; --accept-older-state): "
                "recorded as the cluster's meta store",
                who, got.store_id, got.ids_issued_below, before.store_id, before.ids_issued_below);
}

Result<void> ClusterState::check_meta_heartbeat_locked(const HeartbeatRequest& request) {
  if (request.meta_ids_issued_below == 0 && request.meta_store_id == 0) return {};  // not told
  auto node = state_.routing.nodes.find(request.node_id);
  if (node == state_.routing.nodes.end() || node->second.kind != NodeKind::kMeta ||
      node->second.incarnation != request.incarnation)
    return {};  // find_heartbeat_node answers for it; only a meta node speaks for meta's store
  const MetaStoreRecord known = state_.meta_store;
  const MetaStoreRecord got{.store_id = request.meta_store_id, .ids_issued_below = request.meta_ids_issued_below};
  if (auto checked = check_meta_store(known, got, options_.accept_older_state, /*running=*/true); !checked) {
    log_meta_refusal_locked(fmt::format("node {} ({})", request.node_id, node->second.address), checked.error());
    return checked;
  }
  const std::string address = node->second.address;  // `node` dangles once mutate() replaced the state
  MetaStoreRecord next = known;
  if (got.store_id != 0 && got.store_id != known.store_id) {
    // No store recorded (a state that lost it), or one from a change mgmtd's
    // state does not know (accept_older_state, checked above): this one.
    next = {.store_id = got.store_id, .ids_issued_below = std::max(known.ids_issued_below, got.ids_issued_below)};
  } else if (known.store_id != 0 && got.ids_issued_below > known.ids_issued_below) {
    next.ids_issued_below = got.ids_issued_below;  // the same store (or not told): its mark grew
  }
  if (next == known) return {};
  // Not an error of the heartbeat: the next one tries again.
  if (auto noted = mutate([&](PersistedState& s) -> Result<void> {
        s.meta_store = next;
        return {};
      });
      !noted) {
    WEFT_LOG_WARN("mgmt: recording meta's store {:016x} (ids issued below {}): {}", next.store_id,
                  next.ids_issued_below, noted.error());
    return {};
  }
  if (known.store_id == 0)
    WEFT_LOG_INFO("mgmt: meta node {} ({}) heartbeats with store {:016x} (ids issued below {}): recorded as the "
                  "cluster's meta store (none was)", request.node_id, address, next.store_id,
                  next.ids_issued_below);
  else if (next.store_id != known.store_id)
    log_older_store_record_locked(fmt::format("meta node {}", request.node_id), known, got);
  return {};
}

Result<HeartbeatReply> ClusterState::heartbeat_locked(const HeartbeatRequest& request) {
  TimePoint now = clock_.now();
  Duration lease = options_.lease.lease;
  // Before the lease is renewed: a meta whose store is not the cluster's gets none.
  WEFT_RETURN_IF_ERROR(check_meta_heartbeat_locked(request));
  WEFT_TRY(NodeInfo * node, find_heartbeat_node(state_, request));
  size_t ignored = 0;
  // Reports that would all be ignored change nothing persisted: no copy of
  // the state for them (a broken peer may resend thousands every beat).
  std::vector<Status> refused = check_sync_done(state_, request.node_id, request.sync_done);
  const bool sync_done_applies = refused.size() < request.sync_done.size();
  if (node->state == NodeState::kDown || sync_done_applies ||
      has_new_target_failures(state_, request.node_id, request.usage)) {
    std::vector<TargetId> failed;
    WEFT_RETURN_IF_ERROR(mutate([&](PersistedState& next) -> Result<void> {
      revive_node(next.routing.nodes.at(request.node_id), now, lease);
      failed = apply_target_failures(next, request.node_id, request.usage);
      refused = apply_sync_done(next, request.node_id, request.sync_done);
      return {};
    }));
    node = &state_.routing.nodes.at(request.node_id);  // state_ was replaced
    for (TargetId t : failed)
      WEFT_LOG_WARN("mgmt: node {} reports target {} failed (it refuses updates until restarted): out of its chains",
                    request.node_id, t);
  }
  // Not an error of the heartbeat (it still renews the lease): logged, in
  // one line however many it carried (tens of thousands from a broken peer).
  if (!refused.empty())
    WEFT_LOG_INFO("mgmt: node {}: ignored {} sync-done report(s), the first: {}", request.node_id, refused.size(),
                  refused.front());
  ignored = refused.size();
  // Once the revival is recorded: a heartbeat that failed revived nothing
  // and begins no misled-probe pause.
  note_revived_after_refusal_locked(*node, now);
  revive_node(*node, now, lease);  // in place: leases are neither versioned nor persisted
  ignored += apply_usage(state_, request.node_id, request.usage);
  if (!request.usage.empty()) ++usage_generation_;
  if (ignored > 0) {
    WEFT_LOG_DEBUG("mgmt: ignored {} stale or foreign reports from node {}", ignored, request.node_id);
    metrics_->ignored_reports().inc(ignored);
  }
  metrics_->heartbeats().inc();
  refusal_watch_[request.node_id].heard = now;
  return HeartbeatReply{.routing_version = state_.routing.version, .lease = lease};
}

Result<std::vector<NodeId>> ClusterState::tick(Duration period) {
  std::lock_guard lock(mu_);
  TimePoint now = clock_.now();
  Duration gap = now - last_tick_;
  last_tick_ = now;
  if (period > Duration::zero() && gap > 2 * period) {
    Duration excused = gap - period;
    WEFT_LOG_WARN("mgmt: the lease check ran {} ms after the previous one (every {} ms): mgmtd stalled; {} ms "
                  "excused from every node's heartbeat age",
                  std::chrono::duration_cast<std::chrono::milliseconds>(gap).count(),
                  std::chrono::duration_cast<std::chrono::milliseconds>(period).count(),
                  std::chrono::duration_cast<std::chrono::milliseconds>(excused).count());
    for (auto& [id, node] : state_.routing.nodes) {  // in place: leases are neither versioned nor persisted
      node.last_heartbeat = std::min(node.last_heartbeat + excused, now);
      node.lease_expiry = std::max(node.lease_expiry, node.last_heartbeat + options_.lease.lease);
    }
  }
  // Behind: nobody may heartbeat, and our view of the chains is not the
  // cluster's; declaring nodes dead would change routing on that view.
  if (!behind_.empty()) return std::vector<NodeId>{};
  std::vector<NodeId> dead = expired_nodes(state_, now, options_.lease);
  if (!dead.empty()) {
    WEFT_RETURN_IF_ERROR(mutate([&](PersistedState& next) -> Result<void> {
      for (NodeId id : dead) declare_dead(next, id);
      return {};
    }));
    for (NodeId id : dead) WEFT_LOG_WARN("mgmt: node {} missed its lease: declared dead", id);
    metrics_->declared_dead().inc(dead.size());
  }
  // A lease lowered across a restart: no grant of the old one is held now.
  const GrantedLeases configured{.server = options_.lease.lease, .client = options_.client_lease.lease};
  if (!(state_.leases == configured) && now >= leases_lowered_at_) {
    WEFT_RETURN_IF_ERROR(mutate([&](PersistedState& next) -> Result<void> {
      next.leases = configured;
      return {};
    }));
  }
  metrics_->refresh(state_, now);
  return dead;
}

// The same process heartbeating after it was declared dead for refusing
// connections was alive: mgmtd's probe is misled (a REJECT rule, another
// address resolution than the peers'). Without a pause the node would be
// declared and revived, its chains resynced, every few seconds for ever.
void ClusterState::note_revived_after_refusal_locked(const NodeInfo& node, TimePoint now) {
  auto w = refusal_watch_.find(node.id);
  if (w == refusal_watch_.end() || w->second.declared_incarnation == 0) return;
  const bool same_process = w->second.declared_incarnation == node.incarnation;
  w->second.declared_incarnation = 0;
  if (!same_process) return;  // a restarted server: the refusal was right
  w->second.suppressed_until = now + kRefusalSuppression;
  WEFT_LOG_ERROR("mgmt: node {} ({}) heartbeats after it was declared dead for refusing connections: mgmtd's probe "
                 "of its address is wrong (a firewall REJECT rule? [mgmtd] probe_refusals = false turns probing "
                 "off); not declared by refusal for {} s",
                 node.id, node.address, std::chrono::duration_cast<std::chrono::seconds>(kRefusalSuppression).count());
}

std::optional<ClusterState::NodeAt> ClusterState::storage_node_up_at(
    const std::function<bool(const std::string&)>& at_address) const {
  std::lock_guard lock(mu_);
  for (const auto& [id, node] : state_.routing.nodes)
    if (node.kind == NodeKind::kStorage && node.state == NodeState::kUp && at_address(node.address))
      return NodeAt{.id = id, .incarnation = node.incarnation, .address = node.address};
  return std::nullopt;
}

Result<bool> ClusterState::declare_refusing(NodeId id, uint64_t incarnation, TimePoint probe_started) {
  std::lock_guard lock(mu_);
  if (!behind_.empty()) return false;  // as tick(): no routing change on a view older than the cluster's
  auto it = state_.routing.nodes.find(id);
  if (it == state_.routing.nodes.end()) return false;
  const NodeInfo& node = it->second;
  RefusalWatch& watch = refusal_watch_[id];
  // A heartbeat that arrived after the probe began came from a live process
  // (or one restarted there, with a new incarnation): the lease decides.
  if (node.state != NodeState::kUp || node.incarnation != incarnation || (watch.heard && *watch.heard > probe_started))
    return false;
  // A server registers before it opens its targets and listens: until its
  // first heartbeat, a refusal may only mean it is still starting.
  if (!watch.heard || clock_.now() < watch.suppressed_until) return false;
  WEFT_RETURN_IF_ERROR(mutate([&](PersistedState& next) -> Result<void> {
    declare_dead(next, id);
    return {};
  }));
  WEFT_LOG_WARN("mgmt: nothing listens at node {}'s address {}: declared dead without waiting for its lease", id,
                state_.routing.nodes.at(id).address);
  watch.declared_incarnation = incarnation;
  metrics_->declared_refusing().inc();
  metrics_->refresh(state_, clock_.now());
  return true;
}

Result<ChainTableId> ClusterState::create_chain_table(const ChainTableSpec& spec) {
  std::lock_guard lock(mu_);
  WEFT_RETURN_IF_ERROR(refuse_if_behind_locked());
  return mutate([&](PersistedState& next) { return apply_create_table(next, spec); });
}

Result<std::vector<ChainId>> ClusterState::replace_target(TargetId old_target, TargetId new_target, bool force) {
  std::lock_guard lock(mu_);
  WEFT_RETURN_IF_ERROR(refuse_if_behind_locked());
  return mutate([&](PersistedState& next) { return apply_replace_target(next, old_target, new_target, force); });
}

Result<void> ClusterState::promote_target(ChainId chain, TargetId target, bool force) {
  std::lock_guard lock(mu_);
  WEFT_RETURN_IF_ERROR(refuse_if_behind_locked());
  WEFT_RETURN_IF_ERROR(mutate([&](PersistedState& next) { return apply_promote_target(next, chain, target, force); }));
  WEFT_LOG_WARN("mgmt: target {} promoted to chain {}'s copy by an operator: the chain serves what it holds", target,
                chain);
  return {};
}

Result<void> ClusterState::remove_node(NodeId node) {
  std::lock_guard lock(mu_);
  WEFT_RETURN_IF_ERROR(refuse_if_behind_locked());
  WEFT_RETURN_IF_ERROR(mutate([&](PersistedState& next) { return apply_remove_node(next, node); }));
  refusal_watch_.erase(node);  // its metrics went with the commit (Metrics::refresh)
  return {};
}

ClusterState::PerNodeEntries ClusterState::per_node_entries() const {
  std::lock_guard lock(mu_);
  return {.refusal_watches = refusal_watch_.size(), .heartbeat_series = metrics_->heartbeat_series()};
}

RoutingInfo ClusterState::routing() const {
  std::lock_guard lock(mu_);
  return state_.routing;
}

RoutingVersion ClusterState::routing_version() const {
  std::lock_guard lock(mu_);
  return state_.routing.version;
}

std::string ClusterState::behind() const {
  std::lock_guard lock(mu_);
  return behind_;
}

MetaStoreRecord ClusterState::meta_store() const {
  std::lock_guard lock(mu_);
  return state_.meta_store;
}

GrantedLeases ClusterState::recorded_leases() const {
  std::lock_guard lock(mu_);
  return state_.leases;
}

uint64_t ClusterState::usage_generation() const {
  std::lock_guard lock(mu_);
  return usage_generation_;
}

}  // namespace weft::mgmt
