// mgmt/test_util.h
// Helpers shared by the mgmt tests: a ClusterState on a ManualClock with its
// own metrics registry, and shorthands for registering storage nodes.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "common/temp_dir.h"
#include "mgmt/cluster_state.h"

namespace weft::mgmt {
inline void PrintTo(const ChainEntry& e, std::ostream* os) { *os << e.target_id << ":" << to_string(e.state); }
}  // namespace weft::mgmt

namespace weft::mgmt::testing {

using namespace std::chrono_literals;

using weft::testing::TempDir;

struct Harness {
  explicit Harness(std::string db_dir = "", LeaseConfig lease = {.lease = 10s, .grace = 5s});
  // Reopens the state from db_dir (a restart of mgmtd).
  void reopen();

  // Registers a storage node "host<i>:9000" with `targets` targets named t0, t1, ...
  // Their data ids derive from (disk_generation, i, target): a new generation
  // is a node whose disks were replaced.
  RegisterReply add_storage(int i, int targets, uint64_t incarnation = 1, uint64_t disk_generation = 1);
  // Heartbeats node `id` (ASSERTs success).
  HeartbeatReply beat(NodeId id, uint64_t incarnation = 1, std::vector<SyncDoneReport> sync_done = {});
  const ChainInfo& chain(ChainId id);  // from a fresh routing() snapshot
  // Two storage nodes of one target each and a chain table of 2 replicas on
  // them (one chain): the chain, its targets and their nodes.
  struct TwoReplicaChain {
    ChainId id;
    TargetId head, tail;
    NodeId head_node, tail_node;
  };
  TwoReplicaChain two_replica_chain();

  ManualClock clock;
  metrics::Registry registry;
  ClusterOptions options;
  std::unique_ptr<ClusterState> state;
  RoutingInfo snapshot;
};

}  // namespace weft::mgmt::testing
