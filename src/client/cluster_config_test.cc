#include "client/cluster_config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "common/temp_dir.h"

namespace weft::client {
namespace {

class TempFile {
 public:
  explicit TempFile(const std::string& text) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "weft-client-XXXXXX").string();
    int fd = ::mkstemp(tmpl.data());
    ::close(fd);
    path_ = tmpl;
    std::ofstream(path_) << text;
  }
  ~TempFile() { std::filesystem::remove(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(ClusterConfig, ParsesAddressesAndToken) {
  auto c = parse_cluster_config("mgmtd = [\"127.0.0.1:7000\", \"[::1]:7001\"]\ncluster_token = \"abc\"\n", "x.toml");
  ASSERT_TRUE(c) << c.error();
  ASSERT_EQ(c->mgmtd.size(), 2u);
  EXPECT_EQ(c->mgmtd[0].to_string(), "127.0.0.1:7000");
  EXPECT_EQ(c->mgmtd[1].port, 7001);
  EXPECT_EQ(c->cluster_token, "abc");
  EXPECT_EQ(c->source, "x.toml");
}

TEST(ClusterConfig, WrongContentNamesFileAndKey) {
  auto missing = parse_cluster_config("cluster_token = \"a\"\n", "x.toml");
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message().find("x.toml"), std::string::npos);
  EXPECT_NE(missing.error().message().find("mgmtd"), std::string::npos);

  auto empty = parse_cluster_config("mgmtd = []\ncluster_token = \"a\"\n", "x.toml");
  ASSERT_FALSE(empty);
  EXPECT_NE(empty.error().message().find("no address"), std::string::npos);

  auto bad_addr = parse_cluster_config("mgmtd = [\"nohost\"]\ncluster_token = \"a\"\n", "x.toml");
  ASSERT_FALSE(bad_addr);
  EXPECT_NE(bad_addr.error().message().find("mgmtd"), std::string::npos);

  auto wrong_type = parse_cluster_config("mgmtd = [\"h:1\"]\ncluster_token = 5\n", "x.toml");
  ASSERT_FALSE(wrong_type);
  EXPECT_NE(wrong_type.error().message().find("cluster_token"), std::string::npos);

  auto no_token = parse_cluster_config("mgmtd = [\"h:1\"]\n", "x.toml");
  ASSERT_FALSE(no_token);
  EXPECT_NE(no_token.error().message().find("cluster_token"), std::string::npos);

  auto syntax = parse_cluster_config("mgmtd = [\n", "x.toml");
  ASSERT_FALSE(syntax);
  EXPECT_NE(syntax.error().message().find("x.toml"), std::string::npos);
}

TEST(ClusterConfig, LookupOrderFlagThenEnvThenDefault) {
  ClusterConfigQuery q;
  q.default_path = "/d/client.toml";
  EXPECT_EQ(locate_cluster_config(q).path, "/d/client.toml");
  EXPECT_EQ(locate_cluster_config(q).origin, "default");
  q.env_path = "/e.toml";
  EXPECT_EQ(locate_cluster_config(q).path, "/e.toml");
  EXPECT_EQ(locate_cluster_config(q).origin, "$WEFT_CONFIG");
  q.config_path = "/f.toml";
  EXPECT_EQ(locate_cluster_config(q).path, "/f.toml");
  EXPECT_EQ(locate_cluster_config(q).origin, "--config");
}

TEST(ClusterConfig, MissingFileSaysWhereItLooked) {
  ClusterConfigQuery q;
  q.default_path = "/nonexistent/weft-data/client.toml";
  auto c = load_cluster_config(q);
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message().find("/nonexistent/weft-data/client.toml"), std::string::npos);
  EXPECT_NE(c.error().message().find("default"), std::string::npos);
  EXPECT_EQ(c.error().message().find('\n'), std::string::npos);
  q.env_path = "/nonexistent/env.toml";
  c = load_cluster_config(q);
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message().find("/nonexistent/env.toml"), std::string::npos);
  EXPECT_NE(c.error().message().find("$WEFT_CONFIG"), std::string::npos);
}

// A config that exists but cannot be read says why (not "no cluster config"):
// a directory, or (for a user other than root) one behind a directory it may
// not search; a stream such as --config <(...) is read.
TEST(ClusterConfig, AConfigThatCannotBeReadSaysWhy) {
  weft::testing::TempDir dir;
  ClusterConfigQuery q;
  q.config_path = dir.path();
  auto c = load_cluster_config(q);
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message().find("is a directory"), std::string::npos) << c.error();
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const std::string text = "mgmtd = [\"127.0.0.1:7000\"]\ncluster_token = \"t\"\n";
  ASSERT_EQ(::write(fds[1], text.data(), text.size()), static_cast<ssize_t>(text.size()));
  ::close(fds[1]);
  q.config_path = "/dev/fd/" + std::to_string(fds[0]);
  c = load_cluster_config(q);
  ::close(fds[0]);
  ASSERT_TRUE(c) << c.error();
  EXPECT_EQ(c->cluster_token, "t");
}

TEST(ClusterConfig, LoadsFileAndClusterFlagOverridesAddress) {
  TempFile f("mgmtd = [\"127.0.0.1:7000\"]\ncluster_token = \"tok\"\n");
  ClusterConfigQuery q;
  q.config_path = f.path();
  auto c = load_cluster_config(q);
  ASSERT_TRUE(c) << c.error();
  EXPECT_EQ(c->mgmtd.at(0).port, 7000);
  EXPECT_EQ(c->source, f.path());
  q.cluster = "10.1.2.3:7100";
  c = load_cluster_config(q);
  ASSERT_TRUE(c) << c.error();
  ASSERT_EQ(c->mgmtd.size(), 1u);
  EXPECT_EQ(c->mgmtd[0].to_string(), "10.1.2.3:7100");
  EXPECT_EQ(c->cluster_token, "tok");
  q.cluster = "bad";
  c = load_cluster_config(q);
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message().find("--cluster"), std::string::npos);
}

constexpr char kBase[] = "mgmtd = [\"127.0.0.1:7000\"]\ncluster_token = \"tok\"\n";

// The tcp_* keys: rpc's defaults when absent, the values given, 0 for off.
TEST(ClusterConfig, TcpLivenessKeys) {
  auto absent = parse_cluster_config(kBase, "x.toml");
  ASSERT_TRUE(absent) << absent.error();
  EXPECT_EQ(absent->tcp, rpc::TcpLiveness{});
  auto set = parse_cluster_config(std::string(kBase) +
                                      "tcp_keepalive_idle_s = 11\ntcp_keepalive_interval_s = 2\n"
                                      "tcp_keepalive_count = 6\ntcp_user_timeout_ms = 50000\n",
                                  "x.toml");
  ASSERT_TRUE(set) << set.error();
  EXPECT_EQ(set->tcp,
            (rpc::TcpLiveness{
                .keepalive_idle_s = 11, .keepalive_interval_s = 2, .keepalive_count = 6, .user_timeout_ms = 50000}));
  auto off = parse_cluster_config(std::string(kBase) + "tcp_keepalive_idle_s = 0\ntcp_user_timeout_ms = 0\n", "x.toml");
  ASSERT_TRUE(off) << off.error();
  EXPECT_EQ(off->tcp.keepalive_idle_s, 0u);
  EXPECT_EQ(off->tcp.user_timeout_ms, 0u);
}

// local_socket: on unless the file says false; not a boolean is an error
// naming the key.
TEST(ClusterConfig, LocalSocketKey) {
  auto absent = parse_cluster_config(kBase, "x.toml");
  ASSERT_TRUE(absent) << absent.error();
  EXPECT_TRUE(absent->local_socket);
  auto off = parse_cluster_config(std::string(kBase) + "local_socket = false\n", "x.toml");
  ASSERT_TRUE(off) << off.error();
  EXPECT_FALSE(off->local_socket);
  auto bad = parse_cluster_config(std::string(kBase) + "local_socket = \"no\"\n", "x.toml");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message().find("local_socket"), std::string::npos) << bad.error();
}

// Out of range or of the wrong type: one line naming the file and the key.
TEST(ClusterConfig, BadTcpLivenessNamesFileAndKey) {
  for (std::string bad : {"tcp_keepalive_idle_s = 32768", "tcp_keepalive_idle_s = -1", "tcp_keepalive_interval_s = 0",
                          "tcp_keepalive_count = 0", "tcp_keepalive_count = 128", "tcp_user_timeout_ms = 999",
                          "tcp_user_timeout_ms = 3600001", "tcp_keepalive_idle_s = \"30s\""}) {
    auto r = parse_cluster_config(std::string(kBase) + bad + "\n", "x.toml");
    ASSERT_FALSE(r) << bad;
    std::string key = bad.substr(0, bad.find(' '));
    EXPECT_NE(r.error().message().find("x.toml: key '" + key + "'"), std::string::npos) << r.error();
    EXPECT_EQ(r.error().message().find('\n'), std::string::npos) << r.error();
  }
}

// --cluster replaces the addresses only: the file's tcp_* keys still apply, and are checked.
TEST(ClusterConfig, ClusterFlagKeepsTheFilesTcpLiveness) {
  TempFile f(std::string(kBase) + "tcp_keepalive_idle_s = 9\ntcp_user_timeout_ms = 45000\n");
  ClusterConfigQuery q;
  q.config_path = f.path();
  q.cluster = "10.1.2.3:7100";
  auto c = load_cluster_config(q);
  ASSERT_TRUE(c) << c.error();
  EXPECT_EQ(c->tcp.keepalive_idle_s, 9u);
  EXPECT_EQ(c->tcp.user_timeout_ms, 45000u);
  TempFile bad(std::string(kBase) + "tcp_keepalive_count = 0\n");
  q.config_path = bad.path();
  c = load_cluster_config(q);
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message().find(bad.path() + ": key 'tcp_keepalive_count'"), std::string::npos) << c.error();
}

// A user timeout at or below the call timeout would cut calls before they
// time out; 0 (off) never does.
TEST(ClusterConfig, UserTimeoutMustExceedTheCallTimeout) {
  auto c = parse_cluster_config(std::string(kBase) + "tcp_user_timeout_ms = 10000\n", "x.toml");
  ASSERT_TRUE(c) << c.error();
  auto r = check_tcp_user_timeout(*c, 10000);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kConfig);
  for (std::string part : {"x.toml", "tcp_user_timeout_ms", "10000"})
    EXPECT_NE(r.error().message().find(part), std::string::npos) << r.error();
  EXPECT_TRUE(check_tcp_user_timeout(*c, 9999));
  c->tcp.user_timeout_ms = 0;
  EXPECT_TRUE(check_tcp_user_timeout(*c, 600000));
}

// A misspelt key (or a server's section) is an error naming it, with or
// without --cluster; every known key is accepted.
TEST(ClusterConfig, UnknownKeysAreErrors) {
  auto typo = parse_cluster_config(std::string(kBase) + "tcp_user_timout_ms = 90000\n", "x.toml");
  ASSERT_FALSE(typo);
  EXPECT_EQ(typo.error().code(), Code::kConfig);
  EXPECT_NE(typo.error().message().find("x.toml: key 'tcp_user_timout_ms' is not a client setting"), std::string::npos)
      << typo.error();
  auto section = parse_cluster_config(std::string(kBase) + "[server]\nlisten = \"0.0.0.0:1\"\n", "x.toml");
  ASSERT_FALSE(section);
  EXPECT_NE(section.error().message().find("key 'server'"), std::string::npos) << section.error();
  auto all = parse_cluster_config(std::string(kBase) +
                                      "meta = [\"127.0.0.1:7001\"]\ntcp_keepalive_idle_s = 10\n"
                                      "tcp_keepalive_interval_s = 2\ntcp_keepalive_count = 3\ntcp_user_timeout_ms = 90000\n",
                                  "x.toml");
  EXPECT_TRUE(all) << all.error();

  TempFile f(std::string(kBase) + "meta = [\"127.0.0.1:7001\"]\n");
  ClusterConfigQuery q;
  q.config_path = f.path();
  q.cluster = "10.1.2.3:7100";
  auto flagged = load_cluster_config(q);
  EXPECT_TRUE(flagged) << flagged.error();
  TempFile bad(std::string(kBase) + "clustr_token = \"x\"\n");
  q.config_path = bad.path();
  auto flagged_bad = load_cluster_config(q);
  ASSERT_FALSE(flagged_bad);
  EXPECT_NE(flagged_bad.error().message().find("clustr_token"), std::string::npos) << flagged_bad.error();
}

}  // namespace
}  // namespace weft::client
