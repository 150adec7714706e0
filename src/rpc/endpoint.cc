#include "rpc/endpoint.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <strings.h>

#include <charconv>
#include <cstring>
#include <optional>

namespace weft::rpc {

Result<Endpoint> Endpoint::parse(const std::string& text) {
  size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size())
    return error(Code::kInvalidArgument, "address '{}' is not host:port", text);
  std::string host = text.substr(0, colon);
  // "[::1" once parsed as host "[:" port 1: a bracket must be closed, around the host only.
  if ((host.front() == '[') != (host.back() == ']') || host == "[]")
    return error(Code::kInvalidArgument, "address '{}' is not host:port (unbalanced [brackets])", text);
  if (host.front() == '[') host = host.substr(1, host.size() - 2);
  unsigned port = 0;
  const char* begin = text.data() + colon + 1;
  const char* end = text.data() + text.size();
  auto r = std::from_chars(begin, end, port);
  if (r.ec != std::errc() || r.ptr != end || port > 65535)
    return error(Code::kInvalidArgument, "address '{}' has a bad port (expected 0..65535)", text);
  return Endpoint{host, static_cast<uint16_t>(port)};
}

namespace {

// A numeric host as 16 bytes of IPv6 (IPv4 as its mapped form); nullopt for names.
std::optional<in6_addr> numeric(const std::string& host) {
  in6_addr a6{};
  if (::inet_pton(AF_INET6, host.c_str(), &a6) == 1) return a6;
  in_addr a4{};
  if (::inet_pton(AF_INET, host.c_str(), &a4) != 1) return std::nullopt;
  a6.s6_addr[10] = a6.s6_addr[11] = 0xff;
  std::memcpy(&a6.s6_addr[12], &a4, sizeof a4);
  return a6;
}

}  // namespace

bool Endpoint::same_address(const Endpoint& other) const {
  if (port != other.port) return false;
  auto a = numeric(host), b = numeric(other.host);
  if (a || b) return a && b && std::memcmp(a->s6_addr, b->s6_addr, sizeof a->s6_addr) == 0;
  return host.size() == other.host.size() && ::strcasecmp(host.c_str(), other.host.c_str()) == 0;
}

std::string Endpoint::to_string() const {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

}  // namespace weft::rpc
