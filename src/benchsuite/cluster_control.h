// benchsuite/cluster_control.h
// What W7 does to a local cluster from `weft up` (docs/local-cluster.md):
// kill one server by the PID in DATA_DIR/run/<role>.pid (only if that process
// is really `weft serve storage ...`), restart it with `weft up --data-dir
// DATA_DIR`, and watch mgmtd's Status (as `weft status` does) until every
// storage server is up and every target serving.
// Threading: ClusterWatch is used from one thread.
#pragma once

#include <sys/types.h>

#include <memory>
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

}  // namespace weft::bench
