// Versioning, persistence diffs and load-time validation for ClusterState
// (declared in mgmt/cluster_ops.h).
#include <algorithm>
#include <map>

#include "common/assert.h"
#include "mgmt/cluster_ops.h"
#include "mgmt/target_states.h"

namespace weft::mgmt {
namespace {

// The persisted part of a node (leases are not persisted).
bool same_record(const NodeInfo& a, const NodeInfo& b) {
  return a.id == b.id && a.kind == b.kind && a.address == b.address && a.incarnation == b.incarnation &&
         a.state == b.state;
}
// What a client sees of a target (used bytes are refreshed by heartbeats, not
// versioned), and its data id: a disk replaced while nothing else of the
// target changed must reach the store, or mgmtd reloads the old disk's id and
// takes the new one for a target without its data.
bool same_record(const TargetInfo& a, const TargetInfo& b) {
  return a.id == b.id && a.node_id == b.node_id && a.name == b.name && a.reported == b.reported &&
         a.state == b.state && a.capacity_bytes == b.capacity_bytes && a.data_id == b.data_id &&
         a.lost_data == b.lost_data;
}
bool same_record(const ChainTableInfo& a, const ChainTableInfo& b) { return a == b; }
bool same_record(const ChainInfo& a, const ChainInfo& b) { return a == b; }

std::string encode(const NodeInfo& n) { return encode_node(n); }
std::string encode(const TargetInfo& t) { return encode_target(t); }
std::string encode(const ChainTableInfo& t) { return encode_table(t); }
std::string encode(const ChainInfo& c) { return encode_chain(c); }

// Adds puts/deletes for records that differ; returns whether any did.
template <class Map, class KeyFn>
bool diff_map(const Map& before, const Map& after, KeyFn key, StoreBatch& batch) {
  bool changed = false;
  for (const auto& [id, v] : after) {
    auto it = before.find(id);
    if (it != before.end() && same_record(it->second, v)) continue;
    batch.puts.emplace_back(key(id), encode(v));
    changed = true;
  }
  for (const auto& [id, v] : before) {
    if (after.contains(id)) continue;
    batch.deletes.push_back(key(id));
    changed = true;
  }
  return changed;
}

}  // namespace

void reconcile(PersistedState& state) {
  auto alive = [&](TargetId t) { return target_alive(state, t); };
  std::map<TargetId, std::vector<TargetState>> in_chains;
  for (auto& [id, chain] : state.routing.chains) {
    rejoin_up_targets(chain, alive);
    WEFT_ASSERT_MSG(check_chain(chain).has_value(), "chain invariant broken by a transition");
    for (const ChainEntry& e : chain.entries) in_chains[e.target_id].push_back(e.state);
  }
  for (auto& [id, t] : state.routing.targets) {
    t.state = summarize_target(alive(id), in_chains[id]);
    // Served (resynced) in every chain of it: it holds those chains' data again.
    const auto& states = in_chains[id];
    if (t.lost_data && !states.empty() &&
        std::all_of(states.begin(), states.end(), [](TargetState s) { return s == TargetState::kServing; }))
      t.lost_data = false;
  }
}

StoreBatch finalize(const PersistedState& before, PersistedState& after) {
  // An edit may also have bumped a chain whose entries it left unchanged
  // (apply_register: a restarted node's chains); each bumps by one either way.
  for (auto& [id, chain] : after.routing.chains) {
    auto it = before.routing.chains.find(id);
    if (it != before.routing.chains.end() &&
        (it->second.entries != chain.entries || it->second.version != chain.version))
      chain.version = it->second.version + 1;
  }
  StoreBatch batch;
  bool changed = diff_map(before.routing.nodes, after.routing.nodes, node_key, batch);
  changed |= diff_map(before.routing.targets, after.routing.targets, target_key, batch);
  changed |= diff_map(before.routing.tables, after.routing.tables, table_key, batch);
  changed |= diff_map(before.routing.chains, after.routing.chains, chain_key, batch);
  // Routing shows the recorded meta store (not its mark: that grows with every create).
  after.routing.meta_store_id = after.meta_store.store_id;
  changed |= before.routing.meta_store_id != after.routing.meta_store_id;
  if (changed) after.routing.version = before.routing.version + 1;
  if (changed || !(before.ids == after.ids)) batch.puts.emplace_back(meta_key(), encode_meta(after.routing.version, after.ids));
  if (!(before.leases == after.leases)) batch.puts.emplace_back(leases_key(), encode_leases(after.leases));
  if (!(before.meta_store == after.meta_store))
    batch.puts.emplace_back(meta_store_key(), encode_meta_store(after.meta_store));
  return batch;
}

Result<void> validate_loaded(const PersistedState& s) {
  auto corrupt = [](std::string what) { return error(Code::kCorruption, "mgmt state: {}", what); };
  for (const auto& [id, n] : s.routing.nodes)
    if (id >= s.ids.next_node) return corrupt(fmt::format("node {} beyond next id {}", id, s.ids.next_node));
  for (const auto& [id, t] : s.routing.targets) {
    if (id >= s.ids.next_target) return corrupt(fmt::format("target {} beyond next id", id));
    if (!s.routing.nodes.contains(t.node_id)) return corrupt(fmt::format("target {} on unknown node {}", id, t.node_id));
  }
  for (const auto& [id, c] : s.routing.chains) {
    if (id >= s.ids.next_chain) return corrupt(fmt::format("chain {} beyond next id", id));
    if (auto ok = check_chain(c); !ok) return corrupt(ok.error().message());
    for (const ChainEntry& e : c.entries)
      if (!s.routing.targets.contains(e.target_id))
        return corrupt(fmt::format("chain {} names unknown target {}", id, e.target_id));
  }
  for (const auto& [id, t] : s.routing.tables) {
    if (id >= s.ids.next_table) return corrupt(fmt::format("chain table {} beyond next id", id));
    for (ChainId c : t.chains)
      if (!s.routing.chains.contains(c)) return corrupt(fmt::format("chain table {} names unknown chain {}", id, c));
  }
  return {};
}

}  // namespace weft::mgmt
