// mgmt/state_codec.h
// Binary encoding of mgmtd's persistent state, one RocksDB record per object:
//   "V"            -> meta: format, routing version, next ids
//   "N" + be32 id  -> node   (id, kind, address, incarnation, state)
//   "T" + be64 id  -> target (id, node, name, reported, capacity, used)
//   "B" + be32 id  -> chain table (id, replicas, chain ids)
//   "C" + be32 id  -> chain  (id, table, version, entries)
//   "S"            -> the cluster's meta store: its id and the highest
//                     issued-id mark heard (mgmt/cluster_state.h). Absent in
//                     a state written before it (or before any meta
//                     reported): none known.
//   "L"            -> the longest leases granted that may still be held
//                     (server, client; ns). Absent in a state written before
//                     it existed (zero: nothing known). An mgmtd older than
//                     the record refuses the state (unknown key).
// Values start with a format byte; integers are little-endian fixed width.
// Nodes' leases and heartbeat times are not stored (they restart with mgmtd); target
// summary states are recomputed on load. Decoding never trusts the bytes:
// anything malformed is kCorruption naming the key.
// Threading: pure functions.
#pragma once

#include <string>
#include <string_view>

#include "common/clock.h"
#include "common/status.h"
#include "mgmt/routing.h"

namespace weft::mgmt {

struct IdCounters {
  NodeId next_node = 1;
  TargetId next_target = 1;
  ChainId next_chain = 1;
  ChainTableId next_table = 1;
  bool operator==(const IdCounters&) const = default;
};

// The longest leases mgmtd granted (and whose grants may still be held):
// after a restart it waits the longer of these and the configured leases
// before counting a missing heartbeat (mgmt/cluster_state.h).
struct GrantedLeases {
  Duration server{};
  Duration client{};
  bool operator==(const GrantedLeases&) const = default;
};

// The cluster's meta store (mgmt/cluster_state.h, "Meta's store"): its
// random id (0: none heard yet) and the highest issued-id mark a meta of it
// reported (every inode id it handed out then was below it).
struct MetaStoreRecord {
  uint64_t store_id = 0;
  uint64_t ids_issued_below = 0;
  bool operator==(const MetaStoreRecord&) const = default;
};

// Everything mgmtd persists (RoutingInfo's version, nodes, targets, tables,
// chains, the leases granted, and the meta store).
struct PersistedState {
  RoutingInfo routing;
  IdCounters ids;
  GrantedLeases leases;
  MetaStoreRecord meta_store;
};

inline constexpr uint8_t kRecordFormat = 1;

std::string meta_key();
std::string node_key(NodeId id);
std::string target_key(TargetId id);
std::string table_key(ChainTableId id);
std::string chain_key(ChainId id);
std::string leases_key();
std::string meta_store_key();

std::string encode_meta(RoutingVersion version, const IdCounters& ids);
std::string encode_node(const NodeInfo& node);
std::string encode_target(const TargetInfo& target);
std::string encode_table(const ChainTableInfo& table);
std::string encode_chain(const ChainInfo& chain);
std::string encode_leases(const GrantedLeases& leases);
std::string encode_meta_store(const MetaStoreRecord& record);

// Decodes one record into `out` (dispatching on the key's prefix).
Result<void> decode_record(std::string_view key, std::string_view value, PersistedState& out);

}  // namespace weft::mgmt
