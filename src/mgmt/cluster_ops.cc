#include "mgmt/cluster_ops.h"

#include <algorithm>
#include <set>

#include "common/assert.h"
#include "mgmt/target_states.h"

namespace weft::mgmt {
namespace {

NodeInfo* find_by_address(PersistedState& state, const std::string& address) {
  for (auto& [id, node] : state.routing.nodes)
    if (node.address == address) return &node;
  return nullptr;
}


// A change may grow the routing up to kRoutingBytesMax; past it, only if it
// does not grow it (a re-registration of the same shape, in a state that got
// larger under older limits, must still bring its node back).
Result<void> check_routing_growth(uint64_t bytes_before, const RoutingInfo& after, std::string_view what) {
  uint64_t bytes = encoded_bytes_bound(after);
  if (bytes > kRoutingBytesMax && bytes > bytes_before)
    return error(Code::kTooBig, "{}: the routing info would take up to {} bytes (at most {})", what, bytes,
                 kRoutingBytesMax);
  return {};
}

void fail_target_everywhere(PersistedState& state, TargetId target) {
  for (auto& [id, chain] : state.routing.chains) fail_target(chain, target);
}

// A new chain version for every chain holding a target of `node`, even where
// FAIL then RETURN leaves the entries as they were (a syncing target of a
// restarted process is syncing again at the tail): the restart lost whatever
// the process knew of the chain at its old version (a SyncDone it had accepted
// but not yet reported), and its peers key a resync on the chain version, so
// at the same version none would resync it again (storage/resync.cc).
// finalize() then bumps these chains once like any other change.
void bump_chains_of_node(PersistedState& state, NodeId node) {
  for (auto& [id, chain] : state.routing.chains) {
    bool holds = std::any_of(chain.entries.begin(), chain.entries.end(), [&](const ChainEntry& e) {
      auto t = state.routing.targets.find(e.target_id);
      return t != state.routing.targets.end() && t->second.node_id == node;
    });
    if (holds) ++chain.version;
  }
}

// A known target registering with another data id than it had: what it held
// is gone (target_states.h, LOST). An id of 0 (not known on either side: a
// server or a record older than the field) proves nothing.
bool lost_its_data(const TargetInfo& known, const TargetRegistration& reg) {
  return known.data_id != 0 && reg.data_id != 0 && known.data_id != reg.data_id;
}

// The known target a registration names: the node's target of that name, else
// the target that holds its data (the same data id: the server came back under
// another address, or the target's directory moved), which this node takes
// over with its chains. A target on another node that is up and reported
// holds that data now too (a copied directory): refused, kExists.
// nullopt: a new target.
Result<std::optional<TargetId>> known_target(const PersistedState& state, NodeId node, const TargetRegistration& reg,
                                             const std::set<TargetId>& listed) {
  const auto& targets = state.routing.targets;
  auto it = std::find_if(targets.begin(), targets.end(), [&](const auto& kv) {
    return kv.second.node_id == node && kv.second.name == reg.name;
  });
  if (it != targets.end()) return it->first;
  if (reg.data_id == 0) return std::nullopt;
  it = std::find_if(targets.begin(), targets.end(),
                    [&](const auto& kv) { return kv.second.data_id == reg.data_id && !listed.contains(kv.first); });
  if (it == targets.end()) return std::nullopt;
  const TargetInfo& t = it->second;
  if (t.node_id != node && target_alive(state, t.id)) {
    auto n = state.routing.nodes.find(t.node_id);
    return error(Code::kExists,
                 "target {}: its data (data id {:016x}) is target {} ({}) of node {} at {}, which is up and serves "
                 "it: two servers on one target's data (a copied directory?)",
                 reg.name, reg.data_id, t.id, t.name, t.node_id, n == state.routing.nodes.end() ? "?" : n->second.address);
  }
  // Taken over from another node, it must not join one of its chains a
  // second time on this node: both copies would fail with it (a chain's
  // targets sit on distinct nodes, cluster_state.h).
  if (t.node_id != node) {
    for (const auto& [chain_id, chain] : state.routing.chains) {
      bool holds = std::any_of(chain.entries.begin(), chain.entries.end(),
                               [&](const ChainEntry& e) { return e.target_id == t.id; });
      if (!holds) continue;
      for (const ChainEntry& e : chain.entries) {
        auto other = targets.find(e.target_id);
        if (e.target_id != t.id && other != targets.end() && other->second.node_id == node)
          return error(Code::kExists,
                       "target {}: its data (data id {:016x}) is target {} of chain {}, which already has target {} ({}) "
                       "on this node: two copies of one chain on one node fail together; serve this directory from "
                       "another node",
                       reg.name, reg.data_id, t.id, chain_id, e.target_id, other->second.name);
      }
    }
  }
  return it->first;
}

// Matches the request's targets to the node's known ones (known_target); new
// ones get new ids, known targets no longer listed FAIL, known ones that lost
// their data are LOST in every chain (listed in `lost`).
Result<std::vector<TargetId>> sync_targets(PersistedState& state, NodeId node, const RegisterRequest& r,
                                           std::vector<TargetId>& lost) {
  std::vector<TargetId> ids;
  std::set<TargetId> listed;
  for (const TargetRegistration& reg : r.targets) {
    WEFT_TRY(std::optional<TargetId> known, known_target(state, node, reg, listed));
    TargetId id = known ? *known : state.ids.next_target++;
    TargetInfo& t = state.routing.targets[id];
    if (lost_its_data(t, reg)) {
      for (auto& [chain_id, chain] : state.routing.chains) lose_target_data(chain, id);
      lost.push_back(id);
      t.lost_data = true;
    }
    t.id = id, t.node_id = node, t.name = reg.name, t.reported = true;
    t.capacity_bytes = reg.capacity_bytes, t.used_bytes = reg.used_bytes;
    if (reg.data_id != 0) t.data_id = reg.data_id;
    ids.push_back(id);
    listed.insert(id);
  }
  for (auto& [id, t] : state.routing.targets) {
    if (t.node_id != node || listed.contains(id)) continue;
    t.reported = false;
    fail_target_everywhere(state, id);
  }
  return ids;
}

}  // namespace

Result<void> check_register(const RegisterRequest& r) {
  WEFT_RETURN_IF_ERROR(check_address(r.address));
  if (r.kind != NodeKind::kStorage && r.kind != NodeKind::kMeta && r.kind != NodeKind::kClient)
    return error(Code::kInvalidArgument, "register {}: unknown node kind", r.address);
  if (r.incarnation == 0) return error(Code::kInvalidArgument, "register {}: incarnation must be > 0", r.address);
  if (r.kind != NodeKind::kStorage && !r.targets.empty())
    return error(Code::kInvalidArgument, "register {}: only storage nodes have targets", r.address);
  if (r.targets.size() > kTargetsPerNodeMax)
    return error(Code::kInvalidArgument, "register {}: {} targets exceed {}", r.address, r.targets.size(),
                 kTargetsPerNodeMax);
  std::set<std::string> names;
  for (const auto& t : r.targets) {
    if (t.name.empty() || t.name.size() > 1024)
      return error(Code::kInvalidArgument, "register {}: target names must be 1..1024 bytes", r.address);
    if (!names.insert(t.name).second)
      return error(Code::kInvalidArgument, "register {}: target '{}' listed twice", r.address, t.name);
  }
  return {};
}

bool target_alive(const PersistedState& state, TargetId target) {
  auto t = state.routing.targets.find(target);
  if (t == state.routing.targets.end() || !t->second.reported) return false;
  auto n = state.routing.nodes.find(t->second.node_id);
  return n != state.routing.nodes.end() && n->second.state == NodeState::kUp;
}

void revive_node(NodeInfo& node, TimePoint now, Duration lease) {
  node.state = NodeState::kUp;
  node.last_heartbeat = now;
  // Never earlier: a grant of a longer lease before a restart of mgmtd
  // still holds (a node's LeaseKeeper keeps the latest end of its grants).
  node.lease_expiry = std::max(node.lease_expiry, now + lease);
}

void declare_dead(PersistedState& state, NodeId node_id) {
  NodeInfo& node = state.routing.nodes.at(node_id);
  node.state = NodeState::kDown;
  for (const auto& [id, t] : state.routing.targets)
    if (t.node_id == node_id) fail_target_everywhere(state, id);
}

Result<RegisterReply> apply_register(PersistedState& state, const RegisterRequest& r, TimePoint now,
                                     Duration lease) {
  WEFT_RETURN_IF_ERROR(check_register(r));
  const uint64_t bytes_before = encoded_bytes_bound(state.routing);
  NodeInfo* node = find_by_address(state, r.address);
  if (node == nullptr && state.routing.nodes.size() >= kNodesMax)
    return error(Code::kTooBig, "register {}: the cluster has {} nodes (at most {})", r.address,
                 state.routing.nodes.size(), kNodesMax);
  if (node != nullptr && node->kind != r.kind)
    return error(Code::kExists, "register {}: address already registered as a {} node (id {})", r.address,
                 to_string(node->kind), node->id);
  if (node != nullptr && r.incarnation < node->incarnation)
    return error(Code::kNotPermitted, "register {}: incarnation {} is older than the registered {}", r.address,
                 r.incarnation, node->incarnation);
  if (node == nullptr) {
    NodeId id = state.ids.next_node++;
    node = &state.routing.nodes[id];
    *node = NodeInfo{.id = id, .kind = r.kind, .address = r.address, .incarnation = r.incarnation};
  } else if (r.incarnation > node->incarnation) {
    // A restarted process: whatever its targets held may be behind.
    declare_dead(state, node->id);
    node->incarnation = r.incarnation;
    bump_chains_of_node(state, node->id);
  }
  revive_node(*node, now, lease);
  RegisterReply reply{.node_id = node->id, .lease = lease};
  WEFT_TRY(reply.target_ids, sync_targets(state, node->id, r, reply.data_lost));
  WEFT_RETURN_IF_ERROR(check_routing_growth(bytes_before, state.routing, "register " + r.address));
  return reply;
}

bool after_unknown_store_change(const MetaStoreRecord& known, const MetaStoreRecord& got) {
  return known.ids_issued_below <= UINT64_MAX - kStoreChangeIdMargin &&
         got.ids_issued_below >= known.ids_issued_below + kStoreChangeIdMargin;
}

Result<void> check_meta_store(const MetaStoreRecord& known, const MetaStoreRecord& got, bool accept_older_state,
                              bool running) {
  if (known.store_id == 0 || got.store_id == 0) return {};
  if (got.store_id != known.store_id) {
    if (after_unknown_store_change(known, got)) {
      if (accept_older_state) return {};
      return error(Code::kVersionMismatch,
                   "meta's store {:016x} (inode ids issued below {}) is not the meta store {:016x} in mgmtd's record "
                   "(ids issued below {}), but it issued ids past that mark plus the store-change margin: it took "
                   "over after a store change mgmtd's state does not know, so mgmtd's state is older than the "
                   "cluster's (restored from a backup?): restore mgmtd's newest state, or start mgmtd with "
                   "--accept-older-state (it then records this store)",
                   got.store_id, got.ids_issued_below, known.store_id, known.ids_issued_below);
    }
    // One line each (an operator reads it in `weft serve meta`'s exit or log):
    // what happened, why serving would be wrong, and the ways out.
    if (running)
      return error(Code::kNotPermitted,
                   "meta's store {:016x} is no longer the cluster's meta store: mgmtd records store {:016x} (inode "
                   "ids issued below {}) since another meta's --accept-store-change (or a restart on another "
                   "data_dir) replaced it; this meta must not serve its store any more: stop it, or restart it on "
                   "the cluster's data_dir",
                   got.store_id, known.store_id, known.ids_issued_below);
    return error(Code::kNotPermitted,
                 "meta runs on store {:016x} but the cluster's meta store is {:016x} (inode ids issued below {}): "
                 "a wrong or emptied data_dir? Serving it would hand out ids again whose chunks storage still holds; "
                 "start meta on the cluster's data_dir, or, if this store is meant to replace it (a restore from "
                 "backup, a deliberately new namespace), start meta once with --accept-store-change",
                 got.store_id, known.store_id, known.ids_issued_below);
  }
  // A heartbeat's mark below the record is not checked (never lowered, ignored).
  if (!running && got.ids_issued_below < known.ids_issued_below)
    return error(Code::kNotPermitted,
                 "meta's store {:016x} has issued inode ids below {} only, but ids below {} were issued: the "
                 "store is older than the cluster's (restored from a backup?) and would hand out those ids again; "
                 "start meta on its newest data_dir, or, if this older store is what should serve, start meta once "
                 "with --accept-store-change",
                 got.store_id, got.ids_issued_below, known.ids_issued_below);
  return {};
}

Result<uint64_t> apply_meta_store(PersistedState& state, const RegisterRequest& r, bool accept_older_state) {
  const MetaStoreRecord known = state.meta_store;
  const MetaStoreRecord& got = r.meta_store;
  if (r.kind != NodeKind::kMeta || got.store_id == 0) return known.ids_issued_below;
  if (known.store_id == 0 && r.accept_store_change)
    return error(Code::kNotPermitted,
                 "--accept-store-change: mgmtd has no record of the cluster's meta store (a new cluster, or mgmtd's "
                 "state lost it or predates the check), so there is no issued-id mark to raise this store's ids "
                 "past; start meta without the flag (mgmtd then records its store, ids issued below {}, as the "
                 "cluster's), after restoring mgmtd's newest state if another store may have issued higher ids",
                 got.ids_issued_below);
  if (!r.accept_store_change) WEFT_RETURN_IF_ERROR(check_meta_store(known, got, accept_older_state, false));
  // An accepted change records the floor meta raises its ids to before it
  // serves (the mark returned plus the margin), not the store's mark before
  // that raise: until its first heartbeat the record must already cover the
  // ids it hands out (a later change raises past them; a copy of the old
  // store does not pass for a change mgmtd missed).
  uint64_t floor = known.ids_issued_below;
  if (r.accept_store_change)
    floor = known.ids_issued_below > UINT64_MAX - kStoreChangeIdMargin ? UINT64_MAX
                                                                      : known.ids_issued_below + kStoreChangeIdMargin;
  state.meta_store = {.store_id = got.store_id,
                      .ids_issued_below = std::max({known.ids_issued_below, got.ids_issued_below, floor})};
  return known.ids_issued_below;
}

Result<NodeInfo*> find_heartbeat_node(PersistedState& state, const HeartbeatRequest& r) {
  auto it = state.routing.nodes.find(r.node_id);
  if (it == state.routing.nodes.end())
    return error(Code::kNotFound, "heartbeat from unknown node id {}: re-register", r.node_id);
  NodeInfo& node = it->second;
  if (r.incarnation < node.incarnation)
    return error(Code::kNotPermitted, "heartbeat from node {} with incarnation {}: replaced by incarnation {}",
                 r.node_id, r.incarnation, node.incarnation);
  if (r.incarnation > node.incarnation)
    return error(Code::kNotFound, "heartbeat from node {} with unregistered incarnation {}: re-register",
                 r.node_id, r.incarnation);
  return &node;
}

namespace {

Result<void> check_one_sync_done(const PersistedState& state, NodeId node, const SyncDoneReport& r) {
  auto t = state.routing.targets.find(r.target_id);
  if (t == state.routing.targets.end() || t->second.node_id != node)
    return error(Code::kNotPermitted, "sync done of target {}: not a target of node {}", r.target_id, node);
  auto c = state.routing.chains.find(r.chain_id);
  if (c == state.routing.chains.end()) return error(Code::kNotFound, "sync done in unknown chain {}", r.chain_id);
  // The resync of another round (or of a chain whose members changed since)
  // proves nothing about the data of the target syncing now. A server older
  // than the version field reports 0, which never matches: refused on purpose
  // (proto/mgmt.proto, SyncDone).
  if (c->second.version != r.chain_version)
    return error(Code::kStaleRouting, "sync done of target {} in chain {} at version {}: the chain is at version {}",
                 r.target_id, r.chain_id, r.chain_version, c->second.version);
  if (!is_syncing(c->second, r.target_id))
    return error(Code::kStaleRouting, "sync done of target {} in chain {}: the target is not syncing there",
                 r.target_id, r.chain_id);
  return {};
}

}  // namespace

std::vector<Status> check_sync_done(const PersistedState& state, NodeId node,
                                    const std::vector<SyncDoneReport>& reports) {
  std::vector<Status> ignored;
  for (const SyncDoneReport& r : reports)
    if (auto ok = check_one_sync_done(state, node, r); !ok) ignored.push_back(ok.error());
  return ignored;
}

std::vector<Status> apply_sync_done(PersistedState& state, NodeId node, const std::vector<SyncDoneReport>& reports) {
  std::vector<Status> ignored;
  for (const SyncDoneReport& r : reports) {
    // Checked against the state as the reports before it left it (two
    // reports of one target: the second finds it serving).
    if (auto ok = check_one_sync_done(state, node, r); !ok) {
      ignored.push_back(ok.error());
      continue;
    }
    const bool moved = sync_done(state.routing.chains.at(r.chain_id), r.target_id);
    WEFT_ASSERT(moved);  // checked (is_syncing, the predicate sync_done uses)
  }
  return ignored;
}

bool has_new_target_failures(const PersistedState& state, NodeId node, const std::vector<TargetUsage>& usage) {
  for (const TargetUsage& u : usage) {
    if (!u.failed) continue;
    auto t = state.routing.targets.find(u.target_id);
    if (t != state.routing.targets.end() && t->second.node_id == node && t->second.reported) return true;
  }
  return false;
}

std::vector<TargetId> apply_target_failures(PersistedState& state, NodeId node, const std::vector<TargetUsage>& usage) {
  std::vector<TargetId> failed;
  for (const TargetUsage& u : usage) {
    if (!u.failed) continue;
    auto t = state.routing.targets.find(u.target_id);
    if (t == state.routing.targets.end() || t->second.node_id != node || !t->second.reported) continue;
    t->second.reported = false;
    fail_target_everywhere(state, u.target_id);
    failed.push_back(u.target_id);
  }
  return failed;
}

size_t apply_usage(PersistedState& state, NodeId node, const std::vector<TargetUsage>& usage) {
  size_t ignored = 0;
  for (const TargetUsage& u : usage) {
    auto t = state.routing.targets.find(u.target_id);
    if (t == state.routing.targets.end() || t->second.node_id != node) {
      ++ignored;
      continue;
    }
    t->second.used_bytes = u.used_bytes;
    t->second.capacity_bytes = u.capacity_bytes;
    t->second.fs_id = u.fs_id;
    t->second.fs_free_bytes = u.fs_free_bytes;
  }
  return ignored;
}

TimePoint lease_surely_over(const NodeInfo& node, const LeaseConfig& lease) {
  return std::max(node.last_heartbeat + lease.lease, node.lease_expiry) + lease.grace;
}

std::vector<NodeId> expired_nodes(const PersistedState& state, TimePoint now, const LeaseConfig& lease) {
  std::vector<NodeId> out;
  for (const auto& [id, node] : state.routing.nodes)
    if (node.state == NodeState::kUp && now >= lease_surely_over(node, lease)) out.push_back(id);
  return out;
}

Duration replaced_meta_lease_left(const PersistedState& state, const RegisterRequest& r, TimePoint now,
                                  const LeaseConfig& lease) {
  if (r.kind != NodeKind::kMeta) return Duration::zero();
  // Every up meta at another address counts: with the flag it serves the
  // store being replaced; without it, a meta that registered with the flag
  // and restarted before its wait was over is back on the cluster's store
  // while such a meta may still serve. With the flag the record at this
  // address counts too, whatever its incarnation: a former process (it may
  // still run where clients reach it) or this very one, whose first reply
  // was lost (that registration overwrote the former one's record, raising
  // its lease end past the former's).
  TimePoint until = now;
  for (const auto& [id, node] : state.routing.nodes) {
    if (node.kind != NodeKind::kMeta || node.state != NodeState::kUp) continue;
    if (node.address == r.address && !r.accept_store_change) continue;
    until = std::max(until, lease_surely_over(node, lease));
  }
  return until - now;
}

Result<ChainTableId> apply_create_table(PersistedState& state, const ChainTableSpec& spec) {
  if (state.routing.tables.size() >= kChainTablesMax)
    return error(Code::kTooBig, "create chain table: {} tables exist (at most {})", state.routing.tables.size(),
                 kChainTablesMax);
  const uint64_t bytes_before = encoded_bytes_bound(state.routing);
  std::vector<PlacementTarget> placement;
  std::set<NodeId> nodes;
  for (const auto& [id, t] : state.routing.targets) {
    const NodeInfo& node = state.routing.nodes.at(t.node_id);
    if (node.kind == NodeKind::kStorage && target_alive(state, id)) {
      placement.push_back({id, t.node_id});
      nodes.insert(t.node_id);
    }
  }
  // Known too many before building them (seconds for tens of thousands of
  // chains, under mgmtd's lock): the table has at most targets x chains per
  // target / replicas chains (with the automatic count too).
  if (uint32_t per_target = chains_per_target(spec, placement.size(), nodes.size());
      per_target > 0 && spec.replicas > 0) {
    uint64_t most = placement.size() * uint64_t{per_target} / spec.replicas;
    if (state.routing.chains.size() + most > kChainsMax)
      return error(Code::kTooBig, "create chain table: up to {} more chains would make {} (at most {})", most,
                   state.routing.chains.size() + most, kChainsMax);
  }
  WEFT_TRY(auto chains, build_chains(std::move(placement), spec));
  if (state.routing.chains.size() + chains.size() > kChainsMax)
    return error(Code::kTooBig, "create chain table: {} more chains would make {} (at most {})", chains.size(),
                 state.routing.chains.size() + chains.size(), kChainsMax);
  ChainTableId table_id = state.ids.next_table++;
  ChainTableInfo& table = state.routing.tables[table_id];
  table = ChainTableInfo{.id = table_id, .replicas = spec.replicas};
  for (const auto& members : chains) {
    ChainId chain_id = state.ids.next_chain++;
    ChainInfo& chain = state.routing.chains[chain_id];
    chain = ChainInfo{.id = chain_id, .table_id = table_id, .version = 1};
    for (TargetId t : members) chain.entries.push_back({t, TargetState::kServing});
    table.chains.push_back(chain_id);
  }
  WEFT_RETURN_IF_ERROR(check_routing_growth(bytes_before, state.routing, "create chain table"));
  return table_id;
}

namespace {

Result<void> check_replacement(const PersistedState& state, TargetId old_target, TargetId new_target) {
  if (old_target == new_target) return error(Code::kInvalidArgument, "replace target {}: by itself", old_target);
  if (!state.routing.targets.contains(old_target))
    return error(Code::kNotFound, "replace target {}: no such target", old_target);
  if (!state.routing.targets.contains(new_target))
    return error(Code::kNotFound, "replace target {}: no target {}", old_target, new_target);
  if (!target_alive(state, new_target))
    return error(Code::kNotPermitted, "replace target {}: target {} is not up (its node must run and list it)",
                 old_target, new_target);
  for (const auto& [id, chain] : state.routing.chains)
    for (const ChainEntry& e : chain.entries)
      if (e.target_id == new_target)
        return error(Code::kNotPermitted, "replace target {}: target {} is already in chain {}", old_target,
                     new_target, id);
  return {};
}

// Chain `chain` may take `new_target` in `old_target`'s place. In a chain
// that lost its last copy an offline target may hold the only data left
// (its chunks become strays once replaced, swept after stray_chunk_grace_s):
// replaced only with `force`, unless it came back without its data.
Result<void> check_chain_replacement(const PersistedState& state, const ChainInfo& chain, TargetId old_target,
                                     TargetId new_target, bool force) {
  NodeId new_node = state.routing.targets.at(new_target).node_id;
  if (!force && lost_last_copy(chain) && !state.routing.targets.at(old_target).lost_data)
    return error(Code::kNotPermitted,
                 "replace target {}: chain {} lost its last copy and this target may hold it; bring its node back "
                 "and `weft admin target promote` it, or pass --force to accept losing what it holds",
                 old_target, chain.id);
  for (const ChainEntry& e : chain.entries) {
    if (e.target_id == old_target) {
      if (e.state == TargetState::kLastServing)
        return error(Code::kNotPermitted,
                     "replace target {}: it holds chain {}'s only copy (last-serving); bring its node back instead",
                     old_target, chain.id);
      if (e.state != TargetState::kOffline)
        return error(Code::kNotPermitted, "replace target {}: it is {} in chain {} (only an offline target is replaced; "
                     "stop its node first)", old_target, to_string(e.state), chain.id);
    } else if (state.routing.targets.at(e.target_id).node_id == new_node) {
      return error(Code::kNotPermitted,
                   "replace target {}: chain {} already has target {} on node {} (a chain's targets sit on distinct "
                   "nodes)", old_target, chain.id, e.target_id, new_node);
    }
  }
  return {};
}

}  // namespace

Result<std::vector<ChainId>> apply_replace_target(PersistedState& state, TargetId old_target, TargetId new_target,
                                                  bool force) {
  WEFT_RETURN_IF_ERROR(check_replacement(state, old_target, new_target));
  std::vector<ChainId> changed;
  for (const auto& [id, chain] : state.routing.chains) {
    if (std::none_of(chain.entries.begin(), chain.entries.end(),
                     [&](const ChainEntry& e) { return e.target_id == old_target; }))
      continue;
    WEFT_RETURN_IF_ERROR(check_chain_replacement(state, chain, old_target, new_target, force));
    changed.push_back(id);
  }
  if (changed.empty())
    return error(Code::kInvalidArgument, "replace target {}: it is in no chain", old_target);
  for (ChainId id : changed)
    for (ChainEntry& e : state.routing.chains.at(id).entries)
      if (e.target_id == old_target) e.target_id = new_target;  // stays offline until reconcile() RETURNs it
  return changed;
}

Result<void> apply_promote_target(PersistedState& state, ChainId chain_id, TargetId target, bool force) {
  auto chain = state.routing.chains.find(chain_id);
  if (chain == state.routing.chains.end())
    return error(Code::kNotFound, "promote target {}: no chain {}", target, chain_id);
  auto lost = [&](TargetId t) {
    auto it = state.routing.targets.find(t);
    return it != state.routing.targets.end() && it->second.lost_data;
  };
  if (!force && lost(target)) {
    for (const ChainEntry& e : chain->second.entries) {
      if (e.target_id == target || lost(e.target_id)) continue;
      return error(Code::kNotPermitted,
                   "promote target {}: it came back without its data, and chain {}'s other targets would resync from "
                   "it and lose theirs; promote target {} (it may hold the chain's data), or pass --force to accept "
                   "losing it",
                   target, chain_id, e.target_id);
    }
  }
  return promote_target(chain->second, target);
}

Result<void> apply_remove_node(PersistedState& state, NodeId node_id) {
  auto node = state.routing.nodes.find(node_id);
  if (node == state.routing.nodes.end()) return error(Code::kNotFound, "remove node {}: no such node", node_id);
  if (node->second.state != NodeState::kDown)
    return error(Code::kNotPermitted, "remove node {} ({}): it is up (stop it first; mgmtd declares it down after "
                 "its lease and grace)", node_id, node->second.address);
  for (const auto& [chain_id, chain] : state.routing.chains)
    for (const ChainEntry& e : chain.entries)
      if (state.routing.targets.at(e.target_id).node_id == node_id)
        return error(Code::kNotPermitted,
                     "remove node {}: its target {} is in chain {} (`weft admin target replace` it first)", node_id,
                     e.target_id, chain_id);
  std::erase_if(state.routing.targets, [&](const auto& kv) { return kv.second.node_id == node_id; });
  state.routing.nodes.erase(node);
  return {};
}

}  // namespace weft::mgmt
