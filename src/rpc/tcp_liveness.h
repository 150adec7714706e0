// rpc/tcp_liveness.h
// How an RPC connection notices a peer that vanished without a word (power
// lost, kernel panic, cable cut, partition: no FIN, no RST). Left to Linux's
// defaults, a quiet connection to such a peer stays open for hours (first
// keepalive probe after 2 h, if SO_KEEPALIVE is on at all) and bytes sent to
// it are retransmitted for ~15 minutes, so a server keeps the dead client's
// connection (fd, buffers) and a client's write to a dead server has no
// bound of its own. Every RPC socket, both ends, gets:
// - keepalive: after `keepalive_idle_s` with nothing received, a probe every
//   `keepalive_interval_s`; `keepalive_count` unanswered ones end it;
// - TCP_USER_TIMEOUT: sent bytes left unacknowledged `user_timeout_ms` end
//   it (Linux >= 5.11: also a peer whose receive window stays zero that
//   long). A peer that is alive but takes no bytes that long is cut too: a
//   server that stops reading a connection (back-pressure behind a hung
//   disk, requests without a deadline) loses it after this long, and a call
//   timeout longer than it does not protect a call on such a connection.
//   Waiting for a reply is never cut (nothing is unacknowledged). When it is
//   set, Linux also lets it (not the count) decide when unanswered keepalive
//   probes end a quiet connection: at the first probe at or past it, so a
//   larger value also finds dead idle peers later.
// A connection so ended fails its reads and writes with ETIMEDOUT, which
// closes it like any other I/O error.
#pragma once

#include <cstdint>

#include "common/status.h"

namespace weft {
class Config;
}

namespace weft::rpc {

struct TcpLiveness {
  uint32_t keepalive_idle_s = 30;     // 0: no keepalive
  uint32_t keepalive_interval_s = 5;  // >= 1 when keepalive is on
  uint32_t keepalive_count = 4;       // >= 1 when keepalive is on
  uint32_t user_timeout_ms = 60000;   // 0: the kernel's default (retransmissions, ~15 min)

  bool operator==(const TcpLiveness&) const = default;
};

// Sets the options on the connected TCP socket `fd`. The connection works
// without them, so a failure is reported (which options, why), not fatal.
Status set_tcp_liveness(int fd, const TcpLiveness& options);

// The keys tcp_keepalive_idle_s (0: no keepalive; 1..32767),
// tcp_keepalive_interval_s (1..32767), tcp_keepalive_count (1..127) and
// tcp_user_timeout_ms (0: the kernel's default; 1000..3600000) of `table`
// (a server's [server], a client config's top level); an absent key keeps
// its default. Errors name the file and the key.
Result<TcpLiveness> tcp_liveness_from(const Config& table);

// set_tcp_liveness, logging a failure as a warning; nothing on a Unix
// socket (rpc/local_socket.h). A failure is the same
// for every socket (an old kernel, a sandbox), so it is logged once per
// process, then at debug level.
void apply_tcp_liveness(int fd, const TcpLiveness& options);

}  // namespace weft::rpc
