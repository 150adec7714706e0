// rpc/service_runtime.h
// What every `weft serve <role>` process shares: its [server] config
// section, logging, the I/O threads, the RPC server with its cluster token,
// the Prometheus endpoint, fault points from WEFT_FAULTS, and a clean stop on
// SIGINT/SIGTERM. A role registers its methods, then calls run().
//
// [server]
// listen = "127.0.0.1:7000"     # RPC address (port 0: any free port)
// metrics_listen = "127.0.0.1:0"  # Prometheus endpoint; "" disables it
// cluster_token = "..."          # required; shared by every process of a cluster
// name = "storage-1"             # for logs and metrics
// io_threads = 2
// blocking_threads = 4
// write_stall_timeout_ms = 30000 # a peer that reads none of its replies this long is disconnected (1000..3600000)
// hello_timeout_ms = 10000       # a connection that sends no Hello this long is closed; 0: never (1000..3600000)
// read_stall_timeout_ms = 30000  # a request stopped this long in its middle closes its connection; 0: never (1000..3600000)
// # tcp_*: on every connection the process accepts or opens (ServiceConfig::client_options)
// tcp_keepalive_idle_s = 30      # keepalive probes after this long quiet; 0: off (1..32767)
// tcp_keepalive_interval_s = 5   # between probes (1..32767)
// tcp_keepalive_count = 4        # unanswered probes that end a connection (1..127); unused while
//                                #   tcp_user_timeout_ms is on (Linux then ends it at that time)
// tcp_user_timeout_ms = 60000    # sent bytes unacknowledged this long end a connection; 0: off (1000..3600000);
//                                #   must exceed write_stall_timeout_ms
// log_level = "info"
// log_file = ""                  # default: stderr
// port_file = ""                 # if set, "rpc_port metrics_port" is written here once listening
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "common/config.h"
#include "common/status.h"
#include "rpc/client.h"
#include "rpc/endpoint.h"
#include "rpc/io_pool.h"
#include "rpc/metrics_server.h"
#include "rpc/server.h"

namespace weft::rpc {

struct ServiceConfig {
  Endpoint listen{"127.0.0.1", 0};
  std::string metrics_listen = "127.0.0.1:0";
  std::string cluster_token;
  std::string name;
  size_t io_threads = 2;
  size_t blocking_threads = 4;
  uint32_t write_stall_timeout_ms = 30000;
  uint32_t hello_timeout_ms = 10000;
  uint32_t read_stall_timeout_ms = 30000;
  TcpLiveness tcp;
  // Also listen on a Unix socket for clients on this host, and reach
  // co-located servers through theirs (rpc/local_socket.h).
  bool local_socket = true;
  std::string log_level = "info";
  std::string log_file;
  std::string port_file;
  std::string source;  // the config file, for errors found when the server starts

  static Result<ServiceConfig> from(const Config& config, const std::string& default_name);
  // Options for a connection this process opens (to mgmtd, meta, another
  // storage server): the cluster token and the same tcp_* liveness as the
  // connections it accepts, so one [server] section sets both.
  ClientOptions client_options(std::string client_name) const;
};

// Raises this process's soft limit on open descriptors (RLIMIT_NOFILE) to
// its hard limit: a server holds one per connection, and the usual soft
// limit (1024) is soon reached. Returns the soft limit now in force.
Result<uint64_t> raise_open_files_limit();

class ServiceRuntime {
 public:
  explicit ServiceRuntime(ServiceConfig config);
  ~ServiceRuntime();

  // Logging, fault points and the open-descriptor limit; call first.
  Result<void> init();
  IoPool& io() { return *io_; }
  Server& server() { return *server_; }
  const ServiceConfig& config() const { return config_; }
  uint16_t rpc_port() const { return rpc_port_; }
  uint16_t metrics_port() const { return metrics_port_; }

  // Listens, then blocks until SIGINT/SIGTERM or request_stop(); then stops the server.
  // on_stopping runs on a stop signal before the RPC server stops (which
  // waits for the calls in flight): a role stops what must not go on while
  // the server drains, e.g. mgmtd's lease checker, and ends long polls.
  Result<void> run(std::function<void()> on_listening = nullptr, std::function<void()> on_stopping = nullptr);
  void request_stop();
  // After run() and the role's own stop calls, before the role's objects go:
  // waits until no RPC handler runs (they use those objects; one waiting on
  // a silent peer takes up to its call timeout). One still running after
  // `limit` would resume into freed objects, so the process ends at once
  // instead (exit status 1): what it acknowledged is durable, and this is
  // what a crash would leave.
  void drain_or_exit(std::chrono::seconds limit = std::chrono::seconds(30));

 private:
  Status in_config(const Status& s, std::string_view key) const;

  ServiceConfig config_;
  std::unique_ptr<IoPool> io_;
  std::unique_ptr<Server> server_;
  std::unique_ptr<MetricsServer> metrics_;
  uint16_t rpc_port_ = 0;
  uint16_t metrics_port_ = 0;
  int stop_pipe_[2] = {-1, -1};
};

}  // namespace weft::rpc
