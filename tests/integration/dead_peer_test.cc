// A client host that vanishes without a word (its link cut: no FIN, no RST)
// while it holds an idle connection to a `weft serve` process on another
// host (network namespaces, netns_lab.h): the server's keepalive probes go
// unanswered and the kernel ends the connection, so the server closes it
// within keepalive time instead of holding it (fd, buffers) for ever. While
// the link is up the same idle connection stays open: the probes are
// answered. Skips (ctest reports it) where namespaces cannot be created.
#include <gtest/gtest.h>

#include <sstream>

#include <unistd.h>

#include <algorithm>
#include <thread>

#include <fmt/format.h>

#include "netns_lab.h"
#include "process.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using testing::NetnsLab;
using testing::Process;
using testing::TempDir;

constexpr const char* kServerIp = "10.78.0.1";
constexpr const char* kClientIp = "10.78.0.2";
constexpr int kPort = 7000;
// Probes after 1 s quiet, every 1 s, 2 unanswered end it: ~3 s after the cut.
constexpr auto kKeepaliveTime = 3s;

class DeadPeer : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why = lab_.setup();
    if (!why.empty()) GTEST_SKIP() << "network namespaces are not usable here, dead-peer test skipped: " << why;
    for (auto [name, ip] : {std::pair{"server", kServerIp}, std::pair{"client", kClientIp}}) {
      std::string err = lab_.add_host(name, ip);
      ASSERT_TRUE(err.empty()) << "host " << name << ": " << err;
    }
  }
  void TearDown() override {
    if (HasFailure() && server_) std::fprintf(stderr, "--- server log ---\n%s\n", server_->log().c_str());
    holder_.reset();
    server_.reset();
  }

  // `weft serve echo` on the server host. Its Hello timeout is the largest
  // allowed: the raw connection below never says Hello, and only keepalive
  // may end it here.
  bool start_server() {
    testing::write_file(dir_.file("echo.toml"),
                        fmt::format("[server]\nlisten = \"{}:{}\"\nmetrics_listen = \"\"\ncluster_token = \"t\"\n"
                                    "name = \"echo-dp\"\nport_file = \"{}\"\nlog_level = \"debug\"\n"
                                    "hello_timeout_ms = 3600000\ntcp_keepalive_idle_s = 1\n"
                                    "tcp_keepalive_interval_s = 1\ntcp_keepalive_count = 2\ntcp_user_timeout_ms = 0\n",
                                    kServerIp, kPort, dir_.file("ports")));
    server_ = std::make_unique<Process>(
        lab_.in_host("server", {testing::weft_binary(), "serve", "echo", "--config", dir_.file("echo.toml")}),
        dir_.file("server.log"));
    return testing::wait_for_file(dir_.file("ports"), 30s).has_value();
  }

  // Established connections to the server's RPC port, as its host sees them.
  int server_connections() {
    auto r = testing::run_command(
        lab_.in_host("server", {"/usr/bin/ss", "-Htn", "state", "established", fmt::format("sport = :{}", kPort)}),
        dir_.file("ss.log"), 10s);
    if (r.exit_code != 0) return -1;
    return static_cast<int>(std::count(r.output.begin(), r.output.end(), '\n'));
  }

  TempDir dir_;
  NetnsLab lab_{dir_.path()};
  std::unique_ptr<Process> server_;
  std::unique_ptr<Process> holder_;  // keeps an idle connection open from the client host
};

TEST_F(DeadPeer, AnIdleConnectionFromAHostThatVanishedIsClosed) {
  if (::access("/usr/bin/ss", X_OK) != 0) GTEST_SKIP() << "iproute2's ss is not installed";
  ASSERT_TRUE(start_server()) << server_->log();
  holder_ = std::make_unique<Process>(
      lab_.in_host("client", {"/bin/bash", "-c", fmt::format("exec 3<>/dev/tcp/{}/{} && exec sleep 600", kServerIp, kPort)}),
      dir_.file("holder.log"));
  ASSERT_TRUE(testing::eventually([&] { return server_connections() == 1; }, 10s, 100ms)) << holder_->log();

  // Link up: several keepalive times of silence, answered probes, still open.
  std::this_thread::sleep_for(2 * kKeepaliveTime);
  ASSERT_EQ(server_connections(), 1) << "an idle connection to a live host was closed";

  ASSERT_TRUE(lab_.set_link("client", false));
  auto cut = std::chrono::steady_clock::now();
  EXPECT_TRUE(testing::eventually([&] { return server_connections() == 0; }, 4 * kKeepaliveTime, 100ms))
      << "the connection to a vanished host is still open";
  // The first unanswered probe goes out within a second of the cut.
  EXPECT_GE(std::chrono::steady_clock::now() - cut, 1s) << "closed before keepalive could tell";
  // One line naming the peer and the kernel's verdict (ETIMEDOUT).
  auto logged = [&] {
    std::istringstream lines(server_->log());
    for (std::string line; std::getline(lines, line);)
      if (line.find(kClientIp) != std::string::npos && line.find("timed out") != std::string::npos) return true;
    return false;
  };
  EXPECT_TRUE(testing::eventually(logged, 5s)) << "the server did not log why it closed the connection to "
                                                << kClientIp << ":\n" << server_->log();
}

}  // namespace
}  // namespace weft
