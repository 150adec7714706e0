// mgmt/cluster_state.h
// The cluster manager's state and policies (the core of `weft serve mgmtd`,
// without networking): membership, leases, target states in chains, chain
// tables, the routing version, and their persistence.
//
// Membership. Nodes are identified by address. register_node():
//   - unknown address: new node id, its targets get new target ids;
//   - same address, same incarnation: idempotent (same ids, lease renewed);
//     a node that was declared dead comes back (its targets RETURN);
//   - same address, NEW (higher) incarnation: a restarted process; its targets
//     FAIL in their chains, then RETURN (so they resync as syncing at the tail,
//     except a last-serving one, which simply serves again); every chain
//     holding one of them gets a new version, even if its entries end up as
//     they were (a syncing target syncs again: a new round, see SyncDoneReport);
//   - lower incarnation: kNotPermitted (a zombie of a replaced process);
//   - same address with another kind: kExists.
// Targets are matched by their stable name on the node; a target the node no
// longer lists FAILs. heartbeat(): unknown node id or a newer incarnation ->
// kNotFound telling the caller to re-register; older incarnation ->
// kNotPermitted. It renews the lease, records usage, applies sync-done
// reports, revives a node declared dead, and returns the routing version.
// tick() declares dead every up node whose last heartbeat is older than
// lease + grace (mgmt/lease.h explains why that prevents split brain), not
// counting the time mgmtd itself stalled (see tick()).
// State transitions in chains: mgmt/target_states.h.
//
// Behind. Servers report the highest routing version they have installed
// (register, heartbeat). One above mgmtd's own means mgmtd runs on state older
// than the cluster's (a restored backup, an emptied data_dir): its routing
// would send servers back to chains and targets the cluster has left. mgmtd is
// then "behind" until it restarts: it refuses every register and heartbeat
// (kVersionMismatch naming both versions and the remedy), so leases run out
// and the cluster stops writing rather than lose data; tick() declares no node
// dead and create_chain_table, replace_target and remove_node are refused (no
// routing change). With accept_older_state, mgmtd instead raises its routing
// version to one above the report and every chain's version by the gap plus
// one (a routing version bump moves a chain's version by at most one, so each
// chain ends above any version the cluster used for it), persists that, and
// proceeds: servers install its routing as the newest.
//
// Meta's store. A meta node registers with its store's random id and its
// issued-id mark (every inode id the store handed out is below it; heartbeats
// report the mark as it grows). The first store id mgmtd hears becomes the
// cluster's, and mgmtd keeps the highest mark heard (MetaStoreRecord,
// persisted). A registration with another store id (meta on an empty or
// another data_dir) or a mark below the recorded one (a store restored from an
// older copy) is refused (kNotPermitted, saying what to do): such a store
// would hand out inode ids again whose chunks storage still holds, so new
// files would show and merge into old files' data. `weft serve meta` exits on
// it rather than serve. accept_store_change (the operator's
// `--accept-store-change`) records the new store instead, with the floor its
// ids are raised to (the mark recorded before plus kStoreChangeIdMargin), and
// returns the mark recorded before: meta raises its next id past it (plus
// kStoreChangeIdMargin) before serving; meta also gives the store a new
// id first, so every accepted change makes a store id of its own. Without a
// record (a new cluster, or a state that lost it) there is no mark to raise
// past: accept_store_change is refused then (without it, the first store
// heard is recorded). A meta that reports no store (older than the check) is
// accepted unchecked, with a warning.
// Heartbeats carry the store id too: a running meta whose store is no longer
// the cluster's (another meta's accepted change replaced it) is refused
// (kNotPermitted): its MgmtClient fences itself and the meta stops serving.
// One cut off from mgmtd hears no refusal but loses its lease (and a meta
// without one serves nothing); a meta's registration is answered with
// serve_after, the time until no meta that may serve another store can hold
// a lease (cluster_ops.h replaced_meta_lease_left), and it serves only then.
// mgmtd older than the cluster (see "Behind"): a meta store other than the
// recorded one whose mark is at least the recorded mark plus
// kStoreChangeIdMargin can only have come from an accepted change mgmtd's
// state does not know (a fresh or wrong store counts from the start; an
// older copy is below the mark). With accept_older_state mgmtd records it
// (the cluster's newer view); without, it refuses that meta with
// kVersionMismatch (not final: meta waits) naming --accept-older-state. A
// store below that bound, or the recorded store with a lower mark, is refused
// as above either way: only the meta's --accept-store-change takes it.
//
// Versions. Every operation that changes what a client must see (nodes,
// targets or their states, chains, tables) bumps the routing version by one;
// every chain whose entries changed gets its version bumped by one. Usage
// reports and lease renewals change neither and are not persisted.
// Persistence: each such operation is one synced RocksDB batch; if the write
// fails the operation fails and the in-memory state stays as before. Reopening
// reloads everything; nodes that were up get a full lease from the reopen: the
// longer of the configured lease and the longest one granted before the
// restart (GrantedLeases, persisted): a server may still hold a grant of a
// lease_ms since lowered. open() persists a longer configured lease before
// anything is granted under it; a shorter one replaces the record once no
// grant of the old one can be held (a full old lease + grace after the open).
// The same goes for client leases (leases_at_open(): MgmtService's ClientTable
// waits as long before it calls itself complete).
//
// Threading: every public method is thread-safe (one mutex, short calls; a
// changing operation copies the state, edits the copy, persists, then swaps).
// Invariants: every chain passes check_chain(); every chain's targets sit on
// distinct nodes; ids only grow; routing version never decreases.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/config.h"
#include "common/log_throttle.h"
#include "common/metrics.h"
#include "common/status.h"
#include "mgmt/chain_table.h"
#include "mgmt/lease.h"
#include "mgmt/routing.h"
#include "mgmt/state_codec.h"
#include "mgmt/state_store.h"

namespace weft::mgmt {

inline constexpr size_t kTargetsPerNodeMax = 1024;
// An accepted change of meta's store (see ClusterState, "Meta's store") raises
// the new store's next inode id this far past the mark mgmtd recorded: mgmtd
// hears the mark with each heartbeat, so ids handed out after the last one it
// heard (a heartbeat interval of creates; far more while mgmtd was
// unreachable) are above it. 2^32 of the 2^64 ids: room for billions of
// changes. Also how mgmtd tells a store from a change it does not know of.
inline constexpr uint64_t kStoreChangeIdMargin = uint64_t{1} << 32;
// The routing info goes whole to every server and client (GetRouting, and the
// routing listeners of every storage server): beyond what one RPC body may
// carry, every routing fetch would fail, and the state persists. Registrations
// of new nodes and new chain tables are refused (kTooBig) past these, and any
// registration or table that would make encoded_bytes_bound() of the routing
// pass kRoutingBytesMax (half of an RPC body, mgmt/service.cc checks: room for
// the rest of a Status reply). kNodesMax counts every node known, up or down,
// until `weft admin node remove` forgets a dead one.
inline constexpr size_t kNodesMax = 4096;
inline constexpr size_t kChainTablesMax = 256;
inline constexpr size_t kChainsMax = 32768;
inline constexpr uint64_t kRoutingBytesMax = uint64_t{2} << 20;

struct ClusterOptions {
  LeaseConfig lease;
  std::string db_dir;  // RocksDB directory; empty keeps the state in memory only (tests, tools)
  // The client leases the MgmtService over this state grants (mgmt/client_table.h);
  // persisted like the server lease (GrantedLeases). Lease 0: none.
  LeaseConfig client_lease{.lease = Duration::zero(), .grace = Duration::zero()};
  // `weft serve mgmtd --accept-older-state`: a node reporting a routing version
  // above mgmtd's does not make mgmtd behind; mgmtd raises its versions above
  // the report instead (the operator accepts mgmtd's older view). Likewise a
  // meta store that took over after a change mgmtd's state does not know is
  // recorded (see ClusterState, "Meta's store").
  bool accept_older_state = false;
};

// Reads lease_ms, grace_ms and db_dir from a config table (all optional).
Result<ClusterOptions> cluster_options_from_config(const Config& table);

struct TargetRegistration {
  std::string name;  // stable on its node, e.g. the target directory
  uint64_t capacity_bytes = 0;
  uint64_t used_bytes = 0;
  // Drawn when the target's storage was created (storage::ChunkEngine::data_id);
  // 0: not known (a server older than the field).
  uint64_t data_id = 0;
};

struct RegisterRequest {
  NodeKind kind = NodeKind::kStorage;
  std::string address;       // host:port, the node's identity
  uint64_t incarnation = 0;  // > 0, higher for every restart (e.g. start time in ns)
  std::vector<TargetRegistration> targets;  // storage nodes only
  // The highest routing version the node has installed (0: unknown). Above
  // mgmtd's own: mgmtd is behind (see ClusterState).
  RoutingVersion installed_routing_version = 0;
  // Meta nodes: their store (see ClusterState, "Meta's store"); store_id 0:
  // not told (a meta older than the check).
  MetaStoreRecord meta_store;
  bool accept_store_change = false;  // the operator accepts another store or a lower mark
};

struct RegisterReply {
  NodeId node_id = kInvalidNode;
  std::vector<TargetId> target_ids;  // in the order of the request
  std::vector<TargetId> data_lost;   // known targets that came back with another data id (mgmtd logs them)
  RoutingVersion routing_version = 0;
  Duration lease{};  // a registration is also a heartbeat
  // Meta nodes that reported their store: the highest issued-id mark recorded
  // before this registration (0: none yet).
  bool meta_store_checked = false;
  uint64_t meta_ids_mark = 0;
  // A meta waits this long before it serves: until then another meta may
  // still hold a lease and serve a store this one replaces (cluster_ops.h
  // replaced_meta_lease_left).
  Duration serve_after{};
};

struct TargetUsage {
  TargetId target_id = 0;
  uint64_t used_bytes = 0;
  uint64_t capacity_bytes = 0;
  // The target refuses every update until its server restarts: FAILed in
  // every chain and not reported (so it stays out) until its node registers
  // it again (cluster_ops.h apply_target_failures).
  bool failed = false;
  uint64_t fs_id = 0;          // TargetInfo::fs_id
  uint64_t fs_free_bytes = 0;  // TargetInfo::fs_free_bytes
};

struct SyncDoneReport {
  ChainId chain_id = 0;
  TargetId target_id = 0;
  ChainVersion chain_version = 0;  // the chain version the resync ran at
};

struct HeartbeatRequest {
  NodeId node_id = kInvalidNode;
  uint64_t incarnation = 0;
  std::vector<TargetUsage> usage;
  std::vector<SyncDoneReport> sync_done;
  RoutingVersion installed_routing_version = 0;  // as in RegisterRequest
  uint64_t meta_ids_issued_below = 0;  // meta nodes: their store's mark now (0: not told)
  uint64_t meta_store_id = 0;          // meta nodes: their store (0: not told)
};

struct HeartbeatReply {
  RoutingVersion routing_version = 0;
  Duration lease{};  // valid from when the caller SENT the heartbeat (LeaseKeeper)
};

class ClusterState {
 public:
  static Result<std::unique_ptr<ClusterState>> open(ClusterOptions options, const Clock& clock,
                                                    metrics::Registry& registry = metrics::Registry::global());
  ~ClusterState();
  ClusterState(const ClusterState&) = delete;
  ClusterState& operator=(const ClusterState&) = delete;

  Result<RegisterReply> register_node(const RegisterRequest& request);
  Result<HeartbeatReply> heartbeat(const HeartbeatRequest& request);
  // Declares expired nodes dead; returns their ids. Call every `period`
  // (about once per second at most). A tick that runs more than two periods
  // after the previous one (mgmtd stalled: its lock held by a slow write or
  // table build, the process paused) first excuses the stall: every node's
  // last heartbeat moves forward by the gap less one period (never past now),
  // as at a restart. Heartbeats queued behind the stall were sent in time;
  // counting them missed would declare live nodes dead. Waiting longer is
  // always safe (mgmt/lease.h: a node's own lease runs from when it sent).
  // `period` 0 (tests stepping a ManualClock): no allowance.
  Result<std::vector<NodeId>> tick(Duration period = Duration::zero());
  // Builds a table over the targets of every up storage node (mgmt/chain_table.h).
  Result<ChainTableId> create_chain_table(const ChainTableSpec& spec);
  // A new target takes an offline one's place in its chains (apply_replace_target
  // in mgmt/cluster_ops.h); returns the chains that changed.
  Result<std::vector<ChainId>> replace_target(TargetId old_target, TargetId new_target, bool force = false);
  // Forgets a dead node whose targets are in no chain (apply_remove_node),
  // and everything kept of it in memory: its refusal watch and its
  // weft_mgmt_heartbeat_age_ms series (removed from the registry).
  Result<void> remove_node(NodeId node);
  // An operator's decision for a chain that lost its last copy (every entry
  // offline, target_states.h LOST): `target` serves as it is once up, the
  // others sync from it (apply_promote_target).
  Result<void> promote_target(ChainId chain, TargetId target, bool force = false);

  // The storage node up whose registered address (host:port as its config
  // spells it) `at_address` accepts, if any.
  struct NodeAt {
    NodeId id = kInvalidNode;
    uint64_t incarnation = 0;
    std::string address;  // as registered
  };
  std::optional<NodeAt> storage_node_up_at(const std::function<bool(const std::string&)>& at_address) const;
  // Declares node `id` dead before its lease ran out because mgmtd's own
  // probe found nothing listening at its address (mgmt/refusal_probe.h): only
  // while it is up with `incarnation`, no heartbeat of it arrived after
  // `probe_started` (this clock's time; such a heartbeat proves the process
  // alive), it heartbeated at least once since it registered (before, it may
  // just not listen yet) and mgmtd is not behind. Returns whether it was declared.
  // Safe without the lease rule (mgmt/lease.h): a process that does not
  // listen takes no requests; a write it still forwards from before carries
  // the old chain version, which its successors refuse once they have the new
  // routing, or lands on them (and is kept) before.
  // A node declared so that heartbeats again in the same incarnation was
  // alive (the probe was misled): it is not declared by refusal for
  // kRefusalSuppression after, and mgmtd logs an error.
  Result<bool> declare_refusing(NodeId id, uint64_t incarnation, TimePoint probe_started);
  static constexpr Duration kRefusalSuppression = std::chrono::minutes(10);

  RoutingInfo routing() const;
  RoutingVersion routing_version() const;
  // Counts heartbeats that carried usage: targets' used and capacity bytes
  // change in place, without a new routing version (clients would refetch on
  // every report). A cached copy of routing() is current only when both its
  // version and this generation are.
  uint64_t usage_generation() const;
  // Non-empty while mgmtd is behind: the error refused requests carry.
  std::string behind() const;
  // The cluster's meta store as recorded (store_id 0: none heard yet).
  MetaStoreRecord meta_store() const;
  const ClusterOptions& options() const { return options_; }
  // The longest leases granted before this open (zero: none known, a state
  // written before they were recorded or a new one).
  const GrantedLeases& leases_at_open() const { return leases_at_open_; }
  // The longest leases recorded now: those of this open until the ticker
  // records the configured (lowered) ones, once no grant of the old is held.
  GrantedLeases recorded_leases() const;
  // What is kept in memory per node beyond the routing (tests: none of it
  // outlives its node, so nodes that come and go do not grow mgmtd).
  struct PerNodeEntries {
    size_t refusal_watches = 0;   // declare_refusing's watches
    size_t heartbeat_series = 0;  // weft_mgmt_heartbeat_age_ms series
  };
  PerNodeEntries per_node_entries() const;

 private:
  class Metrics;
  ClusterState(ClusterOptions options, const Clock& clock, metrics::Registry& registry);
  Result<void> load();
  // Edits a copy of the state with fn(PersistedState&) -> Result<T>, then
  // versions, persists and installs the copy. REQUIRES: mu_ held.
  template <class Fn>
  auto mutate(Fn&& fn) -> decltype(fn(std::declval<PersistedState&>()));
  Result<void> commit(PersistedState next);  // REQUIRES: mu_ held
  Result<HeartbeatReply> heartbeat_locked(const HeartbeatRequest& request);
  // A meta node's heartbeat: refuses a store other than the cluster's (or
  // records it: mgmtd older, accept_older_state), records a store when none
  // is, and raises the recorded mark to the report. REQUIRES: mu_ held.
  Result<void> check_meta_heartbeat_locked(const HeartbeatRequest& request);
  // Logs what a meta node's registration did to the recorded store.
  void log_meta_store_locked(const RegisterRequest& request, const MetaStoreRecord& before) const;
  // Logs a refused meta store (kVersionMismatch, which the meta retries, at most every 10 s).
  void log_meta_refusal_locked(const std::string& who, const Status& why) const;
  // Logs that `who`'s store `got` replaced the record `before` (accept_older_state).
  void log_older_store_record_locked(const std::string& who, const MetaStoreRecord& before,
                                     const MetaStoreRecord& got) const;
  // Checks a node's reported routing version: refuses while behind (becoming
  // behind on a report above ours), or raises our versions (accept_older_state).
  // A report far above ours (is_far_version_jump) is refused (kInvalidArgument).
  // REQUIRES: the report comes from a well-formed registration or a registered node.
  Result<void> check_reported_locked(RoutingVersion reported, const std::string& who);
  Result<void> refuse_if_behind_locked() const;
  void log_lost_target_locked(TargetId target) const;  // REQUIRES: mu_ held
  void note_revived_after_refusal_locked(const NodeInfo& node, TimePoint now);  // REQUIRES: mu_ held

  const ClusterOptions options_;
  const Clock& clock_;
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<StateStore> store_;  // null: memory only
  mutable std::mutex mu_;
  PersistedState state_;  // GUARDED_BY(mu_)
  uint64_t usage_generation_ = 0;  // GUARDED_BY(mu_)
  TimePoint last_tick_{};          // GUARDED_BY(mu_): of the previous tick() (or of load())
  GrantedLeases leases_at_open_;   // set by load()
  TimePoint leases_lowered_at_{};  // GUARDED_BY(mu_): when a shorter configured lease may replace the record
  RoutingVersion behind_of_ = 0;   // GUARDED_BY(mu_): highest version reported above ours; 0: not behind
  std::string behind_;             // GUARDED_BY(mu_): the refusal, while behind
  // What declare_refusing needs to know of a node, in memory only.
  struct RefusalWatch {
    // When its last heartbeat since it (last) registered arrived; unset: none
    // yet. Not NodeInfo::last_heartbeat: tick() moves that forward to excuse a
    // stall of mgmtd's, and a stall during a probe then looked like a
    // heartbeat after the probe began.
    std::optional<TimePoint> heard;
    uint64_t declared_incarnation = 0;  // declared by refusal at this incarnation (0: not)
    TimePoint suppressed_until{};       // a misled probe: no declaration by refusal till then
  };
  std::map<NodeId, RefusalWatch> refusal_watch_;  // GUARDED_BY(mu_)
  // Refusals of a meta store from a change mgmtd's state does not know: the
  // meta retries them (kVersionMismatch) several times a second.
  mutable LogThrottle newer_store_log_{std::chrono::seconds(10)};
};

}  // namespace weft::mgmt
