// Round trips of the mgmt types through their protobuf messages, and
// rejection of out-of-range enum values from the wire.
#include "mgmt/proto_convert.h"

#include <gtest/gtest.h>

#include "mgmt/test_util.h"

namespace weft::mgmt {
namespace {

RoutingInfo sample_routing() {
  RoutingInfo r;
  r.version = 42;
  r.nodes[1] = {.id = 1, .kind = NodeKind::kStorage, .address = "10.0.0.1:9000", .incarnation = 7,
                .state = NodeState::kUp, .lease_expiry = from_ns(123456789), .last_heartbeat = from_ns(1000)};
  r.nodes[2] = {.id = 2, .kind = NodeKind::kMeta, .address = "[::1]:9001", .incarnation = 1ull << 62,
                .state = NodeState::kDown, .lease_expiry = from_ns(-5), .last_heartbeat = from_ns(0)};
  r.targets[10] = {.id = 10, .node_id = 1, .name = "/ssd/0", .state = TargetState::kSyncing, .reported = false,
                   .capacity_bytes = 1ull << 40, .used_bytes = 12345};
  r.targets[11] = {.id = 11, .node_id = 1, .name = "t\"1\n", .state = TargetState::kLastServing};
  r.tables[1] = {.id = 1, .replicas = 2, .chains = {5, 6}};
  r.chains[5] = {.id = 5, .table_id = 1, .version = 9,
                 .entries = {{10, TargetState::kServing}, {11, TargetState::kOffline}}};
  r.chains[6] = {.id = 6, .table_id = 1, .version = 1, .entries = {{11, TargetState::kLastServing}}};
  return r;
}

TEST(ProtoConvert, RoutingRoundTripsExactly) {
  RoutingInfo in = sample_routing();
  pb::Routing wire;
  to_proto(in, &wire);
  std::string bytes;
  ASSERT_TRUE(wire.SerializeToString(&bytes));
  pb::Routing parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  auto out = from_proto(parsed);
  ASSERT_TRUE(out) << out.error();
  EXPECT_EQ(out->version, in.version);
  EXPECT_EQ(out->nodes, in.nodes);
  EXPECT_EQ(out->targets, in.targets);
  EXPECT_EQ(out->tables, in.tables);
  EXPECT_EQ(out->chains, in.chains);
}

// encoded_bytes_bound() (what mgmtd limits) is never below the real encoding,
// at the extremes of every field, and not far above it for a plain cluster.
TEST(ProtoConvert, EncodedBytesBoundCoversTheEncoding) {
  auto check = [](const RoutingInfo& r) {
    pb::Routing wire;
    to_proto(r, &wire);
    EXPECT_GE(encoded_bytes_bound(r), wire.ByteSizeLong());
    return std::pair<uint64_t, uint64_t>(encoded_bytes_bound(r), wire.ByteSizeLong());
  };
  check(RoutingInfo{});
  check(sample_routing());
  RoutingInfo wide = sample_routing();
  wide.version = UINT64_MAX;
  wide.nodes[UINT32_MAX] = {.id = UINT32_MAX, .kind = NodeKind::kClient, .address = std::string(kAddressBytesMax, 'a'),
                            .incarnation = UINT64_MAX, .state = NodeState::kDown,
                            .lease_expiry = from_ns(INT64_MIN), .last_heartbeat = from_ns(INT64_MIN)};
  wide.targets[UINT64_MAX] = {.id = UINT64_MAX, .node_id = UINT32_MAX, .name = std::string(1024, 'n'),
                              .state = TargetState::kLastServing, .reported = true, .capacity_bytes = UINT64_MAX,
                              .used_bytes = UINT64_MAX, .data_id = UINT64_MAX, .fs_id = UINT64_MAX,
                              .fs_free_bytes = UINT64_MAX};
  wide.tables[UINT32_MAX] = {.id = UINT32_MAX, .replicas = UINT32_MAX, .chains = std::vector<ChainId>(300, UINT32_MAX)};
  wide.chains[UINT32_MAX] = {.id = UINT32_MAX, .table_id = UINT32_MAX, .version = UINT64_MAX,
                             .entries = std::vector<ChainEntry>(40, {UINT64_MAX, TargetState::kLastServing})};
  check(wide);
  RoutingInfo plain;
  plain.version = 1000;
  for (NodeId n = 1; n <= 100; ++n) {
    plain.nodes[n] = {.id = n, .address = "10.0.0." + std::to_string(n) + ":9000", .incarnation = 1ull << 60,
                      .lease_expiry = from_ns(1ll << 50), .last_heartbeat = from_ns(1ll << 50)};
    for (TargetId t = 0; t < 10; ++t)
      plain.targets[n * 10 + t] = {.id = n * 10 + t, .node_id = n, .name = "/data/ssd" + std::to_string(t),
                                   .capacity_bytes = 1ull << 42, .used_bytes = 1ull << 40};
  }
  plain.tables[1] = {.id = 1, .replicas = 3};
  for (ChainId c = 1; c <= 6000; ++c) {
    plain.tables[1].chains.push_back(c);
    plain.chains[c] = {.id = c, .table_id = 1, .version = 100,
                       .entries = {{c % 1000 + 10, TargetState::kServing}, {(c + 7) % 1000 + 10, TargetState::kServing},
                                   {(c + 13) % 1000 + 10, TargetState::kServing}}};
  }
  auto [bound, actual] = check(plain);
  EXPECT_LE(bound, actual * 2) << "the bound refuses only what is near the limit";
}

TEST(ProtoConvert, EmptyRoutingRoundTrips) {
  pb::Routing wire;
  to_proto(RoutingInfo{}, &wire);
  auto out = from_proto(wire);
  ASSERT_TRUE(out);
  EXPECT_EQ(out->version, 0u);
  EXPECT_TRUE(out->nodes.empty() && out->chains.empty());
}

TEST(ProtoConvert, RegisterAndHeartbeatRoundTrip) {
  RegisterRequest reg{.kind = NodeKind::kStorage, .address = "h:1", .incarnation = 99,
                      .targets = {{"a", 100, 5}, {"b", 200, 0}}};
  pb::RegisterRequest preg;
  to_proto(reg, &preg);
  auto reg2 = from_proto(preg);
  ASSERT_TRUE(reg2);
  EXPECT_EQ(reg2->kind, reg.kind);
  EXPECT_EQ(reg2->address, reg.address);
  EXPECT_EQ(reg2->incarnation, reg.incarnation);
  ASSERT_EQ(reg2->targets.size(), 2u);
  EXPECT_EQ(reg2->targets[1].name, "b");
  EXPECT_EQ(reg2->targets[1].capacity_bytes, 200u);
  EXPECT_EQ(reg2->targets[0].used_bytes, 5u);

  RegisterReply rr{.node_id = 3, .target_ids = {7, 8}, .routing_version = 5, .lease = std::chrono::seconds(3)};
  pb::RegisterReply prr;
  to_proto(rr, &prr);
  RegisterReply rr2 = from_proto(prr);
  EXPECT_EQ(rr2.node_id, 3u);
  EXPECT_EQ(rr2.target_ids, rr.target_ids);
  EXPECT_EQ(rr2.routing_version, 5u);
  EXPECT_EQ(rr2.lease, rr.lease);

  HeartbeatRequest hb{
      .node_id = 3, .incarnation = 99, .usage = {{7, 10, 100}, {9, 0, 5, /*failed=*/true}}, .sync_done = {{4, 8, 6}}};
  pb::HeartbeatRequest phb;
  to_proto(hb, &phb);
  HeartbeatRequest hb2 = from_proto(phb);
  EXPECT_EQ(hb2.node_id, 3u);
  EXPECT_EQ(hb2.incarnation, 99u);
  ASSERT_EQ(hb2.usage.size(), 2u);
  EXPECT_EQ(hb2.usage[0].target_id, 7u);
  EXPECT_EQ(hb2.usage[0].used_bytes, 10u);
  EXPECT_EQ(hb2.usage[0].capacity_bytes, 100u);
  EXPECT_FALSE(hb2.usage[0].failed);
  EXPECT_EQ(hb2.usage[1].target_id, 9u);
  EXPECT_TRUE(hb2.usage[1].failed) << "a target out of service is reported as such";
  ASSERT_EQ(hb2.sync_done.size(), 1u);
  EXPECT_EQ(hb2.sync_done[0].chain_id, 4u);
  EXPECT_EQ(hb2.sync_done[0].target_id, 8u);
  EXPECT_EQ(hb2.sync_done[0].chain_version, 6u);

  HeartbeatReply hr{.routing_version = 12, .lease = std::chrono::milliseconds(1500)};
  pb::HeartbeatReply phr;
  to_proto(hr, &phr);
  HeartbeatReply hr2 = from_proto(phr);
  EXPECT_EQ(hr2.routing_version, 12u);
  EXPECT_EQ(hr2.lease, hr.lease);
}

// Meta's store (mgmt/cluster_state.h): its fields cross the wire, and a
// message without them (an older peer) reads as "not told".
TEST(ProtoConvert, MetaStoreFieldsRoundTrip) {
  RegisterRequest reg{.kind = NodeKind::kMeta, .address = "m:1", .incarnation = 2,
                      .meta_store = {.store_id = 0xabc, .ids_issued_below = 4098}, .accept_store_change = true};
  pb::RegisterRequest preg;
  to_proto(reg, &preg);
  auto reg2 = from_proto(preg);
  ASSERT_TRUE(reg2);
  EXPECT_EQ(reg2->meta_store, reg.meta_store);
  EXPECT_TRUE(reg2->accept_store_change);
  RegisterReply rr{
      .node_id = 1, .meta_store_checked = true, .meta_ids_mark = 77, .serve_after = std::chrono::milliseconds(1500)};
  pb::RegisterReply prr;
  to_proto(rr, &prr);
  RegisterReply rr2 = from_proto(prr);
  EXPECT_TRUE(rr2.meta_store_checked);
  EXPECT_EQ(rr2.meta_ids_mark, 77u);
  EXPECT_EQ(rr2.serve_after, std::chrono::milliseconds(1500));
  prr.set_serve_after_ns(-5);
  EXPECT_EQ(from_proto(prr).serve_after, Duration::zero()) << "a negative wait is none";
  pb::HeartbeatRequest phb;
  to_proto(HeartbeatRequest{.node_id = 1, .incarnation = 2, .meta_ids_issued_below = 9000, .meta_store_id = 0xabc},
           &phb);
  EXPECT_EQ(from_proto(phb).meta_ids_issued_below, 9000u);
  EXPECT_EQ(from_proto(phb).meta_store_id, 0xabcu);
  EXPECT_EQ(from_proto(pb::HeartbeatRequest{}).meta_store_id, 0u) << "an older meta: not told";
  RoutingInfo routing{.version = 3, .meta_store_id = 0xfeedfacecafebeef};
  pb::Routing prouting;
  to_proto(routing, &prouting);
  auto routing2 = from_proto(prouting);
  ASSERT_TRUE(routing2);
  EXPECT_EQ(routing2->meta_store_id, routing.meta_store_id);
  EXPECT_GE(encoded_bytes_bound(routing), prouting.ByteSizeLong());
  pb::RegisterRequest old;
  old.set_kind(static_cast<uint32_t>(NodeKind::kMeta));
  auto old2 = from_proto(old);
  ASSERT_TRUE(old2);
  EXPECT_EQ(old2->meta_store, MetaStoreRecord{});
  EXPECT_FALSE(old2->accept_store_change);
  EXPECT_FALSE(from_proto(pb::RegisterReply{}).meta_store_checked);
  EXPECT_EQ(from_proto(pb::RegisterReply{}).serve_after, Duration::zero()) << "an older mgmtd asks no wait";
}

TEST(ProtoConvert, OutOfRangeEnumsAreProtocolErrors) {
  pb::Routing wire;
  to_proto(sample_routing(), &wire);
  pb::Routing bad_node = wire;
  bad_node.mutable_nodes(0)->set_kind(9);
  EXPECT_EQ(from_proto(bad_node).error().code(), Code::kProtocol);
  pb::Routing bad_state = wire;
  bad_state.mutable_nodes(1)->set_state(0);
  EXPECT_EQ(from_proto(bad_state).error().code(), Code::kProtocol);
  pb::Routing bad_target = wire;
  bad_target.mutable_targets(0)->set_state(5);
  EXPECT_EQ(from_proto(bad_target).error().code(), Code::kProtocol);
  pb::Routing bad_entry = wire;
  bad_entry.mutable_chains(0)->mutable_entries(1)->set_state(0);
  EXPECT_EQ(from_proto(bad_entry).error().code(), Code::kProtocol);
}

// A registration that parsed but names a kind mgmtd does not know is the
// caller's wrong value (kInvalidArgument), not a broken frame (kProtocol).
TEST(ProtoConvert, AnUndefinedNodeKindInARegistrationIsAnInvalidArgument) {
  for (uint32_t kind : {0u, 4u, 255u, UINT32_MAX}) {
    pb::RegisterRequest reg;
    reg.set_kind(kind);
    reg.set_address("host1:9000");
    reg.set_incarnation(1);
    auto r = from_proto(reg);
    ASSERT_FALSE(r.has_value()) << kind;
    EXPECT_EQ(r.error().code(), Code::kInvalidArgument) << kind << ": " << r.error();
  }
}

}  // namespace
}  // namespace weft::mgmt
