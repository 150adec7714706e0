// benchsuite/report.h
// The outputs of a run: the table (stdout), the JSON of WORKLOADS.md and the
// self-contained HTML report (inline SVG, no scripts or external files).
// Threading: pure functions of their arguments.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "benchsuite/bench.h"

namespace weft::bench {

struct Machine {
  unsigned cores = 0;
  double memory_gib = 0;
  std::string kernel;
  // The devices holding the measured paths: "baseline /var/tmp/b: vda (vda1)
  // 100.0 GiB non-rotational; ..." ("" when no path was given).
  std::string disk;
};
// `paths`: (what, path) of every local path measured (the baseline, a
// directory or mount target, the data directory of the target's cluster).
Machine probe_machine(const std::vector<std::pair<std::string, std::string>>& paths = {});

// The block device holding `path`: "vda (vda1) 100.0 GiB non-rotational
// MODEL", or the file system type and source when it has none ("fuse.weft
// weft", "tmpfs tmpfs").
std::string describe_device(const std::string& path);

std::string render_table(const std::vector<WorkloadResult>& results);
std::string render_json(const Machine& m, const std::string& command, const std::vector<WorkloadResult>& results);
std::string render_html(const Machine& m, const std::string& command, const std::vector<WorkloadResult>& results);

// JSON string escaping (quotes included).
std::string json_string(const std::string& s);

}  // namespace weft::bench
