// cli/local_cluster.h
// `weft up` / `weft down`: a whole cluster on this machine under one data
// directory (docs/local-cluster.md). `up` writes the configs on first start
// (fixed ports on 127.0.0.1, a random cluster token, both kept in
// DIR/cluster.toml so restarts reuse them), starts mgmtd, the storage servers
// and meta as detached processes of this same binary, creates the chain table
// and waits until each answers. A later `up` restarts only what died; `down`
// stops everything in reverse order (SIGTERM, then SIGKILL after 10 s).
// Only PIDs from our pid files whose /proc/PID/cmdline is `... serve <kind>
// --config <our config>` are ever signalled.
// Threading: one call at a time per directory (an flock on DIR/run/lock).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace weft::cli::local {

struct UpOptions {
  std::string data_dir = "./weft-data";
  // Empty optionals: not given on the command line (defaults, or what the
  // existing cluster.toml says).
  std::optional<uint32_t> storage_servers;     // default 3
  std::optional<uint32_t> targets_per_server;  // default 2
  std::optional<uint32_t> replicas;            // default 2
  std::optional<uint32_t> base_port;           // mgmtd P, meta P+1, storage-i P+1+i; default: probed
  std::string mount;                           // empty: no mount
  uint32_t timeout_s = 30;                     // every wait
  std::string binary;                          // what to run; empty: /proc/self/exe
  bool mount_available = false;                // this binary has `weft mount`
  // --owner-pid: every process `up` starts (servers, mount) gets
  // WEFT_OWNER_PID=owner_pid in its environment and stops when that process
  // exits. 0: none. (The environment, not the command line: `up`, `down` and
  // `weft bench` recognise their servers by their exact command line.)
  pid_t owner_pid = 0;
};

inline constexpr uint32_t kDefaultStorageServers = 3;
inline constexpr uint32_t kDefaultTargetsPerServer = 2;
inline constexpr uint32_t kDefaultReplicas = 2;

// What the first `up` decided (DIR/cluster.toml).
struct ClusterSpec {
  uint32_t storage_servers = kDefaultStorageServers;
  uint32_t targets_per_server = kDefaultTargetsPerServer;
  uint32_t replicas = kDefaultReplicas;
  std::string cluster_token;
  uint16_t mgmtd_port = 0;
  uint16_t meta_port = 0;
  std::vector<uint16_t> storage_ports;  // storage-1 .. storage-N

  std::string to_toml() const;
  static Result<ClusterSpec> parse(const std::string& text, const std::string& source);
};

// One server process of the local cluster.
struct Role {
  std::string name;  // "mgmtd", "meta", "storage-1", ...
  std::string kind;  // "mgmtd", "meta", "storage": the `weft serve` subcommand
  uint16_t port = 0;
};

// Start order: mgmtd, storage-1..N, meta. `down` stops in reverse.
std::vector<Role> roles(const ClusterSpec& spec);

// File names under the data directory (absolute).
struct Layout {
  std::string dir;
  std::string cluster_file() const { return dir + "/cluster.toml"; }
  std::string client_config() const { return dir + "/client.toml"; }
  std::string conf_dir() const { return dir + "/conf"; }
  std::string config(const std::string& role) const { return conf_dir() + "/" + role + ".toml"; }
  std::string data(const std::string& role) const { return dir + "/data/" + role; }
  std::string log(const std::string& role) const { return dir + "/logs/" + role + ".log"; }
  std::string pid_file(const std::string& role) const { return dir + "/run/" + role + ".pid"; }
  std::string port_file(const std::string& role) const { return dir + "/run/" + role + ".ports"; }
  std::string mount_file() const { return dir + "/run/mount"; }
  std::string mount_pid_file() const { return dir + "/run/mount.pid"; }
  std::string lock_file() const { return dir + "/run/lock"; }
  std::string target_path(uint32_t server, uint32_t target) const {
    return data("storage-" + std::to_string(server)) + "/t" + std::to_string(target);
  }
};

// The arguments after argv[0] `weft up --mount` starts the mount daemon with.
std::vector<std::string> mount_daemon_args(const Layout& layout, const std::string& mount_path, int ready_timeout_s);

// True when `pid` is alive (not a zombie) and its argv is the mount daemon's
// as `weft up --mount` started it for `layout` (mount_daemon_args, whatever
// its --ready-timeout; at `mount_path` unless that is empty): not any process
// whose first argument is "mount".
bool is_our_mount_daemon(pid_t pid, const Layout& layout, const std::string& mount_path);

// The live PID of `role` from its pid file; a stale pid file (no such
// process, a zombie, or another program) is removed and nullopt returned.
std::optional<pid_t> live_pid(const Layout& layout, const Role& role);

// Prints progress and the summary to `out`.
Result<void> up(const UpOptions& options, std::FILE* out);
Result<void> down(const std::string& data_dir, std::FILE* out);

}  // namespace weft::cli::local
