#include "client/placement.h"

#include <gtest/gtest.h>

#include <set>

#include "weft/client.h"

namespace weft::client {
namespace {

mgmt::RoutingInfo table_of(uint32_t chains) {
  mgmt::RoutingInfo r;
  r.version = 7;
  mgmt::ChainTableInfo t;
  t.id = 1;
  t.replicas = 2;
  for (uint32_t c = 1; c <= chains; ++c) t.chains.push_back(100 + c);
  r.tables[1] = t;
  return r;
}

TEST(Placement, StripeUsesDistinctChainsOfTheTable) {
  auto routing = table_of(12);
  meta::Layout l;
  l.chain_table_id = 1;
  l.stripe_count = 5;
  l.first_chain = 10;
  l.shuffle_seed = 42;
  auto s = stripe_chains(l, routing);
  ASSERT_TRUE(s.has_value()) << s.error();
  ASSERT_EQ(s->size(), 5u);
  std::set<mgmt::ChainId> distinct(s->begin(), s->end());
  EXPECT_EQ(distinct.size(), 5u);
  // Chains first_chain .. first_chain + 4 (mod 12): 111, 112, 101, 102, 103.
  EXPECT_EQ(distinct, (std::set<mgmt::ChainId>{111, 112, 101, 102, 103}));
  // Every client computes the same order.
  EXPECT_EQ(*s, *stripe_chains(l, routing));
  l.shuffle_seed = 43;
  EXPECT_EQ(std::set<mgmt::ChainId>(s->begin(), s->end()), distinct);
}

TEST(Placement, StripeIsClampedToTheTableAndUnknownTableIsUnavailable) {
  auto routing = table_of(3);
  meta::Layout l;
  l.chain_table_id = 1;
  l.stripe_count = 16;
  auto s = stripe_chains(l, routing);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->size(), 3u);
  l.chain_table_id = 9;
  auto bad = stripe_chains(l, routing);
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().code(), Code::kUnavailable);
}

TEST(Placement, SplitRangeCutsAtChunkBoundaries) {
  auto spans = split_range(1000, 2000, 1024);
  ASSERT_EQ(spans.size(), 3u);
  EXPECT_EQ(spans[0].chunk_index, 0u);
  EXPECT_EQ(spans[0].offset, 1000u);
  EXPECT_EQ(spans[0].length, 24u);
  EXPECT_EQ(spans[1].chunk_index, 1u);
  EXPECT_EQ(spans[1].length, 1024u);
  EXPECT_EQ(spans[1].buffer_offset, 24u);
  EXPECT_EQ(spans[2].chunk_index, 2u);
  EXPECT_EQ(spans[2].length, 2000u - 24 - 1024);
  EXPECT_TRUE(split_range(5, 0, 1024).empty());
}

TEST(SplitPath, ComponentsAndErrors) {
  EXPECT_EQ(*split_path("/a//b/c/"), (std::vector<std::string>{"a", "b", "c"}));
  // "." and ".." stay (resolved by lookup), except at the start of an absolute path.
  EXPECT_EQ(*split_path("/./a/./b"), (std::vector<std::string>{"a", ".", "b"}));
  EXPECT_EQ(*split_path("/a/b/../c"), (std::vector<std::string>{"a", "b", "..", "c"}));
  EXPECT_EQ(*split_path("/../../a"), (std::vector<std::string>{"a"}));
  EXPECT_EQ(*split_path("../a"), (std::vector<std::string>{"..", "a"}));
  EXPECT_TRUE(split_path("/")->empty());
  EXPECT_EQ(split_path("/" + std::string(256, 'x')).error().code(), Code::kNameTooLong);
}

}  // namespace
}  // namespace weft::client
