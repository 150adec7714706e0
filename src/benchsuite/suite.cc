// `weft bench`: runs the chosen workloads on the target, then on the
// baseline directory, and writes the table, the JSON and the HTML report.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "benchsuite/access.h"
#include "benchsuite/bench.h"
#include "benchsuite/cluster_control.h"
#include "benchsuite/progress.h"
#include "benchsuite/report.h"
#include "benchsuite/workloads.h"

namespace weft::bench {
namespace {

bool write_text(const std::string& path, const std::string& text, std::string& why) {
  std::error_code ec;
  auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.flush();
  if (!out) {
    why = fmt::format("cannot write {}", path);
    return false;
  }
  return true;
}

void cleanup(Access& a, Progress& p) {
  p.note(fmt::format("  removing the benchmark files under {} (--keep keeps them)", a.target()));
  for (const char* d : {"w1", "w3", "w4", "w5", "w6", "w7"}) (void)a.remove_tree(d);
}

}  // namespace

const std::map<std::string, std::string>& workload_names() {
  static const std::map<std::string, std::string> names = {
      {"W1", "checkpoint-write"}, {"W2", "checkpoint-restore"}, {"W3", "first-epoch"},
      {"W4", "mixed"},            {"W5", "metadata-storm"},     {"W6", "many-opens"},
      {"W7", "failure-under-load"}};
  return names;
}

int run(const Options& o) {
  for (const auto& w : o.workloads)
    if (!workload_names().contains(w)) {
      std::fprintf(stderr, "weft: bench: unknown workload '%s' (W1..W7)\n", w.c_str());
      return 2;
    }
  bool has_w7 = std::find(o.workloads.begin(), o.workloads.end(), "W7") != o.workloads.end();
  if (has_w7 && o.data_dir.empty()) {
    std::fprintf(stderr, "weft: bench: W7 needs --data-dir DIR (the `weft up` directory of the target's cluster)\n");
    return 2;
  }
  if (o.target.empty()) {
    std::fprintf(stderr, "weft: bench: --target is required (weft://MGMTD/PATH, weft:///PATH or a directory)\n");
    return 2;
  }
  auto target = open_access(o.target, o.config, o.statahead_s, o.early_read_bytes);
  if (!target) {
    std::fprintf(stderr, "weft: bench: target %s: %s\n", o.target.c_str(), target.error().message().c_str());
    return 2;
  }
  std::unique_ptr<Access> base;
  if (!o.baseline.empty()) {
    auto b = open_access(o.baseline, "", 0);
    if (!b) {
      std::fprintf(stderr, "weft: bench: baseline %s: %s\n", o.baseline.c_str(), b.error().message().c_str());
      return 2;
    }
    base = std::move(*b);
  }

  std::string wl;
  for (const auto& w : o.workloads) wl += (wl.empty() ? "" : ",") + w;
  std::fprintf(stderr,
               "weft bench: target %s (%s)%s; workloads %s\n"
               "  sizes: W1/W2 %u x %s in %s I/O; W3 %u files of %s in %u dirs, %u readers; W5 %u x %u files; "
               "W6 %u clients, %u files, %.0f s%s\n",
               o.target.c_str(), (*target)->kind().c_str(),
               base ? fmt::format(", baseline {} ({})", o.baseline, base->kind()).c_str() : "", wl.c_str(), o.writers,
               human_bytes(static_cast<double>(o.checkpoint_bytes)).c_str(),
               human_bytes(static_cast<double>(o.io_bytes)).c_str(), o.files,
               human_bytes(static_cast<double>(o.file_bytes)).c_str(), o.dirs, o.readers, o.md_clients, o.md_files,
               o.open_clients, o.open_files, o.open_seconds, o.quick ? " (--quick)" : "");

  // The cluster behind the target, when --data-dir names it: W7 kills and
  // restarts a server; cold phases of a native target restart meta.
  std::unique_ptr<ClusterControl> cluster;
  std::string cluster_error = "no --data-dir";
  if (!o.data_dir.empty()) {
    auto c = open_cluster_control(o.data_dir, o.weft_binary);
    if (c) cluster = std::move(*c);
    else cluster_error = fmt::format("{}: {}", o.data_dir, c.error().message());
  }

  std::vector<WorkloadResult> results;
  {
    Progress progress;
    TargetState st_target, st_base;
    st_target.cluster = cluster.get();
    st_target.cluster_error = cluster_error;
    for (const auto& id : o.workloads) {
      WorkloadResult r;
      r.workload = id;
      r.name = workload_names().at(id);
      r.target = o.target;
      r.access = (*target)->kind();
      progress.note(fmt::format("{} {} on {}", id, r.name, o.target));
      r.run = run_workload(id, **target, st_target, o, progress);
      if (base && id != "W7") {
        progress.note(fmt::format("{} {} on the baseline {}", id, r.name, o.baseline));
        r.has_baseline = true;
        r.baseline_path = o.baseline;
        r.baseline_access = base->kind();
        r.baseline = run_workload(id, *base, st_base, o, progress);
        for (const auto& [name, v] : r.run.figures)
          if (auto it = r.baseline.figures.find(name); it != r.baseline.figures.end() && it->second != 0)
            r.ratios[name] = v / it->second;
      } else if (base) {
        r.run.notes.push_back("no baseline: a plain directory has no server to kill");
      }
      results.push_back(std::move(r));
    }
    if (!o.keep) {
      cleanup(**target, progress);
      if (base) cleanup(*base, progress);
    }
  }

  // The devices of the paths measured: not every disk of the machine.
  std::vector<std::pair<std::string, std::string>> paths;
  if ((*target)->kind() != "native") paths.emplace_back("target", (*target)->target());
  if (!o.data_dir.empty()) paths.emplace_back("target's cluster (--data-dir)", o.data_dir);
  if (base) paths.emplace_back("baseline", base->target());
  Machine m = probe_machine(paths);
  std::fputs(render_table(results).c_str(), stdout);
  int code = 0;
  uint64_t errors = 0;
  for (const auto& r : results) {
    errors += r.run.errors + (r.has_baseline ? r.baseline.errors : 0);
    if (!r.run.ok() || (r.has_baseline && !r.baseline.ok())) code = 1;
  }
  std::string why;
  if (!o.json_path.empty()) {
    if (write_text(o.json_path, render_json(m, o.command, results), why))
      std::printf("JSON results: %s\n", o.json_path.c_str());
    else
      std::fprintf(stderr, "weft: bench: %s\n", why.c_str()), code = code ? code : 1;
  }
  if (!o.report_path.empty()) {
    if (write_text(o.report_path, render_html(m, o.command, results), why))
      std::printf("HTML report: %s\n", o.report_path.c_str());
    else
      std::fprintf(stderr, "weft: bench: %s\n", why.c_str()), code = code ? code : 1;
  }
  if (code != 0)
    std::printf("FAILED: %llu errors or unverified bytes (see above)\n", static_cast<unsigned long long>(errors));
  else
    std::printf("OK: no errors, every byte read was verified\n");
  std::fflush(stdout);
  return code;
}

}  // namespace weft::bench
