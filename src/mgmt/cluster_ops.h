// mgmt/cluster_ops.h
// The policies behind ClusterState, as functions editing a PersistedState
// value (ClusterState applies them to a copy under its mutex, then persists).
// Internal to the mgmt module. Threading: pure functions on values.
#pragma once

#include <vector>

#include "mgmt/cluster_state.h"

namespace weft::mgmt {

// A target can serve: its node is up and still lists it.
bool target_alive(const PersistedState& state, TargetId target);

Result<RegisterReply> apply_register(PersistedState& state, const RegisterRequest& request, TimePoint now,
                                     Duration lease);
// Whether `got`, a meta store other than the recorded `known`, took over
// after an accepted store change mgmtd's state does not know (mgmtd restored
// from an older backup): it issued ids from at least the recorded mark plus
// kStoreChangeIdMargin (a fresh or wrong store counts from the start).
bool after_unknown_store_change(const MetaStoreRecord& known, const MetaStoreRecord& got);
// Checks a meta node's store `got` against the recorded `known`
// (cluster_state.h, "Meta's store"): nothing recorded or not told, the same
// store with a mark at least the recorded one: fine. Another store:
// kNotPermitted, except one from an unknown change (above): fine with
// accept_older_state, else kVersionMismatch naming --accept-older-state.
// The same store with a lower mark: kNotPermitted at registration; ignored
// for a `running` node (a heartbeat). Messages are one line each, saying what
// to do.
Result<void> check_meta_store(const MetaStoreRecord& known, const MetaStoreRecord& got, bool accept_older_state,
                              bool running);
// Checks a meta node's registration (check_meta_store, unless
// accept_store_change) and records its store: the first store heard, a higher
// mark, or (accept_store_change, or an unknown change with
// accept_older_state) another store or a lower mark, keeping the higher mark.
// accept_store_change without a record is refused (kNotPermitted: no mark to
// raise past). Returns the mark recorded before. Other nodes, and a meta that
// reports no store, change nothing.
Result<uint64_t> apply_meta_store(PersistedState& state, const RegisterRequest& request, bool accept_older_state);
// What a registration must be whatever the state (an address, a kind, an
// incarnation, target names): kInvalidArgument otherwise.
Result<void> check_register(const RegisterRequest& r);
// Errors for unknown nodes and wrong incarnations; renews the lease otherwise.
Result<NodeInfo*> find_heartbeat_node(PersistedState& state, const HeartbeatRequest& request);
// Applies sync-done reports of `node`: a report makes its target serving only
// if the target is the node's, syncing in the chain, and the chain is still at
// the version the resync ran at. Returns why each other report was ignored
// (kStaleRouting: the chain moved on since; a later resync round reports again).
std::vector<Status> apply_sync_done(PersistedState& state, NodeId node, const std::vector<SyncDoneReport>& reports);
// Why each report that does not fit `state` is ignored, without changing it:
// when every report is, apply_sync_done would change nothing (it may ignore
// more: a second report of one target finds it serving), so a heartbeat
// changes nothing persisted.
std::vector<Status> check_sync_done(const PersistedState& state, NodeId node,
                                    const std::vector<SyncDoneReport>& reports);
// The node's own targets its usage reports as failed and that are still
// reported (alive): none means apply_target_failures has nothing to do.
bool has_new_target_failures(const PersistedState& state, NodeId node, const std::vector<TargetUsage>& usage);
// Each of them stops being reported (target_alive false: it does not rejoin)
// and FAILs in every chain; registering it again (a restarted server) brings
// it back. Returns the targets failed.
std::vector<TargetId> apply_target_failures(PersistedState& state, NodeId node, const std::vector<TargetUsage>& usage);
// Records usage of the node's own targets; returns how many reports were ignored.
size_t apply_usage(PersistedState& state, NodeId node, const std::vector<TargetUsage>& usage);
// Marks the node up (again) with a fresh lease.
void revive_node(NodeInfo& node, TimePoint now, Duration lease);
// Marks the node down and FAILs its targets in every chain.
void declare_dead(PersistedState& state, NodeId node);
// Nodes up whose last heartbeat is at least lease + grace old and whose
// lease_expiry (a longer lease granted before a restart) is at least grace past.
std::vector<NodeId> expired_nodes(const PersistedState& state, TimePoint now, const LeaseConfig& lease);
// When mgmtd may declare the up node `node` dead: no lease it was granted can
// be held any more (mgmt/lease.h).
TimePoint lease_surely_over(const NodeInfo& node, const LeaseConfig& lease);
// A meta registering: how long until no meta that may serve another store
// can still hold a lease: every up meta at another address, and with
// accept_store_change the record at its own address too (a former process,
// or this one when its first reply was lost). The meta serves only after it
// (split brain: a meta cut off from mgmtd serves the replaced store until
// its lease runs out). Zero for other nodes, and for a meta alone in the
// cluster that restarts on the cluster's store.
Duration replaced_meta_lease_left(const PersistedState& state, const RegisterRequest& request, TimePoint now,
                                  const LeaseConfig& lease);
Result<ChainTableId> apply_create_table(PersistedState& state, const ChainTableSpec& spec);
// Puts `new_target` where `old_target` stands, offline, in every chain that
// holds it; reconcile() then RETURNs it (syncing: its chain's serving targets
// copy everything to it). Returns those chains. Refused unless old_target is
// offline in each of them (never a target that serves, syncs or holds a
// chain's only copy as last-serving: stop its node first) and new_target is a
// storage target that is alive, in no chain, and on a node that holds no
// other entry of those chains (kInvalidArgument, kNotFound, kNotPermitted).
// The old target stays known, in no chain: if its node comes back, it is a
// spare like any other. In a chain that lost its last copy, an old target
// that may hold its data is replaced only with `force` (the operator accepts
// losing it).
Result<std::vector<ChainId>> apply_replace_target(PersistedState& state, TargetId old_target, TargetId new_target,
                                                  bool force = false);
// Forgets node `node` and its targets. Refused unless the node is down (a
// live one would only register again) and none of its targets is in a chain
// (replace them first). Its ids are never reused: if the address registers
// again, it is a new node with new target ids, in no chain.
Result<void> apply_remove_node(PersistedState& state, NodeId node);
// PROMOTEs `target` in `chain` (target_states.h): kNotFound for an unknown
// chain or a target not in it; kNotPermitted unless every entry is offline,
// and, unless `force`, for a target that came back without its data
// (TargetInfo::lost_data) while another entry did not: the others would
// resync from the empty one and lose what they hold.
Result<void> apply_promote_target(PersistedState& state, ChainId chain, TargetId target, bool force = false);

// RETURNs waiting targets that are alive and recomputes target summaries.
// Call after every edit.
void reconcile(PersistedState& state);
// Bumps (by one) the version of every chain whose entries or version differ
// from `before` and the routing version if anything a client sees differs.
// Returns the records to write.
StoreBatch finalize(const PersistedState& before, PersistedState& after);
// Checks a state loaded from disk: chain invariants, references, id counters.
Result<void> validate_loaded(const PersistedState& state);

}  // namespace weft::mgmt
