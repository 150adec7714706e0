// benchsuite/workloads.h
// W1..W7 of WORKLOADS.md, each written once against Access. Files live
// under the access's root: w1/ckpt-<i>, w3/d<NNN>/f<NNNNNN>, w4/ckpt-<i>,
// w5/c<i>/f<n>, w5/shared/c<i>-f<n>, w6/f<NNNN>, w7/ckpt-<i>.
// Threading: run_workload is called from one thread; it starts its own.
#pragma once

#include <string>

#include "benchsuite/access.h"
#include "benchsuite/bench.h"
#include "benchsuite/cluster_control.h"
#include "benchsuite/progress.h"

namespace weft::bench {

// What earlier workloads of this run left on one target, so later ones
// reuse it (W4/W7 read W3's files), and the cluster behind it.
struct TargetState {
  bool w3_ready = false;
  // The local cluster behind the target (--data-dir), not owned: W7 kills and
  // restarts a storage server, cold read phases of a native target restart
  // meta. Null for the baseline, or without --data-dir (cluster_error: why).
  ClusterControl* cluster = nullptr;
  std::string cluster_error;
  // Set when a meta restart failed: the cluster's meta server may be down, so
  // every later workload on this target is skipped (its calls would only wait
  // out their retries) instead of hanging the run.
  std::string aborted;
};

Run run_workload(const std::string& id, Access& access, TargetState& state, const Options& o, Progress& progress);

}  // namespace weft::bench
