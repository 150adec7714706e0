#include "rpc/server.h"

#include <future>
#include <thread>

#include <sys/socket.h>
#include <unistd.h>

#include <asio/ip/tcp.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>

#include "common/assert.h"
#include "common/fault.h"
#include "common/logging.h"
#include "rpc/accept_failure.h"
#include "rpc/local_socket.h"
#include "rpc/server_connection.h"
#include "rpc/server_state.h"

namespace weft::rpc {

ServerState::ServerState(IoPool& io, ServerOptions o, metrics::Registry& r)
    : io(io), options(std::move(o)), registry(r), pool(options.blocking_threads) {
  metrics::Labels l{{"server", options.name}};
  connections_gauge = &registry.gauge("weft_rpc_server_connections", "Open connections", l);
  blocking_queue_gauge = &registry.gauge("weft_rpc_server_blocking_queue", "Blocking requests queued or running", l);
  overloaded = &registry.counter("weft_rpc_server_overloaded_total", "Requests refused: blocking pool full", l);
  refused = &registry.counter("weft_rpc_server_refused_total", "Connections refused: wrong cluster token", l);
  protocol_errors = &registry.counter("weft_rpc_server_protocol_errors_total", "Connections closed on malformed input", l);
  write_stalls = &registry.counter("weft_rpc_server_write_stalls_total",
                                   "Connections closed: replies waited write_stall_timeout_ms without progress", l);
  hello_timeouts = &registry.counter("weft_rpc_server_hello_timeouts_total",
                                     "Connections closed: no Hello within hello_timeout_ms", l);
  read_stalls = &registry.counter("weft_rpc_server_read_stalls_total",
                                  "Connections closed: a request's bytes stopped for read_stall_timeout_ms", l);
  accept_errors = &registry.counter("weft_rpc_server_accept_errors_total",
                                    "Failed accepts (out of descriptors or memory: accepting pauses)", l);
}

Server::Server(IoPool& io, ServerOptions options, metrics::Registry& registry)
    : state_(std::make_shared<ServerState>(io, std::move(options), registry)) {}

Server::~Server() { stop(); }

const ServerOptions& Server::options() const { return state_->options; }

size_t Server::active_calls() const { return state_->active_calls.load(); }

void Server::add_async(MethodId id, std::string name, AsyncHandler handler) {
  WEFT_ASSERT(!state_->methods.contains(id.wire()));
  auto& m = state_->methods[id.wire()];
  m.name = std::move(name);
  m.async = std::move(handler);
  metrics::Labels l{{"server", state_->options.name}, {"method", m.name}};
  m.requests = &state_->registry.counter("weft_rpc_server_requests_total", "Requests by method", l);
  m.errors = &state_->registry.counter("weft_rpc_server_errors_total", "Requests answered with an error", l);
  m.latency_us = &state_->registry.histogram("weft_rpc_server_latency_us", "Request latency in the server", l);
}

void Server::add_blocking(MethodId id, std::string name, BlockingHandler handler) {
  add_async(id, std::move(name), nullptr);
  state_->methods[id.wire()].blocking = std::move(handler);
}

namespace {

using Acceptor = ServerState::Acceptor;

Task<void> accept_loop(std::shared_ptr<ServerState> state, Acceptor* acceptor) {
  while (true) {
    auto ec_socket_result = co_await acceptor->async_accept(state->io.next(), use_nothrow);
    auto& [ec, socket] = ec_socket_result;
    if (ec == asio::error::operation_aborted || state->stopped) co_return;
    if (ec) {
      co_await pause_after_accept_failure(acceptor->get_executor(), ec, *state->accept_errors, state->accept_log,
                                          state->options.name);
      if (state->stopped) co_return;
      continue;
    }
    while (WEFT_FAULT("rpc.server.accept.hold")) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // tests
    std::shared_ptr<ServerConnection> conn;
    {
      // stop() sets `stopped`, then closes the connections listed here:
      // looked at under the same lock, a connection accepted meanwhile is
      // either listed in time or never served.
      std::lock_guard lock(state->mu);
      if (state->stopped) {
        asio::error_code ignored;
        socket.close(ignored);
        co_return;
      }
      conn = std::make_shared<ServerConnection>(std::move(socket), state);
      std::erase_if(state->connections, [](auto& w) { return w.expired(); });
      state->connections.push_back(conn);
    }
    asio::post(conn->executor(), [conn] { conn->serve(); });
  }
}

void accept_on(const std::shared_ptr<ServerState>& state, std::unique_ptr<Acceptor> acceptor) {
  auto* raw = acceptor.get();
  {
    std::lock_guard lock(state->mu);
    state->acceptors.push_back(std::move(acceptor));
  }
  asio::co_spawn(raw->get_executor(), accept_loop(state, raw), asio::detached);
}

}  // namespace

Result<uint16_t> Server::listen(const std::string& host, uint16_t port) {
  asio::error_code ec;
  auto address = asio::ip::make_address(host, ec);
  if (ec) return error(Code::kInvalidArgument, "cannot listen on '{}': not an IP address", host);
  asio::ip::tcp::acceptor acceptor(state_->io.at(0));
  asio::ip::tcp::endpoint ep(address, port);
  acceptor.open(ep.protocol(), ec);
  if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(ep, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return error(code_from_errno(ec.value()), "cannot listen on {}:{}: {}", host, port, ec.message());
  uint16_t bound = acceptor.local_endpoint().port();
  // The Unix twin, bound only after the TCP bind and only for an address of
  // this host: the name then stands for this listener (rpc/local_socket.h).
  // A taken name fails the listen as a taken port does, since clients of
  // this host would otherwise reach whoever holds it.
  std::unique_ptr<Acceptor> local;
  const std::string numeric = address.to_string();
  const bool twin = state_->options.local_socket && is_own_address(numeric);
  if (state_->options.local_socket && !twin)
    WEFT_LOG_INFO("{}: {} is not an address of this host (non-local bind): clients on this host connect over TCP",
                  state_->options.name, numeric);
  if (twin) {
    auto fd = listen_local(numeric, bound);
    if (!fd)
      return error(fd.error().code(), "cannot listen on {}:{}: {} ([server] local_socket = false listens on TCP only)",
                   host, bound, fd.error().message());
    local = std::make_unique<Acceptor>(state_->io.at(0));
    local->assign(asio::generic::stream_protocol(AF_UNIX, 0), *fd, ec);
    if (ec) {
      ::close(*fd);
      return error(code_from_errno(ec.value()), "cannot listen on {}:{}: its local socket: {}", host, bound,
                   ec.message());
    }
  }
  accept_on(state_, std::make_unique<Acceptor>(std::move(acceptor)));
  if (local) accept_on(state_, std::move(local));
  return bound;
}

void Server::stop() {
  auto state = state_;
  if (state->stopped.exchange(true)) return;
  std::vector<std::shared_ptr<ServerConnection>> conns;
  std::vector<std::future<void>> closed;
  {
    std::lock_guard lock(state->mu);
    for (auto& a : state->acceptors) {
      auto done = std::make_shared<std::promise<void>>();
      closed.push_back(done->get_future());
      asio::post(a->get_executor(), [acc = a.get(), done] {
        asio::error_code ec;
        acc->close(ec);
        done->set_value();
      });
    }
    for (auto& w : state->connections)
      if (auto c = w.lock()) conns.push_back(std::move(c));
  }
  for (auto& c : conns) {
    auto done = std::make_shared<std::promise<void>>();
    closed.push_back(done->get_future());
    asio::post(c->executor(), [c, done] {
      c->close(Status(Code::kUnavailable, "server stopping"));
      done->set_value();
    });
  }
  if (state->io.in_pool_thread()) return;  // cannot wait on our own thread
  for (auto& f : closed) f.wait_for(std::chrono::seconds(2));
  // Handlers still running hold the state alive, but their callers expect
  // the server to be quiet once stop() returns: wait for them (bounded).
  for (int i = 0; i < 5000 && state->active_calls.load() > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  state->pool.join();
}

void ServerState::dispatch(const std::shared_ptr<ServerConnection>& conn, std::shared_ptr<ServerCall> call) {
  if (stopped) {  // a request read while stop() closes the connections: its handler's service may be going away
    conn->reply(call, Status(Code::kUnavailable, fmt::format("{} is stopping", options.name)));
    return;
  }
  auto it = methods.find(call->method.wire());
  auto start = std::chrono::steady_clock::now();
  if (it == methods.end()) {
    conn->reply(call, Status(Code::kUnknownMethod,
                             fmt::format("{} has no method {}.{}", options.name, call->method.service, call->method.method)));
    return;
  }
  const Method* m = &it->second;
  m->requests->inc();
  active_calls.fetch_add(1);
  if (m->async) {
    asio::co_spawn(
        conn->executor(),
        [this, conn, call, m, start]() -> Task<void> {
          Status s;
          try {
            s = co_await m->async(*call);
          } catch (const std::exception& e) {
            s = Status(Code::kInternal, fmt::format("{} failed: {}", m->name, e.what()));
          }
          finish(conn, call, m, std::move(s), start);
        },
        asio::detached);
    return;
  }
  if (blocking_inflight.fetch_add(1) >= options.blocking_queue_max) {
    blocking_inflight.fetch_sub(1);
    overloaded->inc();
    finish(conn, call, m, Status(Code::kOverloaded, fmt::format("{} is overloaded", options.name)), start);
    return;
  }
  blocking_queue_gauge->add(1);
  asio::post(pool, [this, conn, call, m, start] {
    Status s;
    if (std::chrono::steady_clock::now() > call->deadline) {
      s = Status(Code::kTimeout, fmt::format("{} request expired while queued", m->name));
    } else {
      try {
        s = m->blocking(*call);
      } catch (const std::exception& e) {
        s = Status(Code::kInternal, fmt::format("{} failed: {}", m->name, e.what()));
      }
    }
    blocking_inflight.fetch_sub(1);
    blocking_queue_gauge->add(-1);
    asio::post(conn->executor(), [this, conn, call, m, s = std::move(s), start] { finish(conn, call, m, s, start); });
  });
}

void ServerState::finish(const std::shared_ptr<ServerConnection>& conn, const std::shared_ptr<ServerCall>& call,
                         const Method* m, Status status, std::chrono::steady_clock::time_point start) {
  if (!status.ok()) m->errors->inc();
  m->latency_us->observe(elapsed_us(start));
  if (!conn->closed()) conn->reply(call, status);
  active_calls.fetch_sub(1);
}

}  // namespace weft::rpc
