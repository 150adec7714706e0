#include "mgmt/cluster_state.h"

#include <algorithm>
#include <set>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include "mgmt/test_util.h"

namespace weft::mgmt {
namespace {

using namespace std::chrono_literals;
using testing::Harness;
using testing::TempDir;

constexpr auto S = TargetState::kServing;
constexpr auto Y = TargetState::kSyncing;
constexpr auto O = TargetState::kOffline;
constexpr auto L = TargetState::kLastServing;

// Two storage nodes of one target each in one chain, the tail's lease run
// out and its node back: the tail syncs (a resync round at the chain's version).
Harness::TwoReplicaChain chain_with_a_syncing_tail(Harness& h) {
  Harness::TwoReplicaChain c = h.two_replica_chain();
  h.clock.advance(16s);
  h.beat(c.head_node);
  EXPECT_TRUE(h.state->tick().has_value());
  h.beat(c.tail_node);
  EXPECT_EQ(h.chain(c.id).entries, (std::vector<ChainEntry>{{c.head, S}, {c.tail, Y}}));
  return c;
}

TEST(ClusterState, RegisterAssignsIdsAndSameIncarnationIsIdempotent) {
  Harness h;
  RoutingVersion v0 = h.state->routing_version();
  RegisterReply a = h.add_storage(1, 2);
  EXPECT_EQ(a.node_id, 1u);
  EXPECT_EQ(a.target_ids, (std::vector<TargetId>{1, 2}));
  EXPECT_EQ(a.lease, 10s);
  EXPECT_GT(a.routing_version, v0);
  RegisterReply again = h.add_storage(1, 2);
  EXPECT_EQ(again.node_id, a.node_id);
  EXPECT_EQ(again.target_ids, a.target_ids);
  EXPECT_EQ(again.routing_version, a.routing_version) << "an idempotent registration changes nothing";
  RegisterReply b = h.add_storage(2, 1);
  EXPECT_EQ(b.node_id, 2u);
  EXPECT_EQ(b.target_ids, (std::vector<TargetId>{3}));
  RoutingInfo r = h.state->routing();
  EXPECT_EQ(r.nodes.at(1).address, "host1:9000");
  EXPECT_EQ(r.targets.at(2).name, "t1");
  EXPECT_EQ(r.targets.at(3).node_id, 2u);
}

TEST(ClusterState, RegistrationErrors) {
  Harness h;
  h.add_storage(1, 1, /*incarnation=*/5);
  auto reg = [&](RegisterRequest r) { return h.state->register_node(r); };
  EXPECT_EQ(reg({.kind = NodeKind::kMeta, .address = "host1:9000", .incarnation = 9}).error().code(), Code::kExists);
  EXPECT_EQ(reg({.kind = NodeKind::kStorage, .address = "host1:9000", .incarnation = 4}).error().code(),
            Code::kNotPermitted);
  EXPECT_EQ(reg({.kind = NodeKind::kStorage, .address = "nohost", .incarnation = 1}).error().code(),
            Code::kInvalidArgument);
  EXPECT_EQ(reg({.kind = NodeKind::kStorage, .address = "h:1", .incarnation = 0}).error().code(),
            Code::kInvalidArgument);
  EXPECT_EQ(reg({.kind = NodeKind::kClient, .address = "h:1", .incarnation = 1, .targets = {{.name = "x"}}})
                .error().code(),
            Code::kInvalidArgument);
  EXPECT_EQ(reg({.kind = NodeKind::kStorage, .address = "h:1", .incarnation = 1,
                 .targets = {{.name = "x"}, {.name = "x"}}}).error().code(),
            Code::kInvalidArgument);
  EXPECT_EQ(h.state->routing().nodes.size(), 1u) << "failed registrations leave no trace";
}

TEST(ClusterState, HeartbeatFromUnknownNodeOrIncarnationSaysReRegister) {
  Harness h;
  RegisterReply a = h.add_storage(1, 1, 7);
  auto unknown = h.state->heartbeat({.node_id = 42, .incarnation = 1});
  ASSERT_FALSE(unknown.has_value());
  EXPECT_EQ(unknown.error().code(), Code::kNotFound);
  EXPECT_NE(unknown.error().message().find("re-register"), std::string::npos) << unknown.error();
  auto newer = h.state->heartbeat({.node_id = a.node_id, .incarnation = 8});
  ASSERT_FALSE(newer.has_value());
  EXPECT_EQ(newer.error().code(), Code::kNotFound);
  EXPECT_NE(newer.error().message().find("re-register"), std::string::npos);
  auto older = h.state->heartbeat({.node_id = a.node_id, .incarnation = 6});
  ASSERT_FALSE(older.has_value());
  EXPECT_EQ(older.error().code(), Code::kNotPermitted);
  HeartbeatReply ok = h.beat(a.node_id, 7);
  EXPECT_EQ(ok.routing_version, h.state->routing_version());
  EXPECT_EQ(ok.lease, 10s);
}

TEST(ClusterState, LeaseExpiresOnlyAfterLeasePlusGraceSinceLastHeartbeat) {
  Harness h;
  NodeId n = h.add_storage(1, 1).node_id;
  h.clock.advance(8s);
  h.beat(n);
  h.clock.advance(15s - 1ns);
  EXPECT_TRUE(h.state->tick()->empty());
  EXPECT_EQ(h.state->routing().nodes.at(n).state, NodeState::kUp);
  h.clock.advance(1ns);
  EXPECT_EQ(*h.state->tick(), std::vector<NodeId>{n});
  EXPECT_EQ(h.state->routing().nodes.at(n).state, NodeState::kDown);
  EXPECT_TRUE(h.state->tick()->empty()) << "declared once";
}

// mgmtd's probe found nothing listening at a storage node's address: the node
// is declared dead at once, its chains move on, long before lease + grace. Not
// when it heartbeated after the probe began (alive), not for another
// incarnation (a restarted process), not twice, not while mgmtd is behind.
TEST(ClusterState, ANodeRefusingConnectionsIsDeclaredDeadBeforeItsLeaseRunsOut) {
  Harness h;
  auto c = h.two_replica_chain();
  const std::string tail_address = h.state->routing().nodes.at(c.tail_node).address;
  ASSERT_TRUE(h.state->register_node({.kind = NodeKind::kMeta, .address = "meta:1", .incarnation = 1}));
  auto up_at = [&](const std::string& address) {
    return h.state->storage_node_up_at([&](const std::string& registered) { return registered == address; });
  };
  EXPECT_FALSE(up_at("meta:1")) << "only storage nodes are probed";
  EXPECT_FALSE(up_at("nobody:1"));
  auto at = up_at(tail_address);
  ASSERT_TRUE(at);
  EXPECT_EQ(at->id, c.tail_node);
  const ChainVersion v0 = h.chain(c.id).version;
  EXPECT_FALSE(*h.state->declare_refusing(at->id, at->incarnation, h.clock.now()))
      << "no heartbeat since it registered: it may not listen yet";

  TimePoint probe = h.clock.now();
  h.clock.advance(1ms);
  h.beat(c.tail_node);
  EXPECT_FALSE(*h.state->declare_refusing(at->id, at->incarnation, probe)) << "it heartbeated after the probe began";
  probe = h.clock.now();
  h.clock.advance(1ms);
  EXPECT_FALSE(*h.state->declare_refusing(at->id, at->incarnation + 1, probe)) << "another incarnation";
  EXPECT_EQ(h.state->routing().nodes.at(c.tail_node).state, NodeState::kUp);

  auto declared = h.state->declare_refusing(at->id, at->incarnation, probe);
  ASSERT_TRUE(declared) << declared.error();
  EXPECT_TRUE(*declared);
  EXPECT_EQ(h.state->routing().nodes.at(c.tail_node).state, NodeState::kDown);
  EXPECT_EQ(h.chain(c.id).entries, (std::vector<ChainEntry>{{c.head, S}, {c.tail, O}}));
  EXPECT_GT(h.chain(c.id).version, v0);
  EXPECT_FALSE(*h.state->declare_refusing(at->id, at->incarnation, h.clock.now())) << "declared once";
  EXPECT_FALSE(up_at(tail_address));
  EXPECT_TRUE(h.state->tick()->empty()) << "the lease check finds nothing left to declare";

  // The same process heartbeats again: it was alive, the probe was misled
  // (e.g. a REJECT rule). Not declared by refusal for a while (no flapping).
  h.beat(c.tail_node);
  EXPECT_EQ(h.state->routing().nodes.at(c.tail_node).state, NodeState::kUp);
  h.clock.advance(1ms);
  EXPECT_FALSE(*h.state->declare_refusing(at->id, at->incarnation, h.clock.now())) << "suppressed after a misled probe";
  h.clock.advance(ClusterState::kRefusalSuppression);
  h.beat(c.tail_node);
  h.beat(c.head_node);
  h.clock.advance(1ms);
  EXPECT_TRUE(*h.state->declare_refusing(at->id, at->incarnation, h.clock.now())) << "the pause is over";
  // A restarted process (new incarnation) after such a declaration: the refusal was right, no pause.
  h.add_storage(tail_address == "host1:9000" ? 1 : 2, 1, /*incarnation=*/2);
  ASSERT_EQ(up_at(tail_address)->incarnation, 2u);
  h.beat(c.tail_node, 2);
  h.clock.advance(1ms);
  EXPECT_TRUE(*h.state->declare_refusing(at->id, 2, h.clock.now()));

  // Behind (a node reported a routing version above mgmtd's): no routing change.
  auto above = h.state->heartbeat({.node_id = c.head_node, .incarnation = 1,
                                   .installed_routing_version = h.state->routing_version() + 100});
  ASSERT_FALSE(above);
  ASSERT_FALSE(h.state->behind().empty());
  EXPECT_FALSE(*h.state->declare_refusing(c.head_node, 1, h.clock.now()));
  EXPECT_EQ(h.state->routing().nodes.at(c.head_node).state, NodeState::kUp);
}

// A stall of mgmtd excused by a late tick (it moves every node's last
// heartbeat forward) during a probe is no heartbeat after the probe began: the
// node that refuses connections is still declared. (It was "kept", left to its
// lease, whenever mgmtd was slow: seen in mgmt_service_test on a loaded machine.)
TEST(ClusterState, AStallExcusedDuringAProbeIsNotAHeartbeatAfterIt) {
  Harness h;
  auto c = h.two_replica_chain();
  const std::string tail_address = h.state->routing().nodes.at(c.tail_node).address;
  auto at = h.state->storage_node_up_at([&](const std::string& registered) { return registered == tail_address; });
  ASSERT_TRUE(at);
  EXPECT_TRUE(h.state->tick(20ms)->empty());
  h.beat(c.tail_node);
  h.clock.advance(1ms);
  const TimePoint probe = h.clock.now();
  h.clock.advance(63ms);  // the probe runs; the next tick (every 20 ms) comes 64 ms after the last
  EXPECT_TRUE(h.state->tick(20ms)->empty());
  EXPECT_GT(h.state->routing().nodes.at(c.tail_node).last_heartbeat, probe) << "44 ms excused";
  auto declared = h.state->declare_refusing(at->id, at->incarnation, probe);
  ASSERT_TRUE(declared) << declared.error();
  EXPECT_TRUE(*declared) << "the excused stall was taken for a heartbeat after the probe began";
  EXPECT_EQ(h.state->routing().nodes.at(c.tail_node).state, NodeState::kDown);
}

// mgmtd stalls (its lock held, the process paused) for longer than a lease:
// the heartbeats queued meanwhile were sent in time, so the first tick after
// the stall must not declare their nodes dead. The stall is excused (every
// node's heartbeat age loses the gap less one tick period); a node that really
// stopped is declared dead a full lease + grace after its last heartbeat,
// stall excluded. Ticks on time still expire nodes as before.
TEST(ClusterState, ALateTickExcusesTheStallInsteadOfDeclaringLiveNodesDead) {
  Harness h;  // lease 10 s + grace 5 s
  NodeId a = h.add_storage(1, 1).node_id, b = h.add_storage(2, 1).node_id;
  ASSERT_TRUE(h.state->create_chain_table({.replicas = 2}).has_value());
  for (int i = 0; i < 3; ++i) {
    h.clock.advance(1s);
    h.beat(a);
    h.beat(b);
    EXPECT_TRUE(h.state->tick(1s)->empty());
  }
  h.clock.advance(20s);  // the stall; a's and b's heartbeats wait behind it
  EXPECT_TRUE(h.state->tick(1s)->empty()) << "a stalled mgmtd declares nobody dead";
  EXPECT_EQ(h.state->routing().nodes.at(a).state, NodeState::kUp);
  h.beat(a);  // a's queued heartbeat; b's server died during the stall
  for (int i = 0; i < 13; ++i) {
    h.clock.advance(1s);
    h.beat(a);
    EXPECT_TRUE(h.state->tick(1s)->empty()) << i;
  }
  h.clock.advance(1s);  // 15 s after b's last heartbeat, the stall (less one period) not counted
  h.beat(a);
  EXPECT_EQ(*h.state->tick(1s), std::vector<NodeId>{b});
  EXPECT_EQ(h.state->routing().nodes.at(a).state, NodeState::kUp);
}

// The data path modelled on chain contents: every write goes down the write
// path and is acknowledged only if every target on it is alive; serving
// replicas must hold every acknowledged write at all times.
class WriteModel {
 public:
  explicit WriteModel(Harness& h, ChainId chain) : h_(h), chain_(chain) {}
  std::set<NodeId> killed;

  // Returns whether the write was acknowledged.
  bool write() {
    int id = next_++;
    RoutingInfo r = h_.state->routing();
    auto route = route_chain(r.chains.at(chain_));
    if (!route) return false;
    for (TargetId t : route->write_path)
      if (killed.contains(r.targets.at(t).node_id)) return false;  // stalls; the client retries later
    for (TargetId t : route->write_path) data_[t].insert(id);
    acked_.insert(id);
    heads_.insert(route->head());
    return true;
  }
  // The syncing target's predecessor copies what differs.
  void sync(TargetId t) {
    auto route = route_chain(h_.chain(chain_));
    ASSERT_TRUE(route.has_value());
    data_[t].insert(data_[route->head()].begin(), data_[route->head()].end());
  }
  void check_serving_replicas_complete() {
    auto route = route_chain(h_.chain(chain_));
    if (!route) return;
    for (TargetId t : route->readable)
      for (int id : acked_) ASSERT_TRUE(data_[t].contains(id)) << "target " << t << " misses write " << id;
  }
  size_t acked() const { return acked_.size(); }

 private:
  Harness& h_;
  ChainId chain_;
  int next_ = 0;
  std::map<TargetId, std::set<int>> data_;
  std::set<int> acked_;
  std::set<TargetId> heads_;
};

TEST(ClusterState, KilledServerLeavesChainWritesContinueThenResyncsAtTail) {
  Harness h;
  std::vector<RegisterReply> nodes;
  for (int i = 1; i <= 3; ++i) nodes.push_back(h.add_storage(i, 1));
  auto table = h.state->create_chain_table({.replicas = 3});
  ASSERT_TRUE(table.has_value()) << table.error();
  ChainId id = h.state->routing().tables.at(*table).chains.at(0);
  ChainInfo before = h.chain(id);
  ASSERT_EQ(before.entries.size(), 3u);
  TargetId victim_target = before.entries[1].target_id;  // the middle replica
  NodeId victim = h.snapshot.targets.at(victim_target).node_id;

  WriteModel model(h, id);
  model.killed.insert(victim);
  RoutingVersion v = h.state->routing_version();
  for (int second = 0; second < 20; ++second) {  // the victim stops heartbeating
    for (const auto& n : nodes)
      if (n.node_id != victim) h.beat(n.node_id);
    model.write();
    model.check_serving_replicas_complete();
    h.clock.advance(1s);
    ASSERT_TRUE(h.state->tick().has_value());
  }
  ChainInfo shrunk = h.chain(id);
  EXPECT_EQ(shrunk.version, before.version + 1);
  EXPECT_GT(h.state->routing_version(), v);
  EXPECT_EQ(shrunk.entries, (std::vector<ChainEntry>{{before.entries[0].target_id, S},
                                                     {before.entries[2].target_id, S},
                                                     {victim_target, O}}));
  auto route = route_chain(shrunk);
  ASSERT_TRUE(route.has_value());
  EXPECT_EQ(route->head(), before.entries[0].target_id);
  EXPECT_EQ(route->tail(), before.entries[2].target_id);
  size_t acked_before = model.acked();
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(model.write()) << "writes continue on the shorter chain";
  EXPECT_EQ(model.acked(), acked_before + 5);
  EXPECT_EQ(h.state->routing().targets.at(victim_target).state, O);

  // The server comes back (same process, network healed): syncing at the tail.
  model.killed.clear();
  h.beat(victim);
  ChainInfo rejoined = h.chain(id);
  EXPECT_EQ(rejoined.version, before.version + 2);
  EXPECT_EQ(rejoined.entries.back(), (ChainEntry{victim_target, Y}));
  EXPECT_EQ(route_chain(rejoined)->tail(), victim_target);
  EXPECT_EQ(route_chain(rejoined)->readable.size(), 2u) << "a syncing target is not read";
  EXPECT_TRUE(model.write());
  model.sync(victim_target);
  h.beat(victim, 1, {{id, victim_target, rejoined.version}});
  ChainInfo healed = h.chain(id);
  EXPECT_EQ(healed.version, before.version + 3);
  EXPECT_EQ(healed.entries.back(), (ChainEntry{victim_target, S}));
  EXPECT_EQ(h.snapshot.targets.at(victim_target).state, S);
  model.check_serving_replicas_complete();
}

TEST(ClusterState, LastServingReplicaKeepsChainUntilItReturnsWithoutResync) {
  Harness h;
  auto [id, head, tail, head_node, tail_node] = h.two_replica_chain();

  h.clock.advance(16s);  // both leases ran out, but the head renews in time:
  h.beat(head_node);     // only the tail is lost
  ASSERT_TRUE(h.state->tick().has_value());
  EXPECT_EQ(h.chain(id).entries, (std::vector<ChainEntry>{{head, S}, {tail, O}}));
  h.clock.advance(16s);  // now the head dies too: it holds the only current copy
  ASSERT_TRUE(h.state->tick().has_value());
  EXPECT_EQ(h.chain(id).entries, (std::vector<ChainEntry>{{head, L}, {tail, O}}));
  EXPECT_EQ(route_chain(h.chain(id)).error().code(), Code::kUnavailable);
  EXPECT_EQ(h.snapshot.targets.at(head).state, L);

  h.beat(tail_node);  // the stale replica returns first: it must wait
  EXPECT_EQ(h.chain(id).entries, (std::vector<ChainEntry>{{head, L}, {tail, O}}));
  EXPECT_EQ(h.snapshot.targets.at(tail).state, O);
  ChainVersion v = h.chain(id).version;
  h.beat(head_node);  // the last-serving one returns: serving at once, the other rejoins syncing
  EXPECT_EQ(h.chain(id).entries, (std::vector<ChainEntry>{{head, S}, {tail, Y}}));
  EXPECT_EQ(h.chain(id).version, v + 1);
  h.beat(tail_node, 1, {{id, tail, v + 1}});
  EXPECT_EQ(h.chain(id).entries, (std::vector<ChainEntry>{{head, S}, {tail, S}}));
}

// The chain's last copy is on a server whose disk is replaced while it is
// down: it comes back with another data id. Serving it (as a last-serving
// target that simply returns) would make it the resync source of the other
// replica, which holds the data, and empty that one too. Instead the chain
// serves nothing until an operator promotes the copy left.
TEST(ClusterState, ALastServingTargetBackWithoutItsDataServesNothingUntilPromoted) {
  Harness h;
  auto [id, head, tail, head_node, tail_node] = h.two_replica_chain();
  const int head_host = h.snapshot.nodes.at(head_node).address == "host1:9000" ? 1 : 2;
  h.clock.advance(16s);  // the tail is lost, then the head: it holds the only copy
  h.beat(head_node);
  ASSERT_TRUE(h.state->tick().has_value());
  h.clock.advance(16s);
  ASSERT_TRUE(h.state->tick().has_value());
  ASSERT_EQ(h.chain(id).entries, (std::vector<ChainEntry>{{head, L}, {tail, O}}));
  EXPECT_EQ(h.state->promote_target(id, tail).error().code(), Code::kNotPermitted) << "a last copy needs no decision";

  RegisterReply back = h.add_storage(head_host, 1, /*incarnation=*/2, /*disk_generation=*/2);
  EXPECT_EQ(back.data_lost, (std::vector<TargetId>{head}));
  EXPECT_EQ(h.chain(id).entries, (std::vector<ChainEntry>{{tail, O}, {head, O}}));
  EXPECT_EQ(route_chain(h.chain(id)).error().code(), Code::kUnavailable);
  h.beat(tail_node);  // the other replica returns: nothing serves to sync it from, nothing is copied from the empty one
  EXPECT_EQ(h.chain(id).entries, (std::vector<ChainEntry>{{tail, O}, {head, O}}));
  h.add_storage(head_host, 1, /*incarnation=*/3, /*disk_generation=*/2);  // restarted again, same disk: no new loss
  EXPECT_EQ(h.chain(id).entries, (std::vector<ChainEntry>{{tail, O}, {head, O}}));

  EXPECT_EQ(h.state->promote_target(id + 1000, tail).error().code(), Code::kNotFound);
  EXPECT_EQ(h.state->promote_target(id, 4242).error().code(), Code::kNotFound);
  ChainVersion v = h.chain(id).version;
  ASSERT_TRUE(h.state->promote_target(id, tail).has_value());  // the operator's choice: the copy left
  EXPECT_EQ(h.chain(id).entries, (std::vector<ChainEntry>{{tail, S}, {head, Y}}));
  EXPECT_GT(h.chain(id).version, v);
  EXPECT_EQ(h.state->promote_target(id, head).error().code(), Code::kNotPermitted) << "the chain serves again";
  h.beat(head_node, 3, {{id, head, h.chain(id).version}});
  EXPECT_EQ(h.chain(id).entries, (std::vector<ChainEntry>{{tail, S}, {head, S}}));
}

// A target whose disk was replaced while its chain had nothing serving comes
// back offline, as it was: only its data id changed, and that must reach
// mgmtd's store too. Reloaded with the old id, mgmtd would take the target
// for one without its data once it resynced and holds the chain's writes.
TEST(ClusterState, ANewDataIdIsPersistedWhenNothingElseOfTheTargetChanged) {
  TempDir dir;
  Harness h(dir.path());
  auto [id, head, tail, head_node, tail_node] = h.two_replica_chain();
  const int tail_host = h.snapshot.nodes.at(tail_node).address == "host1:9000" ? 1 : 2;
  h.clock.advance(16s);  // the tail is lost, then the head
  h.beat(head_node);
  ASSERT_TRUE(h.state->tick().has_value());
  h.clock.advance(16s);
  ASSERT_TRUE(h.state->tick().has_value());
  ASSERT_EQ(h.chain(id).entries, (std::vector<ChainEntry>{{head, L}, {tail, O}}));
  h.add_storage(tail_host, 1, /*incarnation=*/2, /*disk_generation=*/2);  // a new disk; nothing to sync from
  ASSERT_EQ(h.chain(id).entries, (std::vector<ChainEntry>{{head, L}, {tail, O}}));
  const uint64_t new_id = (uint64_t{2} << 32) | (uint64_t(tail_host) << 16) | 1;
  EXPECT_EQ(h.state->routing().targets.at(tail).data_id, new_id);
  h.reopen();
  EXPECT_EQ(h.state->routing().targets.at(tail).data_id, new_id) << "mgmtd's store kept the old disk's id";
}

// A target that lost its data while another replica serves simply resyncs, as
// after any restart; a server that reports no data id (older than the field)
// proves nothing either way.
TEST(ClusterState, ATargetBackWithoutItsDataBesideAServingReplicaResyncs) {
  Harness h;
  auto [id, head, tail, head_node, tail_node] = h.two_replica_chain();
  const int tail_host = h.snapshot.nodes.at(tail_node).address == "host1:9000" ? 1 : 2;
  RegisterReply back = h.add_storage(tail_host, 1, /*incarnation=*/2, /*disk_generation=*/2);
  EXPECT_EQ(back.data_lost, (std::vector<TargetId>{tail}));
  EXPECT_EQ(h.chain(id).entries, (std::vector<ChainEntry>{{head, S}, {tail, Y}}));
  RegisterRequest unknown{.kind = NodeKind::kStorage,
                          .address = h.snapshot.nodes.at(tail_node).address,
                          .incarnation = 3,
                          .targets = {{.name = "t0", .capacity_bytes = 1ull << 40, .data_id = 0}}};
  auto again = h.state->register_node(unknown);
  ASSERT_TRUE(again.has_value()) << again.error();
  EXPECT_TRUE(again->data_lost.empty());
  EXPECT_EQ(h.state->routing().targets.at(tail).data_id, (uint64_t{2} << 32) | (uint64_t(tail_host) << 16) | 1)
      << "the known data id stays";
}

// A storage server that comes back under another address (or with its
// target directory moved) registers a target mgmtd knows by its data id: it
// keeps its id and its chains (registered as new, the chains' old target
// could never be replaced while it was their last copy, and the new one's
// chunks would be swept as strays). While the target's node is up and
// serving it, the same data elsewhere is refused.
TEST(ClusterState, ATargetBackUnderAnotherAddressKeepsItsIdAndChains) {
  Harness h;
  auto [id, head, tail, head_node, tail_node] = h.two_replica_chain();
  const int tail_host = h.snapshot.nodes.at(tail_node).address == "host1:9000" ? 1 : 2;
  const int head_host = 3 - tail_host;
  const uint64_t tail_data = (uint64_t{1} << 32) | (uint64_t(tail_host) << 16) | 1;
  const uint64_t head_data = (uint64_t{1} << 32) | (uint64_t(head_host) << 16) | 1;
  auto register_at = [&](const std::string& address, const std::string& name, uint64_t data_id) {
    return h.state->register_node({.kind = NodeKind::kStorage, .address = address, .incarnation = 1,
                                   .targets = {{.name = name, .capacity_bytes = 1ull << 40, .data_id = data_id}}});
  };
  auto copied = register_at("host9:9000", "t0", head_data);
  ASSERT_FALSE(copied.has_value()) << "took over target " << copied->target_ids[0] << " from a live node";
  EXPECT_EQ(copied.error().code(), Code::kExists) << copied.error();
  h.clock.advance(16s);  // the tail's server is gone
  h.beat(head_node);
  ASSERT_TRUE(h.state->tick().has_value());
  ASSERT_EQ(h.chain(id).entries, (std::vector<ChainEntry>{{head, S}, {tail, O}}));
  auto moved = register_at("host9:9000", "/new/path/t0", tail_data);
  ASSERT_TRUE(moved.has_value()) << moved.error();
  EXPECT_EQ(moved->target_ids, (std::vector<TargetId>{tail})) << "registered as a new target";
  EXPECT_TRUE(moved->data_lost.empty());
  RoutingInfo r = h.state->routing();
  EXPECT_EQ(r.targets.at(tail).node_id, moved->node_id);
  EXPECT_EQ(r.targets.at(tail).name, "/new/path/t0");
  EXPECT_EQ(r.targets.size(), 2u);
  h.beat(moved->node_id);
  h.beat(head_node);
  ASSERT_TRUE(h.state->tick().has_value());
  EXPECT_EQ(h.chain(id).entries, (std::vector<ChainEntry>{{head, S}, {tail, Y}})) << "it rejoins to resync";
}

// A dead node's target directory moved to the node that holds the other
// replica of its chain: taking it over would put both copies on one node
// (they would fail together), so the registration is refused and the chain
// stays as it was.
TEST(ClusterState, ATargetMovedOntoTheNodeOfItsChainsOtherReplicaIsRefused) {
  Harness h;
  auto [id, head, tail, head_node, tail_node] = h.two_replica_chain();
  const std::string head_address = h.snapshot.nodes.at(head_node).address;
  const int tail_host = head_address == "host1:9000" ? 2 : 1;
  const int head_host = 3 - tail_host;
  const uint64_t tail_data = (uint64_t{1} << 32) | (uint64_t(tail_host) << 16) | 1;
  const uint64_t head_data = (uint64_t{1} << 32) | (uint64_t(head_host) << 16) | 1;
  h.clock.advance(16s);  // the tail's server is gone
  h.beat(head_node);
  ASSERT_TRUE(h.state->tick().has_value());
  ASSERT_EQ(h.chain(id).entries, (std::vector<ChainEntry>{{head, S}, {tail, O}}));
  const std::string head_name = h.state->routing().targets.at(head).name;
  auto both = h.state->register_node({.kind = NodeKind::kStorage, .address = head_address, .incarnation = 1,
                                      .targets = {{.name = head_name, .capacity_bytes = 1ull << 40, .data_id = head_data},
                                                  {.name = "/moved/t0", .capacity_bytes = 1ull << 40, .data_id = tail_data}}});
  ASSERT_FALSE(both.has_value()) << "both replicas of chain " << id << " on node " << head_node;
  EXPECT_EQ(both.error().code(), Code::kExists) << both.error();
  EXPECT_NE(both.error().message().find("on this node"), std::string::npos) << both.error();
  RoutingInfo r = h.state->routing();
  EXPECT_EQ(r.targets.at(tail).node_id, tail_node);
  EXPECT_EQ(h.chain(id).entries, (std::vector<ChainEntry>{{head, S}, {tail, O}}));
}

// Both replicas offline, and one came back without its data: promoting that
// one would have the other resync from it and lose what it holds, so it
// needs --force; the other may be promoted. The mark survives an mgmtd
// restart and goes once the target served (resynced) in its chains.
TEST(ClusterState, PromotingATargetThatLostItsDataOverAnotherNeedsForce) {
  TempDir dir;
  Harness h(dir.path());
  auto [id, head, tail, head_node, tail_node] = h.two_replica_chain();
  const int head_host = h.snapshot.nodes.at(head_node).address == "host1:9000" ? 1 : 2;
  h.clock.advance(16s);  // the tail is gone; the head serves alone
  h.beat(head_node);
  ASSERT_TRUE(h.state->tick().has_value());
  ASSERT_EQ(h.chain(id).entries, (std::vector<ChainEntry>{{head, S}, {tail, O}}));
  RegisterReply back = h.add_storage(head_host, 1, /*incarnation=*/2, /*disk_generation=*/2);  // an empty disk
  ASSERT_EQ(back.data_lost, (std::vector<TargetId>{head}));
  for (const ChainEntry& e : h.chain(id).entries) ASSERT_EQ(e.state, O) << e.target_id;
  EXPECT_TRUE(h.state->routing().targets.at(head).lost_data);
  h.reopen();
  EXPECT_TRUE(h.state->routing().targets.at(head).lost_data) << "not persisted";
  auto refused = h.state->promote_target(id, head);
  ASSERT_FALSE(refused.has_value()) << "promoted the empty target over one that may hold the data";
  EXPECT_EQ(refused.error().code(), Code::kNotPermitted) << refused.error();
  EXPECT_NE(refused.error().message().find(fmt::format("promote target {}", tail)), std::string::npos)
      << refused.error();
  auto forced = h.state->promote_target(id, head, /*force=*/true);
  ASSERT_TRUE(forced.has_value()) << forced.error();
  EXPECT_EQ(h.chain(id).entries.front().target_id, head) << "the chain's copy now";
}

// A chain that lost its last copy: an offline target that did not lose its
// data may hold the only copy left, and replacing it would make its chunks
// strays (swept after a grace); only with force. The one that came back
// empty holds nothing and may go.
TEST(ClusterState, ReplacingATargetThatMayHoldALostChainsDataNeedsForce) {
  Harness h;
  auto [id, head, tail, head_node, tail_node] = h.two_replica_chain();
  const int head_host = h.snapshot.nodes.at(head_node).address == "host1:9000" ? 1 : 2;
  h.clock.advance(16s);  // the tail is gone; the head serves alone
  h.beat(head_node);
  ASSERT_TRUE(h.state->tick().has_value());
  h.add_storage(head_host, 1, /*incarnation=*/2, /*disk_generation=*/2);  // back with an empty disk
  ASSERT_TRUE(lost_last_copy(h.chain(id)));
  TargetId spare = h.add_storage(3, 1).target_ids.at(0);
  TargetId spare_2 = h.add_storage(4, 1).target_ids.at(0);
  auto refused = h.state->replace_target(tail, spare);
  ASSERT_FALSE(refused.has_value()) << "replaced the target that may hold the chain's only data";
  EXPECT_EQ(refused.error().code(), Code::kNotPermitted) << refused.error();
  EXPECT_NE(refused.error().message().find("--force"), std::string::npos) << refused.error();
  ASSERT_TRUE(h.state->replace_target(head, spare).has_value()) << "the emptied target holds nothing";
  auto forced = h.state->replace_target(tail, spare_2, /*force=*/true);
  ASSERT_TRUE(forced.has_value()) << forced.error();
  for (const ChainEntry& e : h.chain(id).entries) EXPECT_NE(e.target_id, tail);
}

// A target that lost its data and resynced beside a serving replica holds
// the chain's data again: the mark goes.
TEST(ClusterState, TheLostDataMarkGoesOnceTheTargetServes) {
  Harness h;
  auto [id, head, tail, head_node, tail_node] = h.two_replica_chain();
  const int tail_host = h.snapshot.nodes.at(tail_node).address == "host1:9000" ? 1 : 2;
  h.add_storage(tail_host, 1, /*incarnation=*/2, /*disk_generation=*/2);
  ASSERT_EQ(h.chain(id).entries, (std::vector<ChainEntry>{{head, S}, {tail, Y}}));
  EXPECT_TRUE(h.state->routing().targets.at(tail).lost_data);
  auto done = h.state->heartbeat(
      {.node_id = tail_node, .incarnation = 2, .sync_done = {{id, tail, h.chain(id).version}}});
  ASSERT_TRUE(done.has_value()) << done.error();
  ASSERT_EQ(h.chain(id).entries, (std::vector<ChainEntry>{{head, S}, {tail, S}}));
  EXPECT_FALSE(h.state->routing().targets.at(tail).lost_data);
}

TEST(ClusterState, RestartWithNewIncarnationResyncsItsTargets) {
  Harness h;
  for (int i = 1; i <= 3; ++i) h.add_storage(i, 2);
  ASSERT_TRUE(h.state->create_chain_table({.replicas = 3}).has_value());
  RoutingInfo before = h.state->routing();
  RegisterReply restarted = h.add_storage(2, 2, /*incarnation=*/2);
  EXPECT_EQ(restarted.node_id, 2u);
  EXPECT_EQ(restarted.target_ids, (std::vector<TargetId>{3, 4}));
  RoutingInfo after = h.state->routing();
  EXPECT_EQ(after.version, before.version + 1) << "one operation, one routing version";
  for (const auto& [id, chain] : after.chains) {
    for (TargetId t : {TargetId{3}, TargetId{4}}) {
      bool member = std::any_of(chain.entries.begin(), chain.entries.end(),
                                [&](const ChainEntry& e) { return e.target_id == t; });
      if (!member) continue;
      EXPECT_EQ(chain.entries.back(), (ChainEntry{t, Y})) << "chain " << id;
      EXPECT_EQ(chain.version, before.chains.at(id).version + 1);
    }
  }
  EXPECT_EQ(after.nodes.at(2).incarnation, 2u);
  auto zombie = h.state->heartbeat({.node_id = 2, .incarnation = 1});
  EXPECT_EQ(zombie.error().code(), Code::kNotPermitted) << "the old process is refused";
}

TEST(ClusterState, SameIncarnationReRegistrationRevivesADeadNode) {
  Harness h;
  for (int i = 1; i <= 2; ++i) h.add_storage(i, 1);
  ASSERT_TRUE(h.state->create_chain_table({.replicas = 2}).has_value());
  h.clock.advance(20s);
  h.beat(1);
  EXPECT_EQ(*h.state->tick(), std::vector<NodeId>{2});
  h.add_storage(2, 1);  // same incarnation
  EXPECT_EQ(h.state->routing().nodes.at(2).state, NodeState::kUp);
  EXPECT_EQ(h.chain(1).entries, (std::vector<ChainEntry>{{1, S}, {2, Y}}));
}

// A node that never comes back: a spare target on a new node takes the dead
// one's place (offline -> syncing at the tail, then serving once synced), in
// one routing version, and the state survives a restart of mgmtd.
TEST(ClusterState, ReplacedTargetSyncsAndServesInTheDeadOnesPlace) {
  TempDir dir;
  Harness h(dir.path());
  auto [id, head, tail, head_node, tail_node] = h.two_replica_chain();
  h.clock.advance(16s);
  h.beat(head_node);
  ASSERT_TRUE(h.state->tick().has_value());  // the tail's node is dead
  ASSERT_EQ(h.chain(id).entries, (std::vector<ChainEntry>{{head, S}, {tail, O}}));
  TargetId spare = h.add_storage(3, 1).target_ids.at(0);
  EXPECT_EQ(h.chain(id).entries, (std::vector<ChainEntry>{{head, S}, {tail, O}})) << "a new node joins no chain";
  ChainVersion v = h.chain(id).version;
  RoutingVersion rv = h.state->routing_version();

  auto changed = h.state->replace_target(tail, spare);
  ASSERT_TRUE(changed.has_value()) << changed.error();
  EXPECT_EQ(*changed, std::vector<ChainId>{id});
  EXPECT_EQ(h.chain(id).entries, (std::vector<ChainEntry>{{head, S}, {spare, Y}}));
  EXPECT_EQ(h.chain(id).version, v + 1);
  EXPECT_EQ(h.state->routing_version(), rv + 1);
  EXPECT_EQ(h.snapshot.targets.at(spare).state, Y);
  h.beat(3, 1, {{id, spare, v + 1}});
  EXPECT_EQ(h.chain(id).entries, (std::vector<ChainEntry>{{head, S}, {spare, S}}));

  h.reopen();
  EXPECT_EQ(h.chain(id).entries, (std::vector<ChainEntry>{{head, S}, {spare, S}}));
  h.add_storage(2, 1);  // the old node comes back after all: its target is a spare now
  EXPECT_EQ(h.chain(id).entries, (std::vector<ChainEntry>{{head, S}, {spare, S}}));
  EXPECT_TRUE(h.state->routing().targets.contains(tail));
}

// A node reporting a routing version above mgmtd's (mgmtd restarted on a
// restored backup): mgmtd is behind. It refuses every register and heartbeat
// with a message naming both versions and the remedy, exports the gauge, and
// changes no routing: no node declared dead, no table, replace or removal.
TEST(ClusterState, BehindRefusesServersAndMakesNoRoutingChange) {
  Harness h;
  auto [id, head, tail, head_node, tail_node] = h.two_replica_chain();
  TargetId spare = h.add_storage(3, 1).target_ids.at(0);
  const RoutingVersion own = h.state->routing_version();
  const RoutingInfo before = h.state->routing();
  // Reports at or below mgmtd's version are fine.
  ASSERT_TRUE(h.state->heartbeat({.node_id = head_node, .incarnation = 1, .installed_routing_version = own}));
  EXPECT_TRUE(h.state->behind().empty());

  auto hb = h.state->heartbeat({.node_id = tail_node, .incarnation = 1, .installed_routing_version = own + 7});
  ASSERT_FALSE(hb);
  EXPECT_EQ(hb.error().code(), Code::kVersionMismatch);
  const std::string& msg = hb.error().message();
  EXPECT_NE(msg.find(std::to_string(own)), std::string::npos) << msg;
  EXPECT_NE(msg.find(std::to_string(own + 7)), std::string::npos) << msg;
  EXPECT_NE(msg.find("mgmtd's state is older than the cluster's"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--accept-older-state"), std::string::npos) << msg;
  EXPECT_EQ(h.state->behind(), msg);
  EXPECT_EQ(h.registry.gauge("weft_mgmt_behind", "").value(), 1);

  // Sticky: every server is refused now, even one reporting nothing newer.
  auto other = h.state->heartbeat({.node_id = head_node, .incarnation = 1, .installed_routing_version = own});
  ASSERT_FALSE(other);
  EXPECT_EQ(other.error().code(), Code::kVersionMismatch);
  RegisterRequest fresh{.kind = NodeKind::kStorage, .address = "host9:9000", .incarnation = 1, .targets = {{"t0", 1, 0}}};
  auto reg = h.state->register_node(fresh);
  ASSERT_FALSE(reg);
  EXPECT_EQ(reg.error().code(), Code::kVersionMismatch);

  // No routing change while behind: leases run out, nobody is declared dead.
  h.clock.advance(1h);
  auto dead = h.state->tick();
  ASSERT_TRUE(dead.has_value());
  EXPECT_TRUE(dead->empty());
  auto table = h.state->create_chain_table({.replicas = 1});
  ASSERT_FALSE(table);
  EXPECT_EQ(table.error().code(), Code::kVersionMismatch);
  auto replaced = h.state->replace_target(tail, spare);
  ASSERT_FALSE(replaced);
  EXPECT_EQ(replaced.error().code(), Code::kVersionMismatch);
  auto removed = h.state->remove_node(3);
  ASSERT_FALSE(removed);
  EXPECT_EQ(removed.error().code(), Code::kVersionMismatch);
  RoutingInfo after = h.state->routing();
  EXPECT_EQ(after.version, own);
  EXPECT_EQ(after.chains, before.chains);
  EXPECT_EQ(after.targets, before.targets);
  for (const auto& [nid, n] : after.nodes) EXPECT_EQ(n.state, NodeState::kUp) << "node " << nid;
}

// --accept-older-state: a report above mgmtd's version raises its routing
// version above the report and every chain's version by the gap + 1 (each
// routing version moves a chain by at most one), persisted; servers proceed.
TEST(ClusterState, AcceptOlderStateRaisesVersionsAboveTheReport) {
  TempDir dir;
  Harness h(dir.path());
  auto [id, head, tail, head_node, tail_node] = h.two_replica_chain();
  const RoutingVersion own = h.state->routing_version();
  const ChainVersion chain_version = h.chain(id).version;
  h.options.accept_older_state = true;
  h.reopen();
  auto hb = h.state->heartbeat({.node_id = head_node, .incarnation = 1, .installed_routing_version = own + 7});
  ASSERT_TRUE(hb) << hb.error();
  EXPECT_EQ(hb->routing_version, own + 8);
  EXPECT_EQ(h.state->routing_version(), own + 8);
  EXPECT_EQ(h.chain(id).version, chain_version + 8);
  EXPECT_TRUE(h.state->behind().empty());
  EXPECT_EQ(h.registry.gauge("weft_mgmt_behind", "").value(), 0);
  // Lower reports change nothing; routing changes go on as usual.
  ASSERT_TRUE(h.state->heartbeat({.node_id = tail_node, .incarnation = 1, .installed_routing_version = own}));
  EXPECT_EQ(h.state->routing_version(), own + 8);
  ASSERT_TRUE(h.state->create_chain_table({.replicas = 1}));
  EXPECT_EQ(h.state->routing_version(), own + 9);

  h.options.accept_older_state = false;
  h.reopen();
  EXPECT_EQ(h.state->routing_version(), own + 9);
  EXPECT_EQ(h.chain(id).version, chain_version + 8);
  ASSERT_TRUE(h.state->heartbeat({.node_id = head_node, .incarnation = 1, .installed_routing_version = own + 9}));
}

TEST(ClusterState, ReplaceTargetRefusals) {
  Harness h;
  for (int i = 1; i <= 3; ++i) h.add_storage(i, 1);  // targets 1, 2, 3 on nodes 1, 2, 3
  ASSERT_TRUE(h.state->create_chain_table({.replicas = 2, .chains_per_target = 2}).has_value());
  TargetId spare_1 = h.add_storage(1, 2).target_ids.at(1);  // a second target on node 1, in no chain
  TargetId spare_4 = h.add_storage(4, 1).target_ids.at(0);
  RoutingVersion rv = h.state->routing_version();
  auto code = [&](TargetId old_target, TargetId new_target) {
    auto r = h.state->replace_target(old_target, new_target);
    return r ? Code::kOk : r.error().code();
  };
  EXPECT_EQ(code(1, spare_4), Code::kNotPermitted) << "target 1 serves";
  EXPECT_EQ(code(99, spare_4), Code::kNotFound);
  EXPECT_EQ(code(1, 99), Code::kNotFound);
  EXPECT_EQ(code(spare_4, spare_4), Code::kInvalidArgument);
  EXPECT_EQ(code(spare_1, spare_4), Code::kInvalidArgument) << "a target in no chain";

  h.clock.advance(16s);  // node 2 dies: target 2 is offline wherever it was
  for (NodeId n : {1, 3, 4}) h.beat(n);
  ASSERT_TRUE(h.state->tick().has_value());
  EXPECT_EQ(code(2, 1), Code::kNotPermitted) << "target 1 is already in a chain";
  // Target 2 shares a chain with target 1, so a target on node 1 would put
  // two entries of that chain on one node.
  bool with_1 = false;
  for (const auto& [cid, c] : h.state->routing().chains) {
    bool has_1 = false, has_2 = false;
    for (const ChainEntry& e : c.entries) has_1 |= e.target_id == 1, has_2 |= e.target_id == 2;
    with_1 |= has_1 && has_2;
  }
  ASSERT_TRUE(with_1);
  EXPECT_EQ(code(2, spare_1), Code::kNotPermitted);
  EXPECT_EQ(h.state->routing_version(), rv + 1) << "refusals change nothing (only the death did)";

  h.clock.advance(16s);  // node 4 dies: its spare is no longer up
  for (NodeId n : {1, 3}) h.beat(n);
  ASSERT_TRUE(h.state->tick().has_value());
  EXPECT_EQ(code(2, spare_4), Code::kNotPermitted);

  // A last-serving target holds its chain's only copy: never replaced.
  Harness last;
  auto chain = last.two_replica_chain();
  last.clock.advance(16s);
  last.beat(chain.head_node);
  ASSERT_TRUE(last.state->tick().has_value());  // the tail dies
  last.clock.advance(16s);
  ASSERT_TRUE(last.state->tick().has_value());  // then the head: last-serving
  ASSERT_EQ(last.chain(chain.id).entries, (std::vector<ChainEntry>{{chain.head, L}, {chain.tail, O}}));
  TargetId spare = last.add_storage(3, 1).target_ids.at(0);
  auto r = last.state->replace_target(chain.head, spare);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code(), Code::kNotPermitted);
  EXPECT_NE(r.error().message().find("only copy"), std::string::npos) << r.error();
  // The offline one may be replaced; the spare waits offline behind the last-serving one.
  ASSERT_TRUE(last.state->replace_target(chain.tail, spare).has_value());
  EXPECT_EQ(last.chain(chain.id).entries, (std::vector<ChainEntry>{{chain.head, L}, {spare, O}}));
  last.add_storage(static_cast<int>(chain.head_node), 1);  // the last-serving head returns: serving, and the spare syncs from it
  EXPECT_EQ(last.chain(chain.id).entries, (std::vector<ChainEntry>{{chain.head, S}, {spare, Y}}));
}

// A dead node whose targets were replaced is forgotten; the same address
// registering again is a new node with new ids, in no chain.
TEST(ClusterState, RemovedNodeIsForgottenAndComesBackAsANewOne) {
  TempDir dir;
  Harness h(dir.path());
  auto [id, head, tail, head_node, tail_node] = h.two_replica_chain();
  TargetId spare = h.add_storage(3, 1).target_ids.at(0);
  auto code = [&](NodeId n) {
    auto r = h.state->remove_node(n);
    return r ? Code::kOk : r.error().code();
  };
  EXPECT_EQ(code(tail_node), Code::kNotPermitted) << "up";
  EXPECT_EQ(code(42), Code::kNotFound);
  h.clock.advance(16s);
  h.beat(head_node);
  h.beat(3);
  ASSERT_TRUE(h.state->tick().has_value());  // the tail's node dies
  auto in_chain = h.state->remove_node(tail_node);
  ASSERT_FALSE(in_chain.has_value());
  EXPECT_EQ(in_chain.error().code(), Code::kNotPermitted);
  EXPECT_NE(in_chain.error().message().find("replace"), std::string::npos) << in_chain.error();

  ASSERT_TRUE(h.state->replace_target(tail, spare).has_value());
  RoutingVersion rv = h.state->routing_version();
  ASSERT_EQ(code(tail_node), Code::kOk);
  EXPECT_EQ(h.state->routing_version(), rv + 1);
  h.reopen();
  RoutingInfo r = h.state->routing();
  EXPECT_FALSE(r.nodes.contains(tail_node));
  EXPECT_FALSE(r.targets.contains(tail));
  EXPECT_EQ(r.nodes.size(), 2u);

  RegisterReply back = h.add_storage(static_cast<int>(tail_node), 1);  // the same address
  EXPECT_GT(back.node_id, NodeId{3});
  EXPECT_GT(back.target_ids.at(0), spare) << "ids are never reused";
  EXPECT_EQ(h.chain(id).entries, (std::vector<ChainEntry>{{head, S}, {spare, Y}}));
}

TEST(ClusterState, TargetNoLongerListedFailsAndNewTargetsJoinLater) {
  Harness h;
  for (int i = 1; i <= 2; ++i) h.add_storage(i, 1);
  ASSERT_TRUE(h.state->create_chain_table({.replicas = 2}).has_value());
  RegisterRequest r{.kind = NodeKind::kStorage, .address = "host2:9000", .incarnation = 1,
                    .targets = {{.name = "t9", .capacity_bytes = 100}}};
  auto reply = h.state->register_node(r);
  ASSERT_TRUE(reply.has_value()) << reply.error();
  EXPECT_EQ(reply->target_ids, std::vector<TargetId>{3});
  RoutingInfo info = h.state->routing();
  EXPECT_FALSE(info.targets.at(2).reported);
  EXPECT_EQ(info.targets.at(2).state, O);
  EXPECT_EQ(info.chains.at(1).entries, (std::vector<ChainEntry>{{1, S}, {2, O}}));
  EXPECT_EQ(info.targets.at(3).state, S);
}

// A storage server whose target's engine went sticky-failed (it refuses every
// update until the process restarts) says so in its heartbeats: the target
// leaves its chains at once (writes go on without it), stays out while the
// node keeps heartbeating, and comes back (syncing) only when a restarted
// server registers it again. Another node cannot fail it.
TEST(ClusterState, ATargetReportedFailedLeavesItsChainsUntilRegisteredAgain) {
  Harness h;
  for (int i = 1; i <= 2; ++i) h.add_storage(i, 1);
  ASSERT_TRUE(h.state->create_chain_table({.replicas = 2}).has_value());
  ChainInfo before = h.chain(1);
  ASSERT_EQ(before.entries, (std::vector<ChainEntry>{{1, S}, {2, S}}));
  auto failed_beat = [&](NodeId node, TargetId target) {
    auto r = h.state->heartbeat(
        {.node_id = node, .incarnation = 1, .usage = {{.target_id = target, .capacity_bytes = 1000, .failed = true}}});
    ASSERT_TRUE(r.has_value()) << r.error();
  };
  ASSERT_NO_FATAL_FAILURE(failed_beat(1, 2));
  EXPECT_EQ(h.chain(1), before) << "node 1 cannot fail node 2's target";

  ASSERT_NO_FATAL_FAILURE(failed_beat(1, 1));
  ChainInfo shrunk = h.chain(1);
  EXPECT_EQ(shrunk.entries, (std::vector<ChainEntry>{{2, S}, {1, O}}));
  EXPECT_EQ(shrunk.version, before.version + 1);
  RoutingInfo info = h.state->routing();
  EXPECT_FALSE(info.targets.at(1).reported);
  EXPECT_EQ(info.targets.at(1).state, O);
  EXPECT_EQ(info.nodes.at(1).state, NodeState::kUp) << "the node itself is fine";

  for (int i = 0; i < 3; ++i) {  // still failed, or a plain heartbeat: it stays out
    ASSERT_NO_FATAL_FAILURE(failed_beat(1, 1));
    h.beat(1);
    h.beat(2);
  }
  EXPECT_EQ(h.chain(1), shrunk) << "a failed target must not rejoin while its server runs";

  h.add_storage(1, 1, /*incarnation=*/2);  // the server restarted: the engine was reopened
  EXPECT_EQ(h.chain(1).entries, (std::vector<ChainEntry>{{2, S}, {1, Y}}));
}

TEST(ClusterState, StaleAndForeignReportsAreIgnoredAndCounted) {
  Harness h;
  for (int i = 1; i <= 2; ++i) h.add_storage(i, 1);
  ASSERT_TRUE(h.state->create_chain_table({.replicas = 2}).has_value());
  ChainInfo before = h.chain(1);
  auto reply = h.state->heartbeat({.node_id = 1, .incarnation = 1,
                                   .usage = {{.target_id = 1, .used_bytes = 77, .capacity_bytes = 1000},
                                             {.target_id = 2, .used_bytes = 5, .capacity_bytes = 5}},
                                   .sync_done = {{1, 1, 1}, {1, 2, 1}, {99, 1, 1}}});
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(h.chain(1), before);
  EXPECT_EQ(h.snapshot.targets.at(1).used_bytes, 77u);
  EXPECT_EQ(h.snapshot.targets.at(2).used_bytes, 0u) << "node 1 cannot report node 2's target";
  EXPECT_EQ(h.registry.counter("weft_mgmt_ignored_reports_total", "").value(), 4u);
  EXPECT_EQ(reply->routing_version, h.state->routing_version());
}

// A sync-done names the chain version its resync ran at. One from an earlier
// round (delayed on the way, or sent as the chain changed) says nothing about
// the target's data now: it must not make serving a target that is syncing in
// a later round that never finished (it would be read from, or become the only
// replica). The round of the current version does.
TEST(ClusterState, SyncDoneOfAnEarlierChainVersionDoesNotPromote) {
  Harness h;
  auto [id, head, tail, head_node, tail_node] = h.two_replica_chain();
  auto lose_and_rejoin_tail = [&] {
    h.clock.advance(16s);
    h.beat(head_node);
    ASSERT_TRUE(h.state->tick().has_value());
    ASSERT_EQ(h.chain(id).entries, (std::vector<ChainEntry>{{head, S}, {tail, O}}));
    h.beat(tail_node);
    ASSERT_EQ(h.chain(id).entries, (std::vector<ChainEntry>{{head, S}, {tail, Y}}));
  };
  ASSERT_NO_FATAL_FAILURE(lose_and_rejoin_tail());
  ChainVersion first_round = h.chain(id).version;
  ASSERT_NO_FATAL_FAILURE(lose_and_rejoin_tail());  // the first round's resync never reported
  ChainVersion second_round = h.chain(id).version;
  ASSERT_GT(second_round, first_round);
  RoutingVersion before = h.state->routing_version();

  h.beat(tail_node, 1, {{id, tail, first_round}});  // the first round's report arrives now
  EXPECT_EQ(h.chain(id).entries, (std::vector<ChainEntry>{{head, S}, {tail, Y}}));
  EXPECT_EQ(h.chain(id).version, second_round);
  EXPECT_EQ(h.state->routing_version(), before);
  h.beat(tail_node, 1, {{id, tail, 0}});  // a server that does not send the version
  EXPECT_EQ(h.chain(id).entries, (std::vector<ChainEntry>{{head, S}, {tail, Y}}));
  h.beat(tail_node, 1, {{id, tail, second_round + 1}});  // a version the chain never had
  EXPECT_EQ(h.chain(id).entries, (std::vector<ChainEntry>{{head, S}, {tail, Y}}));
  EXPECT_EQ(h.registry.counter("weft_mgmt_ignored_reports_total", "").value(), 3u);

  h.beat(tail_node, 1, {{id, tail, second_round}});
  EXPECT_EQ(h.chain(id).entries, (std::vector<ChainEntry>{{head, S}, {tail, S}}));
  EXPECT_EQ(h.chain(id).version, second_round + 1);
}

// A syncing target whose server restarts FAILs and RETURNs in one
// registration: syncing at the tail again, entries as before. The chain still
// gets a new version: the process may have lost a SyncDone it accepted (its
// report to mgmtd was queued in memory), and the head resyncs only for a chain
// version it has not resynced yet (storage/resync.cc), so at the same version
// the target would never be promoted.
TEST(ClusterState, RestartOfASyncingTargetsServerStartsANewResyncRound) {
  Harness h;
  Harness::TwoReplicaChain c;
  ASSERT_NO_FATAL_FAILURE(c = chain_with_a_syncing_tail(h));
  auto [id, head, tail, head_node, tail_node] = c;
  ChainVersion round = h.chain(id).version;
  RoutingVersion before = h.state->routing_version();

  h.add_storage(static_cast<int>(tail_node), 1, /*incarnation=*/2);  // the tail's server restarted (host<id>)
  ASSERT_EQ(h.chain(id).entries, (std::vector<ChainEntry>{{head, S}, {tail, Y}}));
  EXPECT_EQ(h.chain(id).version, round + 1) << "a new resync round";
  EXPECT_EQ(h.state->routing_version(), before + 1);
  h.beat(tail_node, 2, {{id, tail, round}});  // the old round's resync proves nothing now
  EXPECT_EQ(h.chain(id).entries, (std::vector<ChainEntry>{{head, S}, {tail, Y}}));
  h.beat(tail_node, 2, {{id, tail, round + 1}});
  EXPECT_EQ(h.chain(id).entries, (std::vector<ChainEntry>{{head, S}, {tail, S}}));
  EXPECT_EQ(h.chain(id).version, round + 2);

  ChainVersion serving = h.chain(id).version;  // a restart where entries change bumps once too
  h.add_storage(static_cast<int>(tail_node), 1, /*incarnation=*/3);
  EXPECT_EQ(h.chain(id).entries, (std::vector<ChainEntry>{{head, S}, {tail, Y}}));
  EXPECT_EQ(h.chain(id).version, serving + 1);
}

// What a GetRouting reply carries is bounded: addresses by length, nodes,
// chain tables and chains by count, and the whole by its encoded size (a
// registration or table past it is refused and leaves no trace).
TEST(ClusterState, RoutingStaysWithinWhatOneReplyCarries) {
  Harness h;
  auto reg = [&](std::string address, size_t targets, size_t name_bytes, uint64_t incarnation = 1) {
    RegisterRequest r{.kind = NodeKind::kStorage, .address = std::move(address), .incarnation = incarnation};
    for (size_t t = 0; t < targets; ++t) {
      std::string name = std::to_string(t);
      name.resize(name_bytes, 'x');
      r.targets.push_back({.name = name, .capacity_bytes = 1ull << 40});
    }
    return h.state->register_node(r);
  };
  std::string long_host(kAddressBytesMax - 5, 'h');
  EXPECT_TRUE(reg(long_host + ":9000", 1, 10).has_value());
  EXPECT_EQ(reg(long_host + "h:9000", 1, 10).error().code(), Code::kInvalidArgument);

  // About 1.1 MB each (1024 targets with 1 KiB names): the second one would pass 2 MiB.
  auto big = reg("big1:9000", kTargetsPerNodeMax, 1024);
  ASSERT_TRUE(big.has_value()) << big.error();
  RoutingInfo before = h.state->routing();
  auto bigger = reg("big2:9000", kTargetsPerNodeMax, 1024);
  ASSERT_FALSE(bigger.has_value());
  EXPECT_EQ(bigger.error().code(), Code::kTooBig) << bigger.error();
  RoutingInfo after = h.state->routing();
  EXPECT_EQ(after.version, before.version) << "a refused registration leaves no trace";
  EXPECT_EQ(after.nodes, before.nodes);
  EXPECT_EQ(after.targets, before.targets);
  EXPECT_LE(encoded_bytes_bound(h.state->routing()), kRoutingBytesMax);
  EXPECT_TRUE(reg("big1:9000", kTargetsPerNodeMax, 1024).has_value()) << "the same node may register again";
  EXPECT_TRUE(reg("big1:9000", kTargetsPerNodeMax, 1024, 2).has_value()) << "and restart";
  EXPECT_TRUE(reg("small:9000", 1, 10).has_value()) << "a small node still fits";
}

TEST(ClusterState, NodesAndChainTablesAreCapped) {
  Harness h;
  for (size_t i = 1; i <= kNodesMax; ++i) {
    auto r = h.state->register_node({.kind = NodeKind::kMeta, .address = "m" + std::to_string(i) + ":1",
                                     .incarnation = 1});
    ASSERT_TRUE(r.has_value()) << i << ": " << r.error();
  }
  auto one_more = h.state->register_node({.kind = NodeKind::kMeta, .address = "extra:1", .incarnation = 1});
  ASSERT_FALSE(one_more.has_value());
  EXPECT_EQ(one_more.error().code(), Code::kTooBig);
  EXPECT_TRUE(h.state->register_node({.kind = NodeKind::kMeta, .address = "m1:1", .incarnation = 2}).has_value())
      << "a known node registers again";

  Harness t;
  t.add_storage(1, 1);
  for (size_t i = 0; i < kChainTablesMax; ++i) ASSERT_TRUE(t.state->create_chain_table({.replicas = 1}).has_value());
  auto extra = t.state->create_chain_table({.replicas = 1});
  ASSERT_FALSE(extra.has_value());
  EXPECT_EQ(extra.error().code(), Code::kTooBig);
  EXPECT_EQ(t.state->routing().tables.size(), kChainTablesMax);
  // 129 targets in 256 chains each, one replica: more chains than kChainsMax in one table.
  Harness c;
  c.add_storage(1, 129);
  auto wide = c.state->create_chain_table({.replicas = 1, .chains_per_target = 256});
  ASSERT_FALSE(wide.has_value());
  EXPECT_EQ(wide.error().code(), Code::kTooBig) << wide.error();
  EXPECT_TRUE(c.state->routing().chains.empty());
}

// A table that would pass kChainsMax is refused before build_chains runs
// (seconds to minutes for a table this big, under mgmtd's lock), with the
// automatic chains per target as with an explicit one: the refusal names the
// bound ("up to"). 17 nodes x 242 targets, 2 replicas: 16 chains per target
// by default, up to 32912 chains.
TEST(ClusterState, ChainCapIsCheckedBeforeBuildingWithAutomaticChainsPerTarget) {
  Harness h;
  for (int i = 1; i <= 17; ++i) h.add_storage(i, 242);
  RoutingVersion before = h.state->routing_version();
  for (uint32_t per_target : {16u, 0u}) {
    auto start = std::chrono::steady_clock::now();
    auto table = h.state->create_chain_table({.replicas = 2, .chains_per_target = per_target});
    ASSERT_FALSE(table.has_value());
    EXPECT_EQ(table.error().code(), Code::kTooBig) << table.error();
    EXPECT_NE(table.error().message().find("up to 32912 more chains"), std::string::npos)
        << "chains_per_target " << per_target << ": " << table.error();
    EXPECT_LT(std::chrono::steady_clock::now() - start, 3s) << "refused without building the chains";
  }
  EXPECT_EQ(h.state->routing_version(), before);
  EXPECT_TRUE(h.state->routing().chains.empty());
}

TEST(ClusterState, MetaAndClientNodesExpireWithoutTouchingChains) {
  Harness h;
  for (int i = 1; i <= 2; ++i) h.add_storage(i, 1);
  ASSERT_TRUE(h.state->create_chain_table({.replicas = 2}).has_value());
  auto meta = h.state->register_node({.kind = NodeKind::kMeta, .address = "meta:8000", .incarnation = 1});
  ASSERT_TRUE(meta.has_value());
  h.clock.advance(16s);
  h.beat(1);
  h.beat(2);
  EXPECT_EQ(*h.state->tick(), std::vector<NodeId>{meta->node_id});
  EXPECT_EQ(h.chain(1).version, 1u);
  EXPECT_EQ(h.snapshot.nodes.at(meta->node_id).state, NodeState::kDown);
}

TEST(ClusterState, ChainTableNeedsEnoughLiveServers) {
  Harness h;
  EXPECT_EQ(h.state->create_chain_table({.replicas = 1}).error().code(), Code::kInvalidArgument);
  h.add_storage(1, 2);
  h.add_storage(2, 2);
  auto too_many = h.state->create_chain_table({.replicas = 3});
  ASSERT_FALSE(too_many.has_value());
  EXPECT_EQ(too_many.error().code(), Code::kInvalidArgument);
  h.clock.advance(16s);
  h.beat(1);
  ASSERT_TRUE(h.state->tick().has_value());
  EXPECT_EQ(h.state->create_chain_table({.replicas = 2}).error().code(), Code::kInvalidArgument)
      << "a dead server's targets are not placed";
  auto one = h.state->create_chain_table({.replicas = 1});
  ASSERT_TRUE(one.has_value());
  EXPECT_EQ(h.state->routing().tables.at(*one).chains.size(), 2u);
}

TEST(ClusterState, MetricsFollowTheState) {
  Harness h;
  for (int i = 1; i <= 3; ++i) h.add_storage(i, 1);
  ASSERT_TRUE(h.state->create_chain_table({.replicas = 3}).has_value());
  h.clock.advance(3s);
  h.beat(1);
  h.beat(2);
  ASSERT_TRUE(h.state->tick().has_value());
  auto gauge = [&](const std::string& name, metrics::Labels labels) {
    return h.registry.gauge(name, "", labels).value();
  };
  EXPECT_EQ(gauge("weft_mgmt_heartbeat_age_ms", {{"node", "3"}}), 3000);
  EXPECT_EQ(gauge("weft_mgmt_heartbeat_age_ms", {{"node", "1"}}), 0);
  h.clock.advance(13s);
  h.beat(1);
  h.beat(2);
  ASSERT_TRUE(h.state->tick().has_value());
  EXPECT_EQ(gauge("weft_mgmt_targets", {{"state", "serving"}}), 2);
  EXPECT_EQ(gauge("weft_mgmt_targets", {{"state", "offline"}}), 1);
  EXPECT_EQ(gauge("weft_mgmt_chain_version", {{"chain", "1"}}), 2);
  EXPECT_EQ(gauge("weft_mgmt_routing_version", {}), static_cast<int64_t>(h.state->routing_version()));
  EXPECT_EQ(gauge("weft_mgmt_nodes", {{"state", "down"}}), 1);
  EXPECT_NE(h.registry.prometheus_text().find("weft_mgmt_targets{state=\"offline\"} 1"), std::string::npos);
}

// Nodes that come and go (each new address a new node id: registered,
// heard, declared dead, removed) leave nothing behind: no refusal watch, no
// weft_mgmt_heartbeat_age_ms series (in the registry or the text), so a flood
// of them does not grow mgmtd. The node that stays keeps its own.
TEST(ClusterState, RemovedNodesLeaveNoWatchOrMetricsSeriesBehind) {
  Harness h;
  const NodeId stays = h.add_storage(0, 1).node_id;
  h.beat(stays);
  ASSERT_TRUE(h.state->tick().has_value());
  const size_t series = h.registry.size();
  for (int i = 1; i <= 300; ++i) {
    const NodeId n = h.add_storage(i, 1).node_id;
    h.beat(n);
    h.clock.advance(16s);
    h.beat(stays);
    ASSERT_TRUE(h.state->tick().has_value());
    ASSERT_EQ(h.state->routing().nodes.at(n).state, NodeState::kDown) << n;
    ASSERT_TRUE(h.state->remove_node(n).has_value()) << n;
  }
  ASSERT_TRUE(h.state->tick().has_value());
  EXPECT_EQ(h.state->routing().nodes.size(), 1u);
  const ClusterState::PerNodeEntries kept = h.state->per_node_entries();
  EXPECT_EQ(kept.refusal_watches, 1u);
  EXPECT_EQ(kept.heartbeat_series, 1u);
  EXPECT_EQ(h.registry.size(), series) << "a series per removed node stayed";
  const std::string text = h.registry.prometheus_text();
  EXPECT_NE(text.find(fmt::format("weft_mgmt_heartbeat_age_ms{{node=\"{}\"}} 0", stays)), std::string::npos) << text;
  EXPECT_EQ(text.find("weft_mgmt_heartbeat_age_ms{node=\"2\"}"), std::string::npos) << text;
  EXPECT_EQ(text.find("weft_mgmt_heartbeat_age_ms{node=\"301\"}"), std::string::npos) << text;
}

// Lines logged while it lives, through a logger of its own (spdlog's default
// one is put back after).
class LogCapture {
 public:
  LogCapture() : previous_(spdlog::default_logger()) {
    auto logger = std::make_shared<spdlog::logger>("capture", std::make_shared<spdlog::sinks::ostream_sink_mt>(out_));
    logger->set_level(spdlog::level::info);
    logger->set_pattern("%v");
    spdlog::set_default_logger(std::move(logger));
  }
  ~LogCapture() { spdlog::set_default_logger(previous_); }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;
  std::vector<std::string> lines() {
    spdlog::default_logger()->flush();
    std::vector<std::string> out;
    std::istringstream in(out_.str());
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
  }

 private:
  std::shared_ptr<spdlog::logger> previous_;
  std::ostringstream out_;
};

// A heartbeat of a broken or hostile node may carry tens of thousands of
// sync-done reports mgmtd ignores: one line says how many, with the first,
// however many there were. Every one is still counted.
TEST(ClusterState, IgnoredSyncDoneReportsOfAHeartbeatAreLoggedInOneLine) {
  Harness h;
  for (int i = 1; i <= 2; ++i) h.add_storage(i, 1);
  ASSERT_TRUE(h.state->create_chain_table({.replicas = 2}).has_value());
  std::vector<SyncDoneReport> bogus;
  for (uint32_t i = 0; i < 40000; ++i) bogus.push_back({.chain_id = 1000 + i, .target_id = 1, .chain_version = 1});
  std::vector<std::string> lines;
  {
    LogCapture capture;
    h.beat(1, 1, std::move(bogus));
    lines = capture.lines();
  }
  EXPECT_LE(lines.size(), 2u) << (lines.empty() ? "" : lines.front());
  EXPECT_EQ(std::count_if(lines.begin(), lines.end(),
                          [](const std::string& l) { return l.find("ignored 40000 sync-done") != std::string::npos; }),
            1)
      << (lines.empty() ? "nothing logged" : lines.front());
  EXPECT_EQ(h.registry.counter("weft_mgmt_ignored_reports_total", "").value(), 40000u);
}

// A heartbeat whose sync-done reports would all be ignored changes nothing
// persisted, so it costs no copy of the state and no refresh of every
// node's and chain's metrics (seen here: another node's heartbeat-age gauge
// is not touched). One good report among bogus ones still applies, the rest
// are counted.
TEST(ClusterState, OnlyIgnoredSyncDoneReportsChangeNothing) {
  Harness h;
  Harness::TwoReplicaChain c;
  ASSERT_NO_FATAL_FAILURE(c = chain_with_a_syncing_tail(h));
  auto [id, head, tail, head_node, tail_node] = c;
  const ChainVersion round = h.chain(id).version;
  const RoutingVersion before = h.state->routing_version();
  auto& head_age = h.registry.gauge("weft_mgmt_heartbeat_age_ms", "", {{"node", std::to_string(head_node)}});
  const int64_t head_age_before = head_age.value();

  h.clock.advance(3s);
  std::vector<SyncDoneReport> bogus;
  for (uint32_t i = 0; i < 1000; ++i) bogus.push_back({.chain_id = 1000 + i, .target_id = tail, .chain_version = 1});
  bogus.push_back({.chain_id = id, .target_id = tail, .chain_version = round + 1});  // a version it never had
  bogus.push_back({.chain_id = id, .target_id = head, .chain_version = round});      // not the node's target
  h.beat(tail_node, 1, bogus);
  EXPECT_EQ(h.chain(id).entries, (std::vector<ChainEntry>{{head, S}, {tail, Y}}));
  EXPECT_EQ(h.state->routing_version(), before);
  EXPECT_EQ(head_age.value(), head_age_before) << "the state was copied and every node's metrics refreshed";
  EXPECT_EQ(h.registry.counter("weft_mgmt_ignored_reports_total", "").value(), 1002u);

  bogus.push_back({.chain_id = id, .target_id = tail, .chain_version = round});
  bogus.push_back({.chain_id = id, .target_id = tail, .chain_version = round});  // twice: the second finds it serving
  h.beat(tail_node, 1, bogus);
  EXPECT_EQ(h.chain(id).entries, (std::vector<ChainEntry>{{head, S}, {tail, S}}));
  EXPECT_GT(h.state->routing_version(), before);
  EXPECT_EQ(h.registry.counter("weft_mgmt_ignored_reports_total", "").value(), 1002u + 1003u);
}

TEST(ClusterState, ConcurrentHeartbeatsAndTicksKeepInvariants) {
  Harness h;
  for (int i = 1; i <= 4; ++i) h.add_storage(i, 2);
  ASSERT_TRUE(h.state->create_chain_table({.replicas = 3}).has_value());
  std::vector<std::thread> threads;
  for (NodeId n = 1; n <= 4; ++n)
    threads.emplace_back([&, n] {
      for (int i = 0; i < 300; ++i) {
        (void)h.state->heartbeat({.node_id = n, .incarnation = 1});
        if (n == 1) h.clock.advance(100ms);
        (void)h.state->tick();
      }
    });
  for (auto& t : threads) t.join();
  for (const auto& [id, chain] : h.state->routing().chains) EXPECT_TRUE(check_chain(chain).has_value());
}

}  // namespace
}  // namespace weft::mgmt
