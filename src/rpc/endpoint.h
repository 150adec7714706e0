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
  auto operator<=>(const Endpoint&) const = default;
};

}  // namespace weft::rpc
