#include "mgmt/routing.h"

#include <cctype>

#include <algorithm>
#include <charconv>
#include <map>
#include <set>

namespace weft::mgmt {

std::string_view to_string(NodeKind k) {
  switch (k) {
    case NodeKind::kStorage: return "storage";
    case NodeKind::kMeta: return "meta";
    case NodeKind::kClient: return "client";
  }
  return "unknown";
}

std::string_view to_string(NodeState s) {
  switch (s) {
    case NodeState::kUp: return "up";
    case NodeState::kDown: return "down";
  }
  return "unknown";
}

std::string_view to_string(TargetState s) {
  switch (s) {
    case TargetState::kServing: return "serving";
    case TargetState::kSyncing: return "syncing";
    case TargetState::kOffline: return "offline";
    case TargetState::kLastServing: return "last-serving";
  }
  return "unknown";
}

Result<const ChainInfo*> RoutingInfo::chain(ChainId id) const {
  auto it = chains.find(id);
  if (it == chains.end()) return error(Code::kNotFound, "unknown chain {}", id);
  return &it->second;
}

Result<const TargetInfo*> RoutingInfo::target(TargetId id) const {
  auto it = targets.find(id);
  if (it == targets.end()) return error(Code::kNotFound, "unknown target {}", id);
  return &it->second;
}

Result<const NodeInfo*> RoutingInfo::node(NodeId id) const {
  auto it = nodes.find(id);
  if (it == nodes.end()) return error(Code::kNotFound, "unknown node {}", id);
  return &it->second;
}

Result<std::string> RoutingInfo::target_address(TargetId id) const {
  WEFT_TRY(const TargetInfo* t, target(id));
  WEFT_TRY(const NodeInfo* n, node(t->node_id));
  return n->address;
}

Result<ChainRoute> route_chain(const ChainInfo& chain) {
  ChainRoute route{.chain_id = chain.id, .version = chain.version};
  for (const ChainEntry& e : chain.entries) {
    if (e.state == TargetState::kServing) {
      route.write_path.push_back(e.target_id);
      route.readable.push_back(e.target_id);
    } else if (e.state == TargetState::kSyncing) {
      route.write_path.push_back(e.target_id);
    }
  }
  if (route.readable.empty()) {
    auto last = std::find_if(chain.entries.begin(), chain.entries.end(), [](const ChainEntry& e) {
      return e.state == TargetState::kLastServing;
    });
    if (last != chain.entries.end())
      return error(Code::kUnavailable, "chain {} has no serving target: last-serving target {} is down",
                   chain.id, last->target_id);
    return error(Code::kUnavailable, "chain {} has no serving target", chain.id);
  }
  return route;
}

namespace {
int rank(TargetState s) {
  switch (s) {
    case TargetState::kServing: return 0;
    case TargetState::kSyncing: return 1;
    case TargetState::kLastServing: return 2;
    case TargetState::kOffline: return 3;
  }
  return 4;
}
}  // namespace

bool lost_last_copy(const ChainInfo& chain) {
  return std::all_of(chain.entries.begin(), chain.entries.end(),
                     [](const ChainEntry& e) { return e.state == TargetState::kOffline; });
}

Result<void> check_chain(const ChainInfo& chain) {
  if (chain.entries.empty()) return error(Code::kInternal, "chain {}: no targets", chain.id);
  std::set<TargetId> seen;
  int serving = 0, syncing = 0, last = 0, prev_rank = 0;
  for (const ChainEntry& e : chain.entries) {
    if (!seen.insert(e.target_id).second)
      return error(Code::kInternal, "chain {}: target {} appears twice", chain.id, e.target_id);
    int r = rank(e.state);
    if (r > 3) return error(Code::kInternal, "chain {}: bad state of target {}", chain.id, e.target_id);
    if (r < prev_rank)
      return error(Code::kInternal, "chain {}: target {} ({}) out of order", chain.id, e.target_id,
                   to_string(e.state));
    prev_rank = r;
    serving += e.state == TargetState::kServing;
    syncing += e.state == TargetState::kSyncing;
    last += e.state == TargetState::kLastServing;
  }
  if (serving == 0 && (last > 1 || (last == 0 && syncing > 0)))
    return error(Code::kInternal, "chain {}: no serving, {} syncing and {} last-serving targets", chain.id, syncing,
                 last);
  if (last > 0 && (serving > 0 || syncing > 0))
    return error(Code::kInternal, "chain {}: last-serving next to serving/syncing targets", chain.id);
  return {};
}

Result<void> check_address(std::string_view address) {
  if (address.size() > kAddressBytesMax)
    return error(Code::kInvalidArgument, "address of {} bytes (at most {})", address.size(), kAddressBytesMax);
  size_t colon = address.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == address.size())
    return error(Code::kInvalidArgument, "address '{}' is not host:port", address);
  std::string_view host = address.substr(0, colon), port = address.substr(colon + 1);
  const bool bracketed = host.front() == '[';
  if (bracketed ? (host.size() < 3 || host.back() != ']') : host.find(':') != std::string_view::npos)
    return error(Code::kInvalidArgument, "address '{}': bad host (IPv6 needs [brackets])", address);
  // A host name or an IP address: no NUL, space, control or non-ASCII byte
  // (every routing hands the address out, and logs print it).
  const std::string_view inner = bracketed ? host.substr(1, host.size() - 2) : host;
  for (unsigned char ch : inner) {
    const bool ok = std::isalnum(ch) || ch == '.' || ch == '-' || ch == '_' || (bracketed && (ch == ':' || ch == '%'));
    if (!ok || ch > 0x7f)
      return error(Code::kInvalidArgument, "address of {} bytes: host has a byte 0x{:02x} no host name or IP has",
                   address.size(), ch);
  }
  unsigned value = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (ec != std::errc() || end != port.data() + port.size() || value == 0 || value > 65535)
    return error(Code::kInvalidArgument, "address '{}': port must be 1..65535", address);
  return {};
}

namespace {

constexpr uint64_t kVarintBytesMax = 10;

uint64_t varint_bytes(uint64_t v) {
  uint64_t n = 1;
  for (; v >= 0x80; v >>= 7) ++n;
  return n;
}

// A field with a tag below 16 (one byte) and a varint value.
uint64_t field(uint64_t v) { return 1 + varint_bytes(v); }
constexpr uint64_t kWideField = 1 + kVarintBytesMax;
// A length-delimited field (string, bytes, message, packed) of `n` bytes.
uint64_t delimited(uint64_t n) { return 1 + varint_bytes(n) + n; }

uint64_t node_bytes(const NodeInfo& n) {
  // id, kind, address, incarnation, state, lease expiry, last heartbeat
  return field(n.id) + field(static_cast<uint64_t>(n.kind)) + delimited(n.address.size()) + kWideField +
         field(static_cast<uint64_t>(n.state)) + 2 * kWideField;
}

uint64_t target_bytes(const TargetInfo& t) {
  // id, node id, name, state, reported, capacity, used, data id, fs id, fs free
  // (the last three and usage change in place: counted at their widest)
  return field(t.id) + field(t.node_id) + delimited(t.name.size()) + field(static_cast<uint64_t>(t.state)) +
         field(1) + 5 * kWideField;
}

uint64_t table_bytes(const ChainTableInfo& t) {
  uint64_t chains = 0;
  for (ChainId c : t.chains) chains += varint_bytes(c);
  return field(t.id) + field(t.replicas) + delimited(chains);
}

uint64_t chain_bytes(const ChainInfo& c) {
  uint64_t n = field(c.id) + field(c.table_id) + kWideField;
  for (const ChainEntry& e : c.entries) n += delimited(field(e.target_id) + field(static_cast<uint64_t>(e.state)));
  return n;
}

}  // namespace

uint64_t encoded_bytes_bound(const RoutingInfo& info) {
  uint64_t n = 2 * kWideField;  // version, meta store id
  for (const auto& [id, node] : info.nodes) n += delimited(node_bytes(node));
  for (const auto& [id, t] : info.targets) n += delimited(target_bytes(t));
  for (const auto& [id, t] : info.tables) n += delimited(table_bytes(t));
  for (const auto& [id, c] : info.chains) n += delimited(chain_bytes(c));
  return n;
}

SpaceTotals cluster_space(const RoutingInfo& info) {
  struct Fs {
    uint64_t free_sum = 0;
    uint64_t fs_free = 0;
  };
  std::map<uint64_t, Fs> shared;  // by fs_id
  // Sums saturate: the counts are what servers report, and a wrapped total
  // would tell clients (statfs, fallocate) of a nearly empty cluster.
  auto add = [](uint64_t a, uint64_t b) { return b > UINT64_MAX - a ? UINT64_MAX : a + b; };
  SpaceTotals out;
  uint64_t free = 0;
  for (const auto& [id, t] : info.targets) {
    out.used_bytes = add(out.used_bytes, t.used_bytes);
    const uint64_t own = t.capacity_bytes > t.used_bytes ? t.capacity_bytes - t.used_bytes : 0;
    if (t.fs_id == 0) {
      free = add(free, own);
      continue;
    }
    Fs& fs = shared[t.fs_id];
    fs.free_sum = add(fs.free_sum, own);
    fs.fs_free = std::max(fs.fs_free, t.fs_free_bytes);  // the freshest reading is not known: the largest
  }
  for (const auto& [fs_id, fs] : shared) free = add(free, std::min(fs.free_sum, fs.fs_free));
  out.capacity_bytes = add(out.used_bytes, free);
  return out;
}

}  // namespace weft::mgmt
