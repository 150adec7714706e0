#include "mgmt/chain_table.h"

#include <algorithm>
#include <map>
#include <set>

#include <gtest/gtest.h>

#include "common/random.h"

namespace weft::mgmt {
namespace {

// targets_per_node[i] targets on node i+1; target ids node*100 + j.
std::vector<PlacementTarget> shape(const std::vector<int>& targets_per_node) {
  std::vector<PlacementTarget> out;
  for (size_t n = 0; n < targets_per_node.size(); ++n)
    for (int j = 0; j < targets_per_node[n]; ++j)
      out.push_back({static_cast<TargetId>((n + 1) * 100 + j), static_cast<NodeId>(n + 1)});
  return out;
}

NodeId node_of(TargetId t) { return static_cast<NodeId>(t / 100); }

struct Stats {
  std::map<TargetId, int> chains_of;      // chains per target
  std::map<TargetId, int> heads_of;       // head duty per target
  std::map<TargetId, std::set<NodeId>> peer_nodes;
  std::map<std::pair<NodeId, NodeId>, int> shared;  // chains shared by two nodes
};

Stats check_and_measure(const std::vector<std::vector<TargetId>>& chains, uint32_t replicas) {
  Stats s;
  for (const auto& c : chains) {
    EXPECT_EQ(c.size(), replicas);
    std::set<NodeId> nodes;
    for (TargetId t : c) nodes.insert(node_of(t));
    EXPECT_EQ(nodes.size(), c.size()) << "replicas of one chain on one node";
    ++s.heads_of[c.front()];
    for (TargetId t : c) {
      ++s.chains_of[t];
      for (TargetId u : c)
        if (u != t) s.peer_nodes[t].insert(node_of(u));
    }
    for (NodeId a : nodes)
      for (NodeId b : nodes)
        if (a != b) ++s.shared[{a, b}];
  }
  return s;
}

std::pair<int, int> min_max(const std::map<TargetId, int>& m) {
  auto [lo, hi] = std::minmax_element(m.begin(), m.end(), [](auto& a, auto& b) { return a.second < b.second; });
  return {lo->second, hi->second};
}

struct Case {
  std::vector<int> targets_per_node;
  uint32_t replicas;
  int chains_per_target;  // expected for every target (balanced shapes)
};

class BalancedShapes : public ::testing::TestWithParam<Case> {};

TEST_P(BalancedShapes, DistinctNodesEqualLoadSpreadPeers) {
  const Case& c = GetParam();
  auto targets = shape(c.targets_per_node);
  auto chains = build_chains(targets, {.replicas = c.replicas});
  ASSERT_TRUE(chains.has_value()) << chains.error();
  Stats s = check_and_measure(*chains, c.replicas);
  ASSERT_EQ(s.chains_of.size(), targets.size()) << "every target is used";
  auto [lo, hi] = min_max(s.chains_of);
  EXPECT_EQ(lo, c.chains_per_target);
  EXPECT_EQ(hi, c.chains_per_target);
  size_t nodes = c.targets_per_node.size();
  // Peers: each target's chains reach as many distinct other nodes as its slots allow.
  size_t want_peers = std::min<size_t>(nodes - 1, static_cast<size_t>(c.chains_per_target) * (c.replicas - 1));
  for (const auto& [t, peers] : s.peer_nodes) EXPECT_EQ(peers.size(), want_peers) << "target " << t;
  // A failed node's chains spread evenly over the surviving nodes.
  if (c.replicas > 1) {
    for (size_t a = 1; a <= nodes; ++a) {
      int lo_shared = INT32_MAX, hi_shared = 0;
      for (size_t b = 1; b <= nodes; ++b) {
        if (a == b) continue;
        int n = s.shared[{static_cast<NodeId>(a), static_cast<NodeId>(b)}];
        lo_shared = std::min(lo_shared, n), hi_shared = std::max(hi_shared, n);
      }
      EXPECT_LE(hi_shared - lo_shared, 1) << "node " << a;
    }
  }
  // Head duty spreads: no target heads more than its share rounded up.
  int head_max = (c.chains_per_target + static_cast<int>(c.replicas) - 1) / static_cast<int>(c.replicas);
  for (const auto& [t, n] : s.heads_of) EXPECT_LE(n, head_max) << "target " << t;
}

INSTANTIATE_TEST_SUITE_P(Shapes, BalancedShapes,
                         ::testing::Values(Case{{2, 2, 2}, 2, 2},        // 3 servers x 2 targets, R=2
                                           Case{{4, 4, 4, 4, 4}, 3, 3},  // 5 x 4, R=3
                                           Case{{1, 1, 1, 1}, 1, 1},     // 4 x 1, R=1
                                           Case{{1, 1, 1}, 3, 1},        // every target in the one chain
                                           Case{{3, 3, 3, 3}, 2, 3},
                                           Case{{2, 2, 2, 2, 2, 2}, 3, 3}));

TEST(ChainTable, UnevenTargetCountsStayOnDistinctNodesAndNearEqual) {
  for (auto [counts, replicas] : std::vector<std::pair<std::vector<int>, uint32_t>>{
           {{1, 2, 3}, 2}, {{4, 4, 2}, 2}, {{3, 1, 1, 1}, 2}, {{5, 1, 1}, 3}, {{2, 3, 4, 5}, 3}}) {
    SCOPED_TRACE(::testing::PrintToString(counts));
    auto chains = build_chains(shape(counts), {.replicas = replicas});
    ASSERT_TRUE(chains.has_value()) << chains.error();
    ASSERT_FALSE(chains->empty());
    Stats s = check_and_measure(*chains, replicas);
    // Within a node, targets differ by at most one chain.
    std::map<NodeId, std::pair<int, int>> per_node;
    for (const auto& t : shape(counts)) {
      int n = s.chains_of[t.target_id];
      auto [it, added] = per_node.try_emplace(t.node_id, n, n);
      it->second = {std::min(it->second.first, n), std::max(it->second.second, n)};
    }
    for (const auto& [node, range] : per_node) EXPECT_LE(range.second - range.first, 1) << "node " << node;
    for (const auto& [t, heads] : s.heads_of)
      EXPECT_LE(heads, (s.chains_of[t] + static_cast<int>(replicas) - 1) / static_cast<int>(replicas)) << t;
  }
}

TEST(ChainTable, AllFeasibleSlotsAreUsedWhenOneNodeDominates) {
  // Node 1 has 5 targets, nodes 2 and 3 one each: a chain of 2 needs a distinct
  // peer, so node 1 can fill at most as many slots as nodes 2 and 3 together.
  auto chains = build_chains(shape({5, 1, 1}), {.replicas = 2, .chains_per_target = 2});
  ASSERT_TRUE(chains.has_value()) << chains.error();
  Stats s = check_and_measure(*chains, 2);
  EXPECT_EQ(s.chains_of[200], 2);
  EXPECT_EQ(s.chains_of[300], 2);
  EXPECT_EQ(chains->size(), 4u);  // node 1's slots are capped at 4 (of 10 wanted)
}

TEST(ChainTable, ExplicitChainsPerTarget) {
  auto chains = build_chains(shape({2, 2, 2}), {.replicas = 3, .chains_per_target = 3});
  ASSERT_TRUE(chains.has_value()) << chains.error();
  EXPECT_EQ(chains->size(), 6u);
  auto [lo, hi] = min_max(check_and_measure(*chains, 3).chains_of);
  EXPECT_EQ(lo, 3);
  EXPECT_EQ(hi, 3);
}

TEST(ChainTable, UnsatisfiableRequestsAreInvalidArgument) {
  auto expect_invalid = [](Result<std::vector<std::vector<TargetId>>> r, std::string_view needle) {
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error().code(), Code::kInvalidArgument);
    EXPECT_NE(r.error().message().find(needle), std::string::npos) << r.error();
  };
  expect_invalid(build_chains(shape({2, 2}), {.replicas = 3}), "distinct storage nodes");
  expect_invalid(build_chains(shape({2, 2}), {.replicas = 0}), "replicas >= 1");
  expect_invalid(build_chains({}, {.replicas = 1}), "no storage targets");
  expect_invalid(build_chains(shape({6}), {.replicas = 2}), "distinct storage nodes");
  expect_invalid(build_chains(shape({1, 1}), {.replicas = 1, .chains_per_target = 100000}), "exceeds");
  expect_invalid(build_chains({{1, 1}, {1, 2}}, {.replicas = 1}), "twice");
}

TEST(ChainTable, DeterministicForAnyInputOrder) {
  auto targets = shape({4, 4, 4, 4, 4});
  auto first = build_chains(targets, {.replicas = 3});
  ASSERT_TRUE(first.has_value());
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    auto shuffled = targets;
    portable_shuffle(std::span(shuffled), seed);
    auto again = build_chains(shuffled, {.replicas = 3});
    ASSERT_TRUE(again.has_value());
    EXPECT_EQ(*again, *first);
  }
}

TEST(ChainTable, LargerClusterStaysBalanced) {
  auto targets = shape(std::vector<int>(20, 8));  // 20 servers x 8 targets
  auto chains = build_chains(targets, {.replicas = 3});
  ASSERT_TRUE(chains.has_value()) << chains.error();
  Stats s = check_and_measure(*chains, 3);
  auto [lo, hi] = min_max(s.chains_of);
  EXPECT_EQ(lo, hi);
  EXPECT_EQ(lo, 12);  // ceil(19 / 2) = 10 covers every peer; 12 makes 160 * k divisible by 3
  for (const auto& [t, peers] : s.peer_nodes) EXPECT_GE(peers.size(), 18u) << "target " << t;
}

}  // namespace
}  // namespace weft::mgmt
