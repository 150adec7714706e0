#include "benchsuite/cluster_control.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <vector>

#include "client/cluster_config.h"
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

Result<pid_t> kill_role(const std::string& data_dir, const std::string& role) {
  std::string pid_file = data_dir + "/run/" + role + ".pid";
  std::string text = read_text(pid_file);
  if (text.empty()) return error(Code::kNotFound, "{}: missing or empty (is the cluster up?)", pid_file);
  pid_t pid = 0;
  try {
    pid = static_cast<pid_t>(std::stol(text));
  } catch (...) {
    return error(Code::kInvalidArgument, "{}: not a pid: {}", pid_file, text);
  }
  std::string cmdline = read_text(fmt::format("/proc/{}/cmdline", pid));
  for (auto& c : cmdline)
    if (c == '\0') c = ' ';
  if (cmdline.find(" serve ") == std::string::npos || cmdline.find(role + ".toml") == std::string::npos)
    return error(Code::kNotFound, "{}: pid {} is not {} (cmdline '{}')", pid_file, pid, role, cmdline);
  if (::kill(pid, SIGKILL) != 0) return errno_error(errno, fmt::format("kill -9 {} ({})", pid, role));
  return pid;
}

Result<pid_t> spawn_up(const std::string& binary, const std::string& data_dir, const std::string& log_path) {
  pid_t pid = ::fork();
  if (pid < 0) return errno_error(errno, "fork");
  if (pid == 0) {
    int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    int null = ::open("/dev/null", O_RDONLY);
    if (null >= 0) ::dup2(null, 0);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    std::vector<std::string> args = {binary, "up", "--data-dir", data_dir};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
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

}  // namespace weft::bench
