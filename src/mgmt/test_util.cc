#include "mgmt/test_util.h"

#include <cstdlib>
#include <unistd.h>

#include "common/random.h"

namespace weft::mgmt::testing {

Harness::Harness(std::string db_dir, LeaseConfig lease) {
  options.db_dir = std::move(db_dir);
  options.lease = lease;
  reopen();
}

void Harness::reopen() {
  state.reset();
  auto opened = ClusterState::open(options, clock, registry);
  if (!opened) ADD_FAILURE() << opened.error();
  else state = std::move(*opened);
}

RegisterReply Harness::add_storage(int i, int targets, uint64_t incarnation, uint64_t disk_generation) {
  RegisterRequest r{.kind = NodeKind::kStorage, .address = "host" + std::to_string(i) + ":9000",
                    .incarnation = incarnation};
  for (int t = 0; t < targets; ++t)
    r.targets.push_back({.name = "t" + std::to_string(t),
                         .capacity_bytes = 1ull << 40,
                         .used_bytes = 0,
                         .data_id = (disk_generation << 32) | (uint64_t(i) << 16) | uint64_t(t + 1)});
  auto reply = state->register_node(r);
  EXPECT_TRUE(reply.has_value()) << reply.error();
  return reply.value_or(RegisterReply{});
}

HeartbeatReply Harness::beat(NodeId id, uint64_t incarnation, std::vector<SyncDoneReport> sync_done) {
  auto reply = state->heartbeat({.node_id = id, .incarnation = incarnation, .sync_done = std::move(sync_done)});
  EXPECT_TRUE(reply.has_value()) << reply.error();
  return reply.value_or(HeartbeatReply{});
}

const ChainInfo& Harness::chain(ChainId id) {
  snapshot = state->routing();
  return snapshot.chains.at(id);
}

Harness::TwoReplicaChain Harness::two_replica_chain() {
  NodeId a = add_storage(1, 1).node_id, b = add_storage(2, 1).node_id;
  EXPECT_TRUE(state->create_chain_table({.replicas = 2}).has_value());
  TwoReplicaChain c;
  c.id = state->routing().chains.begin()->first;
  c.head = chain(c.id).entries[0].target_id;
  c.tail = chain(c.id).entries[1].target_id;
  c.head_node = snapshot.targets.at(c.head).node_id;
  c.tail_node = c.head_node == a ? b : a;
  return c;
}

}  // namespace weft::mgmt::testing
