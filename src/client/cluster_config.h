// client/cluster_config.h
// How a client command finds its cluster: a small TOML file
//   mgmtd = ["127.0.0.1:7000", "10.0.0.2:7000"]   # tried in order
//   cluster_token = "..."
//   meta = ["127.0.0.1:7001"]   # optional: else the meta servers registered with mgmtd
//   tcp_keepalive_idle_s = 30        # optional, as a server's [server] keys (rpc/tcp_liveness.h):
//   tcp_keepalive_interval_s = 5     #   keepalive and TCP_USER_TIMEOUT on every connection
//   tcp_keepalive_count = 4          #   the client opens; 0 turns keepalive (idle) or the
//   tcp_user_timeout_ms = 60000      #   user timeout off
//   local_socket = true              # optional: servers on this host through their Unix
//                                    #   socket (rpc/local_socket.h); false: TCP only
// looked up at --config FILE, else $WEFT_CONFIG, else ./weft-data/client.toml
// (the file `weft up` writes). --cluster ADDR replaces the mgmtd list.
// Every error is one line saying where the config was looked for and why it
// was not usable.
// Threading: pure functions (reads the file and the environment).
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "rpc/endpoint.h"
#include "rpc/tcp_liveness.h"

namespace weft::client {

inline constexpr const char* kDefaultClusterConfigPath = "./weft-data/client.toml";
inline constexpr const char* kClusterConfigEnv = "WEFT_CONFIG";

struct ClusterConfig {
  std::vector<rpc::Endpoint> mgmtd;
  std::string cluster_token;
  std::vector<rpc::Endpoint> meta;  // optional
  rpc::TcpLiveness tcp;             // the tcp_* keys; absent ones keep rpc's defaults
  bool local_socket = true;         // local_socket: servers on this host through their Unix socket
  std::string source;               // the file it came from
};

struct ClusterConfigQuery {
  std::string config_path;   // --config; empty: not given
  std::string cluster;       // --cluster; empty: not given
  std::string env_path;      // $WEFT_CONFIG; empty: unset
  std::string default_path = kDefaultClusterConfigPath;

  // Fills env_path from the process environment.
  static ClusterConfigQuery from_flags(std::string config_path, std::string cluster);
};

// The file to read and why it was chosen ("--config", "$WEFT_CONFIG", "default").
struct ConfigLocation {
  std::string path;
  std::string origin;
};
ConfigLocation locate_cluster_config(const ClusterConfigQuery& query);

Result<ClusterConfig> load_cluster_config(const ClusterConfigQuery& query);
// Parses the TOML text of a cluster config; `source` names it in messages.
Result<ClusterConfig> parse_cluster_config(const std::string& text, const std::string& source);

// Refuses a tcp_user_timeout_ms (unless 0) not above `call_timeout_ms`, the
// timeout of the client's calls to meta and storage: the kernel would cut a
// connection to a server slow to take a request's bytes (a storage server
// behind a hung disk) before the call's own timeout, failing every call on
// it. The calls to mgmtd (lease heartbeats, routing polls) need no check:
// their few hundred bytes are acknowledged by a live mgmtd's kernel whether
// or not mgmtd reads them, and waiting for a reply is never cut.
Result<void> check_tcp_user_timeout(const ClusterConfig& config, uint32_t call_timeout_ms);

}  // namespace weft::client
