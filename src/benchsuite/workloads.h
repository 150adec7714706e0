// benchsuite/workloads.h
// W1..W7 of WORKLOADS.md, each written once against Access. Files live
// under the access's root: w1/ckpt-<i>, w3/d<NNN>/f<NNNNNN>, w4/ckpt-<i>,
// w5/c<i>/f<n>, w5/shared/c<i>-f<n>, w6/f<NNNN>, w7/ckpt-<i>.
// Threading: run_workload is called from one thread; it starts its own.
#pragma once

#include <optional>
#include <string>

#include "benchsuite/access.h"
#include "benchsuite/bench.h"
#include "benchsuite/progress.h"

namespace weft::bench {

// What earlier workloads of this run left on one target, so later ones
// reuse it (W2 reads W1's files; W4/W7 compare with W1/W3 measured alone).
struct TargetState {
  bool w3_ready = false;
  std::optional<double> w1_gib_per_s;    // W1 alone
  std::optional<double> w3_p99_ms;       // W3 read p99 alone
};

Run run_workload(const std::string& id, Access& access, TargetState& state, const Options& o, Progress& progress);

}  // namespace weft::bench
