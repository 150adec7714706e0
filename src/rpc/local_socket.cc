#include "rpc/local_socket.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>

namespace weft::rpc {
namespace {

// sockaddr_un for an abstract name; `len` is the address length to pass
// (abstract names are not NUL-terminated: their length is the address's).
sockaddr_un abstract_address(const std::string& name, socklen_t& len) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  size_t n = std::min(name.size(), sizeof a.sun_path);
  std::memcpy(a.sun_path, name.data(), n);
  len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + n);
  return a;
}

}  // namespace

std::string local_socket_name(const std::string& numeric_address, uint16_t port) {
  return fmt::format("{}weft-rpc/{}:{}", '\0', numeric_address, port);
}

Result<int> listen_local(const std::string& numeric_address, uint16_t port) {
  std::string name = local_socket_name(numeric_address, port);
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return errno_error(errno, "socket(AF_UNIX)");
  socklen_t len = 0;
  sockaddr_un a = abstract_address(name, len);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), len) != 0 || ::listen(fd, SOMAXCONN) != 0) {
    int err = errno;
    ::close(fd);
    return errno_error(err, fmt::format("local socket @{}", name.substr(1)));
  }
  return fd;
}

bool is_own_address(const std::string& numeric_address) {
  in_addr v4{};
  in6_addr v6{};
  const bool is_v4 = ::inet_pton(AF_INET, numeric_address.c_str(), &v4) == 1;
  if (!is_v4 && ::inet_pton(AF_INET6, numeric_address.c_str(), &v6) != 1) return false;
  if (is_v4 && ((ntohl(v4.s_addr) >> 24) == 127 || v4.s_addr == htonl(INADDR_ANY))) return true;
  if (!is_v4 && (IN6_IS_ADDR_LOOPBACK(&v6) || IN6_IS_ADDR_UNSPECIFIED(&v6))) return true;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return false;
  bool own = false;
  for (const ifaddrs* i = list; i != nullptr && !own; i = i->ifa_next) {
    if (i->ifa_addr == nullptr) continue;
    if (is_v4 && i->ifa_addr->sa_family == AF_INET)
      own = reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr == v4.s_addr;
    else if (!is_v4 && i->ifa_addr->sa_family == AF_INET6)
      own = IN6_ARE_ADDR_EQUAL(&reinterpret_cast<const sockaddr_in6*>(i->ifa_addr)->sin6_addr, &v6);
  }
  ::freeifaddrs(list);
  return own;
}

int connect_local(const std::string& numeric_address, uint16_t port) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  socklen_t len = 0;
  sockaddr_un a = abstract_address(local_socket_name(numeric_address, port), len);
  // A Unix connect completes at once or fails at once (EAGAIN: backlog full).
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), len) == 0) return fd;
  ::close(fd);
  return -1;
}

int connect_local(const sockaddr* address, uint16_t port) {
  char host[INET6_ADDRSTRLEN + 16];  // room for an IPv6 scope
  socklen_t len = address->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  if (address->sa_family != AF_INET && address->sa_family != AF_INET6) return -1;
  if (::getnameinfo(address, len, host, sizeof host, nullptr, 0, NI_NUMERICHOST) != 0) return -1;
  return connect_local(std::string(host), port);
}

bool is_local_socket(int fd) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  return ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0 && a.ss_family == AF_UNIX;
}

std::string describe_peer(int fd) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return "unknown peer";
  if (a.ss_family == AF_UNIX) {
    ucred cred{};
    socklen_t clen = sizeof cred;
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) != 0) return "local peer";
    return fmt::format("local process {}", cred.pid);
  }
  char host[INET6_ADDRSTRLEN + 16];
  char port[8];
  if (::getnameinfo(reinterpret_cast<sockaddr*>(&a), len, host, sizeof host, port, sizeof port,
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return "unknown peer";
  return a.ss_family == AF_INET6 ? fmt::format("[{}]:{}", host, port) : fmt::format("{}:{}", host, port);
}

}  // namespace weft::rpc
