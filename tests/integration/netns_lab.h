// tests/integration/netns_lab.h
// A small private network on one machine for multi-host tests: one network
// namespace per host, each with one interface `eth0` (a veth pair) carrying
// its own IPv4 address, all plugged into a bridge that lives in a namespace
// of its own (the "switch"). Nothing is added to the root namespace, so
// parallel runs (names carry the test's pid) and the machine's own network
// never meet, and deleting the namespaces removes every veth and the bridge.
// Commands run in a host with `ip netns exec NS ...`, which execs in place:
// the pid of the testing::Process is the pid of the command.
// Cleanup: the destructor deletes every namespace it created; namespaces of
// an earlier run whose test process is gone (a crash) are deleted at setup().
// Threading: one test thread.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "process.h"

namespace weft::testing {

struct CommandResult {
  int exit_code = -1;  // -1: killed or timed out
  std::string output;  // stdout + stderr
};

// Runs argv (argv[0] an absolute path) to completion, output to log_path.
inline CommandResult run_command(std::vector<std::string> argv, const std::string& log_path,
                                 std::chrono::seconds timeout = std::chrono::seconds(30),
                                 std::vector<std::string> env = {}) {
  Process p(std::move(argv), log_path, std::move(env));
  auto status = p.wait_exit(timeout);
  CommandResult r;
  if (status && WIFEXITED(*status)) r.exit_code = WEXITSTATUS(*status);
  r.output = p.log();
  return r;
}

// Absolute path of iproute2's `ip`, "" when it is not installed.
inline std::string ip_binary() {
  for (const char* p : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"})
    if (::access(p, X_OK) == 0) return p;
  return "";
}

class NetnsLab {
 public:
  // `scratch` holds the logs of the `ip` commands.
  explicit NetnsLab(std::string scratch)
      : scratch_(std::move(scratch)), ip_(ip_binary()), prefix_("weft-" + std::to_string(::getpid()) + "-") {}
  ~NetnsLab() {
    for (auto it = created_.rbegin(); it != created_.rend(); ++it) ip({"netns", "del", *it});
  }
  NetnsLab(const NetnsLab&) = delete;
  NetnsLab& operator=(const NetnsLab&) = delete;

  // Creates the switch namespace and its bridge. "" on success, else why the
  // machine cannot run the test (no `ip`, no CAP_SYS_ADMIN, no bridge module).
  std::string setup() {
    if (ip_.empty()) return "iproute2's `ip` is not installed";
    remove_orphans();
    std::string sw = ns("switch");
    auto r = ip({"netns", "add", sw});
    if (r.exit_code != 0) return "`ip netns add` failed (needs root / CAP_SYS_ADMIN): " + r.output;
    created_.push_back(sw);
    r = ip({"-n", sw, "link", "add", "br0", "type", "bridge"});
    if (r.exit_code != 0) return "cannot create a bridge: " + r.output;
    r = ip({"-n", sw, "link", "set", "br0", "up"});
    if (r.exit_code != 0) return "cannot bring the bridge up: " + r.output;
    return "";
  }

  // Adds host `name` with `address` (e.g. "10.77.0.1") on a /24. "" or the error.
  std::string add_host(const std::string& name, const std::string& address) {
    std::string host = ns(name), sw = ns("switch");
    std::string port = "p" + std::to_string(hosts_.size());  // the switch side
    if (auto r = ip({"netns", "add", host}); r.exit_code != 0) return r.output;
    created_.push_back(host);
    hosts_[name] = port;
    for (std::vector<std::string> cmd : std::vector<std::vector<std::string>>{
             {"-n", sw, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", host},
             {"-n", sw, "link", "set", port, "master", "br0", "up"},
             {"-n", host, "addr", "add", address + "/24", "dev", "eth0"},
             {"-n", host, "link", "set", "eth0", "up"},
             {"-n", host, "link", "set", "lo", "up"}}) {
      auto r = ip(cmd);
      if (r.exit_code != 0) return "ip " + cmd[2] + " " + cmd[3] + ": " + r.output;
    }
    return "";
  }

  // Cuts (up = false) or restores host `name`'s link to the switch.
  bool set_link(const std::string& name, bool up) {
    return ip({"-n", ns(name), "link", "set", "eth0", up ? "up" : "down"}).exit_code == 0;
  }

  // argv prefixed so that it runs inside host `name`.
  std::vector<std::string> in_host(const std::string& name, std::vector<std::string> argv) const {
    std::vector<std::string> out{ip_, "netns", "exec", ns(name)};
    out.insert(out.end(), argv.begin(), argv.end());
    return out;
  }

  std::string ns(const std::string& name) const { return prefix_ + name; }

 private:
  CommandResult ip(std::vector<std::string> args) {
    args.insert(args.begin(), ip_);
    return run_command(std::move(args), scratch_ + "/ip." + std::to_string(runs_++) + ".log",
                       std::chrono::seconds(10));
  }

  // Namespaces named weft-<pid>-... whose pid is no longer running: left by a
  // run that crashed before its destructors ran.
  void remove_orphans() {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/var/run/netns", ec)) {
      std::string n = e.path().filename().string();
      if (n.rfind("weft-", 0) != 0) continue;
      size_t dash = n.find('-', 5);
      if (dash == std::string::npos) continue;
      pid_t pid = static_cast<pid_t>(std::atoi(n.substr(5, dash - 5).c_str()));
      if (pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH) ip({"netns", "del", n});
    }
  }

  std::string scratch_;
  std::string ip_;
  std::string prefix_;
  std::vector<std::string> created_;
  std::map<std::string, std::string> hosts_;
  int runs_ = 0;
};

}  // namespace weft::testing
