// RPC micro-benchmark over 127.0.0.1, each figure beside a raw-socket
// baseline measured in the same run:
//  (a) small calls (64-byte body) at concurrency 1, 16 and 64 on one
//      connection: calls/s, p50 and p99 latency. Baseline: blocking sockets,
//      a client keeping the same number of 64-byte messages in flight and an
//      echo thread.
//  (b) 1 MiB request payloads (answered with a small reply) on 1 and 4
//      connections: GiB/s. Baseline: blocking sockets streaming 1 MiB
//      messages, each acknowledged with 8 bytes, same depth.
// Usage: rpc_bench [--seconds N]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <deque>
#include <future>
#include <thread>
#include <vector>

#include "common/metrics.h"
#include "proto/rpc.pb.h"
#include "rpc/client.h"
#include "rpc/echo_service.h"
#include "rpc/server.h"

using namespace weft;
using SteadyClock = std::chrono::steady_clock;

namespace {

double g_seconds = 3.0;

struct Figures {
  double calls_per_s = 0, p50_us = 0, p99_us = 0, gib_per_s = 0;
};

// ---- raw sockets ---------------------------------------------------------

int listen_socket(uint16_t* port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  ::listen(fd, 16);
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  *port = ntohs(a.sin_port);
  return fd;
}

int connect_socket(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

bool read_full(int fd, void* p, size_t n) {
  auto* c = static_cast<char*>(p);
  while (n) {
    ssize_t r = ::read(fd, c, n);
    if (r <= 0) return false;
    c += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool write_full(int fd, const void* p, size_t n) {
  auto* c = static_cast<const char*>(p);
  while (n) {
    ssize_t w = ::send(fd, c, n, MSG_NOSIGNAL);
    if (w <= 0) return false;
    c += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

Figures raw_small(int depth) {
  uint16_t port;
  int lfd = listen_socket(&port);
  std::thread server([lfd] {
    int fd = ::accept(lfd, nullptr, nullptr);
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    char msg[64];
    while (read_full(fd, msg, sizeof(msg)) && write_full(fd, msg, sizeof(msg))) {
    }
    ::close(fd);
  });
  int fd = connect_socket(port);
  metrics::Histogram h;
  char msg[64] = {};
  std::deque<SteadyClock::time_point> sent;
  for (int i = 0; i < depth; ++i) {
    sent.push_back(SteadyClock::now());
    write_full(fd, msg, sizeof(msg));
  }
  uint64_t done = 0;
  auto start = SteadyClock::now();
  auto end = start + std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(g_seconds));
  while (SteadyClock::now() < end) {
    read_full(fd, msg, sizeof(msg));
    h.observe(static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(SteadyClock::now() - sent.front()).count()));
    sent.pop_front();
    ++done;
    sent.push_back(SteadyClock::now());
    write_full(fd, msg, sizeof(msg));
  }
  double secs = std::chrono::duration<double>(SteadyClock::now() - start).count();
  ::shutdown(fd, SHUT_WR);
  while (read_full(fd, msg, sizeof(msg))) {
  }
  ::close(fd);
  server.join();
  ::close(lfd);
  return {done / secs, double(h.quantile(0.5)), double(h.quantile(0.99)), 0};
}

Figures raw_bulk(int connections, int depth, size_t bytes) {
  uint16_t port;
  int lfd = listen_socket(&port);
  std::vector<std::thread> servers;
  for (int c = 0; c < connections; ++c)
    servers.emplace_back([lfd, bytes] {
      int fd = ::accept(lfd, nullptr, nullptr);
      std::vector<char> buf(bytes);
      uint64_t ack = 0;
      while (read_full(fd, buf.data(), bytes) && write_full(fd, &ack, sizeof(ack))) {
      }
      ::close(fd);
    });
  std::atomic<uint64_t> total{0};
  auto start = SteadyClock::now();
  auto end = start + std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(g_seconds));
  std::vector<std::thread> clients;
  for (int c = 0; c < connections; ++c)
    clients.emplace_back([&, bytes, depth] {
      int fd = connect_socket(port);
      std::vector<char> buf(bytes, 'x');
      uint64_t ack;
      int inflight = 0;
      while (SteadyClock::now() < end) {
        while (inflight < depth) {
          write_full(fd, buf.data(), bytes);
          ++inflight;
        }
        read_full(fd, &ack, sizeof(ack));
        --inflight;
        total += bytes;
      }
      while (inflight-- > 0) read_full(fd, &ack, sizeof(ack));
      ::close(fd);
    });
  for (auto& t : clients) t.join();
  double secs = std::chrono::duration<double>(SteadyClock::now() - start).count();
  for (auto& t : servers) t.join();
  ::close(lfd);
  return {0, 0, 0, total.load() / secs / (1 << 30)};
}

// ---- weft RPC --------------------------------------------------------------

struct RpcSetup {
  explicit RpcSetup(size_t threads, size_t connections)
      : server_io(threads, "srv"), client_io(threads, "cli") {
    rpc::ServerOptions so;
    so.cluster_token = "bench";
    server = std::make_unique<rpc::Server>(server_io, so, registry);
    rpc::register_echo_service(*server);
    ep = rpc::Endpoint{"127.0.0.1", server->listen("127.0.0.1", 0).value()};
    rpc::ClientOptions co;
    co.cluster_token = "bench";
    co.connections_per_endpoint = connections;
    client = std::make_unique<rpc::Client>(client_io, co);
  }
  ~RpcSetup() {
    client.reset();
    server.reset();
  }
  metrics::Registry registry;
  rpc::IoPool server_io, client_io;
  std::unique_ptr<rpc::Server> server;
  std::unique_ptr<rpc::Client> client;
  rpc::Endpoint ep;
};

// Runs `workers` coroutines, each calling `call` in a loop until the deadline.
template <class F>
Figures run_workers(RpcSetup& s, int workers, F make_call, uint64_t bytes_per_call) {
  metrics::Histogram h;
  std::atomic<uint64_t> calls{0}, failures{0};
  std::atomic<int> remaining{workers};
  std::promise<void> done;
  auto start = SteadyClock::now();
  auto end = start + std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(g_seconds));
  for (int w = 0; w < workers; ++w) {
    auto& ctx = s.client_io.at(static_cast<size_t>(w) % s.client_io.size());
    asio::co_spawn(
        ctx,
        [&]() -> Task<void> {
          while (SteadyClock::now() < end) {
            auto t0 = SteadyClock::now();
            bool ok = co_await make_call();
            h.observe(static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(SteadyClock::now() - t0).count()));
            ok ? calls++ : failures++;
          }
          if (--remaining == 0) done.set_value();
        },
        asio::detached);
  }
  done.get_future().wait();
  double secs = std::chrono::duration<double>(SteadyClock::now() - start).count();
  if (failures) std::fprintf(stderr, "rpc_bench: %lu calls failed\n", (unsigned long)failures.load());
  return {calls / secs, double(h.quantile(0.5)), double(h.quantile(0.99)), calls * double(bytes_per_call) / secs / (1 << 30)};
}

Figures rpc_small(int depth) {
  RpcSetup s(1, 1);
  proto::EchoRequest req;
  req.set_data(std::string(64, 'b'));
  return run_workers(s, depth, [&]() -> Task<bool> {
    auto r = co_await s.client->call<proto::EchoReply>(s.ep, rpc::kEcho, req);
    co_return r.has_value();
  }, 0);
}

Figures rpc_bulk(int connections, int depth, size_t bytes) {
  size_t threads = std::min<size_t>(static_cast<size_t>(connections), 2);
  RpcSetup s(threads, static_cast<size_t>(connections));
  proto::EchoRequest req;
  req.set_discard_payload(true);
  std::vector<std::byte> payload(bytes, std::byte{'x'});
  return run_workers(s, connections * depth, [&]() -> Task<bool> {
    rpc::CallOptions opts;
    opts.payload = {payload};
    auto r = co_await s.client->call<proto::EchoReply>(s.ep, rpc::kEcho, req, std::move(opts));
    co_return r.has_value();
  }, bytes);
}

}  // namespace

int main(int argc, char** argv) {
  std::string section = "ab";
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--seconds") == 0) g_seconds = std::atof(argv[i + 1]);
    if (std::strcmp(argv[i], "--section") == 0) section = argv[i + 1];
  }
  std::printf("weft rpc_bench: %.1f s per figure, 127.0.0.1, %u cores\n\n", g_seconds, std::thread::hardware_concurrency());
  if (section.find('a') != std::string::npos) {
  std::printf("(a) small calls, 64-byte body, one connection\n");
  std::printf("%-12s %14s %9s %9s %14s %9s %9s %8s\n", "concurrency", "raw calls/s", "raw p50", "raw p99",
              "rpc calls/s", "rpc p50", "rpc p99", "ratio");
  for (int depth : {1, 16, 64}) {
    Figures raw = raw_small(depth);
    Figures rpc = rpc_small(depth);
    std::printf("%-12d %14.0f %7.0fus %7.0fus %14.0f %7.0fus %7.0fus %7.2f\n", depth, raw.calls_per_s, raw.p50_us,
                raw.p99_us, rpc.calls_per_s, rpc.p50_us, rpc.p99_us, rpc.calls_per_s / raw.calls_per_s);
  }
  }
  if (section.find('b') != std::string::npos) {
  std::printf("\n(b) 1 MiB request payloads, 2 in flight per connection\n");
  std::printf("%-12s %12s %12s %8s\n", "connections", "raw GiB/s", "rpc GiB/s", "ratio");
  for (int conns : {1, 4}) {
    Figures raw = raw_bulk(conns, 2, 1 << 20);
    Figures rpc = rpc_bulk(conns, 2, 1 << 20);
    std::printf("%-12d %12.2f %12.2f %7.2f   (rpc p50 %.0fus p99 %.0fus)\n", conns, raw.gib_per_s, rpc.gib_per_s, rpc.gib_per_s / raw.gib_per_s, rpc.p50_us, rpc.p99_us);
  }
  }
  return 0;
}
