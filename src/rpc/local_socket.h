// rpc/local_socket.h (internal to rpc)
// The same-host shortcut. A server listening on ADDR:PORT also listens on
// the abstract Unix socket named for ADDR:PORT, and a client about to
// connect to ADDR:PORT tries that name first, then TCP. Loopback TCP costs
// each end about twice the CPU of a Unix socket per reply (the sender runs
// the receiver's TCP stack as well): with clients and servers on one
// machine, the storage servers' reply sends were most of their time.
// Why the name reaches the server TCP would: it is bound only after the TCP
// bind of ADDR:PORT succeeded and only when ADDR is an address of this
// network namespace (an interface's, loopback or the wildcard: not one
// bound through ip_nonlocal_bind, a floating address another host may
// hold), and abstract names live per network namespace. A client finds the
// name only where a TCP connection to ADDR:PORT goes to that same listener;
// a client in another namespace (another host, in the tests) does not, and
// connects over TCP. An abstract name goes with its socket: a killed server
// leaves no file behind.
// Trust: any local process may take a free name as it may take a free port.
// A server whose name is taken does not start (as when its port is taken),
// so a process squatting a name never stands in for a running server.
// Write-stall checks see a slow reader's progress in steps of its reads
// (SIOCOUTQ counts what the peer has not read), not of TCP acks.
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

// Whether a numeric address is one of this network namespace's own: on an
// interface, in 127.0.0.0/8, ::1, or the wildcard.
bool is_own_address(const std::string& numeric_address);

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
