#include "client/cluster_config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

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

}  // namespace
}  // namespace weft::client
