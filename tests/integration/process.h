// tests/integration/process.h
// Starts real processes for integration tests and always stops them: a
// Process kills its child (SIGKILL, by PID) in its destructor unless it
// already exited, so a failing test never leaves servers behind. What the
// child starts in a session of its own (`weft up`'s servers, the daemon of
// `weft mount --background`) stops when the test process dies, however it
// dies (ctest's timeout, Ctrl-C): every child gets WEFT_OWNER_PID=<this
// process> (docs/local-cluster.md), unless extra_env sets it.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/temp_dir.h"

namespace weft::testing {

// 127.0.0.1:port as a socket address.
inline sockaddr_in loopback(uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  return a;
}

// A port on 127.0.0.1 that was free a moment ago (servers that restart must
// come back on the same one, so tests pick fixed ports). Taken from below the
// kernel's ephemeral range (32768-60999 by default): outgoing connections take
// their source ports there, and one could take a port picked there before its
// server binds it. Never the same port twice in one process: a fixture that
// configures several servers before starting any once gave two of them the
// same port (the kernel hands a just-closed ephemeral port out again).
inline uint16_t free_port() {
  static std::mutex mu;
  static std::set<uint16_t> given;
  static std::minstd_rand rng(static_cast<unsigned>(::getpid()) * 2654435761u ^
                              static_cast<unsigned>(std::chrono::steady_clock::now().time_since_epoch().count()));
  std::lock_guard lock(mu);
  for (int attempt = 0; attempt < 1000; ++attempt) {
    auto port = static_cast<uint16_t>(20000 + rng() % 12000);
    if (given.contains(port)) continue;
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a = loopback(port);
    bool free = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
    ::close(fd);
    if (!free) continue;
    given.insert(port);
    return port;
  }
  return 0;  // nothing free below the ephemeral range: the server picks one and the test fails clearly
}

// Polls pred every `step` until it holds or `timeout` passes; then asks once more.
template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds timeout = std::chrono::seconds(8),
                std::chrono::milliseconds step = std::chrono::milliseconds(20)) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(step);
  }
  return pred();
}

inline std::string weft_binary() {
  const char* bin = std::getenv("WEFT_BIN");
  return bin ? bin : "weft";
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Stops the cluster `weft up` started in `data_dir` (a suite's tear-down):
// `weft down`, tried again up to twice a second apart when it fails (it
// refuses at once while another `weft up`/`down` holds the directory's
// lock), its output printed when it never succeeds. A suite that deleted the
// directory after a failed `down` left its servers running (seen once).
inline bool stop_cluster(const std::string& data_dir) {
  const std::string log = data_dir + ".down.log";
  for (int attempt = 1;; ++attempt) {
    const std::string cmd = weft_binary() + " down --data-dir '" + data_dir + "' > '" + log + "' 2>&1";
    if (std::system(cmd.c_str()) == 0) return true;
    if (attempt == 3) break;
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  std::fprintf(stderr, "weft down --data-dir %s failed 3 times; its servers may still run:\n%s\n", data_dir.c_str(),
               read_file(log).c_str());
  return false;
}

class Process {
 public:
  // Runs argv[0] with the given arguments; stdout+stderr go to log_path.
  Process(std::vector<std::string> argv, const std::string& log_path,
          std::vector<std::string> extra_env = {}) : log_path_(log_path) {
    const pid_t parent = ::getpid();
    std::string owner = "WEFT_OWNER_PID=" + std::to_string(parent);  // built before the fork
    pid_ = ::fork();
    if (pid_ == 0) {
      // Dies with the test: a test binary that crashes runs no destructor,
      // and its servers would run on. (PR_SET_PDEATHSIG fires when the
      // thread that forked exits: a Process must not outlive the thread that
      // made it; the fixtures make theirs on the test's main thread.)
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);  // the test died before the prctl
      int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) {
        ::dup2(fd, 1);
        ::dup2(fd, 2);
      }
      ::putenv(owner.data());  // first: an extra_env entry replaces it
      for (auto& e : extra_env) ::putenv(const_cast<char*>(e.c_str()));
      std::vector<char*> args;
      for (auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      ::execv(args[0], args.data());
      ::_exit(127);
    }
  }
  ~Process() {
    if (running()) {
      ::kill(pid_, SIGKILL);
      wait_exit(std::chrono::seconds(10));
    }
  }
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }
  bool running() {
    if (exited_) return false;
    int status = 0;
    pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      exited_ = true;
      status_ = status;
      return false;
    }
    return true;
  }
  void signal(int sig) {
    if (running()) ::kill(pid_, sig);
  }
  // Waits for exit; returns the wait status, or nullopt on timeout.
  std::optional<int> wait_exit(std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (running()) {
      if (std::chrono::steady_clock::now() > deadline) return std::nullopt;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return status_;
  }
  std::string log() const { return read_file(log_path_); }

 private:
  pid_t pid_ = -1;
  bool exited_ = false;
  int status_ = 0;
  std::string log_path_;
};

inline void write_file(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// Waits until `path` exists and is non-empty; returns its content.
inline std::optional<std::string> wait_for_file(const std::string& path, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    if (!ss.str().empty()) return ss.str();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return std::nullopt;
}

// Whether process `pid` runs: a zombie (exited, reparented to an init that
// has not reaped it yet) does not.
// A number from the environment (a test's knob: runs, seeds, timings), else `fallback`.
inline uint64_t env_u64(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoull(v, nullptr, 10) : fallback;
}

inline bool pid_alive(pid_t pid) {
  if (pid <= 0 || (::kill(pid, 0) != 0 && errno == ESRCH)) return false;
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto close = stat.rfind(')');
  if (close == std::string::npos || close + 2 >= stat.size()) return false;
  return stat[close + 2] != 'Z' && stat[close + 2] != 'X';
}

}  // namespace weft::testing
