#include "rpc/endpoint.h"

#include <charconv>

namespace weft::rpc {

Result<Endpoint> Endpoint::parse(const std::string& text) {
  size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size())
    return error(Code::kInvalidArgument, "address '{}' is not host:port", text);
  std::string host = text.substr(0, colon);
  if (host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  unsigned port = 0;
  const char* begin = text.data() + colon + 1;
  const char* end = text.data() + text.size();
  auto r = std::from_chars(begin, end, port);
  if (r.ec != std::errc() || r.ptr != end || port > 65535)
    return error(Code::kInvalidArgument, "address '{}' has a bad port (expected 0..65535)", text);
  return Endpoint{host, static_cast<uint16_t>(port)};
}

std::string Endpoint::to_string() const {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

}  // namespace weft::rpc
