// Client::connect and the client config's tcp_* keys: the connections
// libweft opens (here: to an in-process mgmtd) carry the file's keepalive
// and TCP_USER_TIMEOUT, read back from the sockets; a user timeout not above
// the call timeout is refused before any connection is made.
// Then a Client against an in-process mgmtd and meta whose only storage
// server never answers (DroppingStorage): calls that must fail without
// storage, or before reaching it.
#include <gtest/gtest.h>

#include <fstream>

#include "common/temp_dir.h"
#include "client/in_process_meta.h"
#include "client/in_process_mgmtd.h"
#include "rpc/test_sockets.h"
#include "weft/client.h"

namespace weft::client {
namespace {

constexpr char kToken[] = "connect-test";

// Enough for connect(), which fetches the routing and starts the lease (meta
// is listed in the config).
struct Mgmtd : InProcessMgmtd {
  Mgmtd() : InProcessMgmtd(kToken) {}
};

std::string write_config(const testing::TempDir& dir, uint16_t mgmtd_port, const std::string& extra,
                         const std::string& meta = "127.0.0.1:1") {
  std::string path = dir.file("client.toml");
  std::ofstream(path) << fmt::format("mgmtd = [\"127.0.0.1:{}\"]\ncluster_token = \"{}\"\nmeta = [\"{}\"]\n{}",
                                     mgmtd_port, kToken, meta, extra);
  return path;
}

TEST(ClientConnect, ItsConnectionsTakeTheConfigsTcpLiveness) {
  Mgmtd mgmtd;
  testing::TempDir dir;
  ClientOptions o;
  o.config_path = write_config(dir, mgmtd.port,
                               "tcp_keepalive_idle_s = 11\ntcp_keepalive_interval_s = 2\ntcp_keepalive_count = 6\n"
                               "tcp_user_timeout_ms = 50000\n");
  auto client = Client::connect(o);
  ASSERT_TRUE(client) << client.error();
  // connect() fetched the routing and the lease started: mgmtd's peers in
  // this process are the client's sockets (mgmtd's own have its port as theirs).
  auto sockets = rpc::testing::tcp_fds(mgmtd.port, /*peer=*/true);
  ASSERT_FALSE(sockets.empty());
  const rpc::TcpLiveness want{
      .keepalive_idle_s = 11, .keepalive_interval_s = 2, .keepalive_count = 6, .user_timeout_ms = 50000};
  for (int fd : sockets) EXPECT_EQ(rpc::testing::liveness_of(fd), rpc::testing::SocketLiveness::of(want));
}

TEST(ClientConnect, UserTimeoutNotAboveTheCallTimeoutIsRefused) {
  testing::TempDir dir;
  ClientOptions o;
  o.config_path = write_config(dir, 1, "tcp_user_timeout_ms = 8000\n");
  o.call_timeout_ms = 8000;
  auto refused = Client::connect(o);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), Code::kConfig);
  EXPECT_NE(refused.error().message().find(o.config_path + ": key 'tcp_user_timeout_ms' (8000)"), std::string::npos)
      << refused.error();
}

// A Client whose metadata is served (in-process meta) and whose one storage
// server drops every connection: data calls fail after the retry time.
class ClientWithoutStorage : public ::testing::Test {
 protected:
  static constexpr uint32_t kRetryMs = 1500;
  void SetUp() override {
    ASSERT_EQ(mgmtd.add_storage_and_table(storage.address()), 1u) << "meta's files use chain table 1";
    ClientOptions o;
    o.config_path = write_config(dir, mgmtd.port, "", meta.address());
    o.retry_time_ms_max = kRetryMs;
    o.call_timeout_ms = 1000;
    auto c = Client::connect(o);
    ASSERT_TRUE(c) << c.error();
    client = std::move(*c);
  }

  const Cred root = Cred::root();
  const Cred user{1000, 1000, {}};
  Mgmtd mgmtd;
  DroppingStorage storage;
  InProcessMeta meta{kToken};
  testing::TempDir dir;
  std::unique_ptr<Client> client;
};

}  // namespace
}  // namespace weft::client
