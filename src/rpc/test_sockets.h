// rpc/test_sockets.h — for tests: this process's TCP sockets by port, its
// Unix sockets by name, and the keepalive and TCP_USER_TIMEOUT options the kernel reports for one.
#pragma once

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <cstdint>
#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include "rpc/tcp_liveness.h"

namespace weft::rpc::testing {

// The options as the kernel reports them for one socket (-1: unreadable).
struct SocketLiveness {
  int keepalive = -1, idle_s = -1, interval_s = -1, count = -1, user_timeout_ms = -1;

  // What a socket given `t` reports, t's keepalive being on.
  static SocketLiveness of(const TcpLiveness& t) {
    return {1, static_cast<int>(t.keepalive_idle_s), static_cast<int>(t.keepalive_interval_s),
            static_cast<int>(t.keepalive_count), static_cast<int>(t.user_timeout_ms)};
  }
  bool operator==(const SocketLiveness&) const = default;
};

inline std::ostream& operator<<(std::ostream& os, const SocketLiveness& s) {
  return os << "{keepalive " << s.keepalive << ", idle_s " << s.idle_s << ", interval_s " << s.interval_s
            << ", count " << s.count << ", user_timeout_ms " << s.user_timeout_ms << "}";
}

inline int socket_int_option(int fd, int level, int option) {
  int v = -1;
  socklen_t len = sizeof v;
  return ::getsockopt(fd, level, option, &v, &len) == 0 ? v : -1;
}

inline SocketLiveness liveness_of(int fd) {
  return {socket_int_option(fd, SOL_SOCKET, SO_KEEPALIVE), socket_int_option(fd, IPPROTO_TCP, TCP_KEEPIDLE),
          socket_int_option(fd, IPPROTO_TCP, TCP_KEEPINTVL), socket_int_option(fd, IPPROTO_TCP, TCP_KEEPCNT),
          socket_int_option(fd, IPPROTO_TCP, TCP_USER_TIMEOUT)};
}

inline uint16_t port_of(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(a).sin_port);
  return 0;
}

// This process's connected TCP sockets (IPv4) whose local port (peer: the
// peer's port) is `port`: with a server in the same process, `peer` false
// finds its accepted sockets, true the ones connected to it.
// This process's connected sockets whose local address (peer: the peer's)
// matches `is`.
template <typename Match>
std::vector<int> connected_fds(bool peer, Match is) {
  std::vector<int> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    int fd = std::stoi(e.path().filename().string());
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    int rc = peer ? ::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len)
                  : ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    if (rc != 0 || !is(a, len)) continue;
    sockaddr_storage other{};
    socklen_t other_len = sizeof other;
    if (peer || ::getpeername(fd, reinterpret_cast<sockaddr*>(&other), &other_len) == 0) out.push_back(fd);
  }
  return out;
}

inline std::vector<int> tcp_fds(uint16_t port, bool peer) {
  return connected_fds(peer, [port](const sockaddr_storage& a, socklen_t) { return port_of(a) == port; });
}

// The same for connected Unix sockets and an abstract `name` (leading NUL
// included): with a server in the same process, `peer` false finds its
// accepted sockets, true the ones connected to it.
inline std::vector<int> unix_fds(const std::string& name, bool peer) {
  return connected_fds(peer, [&name](const sockaddr_storage& a, socklen_t len) {
    if (a.ss_family != AF_UNIX) return false;
    const auto& u = reinterpret_cast<const sockaddr_un&>(a);
    size_t n = len - offsetof(sockaddr_un, sun_path);
    return std::string(u.sun_path, n) == name;
  });
}

}  // namespace weft::rpc::testing
