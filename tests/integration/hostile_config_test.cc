// Hostile configurations against real `weft serve mgmtd|meta|storage`
// processes: every setting at 0, negative, past 2^63, of the wrong type;
// malformed files (binary garbage, invalid UTF-8, duplicate keys, nesting
// deep enough to overflow a recursive parser); malformed or taken addresses;
// paths that are files, too long, empty or with a NUL; another role's file.
// Each must exit non-zero within seconds, with no signal, and one line
// naming the file and the key (or the path and the problem). Values that are
// accepted must serve; a refused start must leave nothing that stops a
// correct one. (Run as root, permission checks such as a chmod 000 data_dir
// do not apply: not covered here.)
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "process.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using testing::Process;
using testing::TempDir;

constexpr auto kExitWithin = 10s;
const std::array<std::string, 3> kRoles = {"mgmtd", "meta", "storage"};

// A minimal valid config of `role` whose paths are under `dir` (the marker
// @EXTRA@ is where a case adds [server] keys).
// A loopback port this test holds (listening) while it lives: taken for
// any server told to listen there.
class HeldPort {
 public:
  HeldPort() : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in a = testing::loopback(0);
    socklen_t len = sizeof a;
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && ::listen(fd_, 1) == 0 &&
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0)
      port_ = ntohs(a.sin_port);
  }
  ~HeldPort() { ::close(fd_); }
  HeldPort(const HeldPort&) = delete;
  HeldPort& operator=(const HeldPort&) = delete;
  uint16_t port() const { return port_; }  // 0: none could be held

 private:
  int fd_;
  uint16_t port_ = 0;
};

std::string base_config(const std::string& role, const std::string& dir, uint16_t port = 0) {
  std::string server = "[server]\nlisten = \"127.0.0.1:" + std::to_string(port) +
                       "\"\ncluster_token = \"t\"\nport_file = \"" + dir + "/ports\"\n@EXTRA@\n";
  if (role == "mgmtd") return server + "[mgmtd]\ndata_dir = \"" + dir + "/data\"\n";
  if (role == "meta") return server + "[meta]\ndata_dir = \"" + dir + "/data\"\n";
  return server + "[storage]\n[[targets]]\nid = 1\npath = \"" + dir + "/t1\"\n";
}

std::string replace(std::string text, const std::string& from, const std::string& to) {
  size_t at = text.find(from);
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

// One `weft serve` start that must be refused.
struct Case {
  std::string name;
  std::string role;
  std::string config;                // the file's bytes (@DIR@: the case's directory)
  std::vector<std::string> needles;  // in the error line besides the config's path (@DIR@ allowed)
  bool names_config = true;          // the error line names the config file
  std::string config_path;           // else @DIR@/cfg.toml
};

struct Running {
  Case c;
  std::unique_ptr<TempDir> dir;
  std::unique_ptr<Process> process;
  std::string path;
  std::chrono::steady_clock::time_point started;
};

std::string at_dir(const std::string& s, const std::string& dir) {
  std::string out = s;
  for (size_t at; (at = out.find("@DIR@")) != std::string::npos;) out.replace(at, 5, dir);
  return out;
}

// Starts the cases a few at a time (2 cores) and checks how each ended.
void expect_refused(std::vector<Case> cases) {
  constexpr size_t kBatch = 6;
  for (size_t first = 0; first < cases.size(); first += kBatch) {
    std::vector<Running> batch;
    for (size_t i = first; i < std::min(cases.size(), first + kBatch); ++i) {
      Running r;
      r.c = cases[i];
      r.dir = std::make_unique<TempDir>("weft-hostile");
      const std::string dir = r.dir->path();
      r.path = r.c.config_path.empty() ? dir + "/cfg.toml" : at_dir(r.c.config_path, dir);
      if (r.c.config_path.empty()) testing::write_file(r.path, at_dir(replace(r.c.config, "@EXTRA@\n", ""), dir));
      r.started = std::chrono::steady_clock::now();
      r.process = std::make_unique<Process>(
          std::vector<std::string>{testing::weft_binary(), "serve", r.c.role, "--config", r.path}, dir + "/log");
      batch.push_back(std::move(r));
    }
    for (auto& r : batch) {
      SCOPED_TRACE(r.c.role + " " + r.c.name);
      // Every case is checked (no ASSERT): one failure must not hide the others.
      auto status = r.process->wait_exit(kExitWithin);
      const std::string log = r.process->log();
      if (!status) {
        ADD_FAILURE() << "still running after 10 s: " << log;
        continue;
      }
      if (!WIFEXITED(*status)) {
        ADD_FAILURE() << "killed by signal " << WTERMSIG(*status) << ": " << log;
        continue;
      }
      EXPECT_NE(WEXITSTATUS(*status), 0) << "pid " << r.process->pid() << ": " << log;
      // One line says what is wrong (info lines of a start that got as far as listening aside).
      std::vector<std::string> errors;
      std::istringstream in(log);
      for (std::string line; std::getline(in, line);) {
        if (line.starts_with("weft: ")) {
          errors.push_back(line);
        } else if (!line.empty()) {
          EXPECT_NE(line.find(" I ["), std::string::npos) << "a line that is not the error: " << line;
        }
      }
      if (errors.size() != 1) {
        ADD_FAILURE() << errors.size() << " error lines: " << log;
        continue;
      }
      if (r.c.names_config) {
        EXPECT_NE(errors[0].find(r.path), std::string::npos) << errors[0];
      }
      for (const auto& n : r.c.needles)
        EXPECT_NE(errors[0].find(at_dir(n, r.dir->path())), std::string::npos) << "'" << n << "' not in: " << errors[0];
      EXPECT_LT(errors[0].size(), 6000u) << "an error line of " << errors[0].size() << " bytes";
    }
  }
}

// Every numeric setting of every role, at values no range takes or of a
// type it is not.
TEST(HostileConfig, NumericSettingsOutOfRangeOrOfTheWrongTypeNameTheKey) {
  struct Setting {
    std::string role, section, key;
  };
  std::vector<Setting> settings;
  for (const char* k :
       {"io_threads", "blocking_threads", "write_stall_timeout_ms", "hello_timeout_ms", "read_stall_timeout_ms",
        "tcp_keepalive_idle_s", "tcp_keepalive_interval_s", "tcp_keepalive_count", "tcp_user_timeout_ms"})
    settings.push_back({"mgmtd", "server", k});
  for (const char* k : {"lease_ms", "grace_ms", "tick_ms", "client_lease_ms", "client_grace_ms"})
    settings.push_back({"mgmtd", "mgmtd", k});
  for (const char* k : {"chain_count", "chain_table_id", "request_window", "request_record_age_s", "reserve_mib",
                        "read_hold_ms", "session_reap_interval_ms", "session_reap_min_age_s"})
    settings.push_back({"meta", "meta", k});
  for (const char* k : {"disk_threads", "forward_timeout_ms", "read_held_mib", "dedup_entries", "stray_chunk_grace_s",
                        "orphan_grace_s", "orphan_sweep_inodes_per_s", "scrub_mib_per_s", "scrub_interval_s",
                        "replica_check_interval_s", "replica_check_chunks_per_s", "resync_window"})
    settings.push_back({"storage", "storage", k});
  for (const char* k : {"id", "capacity", "reserve_mib", "chunk_size_max"})
    settings.push_back({"storage", "targets", k});

  // 2^63 is past int64 (a TOML integer), 1e30 and 1.5 are floats.
  const std::vector<std::string> values = {
      "-2", "9223372036854775808", "-9_223_372_036_854_775_809", "1e30", "1.5", "\"5\"", "{ a = 1 }", "[1]", "true",
      "nan"};
  std::vector<Case> cases;
  for (const auto& s : settings) {
    for (const auto& v : values) {
      std::string text = base_config(s.role, "@DIR@");
      std::string key = s.section + "." + s.key;
      if (s.section == "server") {
        text = replace(text, "@EXTRA@\n", s.key + " = " + v + "\n");
      } else if (s.section == "targets") {
        if (s.key == "id") text = replace(text, "id = 1\n", "");
        text += s.key + " = " + v + "\n";
        key = "targets[0]." + s.key;
      } else {
        text = replace(text, "[" + s.section + "]\n", "[" + s.section + "]\n" + s.key + " = " + v + "\n");
      }
      cases.push_back({key + " = " + v, s.role, text, {"'" + key + "'"}});
    }
  }
  expect_refused(cases);
}

// Files no TOML parser takes, or that are not a file of this server.
TEST(HostileConfig, MalformedFilesAndWrongFilesAreRefusedInOneLine) {
  std::vector<Case> cases;
  std::string garbage;
  for (int i = 0; i < 1024; ++i) garbage.push_back(static_cast<char>((i * 131) & 0xff));
  for (const auto& role : kRoles) {
    const std::string ok = base_config(role, "@DIR@");
    cases.push_back({"empty file", role, "", {"missing table 'server'"}});
    cases.push_back({"binary garbage", role, garbage, {"invalid TOML: line 1:"}});
    cases.push_back(
        {"invalid UTF-8", role, replace(ok, "@EXTRA@", "name = \"\xff\xfe\""), {"invalid TOML: line 5:", "not UTF-8"}});
    cases.push_back({"duplicate key",
                     role,
                     replace(ok, "@EXTRA@", "cluster_token = \"u\""),
                     {"invalid TOML: line 5:", "already exists"}});
    cases.push_back({"duplicate table", role, ok + "[server]\nname = \"x\"\n", {"invalid TOML:", "already exists"}});
    cases.push_back({"raw NUL byte", role, ok + std::string(1, '\0') + "\n", {"invalid TOML:"}});
    // Recursive descent in the parser: once a SIGSEGV (stack overflow), no message.
    cases.push_back({"arrays nested 100000 deep",
                     role,
                     ok + "deep = " + std::string(100000, '[') + std::string(100000, ']') + "\n",
                     {"nested deeper than 64 levels"}});
    cases.push_back({"inline tables nested 20000 deep",
                     role,
                     "x = " +
                         [] {
                           std::string s;
                           for (int i = 0; i < 20000; ++i) s += "{a=";
                           return s + "1" + std::string(20000, '}');
                         }() +
                         "\n" + ok,
                     {"line 1: nested deeper than 64 levels"}});
    cases.push_back({"a directory as --config", role, "", {"it is a directory"}, true, "@DIR@"});
    cases.push_back({"a missing --config", role, "", {"No such file or directory"}, true, "@DIR@/none.toml"});
  }
  // Another role's file: mgmtd, with a default for everything, once started
  // on it (a data_dir under the working directory).
  cases.push_back(
      {"meta's file to mgmtd", "mgmtd", base_config("meta", "@DIR@"), {"[meta] is a setting of a meta server"}});
  cases.push_back(
      {"storage's file to mgmtd", "mgmtd", base_config("storage", "@DIR@"), {"is a setting of a storage server"}});
  cases.push_back(
      {"mgmtd's file to meta", "meta", base_config("mgmtd", "@DIR@"), {"[mgmtd] is a setting of a mgmtd server"}});
  cases.push_back(
      {"meta's file to storage", "storage", base_config("meta", "@DIR@"), {"[meta] is a setting of a meta server"}});
  const auto cwd = std::filesystem::current_path();
  TempDir here("weft-hostile-cwd");
  std::filesystem::current_path(here.path());
  expect_refused(cases);
  std::filesystem::current_path(cwd);
  EXPECT_FALSE(std::filesystem::exists(here.file("weft-data"))) << "a server created its default data_dir";
}

// Addresses and the other [server] strings.
TEST(HostileConfig, BadAddressesAndServerStringsNameTheKey) {
  // A port another process (this test) holds.
  HeldPort held;
  ASSERT_NE(held.port(), 0);
  const std::string taken = "127.0.0.1:" + std::to_string(held.port());

  std::vector<Case> cases;
  for (const auto& role : kRoles) {
    const std::string ok = base_config(role, "@DIR@");
    auto listen = [&](const std::string& v) { return replace(ok, "listen = \"127.0.0.1:0\"", "listen = " + v); };
    auto extra = [&](const std::string& v) { return replace(ok, "@EXTRA@", v); };
    cases.push_back({"listen empty", role, listen("\"\""), {"'server.listen'"}});
    cases.push_back({"listen without port", role, listen("\"host\""), {"'server.listen'"}});
    cases.push_back({"listen [::1", role, listen("\"[::1\""), {"'server.listen'", "[::1"}});
    cases.push_back({"listen port 99999", role, listen("\"1.2.3.4:99999\""), {"'server.listen'", "bad port"}});
    cases.push_back(
        {"listen on a name", role, listen("\"localhost:23456\""), {"'server.listen'", "not an IP address"}});
    cases.push_back({"listen an integer", role, listen("7000"), {"'server.listen'", "expected a string"}});
    cases.push_back(
        {"listen on a taken port", role, listen("\"" + taken + "\""), {"'server.listen'", taken, "Address already in use"}});
    cases.push_back({"metrics on a taken port",
                     role,
                     extra("metrics_listen = \"" + taken + "\""),
                     {"'server.metrics_listen'", taken, "Address already in use"}});
    cases.push_back({"metrics_listen [::1", role, extra("metrics_listen = \"[::1\""), {"'server.metrics_listen'"}});
    cases.push_back(
        {"metrics_listen on a name", role, extra("metrics_listen = \"localhost:0\""), {"'server.metrics_listen'"}});
    cases.push_back({"cluster_token empty",
                     role,
                     replace(ok, "cluster_token = \"t\"", "cluster_token = \"\""),
                     {"'server.cluster_token'"}});
    cases.push_back({"cluster_token with a NUL",
                     role,
                     replace(ok, "cluster_token = \"t\"", "cluster_token = \"a\\u0000b\""),
                     {"'server.cluster_token'", "NUL"}});
    cases.push_back({"log_level unknown", role, extra("log_level = \"loud\""), {"'server.log_level'", "loud"}});
    cases.push_back(
        {"log_file a directory", role, extra("log_file = \"@DIR@\""), {"'server.log_file'", "@DIR@", "Is a directory"}});
    // Once left its temporary ("<port_file>.tmp") behind, and named neither.
    cases.push_back({"port_file a directory",
                     role,
                     replace(ok, "port_file = \"@DIR@/ports\"", "port_file = \"@DIR@\""),
                     {"'server.port_file'", "@DIR@", "Is a directory"}});
  }
  expect_refused(cases);
}

// Paths: a file where a directory belongs, a device, too long, empty, with a NUL.
TEST(HostileConfig, BadPathsNameTheKeyOrThePath) {
  const std::string long_path = [] {
    std::string p = "@DIR@";
    while (p.size() < 5000) p += "/" + std::string(200, 'x');
    return p;
  }();
  std::vector<Case> cases;
  for (const auto& role : kRoles) {
    const bool storage = role == "storage";
    const std::string key = storage ? "path" : "data_dir";
    const std::string value = storage ? "\"@DIR@/t1\"" : "\"@DIR@/data\"";
    const std::string ok = base_config(role, "@DIR@");
    auto path = [&](const std::string& v) { return replace(ok, key + " = " + value, key + " = " + v); };
    const std::string named = storage ? "targets[0].path" : role + ".data_dir";
    cases.push_back(
        {"the config file itself", role, path("\"@DIR@/cfg.toml\""), {"@DIR@/cfg.toml", "Not a directory"}, !storage});
    cases.push_back({"under a regular file",
                     role,
                     path("\"@DIR@/cfg.toml/sub\""),
                     {"@DIR@/cfg.toml/sub", "Not a directory"},
                     !storage});
    cases.push_back({"/dev/null", role, path("\"/dev/null\""), {"/dev/null", "Not a directory"}, !storage});
    cases.push_back({"over 4096 bytes", role, path("\"" + long_path + "\""), {"File name too long"}, !storage});
    cases.push_back(
        {"a 300-byte name", role, path("\"@DIR@/" + std::string(300, 'y') + "\""), {"File name too long"}, !storage});
    // Used to be cut at the NUL: a data_dir "@DIR@/a" was made and served.
    cases.push_back({"with a NUL", role, path("\"@DIR@/a\\u0000b\""), {"'" + named + "'", "NUL"}});
    cases.push_back({"an integer", role, path("5"), {"'" + named + "'", "expected a string"}});
    if (role != "mgmtd") cases.push_back({"empty", role, path("\"\""), {"'" + named + "' must not be empty"}});
  }
  cases.push_back({"mgmtd data_dir empty",
                   "mgmtd",
                   replace(base_config("mgmtd", "@DIR@"), "data_dir = \"@DIR@/data\"", "data_dir = \"\""),
                   {"'mgmtd.data_dir' must not be empty"}});
  cases.push_back({"chunk_size_max not a power of two",
                   "storage",
                   base_config("storage", "@DIR@") + "chunk_size_max = 100000\n",
                   {"'targets[0].chunk_size_max'", "power of two"}});
  cases.push_back({"chunk_size_max below 4 KiB",
                   "storage",
                   base_config("storage", "@DIR@") + "chunk_size_max = 1\n",
                   {"'targets[0].chunk_size_max'", "power of two"}});
  // [cluster]: bad mgmtd addresses and an advertised address mgmtd refuses
  // to register (meta once retried that for ever).
  for (const std::string role : {"meta", "storage"}) {
    std::string ok = replace(base_config(role, "@DIR@", testing::free_port()), "id = 1\n", "");
    cases.push_back({"cluster.mgmtd not host:port", role, ok + "[cluster]\nmgmtd = [\"bad\"]\n", {"'cluster.mgmtd'"}});
    cases.push_back({"cluster.mgmtd [::1", role, ok + "[cluster]\nmgmtd = [\"[::1\"]\n", {"'cluster.mgmtd'"}});
    cases.push_back({"cluster.advertise [::1",
                     role,
                     ok + "[cluster]\nmgmtd = [\"127.0.0.1:1\"]\nadvertise = \"[::1\"\n",
                     {"'cluster.advertise'"}});
    cases.push_back({"cluster.advertise with a space",
                     role,
                     ok + "[cluster]\nmgmtd = [\"127.0.0.1:1\"]\nadvertise = \"my host:7001\"\n",
                     {"'cluster.advertise'"}});
  }
  expect_refused(cases);
  // Nothing was made at the part of the path before a NUL.
}

// Extreme values the ranges take: each server serves with them (no spin, no
// crash, no absurd allocation) and stops cleanly.
TEST(HostileConfig, ExtremeAcceptedValuesServeAndStopCleanly) {
  struct Start {
    std::string role, server, section;
  };
  const std::vector<Start> starts = {
      {"mgmtd",
       "io_threads = 64\nblocking_threads = 256\nhello_timeout_ms = 0\nread_stall_timeout_ms = 0\n"
       "tcp_keepalive_idle_s = 0\ntcp_user_timeout_ms = 0\nname = \"\"\n",
       "lease_ms = 100\ngrace_ms = 0\ntick_ms = 10\nclient_lease_ms = 300\nclient_grace_ms = 0\n"},
      {"mgmtd", "write_stall_timeout_ms = 3600000\ntcp_user_timeout_ms = 0\n",
       "lease_ms = 3600000\ngrace_ms = 3600000\ntick_ms = 60000\nclient_lease_ms = 3600000\n"},
      {"meta", "blocking_threads = 1\nio_threads = 1\n",
       "chain_count = 1048576\nchain_table_id = 4294967295\nrequest_window = 1048576\nreserve_mib = 1073741824\n"
       "read_hold_ms = 0\nsession_reap_interval_ms = 100\nsession_reap_min_age_s = 1\nrequest_record_age_s = 600\n"},
      {"storage", "",
       "disk_threads = 256\ndedup_entries = 16777216\nresync_window = 16777216\nread_held_mib = 1048576\n"
       "scrub_mib_per_s = 1048576\nscrub_interval_s = 1\nstray_chunk_grace_s = 0\norphan_grace_s = -1\n"
       "replica_check_interval_s = 1\nreplica_check_chunks_per_s = 0\nforward_timeout_ms = 100\n"
       "[[targets]]\nid = 2\npath = \"@DIR@/t2\"\ncapacity = 1\nreserve_mib = 1073741824\nchunk_size_max = 4096\n"
       "[[targets]]\nid = 9223372036854775807\npath = \"@DIR@/t3\"\ncapacity = 9223372036854775807\nreserve_mib = 0\n"},
  };
  std::vector<std::unique_ptr<TempDir>> dirs;
  std::vector<std::unique_ptr<Process>> servers;
  for (const auto& s : starts) {
    dirs.push_back(std::make_unique<TempDir>("weft-hostile"));
    const std::string dir = dirs.back()->path();
    std::string text = replace(base_config(s.role, dir), "@EXTRA@\n", s.server);
    const std::string section = "[" + (s.role == "storage" ? std::string("storage") : s.role) + "]\n";
    text = replace(text, section, section + at_dir(s.section, dir));
    testing::write_file(dir + "/cfg.toml", text);
    servers.push_back(std::make_unique<Process>(
        std::vector<std::string>{testing::weft_binary(), "serve", s.role, "--config", dir + "/cfg.toml"},
        dir + "/log"));
  }
  for (size_t i = 0; i < starts.size(); ++i) {
    SCOPED_TRACE(starts[i].role + " #" + std::to_string(i));
    EXPECT_TRUE(testing::wait_for_file(dirs[i]->file("ports"), 10s)) << servers[i]->log();
  }
  std::this_thread::sleep_for(2s);
  for (size_t i = 0; i < starts.size(); ++i) {
    SCOPED_TRACE(starts[i].role + " #" + std::to_string(i));
    ASSERT_TRUE(servers[i]->running()) << servers[i]->log();
    servers[i]->signal(SIGTERM);
    auto status = servers[i]->wait_exit(10s);
    ASSERT_TRUE(status) << servers[i]->log();
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << servers[i]->log();
    EXPECT_EQ(servers[i]->log().find(" E ["), std::string::npos) << servers[i]->log();
  }
}

// A start refused after it made its directories (the port taken, a bad
// second target, a port file that is a directory) leaves nothing that stops
// a correct start on the same paths; the port file's temporary goes too.
TEST(HostileConfig, ARefusedStartLeavesNothingThatStopsACorrectOne) {
  HeldPort held;
  ASSERT_NE(held.port(), 0);
  const uint16_t taken = held.port();

  for (const auto& role : kRoles) {
    SCOPED_TRACE(role);
    TempDir dir("weft-hostile");
    const std::string good = replace(base_config(role, dir.path()), "@EXTRA@\n", "");
    std::vector<std::string> bad = {
        replace(good, "listen = \"127.0.0.1:0\"", "listen = \"127.0.0.1:" + std::to_string(taken) + "\""),
        replace(good, "port_file = \"" + dir.path() + "/ports\"", "port_file = \"" + dir.path() + "\""),
    };
    if (role == "storage") bad.push_back(good + "[[targets]]\nid = 2\npath = \"/dev/null/t\"\n");
    if (role == "storage") bad.push_back(good + "chunk_size_max = 100000\n");
    for (size_t i = 0; i < bad.size(); ++i) {
      testing::write_file(dir.file("bad.toml"), bad[i]);
      Process p({testing::weft_binary(), "serve", role, "--config", dir.file("bad.toml")}, dir.file("bad.log"));
      auto status = p.wait_exit(kExitWithin);
      ASSERT_TRUE(status) << p.log();
      EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) != 0) << i << ": " << p.log();
    }
    EXPECT_FALSE(std::filesystem::exists(dir.path() + ".tmp")) << "the port file's temporary was left behind";
    std::filesystem::remove(dir.path() + ".tmp");
    testing::write_file(dir.file("good.toml"), good);
    Process p({testing::weft_binary(), "serve", role, "--config", dir.file("good.toml")}, dir.file("good.log"));
    ASSERT_TRUE(testing::wait_for_file(dir.file("ports"), 10s)) << p.log();
    p.signal(SIGTERM);
    auto status = p.wait_exit(10s);
    ASSERT_TRUE(status) << p.log();
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << p.log();
  }
}

}  // namespace
}  // namespace weft
