#include <gtest/gtest.h>

#include "common/fault.h"
#include "mgmt/state_codec.h"
#include "mgmt/state_store.h"
#include "mgmt/test_util.h"

namespace weft::mgmt {
namespace {

using namespace std::chrono_literals;
using testing::Harness;
using testing::TempDir;

TEST(StateCodec, RoundTripsEveryRecord) {
  PersistedState in;
  in.routing.version = 42;
  in.ids = {.next_node = 3, .next_target = 9, .next_chain = 5, .next_table = 2};
  in.routing.nodes[2] = NodeInfo{.id = 2, .kind = NodeKind::kMeta, .address = "m\"x:1", .incarnation = 77,
                                 .state = NodeState::kDown};
  in.routing.targets[8] = TargetInfo{.id = 8, .node_id = 2, .name = "/data/ssd0", .reported = false,
                                     .capacity_bytes = 1ull << 41, .used_bytes = 12345, .data_id = 0xfeed};
  in.routing.tables[1] = ChainTableInfo{.id = 1, .replicas = 2, .chains = {3, 4}};
  in.routing.chains[4] = ChainInfo{.id = 4, .table_id = 1, .version = 17,
                                   .entries = {{8, TargetState::kLastServing}, {7, TargetState::kOffline}}};
  PersistedState out;
  ASSERT_TRUE(decode_record(meta_key(), encode_meta(42, in.ids), out).has_value());
  ASSERT_TRUE(decode_record(node_key(2), encode_node(in.routing.nodes[2]), out).has_value());
  ASSERT_TRUE(decode_record(target_key(8), encode_target(in.routing.targets[8]), out).has_value());
  ASSERT_TRUE(decode_record(table_key(1), encode_table(in.routing.tables[1]), out).has_value());
  ASSERT_TRUE(decode_record(chain_key(4), encode_chain(in.routing.chains[4]), out).has_value());
  in.leases = {.server = 3s, .client = 30s};
  ASSERT_TRUE(decode_record(leases_key(), encode_leases(in.leases), out).has_value());
  EXPECT_EQ(out.leases, in.leases);
  EXPECT_EQ(out.routing.version, 42u);
  EXPECT_EQ(out.ids, in.ids);
  EXPECT_EQ(out.routing.nodes, in.routing.nodes);
  EXPECT_EQ(out.routing.targets, in.routing.targets);
  EXPECT_EQ(out.routing.tables, in.routing.tables);
  EXPECT_EQ(out.routing.chains, in.routing.chains);
}

// A target record written before data ids existed decodes with data id 0
// (not known: the next registration records it, proving nothing lost); one
// written before the lost-data mark, as not lost.
TEST(StateCodec, ATargetRecordWithoutADataIdDecodesAsNotKnown) {
  TargetInfo t{.id = 8, .node_id = 2, .name = "/data/ssd0", .capacity_bytes = 1ull << 41, .used_bytes = 5,
               .data_id = 0xfeed};
  t.lost_data = true;
  std::string record = encode_target(t);
  record.resize(record.size() - 1);  // as written before the lost-data mark: not lost
  PersistedState out;
  ASSERT_TRUE(decode_record(target_key(8), record, out).has_value());
  t.lost_data = false;
  EXPECT_EQ(out.routing.targets.at(8), t);
  record.resize(record.size() - sizeof(uint64_t));  // as the older format wrote it
  ASSERT_TRUE(decode_record(target_key(8), record, out).has_value());
  t.data_id = 0;
  EXPECT_EQ(out.routing.targets.at(8), t);
  record.resize(record.size() - 3);
  EXPECT_FALSE(decode_record(target_key(8), record, out).has_value()) << "still truncated below the old format";
}

TEST(StateCodec, MalformedRecordsAreCorruption) {
  ChainInfo chain{.id = 4, .table_id = 1, .version = 2, .entries = {{8, TargetState::kServing}}};
  std::string good = encode_chain(chain);
  PersistedState out;
  auto corrupt = [&](std::string_view key, std::string value) {
    auto r = decode_record(key, value, out);
    return !r.has_value() && r.error().code() == Code::kCorruption;
  };
  for (size_t n = 0; n < good.size(); ++n) EXPECT_TRUE(corrupt(chain_key(4), good.substr(0, n))) << "cut at " << n;
  EXPECT_TRUE(corrupt(chain_key(4), good + "x")) << "trailing bytes";
  EXPECT_TRUE(corrupt(chain_key(5), good)) << "key and record ids differ";
  std::string bad_state = good;
  bad_state.back() = 9;
  EXPECT_TRUE(corrupt(chain_key(4), bad_state));
  std::string bad_format = good;
  bad_format[0] = 2;
  EXPECT_TRUE(corrupt(chain_key(4), bad_format));
  std::string huge_count = good;
  huge_count[17] = '\xff';  // entry count (after format 1 + id 4 + table 4 + version 8)
  EXPECT_TRUE(corrupt(chain_key(4), huge_count));
  EXPECT_TRUE(corrupt("Z", "x")) << "unknown key";
  EXPECT_TRUE(corrupt("N12", encode_node(NodeInfo{.id = 1, .address = "a:1", .incarnation = 1})));
  EXPECT_TRUE(out.routing.chains.empty()) << "nothing half-decoded is kept";
}

// Builds a cluster with history: a table, a dead node, a restarted node.
void build_history(Harness& h) {
  for (int i = 1; i <= 4; ++i) h.add_storage(i, 2);
  ASSERT_TRUE(h.state->create_chain_table({.replicas = 3}).has_value());
  ASSERT_TRUE(h.state->register_node({.kind = NodeKind::kClient, .address = "c:1", .incarnation = 1}).has_value());
  h.clock.advance(16s);
  for (NodeId n : {1, 2, 3}) h.beat(n);
  ASSERT_EQ(*h.state->tick(), (std::vector<NodeId>{4, 5}));
  h.add_storage(2, 2, /*incarnation=*/2);
}

TEST(Persistence, EverythingSurvivesReopen) {
  TempDir dir;
  Harness h(dir.path());
  build_history(h);
  RoutingInfo before = h.state->routing();
  h.reopen();
  RoutingInfo after = h.state->routing();
  EXPECT_EQ(after.version, before.version);
  EXPECT_EQ(after.targets, before.targets);
  EXPECT_EQ(after.tables, before.tables);
  EXPECT_EQ(after.chains, before.chains);
  ASSERT_EQ(after.nodes.size(), before.nodes.size());
  for (const auto& [id, n] : before.nodes) {
    EXPECT_EQ(after.nodes.at(id).address, n.address);
    EXPECT_EQ(after.nodes.at(id).incarnation, n.incarnation);
    EXPECT_EQ(after.nodes.at(id).state, n.state);
    EXPECT_EQ(after.nodes.at(id).kind, n.kind);
  }
  // Id counters survived: new objects get fresh ids.
  RegisterReply fresh = h.add_storage(9, 1);
  EXPECT_EQ(fresh.node_id, 6u);
  EXPECT_EQ(fresh.target_ids, std::vector<TargetId>{9});
  auto table = h.state->create_chain_table({.replicas = 1});
  ASSERT_TRUE(table.has_value());
  EXPECT_EQ(*table, 2u);
  RoutingInfo routing = h.state->routing();  // a range-for would not keep the temporary alive
  for (ChainId c : routing.tables.at(*table).chains)
    EXPECT_GT(c, before.chains.rbegin()->first) << "chain ids are never reused";
}

TEST(Persistence, LeasesRestartWithMgmtd) {
  TempDir dir;
  Harness h(dir.path());
  NodeId n = h.add_storage(1, 1).node_id;
  h.clock.advance(1h);  // mgmtd was down for an hour
  h.reopen();
  EXPECT_TRUE(h.state->tick()->empty()) << "a full lease from the restart";
  h.clock.advance(15s - 1ns);
  EXPECT_TRUE(h.state->tick()->empty());
  h.clock.advance(1ns);
  EXPECT_EQ(*h.state->tick(), std::vector<NodeId>{n});
}

// lease_ms lowered across a restart of mgmtd: a server may still hold a
// grant of the old, longer lease, so mgmtd waits that long (+ grace) before
// declaring it dead; once no such grant can be held, the shorter lease is
// recorded and a later restart waits only that. A longer lease is recorded
// at once.
TEST(Persistence, ALeaseLoweredAcrossARestartWaitsForTheOldOne) {
  TempDir dir;
  Harness h(dir.path());  // lease 10 s + grace 5 s
  NodeId a = h.add_storage(1, 1).node_id, b = h.add_storage(2, 1).node_id;
  h.options.lease = {.lease = 2s, .grace = 1s};
  h.reopen();
  EXPECT_EQ(h.state->leases_at_open().server, 10s);
  for (int i = 0; i < 10; ++i) {  // a renews (2 s leases now); b is cut off, holding its 10 s grant
    h.clock.advance(1s);
    h.beat(a);
    EXPECT_TRUE(h.state->tick()->empty()) << "b may hold its old grant: " << i;
  }
  h.clock.advance(1s - 1ns);
  EXPECT_TRUE(h.state->tick()->empty());
  h.clock.advance(1ns);  // 10 s (old lease) + 1 s (grace) after the restart
  EXPECT_EQ(*h.state->tick(), std::vector<NodeId>{b});

  h.reopen();  // the 2 s lease was recorded at that tick
  EXPECT_EQ(h.state->leases_at_open().server, 2s);
  h.clock.advance(3s - 1ns);
  EXPECT_TRUE(h.state->tick()->empty());
  h.clock.advance(1ns);
  EXPECT_EQ(*h.state->tick(), std::vector<NodeId>{a});

  h.options.lease = {.lease = 20s, .grace = 1s};  // raised: recorded before anything is granted
  h.reopen();
  h.reopen();
  EXPECT_EQ(h.state->leases_at_open().server, 20s);
}

TEST(Persistence, FailedWriteLeavesStateUnchanged) {
  TempDir dir;
  Harness h(dir.path());
  h.add_storage(1, 1);
  RoutingInfo before = h.state->routing();
  {
    fault::Scope fail("mgmt.store.write");
    auto r = h.state->register_node({.kind = NodeKind::kStorage, .address = "host2:9000", .incarnation = 1});
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error().code(), Code::kIoError);
    EXPECT_EQ(fail.triggered(), 1);
  }
  EXPECT_EQ(h.state->routing().version, before.version);
  EXPECT_EQ(h.state->routing().nodes.size(), 1u);
  h.reopen();
  EXPECT_EQ(h.state->routing().nodes.size(), 1u);
  EXPECT_EQ(h.add_storage(2, 1).node_id, 2u) << "the failed registration consumed no id";
}

// A node declared dead for refusing connections heartbeats, but its revival
// cannot be recorded: the heartbeat fails and mgmtd's refusal watch is left
// as it was (no "the probe was misled" pause begins), so the same node
// restarted afterwards is declared by refusal again at once.
TEST(Persistence, AHeartbeatWhoseRevivalFailedToPersistStartsNoRefusalPause) {
  TempDir dir;
  Harness h(dir.path());
  auto c = h.two_replica_chain();
  h.clock.advance(1ms);
  h.beat(c.tail_node);  // heard since it registered: a refusal now means dead
  TimePoint probe = h.clock.now();
  h.clock.advance(1ms);
  ASSERT_TRUE(*h.state->declare_refusing(c.tail_node, 1, probe));
  {
    fault::Scope fail("mgmt.store.write");
    auto r = h.state->heartbeat({.node_id = c.tail_node, .incarnation = 1});
    ASSERT_FALSE(r.has_value()) << "the revival could not be recorded";
    EXPECT_EQ(r.error().code(), Code::kIoError);
  }
  EXPECT_EQ(h.state->routing().nodes.at(c.tail_node).state, NodeState::kDown);
  // Restarted there (a new incarnation): its refusal is right, no pause.
  h.add_storage(h.state->routing().nodes.at(c.tail_node).address == "host1:9000" ? 1 : 2, 1, /*incarnation=*/2);
  h.beat(c.tail_node, 2);
  h.clock.advance(1ms);
  EXPECT_TRUE(*h.state->declare_refusing(c.tail_node, 2, h.clock.now()));
}

TEST(Persistence, CorruptStateRefusesToOpen) {
  TempDir dir;
  {
    Harness h(dir.path());
    h.add_storage(1, 1);
  }
  {
    auto store = StateStore::open(dir.path());
    ASSERT_TRUE(store.has_value()) << store.error();
    ChainInfo broken{.id = 1, .table_id = 1, .entries = {{1, TargetState::kSyncing}}};  // syncing from nobody
    ASSERT_TRUE((*store)->write({.puts = {{chain_key(1), encode_chain(broken)}}}).has_value());
  }
  ManualClock clock;
  metrics::Registry registry;
  auto opened = ClusterState::open({.db_dir = dir.path()}, clock, registry);
  ASSERT_FALSE(opened.has_value());
  EXPECT_EQ(opened.error().code(), Code::kCorruption) << opened.error();
}

}  // namespace
}  // namespace weft::mgmt
