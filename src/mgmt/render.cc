#include "mgmt/render.h"

#include <algorithm>
#include <map>
#include <vector>

#include <fmt/format.h>

namespace weft::mgmt {
namespace {

using Row = std::vector<std::string>;

// Left-aligned columns separated by two spaces, header first.
void append_table(std::string& out, const std::string& title, const std::vector<Row>& rows) {
  out += title + "\n";
  std::vector<size_t> width;
  for (const Row& r : rows)
    for (size_t i = 0; i < r.size(); ++i) {
      if (width.size() <= i) width.push_back(0);
      width[i] = std::max(width[i], r[i].size());
    }
  for (const Row& r : rows) {
    std::string line = " ";
    for (size_t i = 0; i < r.size(); ++i)
      line += " " + r[i] + (i + 1 < r.size() ? std::string(width[i] - r[i].size() + 1, ' ') : "");
    out += line + "\n";
  }
}

int64_t lease_left_ms(TimePoint expiry, TimePoint now) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(expiry - now).count();
}

int64_t age_ms(TimePoint since, TimePoint now) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(now - since).count();
}

std::string chain_members(const ChainInfo& c) {
  std::string s;
  for (const ChainEntry& e : c.entries) {
    if (!s.empty()) s += " -> ";
    s += fmt::format("{}({})", e.target_id, to_string(e.state));
  }
  return s;
}

std::string quoted(std::string_view s) { return "\"" + json_escape(s) + "\""; }

}  // namespace

std::string format_bytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return fmt::format("{} B", bytes);
  double v = static_cast<double>(bytes);
  size_t unit = 0;
  while (v >= 1024 && unit + 1 < std::size(kUnits)) v /= 1024, ++unit;
  return fmt::format("{:.1f} {}", v, kUnits[unit]);
}

std::string json_escape(std::string_view s) {
  std::string out;
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20 || c == 0x7f) out += fmt::format("\\u{:04x}", c);
        else out += ch;
    }
  }
  return out;
}

// How many chains each target is in (a target in none is a spare: `weft
// admin target replace` can put it in an offline one's place).
static std::map<TargetId, size_t> chain_counts(const RoutingInfo& routing) {
  std::map<TargetId, size_t> out;
  for (const auto& [id, c] : routing.chains)
    for (const ChainEntry& e : c.entries) ++out[e.target_id];
  return out;
}

std::string render_text(const RoutingInfo& routing, TimePoint now, const std::vector<ClientInfo>& clients,
                        const MetaStoreRecord& meta_store) {
  std::string out = fmt::format("routing version {}\n", routing.version);
  // mgmt/cluster_state.h, "Meta's store": what a meta must serve to be accepted.
  if (meta_store.store_id == 0)
    out += "meta store: none recorded\n";
  else
    out += fmt::format("meta store: {:016x} (inode ids issued below {})\n", meta_store.store_id,
                       meta_store.ids_issued_below);
  std::vector<Row> nodes{{"ID", "KIND", "ADDRESS", "STATE", "INCARNATION", "LEASE LEFT"}};
  for (const auto& [id, n] : routing.nodes)
    nodes.push_back({std::to_string(id), std::string(to_string(n.kind)), n.address, std::string(to_string(n.state)),
                     std::to_string(n.incarnation), fmt::format("{:.1f}s", lease_left_ms(n.lease_expiry, now) / 1000.0)});
  append_table(out, fmt::format("nodes ({})", routing.nodes.size()), nodes);
  std::vector<Row> targets{{"ID", "NODE", "NAME", "STATE", "CHAINS", "USED", "FREE", "CAPACITY"}};
  const auto chains_of = chain_counts(routing);
  for (const auto& [id, t] : routing.targets) {
    uint64_t free = t.capacity_bytes > t.used_bytes ? t.capacity_bytes - t.used_bytes : 0;
    targets.push_back({std::to_string(id), std::to_string(t.node_id), t.name, std::string(to_string(t.state)),
                       std::to_string(chains_of.contains(id) ? chains_of.at(id) : 0), format_bytes(t.used_bytes),
                       format_bytes(free), format_bytes(t.capacity_bytes)});
  }
  append_table(out, fmt::format("targets ({})", routing.targets.size()), targets);
  std::vector<Row> chains{{"CHAIN", "TABLE", "VERSION", "WRITABLE", "TARGETS (head first)"}};
  for (const auto& [id, c] : routing.chains)
    chains.push_back({std::to_string(id), std::to_string(c.table_id), std::to_string(c.version),
                      route_chain(c).has_value() ? "yes" : "NO", chain_members(c)});
  append_table(out, fmt::format("chains ({})", routing.chains.size()), chains);
  std::vector<Row> client_rows{{"CLIENT", "LABEL", "CONNECTED", "LAST HEARTBEAT", "LEASE LEFT"}};
  for (const ClientInfo& c : clients)
    client_rows.push_back({fmt::format("{:016x}", c.id), c.label, fmt::format("{:.0f}s ago", age_ms(c.first_seen, now) / 1000.0),
                           fmt::format("{:.1f}s ago", age_ms(c.last_heartbeat, now) / 1000.0),
                           fmt::format("{:.1f}s", lease_left_ms(c.lease_expiry, now) / 1000.0)});
  append_table(out, fmt::format("clients ({})", clients.size()), client_rows);
  return out;
}

std::string render_json(const RoutingInfo& routing, TimePoint now, const std::vector<ClientInfo>& clients,
                        const MetaStoreRecord& meta_store) {
  std::string out = fmt::format("{{\"routing_version\":{},", routing.version);
  // The id as a hex string (as `weft status` and the logs show it; above 2^53 too).
  if (meta_store.store_id == 0)
    out += "\"meta_store\":null,";
  else
    out += fmt::format("\"meta_store\":{{\"id\":\"{:016x}\",\"ids_issued_below\":{}}},", meta_store.store_id,
                       meta_store.ids_issued_below);
  out += "\"nodes\":[";
  bool first = true;
  for (const auto& [id, n] : routing.nodes) {
    out += fmt::format("{}{{\"id\":{},\"kind\":{},\"address\":{},\"state\":{},\"incarnation\":{},\"lease_left_ms\":{}}}",
                       first ? "" : ",", id, quoted(to_string(n.kind)), quoted(n.address), quoted(to_string(n.state)),
                       n.incarnation, lease_left_ms(n.lease_expiry, now));
    first = false;
  }
  out += "],\"targets\":[";
  first = true;
  const auto chains_of = chain_counts(routing);
  for (const auto& [id, t] : routing.targets) {
    uint64_t free = t.capacity_bytes > t.used_bytes ? t.capacity_bytes - t.used_bytes : 0;
    out += fmt::format("{}{{\"id\":{},\"node_id\":{},\"name\":{},\"state\":{},\"chains\":{},\"used_bytes\":{},"
                       "\"free_bytes\":{},\"capacity_bytes\":{}}}",
                       first ? "" : ",", id, t.node_id, quoted(t.name), quoted(to_string(t.state)),
                       chains_of.contains(id) ? chains_of.at(id) : 0, t.used_bytes, free, t.capacity_bytes);
    first = false;
  }
  out += "],\"chain_tables\":[";
  first = true;
  for (const auto& [id, t] : routing.tables) {
    out += fmt::format("{}{{\"id\":{},\"replicas\":{},\"chains\":[{}]}}", first ? "" : ",", id, t.replicas,
                       fmt::join(t.chains, ","));
    first = false;
  }
  out += "],\"chains\":[";
  first = true;
  for (const auto& [id, c] : routing.chains) {
    std::string entries;
    for (const ChainEntry& e : c.entries)
      entries += fmt::format("{}{{\"target_id\":{},\"state\":{}}}", entries.empty() ? "" : ",", e.target_id,
                             quoted(to_string(e.state)));
    out += fmt::format("{}{{\"id\":{},\"table_id\":{},\"version\":{},\"writable\":{},\"targets\":[{}]}}",
                       first ? "" : ",", id, c.table_id, c.version, route_chain(c).has_value() ? "true" : "false",
                       entries);
    first = false;
  }
  out += "],\"clients\":[";
  first = true;
  for (const ClientInfo& c : clients) {
    // Ids as hex strings: JSON numbers above 2^53 lose precision in most parsers.
    out += fmt::format("{}{{\"id\":\"{:016x}\",\"label\":{},\"connected_ms\":{},\"heartbeat_age_ms\":{},"
                       "\"lease_left_ms\":{}}}",
                       first ? "" : ",", c.id, quoted(c.label), age_ms(c.first_seen, now),
                       age_ms(c.last_heartbeat, now), lease_left_ms(c.lease_expiry, now));
    first = false;
  }
  return out + "]}";
}

}  // namespace weft::mgmt
