// Dead-peer detection on RPC sockets: the keepalive and TCP_USER_TIMEOUT
// options are in effect on both ends of real connections (the server's
// accepted socket, a Client's connection, a call_blocking channel), each
// end with its own settings; 0 turns them off; a socket that cannot take
// them is reported, not fatal; the [server] keys are read and bounded, and
// the connections a server opens itself take them too.
#include "rpc/tcp_liveness.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <optional>

#include "common/config.h"
#include "rpc/service_runtime.h"
#include "rpc/test_cluster.h"
#include "rpc/test_sockets.h"

namespace weft::rpc {
namespace {

using testing::liveness_of;
using testing::SocketLiveness;
using testing::tcp_fds;

void expect_liveness(int fd, const TcpLiveness& want, const char* which) {
  EXPECT_EQ(liveness_of(fd), SocketLiveness::of(want)) << which;
}

proto::EchoRequest ping() {
  proto::EchoRequest r;
  r.set_data("ping");
  return r;
}

// Distinct values per end (and not the kernel's defaults) show each end
// sets its own. The servers here have no Unix twin (local_socket off), so
// the clients on this host come over TCP.
TEST(TcpLiveness, BothEndsOfEveryConnectionHaveIt) {
  ServerOptions so;
  so.local_socket = false;
  so.tcp = {.keepalive_idle_s = 7, .keepalive_interval_s = 3, .keepalive_count = 5, .user_timeout_ms = 45000};
  ClientOptions co;
  co.tcp = {.keepalive_idle_s = 11, .keepalive_interval_s = 2, .keepalive_count = 6, .user_timeout_ms = 50000};
  testing::EchoCluster c(so, co);
  ASSERT_TRUE(c.echo(ping()));           // a Client connection on its I/O thread
  ASSERT_TRUE(c.echo_blocking(ping()));  // and this thread's own blocking one
  auto accepted = tcp_fds(c.port, /*peer=*/false);
  auto connected = tcp_fds(c.port, /*peer=*/true);
  ASSERT_EQ(accepted.size(), 2u);
  ASSERT_EQ(connected.size(), 2u);
  for (int fd : accepted) expect_liveness(fd, so.tcp, "server's accepted socket");
  for (int fd : connected) expect_liveness(fd, co.tcp, "client's socket");
}

TEST(TcpLiveness, ZeroTurnsEachOff) {
  ServerOptions so;
  so.local_socket = false;
  so.tcp = {.keepalive_idle_s = 0, .keepalive_interval_s = 3, .keepalive_count = 5, .user_timeout_ms = 0};
  ClientOptions co;
  co.tcp = so.tcp;
  testing::EchoCluster c(so, co);
  ASSERT_TRUE(c.echo(ping()));
  auto fds = tcp_fds(c.port, false);
  auto peers = tcp_fds(c.port, true);
  fds.insert(fds.end(), peers.begin(), peers.end());
  ASSERT_EQ(fds.size(), 2u);
  for (int fd : fds) {
    SocketLiveness got = liveness_of(fd);
    EXPECT_EQ(got.keepalive, 0);
    EXPECT_EQ(got.user_timeout_ms, 0);
  }
}

// A socket that is not TCP takes none of the TCP options: the failure is
// reported by name, and applying it anyway (what connections do) only logs.
TEST(TcpLiveness, ASocketThatCannotTakeThemIsReportedNotFatal) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  Status s = set_tcp_liveness(fd, TcpLiveness{});
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("TCP_KEEPIDLE"), std::string::npos) << s;
  EXPECT_NE(s.message().find("TCP_USER_TIMEOUT"), std::string::npos) << s;
  apply_tcp_liveness(fd, TcpLiveness{});
  apply_tcp_liveness(fd, TcpLiveness{});
  ::close(fd);
}

Result<ServiceConfig> parse_server(const std::string& lines) {
  auto cfg = Config::parse("[server]\ncluster_token = \"t\"\n" + lines, "test.toml");
  if (!cfg) return std::unexpected(cfg.error());
  return ServiceConfig::from(*cfg, "storage");
}

// [server] hello_timeout_ms, read_stall_timeout_ms and tcp_*: defaults, values set, 0 where it
// means off, and bounds.
TEST(ServiceConfig, HelloTimeoutAndTcpLivenessAreReadAndBounded) {
  auto absent = parse_server("");
  ASSERT_TRUE(absent) << absent.error();
  EXPECT_EQ(absent->hello_timeout_ms, 10000u);
  EXPECT_EQ(absent->read_stall_timeout_ms, 30000u);
  EXPECT_EQ(absent->tcp.keepalive_idle_s, 30u);
  EXPECT_EQ(absent->tcp.keepalive_interval_s, 5u);
  EXPECT_EQ(absent->tcp.keepalive_count, 4u);
  EXPECT_EQ(absent->tcp.user_timeout_ms, 60000u);
  EXPECT_TRUE(absent->local_socket);
  EXPECT_TRUE(absent->client_options("x").local_socket);
  auto set = parse_server(
      "hello_timeout_ms = 2000\nread_stall_timeout_ms = 5000\ntcp_keepalive_idle_s = 10\ntcp_keepalive_interval_s = 2\n"
      "tcp_keepalive_count = 3\ntcp_user_timeout_ms = 20000\nwrite_stall_timeout_ms = 10000\n");
  ASSERT_TRUE(set) << set.error();
  EXPECT_EQ(set->hello_timeout_ms, 2000u);
  EXPECT_EQ(set->read_stall_timeout_ms, 5000u);
  EXPECT_EQ(set->tcp.keepalive_idle_s, 10u);
  EXPECT_EQ(set->tcp.keepalive_interval_s, 2u);
  EXPECT_EQ(set->tcp.keepalive_count, 3u);
  EXPECT_EQ(set->tcp.user_timeout_ms, 20000u);
  auto off = parse_server("tcp_keepalive_idle_s = 0\ntcp_user_timeout_ms = 0\nhello_timeout_ms = 0\nread_stall_timeout_ms = 0\n");
  ASSERT_TRUE(off) << off.error();
  auto tcp_only = parse_server("local_socket = false\n");
  ASSERT_TRUE(tcp_only) << tcp_only.error();
  EXPECT_FALSE(tcp_only->local_socket);
  EXPECT_FALSE(tcp_only->client_options("x").local_socket);
  EXPECT_EQ(off->tcp.keepalive_idle_s, 0u);
  EXPECT_EQ(off->tcp.user_timeout_ms, 0u);
  EXPECT_EQ(off->hello_timeout_ms, 0u);
  EXPECT_EQ(off->read_stall_timeout_ms, 0u);
  // The kernel must not cut a peer that stopped reading before the write-stall check sees it.
  EXPECT_FALSE(parse_server("write_stall_timeout_ms = 60000\n"));
  EXPECT_TRUE(parse_server("write_stall_timeout_ms = 120000\ntcp_user_timeout_ms = 0\n"));
  for (std::string bad : {"write_stall_timeout_ms = 60000", "hello_timeout_ms = 999", "hello_timeout_ms = 3600001",
                          "read_stall_timeout_ms = 10", "tcp_keepalive_idle_s = 32768",
                          "tcp_keepalive_interval_s = 0", "tcp_keepalive_count = 0", "tcp_keepalive_count = 128",
                          "tcp_user_timeout_ms = 999", "tcp_user_timeout_ms = -1", "tcp_keepalive_idle_s = \"30s\""}) {
    auto r = parse_server(bad + "\n");
    ASSERT_FALSE(r) << bad;
    std::string key = bad.substr(0, bad.find(' '));
    EXPECT_NE(r.error().message().find(key), std::string::npos) << r.error();
  }
}

// The connections a server opens itself (to mgmtd, meta, other storage
// servers) take its [server] token and tcp_* values, as its accepted ones do.
TEST(ServiceConfig, ItsClientOptionsCarryTheServersTcpLiveness) {
  auto sc = parse_server(
      "tcp_keepalive_idle_s = 12\ntcp_keepalive_interval_s = 3\ntcp_keepalive_count = 6\n"
      "tcp_user_timeout_ms = 40000\n");
  ASSERT_TRUE(sc) << sc.error();
  const TcpLiveness want{
      .keepalive_idle_s = 12, .keepalive_interval_s = 3, .keepalive_count = 6, .user_timeout_ms = 40000};
  ClientOptions co = sc->client_options("storage-mgmt");
  EXPECT_EQ(co.tcp, want);
  EXPECT_EQ(co.cluster_token, "t");
  EXPECT_EQ(co.name, "storage-mgmt");
  EXPECT_EQ(co.connect_timeout_ms, ClientOptions::in_cluster("t", "x").connect_timeout_ms);
  // And they are set on the socket such a Client connects.
  co.cluster_token = testing::kTestToken;
  testing::EchoCluster c({.local_socket = false}, co);
  ASSERT_TRUE(c.echo(ping()));
  auto connected = tcp_fds(c.port, /*peer=*/true);
  ASSERT_EQ(connected.size(), 1u);
  expect_liveness(connected[0], want, "server's own outgoing socket");
}

}  // namespace
}  // namespace weft::rpc
