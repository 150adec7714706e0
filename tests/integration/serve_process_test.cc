// A real `weft serve` process: config errors, token checks across
// processes, the Prometheus endpoint, fault points from the environment and
// a clean stop on SIGTERM.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>

#include "process.h"
#include "proto/rpc.pb.h"
#include "rpc/client.h"
#include "rpc/test_util.h"

namespace weft {
namespace {

using testing::Process;
using testing::TempDir;

std::string config_text(const TempDir& dir, const std::string& token) {
  return "[server]\nlisten = \"127.0.0.1:0\"\nmetrics_listen = \"127.0.0.1:0\"\ncluster_token = \"" + token +
         "\"\nname = \"echo-it\"\nport_file = \"" + dir.file("ports") + "\"\n";
}

struct Ports {
  uint16_t rpc = 0, metrics = 0;
};

std::optional<Ports> read_ports(const TempDir& dir) {
  auto text = testing::wait_for_file(dir.file("ports"), std::chrono::seconds(10));
  if (!text) return std::nullopt;
  Ports p;
  std::istringstream in(*text);
  in >> p.rpc >> p.metrics;
  return p;
}

TEST(ServeProcess, ServesRefusesWrongTokenExportsMetricsAndStopsCleanly) {
  TempDir dir;
  testing::write_file(dir.file("echo.toml"), config_text(dir, "s3cret"));
  Process server({testing::weft_binary(), "serve", "echo", "--config", dir.file("echo.toml")}, dir.file("log"));
  auto ports = read_ports(dir);
  ASSERT_TRUE(ports) << server.log();

  rpc::IoPool io(1);
  rpc::Endpoint ep{"127.0.0.1", ports->rpc};
  rpc::ClientOptions good;
  good.cluster_token = "s3cret";
  rpc::Client client(io, good);
  proto::EchoRequest req;
  req.set_data("hi");
  auto r = block_on(io.at(0).get_executor(), client.call<proto::EchoReply>(ep, rpc::kEcho, req));
  ASSERT_TRUE(r) << r.error();
  EXPECT_EQ(r->data(), "hi");

  rpc::ClientOptions bad;
  bad.cluster_token = "guess";
  rpc::Client intruder(io, bad);
  auto refused = block_on(io.at(0).get_executor(), intruder.call<proto::EchoReply>(ep, rpc::kEcho, req));
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), Code::kUnauthenticated);

  const std::string text = rpc::testing::scrape_metrics(ports->metrics);
  ASSERT_FALSE(text.empty());
  EXPECT_NE(text.find("weft_rpc_server_requests_total{server=\"echo-it\",method=\"test.echo\"} 1"), std::string::npos)
      << text;
  EXPECT_NE(text.find("weft_rpc_server_refused_total{server=\"echo-it\"} 1"), std::string::npos) << text;

  server.signal(SIGTERM);
  auto status = server.wait_exit(std::chrono::seconds(10));
  ASSERT_TRUE(status);
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << server.log();
  EXPECT_NE(server.log().find("wrong cluster token"), std::string::npos) << server.log();
}

// A test binary that dies without its destructors (a crash) takes the
// processes it started with it: none is left running for later tests.
TEST(TestProcess, DiesWithTheTestThatStartedIt) {
  TempDir dir;
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  pid_t test = ::fork();
  ASSERT_GE(test, 0);
  if (test == 0) {  // the "test": starts a process, says its pid, dies at once
    ::close(fds[0]);
    Process sleeper({"/bin/sleep", "1000"}, dir.file("sleep.log"));
    pid_t pid = sleeper.pid();
    if (::write(fds[1], &pid, sizeof pid) != sizeof pid) ::_exit(2);
    ::_exit(3);  // no destructor runs, as in a crash
  }
  ::close(fds[1]);
  pid_t sleeper = 0;
  ASSERT_EQ(::read(fds[0], &sleeper, sizeof sleeper), static_cast<ssize_t>(sizeof sleeper));
  ::close(fds[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(test, &status, 0), test);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 3);
  // Gone, or a zombie until init reaps it.
  bool gone = testing::eventually([&] { return !testing::pid_alive(sleeper); }, std::chrono::seconds(10));
  if (!gone) ::kill(sleeper, SIGKILL);
  EXPECT_TRUE(gone) << "pid " << sleeper << " outlived the test that started it";
}

TEST(ServeProcess, BadConfigGivesOneClearLine) {
  TempDir dir;
  testing::write_file(dir.file("bad.toml"), "[server]\nlisten = \"127.0.0.1:0\"\ncluster_token = 42\n");
  Process p({testing::weft_binary(), "serve", "echo", "--config", dir.file("bad.toml")}, dir.file("log"));
  auto status = p.wait_exit(std::chrono::seconds(10));
  ASSERT_TRUE(status);
  EXPECT_NE(WEXITSTATUS(*status), 0);
  std::string log = p.log();
  EXPECT_NE(log.find("bad.toml"), std::string::npos) << log;
  EXPECT_NE(log.find("server.cluster_token"), std::string::npos) << log;
  EXPECT_NE(log.find("expected a string"), std::string::npos) << log;

  Process missing({testing::weft_binary(), "serve", "echo", "--config", dir.file("nope.toml")}, dir.file("log2"));
  status = missing.wait_exit(std::chrono::seconds(10));
  ASSERT_TRUE(status);
  EXPECT_NE(WEXITSTATUS(*status), 0);
  EXPECT_NE(missing.log().find("nope.toml"), std::string::npos);
}

TEST(ServeProcess, MalformedFaultSpecIsRefused) {
  TempDir dir;
  testing::write_file(dir.file("echo.toml"), config_text(dir, "t"));
  Process p({testing::weft_binary(), "serve", "echo", "--config", dir.file("echo.toml")}, dir.file("log"),
            {"WEFT_FAULTS=x.y=7"});
  auto status = p.wait_exit(std::chrono::seconds(10));
  ASSERT_TRUE(status);
  EXPECT_NE(WEXITSTATUS(*status), 0);
  EXPECT_NE(p.log().find("WEFT_FAULTS"), std::string::npos) << p.log();
}

// Built with WEFT_JEMALLOC, a server process's malloc is jemalloc (the
// library is mapped) and `weft --version` names it.
TEST(ServeProcess, RunsOnJemallocWhenBuiltWithIt) {
#ifndef WEFT_JEMALLOC
  GTEST_SKIP() << "built with WEFT_JEMALLOC=OFF";
#endif
  TempDir dir;
  testing::write_file(dir.file("echo.toml"), config_text(dir, "t"));
  Process server({testing::weft_binary(), "serve", "echo", "--config", dir.file("echo.toml")}, dir.file("log"));
  ASSERT_TRUE(read_ports(dir)) << server.log();
  std::ifstream maps("/proc/" + std::to_string(server.pid()) + "/maps");
  std::string text((std::istreambuf_iterator<char>(maps)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("libjemalloc"), std::string::npos) << "no libjemalloc in /proc/" << server.pid() << "/maps";

  Process version({testing::weft_binary(), "--version"}, dir.file("version"));
  auto status = version.wait_exit(std::chrono::seconds(10));
  ASSERT_TRUE(status);
  EXPECT_EQ(WEXITSTATUS(*status), 0);
  EXPECT_NE(version.log().find("(jemalloc 5."), std::string::npos) << version.log();
}

}  // namespace
}  // namespace weft
