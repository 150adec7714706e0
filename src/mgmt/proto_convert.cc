#include "mgmt/proto_convert.h"

#include <algorithm>

namespace weft::mgmt {

int64_t to_ns(TimePoint t) { return t.time_since_epoch().count(); }
TimePoint from_ns(int64_t ns) { return TimePoint(Duration(ns)); }

Result<NodeKind> node_kind_from_wire(uint32_t v) {
  if (v < 1 || v > 3) return error(Code::kProtocol, "mgmt: unknown node kind {}", v);
  return static_cast<NodeKind>(v);
}

Result<NodeState> node_state_from_wire(uint32_t v) {
  if (v < 1 || v > 2) return error(Code::kProtocol, "mgmt: unknown node state {}", v);
  return static_cast<NodeState>(v);
}

Result<TargetState> target_state_from_wire(uint32_t v) {
  if (v < 1 || v > 4) return error(Code::kProtocol, "mgmt: unknown target state {}", v);
  return static_cast<TargetState>(v);
}

void to_proto(const NodeInfo& in, pb::Node* out) {
  out->set_id(in.id);
  out->set_kind(static_cast<uint32_t>(in.kind));
  out->set_address(in.address);
  out->set_incarnation(in.incarnation);
  out->set_state(static_cast<uint32_t>(in.state));
  out->set_lease_expiry_ns(to_ns(in.lease_expiry));
  out->set_last_heartbeat_ns(to_ns(in.last_heartbeat));
}

void to_proto(const ClientInfo& in, pb::Client* out) {
  out->set_id(in.id);
  out->set_label(in.label);
  out->set_first_seen_ns(to_ns(in.first_seen));
  out->set_last_heartbeat_ns(to_ns(in.last_heartbeat));
  out->set_lease_expiry_ns(to_ns(in.lease_expiry));
}

ClientInfo from_proto(const pb::Client& in) {
  return ClientInfo{.id = in.id(),
                    .label = in.label(),
                    .first_seen = from_ns(in.first_seen_ns()),
                    .last_heartbeat = from_ns(in.last_heartbeat_ns()),
                    .lease_expiry = from_ns(in.lease_expiry_ns())};
}

void to_proto(const TargetInfo& in, pb::Target* out) {
  out->set_id(in.id);
  out->set_node_id(in.node_id);
  out->set_name(in.name);
  out->set_state(static_cast<uint32_t>(in.state));
  out->set_reported(in.reported);
  out->set_capacity_bytes(in.capacity_bytes);
  out->set_used_bytes(in.used_bytes);
  out->set_data_id(in.data_id);
  out->set_fs_id(in.fs_id);
  out->set_fs_free_bytes(in.fs_free_bytes);
}

void to_proto(const ChainInfo& in, pb::Chain* out) {
  out->set_id(in.id);
  out->set_table_id(in.table_id);
  out->set_version(in.version);
  for (const ChainEntry& e : in.entries) {
    auto* pe = out->add_entries();
    pe->set_target_id(e.target_id);
    pe->set_state(static_cast<uint32_t>(e.state));
  }
}

void to_proto(const ChainTableInfo& in, pb::ChainTable* out) {
  out->set_id(in.id);
  out->set_replicas(in.replicas);
  for (ChainId c : in.chains) out->add_chains(c);
}

void to_proto(const RoutingInfo& in, pb::Routing* out) {
  out->set_version(in.version);
  for (const auto& [id, n] : in.nodes) to_proto(n, out->add_nodes());
  for (const auto& [id, t] : in.targets) to_proto(t, out->add_targets());
  for (const auto& [id, t] : in.tables) to_proto(t, out->add_tables());
  for (const auto& [id, c] : in.chains) to_proto(c, out->add_chains());
  out->set_meta_store_id(in.meta_store_id);
}

void to_proto(const RegisterRequest& in, pb::RegisterRequest* out) {
  out->set_kind(static_cast<uint32_t>(in.kind));
  out->set_address(in.address);
  out->set_incarnation(in.incarnation);
  out->set_installed_routing_version(in.installed_routing_version);
  out->set_meta_store_id(in.meta_store.store_id);
  out->set_meta_ids_issued_below(in.meta_store.ids_issued_below);
  out->set_accept_store_change(in.accept_store_change);
  for (const TargetRegistration& t : in.targets) {
    auto* pt = out->add_targets();
    pt->set_name(t.name);
    pt->set_capacity_bytes(t.capacity_bytes);
    pt->set_used_bytes(t.used_bytes);
    pt->set_data_id(t.data_id);
  }
}

void to_proto(const RegisterReply& in, pb::RegisterReply* out) {
  out->set_node_id(in.node_id);
  for (TargetId t : in.target_ids) out->add_target_ids(t);
  out->set_routing_version(in.routing_version);
  out->set_lease_ns(in.lease.count());
  out->set_meta_store_checked(in.meta_store_checked);
  out->set_meta_ids_mark(in.meta_ids_mark);
  out->set_serve_after_ns(in.serve_after.count());
}

void to_proto(const HeartbeatRequest& in, pb::HeartbeatRequest* out) {
  out->set_node_id(in.node_id);
  out->set_incarnation(in.incarnation);
  out->set_installed_routing_version(in.installed_routing_version);
  out->set_meta_ids_issued_below(in.meta_ids_issued_below);
  out->set_meta_store_id(in.meta_store_id);
  for (const TargetUsage& u : in.usage) {
    auto* pu = out->add_usage();
    pu->set_target_id(u.target_id);
    pu->set_used_bytes(u.used_bytes);
    pu->set_capacity_bytes(u.capacity_bytes);
    pu->set_failed(u.failed);
    pu->set_fs_id(u.fs_id);
    pu->set_fs_free_bytes(u.fs_free_bytes);
  }
  for (const SyncDoneReport& s : in.sync_done) {
    auto* ps = out->add_sync_done();
    ps->set_chain_id(s.chain_id);
    ps->set_target_id(s.target_id);
    ps->set_chain_version(s.chain_version);
  }
}

void to_proto(const HeartbeatReply& in, pb::HeartbeatReply* out) {
  out->set_routing_version(in.routing_version);
  out->set_lease_ns(in.lease.count());
}

Result<NodeInfo> from_proto(const pb::Node& in) {
  NodeInfo n;
  n.id = in.id();
  WEFT_TRY(n.kind, node_kind_from_wire(in.kind()));
  n.address = in.address();
  n.incarnation = in.incarnation();
  WEFT_TRY(n.state, node_state_from_wire(in.state()));
  n.lease_expiry = from_ns(in.lease_expiry_ns());
  n.last_heartbeat = from_ns(in.last_heartbeat_ns());
  return n;
}

Result<TargetInfo> from_proto(const pb::Target& in) {
  TargetInfo t;
  t.id = in.id();
  t.node_id = in.node_id();
  t.name = in.name();
  WEFT_TRY(t.state, target_state_from_wire(in.state()));
  t.reported = in.reported();
  t.capacity_bytes = in.capacity_bytes();
  t.used_bytes = in.used_bytes();
  t.data_id = in.data_id();
  t.fs_id = in.fs_id();
  t.fs_free_bytes = in.fs_free_bytes();
  return t;
}

Result<ChainInfo> from_proto(const pb::Chain& in) {
  ChainInfo c;
  c.id = in.id();
  c.table_id = in.table_id();
  c.version = in.version();
  for (const pb::ChainEntry& e : in.entries()) {
    WEFT_TRY(TargetState s, target_state_from_wire(e.state()));
    c.entries.push_back({.target_id = e.target_id(), .state = s});
  }
  return c;
}

ChainTableInfo from_proto(const pb::ChainTable& in) {
  ChainTableInfo t;
  t.id = in.id();
  t.replicas = in.replicas();
  t.chains.assign(in.chains().begin(), in.chains().end());
  return t;
}

Result<RoutingInfo> from_proto(const pb::Routing& in) {
  RoutingInfo r;
  r.version = in.version();
  for (const pb::Node& n : in.nodes()) {
    WEFT_TRY(NodeInfo node, from_proto(n));
    r.nodes[node.id] = std::move(node);
  }
  for (const pb::Target& t : in.targets()) {
    WEFT_TRY(TargetInfo target, from_proto(t));
    r.targets[target.id] = std::move(target);
  }
  for (const pb::ChainTable& t : in.tables()) r.tables[t.id()] = from_proto(t);
  for (const pb::Chain& c : in.chains()) {
    WEFT_TRY(ChainInfo chain, from_proto(c));
    r.chains[chain.id] = std::move(chain);
  }
  r.meta_store_id = in.meta_store_id();
  return r;
}

Result<RegisterRequest> from_proto(const pb::RegisterRequest& in) {
  RegisterRequest r;
  // The request parsed; one field's value is wrong (a kind this mgmtd does not know).
  auto kind = node_kind_from_wire(in.kind());
  if (!kind) return error(Code::kInvalidArgument, "mgmt: register: undefined node kind {}", in.kind());
  r.kind = *kind;
  r.address = in.address();
  r.incarnation = in.incarnation();
  r.installed_routing_version = in.installed_routing_version();
  r.meta_store = {.store_id = in.meta_store_id(), .ids_issued_below = in.meta_ids_issued_below()};
  r.accept_store_change = in.accept_store_change();
  for (const pb::TargetRegistration& t : in.targets())
    r.targets.push_back({.name = t.name(),
                         .capacity_bytes = t.capacity_bytes(),
                         .used_bytes = t.used_bytes(),
                         .data_id = t.data_id()});
  return r;
}

RegisterReply from_proto(const pb::RegisterReply& in) {
  RegisterReply r;
  r.node_id = in.node_id();
  r.target_ids.assign(in.target_ids().begin(), in.target_ids().end());
  r.routing_version = in.routing_version();
  r.lease = Duration(in.lease_ns());
  r.meta_store_checked = in.meta_store_checked();
  r.meta_ids_mark = in.meta_ids_mark();
  r.serve_after = std::max(Duration::zero(), Duration(in.serve_after_ns()));
  return r;
}

HeartbeatRequest from_proto(const pb::HeartbeatRequest& in) {
  HeartbeatRequest r;
  r.node_id = in.node_id();
  r.incarnation = in.incarnation();
  r.installed_routing_version = in.installed_routing_version();
  r.meta_ids_issued_below = in.meta_ids_issued_below();
  r.meta_store_id = in.meta_store_id();
  for (const pb::TargetUsage& u : in.usage())
    r.usage.push_back({.target_id = u.target_id(),
                       .used_bytes = u.used_bytes(),
                       .capacity_bytes = u.capacity_bytes(),
                       .failed = u.failed(),
                       .fs_id = u.fs_id(),
                       .fs_free_bytes = u.fs_free_bytes()});
  for (const pb::SyncDone& s : in.sync_done())
    r.sync_done.push_back({.chain_id = s.chain_id(), .target_id = s.target_id(), .chain_version = s.chain_version()});
  return r;
}

HeartbeatReply from_proto(const pb::HeartbeatReply& in) {
  return HeartbeatReply{.routing_version = in.routing_version(), .lease = Duration(in.lease_ns())};
}

}  // namespace weft::mgmt
