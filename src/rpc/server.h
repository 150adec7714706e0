// rpc/server.h
// The RPC server: accepts connections, checks the cluster token in the
// first frame (Hello), and dispatches requests to registered methods by
// their stable number. Async handlers run on the connection's I/O thread
// and must not block; blocking handlers (RocksDB, disk) run on a bounded
// thread pool, and a full pool answers kOverloaded (retryable) instead of
// queueing without bound. Per connection, at most `inflight_max` requests
// and `inflight_bytes_max` payload bytes are in progress, and reading stops
// while `queued_reply_bytes_max` reply bytes wait to be written (checked
// after each request read, so the replies of up to inflight_max requests
// already read may still join them): beyond that the server stops reading
// that socket (back-pressure), other connections go on. A connection whose
// replies wait while the peer takes none of their bytes for
// `write_stall_timeout_ms` (a peer that stopped reading: hung, SIGSTOPped,
// hostile) is closed, which frees its replies and whatever they hold. A
// connection that has not sent its Hello within `hello_timeout_ms` is
// closed; one that did may stay idle, and keepalive (`tcp`) ends it when
// its peer is gone.
// Threading: register methods before listen(); stop() from any thread.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/buffer.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "common/status.h"
#include "rpc/endpoint.h"
#include "rpc/frame.h"
#include "rpc/io_pool.h"
#include "rpc/method.h"
#include "rpc/task.h"
#include "rpc/tcp_liveness.h"

namespace asio {
class thread_pool;
}

namespace weft::rpc {

struct ServerOptions {
  std::string cluster_token;
  std::string name = "server";
  size_t blocking_threads = 4;
  size_t blocking_queue_max = 4096;     // queued + running blocking requests, all connections
  size_t inflight_max = 1024;           // per connection
  size_t inflight_bytes_max = 256u << 20;  // request payload bytes held, per connection
  // Reply bytes waiting to be written, per connection: a peer that sends
  // requests and does not read the replies is not read from beyond this.
  size_t queued_reply_bytes_max = 256u << 20;
  // How long replies may wait with the peer taking none of their bytes
  // before the connection is closed; 0: forever. Idle connections are never
  // closed by it.
  uint32_t write_stall_timeout_ms = 30000;
  // How long a connection may take to send its Hello (a peer that connects
  // and says nothing holds an fd and a read buffer); 0: forever. Once it
  // said Hello, a connection may stay idle: keepalive finds dead peers.
  uint32_t hello_timeout_ms = 10000;
  // How long a request may stop arriving in its middle (after its header,
  // before its last payload byte) before the connection is closed; 0:
  // forever. A peer that announced a large payload and stalled otherwise
  // holds a buffer of that size for as long as it stays connected.
  uint32_t read_stall_timeout_ms = 30000;
  TcpLiveness tcp;  // on every accepted TCP socket
  FrameLimits limits;
  // Each listen() also listens on the Unix socket named for its address, for
  // clients on this host (rpc/local_socket.h).
  bool local_socket = true;
};

// One request as a handler sees it, and the reply it fills in.
struct ServerCall {
  MethodId method;
  uint64_t request_id = 0;
  std::string peer;
  uint64_t client_id = 0;  // from the connection's Hello
  std::string body;
  Buffer payload;
  size_t payload_len = 0;  // as received (payload may be moved away by the handler)
  std::chrono::steady_clock::time_point deadline;
  // One counter per connection, shared by its calls, for handlers that bound
  // what one connection may hold (e.g. a storage server's read buffers).
  std::shared_ptr<std::atomic<uint64_t>> connection_held;

  std::string response_body;
  std::vector<std::span<const std::byte>> response_payload;  // gathered as is
  std::shared_ptr<void> response_keepalive;                  // owns response_payload memory
};

using AsyncHandler = std::function<Task<Status>(ServerCall&)>;
using BlockingHandler = std::function<Status(ServerCall&)>;

struct ServerState;

class Server {
 public:
  Server(IoPool& io, ServerOptions options, metrics::Registry& registry = metrics::Registry::global());
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  void add_async(MethodId id, std::string name, AsyncHandler handler);
  void add_blocking(MethodId id, std::string name, BlockingHandler handler);

  // Binds and starts accepting; port 0 picks a free port. Returns the bound
  // port. With local_socket, a Unix twin that cannot be bound (its name
  // taken by another process) fails the listen, as a taken port does.
  Result<uint16_t> listen(const std::string& host, uint16_t port);
  void stop();
  // Handlers running now (stop() waits for them only a few seconds).
  size_t active_calls() const;

  const ServerOptions& options() const;

 private:
  std::shared_ptr<ServerState> state_;  // shared with connections: they may outlive the Server
};

}  // namespace weft::rpc
