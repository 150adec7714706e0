#include "mgmt/chain_table.h"

#include <algorithm>
#include <set>
#include <tuple>

#include "common/assert.h"

namespace weft::mgmt {
namespace {

// Targets and nodes by dense index (sorted by id, for determinism).
struct Shape {
  std::vector<TargetId> target_ids;
  std::vector<size_t> node_of;  // target index -> node index
  size_t nodes = 0;
};

Result<Shape> make_shape(std::vector<PlacementTarget> targets) {
  std::sort(targets.begin(), targets.end(),
            [](const auto& a, const auto& b) { return a.target_id < b.target_id; });
  std::set<NodeId> node_set;
  for (size_t i = 0; i < targets.size(); ++i) {
    if (i > 0 && targets[i].target_id == targets[i - 1].target_id)
      return error(Code::kInvalidArgument, "target {} listed twice", targets[i].target_id);
    node_set.insert(targets[i].node_id);
  }
  std::vector<NodeId> nodes(node_set.begin(), node_set.end());
  Shape shape{.nodes = nodes.size()};
  for (const auto& t : targets) {
    shape.target_ids.push_back(t.target_id);
    auto it = std::lower_bound(nodes.begin(), nodes.end(), t.node_id);
    shape.node_of.push_back(static_cast<size_t>(it - nodes.begin()));
  }
  return shape;
}

uint32_t auto_chains_per_target(size_t targets, size_t nodes, uint32_t replicas) {
  if (replicas == 1) return 1;
  uint64_t k = std::min<uint64_t>((nodes - 2) / (replicas - 1) + 1, kAutoChainsPerTargetMax);
  for (uint64_t c = k; c < k + replicas; ++c)
    if ((targets * c) % replicas == 0) return static_cast<uint32_t>(c);
  return static_cast<uint32_t>(k);
}

// Takes one slot away from the target of node `node` with the most slots (ties: the
// highest index), keeping a node's targets within one of each other.
void drop_slot(const Shape& shape, std::vector<uint32_t>& quota, size_t node) {
  size_t best = SIZE_MAX;
  for (size_t t = 0; t < quota.size(); ++t)
    if (shape.node_of[t] == node && quota[t] > 0 && (best == SIZE_MAX || quota[t] >= quota[best])) best = t;
  WEFT_ASSERT(best != SIZE_MAX);
  --quota[best];
}

// Per-target slot counts such that sum == chains * replicas and no node holds more
// slots than there are chains (each chain uses a node at most once).
std::vector<uint32_t> make_quotas(const Shape& shape, uint32_t per_target, uint32_t replicas) {
  std::vector<uint32_t> quota(shape.target_ids.size(), per_target);
  for (;;) {
    std::vector<uint64_t> node_slots(shape.nodes, 0);
    uint64_t total = 0;
    for (size_t t = 0; t < quota.size(); ++t) node_slots[shape.node_of[t]] += quota[t], total += quota[t];
    uint64_t chains = total / replicas;
    bool changed = false;
    for (size_t n = 0; n < shape.nodes; ++n)
      for (; node_slots[n] > chains; --node_slots[n], changed = true) drop_slot(shape, quota, n);
    if (changed) continue;
    for (uint64_t excess = total - chains * replicas; excess > 0; --excess) {
      size_t fullest = static_cast<size_t>(
          std::max_element(node_slots.begin(), node_slots.end()) - node_slots.begin());
      drop_slot(shape, quota, fullest);
      --node_slots[fullest];
    }
    return quota;
  }
}

constexpr int64_t kImproveEvaluationsMax = 1'500'000;  // chain pairs examined, over all passes

// Local search after the greedy node choice: moves node a from chain c1 to c2
// and node b from c2 to c1 (slot counts stay) while that lowers the sum of
// squared pair counts, i.e. spreads every node's chains evenly over its peers.
void improve_node_chains(std::vector<std::vector<size_t>>& chains, std::vector<uint32_t>& pairs, size_t nodes) {
  auto contains = [](const std::vector<size_t>& c, size_t n) { return std::find(c.begin(), c.end(), n) != c.end(); };
  // Adds d to the pair counts of n with every member of c except `skip`; returns the change of sum of squares.
  auto shift = [&](size_t n, const std::vector<size_t>& c, size_t skip, int d) {
    int64_t change = 0;
    for (size_t u : c) {
      if (u == skip) continue;
      int64_t v = pairs[n * nodes + u];
      change += (v + d) * (v + d) - v * v;
      pairs[n * nodes + u] = static_cast<uint32_t>(v + d);
      pairs[u * nodes + n] = static_cast<uint32_t>(v + d);
    }
    return change;
  };
  // Quadratic in chains: bounded so huge tables stay fast (they keep the greedy result).
  int64_t budget = kImproveEvaluationsMax;
  for (int pass = 0; pass < 8 && budget > 0; ++pass) {
    bool improved = false;
    for (size_t c1 = 0; c1 < chains.size() && budget > 0; ++c1, budget -= static_cast<int64_t>(chains.size()))
      for (size_t c2 = c1 + 1; c2 < chains.size(); ++c2)
        for (size_t i = 0; i < chains[c1].size(); ++i)
          for (size_t j = 0; j < chains[c2].size(); ++j) {
            size_t a = chains[c1][i], b = chains[c2][j];
            if (a == b || contains(chains[c2], a) || contains(chains[c1], b)) continue;
            int64_t delta = shift(a, chains[c1], a, -1) + shift(b, chains[c2], b, -1);
            delta += shift(a, chains[c2], b, +1) + shift(b, chains[c1], a, +1);
            if (delta < 0) {
              std::swap(chains[c1][i], chains[c2][j]);
              improved = true;
              continue;
            }
            shift(a, chains[c2], b, -1), shift(b, chains[c1], a, -1);  // undo
            shift(a, chains[c1], a, +1), shift(b, chains[c2], b, +1);
          }
    if (!improved) return;
  }
}

// Level 1: which nodes form each chain. Greedy: nodes that must appear in every
// remaining chain first, then the node that shared the fewest chains with the
// members chosen so far (ties: most slots left, lowest index).
std::vector<std::vector<size_t>> node_chains(std::vector<uint64_t> node_left, uint64_t chains, uint32_t replicas) {
  size_t nodes = node_left.size();
  std::vector<uint32_t> pairs(nodes * nodes, 0);
  std::vector<std::vector<size_t>> out;
  for (uint64_t c = 0; c < chains; ++c) {
    uint64_t chains_left = chains - c;
    std::vector<size_t> chain;
    std::vector<bool> in_chain(nodes, false);
    while (chain.size() < replicas) {
      size_t must = 0;
      for (size_t n = 0; n < nodes; ++n) must += !in_chain[n] && node_left[n] == chains_left;
      bool restrict = must == replicas - chain.size();
      using Score = std::tuple<uint32_t, int64_t, size_t>;  // lower wins
      Score best_score{};
      size_t best = SIZE_MAX;
      for (size_t n = 0; n < nodes; ++n) {
        if (in_chain[n] || node_left[n] == 0 || (restrict && node_left[n] != chains_left)) continue;
        uint32_t shared = 0;
        for (size_t u : chain) shared += pairs[n * nodes + u];
        Score s{shared, -static_cast<int64_t>(node_left[n]), n};
        if (best == SIZE_MAX || s < best_score) best_score = s, best = n;
      }
      WEFT_ASSERT(best != SIZE_MAX);  // make_quotas keeps every node within chains_left
      for (size_t u : chain) ++pairs[best * nodes + u], ++pairs[u * nodes + best];
      --node_left[best];
      in_chain[best] = true;
      chain.push_back(best);
    }
    out.push_back(std::move(chain));
  }
  improve_node_chains(out, pairs, nodes);
  return out;
}

// Gain of giving chain `give` away and taking chain `take` instead, for one
// target: (distinct peer nodes gained, sum of squared peer counts removed).
std::pair<int64_t, int64_t> swap_gain(const std::vector<uint32_t>& seen, size_t node, const std::vector<size_t>& give,
                                      const std::vector<size_t>& take) {
  std::vector<std::pair<size_t, int64_t>> delta;  // peer -> change, at most 2 * replicas entries
  auto add = [&](size_t peer, int64_t d) {
    if (peer == node) return;
    for (auto& [p, v] : delta)
      if (p == peer) return void(v += d);
    delta.emplace_back(peer, d);
  };
  for (size_t p : give) add(p, -1);
  for (size_t p : take) add(p, +1);
  int64_t distinct = 0, squares = 0;
  for (auto [peer, d] : delta) {
    int64_t before = seen[peer], after = before + d;
    distinct += (after > 0) - (before > 0);
    squares += before * before - after * after;
  }
  return {distinct, squares};
}

// Local search after the greedy assignment: swaps two chain slots between two
// targets of the same node while that raises their distinct peer nodes (or,
// equally many, evens out their peer counts). Bounded passes.
void improve_assignment(const Shape& shape, const std::vector<std::vector<size_t>>& by_node,
                        std::vector<std::vector<uint32_t>>& seen, std::vector<std::vector<size_t>>& out) {
  std::vector<std::vector<std::pair<size_t, size_t>>> slots(shape.nodes);  // node -> (chain, member index)
  for (size_t c = 0; c < by_node.size(); ++c)
    for (size_t m = 0; m < by_node[c].size(); ++m) slots[by_node[c][m]].emplace_back(c, m);
  for (int pass = 0; pass < 16; ++pass) {
    bool improved = false;
    for (size_t node = 0; node < shape.nodes; ++node)
      for (size_t x = 0; x < slots[node].size(); ++x)
        for (size_t y = x + 1; y < slots[node].size(); ++y) {
          auto [c1, m1] = slots[node][x];
          auto [c2, m2] = slots[node][y];
          size_t t1 = out[c1][m1], t2 = out[c2][m2];
          if (t1 == t2) continue;
          auto g1 = swap_gain(seen[t1], node, by_node[c1], by_node[c2]);
          auto g2 = swap_gain(seen[t2], node, by_node[c2], by_node[c1]);
          std::pair<int64_t, int64_t> gain{g1.first + g2.first, g1.second + g2.second};
          if (gain <= std::pair<int64_t, int64_t>{0, 0}) continue;
          for (size_t p : by_node[c1]) seen[t1][p] -= p != node, seen[t2][p] += p != node;
          for (size_t p : by_node[c2]) seen[t2][p] -= p != node, seen[t1][p] += p != node;
          std::swap(out[c1][m1], out[c2][m2]);
          improved = true;
        }
    if (!improved) return;
  }
}

// Level 2: which target of each node takes each of the node's chain slots. A
// slot goes to the target whose chains so far overlap least with the slot's
// peer nodes (ties: most quota left, lowest index).
std::vector<std::vector<size_t>> assign_targets(const Shape& shape, std::vector<uint32_t> quota,
                                                const std::vector<std::vector<size_t>>& by_node) {
  std::vector<std::vector<uint32_t>> seen(quota.size(), std::vector<uint32_t>(shape.nodes, 0));
  std::vector<std::vector<size_t>> out(by_node.size());
  for (size_t c = 0; c < by_node.size(); ++c) {
    for (size_t node : by_node[c]) {
      using Score = std::tuple<uint32_t, int64_t, size_t>;
      Score best_score{};
      size_t best = SIZE_MAX;
      for (size_t t = 0; t < quota.size(); ++t) {
        if (shape.node_of[t] != node || quota[t] == 0) continue;
        uint32_t overlap = 0;
        for (size_t peer : by_node[c]) overlap += peer != node ? seen[t][peer] : 0;
        Score s{overlap, -int64_t{quota[t]}, t};
        if (best == SIZE_MAX || s < best_score) best_score = s, best = t;
      }
      WEFT_ASSERT(best != SIZE_MAX);  // a node's slots equal its targets' quotas
      --quota[best];
      for (size_t peer : by_node[c]) seen[best][peer] += peer != node;
      out[c].push_back(best);
    }
  }
  improve_assignment(shape, by_node, seen, out);
  return out;
}

// Chooses each chain's head so that no target heads more than ceil(its chains /
// replicas) chains: a bipartite assignment (Kuhn's augmenting paths), which
// always exists by Hall's theorem since a target in k chains shares them with
// replicas - 1 others. Moves the head to position 0.
class HeadAssigner {
 public:
  HeadAssigner(std::vector<std::vector<size_t>>& chains, size_t targets)
      : chains_(chains), cap_(targets, 0), heads_(targets), head_of_(chains.size(), SIZE_MAX) {
    std::vector<uint32_t> in(targets, 0);
    for (const auto& c : chains)
      for (size_t t : c) ++in[t];
    for (size_t t = 0; t < targets; ++t) cap_[t] = (in[t] + chains.front().size() - 1) / chains.front().size();
  }

  void run() {
    for (size_t c = 0; c < chains_.size(); ++c) {
      std::vector<bool> visited(cap_.size(), false);
      bool placed = augment(c, visited);
      WEFT_ASSERT(placed);  // Hall's condition holds (see above)
    }
    for (size_t c = 0; c < chains_.size(); ++c) {
      auto it = std::find(chains_[c].begin(), chains_[c].end(), head_of_[c]);
      std::rotate(chains_[c].begin(), it, it + 1);
    }
  }

 private:
  bool augment(size_t c, std::vector<bool>& visited) {
    for (size_t t : chains_[c]) {
      if (visited[t]) continue;
      visited[t] = true;
      if (heads_[t].size() < cap_[t]) return take(c, t), true;
      for (size_t other : heads_[t]) {
        if (!augment(other, visited)) continue;
        std::erase(heads_[t], other);
        return take(c, t), true;
      }
    }
    return false;
  }
  void take(size_t c, size_t t) {
    heads_[t].push_back(c);
    head_of_[c] = t;
  }

  std::vector<std::vector<size_t>>& chains_;
  std::vector<size_t> cap_;
  std::vector<std::vector<size_t>> heads_;
  std::vector<size_t> head_of_;
};

// Orders each chain's members so head and tail duty spread: heads by
// HeadAssigner, then repeatedly swaps two other members' positions when that
// lowers sum(weight[p] * count[t][p]^2), the tail (it commits) weighing most.
void balance_positions(std::vector<std::vector<size_t>>& chains, size_t targets, uint32_t replicas) {
  if (replicas < 2) return;
  HeadAssigner(chains, targets).run();
  std::vector<int64_t> weight(replicas, 1);
  weight[replicas - 1] = 2;
  weight[0] = 4;
  std::vector<std::vector<int64_t>> count(targets, std::vector<int64_t>(replicas, 0));
  for (const auto& c : chains)
    for (size_t p = 0; p < c.size(); ++p) ++count[c[p]][p];
  for (int pass = 0; pass < 64; ++pass) {
    bool improved = false;
    for (auto& c : chains)
      for (size_t i = 1; i < c.size(); ++i)  // heads are fixed by HeadAssigner
        for (size_t j = i + 1; j < c.size(); ++j) {
          // a moves from position i to j, b from j to i.
          int64_t a_i = count[c[i]][i], a_j = count[c[i]][j], b_i = count[c[j]][i], b_j = count[c[j]][j];
          int64_t delta = weight[i] * (2 - 2 * a_i + 2 * b_i) + weight[j] * (2 + 2 * a_j - 2 * b_j);
          if (delta >= 0) continue;
          --count[c[i]][i], ++count[c[i]][j], --count[c[j]][j], ++count[c[j]][i];
          std::swap(c[i], c[j]);
          improved = true;
        }
    if (!improved) return;
  }
}

}  // namespace

uint32_t chains_per_target(const ChainTableSpec& spec, size_t targets, size_t nodes) {
  if (spec.chains_per_target != 0) return spec.chains_per_target;
  if (spec.replicas < 1 || targets == 0 || nodes < spec.replicas) return 0;
  return auto_chains_per_target(targets, nodes, spec.replicas);
}

Result<std::vector<std::vector<TargetId>>> build_chains(std::vector<PlacementTarget> targets,
                                                        const ChainTableSpec& spec) {
  if (spec.replicas < 1) return error(Code::kInvalidArgument, "chain table needs replicas >= 1, got {}", spec.replicas);
  if (targets.empty()) return error(Code::kInvalidArgument, "no storage targets to build chains from");
  if (spec.chains_per_target > kChainsPerTargetMax)
    return error(Code::kInvalidArgument, "chains_per_target {} exceeds {}", spec.chains_per_target, kChainsPerTargetMax);
  WEFT_TRY(Shape shape, make_shape(std::move(targets)));
  if (shape.nodes < spec.replicas)
    return error(Code::kInvalidArgument,
                 "{} replicas need {} distinct storage nodes, only {} have targets", spec.replicas,
                 spec.replicas, shape.nodes);
  uint32_t per_target = chains_per_target(spec, shape.target_ids.size(), shape.nodes);
  std::vector<uint32_t> quota = make_quotas(shape, per_target, spec.replicas);
  std::vector<uint64_t> node_slots(shape.nodes, 0);
  uint64_t total = 0;
  for (size_t t = 0; t < quota.size(); ++t) node_slots[shape.node_of[t]] += quota[t], total += quota[t];
  uint64_t chains = total / spec.replicas;
  if (chains == 0) return error(Code::kInvalidArgument, "the targets allow no chain of {} replicas", spec.replicas);
  auto members = assign_targets(shape, std::move(quota), node_chains(std::move(node_slots), chains, spec.replicas));
  balance_positions(members, shape.target_ids.size(), spec.replicas);
  std::vector<std::vector<TargetId>> out;
  for (const auto& m : members) {
    auto& chain = out.emplace_back();
    for (size_t t : m) chain.push_back(shape.target_ids[t]);
  }
  return out;
}

}  // namespace weft::mgmt
