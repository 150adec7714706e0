// mgmt/proto_convert.h
// Conversions between the mgmt value types (mgmt/routing.h,
// mgmt/cluster_state.h) and their protobuf messages (proto/mgmt.proto).
// to_proto never fails; from_proto validates what came off the wire (enum
// values in range) and returns kProtocol naming the field otherwise: bytes
// from the network are never trusted. Except a RegisterRequest's undefined
// node kind: kInvalidArgument (the request parsed; the caller's value is
// wrong, as with its address or incarnation). Round trips are exact.
// Threading: pure functions.
#pragma once

#include "common/status.h"
#include "mgmt/client_table.h"
#include "mgmt/cluster_state.h"
#include "mgmt/routing.h"
#include "proto/mgmt.pb.h"

namespace weft::mgmt {

namespace pb = weft::proto::mgmt;

int64_t to_ns(TimePoint t);
TimePoint from_ns(int64_t ns);

void to_proto(const NodeInfo& in, pb::Node* out);
void to_proto(const TargetInfo& in, pb::Target* out);
void to_proto(const ChainInfo& in, pb::Chain* out);
void to_proto(const ChainTableInfo& in, pb::ChainTable* out);
void to_proto(const RoutingInfo& in, pb::Routing* out);
void to_proto(const RegisterRequest& in, pb::RegisterRequest* out);
void to_proto(const RegisterReply& in, pb::RegisterReply* out);
void to_proto(const HeartbeatRequest& in, pb::HeartbeatRequest* out);
void to_proto(const HeartbeatReply& in, pb::HeartbeatReply* out);
void to_proto(const ClientInfo& in, pb::Client* out);

Result<NodeInfo> from_proto(const pb::Node& in);
Result<TargetInfo> from_proto(const pb::Target& in);
Result<ChainInfo> from_proto(const pb::Chain& in);
ChainTableInfo from_proto(const pb::ChainTable& in);
Result<RoutingInfo> from_proto(const pb::Routing& in);
Result<RegisterRequest> from_proto(const pb::RegisterRequest& in);
RegisterReply from_proto(const pb::RegisterReply& in);
HeartbeatRequest from_proto(const pb::HeartbeatRequest& in);
HeartbeatReply from_proto(const pb::HeartbeatReply& in);
ClientInfo from_proto(const pb::Client& in);

Result<NodeKind> node_kind_from_wire(uint32_t v);
Result<NodeState> node_state_from_wire(uint32_t v);
Result<TargetState> target_state_from_wire(uint32_t v);

}  // namespace weft::mgmt
