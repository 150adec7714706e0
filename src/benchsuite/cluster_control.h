// benchsuite/cluster_control.h
// What the suite does to a local cluster from `weft up` (docs/local-cluster.md):
// kill one server by the PID in DATA_DIR/run/<role>.pid (only if that process
// is really `weft serve <kind> ... <role>.toml`), restart it with `weft up
// --data-dir DATA_DIR`, and watch mgmtd's Status (as `weft status` does)
// until every storage server is up and every target serving. W7 kills and
// restarts a storage server; the cold read phases restart meta (so its
// RocksDB memtable and block cache start empty, as a dropped page cache
// leaves a local file system's dentry and inode caches).
// ClusterControl is the interface W7 and the cold phases use (tests give a
// fake); open_cluster_control() gives the real one.
// Threading: one thread at a time.
#pragma once

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>

#include "common/status.h"

namespace weft::bench {

// SIGKILLs the role's process; returns its pid.
Result<pid_t> kill_role(const std::string& data_dir, const std::string& role);

// Starts `binary up --data-dir DATA_DIR` with output appended to log_path;
// returns the child's pid (reap it with waitpid).
Result<pid_t> spawn_up(const std::string& binary, const std::string& data_dir, const std::string& log_path);

struct ServingState {
  bool all_serving = false;
  std::string detail;  // what is not serving
};

class ClusterWatch {
 public:
  virtual ~ClusterWatch() = default;
  // `client_config`: DATA_DIR/client.toml.
  static Result<std::unique_ptr<ClusterWatch>> open(const std::string& client_config);
  virtual Result<ServingState> poll() = 0;
};

class ClusterControl {
 public:
  virtual ~ClusterControl() = default;
  // SIGKILLs `role` ("storage-1"); returns its pid.
  virtual Result<pid_t> kill(const std::string& role) = 0;
  // Starts `weft up --data-dir DIR` in the background (output appended to
  // `log`): it restarts what is not running.
  virtual Result<void> start_up(const std::string& log) = 0;
  // The wait status of that `weft up` once it ended (reaped); nullopt while
  // it runs (or when none was started).
  virtual std::optional<int> up_status() = 0;
  // Ends a `weft up` still running: SIGTERM, SIGKILL after 10 s, reaped.
  // Says what was done ("" when nothing ran).
  virtual std::string stop_up() = 0;
  // mgmtd's view: every storage node up and every target serving?
  virtual Result<ServingState> poll() = 0;
  // Stops the meta server (SIGTERM, SIGKILL after 30 s) and starts it again
  // with `weft up` (blocking until it answers). Says what was done.
  virtual Result<std::string> restart_meta() = 0;
};

// The cluster of `weft up --data-dir data_dir`; `binary` runs `up` (empty: this binary).
Result<std::unique_ptr<ClusterControl>> open_cluster_control(const std::string& data_dir, const std::string& binary);

}  // namespace weft::bench
