// Weft on several "machines": every role runs in its own network namespace
// with its own address on a private bridge (netns_lab.h), configured as
// docs/DEPLOY.md tells an operator to: mgmtd 10.77.0.1, meta 10.77.0.2,
// storage 10.77.0.11-13, client tools 10.77.0.100; every server listens on
// its own IP (storage-3 on 0.0.0.0 with `advertise`; nothing on 127.0.0.1)
// and the same ports everywhere.
// The test creates a chain table (2 replicas), puts a file from the client
// host and reads it back byte for byte, checks `weft status` lists every node
// by its 10.77 address, then cuts one storage server's link: once mgmtd has
// declared it down, writes go on and reads work; the link comes back and the
// server's targets are resynced to serving.
// Skips (ctest reports it) where network namespaces cannot be created.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <random>
#include <regex>

#include <fmt/format.h>

#include "netns_lab.h"
#include "process.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using testing::CommandResult;
using testing::NetnsLab;
using testing::Process;
using testing::TempDir;

constexpr const char* kToken = "netns-test-token";
constexpr int kMgmtdPort = 7000, kMetaPort = 7001, kStoragePort = 7002, kMetricsPort = 9100;
const std::vector<std::string> kStorage = {"storage-1", "storage-2", "storage-3"};
const std::map<std::string, std::string> kAddress = {{"mgmtd", "10.77.0.1"},      {"meta", "10.77.0.2"},
                                                     {"storage-1", "10.77.0.11"}, {"storage-2", "10.77.0.12"},
                                                     {"storage-3", "10.77.0.13"}, {"client", "10.77.0.100"}};

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Each poll runs `weft status` in a namespace: poll every 100 ms, not 20.
template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds timeout) {
  return testing::eventually(pred, timeout, 100ms);
}

// What `weft status --json` says, reduced to what the test checks.
struct StatusView {
  std::map<std::string, std::string> node_state;  // "kind address" -> up/down
  size_t targets = 0;
  size_t chain_entries = 0;
  size_t serving_entries = 0;
};

StatusView parse_status(const std::string& json) {
  StatusView v;
  static const std::regex node(R"re(\{"id":\d+,"kind":"(\w+)","address":"([^"]*)","state":"(\w+)")re");
  for (std::sregex_iterator it(json.begin(), json.end(), node), end; it != end; ++it)
    v.node_state[(*it)[1].str() + " " + (*it)[2].str()] = (*it)[3].str();
  static const std::regex target(R"re(\{"id":\d+,"node_id":\d+,)re");
  v.targets = std::distance(std::sregex_iterator(json.begin(), json.end(), target), std::sregex_iterator());
  static const std::regex entry(R"re(\{"target_id":\d+,"state":"([\w-]+)"\})re");
  for (std::sregex_iterator it(json.begin(), json.end(), entry), end; it != end; ++it) {
    ++v.chain_entries;
    v.serving_entries += (*it)[1].str() == "serving";
  }
  return v;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

std::string random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

class NetnsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why = lab_.setup();
    if (!why.empty()) GTEST_SKIP() << "network namespaces are not usable here, multi-host test skipped: " << why;
    for (const auto& [name, address] : kAddress) {
      std::string err = lab_.add_host(name, address);
      ASSERT_TRUE(err.empty()) << "host " << name << ": " << err;
    }
  }

  void TearDown() override {
    if (HasFailure()) dump_logs();
    // Servers first (meta, storage, mgmtd), then lab_'s destructor deletes the namespaces.
    for (const char* role : {"meta", "storage-3", "storage-2", "storage-1", "mgmtd"}) servers_.erase(role);
  }

  // `listen_host` "" listens on the role's own address.
  std::string server_section(const std::string& role, int port, const std::string& listen_host = "") {
    const std::string& ip = kAddress.at(role);
    return fmt::format(
        "[server]\nlisten = \"{}:{}\"\nmetrics_listen = \"{}:{}\"\ncluster_token = \"{}\"\nname = \"{}\"\n"
        "port_file = \"{}\"\n",
        listen_host.empty() ? ip : listen_host, port, ip, kMetricsPort, kToken, role, dir_.file(role + ".ports"));
  }
  std::string cluster_section(const std::string& advertise = "") {
    std::string out = fmt::format("\n[cluster]\nmgmtd = [\"{}:{}\"]\n", kAddress.at("mgmtd"), kMgmtdPort);
    if (!advertise.empty()) out += "advertise = \"" + advertise + "\"\n";
    return out;
  }

  void write_configs() {
    testing::write_file(dir_.file("mgmtd.toml"),
                        server_section("mgmtd", kMgmtdPort) +
                            fmt::format("\n[mgmtd]\ndata_dir = \"{}\"\nlease_ms = 1000\ngrace_ms = 500\ntick_ms = 50\n",
                                        dir_.file("data/mgmtd")));
    // storage-3 listens on every interface and advertises its address (docs/DEPLOY.md).
    for (const auto& s : kStorage) {
      bool wildcard = s == "storage-3";
      std::string cfg = server_section(s, kStoragePort, wildcard ? "0.0.0.0" : "") +
                        cluster_section(wildcard ? kAddress.at(s) + ":7002" : "") +
                        "\n[storage]\ndisk_threads = 2\nforward_timeout_ms = 2000\n";
      for (int t = 0; t < 2; ++t)
        cfg += fmt::format("\n[[targets]]\npath = \"{}\"\nchunk_size_max = 1048576\n",
                           dir_.file("data/" + s + "/t" + std::to_string(t)));
      testing::write_file(dir_.file(s + ".toml"), cfg);
    }
    testing::write_file(dir_.file("client.toml"),
                        fmt::format("mgmtd = [\"{}:{}\"]\ncluster_token = \"{}\"\n", kAddress.at("mgmtd"), kMgmtdPort, kToken));
  }
  void write_meta_config(int chain_count, int table_id) {
    testing::write_file(dir_.file("meta.toml"),
                        server_section("meta", kMetaPort) + cluster_section() +
                            fmt::format("\n[meta]\ndata_dir = \"{}\"\nchain_count = {}\nchain_table_id = {}\n",
                                        dir_.file("data/meta"), chain_count, table_id));
  }

  // Starts `weft serve <kind>` for role in its own host; true once it wrote its port file.
  bool start(const std::string& role, const std::string& kind) {
    servers_[role] = std::make_unique<Process>(
        lab_.in_host(role, {testing::weft_binary(), "serve", kind, "--config", dir_.file(role + ".toml")}),
        dir_.file(role + ".log"));
    return testing::wait_for_file(dir_.file(role + ".ports"), 30s).has_value();
  }

  // A client command (`weft ARGS --config client.toml`) run in the client host.
  CommandResult weft(std::vector<std::string> args, std::chrono::seconds timeout = 60s) {
    std::vector<std::string> argv{testing::weft_binary()};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.insert(argv.end(), {"--config", dir_.file("client.toml")});
    return testing::run_command(lab_.in_host("client", argv), dir_.file("cli." + std::to_string(cli_runs_++) + ".log"),
                                timeout, {"WEFT_CONFIG="});
  }

  StatusView status() {
    auto r = weft({"status", "--json"}, 15s);
    return r.exit_code == 0 ? parse_status(r.output) : StatusView{};
  }

  bool wait_storage_up(size_t nodes, size_t targets, std::chrono::milliseconds timeout) {
    return eventually(
        [&] {
          StatusView v = status();
          size_t up = 0;
          for (const auto& s : kStorage) up += v.node_state["storage " + kAddress.at(s) + ":7002"] == "up";
          return up == nodes && v.targets == targets;
        },
        timeout);
  }
  bool wait_all_serving(std::chrono::milliseconds timeout) {
    return eventually(
        [&] {
          StatusView v = status();
          return v.chain_entries > 0 && v.serving_entries == v.chain_entries;
        },
        timeout);
  }

  // Puts `bytes` at `remote` from the client host; then gets it back and compares.
  void put_and_check(const std::string& remote, const std::string& bytes) {
    std::string local = dir_.file("in" + std::to_string(cli_runs_));
    testing::write_file(local, bytes);
    auto put = weft({"put", local, remote});
    ASSERT_EQ(put.exit_code, 0) << put.output;
    expect_content(remote, bytes);
  }
  void expect_content(const std::string& remote, const std::string& bytes) {
    std::string back = dir_.file("out" + std::to_string(cli_runs_));
    auto get = weft({"get", remote, back});
    ASSERT_EQ(get.exit_code, 0) << get.output;
    std::string got = read_text(back);
    ASSERT_EQ(got.size(), bytes.size()) << remote;
    EXPECT_TRUE(got == bytes) << remote << ": bytes differ";
  }

  void dump_logs() {
    for (const auto& [role, p] : servers_) {
      std::string log = p->log();
      if (log.size() > 6000) log = "..." + log.substr(log.size() - 6000);
      std::cerr << "--- " << role << ".log\n" << log << "\n";
    }
  }

  TempDir dir_;
  NetnsLab lab_{dir_.path()};
  std::map<std::string, std::unique_ptr<Process>> servers_;
  int cli_runs_ = 0;
};

TEST_F(NetnsTest, RolesOnSeparateHostsServeFilesAndSurviveACutLink) {
  write_configs();
  ASSERT_TRUE(start("mgmtd", "mgmtd")) << "mgmtd did not start";
  for (const auto& s : kStorage) ASSERT_TRUE(start(s, "storage")) << s << " did not start";
  ASSERT_TRUE(wait_storage_up(3, 6, 30s)) << "storage servers did not register:\n" << weft({"status"}).output;

  auto table = weft({"admin", "chain-table", "create", "--replicas", "2"});
  ASSERT_EQ(table.exit_code, 0) << table.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(table.output, m, std::regex(R"re(created chain table (\d+): (\d+) chains)re"))) << table.output;
  write_meta_config(std::stoi(m[2].str()), std::stoi(m[1].str()));
  ASSERT_TRUE(start("meta", "meta")) << "meta did not start";
  ASSERT_TRUE(eventually([&] { return status().node_state["meta 10.77.0.2:7001"] == "up"; }, 20s))
      << "meta did not register:\n" << weft({"status"}).output;

  // `weft status` from the client host: every server by its own address, none on loopback.
  auto st = weft({"status"});
  ASSERT_EQ(st.exit_code, 0) << st.output;
  std::printf("[netns] %s[netns] weft status from the client host:\n%s", table.output.c_str(), st.output.c_str());
  for (const auto& [role, ip] : kAddress) {
    if (role != "client" && role != "mgmtd") {
      EXPECT_NE(st.output.find(ip + ":700"), std::string::npos) << role << "\n" << st.output;
    }
  }
  EXPECT_EQ(st.output.find("127.0.0.1"), std::string::npos) << st.output;

  // Files through the file tools, from the client host.
  ASSERT_EQ(weft({"mkdir", "/data"}).exit_code, 0);
  const std::string big = random_bytes((5 << 20) + 12345, 1);  // 6 chunks over several chains
  ASSERT_NO_FATAL_FAILURE(put_and_check("/data/big.bin", big));
  ASSERT_NO_FATAL_FAILURE(put_and_check("/data/small.txt", "hello from 10.77.0.100\n"));
  auto cat = weft({"cat", "/data/small.txt"});
  EXPECT_EQ(cat.exit_code, 0);
  EXPECT_EQ(cat.output, "hello from 10.77.0.100\n");
  auto ls = weft({"ls", "/data"});
  EXPECT_NE(ls.output.find("big.bin"), std::string::npos) << ls.output;
  EXPECT_NE(ls.output.find("small.txt"), std::string::npos) << ls.output;

  // Partition: storage-3's link goes down. mgmtd declares it down (lease 1 s + grace 0.5 s),
  // its chains go on with the other replica: reads and new writes work.
  auto cut = std::chrono::steady_clock::now();
  ASSERT_TRUE(lab_.set_link("storage-3", false));
  ASSERT_TRUE(wait_storage_up(2, 6, 20s)) << "storage-3 not declared down:\n" << weft({"status"}).output;
  std::printf("[netns] storage-3 declared down %.1f s after its link was cut\n", seconds_since(cut));
  EXPECT_TRUE(servers_["storage-3"]->running()) << "a cut link must not kill the server";
  ASSERT_NO_FATAL_FAILURE(expect_content("/data/big.bin", big));
  const std::string during = random_bytes((3 << 20) + 777, 2);
  ASSERT_NO_FATAL_FAILURE(put_and_check("/data/during-partition.bin", during));

  // The link comes back: storage-3 rejoins and its targets are resynced.
  auto restored = std::chrono::steady_clock::now();
  ASSERT_TRUE(lab_.set_link("storage-3", true));
  ASSERT_TRUE(wait_storage_up(3, 6, 20s)) << "storage-3 did not rejoin:\n" << weft({"status"}).output;
  ASSERT_TRUE(wait_all_serving(30s)) << "targets not serving after the partition:\n" << weft({"status"}).output;
  std::printf("[netns] storage-3 serving again %.1f s after its link came back\n", seconds_since(restored));
  ASSERT_NO_FATAL_FAILURE(expect_content("/data/during-partition.bin", during));
  ASSERT_NO_FATAL_FAILURE(expect_content("/data/big.bin", big));
}

// A server in a cluster that would advertise a wildcard address refuses to
// start and says to set [cluster] advertise (no namespace needed: it fails
// before listening).
TEST(NetnsConfig, WildcardAddressWithoutAdvertiseIsRefused) {
  TempDir dir;
  for (std::string role : {"storage", "meta"}) {
    std::string cfg =
        "[server]\nlisten = \"0.0.0.0:7002\"\nmetrics_listen = \"\"\ncluster_token = \"t\"\n"
        "[cluster]\nmgmtd = [\"10.77.0.1:7000\"]\n";
    cfg += role == "storage" ? fmt::format("[[targets]]\npath = \"{}\"\n", dir.file("t0"))
                             : fmt::format("[meta]\ndata_dir = \"{}\"\n", dir.file("meta"));
    testing::write_file(dir.file(role + ".toml"), cfg);
    auto r = testing::run_command({testing::weft_binary(), "serve", role, "--config", dir.file(role + ".toml")},
                                  dir.file(role + ".log"));
    EXPECT_EQ(r.exit_code, 1) << role << ": " << r.output;
    EXPECT_NE(r.output.find("would advertise 0.0.0.0:7002"), std::string::npos) << role << ": " << r.output;
    EXPECT_NE(r.output.find("[cluster] advertise"), std::string::npos) << role << ": " << r.output;
  }
}

}  // namespace
}  // namespace weft
