#include "rpc/metrics_server.h"

#include <gtest/gtest.h>

#include <asio/post.hpp>
#include <asio/use_future.hpp>
#include <algorithm>
#include <future>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include "rpc/test_util.h"

namespace weft::rpc {
namespace {

std::string http_get(uint16_t port, const std::string& request) {
  testing::RawSocket s(port);
  EXPECT_TRUE(s.send_bytes(request.data(), request.size()));
  std::string out;
  char c;
  while (s.recv_bytes(&c, 1, 2000)) out += c;
  return out;
}

TEST(MetricsServer, ServesPrometheusText) {
  metrics::Registry registry;
  registry.counter("weft_test_hits_total", "Hits").inc(5);
  IoPool io{1};
  MetricsServer server(io, registry);
  uint16_t port = server.listen("127.0.0.1", 0).value();
  std::string r = http_get(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_NE(r.find("HTTP/1.1 200 OK"), std::string::npos) << r;
  EXPECT_NE(r.find("weft_test_hits_total 5"), std::string::npos) << r;
  EXPECT_NE(http_get(port, "GET /health HTTP/1.1\r\n\r\n").find("ok"), std::string::npos);
  EXPECT_NE(http_get(port, "GET /nope HTTP/1.1\r\n\r\n").find("404"), std::string::npos);
  EXPECT_NE(http_get(port, "POST /metrics HTTP/1.1\r\n\r\n").find("405"), std::string::npos);
}

// Peers that ask and never read (a reply larger than the socket buffers)
// hold a connection only until reply_timeout; past connections_max open,
// more are closed unserved.
TEST(MetricsServer, PeersThatNeverReadAreCutOffAndBounded) {
  metrics::Registry registry;
  const std::string help(200, 'h');
  for (int i = 0; i < 40000; ++i) registry.counter(fmt::format("weft_test_padding_{}_total", i), help);  // ~10 MB
  IoPool io{1};
  MetricsServer server(io, registry, {.reply_timeout = std::chrono::milliseconds(3000), .connections_max = 4});
  uint16_t port = server.listen("127.0.0.1", 0).value();
  auto& open = registry.gauge("weft_metrics_server_connections", "");
  std::vector<int> peers;
  for (int i = 0; i < 6; ++i) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    int small = 4096;
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    const std::string get = "GET /metrics HTTP/1.1\r\n\r\n";
    ASSERT_EQ(::send(fd, get.data(), get.size(), 0), static_cast<ssize_t>(get.size()));
    peers.push_back(fd);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  // The I/O thread builds each ~10 MB reply before it accepts the next
  // connection: wait for the last two to be refused, watching how many are
  // served at once meanwhile.
  auto& refused = registry.counter("weft_metrics_server_refused_total", "");
  int64_t most = open.value();
  for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(15);
       refused.value() < 2 && std::chrono::steady_clock::now() < until;)
    most = std::max(most, open.value()), std::this_thread::sleep_for(std::chrono::milliseconds(2));
  most = std::max(most, open.value());
  EXPECT_EQ(refused.value(), 2u);
  EXPECT_EQ(most, 4) << "served beyond connections_max, or replies did not stall";
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (open.value() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(open.value(), 0) << "replies nobody reads are held past reply_timeout";
  for (int fd : peers) ::close(fd);
  EXPECT_NE(http_get(port, "GET /health HTTP/1.1\r\n\r\n").find("ok"), std::string::npos) << "serves again";
}

// Out of descriptors, the endpoint pauses before accepting again (see
// Server.OutOfDescriptorsItPausesAcceptingAndLogsOnceASecond).
TEST(MetricsServer, OutOfDescriptorsItPausesAcceptingAndLogsOnceASecond) {
  auto seen = testing::run_out_of_descriptors(
      [](const std::function<void(uint16_t)>& listening) -> int64_t {
        metrics::Registry registry;
        IoPool io{1};
        MetricsServer server(io, registry);
        listening(server.listen("127.0.0.1", 0).value());
        return static_cast<int64_t>(registry.counter("weft_metrics_server_accept_errors_total", "").value());
      },
      20, std::chrono::milliseconds(1000));
  EXPECT_GE(seen.value, 1) << "no accept failed: the test did not run out of descriptors";
  EXPECT_LE(seen.value, 20) << "accept failures in 1 s: the accept loop spins";
  size_t lines = testing::lines_with(seen.log, "accept failed");
  EXPECT_GE(lines, 1u);
  EXPECT_LE(lines, 2u) << seen.log.substr(0, 2000);
}

// Overwrites the stack below the caller's frame with zeros (where a callee
// that returned kept its locals).
[[gnu::noinline]] void scribble_stack() {
  volatile char junk[64 << 10];
  for (size_t i = 0; i < sizeof junk; ++i) junk[i] = 0;
}

// stop() gives up waiting for the I/O thread after 2 s: the acceptor's
// close, run later, must use nothing of stop()'s own (its frame is gone).
TEST(MetricsServer, AStopThatGaveUpWaitingLeavesNothingDangling) {
  metrics::Registry registry;
  IoPool io{1};
  MetricsServer server(io, registry);
  uint16_t port = server.listen("127.0.0.1", 0).value();
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  asio::post(io.at(0), [released] { released.wait(); });  // the I/O thread is busy past stop()'s wait
  server.stop();
  scribble_stack();  // stop()'s locals are gone
  release.set_value();
  asio::post(io.at(0), asio::use_future).get();  // the close ran
  testing::RawSocket s(port);
  EXPECT_FALSE(s.connected()) << "the endpoint still accepts after stop()";
}

}  // namespace
}  // namespace weft::rpc
