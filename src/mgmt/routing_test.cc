#include "mgmt/routing.h"

#include <gtest/gtest.h>

namespace weft::mgmt {
namespace {

TEST(Routing, RouteOrdersWritePathAndReadableReplicas) {
  ChainInfo c{.id = 3, .version = 9,
              .entries = {{10, TargetState::kServing}, {11, TargetState::kServing},
                          {12, TargetState::kSyncing}, {13, TargetState::kOffline}}};
  auto r = route_chain(c);
  ASSERT_TRUE(r.has_value()) << r.error();
  EXPECT_EQ(r->chain_id, 3u);
  EXPECT_EQ(r->version, 9u);
  EXPECT_EQ(r->write_path, (std::vector<TargetId>{10, 11, 12}));
  EXPECT_EQ(r->readable, (std::vector<TargetId>{10, 11}));
  EXPECT_EQ(r->head(), 10u);
  EXPECT_EQ(r->tail(), 12u);
}

TEST(Routing, LastServingChainIsUnavailableWithReason) {
  ChainInfo c{.id = 4, .entries = {{20, TargetState::kLastServing}, {21, TargetState::kOffline}}};
  auto r = route_chain(c);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code(), Code::kUnavailable);
  EXPECT_NE(r.error().message().find("last-serving target 20"), std::string::npos);
}

TEST(Routing, CheckChainRejectsBrokenInvariants) {
  using E = std::vector<ChainEntry>;
  auto bad = [](E e) { return !check_chain(ChainInfo{.id = 1, .entries = std::move(e)}).has_value(); };
  EXPECT_TRUE(bad({}));
  EXPECT_TRUE(bad({{1, TargetState::kSyncing}}));
  EXPECT_TRUE(bad({{1, TargetState::kSyncing}, {2, TargetState::kOffline}}));
  EXPECT_TRUE(bad({{1, TargetState::kSyncing}, {2, TargetState::kServing}}));
  EXPECT_TRUE(bad({{1, TargetState::kServing}, {1, TargetState::kServing}}));
  EXPECT_TRUE(bad({{1, TargetState::kServing}, {2, TargetState::kLastServing}}));
  EXPECT_TRUE(bad({{1, TargetState::kLastServing}, {2, TargetState::kLastServing}}));
  EXPECT_TRUE(bad({{1, TargetState::kOffline}, {2, TargetState::kServing}}));
  EXPECT_FALSE(bad({{1, TargetState::kServing}, {2, TargetState::kSyncing}, {3, TargetState::kOffline}}));
  EXPECT_FALSE(bad({{1, TargetState::kLastServing}, {3, TargetState::kOffline}}));
  // A chain whose last copy was lost (target_states.h, LOST): it serves nothing until promoted.
  EXPECT_FALSE(bad({{1, TargetState::kOffline}, {2, TargetState::kOffline}}));
}

TEST(Routing, Addresses) {
  EXPECT_TRUE(check_address("10.0.0.1:9000").has_value());
  EXPECT_TRUE(check_address("host-a:1").has_value());
  EXPECT_TRUE(check_address("[::1]:65535").has_value());
  EXPECT_TRUE(check_address("[fe80::1%eth0]:7000").has_value());
  EXPECT_TRUE(check_address("node_7.rack-2:7000").has_value());
  for (const char* bad : {"", "host", ":80", "host:", "host:0", "host:65536", "host:8x", "::1:80", "[]:80",
                          "host name:80", "h\tx:80", "\x1b[2J:80", "h\xc3\xa9llo:80", "[::1 ]:80", "h%x:80"})
    EXPECT_EQ(check_address(bad).error().code(), Code::kInvalidArgument) << bad;
  EXPECT_FALSE(check_address(std::string("127.0.0.2\0x:7000", 16)).has_value()) << "a NUL in the host";
  std::string host(kAddressBytesMax - 6, 'h');
  EXPECT_TRUE(check_address(host + ":65535").has_value());
  EXPECT_EQ(check_address(host + "h:65535").error().code(), Code::kInvalidArgument) << "longer than kAddressBytesMax";
}

TEST(Routing, LookupsReportUnknownIds) {
  RoutingInfo r;
  r.nodes[1] = NodeInfo{.id = 1, .address = "a:1"};
  r.targets[5] = TargetInfo{.id = 5, .node_id = 1};
  r.targets[6] = TargetInfo{.id = 6, .node_id = 2};
  EXPECT_EQ(*r.target_address(5), "a:1");
  EXPECT_EQ(r.target_address(6).error().code(), Code::kNotFound);
  EXPECT_EQ(r.target_address(7).error().code(), Code::kNotFound);
  EXPECT_EQ(r.chain(1).error().code(), Code::kNotFound);
  EXPECT_EQ(to_string(TargetState::kLastServing), "last-serving");
  EXPECT_EQ(to_string(NodeKind::kMeta), "meta");
}

// Six targets on one 100 GiB-free disk (a one-machine cluster) hold 100 GiB
// more, not 600; capped targets count what their caps leave; a target of
// unknown filesystem (an older server) counts alone.
TEST(Routing, TargetsSharingAFilesystemCountItsFreeSpaceOnce) {
  constexpr uint64_t G = uint64_t{1} << 30;
  RoutingInfo r;
  auto add = [&](TargetId id, uint64_t used, uint64_t capacity, uint64_t fs_id, uint64_t fs_free) {
    r.targets[id] = TargetInfo{.id = id, .capacity_bytes = capacity, .used_bytes = used, .fs_id = fs_id,
                               .fs_free_bytes = fs_free};
  };
  for (TargetId id = 1; id <= 6; ++id) add(id, 2 * G, 2 * G + 100 * G, 7, 100 * G);
  SpaceTotals one_disk = cluster_space(r);
  EXPECT_EQ(one_disk.used_bytes, 12 * G);
  EXPECT_EQ(one_disk.capacity_bytes, 112 * G);

  add(7, 1 * G, 4 * G, 8, 50 * G);  // capped at 4 GiB on a disk of its own
  add(8, 1 * G, 4 * G, 8, 50 * G);
  add(9, 0, 10 * G, 0, 0);  // unknown filesystem
  SpaceTotals mixed = cluster_space(r);
  EXPECT_EQ(mixed.used_bytes, 14 * G);
  EXPECT_EQ(mixed.capacity_bytes, 112 * G + (2 * G + 6 * G) + 10 * G);

  r.targets[3].fs_free_bytes = 40 * G;  // readings taken at different times: the largest
  EXPECT_EQ(cluster_space(r).capacity_bytes, mixed.capacity_bytes);
  EXPECT_EQ(cluster_space(RoutingInfo{}).capacity_bytes, 0u);
}

}  // namespace
}  // namespace weft::mgmt
