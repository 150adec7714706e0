// rpc/server_state.h (internal to rpc)
// Everything a Server's connections need, shared with them so that a
// connection finishing after Server::stop() never touches freed memory.
#pragma once

#include <asio/basic_socket_acceptor.hpp>
#include <asio/generic/stream_protocol.hpp>
#include <asio/thread_pool.hpp>

#include "common/log_throttle.h"
#include "rpc/server.h"

namespace weft::rpc {

class ServerConnection;

struct ServerState {
  using Acceptor = asio::basic_socket_acceptor<asio::generic::stream_protocol>;
  struct Method {
    std::string name;
    AsyncHandler async;
    BlockingHandler blocking;
    metrics::Counter* requests = nullptr;
    metrics::Counter* errors = nullptr;
    metrics::Histogram* latency_us = nullptr;
  };

  ServerState(IoPool& io, ServerOptions options, metrics::Registry& registry);

  void dispatch(const std::shared_ptr<ServerConnection>& conn, std::shared_ptr<ServerCall> call);
  void finish(const std::shared_ptr<ServerConnection>& conn, const std::shared_ptr<ServerCall>& call,
              const Method* m, Status status, std::chrono::steady_clock::time_point start);

  IoPool& io;
  const ServerOptions options;
  metrics::Registry& registry;
  std::unordered_map<uint32_t, Method> methods;  // fixed before listen()
  asio::thread_pool pool;
  std::mutex mu;
  // TCP listeners and their Unix twins (rpc/local_socket.h).
  std::vector<std::unique_ptr<Acceptor>> acceptors;          // guarded by mu
  std::vector<std::weak_ptr<ServerConnection>> connections;  // guarded by mu
  std::atomic<size_t> active_calls{0};
  std::atomic<size_t> blocking_inflight{0};
  std::atomic<bool> stopped{false};

  metrics::Gauge* connections_gauge;
  metrics::Gauge* blocking_queue_gauge;
  metrics::Counter* overloaded;
  metrics::Counter* refused;
  metrics::Counter* protocol_errors;
  metrics::Counter* write_stalls;
  metrics::Counter* hello_timeouts;
  metrics::Counter* read_stalls;
  metrics::Counter* accept_errors;
  LogThrottle accept_log;  // accept failures: once a second
};

}  // namespace weft::rpc
