// mgmt/service_methods.h
// Stable method numbers of the cluster manager service (rpc::service::kMgmt),
// messages in proto/mgmt.proto. Numbers are wire format: never reuse or
// renumber; add new methods at the end.
#pragma once

#include <cstdint>

#include "rpc/method.h"

namespace weft::mgmt {

inline constexpr rpc::MethodId kRegister{rpc::service::kMgmt, 1};
inline constexpr rpc::MethodId kHeartbeat{rpc::service::kMgmt, 2};
inline constexpr rpc::MethodId kGetRouting{rpc::service::kMgmt, 3};
inline constexpr rpc::MethodId kCreateChainTable{rpc::service::kMgmt, 4};
inline constexpr rpc::MethodId kListChainTables{rpc::service::kMgmt, 5};
inline constexpr rpc::MethodId kStatus{rpc::service::kMgmt, 6};
inline constexpr rpc::MethodId kClientHeartbeat{rpc::service::kMgmt, 7};
inline constexpr rpc::MethodId kListClients{rpc::service::kMgmt, 8};
inline constexpr rpc::MethodId kReplaceTarget{rpc::service::kMgmt, 9};
inline constexpr rpc::MethodId kRemoveNode{rpc::service::kMgmt, 10};
inline constexpr rpc::MethodId kPromoteTarget{rpc::service::kMgmt, 11};
inline constexpr rpc::MethodId kReportRefusal{rpc::service::kMgmt, 12};

// How long clients' and servers' routing long polls wait at mgmtd.
inline constexpr uint32_t kRoutingLongPollMs = 20'000;

// No cluster makes this many routing changes: a routing version further
// than this past the one held (or mgmtd's own) is garbage. mgmtd refuses
// such reports; clients and servers such routings (held, a far version
// wedges them: every later routing refused as older).
inline constexpr uint64_t kRoutingVersionJumpMax = uint64_t{1} << 32;
inline constexpr bool is_far_version_jump(uint64_t held, uint64_t got) {
  return got > held && got - held > kRoutingVersionJumpMax;
}

// Upper bound on GetRoutingRequest.wait_ms (a long poll holds no thread, only a timer).
inline constexpr uint32_t kRoutingWaitMsMax = 60'000;

}  // namespace weft::mgmt
