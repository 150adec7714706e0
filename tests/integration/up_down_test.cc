// `weft up` / `weft down` as a user runs them: a small local cluster in a
// temporary directory (2 storage servers, 1 target each, 2 replicas), a
// second `up` that changes nothing, a SIGKILLed storage server that `up`
// restarts alone, `down`, and an `up` on the same directory that keeps the
// ports, the token and mgmtd's state. The fixture always runs `weft down`
// and, as a last resort, SIGKILLs the PIDs from the pid files.
#include <gtest/gtest.h>
#include <signal.h>
#include <fcntl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>

#include "process.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using testing::Process;
using testing::TempDir;
using testing::pid_alive;

struct CliResult {
  int exit_code = -1;
  std::string output;
};

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1)) ++n;
  return n;
}

const std::vector<std::string> kRoles = {"mgmtd", "storage-1", "storage-2", "meta"};

class UpDownTest : public ::testing::Test {
 protected:
  void SetUp() override { data_ = tmp_.file("cluster"); }

  void TearDown() override {
    if (!std::filesystem::exists(data_ + "/cluster.toml")) return;
    auto r = weft({"down", "--data-dir", data_}, 40s);
    if (r.exit_code != 0) ADD_FAILURE() << "weft down in TearDown failed:\n" << r.output;
    // Last resort: anything still running from our pid files.
    for (const auto& role : kRoles) {
      pid_t pid = pid_of(role);
      if (pid > 0 && pid_alive(pid) &&
          read_text("/proc/" + std::to_string(pid) + "/cmdline").find(data_) != std::string::npos) {
        ADD_FAILURE() << role << " (pid " << pid << ") survived weft down";
        ::kill(pid, SIGKILL);
      }
    }
  }

  // Runs the weft binary to completion; stdout and stderr together.
  CliResult weft(std::vector<std::string> args, std::chrono::milliseconds timeout = 60s) {
    args.insert(args.begin(), testing::weft_binary());
    std::string log = tmp_.file("cli." + std::to_string(runs_++) + ".log");
    Process p(args, log);
    auto status = p.wait_exit(timeout);
    CliResult r;
    r.output = p.log();
    if (!status) {
      r.output += "\n(timed out)";
      return r;
    }
    r.exit_code = WIFEXITED(*status) ? WEXITSTATUS(*status) : 128 + WTERMSIG(*status);
    return r;
  }

  CliResult up(std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"up", "--data-dir", data_, "--timeout", "30"};
    args.insert(args.end(), extra.begin(), extra.end());
    return weft(args, 90s);
  }

  pid_t pid_of(const std::string& role) const {
    std::string text = read_text(data_ + "/run/" + role + ".pid");
    return text.empty() ? -1 : static_cast<pid_t>(std::stol(text));
  }

  std::map<std::string, pid_t> pids() const {
    std::map<std::string, pid_t> out;
    for (const auto& role : kRoles) out[role] = pid_of(role);
    return out;
  }

  std::string client_config() const { return data_ + "/client.toml"; }

  // Every target of the cluster shows up serving in `weft status`.
  void expect_status_serving() {
    auto st = weft({"status", "--config", client_config()});
    ASSERT_EQ(st.exit_code, 0) << st.output;
    EXPECT_NE(st.output.find("targets (2)"), std::string::npos) << st.output;
    for (const char* t : {"/data/storage-1/t0", "/data/storage-2/t0"})
      EXPECT_NE(st.output.find(data_ + t), std::string::npos) << st.output;
    EXPECT_GE(count(st.output, "serving"), 2u) << st.output;
    EXPECT_EQ(count(st.output, "offline"), 0u) << st.output;
  }

  TempDir tmp_;
  std::string data_;
  int runs_ = 0;
};

TEST_F(UpDownTest, LifecycleKeepsPortsTokenAndState) {
  auto first = up({"--storage-servers", "2", "--targets-per-server", "1", "--replicas", "2"});
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_NE(first.output.find("is up"), std::string::npos) << first.output;
  EXPECT_NE(first.output.find("created chain table"), std::string::npos) << first.output;
  for (const char* f : {"cluster.toml", "client.toml", "conf/mgmtd.toml", "conf/meta.toml", "conf/storage-1.toml",
                        "conf/storage-2.toml", "logs/mgmtd.log", "logs/meta.log", "logs/storage-1.log"})
    EXPECT_TRUE(std::filesystem::exists(data_ + "/" + f)) << f;
  auto started = pids();
  for (const auto& [role, pid] : started) EXPECT_TRUE(pid_alive(pid)) << role << " pid " << pid;
  const std::string cluster_toml = read_text(data_ + "/cluster.toml");
  const std::string client_toml = read_text(client_config());
  expect_status_serving();

  // A second `up` says so and changes nothing.
  auto again = up();
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("already running"), std::string::npos) << again.output;
  EXPECT_EQ(pids(), started);

  // Flags that disagree with the existing cluster are refused.
  auto mismatch = up({"--storage-servers", "3"});
  EXPECT_NE(mismatch.exit_code, 0) << mismatch.output;
  EXPECT_NE(mismatch.output.find("--storage-servers"), std::string::npos) << mismatch.output;
  EXPECT_EQ(pids(), started);

  // A killed storage server is restarted alone.
  pid_t victim = started["storage-1"];
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  for (int i = 0; i < 500 && pid_alive(victim); ++i) std::this_thread::sleep_for(10ms);
  ASSERT_FALSE(pid_alive(victim));
  auto restart = up();
  ASSERT_EQ(restart.exit_code, 0) << restart.output;
  EXPECT_NE(restart.output.find("restarting storage-1"), std::string::npos) << restart.output;
  auto after = pids();
  EXPECT_NE(after["storage-1"], victim);
  EXPECT_TRUE(pid_alive(after["storage-1"]));
  for (const char* role : {"mgmtd", "storage-2", "meta"}) EXPECT_EQ(after[role], started[role]) << role;
  expect_status_serving();

  // `down` stops everything.
  auto down = weft({"down", "--data-dir", data_}, 40s);
  ASSERT_EQ(down.exit_code, 0) << down.output;
  for (const auto& role : kRoles) {
    EXPECT_NE(down.output.find("stopped " + role), std::string::npos) << down.output;
    EXPECT_FALSE(pid_alive(after[role])) << role;
    EXPECT_FALSE(std::filesystem::exists(data_ + "/run/" + role + ".pid")) << role;
  }
  auto idle = weft({"down", "--data-dir", data_});
  EXPECT_EQ(idle.exit_code, 0) << idle.output;
  EXPECT_NE(idle.output.find("nothing running"), std::string::npos) << idle.output;

  // The stopped meta server's namespace checks out (`weft admin meta-fsck`, by
  // its config); a directory without a store is exit status 2 and says so.
  auto fsck = weft({"admin", "meta-fsck", "--config", data_ + "/conf/meta.toml"});
  EXPECT_EQ(fsck.exit_code, 0) << fsck.output;
  EXPECT_NE(fsck.output.find("consistent"), std::string::npos) << fsck.output;
  auto no_store = weft({"admin", "meta-fsck", "--data-dir", data_ + "/logs"});
  EXPECT_EQ(no_store.exit_code, 2) << no_store.output;
  EXPECT_NE(no_store.output.find("no meta store"), std::string::npos) << no_store.output;

  // A stale pid file naming a live process that is not ours (this test) is
  // removed, and that process is left alone.
  testing::write_file(data_ + "/run/meta.pid", std::to_string(::getpid()) + "\n");

  // `up` again: same ports and token, mgmtd still knows the chain table.
  auto back = up();
  ASSERT_EQ(back.exit_code, 0) << back.output;
  EXPECT_NE(back.output.find("removed stale pid file " + data_ + "/run/meta.pid"), std::string::npos) << back.output;
  EXPECT_NE(pid_of("meta"), ::getpid());
  EXPECT_TRUE(pid_alive(pid_of("meta")));
  EXPECT_EQ(back.output.find("created chain table"), std::string::npos) << back.output;
  EXPECT_EQ(read_text(data_ + "/cluster.toml"), cluster_toml);
  EXPECT_EQ(read_text(client_config()), client_toml);
  auto list = weft({"admin", "chain-table", "list", "--config", client_config()});
  ASSERT_EQ(list.exit_code, 0) << list.output;
  EXPECT_NE(list.output.find("1 chain table(s)"), std::string::npos) << list.output;
  EXPECT_NE(list.output.find("2 replicas"), std::string::npos) << list.output;
  expect_status_serving();
}

// mgmtd restarted on a backup of its data_dir taken before the cluster moved
// on: the storage servers report a newer routing version, mgmtd refuses them
// (writes stop: their leases run out) and says why in its log, theirs and
// `weft status`; restarted with --accept-older-state it raises its versions
// above theirs and the cluster serves again.
TEST_F(UpDownTest, MgmtdOnAnOlderBackupRefusesServersUntilAccepted) {
  auto first = up({"--storage-servers", "2", "--targets-per-server", "1", "--replicas", "2"});
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const std::string mgmtd_data = data_ + "/data/mgmtd", backup = tmp_.file("mgmtd-backup");
  auto stop = [&](const std::string& role, int sig) {
    pid_t pid = pid_of(role);
    ASSERT_GT(pid, 0) << role;
    ASSERT_EQ(::kill(pid, sig), 0) << role;
    for (int i = 0; i < 1000 && pid_alive(pid); ++i) std::this_thread::sleep_for(10ms);
    ASSERT_FALSE(pid_alive(pid)) << role;
  };
  auto routing_version = [&](const std::string& status) -> uint64_t {
    const std::string text = "\n" + status;  // the line, not the words in a message
    auto at = text.find("\nrouting version ");
    return at == std::string::npos ? 0 : std::stoull(text.substr(at + 17));
  };
  // The backup: mgmtd stopped, its data_dir copied, mgmtd started again.
  const uint64_t at_backup = routing_version(weft({"status", "--config", client_config()}).output);
  ASSERT_GT(at_backup, 0u);
  ASSERT_NO_FATAL_FAILURE(stop("mgmtd", SIGTERM));
  std::filesystem::copy(mgmtd_data, backup, std::filesystem::copy_options::recursive);
  auto back = up();
  ASSERT_EQ(back.exit_code, 0) << back.output;
  // A graceful stop changes nothing: mgmtd's lease checker stops before its
  // server drains (it declared every server dead meanwhile, and saved it).
  EXPECT_EQ(routing_version(weft({"status", "--config", client_config()}).output), at_backup);
  // The cluster moves on: a storage server restarts (its targets resync: new versions).
  ASSERT_NO_FATAL_FAILURE(stop("storage-2", SIGKILL));
  auto moved = up();
  ASSERT_EQ(moved.exit_code, 0) << moved.output;
  expect_status_serving();
  const uint64_t cluster = routing_version(weft({"status", "--config", client_config()}).output);
  ASSERT_GT(cluster, at_backup);

  // mgmtd restarts on the backup.
  ASSERT_NO_FATAL_FAILURE(stop("mgmtd", SIGTERM));
  std::filesystem::remove_all(mgmtd_data);
  std::filesystem::copy(backup, mgmtd_data, std::filesystem::copy_options::recursive);
  std::vector<std::string> serve = {testing::weft_binary(), "serve", "mgmtd", "--config", data_ + "/conf/mgmtd.toml"};
  {
    Process restored(serve, tmp_.file("mgmtd-restored.log"));
    CliResult st;
    for (int i = 0; i < 200; ++i) {
      st = weft({"status", "--config", client_config()});
      if (st.output.find("MGMTD IS BEHIND") != std::string::npos) break;
      std::this_thread::sleep_for(50ms);
    }
    EXPECT_NE(st.output.find("MGMTD IS BEHIND"), std::string::npos) << st.output;
    EXPECT_NE(st.output.find("mgmtd's state is older than the cluster's"), std::string::npos) << st.output;
    EXPECT_NE(st.output.find("--accept-older-state"), std::string::npos) << st.output;
    const uint64_t restored_version = routing_version(st.output);
    EXPECT_GE(restored_version, at_backup) << st.output;
    EXPECT_LT(restored_version, cluster) << st.output;
    // No routing change while behind: past lease + grace (4 s) no further server is declared down.
    std::this_thread::sleep_for(5s);
    auto later = weft({"status", "--config", client_config()});
    EXPECT_EQ(routing_version(later.output), restored_version) << later.output;
    EXPECT_EQ(count(later.output, " down "), count(st.output, " down ")) << st.output << later.output;
    EXPECT_NE(later.output.find("MGMTD IS BEHIND"), std::string::npos) << later.output;
    bool logged = false;
    for (int i = 0; i < 200 && !logged; ++i) {
      logged = read_text(data_ + "/logs/storage-1.log").find("mgmtd refuses this server") != std::string::npos;
      if (!logged) std::this_thread::sleep_for(50ms);
    }
    EXPECT_TRUE(logged) << read_text(data_ + "/logs/storage-1.log");
    restored.signal(SIGTERM);
    ASSERT_TRUE(restored.wait_exit(20s));
    const std::string mgmtd_log = read_text(data_ + "/logs/mgmtd.log");  // [server] log_file
    EXPECT_NE(mgmtd_log.find("older than the cluster's"), std::string::npos) << mgmtd_log;
  }
  // The operator accepts mgmtd's older view: the servers join again above their versions.
  serve.push_back("--accept-older-state");
  {
    Process accepting(serve, tmp_.file("mgmtd-accepting.log"));
    CliResult st;
    for (int i = 0; i < 400; ++i) {
      st = weft({"status", "--config", client_config()});
      if (st.exit_code == 0 && routing_version(st.output) > cluster && count(st.output, "offline") == 0 &&
          count(st.output, "syncing") == 0 && count(st.output, " up ") >= 3)
        break;
      std::this_thread::sleep_for(50ms);
    }
    EXPECT_GT(routing_version(st.output), cluster) << st.output;
    EXPECT_EQ(st.output.find("MGMTD IS BEHIND"), std::string::npos) << st.output;
    EXPECT_EQ(count(st.output, "offline"), 0u) << st.output;
    accepting.signal(SIGTERM);
    ASSERT_TRUE(accepting.wait_exit(20s));
  }
  // And back to a plain mgmtd, as `up` starts it.
  auto plain = up();
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  expect_status_serving();
}

// The review's scenario: storage-1 dies, then storage-2 (its target now holds
// the chain's only copy, last-serving), and storage-2's target directory is
// emptied (a replaced disk) before `up` restarts both. The emptied target
// must not become the copy the other replica resyncs from (it used to: the
// data was removed from storage-1 and /f read back as zeros). Instead nothing
// serves: `up` says its targets are offline, a read waits, and once the
// operator promotes storage-1's target it serves the file whole and storage-2
// is copied back from it.
TEST_F(UpDownTest, ATargetBackWithoutItsDataIsNoCopyUntilTheOperatorPromotesOne) {
  auto first = up({"--storage-servers", "2", "--targets-per-server", "1", "--replicas", "2"});
  ASSERT_EQ(first.exit_code, 0) << first.output;
  std::string content(3'000'000, '\0');
  for (size_t i = 0; i < content.size(); ++i) content[i] = static_cast<char>((i * 2654435761u) >> 13);
  const std::string local = tmp_.file("f.src"), back = tmp_.file("f.back");
  testing::write_file(local, content);
  auto put = weft({"put", local, "/f", "--config", client_config()});
  ASSERT_EQ(put.exit_code, 0) << put.output;

  auto kill_and_wait_for = [&](const std::string& role, const std::string& state) {
    pid_t pid = pid_of(role);
    ASSERT_EQ(::kill(pid, SIGKILL), 0) << role;
    CliResult st;
    for (int i = 0; i < 300; ++i) {  // lease + grace of a local cluster: a few seconds
      st = weft({"status", "--config", client_config()});
      if (st.output.find(state) != std::string::npos) return;
      std::this_thread::sleep_for(100ms);
    }
    FAIL() << role << " never showed " << state << ":\n" << st.output;
  };
  ASSERT_NO_FATAL_FAILURE(kill_and_wait_for("storage-1", "offline"));
  ASSERT_NO_FATAL_FAILURE(kill_and_wait_for("storage-2", "last-serving"));
  const std::string emptied = data_ + "/data/storage-2/t0";
  std::filesystem::remove_all(emptied);
  std::filesystem::create_directories(emptied);

  auto restart = weft({"up", "--data-dir", data_, "--timeout", "8"}, 60s);
  EXPECT_NE(restart.exit_code, 0) << "no target may serve:\n" << restart.output;
  EXPECT_NE(restart.output.find("have no copy left"), std::string::npos) << restart.output;
  EXPECT_NE(restart.output.find("weft admin target promote"), std::string::npos) << restart.output;
  EXPECT_NE(read_text(data_ + "/logs/mgmtd.log").find("came back without its data"), std::string::npos);

  // A read waits for a copy instead of answering from the empty target.
  Process get({testing::weft_binary(), "get", "/f", back, "--config", client_config()}, tmp_.file("get.log"));
  std::this_thread::sleep_for(2s);
  EXPECT_FALSE(get.wait_exit(0ms)) << "the read ended without a serving copy: " << get.log();

  auto json = weft({"status", "--json", "--config", client_config()}).output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(json, m, std::regex("\"id\":(\\d+),\"node_id\":\\d+,\"name\":\"[^\"]*/data/storage-1/t0\"")))
      << json;
  const std::string survivor = m[1];
  std::vector<std::string> chains;
  const std::regex chain_re("\\{\"id\":(\\d+),\"table_id\":");
  for (auto it = std::sregex_iterator(json.begin(), json.end(), chain_re);
       it != std::sregex_iterator(); ++it)
    chains.push_back((*it)[1]);
  ASSERT_FALSE(chains.empty()) << json;
  for (const auto& chain : chains) {
    auto promote = weft({"admin", "target", "promote", chain, survivor, "--config", client_config()});
    ASSERT_EQ(promote.exit_code, 0) << promote.output;
    EXPECT_NE(promote.output.find("(serving)"), std::string::npos) << promote.output;
  }
  auto status = get.wait_exit(90s);
  ASSERT_TRUE(status) << get.log();
  ASSERT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << get.log();
  EXPECT_TRUE(read_text(back) == content) << "the promoted copy served other bytes";

  // The emptied target is copied back from it: `up` finds both serving.
  CliResult ready;
  for (int i = 0; i < 5 && ready.exit_code != 0; ++i) ready = up();
  ASSERT_EQ(ready.exit_code, 0) << ready.output;
  expect_status_serving();
}

// Processes whose command line holds every one of `parts` (ours to kill).
std::vector<pid_t> processes_with(const std::vector<std::string>& parts) {
  std::vector<pid_t> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    std::string name = e.path().filename();
    if (name.empty() || !std::isdigit(static_cast<unsigned char>(name[0]))) continue;
    std::string cmd = read_text(e.path().string() + "/cmdline");
    std::replace(cmd.begin(), cmd.end(), '\0', ' ');
    bool all = !cmd.empty();
    for (const auto& p : parts) all = all && cmd.find(p) != std::string::npos;
    if (all && pid_alive(std::stoi(name))) out.push_back(std::stoi(name));
  }
  return out;
}

// `weft up --mount` whose mount daemon never serves: up fails, and neither
// the daemon nor a dead mount is left behind (up used to kill only the
// foreground `weft mount`, whose daemon lives in a session of its own and had
// written no pid file yet, so `weft down` could not find it either).
TEST_F(UpDownTest, AMountThatNeverServesLeavesNothingBehind) {
  std::string mp = tmp_.file("mnt");
  std::filesystem::create_directories(mp);
  Process p({testing::weft_binary(), "up", "--data-dir", data_, "--timeout", "10", "--mount", mp},
            tmp_.file("up-stuck.log"), {"WEFT_FAULTS=mount.stall_before_ready"});
  auto status = p.wait_exit(120s);
  bool mounted = read_text("/proc/mounts").find(" " + mp + " fuse.weft") != std::string::npos;
  auto daemons = processes_with({"mount", mp});
  for (pid_t pid : daemons) ::kill(pid, SIGKILL);
  if (mounted) std::system(("fusermount3 -uz " + mp).c_str());
  ASSERT_TRUE(status.has_value()) << "weft up did not return";
  EXPECT_NE(WIFEXITED(*status) ? WEXITSTATUS(*status) : -1, 0) << p.log();
  EXPECT_FALSE(mounted) << "a dead mount left at " << mp;
  EXPECT_TRUE(daemons.empty()) << daemons.size() << " mount process(es) left running";
}

// A server whose pid file cannot be written (a full disk; here a directory
// where the temporary goes) is stopped by `weft up`, which fails: unrecorded,
// `weft down` could not find it and the next `up` would find its port taken.
TEST_F(UpDownTest, AServerWhosePidFileCannotBeWrittenIsStoppedByUp) {
  std::filesystem::create_directories(data_ + "/run/storage-2.pid.tmp");
  auto r = up();
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("storage-2: its pid file"), std::string::npos) << r.output;
  auto left = processes_with({"serve", "storage", data_ + "/conf/storage-2.toml"});
  for (pid_t pid : left) ::kill(pid, SIGKILL);
  EXPECT_TRUE(left.empty()) << "storage-2 left running, unrecorded";
  std::filesystem::remove_all(data_ + "/run/storage-2.pid.tmp");
  auto again = up();
  EXPECT_EQ(again.exit_code, 0) << again.output;
}

// A storage server registers with mgmtd before it opens its targets and
// listens: `up` says "up" only once every server it started listens (its
// port file), not when mgmtd counts it registered and serving.
TEST_F(UpDownTest, UpWaitsForEveryStorageServerToListen) {
  Process p({testing::weft_binary(), "up", "--data-dir", data_, "--timeout", "30"}, tmp_.file("up-slow.log"),
            {"WEFT_FAULTS=storage.serve.slow_open"});
  auto status = p.wait_exit(90s);
  ASSERT_TRUE(status.has_value()) << "weft up did not return";
  ASSERT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << p.log();
  for (const std::string role : {"storage-1", "storage-2"})
    EXPECT_TRUE(std::filesystem::exists(data_ + "/run/" + role + ".ports")) << role << " not listening yet:\n"
                                                                            << p.log();
}

// `weft down` stops the mount daemon `weft up --mount` started, and only it:
// a pid file naming another process whose first argument is "mount" (its pid
// reused, say) leaves that process alone.
// `weft down` by a user who may not signal the cluster's processes (root
// started it) says so and fails; it keeps the pid files (the processes are
// still there) and the next `weft down`, by root, stops them.
TEST_F(UpDownTest, ADownThatCannotStopTheProcessesSaysSoAndKeepsTheirPidFiles) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run as another user";
  const std::vector<std::string> as_nobody = {"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"};
  {
    std::vector<std::string> probe = as_nobody;
    probe.insert(probe.end(), {testing::weft_binary(), "--help"});
    Process p(probe, tmp_.file("probe.log"));
    auto st = p.wait_exit(30s);
    if (!st || !WIFEXITED(*st) || WEXITSTATUS(*st) != 0)
      GTEST_SKIP() << "uid 65534 cannot run " << testing::weft_binary() << " here: " << p.log();
  }
  auto first = up({"--storage-servers", "2", "--targets-per-server", "1", "--replicas", "2"});
  ASSERT_EQ(first.exit_code, 0) << first.output;
  // The other user must reach the data dir (mkdtemp makes it 0700).
  for (std::filesystem::path p = data_; p != "/" && p != p.parent_path(); p = p.parent_path())
    if (p.string().starts_with(tmp_.path())) ::chmod(p.c_str(), 0755);
  ::chmod(data_.c_str(), 0755);
  ::chmod((data_ + "/run").c_str(), 0755);
  auto before = pids();
  std::vector<std::string> down_argv = as_nobody;
  down_argv.insert(down_argv.end(), {testing::weft_binary(), "down", "--data-dir", data_});
  Process nobody(down_argv, tmp_.file("down-denied.log"));
  auto status = nobody.wait_exit(60s);
  ASSERT_TRUE(status.has_value()) << nobody.log();
  CliResult denied{WIFEXITED(*status) ? WEXITSTATUS(*status) : -1, nobody.log()};
  EXPECT_NE(denied.exit_code, 0) << denied.output;
  EXPECT_NE(denied.output.find("cannot stop"), std::string::npos) << denied.output;
  EXPECT_EQ(denied.output.find("stopped mgmtd"), std::string::npos) << denied.output;
  for (const auto& [role, pid] : before) {
    EXPECT_TRUE(pid_alive(pid)) << role;
    EXPECT_EQ(pid_of(role), pid) << role << "'s pid file was removed while it runs";
  }
  auto down = weft({"down", "--data-dir", data_}, 60s);
  EXPECT_EQ(down.exit_code, 0) << down.output;
  for (const auto& [role, pid] : before) EXPECT_FALSE(pid_alive(pid)) << role;
}

TEST_F(UpDownTest, DownStopsOnlyTheMountDaemonUpStarted) {
  auto first = up({"--storage-servers", "2", "--targets-per-server", "1", "--replicas", "2"});
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const std::string mp = tmp_.file("mnt"), fake_dir = tmp_.file("fake");
  std::filesystem::create_directories(mp);
  std::filesystem::create_directories(fake_dir);
  testing::write_file(fake_dir + "/mount", "while :; do /bin/sleep 1; done\n");
  pid_t fake = ::fork();
  if (fake == 0) {  // argv: x mount MP
    if (::chdir(fake_dir.c_str()) == 0) ::execl("/bin/sh", "x", "mount", mp.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ASSERT_GT(fake, 0);
  const std::string cmdline = "/proc/" + std::to_string(fake) + "/cmdline";
  for (int i = 0; i < 500 && read_text(cmdline).find("mount") == std::string::npos; ++i)
    std::this_thread::sleep_for(10ms);
  testing::write_file(data_ + "/run/mount.pid", std::to_string(fake) + "\n");
  auto down = weft({"down", "--data-dir", data_}, 40s);
  const bool survived = pid_alive(fake);
  ::kill(fake, SIGKILL);  // ours: forked above
  ::waitpid(fake, nullptr, 0);
  EXPECT_EQ(down.exit_code, 0) << down.output;
  EXPECT_TRUE(survived) << "weft down killed a process it did not start:\n" << down.output;
  EXPECT_EQ(down.output.find("stopped the mount daemon"), std::string::npos) << down.output;

  // The daemon up starts: its command line is what down looks for, and down stops it.
  if (int fd = ::open("/dev/fuse", O_RDWR); fd < 0) {
    GTEST_SKIP() << "no FUSE here: the mount daemon part is skipped";
  } else {
    ::close(fd);
  }
  auto mounted = up({"--mount", mp});
  ASSERT_EQ(mounted.exit_code, 0) << mounted.output;
  const pid_t daemon = pid_of("mount");
  ASSERT_TRUE(pid_alive(daemon)) << mounted.output;
  std::string args = read_text("/proc/" + std::to_string(daemon) + "/cmdline");
  std::replace(args.begin(), args.end(), '\0', ' ');
  EXPECT_NE(args.find(" mount " + mp + " --config " + client_config() + " --background --pid-file " + data_ +
                      "/run/mount.pid --log-file " + data_ + "/logs/mount.log --ready-timeout 30 "),
            std::string::npos)
      << args;
  // The daemon dies (OOM, kill -9): its mount stays, dead (ENOTCONN); up
  // --mount again detaches it and mounts afresh.
  testing::write_file(mp + "/kept", "kept");
  ASSERT_EQ(::kill(daemon, SIGKILL), 0);
  for (int i = 0; i < 500 && pid_alive(daemon); ++i) std::this_thread::sleep_for(20ms);
  auto again = up({"--mount", mp});
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("lost its daemon: detached"), std::string::npos) << again.output;
  const pid_t second = pid_of("mount");
  EXPECT_NE(second, daemon);
  EXPECT_TRUE(pid_alive(second)) << again.output;
  EXPECT_EQ(read_text(mp + "/kept"), "kept") << "the new mount does not serve";
  auto stopped = weft({"down", "--data-dir", data_}, 40s);
  EXPECT_EQ(stopped.exit_code, 0) << stopped.output;
  EXPECT_NE(stopped.output.find("unmounted " + mp), std::string::npos) << stopped.output;
  for (int i = 0; i < 500 && pid_alive(second); ++i) std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(pid_alive(second)) << stopped.output;
  if (pid_alive(second)) ::kill(second, SIGKILL);  // started by this test's up
}

// mgmtd whose data_dir is gone starts over below the cluster's routing
// version and refuses every server: `weft up` says so at once, with the
// remedy, instead of waiting its timeout out for servers "not registered".
TEST_F(UpDownTest, UpReportsAMgmtdThatIsBehind) {
  auto first = up({"--storage-servers", "2", "--targets-per-server", "1", "--replicas", "2"});
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const pid_t mgmtd = pid_of("mgmtd");
  ASSERT_EQ(::kill(mgmtd, SIGTERM), 0);
  for (int i = 0; i < 1000 && pid_alive(mgmtd); ++i) std::this_thread::sleep_for(10ms);
  ASSERT_FALSE(pid_alive(mgmtd));
  std::filesystem::remove_all(data_ + "/data/mgmtd");
  auto start = std::chrono::steady_clock::now();
  auto again = up();
  EXPECT_NE(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("MGMTD IS BEHIND"), std::string::npos) << again.output;
  EXPECT_NE(again.output.find("--accept-older-state"), std::string::npos) << again.output;
  EXPECT_EQ(again.output.find("not registered"), std::string::npos) << again.output;
  EXPECT_LT(std::chrono::steady_clock::now() - start, 25s) << "up waited for its timeout (30 s)";
}

// The configs `up` keeps (edits too) repeat cluster.toml's ports and token:
// one edited to differ is refused, naming it (`up` started that server where
// it then did not wait for it). Configs left by a first `up` that stopped
// before writing cluster.toml (written last) are not this `up`'s: they are
// written again (they were kept, with another attempt's ports and token).
TEST_F(UpDownTest, ConfigsMustAgreeWithClusterTomlAndAnUnfinishedFirstUpsAreRewritten) {
  auto first = up({"--storage-servers", "2", "--targets-per-server", "1", "--replicas", "2"});
  ASSERT_EQ(first.exit_code, 0) << first.output;
  auto down = weft({"down", "--data-dir", data_});
  ASSERT_EQ(down.exit_code, 0) << down.output;
  // What an unfinished first `up` leaves in a directory: configs, no cluster.toml.
  const std::string second = tmp_.file("second");
  std::filesystem::create_directories(second + "/conf");
  for (const char* f : {"conf/mgmtd.toml", "conf/storage-1.toml", "conf/storage-2.toml", "client.toml"})
    std::filesystem::copy_file(data_ + "/" + f, second + "/" + f);

  const std::string conf = data_ + "/conf/storage-1.toml";
  std::string edited = read_text(conf);
  const auto at = edited.find("listen = ");
  ASSERT_NE(at, std::string::npos) << edited;
  edited.replace(at, edited.find('\n', at) - at, "listen = \"127.0.0.1:1\"");
  std::ofstream(conf, std::ios::trunc) << edited;
  auto refused = up();
  EXPECT_NE(refused.exit_code, 0) << refused.output;
  EXPECT_NE(refused.output.find(conf + ": [server] listen"), std::string::npos) << refused.output;
  EXPECT_LE(pid_of("mgmtd"), 0) << "started before refusing";

  struct DownAtEnd {
    std::function<void()> down;
    ~DownAtEnd() { down(); }
  } guard{[&] { (void)weft({"down", "--data-dir", second}, 40s); }};
  auto redo = weft({"up", "--data-dir", second, "--timeout", "30", "--storage-servers", "2", "--targets-per-server",
                    "1", "--replicas", "2"},
                   90s);
  ASSERT_EQ(redo.exit_code, 0) << redo.output;
  EXPECT_EQ(read_text(second + "/conf/storage-1.toml").find(data_), std::string::npos)
      << "the unfinished attempt's config was kept";
  auto st = weft({"status", "--config", second + "/client.toml"});
  EXPECT_EQ(st.exit_code, 0) << st.output;
  EXPECT_GE(count(st.output, "serving"), 2u) << st.output;
}

// `up --owner-pid P` (the test process's own pid reaches every `weft` it
// runs as WEFT_OWNER_PID, process.h): when P exits, every server `up`
// started and the mount it made stop on their own, the mount first (it
// flushes through the servers, which wait a few seconds), with no `weft down`.
TEST_F(UpDownTest, EverythingUpStartedStopsWhenItsOwnerExits) {
  Process owner({"/bin/sleep", "600"}, tmp_.file("owner.log"));
  ASSERT_TRUE(pid_alive(owner.pid()));
  const std::string owner_pid = std::to_string(owner.pid());
  const std::string mp = tmp_.file("mnt");
  std::filesystem::create_directories(mp);
  const bool fuse = ::access("/dev/fuse", R_OK | W_OK) == 0;
  std::vector<std::string> flags = {"--storage-servers", "2", "--targets-per-server", "1", "--replicas", "2",
                                    "--owner-pid", owner_pid};
  if (fuse) flags.insert(flags.end(), {"--mount", mp});
  auto first = up(flags);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_NE(first.output.find("stops when process " + owner_pid + " exits"), std::string::npos) << first.output;
  expect_status_serving();
  std::vector<std::string> roles = kRoles;
  if (fuse) {
    roles.push_back("mount");
    testing::write_file(mp + "/through-the-mount", "served");
    EXPECT_EQ(read_text(mp + "/through-the-mount"), "served");
  } else {
    std::fprintf(stderr, "no usable /dev/fuse: the mount part is skipped\n");
  }
  std::map<std::string, pid_t> started;
  for (const auto& role : roles) {
    started[role] = pid_of(role);
    ASSERT_TRUE(pid_alive(started[role])) << role;
    // The flag, not the WEFT_OWNER_PID `up` itself got (this test's pid).
    std::string env = read_text("/proc/" + std::to_string(started[role]) + "/environ");
    std::replace(env.begin(), env.end(), '\0', '\n');
    EXPECT_NE(("\n" + env).find("\nWEFT_OWNER_PID=" + owner_pid + "\n"), std::string::npos) << role << ":\n" << env;
  }

  owner.signal(SIGKILL);
  ASSERT_TRUE(owner.wait_exit(10s));
  const auto killed = std::chrono::steady_clock::now();
  auto mounted = [&] { return read_text("/proc/mounts").find(" " + mp + " ") != std::string::npos; };
  auto all_gone = [&] {
    for (const auto& [role, pid] : started)
      if (pid_alive(pid)) return false;
    return !mounted();
  };
  const bool stopped = testing::eventually(all_gone, 20s, 100ms);
  const double took_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  EXPECT_TRUE(stopped) << "still there 20 s after the owner exited";
  for (const auto& [role, pid] : started) EXPECT_FALSE(pid_alive(pid)) << role << " (pid " << pid << ")";
  EXPECT_FALSE(mounted()) << mp;
  if (stopped) std::fprintf(stderr, "everything stopped %.1f s after the owner exited\n", took_s);
  // Stopped as on SIGTERM: each server said why, and the mount wrote back and unmounted.
  for (const auto& role : kRoles)
    EXPECT_NE(read_text(data_ + "/logs/" + role + ".log").find("its owner, process " + owner_pid + ", exited"),
              std::string::npos)
        << role;
  if (fuse) {
    EXPECT_NE(read_text(data_ + "/logs/mount.log").find("writing back and unmounting"), std::string::npos)
        << read_text(data_ + "/logs/mount.log");
  }
  // Left over only when the test failed: TearDown's `down` stops the servers.
  if (fuse && mounted()) std::system(("fusermount3 -uz '" + mp + "'").c_str());
}

// A mount whose cluster went first stops at once on SIGTERM: its stop path
// opens the root to write back, and that open asked meta (OPENDIR, and with
// default_permissions the kernel's GETATTR of a stale root first), which it
// retried for the client's whole retry time (close to a minute) before
// unmounting. Two mounts: `up --mount`'s, and one with default_permissions.
TEST_F(UpDownTest, AMountWhoseClusterIsGoneStopsPromptlyOnSigterm) {
  if (::access("/dev/fuse", R_OK | W_OK) != 0) GTEST_SKIP() << "no usable /dev/fuse";
  const std::string mp = tmp_.file("mnt"), mp2 = tmp_.file("mnt-perm");
  std::filesystem::create_directories(mp);
  std::filesystem::create_directories(mp2);
  auto first = up({"--storage-servers", "1", "--targets-per-server", "1", "--replicas", "1", "--mount", mp});
  ASSERT_EQ(first.exit_code, 0) << first.output;
  auto second = weft({"mount", mp2, "--config", client_config(), "--background", "--pid-file", tmp_.file("mnt2.pid"),
                      "--log-file", tmp_.file("mnt2.log"), "-o", "default_permissions"});
  ASSERT_EQ(second.exit_code, 0) << second.output;
  testing::write_file(mp + "/f", "written and closed");
  EXPECT_EQ(read_text(mp2 + "/f"), "written and closed");
  auto mounted = [&](const std::string& at) { return read_text("/proc/mounts").find(" " + at + " ") != std::string::npos; };
  ASSERT_TRUE(mounted(mp) && mounted(mp2));
  const pid_t mount_pid = pid_of("mount");
  const pid_t mount2_pid = static_cast<pid_t>(std::stol(read_text(tmp_.file("mnt2.pid"))));
  ASSERT_TRUE(pid_alive(mount_pid) && pid_alive(mount2_pid));
  for (const std::string role : {"mgmtd", "storage-1", "meta"}) {
    const pid_t pid = pid_of(role);
    ASSERT_GT(pid, 0) << role;
    ASSERT_EQ(::kill(pid, SIGKILL), 0) << role;
    ASSERT_TRUE(testing::eventually([&] { return !pid_alive(pid); }, 10s, 50ms)) << role;
  }

  std::this_thread::sleep_for(1500ms);  // the kernel's root attributes go stale (attr_timeout 1 s)

  const auto sent = std::chrono::steady_clock::now();
  ASSERT_EQ(::kill(mount_pid, SIGTERM), 0);
  ASSERT_EQ(::kill(mount2_pid, SIGTERM), 0);
  const bool stopped = testing::eventually(
      [&] { return !pid_alive(mount_pid) && !pid_alive(mount2_pid) && !mounted(mp) && !mounted(mp2); }, 15s, 50ms);
  const double took_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - sent).count();
  EXPECT_TRUE(stopped) << "a mount still there " << took_s << " s after SIGTERM:\n"
                       << read_text(data_ + "/logs/mount.log") << "\n" << read_text(tmp_.file("mnt2.log"));
  EXPECT_FALSE(pid_alive(mount_pid)) << "weft up's mount";
  EXPECT_FALSE(pid_alive(mount2_pid)) << "the default_permissions mount";
  if (stopped) std::fprintf(stderr, "both mounts stopped %.1f s after SIGTERM\n", took_s);
  for (const auto& at : {mp, mp2})
    if (mounted(at)) std::system(("fusermount3 -uz '" + at + "'").c_str());
  if (pid_alive(mount2_pid)) ::kill(mount2_pid, SIGKILL);  // not up's: `down` does not know it
}

// An owner that is gone already: `up`, `mount` and `serve` fail with one line
// and start nothing.
TEST_F(UpDownTest, AnOwnerThatIsGoneAlreadyIsAOneLineError) {
  // Past pid_max: no process has it, nor can one get it meanwhile.
  const long pid_max = std::stol(read_text("/proc/sys/kernel/pid_max"));
  const std::string gone_pid = std::to_string(pid_max + 1);
  auto r = up({"--owner-pid", gone_pid});
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("owner pid " + gone_pid + ": no such process"), std::string::npos) << r.output;
  EXPECT_EQ(count(r.output, "\n"), 1u) << "one line:\n" << r.output;
  EXPECT_FALSE(std::filesystem::exists(data_)) << "up created " << data_;

  // The same owner from the environment, for a server and a mount.
  const std::string conf = tmp_.file("echo.toml");
  testing::write_file(conf, "[server]\nlisten = \"127.0.0.1:0\"\ncluster_token = \"t\"\n");
  std::vector<std::vector<std::string>> commands = {{"serve", "echo", "--config", conf}};
  const std::string mp = tmp_.file("mnt-gone");
  std::filesystem::create_directories(mp);
  if (::access("/dev/fuse", R_OK | W_OK) == 0)
    commands.push_back({"mount", mp, "--cluster", "127.0.0.1:1", "--background"});
  for (auto args : commands) {
    args.insert(args.begin(), testing::weft_binary());
    Process p(args, tmp_.file("gone-" + args[1] + ".log"), {"WEFT_OWNER_PID=" + gone_pid});
    auto status = p.wait_exit(30s);
    ASSERT_TRUE(status.has_value()) << args[1] << " did not return";
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) != 0) << args[1] << ": " << p.log();
    EXPECT_NE(p.log().find("owner pid " + gone_pid + ": no such process"), std::string::npos) << p.log();
  }
  EXPECT_EQ(read_text("/proc/mounts").find(" " + mp + " "), std::string::npos);
}

// $WEFT_OWNER_PID is read only by the commands that take an owner: a bad
// value there is their one-line error naming the variable; elsewhere
// (down, status, --help) it is no concern (CLI11's envname failed them all).
// Empty or 0: no owner.
TEST_F(UpDownTest, TheOwnerVariableIsReadOnlyWhereItCounts) {
  auto run = [&](std::vector<std::string> args, const std::string& value) {
    args.insert(args.begin(), testing::weft_binary());
    Process p(args, tmp_.file("env." + std::to_string(runs_++) + ".log"), {"WEFT_OWNER_PID=" + value});
    auto status = p.wait_exit(90s);
    CliResult r;
    r.output = p.log();
    r.exit_code = status && WIFEXITED(*status) ? WEXITSTATUS(*status) : -1;
    return r;
  };
  for (const std::string bad : {"abc", "-1", "12x", "99999999999"}) {
    SCOPED_TRACE(bad);
    auto help = run({"--help"}, bad);
    EXPECT_EQ(help.exit_code, 0) << help.output;
    auto down = run({"down", "--data-dir", data_}, bad);
    EXPECT_EQ(down.output.find("WEFT_OWNER_PID"), std::string::npos) << down.output;
    EXPECT_EQ(down.output.find("owner-pid"), std::string::npos) << down.output;
    auto up = run({"up", "--data-dir", data_}, bad);
    EXPECT_NE(up.exit_code, 0) << up.output;
    EXPECT_NE(up.output.find("$WEFT_OWNER_PID '" + bad + "' is not a process id"), std::string::npos) << up.output;
    EXPECT_EQ(count(up.output, "\n"), 1u) << up.output;
    EXPECT_FALSE(std::filesystem::exists(data_)) << "up created " << data_;
  }
  auto none = run({"up", "--data-dir", data_, "--storage-servers", "1", "--targets-per-server", "1", "--replicas", "1"},
                  "0");
  ASSERT_EQ(none.exit_code, 0) << none.output;
  EXPECT_EQ(none.output.find("stops when process"), std::string::npos) << none.output;
  std::string env = read_text("/proc/" + std::to_string(pid_of("meta")) + "/environ");
  EXPECT_NE(env.find("WEFT_OWNER_PID=0"), std::string::npos) << "inherited as it was (no owner)";
}

TEST_F(UpDownTest, BadFlagsAreClearErrors) {
  auto r = up({"--storage-servers", "1", "--replicas", "2"});
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("--replicas 2 needs at least 2 storage servers"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(data_ + "/cluster.toml"));

  auto down = weft({"down", "--data-dir", data_});
  EXPECT_EQ(down.exit_code, 0) << down.output;
  EXPECT_NE(down.output.find("nothing to stop"), std::string::npos) << down.output;
}

}  // namespace
}  // namespace weft
