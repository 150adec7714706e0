// benchsuite/report.h
// The outputs of a run: the table (stdout), the JSON of WORKLOADS.md and the
// self-contained HTML report (inline SVG, no scripts or external files).
// Threading: pure functions of their arguments.
#pragma once

#include <string>
#include <vector>

#include "benchsuite/bench.h"

namespace weft::bench {

struct Machine {
  unsigned cores = 0;
  double memory_gib = 0;
  std::string kernel;
  std::string disk;  // "vda 100.0 GiB ssd; ..." ("" when unknown)
};
Machine probe_machine();

std::string render_table(const std::vector<WorkloadResult>& results);
std::string render_json(const Machine& m, const std::string& command, const std::vector<WorkloadResult>& results);
std::string render_html(const Machine& m, const std::string& command, const std::vector<WorkloadResult>& results);

// JSON string escaping (quotes included).
std::string json_string(const std::string& s);

}  // namespace weft::bench
