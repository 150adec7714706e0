// rpc/method.h
// Stable method numbers. A method id is (service << 16 | method) on the wire;
// numbers are wire format: never reuse or renumber. Each service lists its
// methods in its own header beside its .proto (e.g. storage/service.h).
#pragma once

#include <cstdint>

namespace weft::rpc {

struct MethodId {
  uint16_t service = 0;
  uint16_t method = 0;
  constexpr uint32_t wire() const { return (uint32_t{service} << 16) | method; }
  static constexpr MethodId from_wire(uint32_t v) {
    return MethodId{static_cast<uint16_t>(v >> 16), static_cast<uint16_t>(v & 0xffff)};
  }
  friend constexpr bool operator==(MethodId, MethodId) = default;
};

namespace service {
inline constexpr uint16_t kSystem = 0;
inline constexpr uint16_t kMgmt = 1;
inline constexpr uint16_t kMeta = 2;
inline constexpr uint16_t kStorage = 3;
inline constexpr uint16_t kTest = 15;
}  // namespace service

// Service 0: the connection handshake. Hello must be the first frame.
inline constexpr MethodId kHello{service::kSystem, 1};
inline constexpr uint32_t kProtocolVersion = 1;

// Service 15: echo, for tests and benchmarks (rpc/echo_service.h).
inline constexpr MethodId kEcho{service::kTest, 1};
inline constexpr MethodId kEchoBlocking{service::kTest, 2};

}  // namespace weft::rpc
