#include "common/mount_table.h"
#include "cli/local_cluster.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "common/assert.h"
#include "common/config.h"
#include "common/durable_file.h"
#include "common/owner_watch.h"
#include "common/port_window.h"
#include "common/processes.h"
#include "meta/meta_client.h"
#include "meta/types.h"
#include "mgmt/mgmt_rpc.h"
#include "mgmt/proto_convert.h"
#include "mgmt/routing.h"
#include "mgmt/service_methods.h"
#include "proto/mgmt.pb.h"
#include "rpc/client.h"
#include "rpc/io_pool.h"

namespace weft::cli::local {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr const char* kHost = "127.0.0.1";
constexpr uint32_t kMgmtdLeaseMs = 3000;
constexpr uint32_t kMgmtdGraceMs = 1000;
constexpr uint32_t kMgmtdTickMs = 200;
constexpr auto kStopWait = 10s;

std::string address(uint16_t port) { return fmt::format("{}:{}", kHost, port); }

// A TOML basic string: "..." with \ and " escaped (paths may hold either).
std::string toml_str(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '\\' || c == '"') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
      continue;
    }
    out += c;
  }
  return out + "\"";
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Readers never see half a file, nor, after a power cut, an empty one (a
// cluster.toml lost that way stopped every later up and down).
Result<void> write_text(const std::string& path, const std::string& text) { return replace_file_durably(path, text); }

bool exists(const std::string& path) {
  std::error_code ec;
  return fs::exists(path, ec);
}

// Where `weft up --mount` mounted (empty: not recorded) and its daemon's pid
// (0: not recorded).
std::string recorded_mount(const Layout& L) {
  std::string path = exists(L.mount_file()) ? read_text(L.mount_file()) : "";
  while (!path.empty() && path.back() == '\n') path.pop_back();
  return path;
}
pid_t recorded_mount_pid(const Layout& L) {
  return exists(L.mount_pid_file())
             ? static_cast<pid_t>(std::strtol(read_text(L.mount_pid_file()).c_str(), nullptr, 10))
             : 0;
}

void remove_file(const std::string& path) {
  std::error_code ec;
  fs::remove(path, ec);
}

// The last `n` lines of a log, indented, for error messages.
std::string log_tail(const std::string& path, size_t n = 6) {
  std::string text = read_text(path);
  std::vector<std::string> lines;
  std::stringstream ss(text);
  for (std::string line; std::getline(ss, line);)
    if (!line.empty()) lines.push_back(line);
  std::string out;
  for (size_t i = lines.size() > n ? lines.size() - n : 0; i < lines.size(); ++i) out += "\n    " + lines[i];
  return out.empty() ? "" : "\n  last lines of " + path + ":" + out;
}

Result<std::string> random_token() {
  int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno_error(errno, "open /dev/urandom");
  unsigned char bytes[16];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    ssize_t r = ::read(fd, bytes + got, sizeof(bytes) - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      ::close(fd);
      return errno_error(r < 0 ? errno : EIO, "read /dev/urandom");
    }
    got += static_cast<size_t>(r);
  }
  ::close(fd);
  std::string hex;
  for (unsigned char b : bytes) hex += fmt::format("{:02x}", b);
  return hex;
}

// Whether 127.0.0.1:port can be bound now (with SO_REUSEADDR, as the servers do).
bool port_free(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  ::close(fd);
  return ok;
}

// `count` distinct free ports outside the kernel's ephemeral range
// (common/port_window.h), so that outgoing connections do not take them
// between restarts.
Result<std::vector<uint16_t>> probe_ports(size_t count) {
  const auto ephemeral = read_ephemeral_range();
  std::optional<PortWindow> window = ephemeral ? listen_port_window(*ephemeral) : PortWindow{20000, 32000};
  if (!window)
    return error(Code::kUnavailable,
                 "every unprivileged port is in the kernel's ephemeral range (net.ipv4.ip_local_port_range = {} {}), "
                 "where outgoing connections take ports at any time: narrow it, or start the servers by hand on "
                 "ports reserved with net.ipv4.ip_local_reserved_ports",
                 ephemeral->first, ephemeral->second);
  std::random_device rd;
  std::mt19937 gen(rd());
  std::uniform_int_distribution<int> dist(window->first, window->last);
  std::set<uint16_t> chosen;
  for (int attempt = 0; attempt < 2000 && chosen.size() < count; ++attempt) {
    auto p = static_cast<uint16_t>(dist(gen));
    if (!chosen.contains(p) && port_free(p)) chosen.insert(p);
  }
  if (chosen.size() < count)
    return error(Code::kUnavailable, "could not find {} free TCP ports on {} in {}..{}", count, kHost, window->first,
                 window->last);
  std::vector<uint16_t> out(chosen.begin(), chosen.end());
  std::shuffle(out.begin(), out.end(), gen);
  return out;
}

// --- configs -----------------------------------------------------------------

std::string header() {
  return "# Written by `weft up` (docs/local-cluster.md). Only written when missing: edits are kept.\n";
}

std::string server_section(const Layout& L, const Role& r, const std::string& token) {
  return fmt::format(
      "[server]\nlisten = {}\ncluster_token = {}\nname = {}\nlog_file = {}\nport_file = {}\n"
      "metrics_listen = \"127.0.0.1:0\"\n",
      toml_str(address(r.port)), toml_str(token), toml_str(r.name), toml_str(L.log(r.name)),
      toml_str(L.port_file(r.name)));
}

std::string mgmtd_config(const Layout& L, const Role& r, const ClusterSpec& spec) {
  return header() + server_section(L, r, spec.cluster_token) +
         fmt::format("\n[mgmtd]\ndata_dir = {}\nlease_ms = {}\ngrace_ms = {}\ntick_ms = {}\n",
                     toml_str(L.data("mgmtd")), kMgmtdLeaseMs, kMgmtdGraceMs, kMgmtdTickMs);
}

// RPC I/O threads of each local storage server: the servers share this
// machine's cores, and more runnable threads than cores cost wake-ups and
// scheduling delay on every request (4 KiB random reads on 2 cores with 3
// servers: 1 thread each gave +24% IOPS and half the p99 of 2 each).
uint32_t storage_io_threads(const ClusterSpec& spec) {
  uint32_t cores = std::max(1u, std::thread::hardware_concurrency());
  return std::clamp(cores / std::max(1u, spec.storage_servers), 1u, 4u);
}

std::string storage_config(const Layout& L, const Role& r, uint32_t server, const ClusterSpec& spec) {
  std::string out = header() + server_section(L, r, spec.cluster_token);
  out += fmt::format("io_threads = {}\n", storage_io_threads(spec));
  out += fmt::format("\n[cluster]\nmgmtd = [{}]\n", toml_str(address(spec.mgmtd_port)));
  for (uint32_t t = 0; t < spec.targets_per_server; ++t)
    out += fmt::format("\n[[targets]]\npath = {}\ncapacity = 0\n", toml_str(L.target_path(server, t)));
  return out;
}

std::string meta_config(const Layout& L, const Role& r, const ClusterSpec& spec, uint32_t chain_count,
                        uint32_t table_id) {
  return header() + server_section(L, r, spec.cluster_token) +
         fmt::format("\n[cluster]\nmgmtd = [{}]\n", toml_str(address(spec.mgmtd_port))) +
         fmt::format("\n[meta]\ndata_dir = {}\nchain_count = {}\nchain_table_id = {}\n", toml_str(L.data("meta")),
                     chain_count, table_id);
}

std::string client_config(const ClusterSpec& spec) {
  // No `meta = [...]`: clients find meta through mgmtd (it registers there).
  return header() + fmt::format("mgmtd = [{}]\ncluster_token = {}\n", toml_str(address(spec.mgmtd_port)),
                                toml_str(spec.cluster_token));
}

// --- locks ---------------------------------------------------------------------

// An flock(2) held while the object lives (its descriptor closes with it);
// empty when it could not be taken.
class FileLock {
 public:
  // Opens (creating it) and tries to lock `path` once; `fd` < 0 when either failed (errno says why).
  static FileLock try_take(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);  // another user's lock file
    if (fd < 0) return FileLock(-1);
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      ::close(fd);
      errno = err;
      return FileLock(-1);
    }
    return FileLock(fd);
  }
  FileLock(FileLock&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  FileLock& operator=(FileLock&&) = delete;
  ~FileLock() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool held() const { return fd_ >= 0; }

 private:
  explicit FileLock(int fd) : fd_(fd) {}
  int fd_;
};

// The machine's port lock: held by a `weft up` that makes a new cluster from
// its probe of free ports until its servers listen on them: two new clusters
// started at once (tests run in parallel) could otherwise both find one port
// free and the second server to bind it fail. Waits up to a minute for
// another `weft up`, then goes on without it (the lock is an aid, never a
// reason to fail).
FileLock take_port_lock() {
  const std::string path = "/tmp/weft-up-ports.lock";  // one for the machine, whatever TMPDIR says
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(1);
  for (;;) {
    FileLock lock = FileLock::try_take(path);
    if (lock.held() || errno != EWOULDBLOCK || std::chrono::steady_clock::now() >= deadline) return lock;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// The directory lock: one `weft up` or `weft down` at a time per cluster directory.
Result<FileLock> take_dir_lock(const Layout& L) {
  FileLock lock = FileLock::try_take(L.lock_file());
  if (lock.held()) return lock;
  if (errno != EWOULDBLOCK) return errno_error(errno, "lock " + L.lock_file());
  return error(Code::kBusy, "another `weft up` or `weft down` is working on {} (lock {})", L.dir, L.lock_file());
}

Result<void> make_dirs(const Layout& L) {
  for (const char* sub : {"", "/conf", "/data", "/logs", "/run"}) {
    std::error_code ec;
    fs::create_directories(L.dir + sub, ec);
    if (ec) return error(Code::kIoError, "cannot create {}{}: {}", L.dir, sub, ec.message());
  }
  return {};
}

std::string absolute_dir(const std::string& dir) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::absolute(dir, ec), ec);
  std::string s = p.string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

// --- processes -------------------------------------------------------------------

std::string self_binary() {
  std::error_code ec;
  std::string s = fs::read_symlink("/proc/self/exe", ec).string();
  const std::string deleted = " (deleted)";
  if (s.size() > deleted.size() && s.ends_with(deleted)) s.resize(s.size() - deleted.size());
  return s.empty() ? "weft" : s;
}

constexpr std::string_view kOwnerEnv = "WEFT_OWNER_PID=";

// This process's environment with WEFT_OWNER_PID set to `owner_pid` (which
// replaces whatever value it had).
std::vector<std::string> environment_with_owner(pid_t owner_pid) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e)
    if (!std::string_view(*e).starts_with(kOwnerEnv)) env.emplace_back(*e);
  env.push_back(fmt::format("{}{}", kOwnerEnv, owner_pid));
  return env;
}

// Runs `exec_path argv...` detached: its own session, stdin from /dev/null,
// stdout and stderr appended to `log`; with `owner_pid` > 0, WEFT_OWNER_PID
// set to it in its environment (it stops when that process exits). Returns
// the child's pid.
Result<pid_t> spawn(const std::string& exec_path, const std::vector<std::string>& argv, const std::string& log,
                    pid_t owner_pid = 0) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  // Built before the fork: the child may only make async-signal-safe calls.
  const std::vector<std::string> env_strings =
      owner_pid > 0 ? environment_with_owner(owner_pid) : std::vector<std::string>{};
  std::vector<char*> env;
  for (const auto& e : env_strings) env.push_back(const_cast<char*>(e.c_str()));
  env.push_back(nullptr);
  char** const envp = owner_pid > 0 ? env.data() : environ;
  // Where close_range(2) is missing (kernels before 5.9) or filtered
  // (seccomp), the child closes descriptors one by one up to this limit.
  struct rlimit files {};
  const int fd_end = ::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY
                         ? static_cast<int>(std::min<rlim_t>(files.rlim_cur, 1 << 20))
                         : 1 << 16;
  std::fflush(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) return errno_error(errno, "fork");
  if (pid == 0) {
    // Only async-signal-safe calls from here on: the parent has threads.
    ::setsid();
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    int in = ::open("/dev/null", O_RDONLY);
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (in >= 0) ::dup2(in, 0);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    if (::close_range(3, ~0U, 0) != 0)  // no asio socket of this process is close-on-exec
      for (int f = 3; f < fd_end; ++f) ::close(f);
    if (exec_path.find('/') == std::string::npos)
      ::execvpe(exec_path.c_str(), args.data(), envp);
    else
      ::execve(exec_path.c_str(), args.data(), envp);
    ::_exit(127);
  }
  return pid;
}

std::string describe_wait_status(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("was killed by signal {}", WTERMSIG(status));
  return "stopped";
}

// Runs a short command to completion (output appended to `log`); its wait
// status, or kTimeout (the command is killed).
Result<int> run_and_wait(const std::vector<std::string>& argv, const std::string& log, std::chrono::seconds timeout) {
  WEFT_TRY(pid_t pid, spawn(argv.front(), argv, log));
  auto until = Clock::now() + timeout;
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) != pid) {
    if (Clock::now() > until) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return error(Code::kTimeout, "{} did not finish in {} s; see {}", argv.front(), timeout.count(), log);
    }
    std::this_thread::sleep_for(20ms);
  }
  return status;
}

bool is_mounted(const std::string& path) { return mount_at(path).has_value(); }

// Unmounts `path` (fusermount3 -u, then -uz: lazily, if something holds it);
// true once it is no longer mounted. Output to `log`.
bool unmount(const std::string& path, const std::string& log) {
  auto rc = run_and_wait({"fusermount3", "-u", path}, log, 10s);
  if (!rc || *rc != 0 || is_mounted(path)) rc = run_and_wait({"fusermount3", "-uz", path}, log, 10s);
  return rc && *rc == 0 && !is_mounted(path);
}

// A connection to the cluster for the waits (mgmtd Status, meta getattr).
struct ClusterRpc {
  explicit ClusterRpc(const ClusterSpec& spec)
      : io(1, "up"),
        client(io, options(spec.cluster_token)),
        mgmt(io, client, {rpc::Endpoint{kHost, spec.mgmtd_port}}, 3000) {}

  static rpc::ClientOptions options(const std::string& token) {
    rpc::ClientOptions co = rpc::ClientOptions::in_cluster(token, "weft up");
    co.call_timeout_ms = 3000;
    return co;
  }

  rpc::IoPool io;
  rpc::Client client;
  mgmt::MgmtRpc mgmt;
};

class Runner {
 public:
  Runner(const UpOptions& o, Layout L, ClusterSpec spec, std::FILE* out)
      : options_(o), L_(std::move(L)), spec_(std::move(spec)), out_(out), roles_(roles(spec_)) {
    exec_path_ = o.binary.empty() ? "/proc/self/exe" : o.binary;
    argv0_ = o.binary.empty() ? self_binary() : o.binary;
  }

  Result<void> run();

 private:
  struct State {
    std::optional<pid_t> pid;
    std::string what;      // "already running", "started", "restarted"
    bool started = false;  // by this call
  };

  Clock::time_point deadline() const { return Clock::now() + std::chrono::seconds(options_.timeout_s); }
  // For the logs: how a process started by this call learns its owner.
  std::string owner_note() const {
    return options_.owner_pid > 0 ? fmt::format("; {}{}", kOwnerEnv, options_.owner_pid) : "";
  }
  const Role& role(const std::string& name) const {
    for (const auto& r : roles_)
      if (r.name == name) return r;
    WEFT_ASSERT(false);
    return roles_.front();
  }

  Result<void> start(const Role& r);
  // Error unless the process we started is still running.
  Result<void> check_alive(const Role& r, const std::string& waiting_for);
  Result<void> wait_port_file(const Role& r);
  Result<void> wait_mgmtd();
  Result<void> wait_storage();
  Result<std::pair<uint32_t, uint32_t>> ensure_chain_table();
  Result<void> wait_meta();
  Result<void> mount();
  void summary(bool was_running);

  const UpOptions& options_;
  const Layout L_;
  const ClusterSpec spec_;
  std::FILE* out_;
  const std::vector<Role> roles_;
  std::string exec_path_;
  std::string argv0_;
  std::map<std::string, State> state_;
  std::map<pid_t, std::string> children_;  // started by this call
  // Incarnation mgmtd knew for a storage address before this call (re)started
  // it: readiness needs a registration from the new process.
  std::map<std::string, uint64_t> old_incarnation_;
  std::unique_ptr<ClusterRpc> rpc_;
  std::string mounted_;
};

Result<void> Runner::start(const Role& r) {
  if (!port_free(r.port))
    return error(Code::kUnavailable,
                 "{}: {} is in use by another program; stop it, or remove {} to start a new cluster elsewhere", r.name,
                 address(r.port), L_.dir);
  remove_file(L_.port_file(r.name));
  {
    std::ofstream log(L_.log(r.name), std::ios::app);
    log << fmt::format("=== weft up: starting {} ({} serve {} --config {}{}) ===\n", r.name, argv0_, r.kind,
                       L_.config(r.name), owner_note());
  }
  WEFT_TRY(pid_t pid, spawn(exec_path_, {argv0_, "serve", r.kind, "--config", L_.config(r.name)}, L_.log(r.name),
                            options_.owner_pid));
  children_[pid] = r.name;
  auto& st = state_[r.name];
  st.started = true;
  st.pid = pid;
  if (auto written = write_text(L_.pid_file(r.name), fmt::format("{}\n", pid)); !written) {
    // Unrecorded, `weft down` could not find it (and the next `up` would find
    // its port taken): it is stopped here instead.
    ::kill(pid, SIGKILL);
    // Bounded, as `weft down`'s: a child stuck in the kernel on a failing
    // disk may not die at once.
    bool reaped = false;
    for (auto until = Clock::now() + 5s; !reaped && Clock::now() < until; std::this_thread::sleep_for(20ms))
      reaped = ::waitpid(pid, nullptr, WNOHANG) == pid;
    children_.erase(pid);
    st.pid.reset();
    return error(written.error().with_context(
        fmt::format("{}: its pid file ({})", r.name,
                    reaped ? "the server was stopped" : fmt::format("pid {} still running after SIGKILL", pid))));
  }
  return {};
}

Result<void> Runner::check_alive(const Role& r, const std::string& waiting_for) {
  auto& st = state_[r.name];
  if (!st.pid) return {};
  pid_t pid = *st.pid;
  if (children_.contains(pid)) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      children_.erase(pid);
      remove_file(L_.pid_file(r.name));
      return error(Code::kUnavailable, "{} (pid {}) {} while {}; see {}{}", r.name, pid, describe_wait_status(status),
                   waiting_for, L_.log(r.name), log_tail(L_.log(r.name)));
    }
    return {};
  }
  if (!is_server_process(pid, r.kind, L_.config(r.name)))
    return error(Code::kUnavailable, "{} (pid {}) stopped while {}; see {}{}", r.name, pid, waiting_for, L_.log(r.name),
                 log_tail(L_.log(r.name)));
  return {};
}

Result<void> Runner::wait_port_file(const Role& r) {
  auto until = deadline();
  std::string what = "starting to listen";
  while (!exists(L_.port_file(r.name))) {
    WEFT_RETURN_IF_ERROR(check_alive(r, what));
    if (Clock::now() > until)
      return error(Code::kTimeout, "{}: not listening after {} s; see {}{}", r.name, options_.timeout_s, L_.log(r.name),
                   log_tail(L_.log(r.name)));
    std::this_thread::sleep_for(50ms);
  }
  return {};
}

Result<void> Runner::wait_mgmtd() {
  const Role& r = role("mgmtd");
  if (state_[r.name].started) WEFT_RETURN_IF_ERROR(wait_port_file(r));
  auto until = deadline();
  std::string last;
  while (true) {
    auto reply = rpc_->mgmt.call<mgmt::pb::StatusReply>(mgmt::kStatus, mgmt::pb::StatusRequest{}, 2000);
    if (reply) return {};
    last = reply.error().message();
    WEFT_RETURN_IF_ERROR(check_alive(r, "waiting for it to answer"));
    if (Clock::now() > until)
      return error(Code::kTimeout, "mgmtd at {} does not answer after {} s ({}); see {}{}", address(r.port),
                   options_.timeout_s, last, L_.log(r.name), log_tail(L_.log(r.name)));
    std::this_thread::sleep_for(100ms);
  }
}

// Every storage server registered (by its address), up, with all its targets
// reported and serving.
Result<void> Runner::wait_storage() {
  auto until = deadline();
  while (true) {
    std::vector<std::string> waiting;  // "storage-2 (not registered)"
    std::string rpc_error;
    auto reply = rpc_->mgmt.call<mgmt::pb::StatusReply>(mgmt::kStatus, mgmt::pb::StatusRequest{}, 2000);
    std::optional<mgmt::RoutingInfo> routing;
    if (reply && !reply->behind().empty()) {
      // Nothing to wait for: mgmtd refuses every server until an operator acts
      // (the text says what to do).
      return error(Code::kVersionMismatch, "mgmtd refuses the storage servers (MGMTD IS BEHIND): {}; see {}",
                   reply->behind(), L_.log("mgmtd"));
    }
    if (!reply) {
      rpc_error = reply.error().message();
    } else if (auto ri = mgmt::from_proto(reply->routing()); ri) {
      routing = std::move(*ri);
    } else {
      rpc_error = ri.error().message();
    }
    if (routing) {
      // Nothing to wait for either: a chain whose every target is offline lost
      // its last copy (mgmt/target_states.h, LOST) and waits for an operator.
      std::string copyless;
      for (const auto& [id, chain] : routing->chains)
        if (mgmt::lost_last_copy(chain)) copyless += fmt::format("{}{}", copyless.empty() ? "" : ", ", id);
      if (!copyless.empty())
        return error(Code::kUnavailable,
                     "chain(s) {} have no copy left: a target came back without its data (see {}); choose the copy "
                     "left and run `weft admin target promote CHAIN TARGET --config {}` (docs/DEPLOY.md, \"A target "
                     "that comes back without its data\")",
                     copyless, L_.log("mgmtd"), L_.client_config());
    }
    for (uint32_t i = 1; i <= spec_.storage_servers; ++i) {
      const Role& r = role("storage-" + std::to_string(i));
      WEFT_RETURN_IF_ERROR(check_alive(r, "waiting for it to register with mgmtd"));
      if (!routing) {
        waiting.push_back(r.name);
        continue;
      }
      const mgmt::NodeInfo* node = nullptr;
      for (const auto& [id, n] : routing->nodes)
        if (n.kind == mgmt::NodeKind::kStorage && n.address == address(r.port)) node = &n;
      auto old = old_incarnation_.find(node ? node->address : "");
      if (node == nullptr ||
          (state_[r.name].started && old != old_incarnation_.end() && node->incarnation == old->second)) {
        waiting.push_back(r.name + " (not registered)");
        continue;
      }
      if (node->state != mgmt::NodeState::kUp) {
        waiting.push_back(r.name + " (down)");
        continue;
      }
      // A server registers before it opens its targets and listens (its
      // port file comes then): until that, clients would be refused.
      if (state_[r.name].started && !exists(L_.port_file(r.name))) {
        waiting.push_back(r.name + " (not listening yet)");
        continue;
      }
      uint32_t serving = 0, reported = 0;
      std::string states;
      for (const auto& [id, t] : routing->targets) {
        if (t.node_id != node->id || !t.reported) continue;
        ++reported;
        if (t.state == mgmt::TargetState::kServing)
          ++serving;
        else
          states += fmt::format(" {}:{}", id, mgmt::to_string(t.state));
      }
      if (reported < spec_.targets_per_server || serving < reported)
        waiting.push_back(fmt::format("{} ({} of {} targets serving{})", r.name, serving, spec_.targets_per_server,
                                      states.empty() ? "" : ";" + states));
    }
    if (waiting.empty()) return {};
    if (Clock::now() > until) {
      std::string names, logs;
      for (const auto& w : waiting) names += (names.empty() ? "" : ", ") + w;
      for (const auto& w : waiting) {
        std::string n = w.substr(0, w.find(' '));
        logs += (logs.empty() ? "" : ", ") + L_.log(n);
      }
      return error(Code::kTimeout, "storage servers not ready after {} s: {}{}; see {}", options_.timeout_s, names,
                   rpc_error.empty() ? "" : " (mgmtd: " + rpc_error + ")", logs);
    }
    std::this_thread::sleep_for(100ms);
  }
}

// The chain table meta uses: an existing one, else a new one with R replicas.
// Returns (table id, chain count).
Result<std::pair<uint32_t, uint32_t>> Runner::ensure_chain_table() {
  auto list = rpc_->mgmt.call<mgmt::pb::ListChainTablesReply>(mgmt::kListChainTables,
                                                              mgmt::pb::ListChainTablesRequest{}, 10000);
  if (!list) return error(Code::kUnavailable, "listing chain tables: {}", list.error().message());
  if (list->tables_size() > 0) {
    const auto& t = list->tables(0);
    return std::pair<uint32_t, uint32_t>{t.id(), static_cast<uint32_t>(t.chains_size())};
  }
  mgmt::pb::CreateChainTableRequest req;
  req.set_replicas(spec_.replicas);
  req.set_chains_per_target(0);
  auto created = rpc_->mgmt.call<mgmt::pb::CreateChainTableReply>(mgmt::kCreateChainTable, req, 60000);
  if (!created)
    return error(Code::kUnavailable, "creating a chain table with {} replicas: {}", spec_.replicas,
                 created.error().message());
  fmt::print(out_, "created chain table {}: {} chain(s) of {} replicas\n", created->table().id(),
             created->chains_size(), created->table().replicas());
  return std::pair<uint32_t, uint32_t>{created->table().id(), static_cast<uint32_t>(created->chains_size())};
}

Result<void> Runner::wait_meta() {
  const Role& r = role("meta");
  if (state_[r.name].started) WEFT_RETURN_IF_ERROR(wait_port_file(r));
  meta::MetaClientOptions mo;
  mo.addresses = {rpc::Endpoint{kHost, r.port}};
  mo.call_timeout_ms = 2000;
  mo.attempts_max = 1;
  mo.retry_time_ms_max = 2000;
  meta::MetaClient client(rpc_->io, rpc_->client, mo);
  auto until = deadline();
  while (true) {
    auto attr = client.getattr(meta::Cred::root(), meta::kRootIno);
    if (attr) break;
    WEFT_RETURN_IF_ERROR(check_alive(r, "waiting for it to answer"));
    if (Clock::now() > until)
      return error(Code::kTimeout, "meta at {} does not answer a getattr of / after {} s ({}); see {}{}",
                   address(r.port), options_.timeout_s, attr.error().message(), L_.log(r.name),
                   log_tail(L_.log(r.name)));
    std::this_thread::sleep_for(100ms);
  }
  // Clients find meta through mgmtd: wait for its registration too.
  until = deadline();
  while (true) {
    std::string why = "not registered";
    auto reply = rpc_->mgmt.call<mgmt::pb::StatusReply>(mgmt::kStatus, mgmt::pb::StatusRequest{}, 2000);
    if (!reply) why = reply.error().message();
    for (int i = 0; reply && i < reply->routing().nodes_size(); ++i) {
      const auto& n = reply->routing().nodes(i);
      if (n.kind() != static_cast<uint32_t>(mgmt::NodeKind::kMeta) || n.address() != address(r.port)) continue;
      auto old = old_incarnation_.find(n.address());
      if (state_[r.name].started && old != old_incarnation_.end() && old->second == n.incarnation()) continue;
      if (n.state() == static_cast<uint32_t>(mgmt::NodeState::kUp)) return {};
      why = "registered but down";
    }
    WEFT_RETURN_IF_ERROR(check_alive(r, "waiting for it to register with mgmtd"));
    if (Clock::now() > until)
      return error(Code::kTimeout, "meta at {} not registered with mgmtd after {} s ({}); see {}{}", address(r.port),
                   options_.timeout_s, why, L_.log(r.name), log_tail(L_.log(r.name)));
    std::this_thread::sleep_for(100ms);
  }
}

Result<void> Runner::mount() {
  std::string path = absolute_dir(options_.mount);
  if (exists(L_.mount_file())) {
    const std::string recorded = recorded_mount(L_);
    if (is_mounted(recorded)) {
      if (recorded != path)
        return error(Code::kExists, "the cluster is already mounted at {}; `weft down` first to mount elsewhere",
                     recorded);
      mounted_ = recorded;
      return {};
    }
    remove_file(L_.mount_file());
  }
  std::error_code ec;
  fs::create_directories(path, ec);
  std::string log = L_.log("mount");
  remove_file(L_.mount_pid_file());
  // weft mount stops its daemon and detaches the mount point itself when the
  // daemon does not serve within --ready-timeout: so it is given this run's
  // timeout and waited for a little longer (killing it instead would leave its
  // daemon, in a session of its own, holding a dead mount).
  std::vector<std::string> argv = {argv0_};
  for (auto& a : mount_daemon_args(L_, path, options_.timeout_s)) argv.push_back(std::move(a));  // log: its --log-file
  WEFT_TRY(pid_t pid, spawn(exec_path_, argv, log, options_.owner_pid));
  auto until = deadline() + 30s;
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) != pid) {
    if (Clock::now() > until) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return error(Code::kTimeout, "weft mount {} did not finish in {} s; see {}", path, options_.timeout_s + 30, log);
    }
    std::this_thread::sleep_for(50ms);
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return error(Code::kIoError, "weft mount {} {}; see {}{}", path, describe_wait_status(status), log, log_tail(log));
  if (auto written = write_text(L_.mount_file(), path + "\n"); !written) {
    // Unrecorded, `weft down` would not unmount it: undone here, as down does.
    const bool undone = unmount(path, log);
    return error(written.error().with_context(
        fmt::format("mount {}: its record ({})", path,
                    undone ? "unmounted again" : "could not unmount it either: fusermount3 -u " + path)));
  }
  mounted_ = path;
  return {};
}

void Runner::summary(bool was_running) {
  if (was_running)
    fmt::print(out_, "weft cluster in {} is already running; nothing changed\n", L_.dir);
  else
    fmt::print(out_, "weft cluster in {} is up\n", L_.dir);
  for (const auto& r : roles_) {
    const auto& st = state_[r.name];
    fmt::print(out_, "  {:<11} pid {:<8} {:<16} {:<16} log {}\n", r.name, st.pid ? *st.pid : 0, address(r.port),
               st.what, L_.log(r.name));
  }
  fmt::print(out_, "client config: {}\n", L_.client_config());
  if (options_.owner_pid > 0 && !was_running)
    fmt::print(out_, "what this `up` started stops when process {} exits (--owner-pid)\n", options_.owner_pid);
  if (!mounted_.empty())
    fmt::print(out_, "mounted at:    {}\n", mounted_);
  else
    fmt::print(out_, "not mounted (weft up --data-dir {} --mount PATH)\n", L_.dir);
  fmt::print(out_, "use it:\n  weft status --config {}\n  weft down --data-dir {}\n", L_.client_config(), L_.dir);
}

// A mount whose daemon died (OOM-killed, kill -9) stays in the mount table,
// answering ENOTCONN to everything: it is detached here (a Weft mount only),
// so that `up --mount` mounts afresh instead of taking it for running.
void detach_dead_mount(const Layout& L, std::FILE* out) {
  const std::string recorded = recorded_mount(L);
  auto m = recorded.empty() ? std::nullopt : mount_at(recorded);
  if (!m || m->type != "fuse.weft") return;
  const pid_t pid = recorded_mount_pid(L);
  if (pid > 0 && is_our_mount_daemon(pid, L, recorded)) return;  // served by its daemon
  auto rc = run_and_wait({"fusermount3", "-uz", recorded}, L.log("mount"), 10s);
  if (is_mounted(recorded)) {
    fmt::print(out, "the mount at {} lost its daemon and could not be detached{}\n", recorded,
               rc ? "" : fmt::format(": {}", rc.error().message()));
    return;
  }
  fmt::print(out, "the mount at {} had lost its daemon: detached\n", recorded);
  remove_file(L.mount_file());
  remove_file(L.mount_pid_file());
}

Result<void> Runner::run() {
  detach_dead_mount(L_, out_);
  // What is alive already (stale pid files are removed here).
  bool all_running = true;
  for (const auto& r : roles_) {
    bool had_pid_file = exists(L_.pid_file(r.name));
    auto pid = live_pid(L_, r);
    if (had_pid_file && !pid) fmt::print(out_, "removed stale pid file {}\n", L_.pid_file(r.name));
    if (pid) {
      state_[r.name] = State{pid, "already running", false};
    } else {
      all_running = false;
      state_[r.name] = State{};
    }
  }
  if (std::string recorded = recorded_mount(L_); !recorded.empty() && is_mounted(recorded)) mounted_ = recorded;
  if (all_running && (options_.mount.empty() || mounted_ == absolute_dir(options_.mount))) {
    summary(true);
    return {};
  }
  rpc_ = std::make_unique<ClusterRpc>(spec_);

  // A role that ran before (it has data) is "restarted", else "started".
  auto start_role = [&](const Role& r) -> Result<void> {
    auto& st = state_[r.name];
    if (st.pid) return {};
    bool ran_before = exists(L_.data(r.name));
    st.what = ran_before ? "restarted" : "started";
    if (!exists(L_.config(r.name)))
      return error(Code::kNotFound, "{} is missing; restore it or remove {} to start a new cluster", L_.config(r.name),
                   L_.dir);
    fmt::print(out_, "{} {}...\n", ran_before ? "restarting" : "starting", r.name);
    std::fflush(out_);
    return start(r);
  };

  WEFT_RETURN_IF_ERROR(start_role(role("mgmtd")));
  WEFT_RETURN_IF_ERROR(wait_mgmtd());
  if (auto st = rpc_->mgmt.call<mgmt::pb::StatusReply>(mgmt::kStatus, mgmt::pb::StatusRequest{}, 5000); st)
    for (const auto& n : st->routing().nodes()) old_incarnation_[n.address()] = n.incarnation();
  for (uint32_t i = 1; i <= spec_.storage_servers; ++i)
    WEFT_RETURN_IF_ERROR(start_role(role("storage-" + std::to_string(i))));
  WEFT_RETURN_IF_ERROR(wait_storage());
  WEFT_TRY(auto table, ensure_chain_table());
  const Role& meta_role = role("meta");
  if (!exists(L_.config("meta")))
    WEFT_RETURN_IF_ERROR(write_text(L_.config("meta"), meta_config(L_, meta_role, spec_, table.second, table.first)));
  WEFT_RETURN_IF_ERROR(start_role(meta_role));
  WEFT_RETURN_IF_ERROR(wait_meta());
  if (!options_.mount.empty()) WEFT_RETURN_IF_ERROR(mount());
  summary(false);
  return {};
}

// The flags that may not change once DIR holds a cluster.
Result<void> check_flags(const UpOptions& o, const ClusterSpec& spec, const std::string& source) {
  auto disagree = [&](const char* flag, uint32_t given, uint32_t has) {
    return error(Code::kInvalidArgument,
                 "{} was created with {} {} (see {}); it cannot be changed to {}: drop the flag, or use another "
                 "--data-dir",
                 fs::path(source).parent_path().string(), flag, has, source, given);
  };
  if (o.storage_servers && *o.storage_servers != spec.storage_servers)
    return disagree("--storage-servers", *o.storage_servers, spec.storage_servers);
  if (o.targets_per_server && *o.targets_per_server != spec.targets_per_server)
    return disagree("--targets-per-server", *o.targets_per_server, spec.targets_per_server);
  if (o.replicas && *o.replicas != spec.replicas) return disagree("--replicas", *o.replicas, spec.replicas);
  if (o.base_port && *o.base_port != spec.mgmtd_port) return disagree("--base-port", *o.base_port, spec.mgmtd_port);
  return {};
}

// The flags of a new cluster, checked before anything is created.
Result<ClusterSpec> check_new(const UpOptions& o) {
  ClusterSpec spec;
  spec.storage_servers = o.storage_servers.value_or(kDefaultStorageServers);
  spec.targets_per_server = o.targets_per_server.value_or(kDefaultTargetsPerServer);
  spec.replicas = o.replicas.value_or(kDefaultReplicas);
  if (spec.storage_servers < 1 || spec.storage_servers > 64)
    return error(Code::kInvalidArgument, "--storage-servers must be within 1..64 (got {})", spec.storage_servers);
  if (spec.targets_per_server < 1 || spec.targets_per_server > 64)
    return error(Code::kInvalidArgument, "--targets-per-server must be within 1..64 (got {})", spec.targets_per_server);
  if (spec.replicas < 1 || spec.replicas > 16)
    return error(Code::kInvalidArgument, "--replicas must be within 1..16 (got {})", spec.replicas);
  if (spec.replicas > spec.storage_servers)
    return error(Code::kInvalidArgument,
                 "--replicas {} needs at least {} storage servers (the replicas of a chain go on distinct servers), "
                 "but --storage-servers is {}",
                 spec.replicas, spec.replicas, spec.storage_servers);
  size_t count = 2 + spec.storage_servers;
  if (o.base_port && (*o.base_port < 1024 || *o.base_port + count - 1 > 65535))
    return error(Code::kInvalidArgument, "--base-port {}: the cluster needs ports {}..{} (within 1024..65535)",
                 *o.base_port, *o.base_port, *o.base_port + count - 1);
  return spec;
}

Result<ClusterSpec> new_spec(const UpOptions& o) {
  WEFT_TRY(ClusterSpec spec, check_new(o));
  WEFT_TRY(spec.cluster_token, random_token());
  size_t count = 2 + spec.storage_servers;
  std::vector<uint16_t> ports;
  if (o.base_port) {
    for (size_t i = 0; i < count; ++i) {
      auto p = static_cast<uint16_t>(*o.base_port + i);
      if (!port_free(p))
        return error(Code::kUnavailable, "--base-port {}: port {} is in use (the cluster needs {}..{})", *o.base_port,
                     p, *o.base_port, *o.base_port + count - 1);
      ports.push_back(p);
    }
  } else {
    WEFT_TRY(ports, probe_ports(count));
  }
  spec.mgmtd_port = ports[0];
  spec.meta_port = ports[1];
  spec.storage_ports.assign(ports.begin() + 2, ports.end());
  return spec;
}

// The configs `weft up` keeps (edits too) repeat what cluster.toml decides:
// each server's listen address and the cluster token, and the client's mgmtd
// address. One that differs (a hand edit) would start a server where `up`
// does not wait for it, or one the others refuse: refused here, naming it.
Result<void> check_configs_agree(const Layout& L, const ClusterSpec& spec) {
  auto differs = [&](const std::string& file, const std::string& what) {
    return error(Code::kConfig,
                 "{}: {} differs from {} (which `weft up` and `weft down` go by): make them agree, or remove {} to "
                 "have it written again",
                 file, what, L.cluster_file(), file);
  };
  for (const Role& r : roles(spec)) {
    const std::string file = L.config(r.name);
    if (!exists(file)) continue;
    WEFT_TRY(Config c, Config::load_file(file));
    WEFT_TRY(Config server, c.table("server"));
    WEFT_TRY(std::string listen, server.get_string("listen", ""));
    if (listen != address(r.port))
      return differs(file, fmt::format("[server] listen = \"{}\" (cluster.toml: port {})", listen, r.port));
    WEFT_TRY(std::string token, server.get_string("cluster_token", ""));
    if (token != spec.cluster_token) return differs(file, "[server] cluster_token");
  }
  if (exists(L.client_config())) {
    WEFT_TRY(Config c, Config::load_file(L.client_config()));
    WEFT_TRY(std::string token, c.get_string("cluster_token", ""));
    if (token != spec.cluster_token) return differs(L.client_config(), "cluster_token");
    WEFT_TRY(std::vector<std::string> mgmtd, c.get_strings("mgmtd"));
    if (std::find(mgmtd.begin(), mgmtd.end(), address(spec.mgmtd_port)) == mgmtd.end())
      return differs(L.client_config(), fmt::format("mgmtd (cluster.toml: port {})", spec.mgmtd_port));
  }
  return {};
}

// No cluster.toml (it is written last): configs here were left by a first
// `up` that stopped before it. This `up` decides anew (other ports, another
// token), so they go, unless a server started from one still runs.
Result<void> remove_unfinished_configs(const Layout& L) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(L.conf_dir(), ec)) {
    if (e.path().extension() != ".toml") continue;
    const std::string name = e.path().stem().string();
    const Role role{name, name.starts_with("storage-") ? "storage" : name, 0};
    if (auto pid = live_pid(L, role))
      return error(Code::kBusy,
                   "{} (pid {}) runs from {}, left by a `weft up` that did not finish (there is no {} yet): stop it, "
                   "then run `weft up` again",
                   name, *pid, L.config(name), L.cluster_file());
    remove_file(L.config(name));
  }
  if (ec) return error(Code::kIoError, "list {}: {}", L.conf_dir(), ec.message());
  remove_file(L.client_config());
  return {};
}

// Writes whatever config is missing (meta's needs the chain table: later).
Result<void> write_configs(const Layout& L, const ClusterSpec& spec) {
  for (const auto& r : roles(spec)) {
    if (r.kind == "meta" || exists(L.config(r.name))) continue;
    std::string text;
    if (r.kind == "mgmtd") {
      text = mgmtd_config(L, r, spec);
    } else {
      uint32_t server = static_cast<uint32_t>(std::stoul(r.name.substr(std::string("storage-").size())));
      text = storage_config(L, r, server, spec);
    }
    WEFT_RETURN_IF_ERROR(write_text(L.config(r.name), text));
  }
  if (!exists(L.client_config())) WEFT_RETURN_IF_ERROR(write_text(L.client_config(), client_config(spec)));
  return {};
}

}  // namespace

// --- ClusterSpec ------------------------------------------------------------------

std::string ClusterSpec::to_toml() const {
  std::string out = fmt::format(
      "# What `weft up` decided for this directory (docs/local-cluster.md). Later `weft up` runs reuse it.\n"
      "storage_servers = {}\ntargets_per_server = {}\nreplicas = {}\ncluster_token = {}\n"
      "mgmtd_port = {}\nmeta_port = {}\n",
      storage_servers, targets_per_server, replicas, toml_str(cluster_token), mgmtd_port, meta_port);
  for (size_t i = 0; i < storage_ports.size(); ++i)
    out += fmt::format("\n[[storage]]  # storage-{}\nport = {}\n", i + 1, storage_ports[i]);
  return out;
}

Result<ClusterSpec> ClusterSpec::parse(const std::string& text, const std::string& source) {
  WEFT_TRY(Config c, Config::parse(text, source));
  ClusterSpec s;
  WEFT_TRY(int64_t n, c.get_int_in("storage_servers", 1, 64));
  WEFT_TRY(int64_t m, c.get_int_in("targets_per_server", 1, 64));
  WEFT_TRY(int64_t r, c.get_int_in("replicas", 1, 16));
  WEFT_TRY(s.cluster_token, c.get_string("cluster_token"));
  WEFT_TRY(int64_t mp, c.get_int_in("mgmtd_port", 1, 65535));
  WEFT_TRY(int64_t meta, c.get_int_in("meta_port", 1, 65535));
  WEFT_TRY(auto servers, c.tables("storage"));
  for (const auto& t : servers) {
    WEFT_TRY(int64_t port, t.get_int_in("port", 1, 65535));
    s.storage_ports.push_back(static_cast<uint16_t>(port));
  }
  s.storage_servers = static_cast<uint32_t>(n);
  s.targets_per_server = static_cast<uint32_t>(m);
  s.replicas = static_cast<uint32_t>(r);
  s.mgmtd_port = static_cast<uint16_t>(mp);
  s.meta_port = static_cast<uint16_t>(meta);
  if (s.storage_ports.size() != s.storage_servers)
    return error(Code::kConfig, "{}: {} [[storage]] entries for storage_servers = {}", source, s.storage_ports.size(),
                 s.storage_servers);
  if (s.cluster_token.empty()) return error(Code::kConfig, "{}: key 'cluster_token' is empty", source);
  return s;
}
std::vector<Role> roles(const ClusterSpec& spec) {
  std::vector<Role> out;
  out.push_back({"mgmtd", "mgmtd", spec.mgmtd_port});
  for (uint32_t i = 0; i < spec.storage_servers; ++i)
    out.push_back({"storage-" + std::to_string(i + 1), "storage", spec.storage_ports.at(i)});
  out.push_back({"meta", "meta", spec.meta_port});
  return out;
}

std::vector<std::string> mount_daemon_args(const Layout& layout, const std::string& mount_path, int ready_timeout_s) {
  return {"mount",         mount_path, "--config",   layout.client_config(), "--background",
          "--pid-file",    layout.mount_pid_file(), "--log-file", layout.log("mount"), "--ready-timeout",
          std::to_string(ready_timeout_s)};
}

bool is_our_mount_daemon(pid_t pid, const Layout& layout, const std::string& mount_path) {
  if (!pid_running(pid)) return false;
  auto args = proc_cmdline(pid);
  const auto want = mount_daemon_args(layout, mount_path, 0);
  if (args.size() != want.size() + 1) return false;
  for (size_t i = 0; i + 1 < want.size(); ++i) {  // the last: --ready-timeout's value, whatever it was
    if (i == 1 && mount_path.empty()) continue;
    if (args[i + 1] != want[i]) return false;
  }
  return true;
}

std::optional<pid_t> live_pid(const Layout& layout, const Role& role) {
  std::string path = layout.pid_file(role.name);
  if (!exists(path)) return std::nullopt;
  std::string text = read_text(path);
  char* end = nullptr;
  long pid = std::strtol(text.c_str(), &end, 10);
  if (pid > 0 && is_server_process(static_cast<pid_t>(pid), role.kind, layout.config(role.name)))
    return static_cast<pid_t>(pid);
  remove_file(path);  // stale: the process is gone, a zombie, or another program
  return std::nullopt;
}

Result<void> up(const UpOptions& options, std::FILE* out) {
  Layout L{absolute_dir(options.data_dir)};
  if (options.owner_pid != 0) WEFT_RETURN_IF_ERROR(check_owner(options.owner_pid));  // before anything starts
  if (!options.mount.empty() && !options.mount_available)
    return error(Code::kNotSupported,
                 "--mount: this weft binary has no `weft mount` command yet; start without --mount and mount later");
  if (!exists(L.cluster_file())) WEFT_RETURN_IF_ERROR(check_new(options));  // before creating anything
  WEFT_RETURN_IF_ERROR(make_dirs(L));
  WEFT_TRY(FileLock lock, take_dir_lock(L));
  ClusterSpec spec;
  // A new cluster's, until runner.run() returns (its servers listen then).
  // (A restart of stopped servers does not take it: it would hold it while
  // it waits for them, up to minutes, and every other `weft up` with it.)
  std::optional<FileLock> ports_lock;
  if (exists(L.cluster_file())) {
    WEFT_TRY(spec, ClusterSpec::parse(read_text(L.cluster_file()), L.cluster_file()));
    WEFT_RETURN_IF_ERROR(check_flags(options, spec, L.cluster_file()));
    WEFT_RETURN_IF_ERROR(check_configs_agree(L, spec));
    WEFT_RETURN_IF_ERROR(write_configs(L, spec));  // any that went missing
  } else {
    WEFT_RETURN_IF_ERROR(remove_unfinished_configs(L));
    ports_lock.emplace(take_port_lock());
    WEFT_TRY(spec, new_spec(options));
    WEFT_RETURN_IF_ERROR(write_configs(L, spec));
    // Last: its presence means the directory holds a complete cluster definition.
    WEFT_RETURN_IF_ERROR(write_text(L.cluster_file(), spec.to_toml()));
  }
  Runner runner(options, L, spec, out);
  return runner.run();
}

Result<void> down(const std::string& data_dir, std::FILE* out) {
  Layout L{absolute_dir(data_dir)};
  if (!exists(L.cluster_file())) {
    fmt::print(out, "no weft cluster in {} (no cluster.toml): nothing to stop\n", L.dir);
    return {};
  }
  WEFT_TRY(ClusterSpec spec, ClusterSpec::parse(read_text(L.cluster_file()), L.cluster_file()));
  WEFT_RETURN_IF_ERROR(make_dirs(L));
  WEFT_TRY(FileLock lock, take_dir_lock(L));
  Status first_error;
  bool did_something = false;

  std::string mount_path;  // where `weft up --mount` mounted, when recorded
  if (exists(L.mount_file())) {
    const std::string path = recorded_mount(L);
    mount_path = path;
    if (!path.empty() && is_mounted(path)) {
      did_something = true;
      std::string log = L.log("mount");
      if (unmount(path, log)) {
        fmt::print(out, "unmounted {}\n", path);
      } else {
        first_error = Status(Code::kIoError,
                             fmt::format("could not unmount {} (fusermount3 -u and -uz failed; see {})", path, log));
        fmt::print(out, "could not unmount {}\n", path);
      }
    }
    if (first_error.ok()) remove_file(L.mount_file());
  }
  // The mount daemon exits once unmounted; make sure of it.
  if (exists(L.mount_pid_file())) {
    const pid_t pid = recorded_mount_pid(L);
    // Only the daemon `weft up --mount` started (its whole command line): the
    // pid file may name another process by now.
    auto is_mount_daemon = [&](pid_t p) { return is_our_mount_daemon(p, L, mount_path); };
    for (int sig : {0, SIGTERM, SIGKILL}) {
      if (!is_mount_daemon(pid)) break;
      if (sig != 0) ::kill(pid, sig);
      auto until = Clock::now() + (sig == SIGKILL ? 5s : 10s);
      while (is_mount_daemon(pid) && Clock::now() < until) std::this_thread::sleep_for(20ms);
      if (!is_mount_daemon(pid)) {
        did_something = true;
        fmt::print(out, "stopped the mount daemon (pid {}{})\n", pid,
                   sig == 0         ? ""
                   : sig == SIGTERM ? "; SIGTERM"
                                    : "; SIGKILL");
      }
    }
    if (!is_mount_daemon(pid)) remove_file(L.mount_pid_file());
  }

  // Reverse start order, by tier: meta, then every storage server together, then mgmtd.
  std::vector<Role> all = roles(spec);
  std::vector<std::vector<Role>> tiers = {{all.back()}, {all.begin() + 1, all.end() - 1}, {all.front()}};
  for (const auto& tier : tiers) {
    std::vector<std::pair<Role, pid_t>> running;
    for (const auto& r : tier) {
      auto pid = live_pid(L, r);
      if (!pid) continue;
      if (::kill(*pid, SIGTERM) != 0) {  // EPERM: another user's cluster (`sudo weft up`)
        const int err = errno;
        did_something = true;
        Status why(Code::kNotPermitted, fmt::format("cannot stop {} (pid {}): {}", r.name, *pid, std::strerror(err)));
        fmt::print(out, "{}\n", why.message());
        if (first_error.ok()) first_error = why;
        continue;
      }
      running.emplace_back(r, *pid);
    }
    auto until = Clock::now() + kStopWait;
    std::vector<bool> done(running.size(), false);
    while (true) {
      bool all_done = true;
      for (size_t i = 0; i < running.size(); ++i) {
        if (!done[i])
          done[i] = !is_server_process(running[i].second, running[i].first.kind, L.config(running[i].first.name));
        all_done = all_done && done[i];
      }
      if (all_done || Clock::now() > until) break;
      std::this_thread::sleep_for(20ms);
    }
    for (size_t i = 0; i < running.size(); ++i) {
      const auto& [r, pid] = running[i];
      did_something = true;
      if (!done[i]) {
        ::kill(pid, SIGKILL);
        auto kill_until = Clock::now() + 5s;
        while (is_server_process(pid, r.kind, L.config(r.name)) && Clock::now() < kill_until)
          std::this_thread::sleep_for(20ms);
        if (is_server_process(pid, r.kind, L.config(r.name))) {
          // Still there (stuck in the kernel on a hung disk): its pid file
          // stays, so a later `weft down` finds it and `weft up` says so.
          Status why(Code::kBusy, fmt::format("{} (pid {}) is still running after SIGKILL", r.name, pid));
          fmt::print(out, "{}\n", why.message());
          if (first_error.ok()) first_error = why;
          continue;
        }
        fmt::print(out, "stopped {} (pid {}; SIGKILL after {} s)\n", r.name, pid,
                   std::chrono::duration_cast<std::chrono::seconds>(kStopWait).count());
      } else {
        fmt::print(out, "stopped {} (pid {})\n", r.name, pid);
      }
      remove_file(L.pid_file(r.name));
      remove_file(L.port_file(r.name));
    }
  }
  if (!did_something) fmt::print(out, "nothing running in {}\n", L.dir);
  if (!first_error.ok()) return std::unexpected(first_error);
  return {};
}

}  // namespace weft::cli::local
