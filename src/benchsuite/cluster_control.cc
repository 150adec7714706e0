#include "benchsuite/cluster_control.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "client/cluster_config.h"
#include "common/processes.h"
#include "mgmt/mgmt_rpc.h"
#include "mgmt/proto_convert.h"
#include "mgmt/service_methods.h"
#include "rpc/client.h"
#include "rpc/io_pool.h"

namespace weft::bench {
namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class WatchImpl final : public ClusterWatch {
 public:
  explicit WatchImpl(const client::ClusterConfig& cc)
      : io_(1, "bench-watch"), client_(io_, options(cc)), rpc_(io_, client_, cc.mgmtd, 2000) {}

  static rpc::ClientOptions options(const client::ClusterConfig& cc) {
    rpc::ClientOptions co = rpc::ClientOptions::in_cluster(cc.cluster_token, "weft bench");
    co.call_timeout_ms = 2000;
    co.tcp = cc.tcp;
    co.local_socket = cc.local_socket;
    return co;
  }

  Result<ServingState> poll() override {
    auto reply = rpc_.call<mgmt::pb::StatusReply>(mgmt::kStatus, mgmt::pb::StatusRequest{}, 2000);
    if (!reply) return std::unexpected(reply.error());
    auto routing = mgmt::from_proto(reply->routing());
    if (!routing) return std::unexpected(routing.error());
    ServingState s;
    for (const auto& [id, n] : routing->nodes)
      if (n.kind == mgmt::NodeKind::kStorage && n.state != mgmt::NodeState::kUp)
        s.detail += fmt::format(" node {} ({}) {};", id, n.address, mgmt::to_string(n.state));
    for (const auto& [id, t] : routing->targets)
      if (t.state != mgmt::TargetState::kServing || !t.reported)
        s.detail += fmt::format(" target {} {}{};", id, mgmt::to_string(t.state), t.reported ? "" : " (not reported)");
    s.all_serving = s.detail.empty() && !routing->targets.empty();
    return s;
  }

 private:
  rpc::IoPool io_;
  rpc::Client client_;
  mgmt::MgmtRpc rpc_;
};

}  // namespace

namespace {

// The server `weft up` starts for `role` of DATA_DIR: `serve KIND --config
// DIR/conf/<role>.toml`, DIR absolute as `weft up` writes it.
struct RoleServer {
  std::string kind, config;
  RoleServer(const std::string& data_dir, const std::string& role)
      : kind(role.starts_with("storage-") ? "storage" : role) {
    std::error_code ec;
    std::string dir = std::filesystem::weakly_canonical(std::filesystem::absolute(data_dir, ec), ec).string();
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    config = dir + "/conf/" + role + ".toml";
  }
  bool is(pid_t pid) const { return is_server_process(pid, kind, config); }
};

// The live pid of `role` from DATA_DIR/run/<role>.pid, checked to be the
// server `weft up` started for it (`... serve KIND --config
// DATA_DIR/conf/<role>.toml`, DATA_DIR absolute as `weft up` writes it): the
// pid file may name a reused pid by now, another cluster's server even.
Result<pid_t> role_pid(const std::string& data_dir, const std::string& role) {
  std::string pid_file = data_dir + "/run/" + role + ".pid";
  std::string text = read_text(pid_file);
  if (text.empty()) return error(Code::kNotFound, "{}: missing or empty (is the cluster up?)", pid_file);
  pid_t pid = 0;
  try {
    pid = static_cast<pid_t>(std::stol(text));
  } catch (...) {
    return error(Code::kInvalidArgument, "{}: not a pid: {}", pid_file, text);
  }
  if (!RoleServer(data_dir, role).is(pid)) {
    std::string cmdline;
    for (const auto& a : proc_cmdline(pid)) cmdline += (cmdline.empty() ? "" : " ") + a;
    return error(Code::kNotFound, "{}: pid {} is not {} of this cluster (cmdline '{}')", pid_file, pid, role, cmdline);
  }
  return pid;
}

// Waits up to `timeout` for the child `pid` to end; its status, or nullopt.
std::optional<int> wait_child(pid_t pid, std::chrono::milliseconds timeout) {
  auto until = std::chrono::steady_clock::now() + timeout;
  while (true) {
    int status = 0;
    pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (r < 0) return -1;  // not our child any more (reaped elsewhere)
    if (std::chrono::steady_clock::now() > until) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

class ControlImpl final : public ClusterControl {
 public:
  ControlImpl(std::string data_dir, std::string binary, std::unique_ptr<ClusterWatch> watch)
      : data_dir_(std::move(data_dir)), binary_(std::move(binary)), watch_(std::move(watch)) {}
  ~ControlImpl() override { (void)stop_up(); }

  Result<pid_t> kill(const std::string& role) override { return kill_role(data_dir_, role); }
  Result<void> start_up(const std::string& log) override {
    if (up_pid_ > 0) return error(Code::kExists, "`weft up` (pid {}) is still running", up_pid_);
    WEFT_TRY(pid_t pid, spawn_up(binary_, data_dir_, log));
    up_pid_ = pid;
    up_status_.reset();
    return {};
  }
  std::optional<int> up_status() override {
    if (up_pid_ > 0) {
      int status = 0;
      if (::waitpid(up_pid_, &status, WNOHANG) == up_pid_) {
        up_status_ = status;
        up_pid_ = -1;
      }
    }
    return up_status_;
  }
  std::string stop_up() override {
    if (up_pid_ <= 0) return "";
    pid_t pid = up_pid_;
    up_pid_ = -1;
    ::kill(pid, SIGTERM);
    auto status = wait_child(pid, std::chrono::seconds(10));
    std::string what = fmt::format("SIGTERM to `weft up` (pid {})", pid);
    if (!status) {
      ::kill(pid, SIGKILL);
      status = wait_child(pid, std::chrono::seconds(10));
      what += ", SIGKILL after 10 s";
    }
    up_status_ = status;
    return what + (status ? ", reaped" : ", NOT reaped");
  }
  Result<ServingState> poll() override { return watch_->poll(); }

  Result<std::string> restart_meta() override {
    WEFT_TRY(pid_t pid, role_pid(data_dir_, "meta"));
    if (::kill(pid, SIGTERM) != 0) return errno_error(errno, fmt::format("kill -TERM {} (meta)", pid));
    std::string how = "SIGTERM";
    // Checked at every look, not by pid alone: once it exited, its pid may be another process's.
    const RoleServer meta(data_dir_, "meta");
    auto still = [&] { return meta.is(pid); };
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (still() && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (still()) {
      ::kill(pid, SIGKILL);
      how = "SIGKILL after 30 s";
      until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (still() && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    std::string log = data_dir_ + "/logs/bench-up.log";
    WEFT_TRY(pid_t up, spawn_up(binary_, data_dir_, log));
    auto status = wait_child(up, std::chrono::seconds(120));
    if (!status) {
      ::kill(up, SIGKILL);
      (void)wait_child(up, std::chrono::seconds(10));
      return error(Code::kTimeout, "`weft up --data-dir {}` did not finish in 120 s (see {})", data_dir_, log);
    }
    if (!(WIFEXITED(*status) && WEXITSTATUS(*status) == 0))
      return error(Code::kUnavailable, "`weft up --data-dir {}` failed (see {})", data_dir_, log);
    return fmt::format("meta server restarted ({} to pid {}, then `weft up`): its RocksDB memtable and block cache "
                       "start empty",
                       how, pid);
  }

 private:
  std::string data_dir_;
  std::string binary_;
  std::unique_ptr<ClusterWatch> watch_;
  pid_t up_pid_ = -1;
  std::optional<int> up_status_;
};

}  // namespace

Result<pid_t> kill_role(const std::string& data_dir, const std::string& role) {
  WEFT_TRY(pid_t pid, role_pid(data_dir, role));
  if (::kill(pid, SIGKILL) != 0) return errno_error(errno, fmt::format("kill -9 {} ({})", pid, role));
  return pid;
}

Result<pid_t> spawn_up(const std::string& binary, const std::string& data_dir, const std::string& log_path) {
  // Everything the child needs is made before the fork: the bench's other
  // threads run on (W7's readers and writers), and the child only execs.
  std::vector<std::string> args = {binary, "up", "--data-dir", data_dir};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) return errno_error(errno, "fork");
  if (pid == 0) {
    int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null >= 0) ::dup2(null, 0);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    ::execv(binary.c_str(), argv.data());
    ::_exit(127);
  }
  return pid;
}

Result<std::unique_ptr<ClusterWatch>> ClusterWatch::open(const std::string& client_config) {
  auto cc = client::load_cluster_config(client::ClusterConfigQuery::from_flags(client_config, ""));
  if (!cc) return std::unexpected(cc.error());
  return std::unique_ptr<ClusterWatch>(std::make_unique<WatchImpl>(*cc));
}

Result<std::unique_ptr<ClusterControl>> open_cluster_control(const std::string& data_dir, const std::string& binary) {
  WEFT_TRY(auto watch, ClusterWatch::open(data_dir + "/client.toml"));
  std::string bin = binary;
  if (bin.empty()) {
    char buf[4096];
    ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
    bin = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "/proc/self/exe";
  }
  return std::unique_ptr<ClusterControl>(std::make_unique<ControlImpl>(data_dir, bin, std::move(watch)));
}

}  // namespace weft::bench
