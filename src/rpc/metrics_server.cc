#include "rpc/metrics_server.h"

#include <future>
#include <thread>

#include <asio/experimental/awaitable_operators.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read_until.hpp>
#include <asio/steady_timer.hpp>
#include <asio/streambuf.hpp>
#include <asio/write.hpp>

#include "common/log_throttle.h"
#include "common/logging.h"
#include "rpc/accept_failure.h"
#include "rpc/task.h"

namespace weft::rpc {

using namespace asio::experimental::awaitable_operators;

// Threading: every coroutine runs on the acceptor's executor (one I/O thread).
struct MetricsServer::Impl : std::enable_shared_from_this<Impl> {
  Impl(IoPool& io, metrics::Registry& r, Options options)
      : io(io),
        registry(r),
        options(options),
        acceptor(io.at(0)),
        accept_errors(&r.counter("weft_metrics_server_accept_errors_total",
                                 "Failed accepts of the metrics endpoint (accepting pauses)")),
        refused(&r.counter("weft_metrics_server_refused_total",
                           "Connections to the metrics endpoint closed unserved: too many open")),
        connections(&r.gauge("weft_metrics_server_connections", "Connections the metrics endpoint serves now")) {}
  IoPool& io;
  metrics::Registry& registry;
  const Options options;
  asio::ip::tcp::acceptor acceptor;
  metrics::Counter* accept_errors;
  metrics::Counter* refused;
  metrics::Gauge* connections;
  LogThrottle accept_log;

  Task<void> serve(asio::ip::tcp::socket socket) {
    auto self = shared_from_this();
    connections->add(1);
    struct Done {
      metrics::Gauge* g;
      ~Done() { g->add(-1); }
    } done{connections};
    asio::streambuf buf(16 * 1024);  // bounded request size
    asio::steady_timer timer(socket.get_executor(), std::chrono::seconds(5));
    auto r = co_await (asio::async_read_until(socket, buf, "\r\n\r\n", use_nothrow) || timer.async_wait(use_nothrow));
    if (r.index() != 0) co_return;  // too slow
    if (std::get<0>(std::get<0>(r))) co_return;
    std::string request(asio::buffers_begin(buf.data()), asio::buffers_end(buf.data()));
    std::string first = request.substr(0, request.find("\r\n"));
    std::string status = "200 OK", type = "text/plain; version=0.0.4", body;
    if (first.rfind("GET /metrics", 0) == 0) {
      body = registry.prometheus_text();
    } else if (first.rfind("GET /health", 0) == 0) {
      body = "ok\n";
    } else if (first.rfind("GET ", 0) == 0) {
      status = "404 Not Found";
      body = "try /metrics\n";
    } else {
      status = "405 Method Not Allowed";
      body = "only GET\n";
    }
    std::string head = "HTTP/1.1 " + status + "\r\nContent-Type: " + type +
                       "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n";
    std::array<asio::const_buffer, 2> out{asio::buffer(head), asio::buffer(body)};
    timer.expires_after(options.reply_timeout);
    auto w = co_await (asio::async_write(socket, out, use_nothrow) || timer.async_wait(use_nothrow));
    if (w.index() != 0) co_return;  // not taken in time: the socket closes with this frame
    asio::error_code ec;
    socket.shutdown(asio::ip::tcp::socket::shutdown_both, ec);
  }

  Task<void> accept_loop() {
    auto self = shared_from_this();
    while (true) {
      auto ec_socket_result = co_await acceptor.async_accept(use_nothrow);
      auto& [ec, socket] = ec_socket_result;
      if (ec == asio::error::operation_aborted || !acceptor.is_open()) co_return;
      if (ec) {
        co_await pause_after_accept_failure(acceptor.get_executor(), ec, *accept_errors, accept_log,
                                            "metrics endpoint");
        continue;
      }
      if (connections->value() >= options.connections_max) {
        refused->inc();
        continue;  // `socket` closes here
      }
      asio::co_spawn(acceptor.get_executor(), serve(std::move(socket)), asio::detached);
    }
  }
};

MetricsServer::MetricsServer(IoPool& io, metrics::Registry& registry) : MetricsServer(io, registry, Options{}) {}

MetricsServer::MetricsServer(IoPool& io, metrics::Registry& registry, Options options)
    : impl_(std::make_shared<Impl>(io, registry, options)) {}

MetricsServer::~MetricsServer() { stop(); }

Result<uint16_t> MetricsServer::listen(const std::string& host, uint16_t port) {
  asio::error_code ec;
  auto address = asio::ip::make_address(host, ec);
  if (ec) return error(Code::kInvalidArgument, "metrics: '{}' is not an IP address", host);
  asio::ip::tcp::endpoint ep(address, port);
  auto& a = impl_->acceptor;
  a.open(ep.protocol(), ec);
  if (!ec) a.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) a.bind(ep, ec);
  if (!ec) a.listen(64, ec);
  if (ec) return error(code_from_errno(ec.value()), "metrics: cannot listen on {}:{}: {}", host, port, ec.message());
  uint16_t bound = a.local_endpoint().port();
  asio::co_spawn(a.get_executor(), impl_->accept_loop(), asio::detached);
  return bound;
}

void MetricsServer::stop() {
  auto impl = impl_;
  // Shared: stop() may return first (on an I/O thread, or after waiting 2 s).
  auto done = std::make_shared<std::promise<void>>();
  auto fut = done->get_future();
  asio::post(impl->acceptor.get_executor(), [impl, done] {
    asio::error_code ec;
    impl->acceptor.close(ec);
    done->set_value();
  });
  if (!impl->io.in_pool_thread()) fut.wait_for(std::chrono::seconds(2));
}

}  // namespace weft::rpc
