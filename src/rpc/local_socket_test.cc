// The same-host shortcut (rpc/local_socket.h): a client on the server's
// host reaches it through the server's Unix socket, both the I/O-thread
// connections and call_blocking's; with the shortcut off at either end, or
// its name taken, the server does not start (as with its port taken); an
// address not of this host gets no name; the name is not seen from another
// network namespace (another host).
#include "rpc/local_socket.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <cstring>

#include "rpc/test_cluster.h"
#include "rpc/test_sockets.h"

namespace weft::rpc {
namespace {

using testing::tcp_fds;
using testing::unix_fds;

proto::EchoRequest ping() {
  proto::EchoRequest r;
  r.set_data("ping");
  return r;
}

// A port nobody listens on now (bound, then let go).
uint16_t free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), len), 0);
  EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  ::close(fd);
  return ntohs(a.sin_port);
}

TEST(LocalSocket, ClientsOnTheServersHostComeThroughItsUnixSocket) {
  testing::EchoCluster c;
  ASSERT_TRUE(c.echo(ping()));           // a Client connection on its I/O thread
  ASSERT_TRUE(c.echo_blocking(ping()));  // and this thread's own blocking one
  const std::string name = local_socket_name("127.0.0.1", c.port);
  EXPECT_EQ(unix_fds(name, /*peer=*/true).size(), 2u);
  EXPECT_EQ(unix_fds(name, /*peer=*/false).size(), 2u);
  EXPECT_TRUE(tcp_fds(c.port, true).empty());
  // Payloads larger than the socket's buffers, both ways (the Rpc tests
  // run over this path too, since their clients are on the server's host).
  std::vector<std::byte> sent(8 << 20), got(8 << 20);
  for (size_t i = 0; i < sent.size(); ++i) sent[i] = static_cast<std::byte>(i * 13 + i / 4099);
  CallOptions opts;
  opts.payload = {sent};
  opts.response_payload = got;
  RawResponse raw;
  auto r = c.echo(ping(), std::move(opts), &raw);
  ASSERT_TRUE(r) << r.error();
  EXPECT_TRUE(raw.payload_in_destination);
  EXPECT_EQ(raw.payload_len, got.size());
  EXPECT_TRUE(sent == got);
}

TEST(LocalSocket, WithTheShortcutOffAtEitherEndClientsComeOverTcp) {
  {
    testing::EchoCluster c({.local_socket = false});
    ASSERT_TRUE(c.echo(ping()));
    ASSERT_TRUE(c.echo_blocking(ping()));
    EXPECT_EQ(tcp_fds(c.port, true).size(), 2u);
    EXPECT_TRUE(unix_fds(local_socket_name("127.0.0.1", c.port), true).empty());
  }
  ClientOptions co;
  co.local_socket = false;
  testing::EchoCluster c({}, co);
  ASSERT_TRUE(c.echo(ping()));
  ASSERT_TRUE(c.echo_blocking(ping()));
  EXPECT_EQ(tcp_fds(c.port, true).size(), 2u);
  EXPECT_TRUE(unix_fds(local_socket_name("127.0.0.1", c.port), true).empty());
}

// A process holding the name already (only a live process can: an abstract
// name goes with its socket) keeps the server from starting, as a process
// holding its port would: clients of this host would otherwise reach it.
// The port is let go again, and once the name is free a server starts there.
TEST(LocalSocket, ANameAlreadyTakenFailsTheListenAsATakenPortDoes) {
  const uint16_t port = free_port();
  auto squatter = listen_local("127.0.0.1", port);
  ASSERT_TRUE(squatter) << squatter.error();
  EXPECT_FALSE(listen_local("127.0.0.1", port)) << "a second listener on one name";
  IoPool io{1};
  metrics::Registry registry;
  {
    Server server(io, {.cluster_token = testing::kTestToken}, registry);
    auto refused = server.listen("127.0.0.1", port);
    ASSERT_FALSE(refused) << "listening while another process holds the name";
    EXPECT_NE(refused.error().message().find("local_socket = false"), std::string::npos) << refused.error();
    // Without the twin the same server listens on TCP alone.
    Server tcp_only(io, {.cluster_token = testing::kTestToken, .local_socket = false}, registry);
    auto bound = tcp_only.listen("127.0.0.1", port);
    ASSERT_TRUE(bound) << bound.error();
    tcp_only.stop();
  }
  ::close(*squatter);
  Server server(io, {.cluster_token = testing::kTestToken}, registry);
  register_echo_service(server);
  auto bound = server.listen("127.0.0.1", port);
  ASSERT_TRUE(bound) << bound.error();
  IoPool client_io{1};
  Client client(client_io, {.cluster_token = testing::kTestToken});
  auto r = client.call_blocking<proto::EchoReply>(Endpoint{"127.0.0.1", port}, kEcho, ping(), {}, 0, nullptr);
  EXPECT_TRUE(r) << r.error();
  EXPECT_EQ(unix_fds(local_socket_name("127.0.0.1", port), true).size(), 1u);
  server.stop();
}

TEST(LocalSocket, OwnAddressesAreThisHostsOnly) {
  for (const char* own : {"127.0.0.1", "127.3.4.5", "::1", "0.0.0.0", "::"}) EXPECT_TRUE(is_own_address(own)) << own;
  // TEST-NET-1 and its IPv6 documentation prefix: on no interface here.
  for (const char* other : {"192.0.2.1", "2001:db8::1", "not-an-address", ""})
    EXPECT_FALSE(is_own_address(other)) << other;
}

// Whether this process may make a network namespace (a child tries).
bool can_make_network_namespace() {
  pid_t child = ::fork();
  if (child == 0) ::_exit(::unshare(CLONE_NEWNET) == 0 || ::unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0 ? 0 : 1);
  int status = 0;
  return child > 0 && ::waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// In a network namespace of its own, with non-local binds on there: a
// server on an address of no interface (a floating address another host
// may hold) listens on TCP and has no twin. Exits 0 when so.
[[noreturn]] void listen_on_a_non_local_address() {
  if (::unshare(CLONE_NEWNET) != 0 && ::unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0) std::_Exit(3);
  FILE* f = std::fopen("/proc/sys/net/ipv4/ip_nonlocal_bind", "w");
  if (f == nullptr || std::fputs("1", f) < 0 || std::fclose(f) != 0) std::_Exit(4);
  IoPool io{1};
  metrics::Registry registry;
  Server server(io, {.cluster_token = testing::kTestToken}, registry);
  auto bound = server.listen("192.0.2.1", 0);
  if (!bound) std::_Exit(5);
  int fd = connect_local("192.0.2.1", *bound);
  server.stop();
  std::_Exit(fd < 0 ? 0 : 6);
}

TEST(LocalSocket, ANonLocalAddressGetsNoTwin) {
  if (!can_make_network_namespace()) GTEST_SKIP() << "cannot make a network namespace here";
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // the child runs a server: a fresh process
  // 3: no namespace, 4: the sysctl, 5: the TCP listen, 6: a twin was bound.
  EXPECT_EXIT(listen_on_a_non_local_address(), ::testing::ExitedWithCode(0), "");
}

TEST(LocalSocket, APeerIsDescribedByItsProcess) {
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  EXPECT_EQ(describe_peer(fds[0]), fmt::format("local process {}", ::getpid()));
  EXPECT_TRUE(is_local_socket(fds[0]));
  ::close(fds[0]);
  ::close(fds[1]);
  EXPECT_EQ(describe_peer(-1), "unknown peer");
}

// Another network namespace stands for another host: the server's name is
// not found there (a client in it connects over TCP, to whatever its own
// 127.0.0.1 is). Skipped where a namespace cannot be made (no privilege).
TEST(LocalSocket, TheNameIsNotSeenFromAnotherNetworkNamespace) {
  const uint16_t port = free_port();
  IoPool io{1};
  metrics::Registry registry;
  Server server(io, {.cluster_token = testing::kTestToken}, registry);
  ASSERT_TRUE(server.listen("127.0.0.1", port));
  int here = connect_local("127.0.0.1", port);
  EXPECT_GE(here, 0) << "not found in its own namespace";
  if (here >= 0) ::close(here);
  // Built before the fork: the child of a threaded process only makes
  // system calls.
  const std::string name = local_socket_name("127.0.0.1", port);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path, name.data(), name.size());
  const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size());
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // A user namespace lets an unprivileged test make the network one.
    if (::unshare(CLONE_NEWNET) != 0 && ::unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0) ::_exit(77);
    int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    ::_exit(fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&a), len) != 0 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  server.stop();
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 77) GTEST_SKIP() << "cannot make a network namespace here";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the name was found from another network namespace";
}

}  // namespace
}  // namespace weft::rpc
