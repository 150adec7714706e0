// tests/integration/cluster_fixture.h
// A real cluster on 127.0.0.1 for integration tests: one `weft serve mgmtd`
// (restartable on the same port and data directory, and stoppable with
// SIGSTOP), storage servers that join it with [cluster] mgmtd (each on a
// fixed port, restartable with the same data), the `weft` CLI, and routing /
// status read straight from mgmtd. Every process is a testing::Process, so it
// is SIGKILLed when the fixture goes away, whatever the test did.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "mgmt/mgmt_rpc.h"
#include "mgmt/proto_convert.h"
#include "mgmt/routing.h"
#include "mgmt/service_methods.h"
#include "process.h"
#include "proto/mgmt.pb.h"
#include "rpc/client.h"
#include "rpc/endpoint.h"
#include "rpc/io_pool.h"

namespace weft::testing {

struct CliResult {
  int exit_code = -1;
  std::string output;
};

struct ClusterOptions {
  int lease_ms = 1000;
  int grace_ms = 500;
  int tick_ms = 50;
  std::string token = "tok";
  std::string storage_keys;  // more lines of every storage server's [storage] section
};

class ClusterFixture {
 public:
  explicit ClusterFixture(ClusterOptions o = {}) : options_(std::move(o)), mgmtd_port_(free_port()) {
    write_file(dir_.file("mgmtd.toml"),
               fmt::format("[server]\nlisten = \"127.0.0.1:{}\"\ncluster_token = \"{}\"\nname = \"mgmtd\"\n"
                           "port_file = \"{}\"\n[mgmtd]\ndata_dir = \"{}\"\nlease_ms = {}\ngrace_ms = {}\n"
                           "tick_ms = {}\n",
                           mgmtd_port_, options_.token, dir_.file("mgmtd.ports"), dir_.file("mgmtd.data"),
                           options_.lease_ms, options_.grace_ms, options_.tick_ms));
    write_file(dir_.file("client.toml"),
               fmt::format("mgmtd = [\"127.0.0.1:{}\"]\ncluster_token = \"{}\"\n", mgmtd_port_, options_.token));
  }
  ~ClusterFixture() {
    // Storage servers first (so they do not log mgmtd errors while going away), then mgmtd.
    if (mgmtd_) mgmtd_->signal(SIGCONT);
    storage_.clear();
    mgmtd_.reset();
  }

  const ClusterOptions& options() const { return options_; }
  const TempDir& dir() const { return dir_; }
  uint16_t mgmtd_port() const { return mgmtd_port_; }

  // ---- mgmtd ----
  bool start_mgmtd() {
    std::filesystem::remove(dir_.file("mgmtd.ports"));
    mgmtd_ = std::make_unique<Process>(
        std::vector<std::string>{weft_binary(), "serve", "mgmtd", "--config", dir_.file("mgmtd.toml")},
        dir_.file("mgmtd.log." + std::to_string(mgmtd_starts_++)));
    return wait_for_file(dir_.file("mgmtd.ports"), std::chrono::seconds(20)).has_value();
  }
  void signal_mgmtd(int sig) { mgmtd_->signal(sig); }
  bool stop_mgmtd(int sig) {
    mgmtd_->signal(sig);
    return mgmtd_->wait_exit(std::chrono::seconds(15)).has_value();
  }
  std::string mgmtd_log() const { return mgmtd_ ? mgmtd_->log() : ""; }

  // ---- storage servers ----
  // Adds storage server `i` (config only; start_storage runs it).
  void add_storage(int targets, std::string extra = "") {
    int i = static_cast<int>(storage_ports_.size());
    uint16_t port = free_port();
    storage_ports_.push_back(port);
    storage_starts_.push_back(0);
    storage_.emplace_back();
    std::string name = "s" + std::to_string(i);
    std::string cfg = fmt::format(
        "[server]\nlisten = \"127.0.0.1:{}\"\ncluster_token = \"{}\"\nname = \"{}\"\n"
        "[cluster]\nmgmtd = [\"127.0.0.1:{}\"]\n[storage]\ndisk_threads = 2\nforward_timeout_ms = 2000\n{}",
        port, options_.token, name, mgmtd_port_, options_.storage_keys);
    for (int t = 0; t < targets; ++t)
      cfg += fmt::format("[[targets]]\npath = \"{}\"\nchunk_size_max = 1048576\n", dir_.file(name + "/t" + std::to_string(t)));
    cfg += extra;
    write_file(dir_.file(name + ".toml"), cfg);
  }
  size_t storage_count() const { return storage_ports_.size(); }
  // Starts server i; waits until it accepts connections (it has joined the cluster by then).
  bool start_storage(int i, std::vector<std::string> env = {}) {
    std::string name = "s" + std::to_string(i);
    storage_[i] = std::make_unique<Process>(
        std::vector<std::string>{weft_binary(), "serve", "storage", "--config", dir_.file(name + ".toml")},
        dir_.file(name + ".log." + std::to_string(storage_starts_[i]++)), std::move(env));
    return eventually([&] { return !storage_[i]->running() || port_open(storage_ports_[i]); }, std::chrono::seconds(30)) &&
           storage_[i]->running();
  }
  void kill_storage(int i, int sig = SIGKILL) {
    storage_[i]->signal(sig);
    storage_[i]->wait_exit(std::chrono::seconds(15));
  }
  Process& storage(int i) { return *storage_[i]; }
  std::string storage_address(int i) const { return "127.0.0.1:" + std::to_string(storage_ports_[i]); }
  rpc::Endpoint storage_ep(int i) const { return {"127.0.0.1", storage_ports_[i]}; }
  std::string storage_log(int i) const { return storage_[i] ? storage_[i]->log() : ""; }
  std::string all_logs() const {
    std::string out = "--- mgmtd\n" + mgmtd_log();
    for (size_t i = 0; i < storage_.size(); ++i) out += "--- s" + std::to_string(i) + "\n" + storage_log(i);
    return out;
  }

  // ---- CLI ----
  CliResult weft(std::vector<std::string> args, bool with_config = true) {
    std::vector<std::string> argv{weft_binary()};
    argv.insert(argv.end(), args.begin(), args.end());
    if (with_config) argv.insert(argv.end(), {"--config", dir_.file("client.toml")});
    Process p(argv, dir_.file("cli.log." + std::to_string(cli_runs_++)), {"WEFT_CONFIG="});
    auto status = p.wait_exit(std::chrono::seconds(30));
    CliResult r;
    if (status && WIFEXITED(*status)) r.exit_code = WEXITSTATUS(*status);
    r.output = p.log();
    return r;
  }

  // ---- mgmtd queries (from the test process) ----
  mgmt::MgmtRpc& rpc() { return rpc_; }
  // mgmtd's current routing (Status: fresh, with leases and usage).
  Result<mgmt::RoutingInfo> status() {
    WEFT_TRY(auto reply, rpc_.call<mgmt::pb::StatusReply>(mgmt::kStatus, mgmt::pb::StatusRequest{}));
    return mgmt::from_proto(reply.routing());
  }
  Result<mgmt::RoutingInfo> routing() {
    mgmt::pb::GetRoutingRequest req;
    WEFT_TRY(auto reply, rpc_.call<mgmt::pb::GetRoutingReply>(mgmt::kGetRouting, req));
    return mgmt::from_proto(reply.routing());
  }
  // Node id of storage server i (by address), 0 if unknown.
  static mgmt::NodeId node_of(const mgmt::RoutingInfo& r, const std::string& address) {
    for (auto& [id, n] : r.nodes)
      if (n.address == address) return id;
    return mgmt::kInvalidNode;
  }
  static std::vector<mgmt::TargetId> targets_of(const mgmt::RoutingInfo& r, mgmt::NodeId node) {
    std::vector<mgmt::TargetId> out;
    for (auto& [id, t] : r.targets)
      if (t.node_id == node) out.push_back(id);
    return out;
  }
  // State of `target` in `chain`, nullopt if it is not a member.
  static std::optional<mgmt::TargetState> state_in(const mgmt::ChainInfo& chain, mgmt::TargetId target) {
    for (auto& e : chain.entries)
      if (e.target_id == target) return e.state;
    return std::nullopt;
  }
  // Waits until `nodes` storage nodes are up with `targets` targets in total.
  bool wait_nodes_up(size_t nodes, size_t targets, std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    return eventually(
        [&] {
          auto r = status();
          if (!r) return false;
          size_t up = 0;
          for (auto& [id, n] : r->nodes) up += n.kind == mgmt::NodeKind::kStorage && n.state == mgmt::NodeState::kUp;
          return up == nodes && r->targets.size() == targets;
        },
        timeout, std::chrono::milliseconds(50));
  }
  // Waits until every chain entry is serving.
  bool wait_all_serving(std::chrono::milliseconds timeout) {
    return eventually(
        [&] {
          auto r = status();
          if (!r || r->chains.empty()) return false;
          for (auto& [id, c] : r->chains)
            for (auto& e : c.entries)
              if (e.state != mgmt::TargetState::kServing) return false;
          return true;
        },
        timeout, std::chrono::milliseconds(50));
  }

 private:
  static bool port_open(uint16_t port) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a = loopback(port);
    bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
    ::close(fd);
    return ok;
  }

  ClusterOptions options_;
  TempDir dir_;
  uint16_t mgmtd_port_;
  int mgmtd_starts_ = 0;
  int cli_runs_ = 0;
  std::unique_ptr<Process> mgmtd_;
  std::vector<uint16_t> storage_ports_;
  std::vector<int> storage_starts_;
  std::vector<std::unique_ptr<Process>> storage_;
  rpc::IoPool io_{1};
  rpc::Client client_{io_, rpc::ClientOptions{.cluster_token = options_.token, .connect_timeout_ms = 500,
                                              .backoff_min_ms = 20, .backoff_max_ms = 100}};
  mgmt::MgmtRpc rpc_{io_, client_, {{"127.0.0.1", mgmtd_port_}}, 2000};
};

}  // namespace weft::testing
