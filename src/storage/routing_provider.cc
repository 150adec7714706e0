#include "storage/routing_provider.h"

#include <charconv>

#include "proto/storage.pb.h"

namespace weft::storage {

StaticRoutingProvider::StaticRoutingProvider() : current_(std::make_shared<mgmt::RoutingInfo>()) {}

RoutingSnapshot StaticRoutingProvider::current() const {
  std::lock_guard lock(mu_);
  return current_;
}

void StaticRoutingProvider::on_change(std::function<void()> listener) {
  std::lock_guard lock(mu_);
  listeners_.push_back(std::move(listener));
}

mgmt::RoutingVersion StaticRoutingProvider::set(mgmt::RoutingInfo info) {
  std::vector<std::function<void()>> listeners;
  {
    std::lock_guard lock(mu_);
    if (info.version < current_->version) return current_->version;
    current_ = std::make_shared<const mgmt::RoutingInfo>(std::move(info));
    listeners = listeners_;
  }
  for (auto& l : listeners) l();
  return current()->version;
}

namespace {

// Adds a target on the node of `address` (one node per distinct address).
void add_target(mgmt::RoutingInfo& info, mgmt::TargetId id, const std::string& address) {
  mgmt::NodeId node = mgmt::kInvalidNode;
  for (auto& [nid, n] : info.nodes)
    if (n.address == address) node = nid;
  if (node == mgmt::kInvalidNode) {
    node = static_cast<mgmt::NodeId>(info.nodes.size() + 1);
    info.nodes[node] = mgmt::NodeInfo{.id = node, .address = address};
  }
  info.targets[id] = mgmt::TargetInfo{.id = id, .node_id = node};
}

Result<mgmt::TargetState> state_from_wire(uint32_t v) {
  if (v == 0) return mgmt::TargetState::kServing;
  if (v < 1 || v > 4) return error(Code::kInvalidArgument, "unknown target state {}", v);
  return static_cast<mgmt::TargetState>(v);
}

// "101" or "101:syncing" (also serving, offline, last-serving).
Result<mgmt::ChainEntry> parse_entry(const std::string& text) {
  auto colon = text.find(':');
  std::string id_text = text.substr(0, colon);
  mgmt::ChainEntry e;
  auto [p, ec] = std::from_chars(id_text.data(), id_text.data() + id_text.size(), e.target_id);
  if (ec != std::errc() || p != id_text.data() + id_text.size() || e.target_id == 0)
    return error(Code::kConfig, "bad chain entry '{}': expected a target id", text);
  if (colon == std::string::npos) return e;
  std::string state = text.substr(colon + 1);
  for (auto s : {mgmt::TargetState::kServing, mgmt::TargetState::kSyncing, mgmt::TargetState::kOffline,
                 mgmt::TargetState::kLastServing})
    if (mgmt::to_string(s) == state) {
      e.state = s;
      return e;
    }
  return error(Code::kConfig, "bad chain entry '{}': unknown state '{}'", text, state);
}

}  // namespace

Result<mgmt::RoutingInfo> routing_from_proto(const proto::storage::Routing& p) {
  mgmt::RoutingInfo info;
  info.version = p.version();
  for (const auto& t : p.targets()) {
    WEFT_RETURN_IF_ERROR(mgmt::check_address(t.address()));
    add_target(info, t.id(), t.address());
  }
  for (const auto& c : p.chains()) {
    mgmt::ChainInfo chain{.id = c.id(), .table_id = 1, .version = c.version()};
    for (const auto& e : c.entries()) {
      WEFT_TRY(auto state, state_from_wire(e.state()));
      if (!info.targets.contains(e.target_id()))
        return error(Code::kInvalidArgument, "chain {} names target {} without an address", c.id(), e.target_id());
      chain.entries.push_back({e.target_id(), state});
    }
    // check_chain's kInternal means a broken invariant at mgmtd; from the wire it is bad input.
    if (auto ok = mgmt::check_chain(chain); !ok)
      return error(Code::kInvalidArgument, "routing version {}: {}", info.version, ok.error().message());
    info.chains[chain.id] = std::move(chain);
  }
  return info;
}

void routing_to_proto(const mgmt::RoutingInfo& info, proto::storage::Routing* out) {
  out->set_version(info.version);
  for (const auto& [id, t] : info.targets) {
    auto* pt = out->add_targets();
    pt->set_id(id);
    if (auto n = info.node(t.node_id)) pt->set_address((*n)->address);
  }
  for (const auto& [id, c] : info.chains) {
    auto* pc = out->add_chains();
    pc->set_id(id);
    pc->set_version(c.version);
    for (const auto& e : c.entries) {
      auto* pe = pc->add_entries();
      pe->set_target_id(e.target_id);
      pe->set_state(static_cast<uint32_t>(e.state));
    }
  }
}

Result<mgmt::RoutingInfo> routing_from_config(const Config& routing) {
  proto::storage::Routing p;
  WEFT_TRY(int64_t version, routing.get_int_in("version", 1, 0, INT64_MAX));
  p.set_version(static_cast<uint64_t>(version));
  WEFT_TRY(auto targets, routing.tables("targets"));
  for (const auto& t : targets) {
    WEFT_TRY(int64_t id, t.get_int_in("id", 0, 1, INT64_MAX));
    WEFT_TRY(std::string address, t.get_string("address"));
    auto* pt = p.add_targets();
    pt->set_id(static_cast<uint64_t>(id));
    pt->set_address(address);
  }
  WEFT_TRY(auto chains, routing.tables("chains"));
  mgmt::RoutingInfo staged;
  for (const auto& c : chains) {
    WEFT_TRY(int64_t id, c.get_int_in("id", 0, 1, UINT32_MAX));
    WEFT_TRY(int64_t cv, c.get_int_in("version", 1, 1, INT64_MAX));
    WEFT_TRY(auto entries, c.get_strings("targets"));
    auto* pc = p.add_chains();
    pc->set_id(static_cast<uint32_t>(id));
    pc->set_version(static_cast<uint64_t>(cv));
    for (const auto& text : entries) {
      WEFT_TRY(auto e, parse_entry(text));
      auto* pe = pc->add_entries();
      pe->set_target_id(e.target_id);
      pe->set_state(static_cast<uint32_t>(e.state));
    }
  }
  auto info = routing_from_proto(p);
  if (!info) return error(Code::kConfig, "{}: [routing]: {}", routing.source(), info.error().message());
  return info;
}

}  // namespace weft::storage
