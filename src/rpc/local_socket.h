// rpc/local_socket.h (internal to rpc)
// The same-host shortcut. A server listening on ADDR:PORT also listens on
// the abstract Unix socket named for ADDR:PORT, and a client about to
// connect to ADDR:PORT tries that name first, then TCP. Loopback TCP costs
// each end about twice the CPU of a Unix socket per reply (the sender runs
// the receiver's TCP stack as well): with clients and servers on one
// machine, the storage servers' reply sends were most of their time.
// Why the name reaches the server TCP would: it is bound only after the TCP
// bind of ADDR:PORT succeeded, which needs ADDR to be an address of this
// network namespace, and abstract names live per network namespace. A
// client finds the name only where a TCP connection to ADDR:PORT goes to
// that same listener; a client in another namespace (another host, in the
// tests) does not, and connects over TCP. An abstract name goes with its
// socket: a killed server leaves no file behind.
// Trust is as for TCP: any local process may take a free name as it may a
// free port, and the Hello's cluster token is checked either way.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

struct sockaddr;

namespace weft::rpc {

// The abstract name (leading NUL included) for a numeric address and port.
std::string local_socket_name(const std::string& numeric_address, uint16_t port);

// A non-blocking listening Unix socket under that name.
Result<int> listen_local(const std::string& numeric_address, uint16_t port);

// A connected non-blocking Unix socket to the server listening on the
// address's name, or -1 when there is none (or its backlog is full: the
// caller connects over TCP instead). Never waits.
int connect_local(const std::string& numeric_address, uint16_t port);
// The same for a resolved address (IPv4 or IPv6); -1 for other families.
int connect_local(const sockaddr* address, uint16_t port);

// Whether the connected socket `fd` is a Unix socket.
bool is_local_socket(int fd);

// The peer of a connected socket, for logs: "ADDR:PORT" over TCP, "local
// process PID" over a Unix socket, "unknown peer" when it cannot be told.
std::string describe_peer(int fd);

}  // namespace weft::rpc
