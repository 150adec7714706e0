#include "rpc/tcp_liveness.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>

#include "common/logging.h"

namespace weft::rpc {
namespace {

// Appends "name: error" to `failed` when the option cannot be set.
void set_int(int fd, int level, int option, uint32_t value, const char* name, std::string& failed) {
  int v = static_cast<int>(value);
  if (::setsockopt(fd, level, option, &v, sizeof v) == 0) return;
  if (!failed.empty()) failed += ", ";
  failed += fmt::format("{}: {}", name, std::strerror(errno));
}

}  // namespace

Status set_tcp_liveness(int fd, const TcpLiveness& o) {
  std::string failed;
  set_int(fd, SOL_SOCKET, SO_KEEPALIVE, o.keepalive_idle_s > 0 ? 1 : 0, "SO_KEEPALIVE", failed);
  if (o.keepalive_idle_s > 0) {
    set_int(fd, IPPROTO_TCP, TCP_KEEPIDLE, o.keepalive_idle_s, "TCP_KEEPIDLE", failed);
    set_int(fd, IPPROTO_TCP, TCP_KEEPINTVL, o.keepalive_interval_s, "TCP_KEEPINTVL", failed);
    set_int(fd, IPPROTO_TCP, TCP_KEEPCNT, o.keepalive_count, "TCP_KEEPCNT", failed);
  }
  // 0 is the kernel's own default: setting it keeps the socket as it was.
  set_int(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, o.user_timeout_ms, "TCP_USER_TIMEOUT", failed);
  if (failed.empty()) return {};
  return Status(Code::kUnavailable, "cannot set " + failed);
}

void apply_tcp_liveness(int fd, const TcpLiveness& options) {
  static std::atomic<bool> warned{false};
  Status s = set_tcp_liveness(fd, options);
  if (s.ok()) return;
  if (!warned.exchange(true))
    WEFT_LOG_WARN("RPC connections go on without finding dead peers (logged once per process): {}", s.message());
  else
    WEFT_LOG_DEBUG("{}", s.message());
}

}  // namespace weft::rpc
