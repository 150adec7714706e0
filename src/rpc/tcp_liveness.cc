#include "rpc/tcp_liveness.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>

#include "common/config.h"
#include "common/logging.h"
#include "rpc/local_socket.h"

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

// The kernel's own limits bound the keepalive keys.
Result<TcpLiveness> tcp_liveness_from(const Config& s) {
  TcpLiveness t;
  WEFT_TRY(int64_t idle, s.get_int_off_or_in("tcp_keepalive_idle_s", t.keepalive_idle_s, 1, 32767));
  WEFT_TRY(int64_t interval, s.get_int_in("tcp_keepalive_interval_s", t.keepalive_interval_s, 1, 32767));
  WEFT_TRY(int64_t count, s.get_int_in("tcp_keepalive_count", t.keepalive_count, 1, 127));
  WEFT_TRY(int64_t user_timeout, s.get_int_off_or_in("tcp_user_timeout_ms", t.user_timeout_ms, 1000, 3600000));
  t.keepalive_idle_s = static_cast<uint32_t>(idle);
  t.keepalive_interval_s = static_cast<uint32_t>(interval);
  t.keepalive_count = static_cast<uint32_t>(count);
  t.user_timeout_ms = static_cast<uint32_t>(user_timeout);
  return t;
}

void apply_tcp_liveness(int fd, const TcpLiveness& options) {
  static std::atomic<bool> warned{false};
  if (is_local_socket(fd)) return;  // a Unix peer is on this host: its kernel closes the socket when it dies
  Status s = set_tcp_liveness(fd, options);
  if (s.ok()) return;
  if (!warned.exchange(true))
    WEFT_LOG_WARN("RPC connections go on without finding dead peers (logged once per process): {}", s.message());
  else
    WEFT_LOG_DEBUG("{}", s.message());
}

}  // namespace weft::rpc
