#include "client/placement.h"
#include "client/remove_chunks.h"

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

// The per-index removal visits exactly the chain's chunks of the range (a
// chain twice in the stripe, ranges starting and ending mid-row, batches
// cutting rows), as a walk over every index would find them.
TEST(ChainIndexes, ListsTheChainsIndexesOfARangeInBatches) {
  const std::vector<mgmt::ChainId> stripe{1, 2, 1, 3, 4};
  for (mgmt::ChainId chain : {1u, 2u, 4u, 9u}) {
    for (auto [first, end] : {std::pair<uint64_t, uint64_t>{0, 0}, {0, 1}, {3, 23}, {5, 25}, {7, 8}, {8, 7}, {0, 100}}) {
      std::vector<uint64_t> expected;
      for (uint64_t i = first; i < end; ++i)
        if (chain_of_chunk(stripe, i) == chain) expected.push_back(i);
      for (size_t batch : {1u, 2u, 3u, 256u}) {
        ChainIndexes indexes(stripe, chain, first, end);
        std::vector<uint64_t> got;
        for (auto b = indexes.next(batch); !b.empty(); b = indexes.next(batch)) {
          EXPECT_LE(b.size(), batch);
          got.insert(got.end(), b.begin(), b.end());
        }
        EXPECT_EQ(got, expected) << "chain " << chain << " [" << first << ", " << end << ") batch " << batch;
      }
    }
  }
  ChainIndexes near_the_top(stripe, 1, UINT64_MAX - 7, UINT64_MAX);
  auto top = near_the_top.next(100);
  EXPECT_FALSE(top.empty());
  for (uint64_t i : top) EXPECT_EQ(chain_of_chunk(stripe, i), 1u);
  EXPECT_TRUE(near_the_top.next(100).empty());
}

}  // namespace
}  // namespace weft::client
