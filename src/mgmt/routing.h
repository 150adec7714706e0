// mgmt/routing.h
// Routing info: the cluster as clients and servers see it (nodes, targets,
// chain tables, chains) plus one routing version that increases on every
// change a client must see. mgmtd owns the authoritative copy
// (mgmt/cluster_state.h); everyone else holds snapshots and refetches when a
// heartbeat reply or a request carries a newer routing version.
// route_chain() turns a chain into what the data path needs: the write path
// (head .. tail) and the replicas readable for reads.
// Threading: plain value types; no synchronisation.
// Invariants of a chain (checked by check_chain, kept by mgmt/target_states.h):
//   - its entries are ordered serving*, syncing*, last-serving?, offline*;
//   - it holds at least one serving or exactly one last-serving target, or
//     only offline ones (its last copy was lost: target_states.h, LOST); never none;
//   - last-serving never coexists with serving or syncing entries;
//   - no target appears twice.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/status.h"

namespace weft::mgmt {

using NodeId = uint32_t;
using TargetId = uint64_t;
using ChainId = uint32_t;
using ChainTableId = uint32_t;
using RoutingVersion = uint64_t;
using ChainVersion = uint64_t;

inline constexpr NodeId kInvalidNode = 0;  // ids start at 1

// Values are persisted and go on the wire: never renumber.
enum class NodeKind : uint8_t { kStorage = 1, kMeta = 2, kClient = 3 };
enum class NodeState : uint8_t { kUp = 1, kDown = 2 };
enum class TargetState : uint8_t { kServing = 1, kSyncing = 2, kOffline = 3, kLastServing = 4 };

std::string_view to_string(NodeKind k);
std::string_view to_string(NodeState s);
std::string_view to_string(TargetState s);

struct NodeInfo {
  NodeId id = kInvalidNode;
  NodeKind kind = NodeKind::kStorage;
  std::string address;       // host:port
  uint64_t incarnation = 0;  // grows with every start of the process
  NodeState state = NodeState::kUp;
  TimePoint lease_expiry{};  // on mgmtd's clock: last heartbeat received + lease duration (later
                             // after a restart of mgmtd while a longer lease granted before may be held)
  TimePoint last_heartbeat{};  // on mgmtd's clock; not persisted (leases restart with mgmtd)
  bool operator==(const NodeInfo&) const = default;
};

struct TargetInfo {
  TargetId id = 0;
  NodeId node_id = kInvalidNode;
  std::string name;  // stable name on its node (e.g. the target directory)
  // Summary over the target's chains: last-serving > offline > syncing > serving.
  TargetState state = TargetState::kServing;
  bool reported = true;  // false when its node's last registration did not list it
  uint64_t capacity_bytes = 0;
  uint64_t used_bytes = 0;  // as last reported (heartbeats; not bumping the routing version)
  uint64_t data_id = 0;     // as registered (TargetRegistration::data_id); 0: not known yet
  // Came back without its data (another data id) and has not served in every
  // chain of it since: an operator's promote of it, where another offline
  // replica may still hold the chain's data, needs --force. mgmtd only.
  bool lost_data = false;
  // The filesystem of the target's directory (0: not known) and what it has
  // free for the target, as last reported: targets on one filesystem share
  // its free space (cluster_space()). Not persisted: heartbeats bring them.
  uint64_t fs_id = 0;
  uint64_t fs_free_bytes = 0;
  bool operator==(const TargetInfo&) const = default;
};

struct ChainEntry {
  TargetId target_id = 0;
  TargetState state = TargetState::kServing;
  bool operator==(const ChainEntry&) const = default;
};

struct ChainInfo {
  ChainId id = 0;
  ChainTableId table_id = 0;
  ChainVersion version = 1;
  std::vector<ChainEntry> entries;  // head first
  bool operator==(const ChainInfo&) const = default;
};

struct ChainTableInfo {
  ChainTableId id = 0;
  uint32_t replicas = 0;
  std::vector<ChainId> chains;
  bool operator==(const ChainTableInfo&) const = default;
};

struct RoutingInfo {
  RoutingVersion version = 0;
  std::map<NodeId, NodeInfo> nodes;
  std::map<TargetId, TargetInfo> targets;
  std::map<ChainTableId, ChainTableInfo> tables;
  std::map<ChainId, ChainInfo> chains;
  // The cluster's meta store as mgmtd recorded it (mgmt/cluster_state.h,
  // "Meta's store"; its issued-id mark is not here: it grows with every
  // create). 0: none recorded, or an mgmtd older than the field.
  uint64_t meta_store_id = 0;

  Result<const ChainInfo*> chain(ChainId id) const;
  Result<const TargetInfo*> target(TargetId id) const;
  Result<const NodeInfo*> node(NodeId id) const;
  // The node address serving a target (for the data path).
  Result<std::string> target_address(TargetId id) const;
};

// What the data path needs from one chain.
struct ChainRoute {
  ChainId chain_id = 0;
  ChainVersion version = 0;
  // The replication path: serving targets then syncing ones (a syncing target
  // receives new writes while its predecessor copies the rest). front() is the
  // head that orders writes, back() the tail that commits them.
  std::vector<TargetId> write_path;
  // Serving targets: any of them answers reads with the committed version.
  std::vector<TargetId> readable;

  TargetId head() const { return write_path.front(); }
  TargetId tail() const { return write_path.back(); }
};

// kUnavailable when the chain has no serving target (its last-serving target is
// down: neither writes nor reads until it returns).
Result<ChainRoute> route_chain(const ChainInfo& chain);

// Every entry offline: the chain lost its last copy (mgmt/target_states.h,
// LOST) and serves nothing until an operator promotes one.
bool lost_last_copy(const ChainInfo& chain);

// kInternal describing the first broken invariant (see the header comment).
Result<void> check_chain(const ChainInfo& chain);

// Every node's address travels in every routing snapshot.
inline constexpr size_t kAddressBytesMax = 255;

// Validates "host:port" (host non-empty, port 1..65535; "[v6]:port" allowed;
// at most kAddressBytesMax bytes).
Result<void> check_address(std::string_view address);

// At least the size of `info` encoded as proto/mgmt.proto's Routing: ids,
// states and strings as they are, every number that changes in place
// (versions, times, incarnations, usage) at its widest, so the bound does not
// move while the shape stays. Keep in step with the proto (proto_convert_test
// checks it against the real encoding).
uint64_t encoded_bytes_bound(const RoutingInfo& info);

// The cluster's raw space over its targets, as last reported. Targets on one
// filesystem (the same fs_id) share its free space: it counts once for them
// (at most the sum of what each may still take, capacity - used, and at most
// the filesystem's free bytes). A target of unknown filesystem counts alone.
struct SpaceTotals {
  uint64_t capacity_bytes = 0;  // used + free
  uint64_t used_bytes = 0;
};
SpaceTotals cluster_space(const RoutingInfo& info);

}  // namespace weft::mgmt
