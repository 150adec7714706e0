// mgmt/chain_table.h
// Builds the chains of a chain table: which targets replicate together, and in
// which order (head first). Goals, in priority order:
//   1. every chain has `replicas` targets on DISTINCT storage nodes;
//   2. every target sits in the same number of chains (differing by at most one
//      when the counts do not divide; a node with more than its share of
//      targets gets fewer chains per target, since chains need distinct nodes);
//   3. the chains of one target spread over as many different peer nodes as
//      possible, so a failed node's load and its recovery traffic spread evenly;
//   4. head and tail positions are spread evenly over targets.
// By default each target joins ceil((nodes-1)/(replicas-1)) chains (enough for
// its peers to cover every other node; at most kAutoChainsPerTargetMax), rounded
// up so the slot count divides evenly.
// Method: (1) greedy choice of the nodes of each chain, then a bounded local
// search evening out how often two nodes share a chain; (2) each node's chain
// slots go to its targets, greedy then local search maximising distinct peer
// nodes per target; (3) heads by bipartite assignment (no target heads more
// than ceil(its chains / replicas)), then tail balancing. About 1 s for
// 100 nodes x 10 targets (6000 chains) on one core: call it off the I/O path.
// Deterministic: the same input (in any order) gives the same chains.
// Threading: pure function.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "mgmt/routing.h"

namespace weft::mgmt {

struct PlacementTarget {
  TargetId target_id = 0;
  NodeId node_id = kInvalidNode;
};

struct ChainTableSpec {
  uint32_t replicas = 3;
  uint32_t chains_per_target = 0;  // 0: automatic (see above)
};

inline constexpr uint32_t kAutoChainsPerTargetMax = 16;
inline constexpr uint32_t kChainsPerTargetMax = 256;

// The chains per target build_chains uses for `spec` over `targets` targets on
// `nodes` distinct nodes: spec.chains_per_target, or the automatic count (0 if
// build_chains would refuse the shape). A table has at most
// targets x this / replicas chains.
uint32_t chains_per_target(const ChainTableSpec& spec, size_t targets, size_t nodes);

// Each inner vector is one chain, head first. kInvalidArgument for replicas < 1,
// no targets, fewer distinct nodes than replicas, or chains_per_target too large.
Result<std::vector<std::vector<TargetId>>> build_chains(std::vector<PlacementTarget> targets,
                                                        const ChainTableSpec& spec);

}  // namespace weft::mgmt
