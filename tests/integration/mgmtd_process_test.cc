// A real `weft serve mgmtd` process with storage nodes simulated by
// MgmtClients in the test process, and the `weft status` / `weft admin
// chain-table` commands run as real processes: registration, chain tables,
// lease expiry, a SIGKILLed mgmtd restarted on the same data directory, and
// bad input (one-line errors, non-zero exits).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>

#include "mgmt/mgmt_client.h"
#include "mgmt/proto_convert.h"
#include "mgmt/service_methods.h"
#include "process.h"
#include "proto/mgmt.pb.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using testing::Process;
using testing::TempDir;
namespace gpb = google::protobuf;

using testing::eventually;
using testing::free_port;

struct CliResult {
  int exit_code = -1;
  std::string output;
};

// One mgmtd (restartable on the same port and data dir) plus what tests need around it.
class Cluster {
 public:
  Cluster() : port_(free_port()) {
    testing::write_file(dir_.file("mgmtd.toml"),
                        fmt::format("[server]\nlisten = \"127.0.0.1:{}\"\ncluster_token = \"tok\"\nname = \"mgmtd-it\"\n"
                                    "port_file = \"{}\"\n[mgmtd]\ndata_dir = \"{}\"\nlease_ms = 1000\n"
                                    "grace_ms = 300\ntick_ms = 50\n",
                                    port_, dir_.file("ports"), dir_.file("data")));
    testing::write_file(dir_.file("client.toml"),
                        fmt::format("mgmtd = [\"127.0.0.1:{}\"]\ncluster_token = \"tok\"\n", port_));
  }

  void start_mgmtd() {
    std::filesystem::remove(dir_.file("ports"));
    mgmtd_ = std::make_unique<Process>(
        std::vector<std::string>{testing::weft_binary(), "serve", "mgmtd", "--config", dir_.file("mgmtd.toml")},
        dir_.file("mgmtd.log." + std::to_string(starts_++)));
    ASSERT_TRUE(testing::wait_for_file(dir_.file("ports"), 10s)) << mgmtd_->log();
  }
  void kill_mgmtd() {
    mgmtd_->signal(SIGKILL);
    ASSERT_TRUE(mgmtd_->wait_exit(10s));
  }

  CliResult weft(std::vector<std::string> args, bool with_config = true) {
    std::vector<std::string> argv{testing::weft_binary()};
    argv.insert(argv.end(), args.begin(), args.end());
    if (with_config) argv.insert(argv.end(), {"--config", dir_.file("client.toml")});
    std::string log = dir_.file("cli.log." + std::to_string(cli_runs_++));
    Process p(argv, log, {"WEFT_CONFIG="});
    auto status = p.wait_exit(30s);
    CliResult r;
    if (status && WIFEXITED(*status)) r.exit_code = WEXITSTATUS(*status);
    r.output = p.log();
    return r;
  }

  // `weft status --json`, parsed.
  gpb::Struct status() {
    CliResult r = weft({"status", "--json"});
    EXPECT_EQ(r.exit_code, 0) << r.output;
    gpb::Struct s;
    auto parsed = gpb::util::JsonStringToMessage(r.output, &s);
    EXPECT_TRUE(parsed.ok()) << r.output;
    return s;
  }

  std::unique_ptr<mgmt::MgmtClient> storage_node(int i, uint64_t incarnation) {
    mgmt::MgmtClientOptions o;
    o.registration = {.kind = mgmt::NodeKind::kStorage, .address = "127.0.0.1:" + std::to_string(9300 + i),
                      .incarnation = incarnation, .targets = {{"t0", 1ull << 30, 0}, {"t1", 1ull << 30, 0}}};
    return std::make_unique<mgmt::MgmtClient>(rpc_, o);
  }

  mgmt::MgmtRpc& rpc() { return rpc_; }
  const TempDir& dir() const { return dir_; }
  uint16_t port() const { return port_; }
  Process& mgmtd() { return *mgmtd_; }

 private:
  TempDir dir_;
  uint16_t port_;
  int starts_ = 0;
  int cli_runs_ = 0;
  std::unique_ptr<Process> mgmtd_;
  rpc::IoPool io_{1};
  rpc::Client client_{io_, rpc::ClientOptions{.cluster_token = "tok", .backoff_min_ms = 20, .backoff_max_ms = 100}};
  mgmt::MgmtRpc rpc_{io_, client_, {{"127.0.0.1", port_}}, 2000};
};

const gpb::Value& field(const gpb::Value& v, const std::string& name) { return v.struct_value().fields().at(name); }
const gpb::ListValue& list(const gpb::Struct& s, const std::string& name) { return s.fields().at(name).list_value(); }

std::map<uint64_t, std::string> node_states(const gpb::Struct& s) {
  std::map<uint64_t, std::string> out;
  for (const auto& n : list(s, "nodes").values())
    out[static_cast<uint64_t>(field(n, "id").number_value())] = field(n, "state").string_value();
  return out;
}

// Chain id -> version, for chains holding a target of `node`.
std::map<uint64_t, double> chains_of_node(const gpb::Struct& s, uint64_t node) {
  std::set<double> targets;
  for (const auto& t : list(s, "targets").values())
    if (field(t, "node_id").number_value() == static_cast<double>(node)) targets.insert(field(t, "id").number_value());
  std::map<uint64_t, double> out;
  for (const auto& c : list(s, "chains").values())
    for (const auto& e : field(c, "targets").list_value().values())
      if (targets.count(field(e, "target_id").number_value()))
        out[static_cast<uint64_t>(field(c, "id").number_value())] = field(c, "version").number_value();
  return out;
}

TEST(MgmtdProcess, ChainTableLeaseExpiryAndRestartKeepState) {
  Cluster cluster;
  ASSERT_NO_FATAL_FAILURE(cluster.start_mgmtd());
  std::vector<std::unique_ptr<mgmt::MgmtClient>> nodes;
  for (int i = 0; i < 3; ++i) {
    nodes.push_back(cluster.storage_node(i, 1000));
    nodes.back()->start();
  }
  ASSERT_TRUE(eventually([&] {
    for (auto& n : nodes)
      if (n->node_id() == 0) return false;
    return true;
  }));
  nodes[0]->set_usage_source([&] {
    return std::vector<mgmt::TargetUsage>{{nodes[0]->target_ids().at(0), 12345, 1ull << 30}};
  });

  CliResult created = cluster.weft({"admin", "chain-table", "create", "--replicas", "2"});
  ASSERT_EQ(created.exit_code, 0) << created.output;
  EXPECT_NE(created.output.find("created chain table 1:"), std::string::npos) << created.output;
  EXPECT_NE(created.output.find("of 2 replicas"), std::string::npos) << created.output;
  CliResult listed = cluster.weft({"admin", "chain-table", "list"});
  ASSERT_EQ(listed.exit_code, 0) << listed.output;
  EXPECT_NE(listed.output.find("chain table 1: 2 replicas"), std::string::npos) << listed.output;

  gpb::Struct before = cluster.status();
  EXPECT_EQ(list(before, "nodes").values_size(), 3);
  EXPECT_EQ(list(before, "targets").values_size(), 6);
  EXPECT_EQ(list(before, "chain_tables").values_size(), 1);
  EXPECT_GT(list(before, "chains").values_size(), 0);
  for (const auto& [id, state] : node_states(before)) EXPECT_EQ(state, "up") << id;
  ASSERT_TRUE(eventually([&] {
    gpb::Struct now = cluster.status();
    for (const auto& t : list(now, "targets").values())
      if (field(t, "used_bytes").number_value() == 12345) return true;
    return false;
  })) << "usage reported by heartbeats shows in status";
  CliResult text = cluster.weft({"status"});
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_NE(text.output.find("nodes (3)"), std::string::npos) << text.output;

  // Node 3 stops heartbeating: after lease + grace it is down, its targets offline, its chains bumped.
  mgmt::NodeId lost = nodes[2]->node_id();
  std::map<uint64_t, double> versions_before = chains_of_node(before, lost);
  ASSERT_FALSE(versions_before.empty());
  nodes[2]->stop();
  gpb::Struct after;
  ASSERT_TRUE(eventually([&] {
    after = cluster.status();
    return node_states(after)[lost] == "down";
  }));
  for (const auto& t : list(after, "targets").values())
    if (field(t, "node_id").number_value() == lost) {
      EXPECT_EQ(field(t, "state").string_value(), "offline");
    }
  for (const auto& [chain, version] : chains_of_node(after, lost)) EXPECT_GT(version, versions_before.at(chain));
  ASSERT_TRUE(eventually([&] {
    auto r = nodes[0]->routing();
    return r && r->nodes.at(lost).state == mgmt::NodeState::kDown;
  })) << "a heartbeating node's routing cache follows";

  // SIGKILL mgmtd and start it again on the same data directory.
  double version_before_kill = after.fields().at("routing_version").number_value();
  ASSERT_NO_FATAL_FAILURE(cluster.kill_mgmtd());
  ASSERT_NO_FATAL_FAILURE(cluster.start_mgmtd());
  uint64_t beats = nodes[0]->heartbeats_ok();
  uint64_t registrations = nodes[0]->registrations();
  mgmt::NodeId id0 = nodes[0]->node_id();
  ASSERT_TRUE(eventually([&] { return nodes[0]->heartbeats_ok() >= beats + 2 && nodes[1]->heartbeats_ok() > 0; }));
  EXPECT_EQ(nodes[0]->registrations(), registrations) << "state was kept: no re-registration";
  EXPECT_EQ(nodes[0]->node_id(), id0);
  EXPECT_TRUE(nodes[0]->lease().can_serve_writes());
  gpb::Struct restarted = cluster.status();
  EXPECT_GE(restarted.fields().at("routing_version").number_value(), version_before_kill);
  EXPECT_EQ(list(restarted, "chain_tables").values_size(), 1);
  EXPECT_EQ(list(restarted, "chains").values_size(), list(before, "chains").values_size());
  auto states = node_states(restarted);
  EXPECT_EQ(states[id0], "up");
  EXPECT_EQ(states[lost], "down");
  auto refreshed = nodes[1]->refresh();
  ASSERT_TRUE(refreshed) << refreshed.error();
  EXPECT_EQ((*refreshed)->version, static_cast<uint64_t>(restarted.fields().at("routing_version").number_value()));

  // The lost node's process restarts (new incarnation): same node id, its targets rejoin as syncing.
  auto reborn = cluster.storage_node(2, 2000);
  ASSERT_TRUE(reborn->register_now());
  EXPECT_EQ(reborn->node_id(), lost);
  gpb::Struct rejoined = cluster.status();
  EXPECT_EQ(node_states(rejoined)[lost], "up");
  for (const auto& t : list(rejoined, "targets").values())
    if (field(t, "node_id").number_value() == lost) {
      EXPECT_EQ(field(t, "state").string_value(), "syncing");
    }
  for (auto& n : nodes) n->stop();
}

TEST(MgmtdProcess, BadInputGivesClearErrors) {
  Cluster cluster;
  ASSERT_NO_FATAL_FAILURE(cluster.start_mgmtd());
  auto a = cluster.storage_node(0, 500);
  auto b = cluster.storage_node(1, 500);
  ASSERT_TRUE(a->register_now());
  ASSERT_TRUE(b->register_now());

  CliResult too_many = cluster.weft({"admin", "chain-table", "create", "--replicas", "3"});
  EXPECT_NE(too_many.exit_code, 0);
  EXPECT_EQ(too_many.output.rfind("weft: chain-table create: ", 0), 0u) << too_many.output;
  EXPECT_NE(too_many.output.find("3 replicas need 3 distinct storage nodes"), std::string::npos) << too_many.output;
  EXPECT_EQ(std::count(too_many.output.begin(), too_many.output.end(), '\n'), 1) << too_many.output;

  mgmt::pb::HeartbeatRequest unknown;
  unknown.set_node_id(999);
  unknown.set_incarnation(1);
  auto hb = cluster.rpc().call<mgmt::pb::HeartbeatReply>(mgmt::kHeartbeat, unknown);
  ASSERT_FALSE(hb);
  EXPECT_EQ(hb.error().code(), Code::kNotFound);
  EXPECT_NE(hb.error().message().find("unknown node id 999"), std::string::npos) << hb.error();

  // A newer incarnation of the same address replaces the node; the old process is fenced.
  auto a2 = cluster.storage_node(0, 600);
  ASSERT_TRUE(a2->register_now());
  EXPECT_EQ(a2->node_id(), a->node_id());
  auto old_beat = a->heartbeat_now();
  ASSERT_FALSE(old_beat);
  EXPECT_EQ(old_beat.error().code(), Code::kNotPermitted);
  EXPECT_TRUE(a->fenced());
  auto zombie = cluster.storage_node(0, 400);
  auto z = zombie->register_now();
  ASSERT_FALSE(z);
  EXPECT_EQ(z.error().code(), Code::kNotPermitted);
  EXPECT_NE(z.error().message().find("older"), std::string::npos) << z.error();

  mgmt::pb::RegisterRequest as_meta;
  as_meta.set_kind(static_cast<uint32_t>(mgmt::NodeKind::kMeta));
  as_meta.set_address("127.0.0.1:9301");
  as_meta.set_incarnation(700);
  auto other_kind = cluster.rpc().call<mgmt::pb::RegisterReply>(mgmt::kRegister, as_meta);
  ASSERT_FALSE(other_kind);
  EXPECT_EQ(other_kind.error().code(), Code::kExists);

  mgmt::pb::RegisterRequest bad_kind;
  bad_kind.set_kind(42);
  bad_kind.set_address("127.0.0.1:9399");
  bad_kind.set_incarnation(1);
  auto refused = cluster.rpc().call<mgmt::pb::RegisterReply>(mgmt::kRegister, bad_kind);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), Code::kInvalidArgument) << refused.error();  // the request parsed; a value is wrong

  // Client config problems and an unreachable mgmtd: one line, non-zero exit.
  CliResult no_config = cluster.weft({"status", "--config", cluster.dir().file("missing.toml")}, false);
  EXPECT_NE(no_config.exit_code, 0);
  EXPECT_NE(no_config.output.find("missing.toml"), std::string::npos) << no_config.output;
  EXPECT_EQ(std::count(no_config.output.begin(), no_config.output.end(), '\n'), 1) << no_config.output;
  testing::write_file(cluster.dir().file("bad.toml"), "mgmtd = \"127.0.0.1:1\"\ncluster_token = \"tok\"\n");
  CliResult bad_config = cluster.weft({"status", "--config", cluster.dir().file("bad.toml")}, false);
  EXPECT_NE(bad_config.exit_code, 0);
  EXPECT_NE(bad_config.output.find("bad.toml"), std::string::npos) << bad_config.output;
  EXPECT_NE(bad_config.output.find("mgmtd"), std::string::npos) << bad_config.output;
  CliResult unreachable = cluster.weft({"status", "--cluster", "127.0.0.1:" + std::to_string(free_port())});
  EXPECT_NE(unreachable.exit_code, 0);
  EXPECT_EQ(unreachable.output.rfind("weft: status: mgmtd 127.0.0.1:", 0), 0u) << unreachable.output;
  EXPECT_EQ(std::count(unreachable.output.begin(), unreachable.output.end(), '\n'), 1) << unreachable.output;
  testing::write_file(cluster.dir().file("wrong_token.toml"),
                      fmt::format("mgmtd = [\"127.0.0.1:{}\"]\ncluster_token = \"guess\"\n", cluster.port()));
  CliResult wrong_token = cluster.weft({"status", "--config", cluster.dir().file("wrong_token.toml")}, false);
  EXPECT_NE(wrong_token.exit_code, 0);
  EXPECT_NE(wrong_token.output.find("token"), std::string::npos) << wrong_token.output;
}

TEST(MgmtdProcess, BadServerConfigNamesFileAndKey) {
  TempDir dir;
  testing::write_file(dir.file("m.toml"),
                      "[server]\nlisten = \"127.0.0.1:0\"\ncluster_token = \"t\"\n[mgmtd]\nlease_ms = \"long\"\n");
  Process p({testing::weft_binary(), "serve", "mgmtd", "--config", dir.file("m.toml")}, dir.file("log"));
  auto status = p.wait_exit(10s);
  ASSERT_TRUE(status);
  EXPECT_NE(WEXITSTATUS(*status), 0);
  EXPECT_NE(p.log().find("m.toml"), std::string::npos) << p.log();
  EXPECT_NE(p.log().find("mgmtd.lease_ms"), std::string::npos) << p.log();
}

// A misspelt or misplaced key is named in the log (the server still starts:
// the setting it meant keeps its default); the keys it knows are not.
TEST(MgmtdProcess, UnknownConfigKeysAreNamedInTheLog) {
  TempDir dir;
  testing::write_file(dir.file("m.toml"),
                      fmt::format("[server]\nlisten = \"127.0.0.1:0\"\ncluster_token = \"t\"\nport_file = \"{}\"\n"
                                  "[mgmtd]\ndata_dir = \"{}\"\nlease_ms = 2000\nlease_msx = 5\n[storage]\ndisk_threads = 2\n",
                                  dir.file("ports"), dir.file("data")));
  Process p({testing::weft_binary(), "serve", "mgmtd", "--config", dir.file("m.toml")}, dir.file("log"));
  ASSERT_TRUE(testing::wait_for_file(dir.file("ports"), 10s)) << p.log();
  ASSERT_TRUE(eventually([&] { return p.log().find("'storage'") != std::string::npos; }, 5s)) << p.log();
  EXPECT_NE(p.log().find("m.toml: key 'mgmtd.lease_msx' is not a setting of this server"), std::string::npos)
      << p.log();
  EXPECT_EQ(p.log().find("'mgmtd.lease_ms'"), std::string::npos) << p.log();
  EXPECT_EQ(p.log().find("'server."), std::string::npos) << p.log();
}

// logrotate's way: the log is renamed, SIGHUP makes the server write to a
// new file of the same name (its stdout and stderr too, when they went to
// the log, as under `weft up`); the server keeps running.
TEST(MgmtdProcess, SighupReopensTheLogAfterItWasMovedAway) {
  TempDir dir;
  const std::string log = dir.file("m.log");
  testing::write_file(dir.file("m.toml"),
                      fmt::format("[server]\nlisten = \"127.0.0.1:0\"\ncluster_token = \"t\"\nport_file = \"{}\"\n"
                                  "log_file = \"{}\"\n[mgmtd]\ndata_dir = \"{}\"\n",
                                  dir.file("ports"), log, dir.file("data")));
  Process p({testing::weft_binary(), "serve", "mgmtd", "--config", dir.file("m.toml")}, log);
  ASSERT_TRUE(testing::wait_for_file(dir.file("ports"), 10s)) << testing::read_file(log);
  std::filesystem::rename(log, dir.file("m.log.1"));
  p.signal(SIGHUP);
  ASSERT_TRUE(eventually([&] { return testing::read_file(log).find("log reopened") != std::string::npos; }, 10s))
      << "moved away: " << testing::read_file(dir.file("m.log.1"));
  EXPECT_TRUE(p.running()) << "SIGHUP stopped the server";
  struct stat out {}, now {};
  ASSERT_EQ(::stat(log.c_str(), &now), 0);
  ASSERT_EQ(::stat(fmt::format("/proc/{}/fd/2", p.pid()).c_str(), &out), 0);
  EXPECT_EQ(out.st_ino, now.st_ino) << "stderr still goes to the moved-away file";
  p.signal(SIGTERM);
  ASSERT_TRUE(p.wait_exit(10s));
  EXPECT_NE(testing::read_file(log).find("stopping"), std::string::npos) << testing::read_file(log);
  EXPECT_EQ(testing::read_file(dir.file("m.log.1")).find("stopping"), std::string::npos);
}

}  // namespace
}  // namespace weft
