// rpc/endpoint.h
// A host:port address. IPv4, IPv6 ([::1]:7000) and host names.
#pragma once

#include <compare>
#include <cstdint>
#include <string>

#include "common/status.h"

namespace weft::rpc {

struct Endpoint {
  std::string host;
  uint16_t port = 0;

  static Result<Endpoint> parse(const std::string& text);
  std::string to_string() const;
  // The same host and port however written: numeric addresses compared as
  // addresses ("::1" = "0:0::1", IPv4-mapped IPv6 = its IPv4), names without
  // case. No name is resolved (a name and the address it resolves to differ).
  bool same_address(const Endpoint& other) const;
  auto operator<=>(const Endpoint&) const = default;
};

}  // namespace weft::rpc
