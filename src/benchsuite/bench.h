// benchsuite/bench.h
// `weft bench`: the proof-of-concept workloads W1..W7 of WORKLOADS.md
// (docs/bench.md), against Weft (native libweft, or a mount path) and,
// in the same run, against a plain directory (the baseline), printed as a
// table with ratios and written as JSON and as a self-contained HTML report.
// Threading: run() is called once per process; workloads start their own threads.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace weft::bench {

struct Options {
  std::vector<std::string> workloads = {"W1", "W2", "W3", "W4", "W5", "W6"};
  std::string target;          // weft://ADDR/PATH, weft:///PATH or a directory
  std::string config;          // client config for native targets
  double statahead_s = 0;      // native targets: ClientOptions::statahead_ttl_s
  std::optional<size_t> early_read_bytes;  // native targets: ClientOptions::early_read_bytes_max (unset: its default)
  std::string baseline;        // a directory; empty: none
  std::string json_path;       // --json
  std::string report_path;     // --report (HTML)
  std::string data_dir;        // `weft up` directory (W7)
  std::string weft_binary;     // for `weft up` in W7; empty: /proc/self/exe
  std::string command;         // the command line, for the JSON
  bool keep = false;           // keep the files at the end
  bool quick = false;          // (already applied to the sizes below)

  // W1/W2
  uint32_t writers = 4;
  uint64_t checkpoint_bytes = 1ull << 30;
  uint64_t io_bytes = 1u << 20;
  // W3
  uint32_t files = 20000;
  uint64_t file_bytes = 128u << 10;
  uint32_t dirs = 100;
  uint32_t readers = 8;
  // W5
  uint32_t md_clients = 4;
  uint32_t md_files = 10000;
  // W6
  uint32_t open_clients = 16;
  uint32_t open_files = 1000;
  uint64_t open_read_bytes = 4096;
  double open_seconds = 10;
  // W7
  double kill_after_s = 5;
  double restart_after_s = 10;
  std::string kill_role = "storage-1";
  double tail_s = 5;          // load continues this long after every target serves again
  double serving_timeout_s = 120;
  uint64_t seed = 42;
};

using Figures = std::map<std::string, double>;

struct TimelinePoint {
  double t = 0;             // seconds since the load started (end of the second)
  double mib_per_s = 0;     // read + write
  double read_mib_per_s = 0;
  double write_mib_per_s = 0;
  double latency_p99_ms = 0;  // of the operations completed in that second
  uint64_t ops = 0;
  uint64_t errors = 0;
};

struct Run {
  Figures figures;
  uint64_t errors = 0;
  uint64_t checked_bytes = 0;
  uint64_t mismatched_bytes = 0;
  uint64_t failed_reads = 0;  // reads that failed or came back short (their bytes unchecked)
  // Every byte read was checked and matched (WORKLOADS.md `verified`); other
  // failures (a write, a restart) count in `errors` only.
  bool verified() const { return mismatched_bytes == 0 && failed_reads == 0; }
  bool ok() const { return errors == 0 && verified(); }
  std::vector<std::string> notes;  // cache handling, first errors
  // W7 only.
  std::vector<TimelinePoint> timeline;
  std::map<std::string, double> events;  // "kill", "restart", "serving" -> t
};

struct WorkloadResult {
  std::string workload;  // "W1"
  std::string name;      // "checkpoint-write"
  std::string target;
  std::string access;
  Run run;
  bool has_baseline = false;
  std::string baseline_path;
  std::string baseline_access;  // "directory" or "mount"
  Run baseline;
  Figures ratios;  // figure -> target / baseline
};

// Runs everything; prints progress to stderr, the table to stdout. Returns
// the exit code: 0 when every operation succeeded and every byte verified.
int run(const Options& options);

// Descriptions for --help and the docs.
const std::map<std::string, std::string>& workload_names();

}  // namespace weft::bench
