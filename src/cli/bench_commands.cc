// `weft bench`: the proof-of-concept workloads W1..W7 (src/benchsuite,
// docs/bench.md). Every parameter is a flag; --quick shrinks the sizes that
// were not given explicitly.
#include <fstream>
#include <sstream>

#include "benchsuite/bench.h"
#include "cli/commands.h"

namespace weft::cli {
namespace {

std::string command_line() {
  std::ifstream in("/proc/self/cmdline");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string raw = ss.str(), out, arg;
  auto flush = [&] {
    bool quote = arg.empty() || arg.find_first_of(" \t'\"$") != std::string::npos;
    out += (out.empty() ? "" : " ") + (quote ? "'" + arg + "'" : arg);
    arg.clear();
  };
  for (char c : raw) {
    if (c == '\0') flush();
    else arg += c;
  }
  if (!arg.empty()) flush();
  // argv[0] as typed may be a long path: show it as `weft`.
  if (auto sp = out.find(' '); sp != std::string::npos) out = "weft" + out.substr(sp);
  return out;
}

}  // namespace

void add_bench_commands(CLI::App& app) {
  static bench::Options o;
  static std::vector<std::string> workloads;
  auto* cmd = app.add_subcommand("bench", "Run the proof-of-concept workloads W1..W7 (docs/bench.md)");
  cmd->add_option("--workloads", workloads, "comma-separated workloads, e.g. W1,W3 (default: W1..W6; W7 on request)")
      ->delimiter(',');
  cmd->add_option("--target", o.target, "weft://MGMTD_ADDR/PATH, weft:///PATH (client config) or a directory")
      ->required();
  cmd->add_option("--config", o.config, "client config for weft:// targets (default: $WEFT_CONFIG, else ./weft-data/client.toml)");
  cmd->add_option("--statahead", o.statahead_s,
                  "native targets: answer read-only opens from directory listings up to this many seconds old "
                  "(ClientOptions::statahead_ttl_s; default 0: every open asks meta)")
      ->check(CLI::Range(0.0, 3600.0));
  cmd->add_option("--early-read", o.early_read_bytes,
                  "native targets: bytes of a listed file read while meta answers its open "
                  "(ClientOptions::early_read_bytes_max; default 1MiB, 0: off)")
      ->transform(CLI::AsSizeValue(false));
  cmd->add_option("--baseline", o.baseline, "a plain directory: the same workloads run there too, with ratios");
  cmd->add_option("--json", o.json_path, "write the results as JSON (WORKLOADS.md format)");
  cmd->add_option("--report", o.report_path, "write a self-contained HTML report");
  cmd->add_option("--data-dir", o.data_dir, "the `weft up` directory of the target's cluster (W7 kills/restarts a server)");
  cmd->add_flag("--keep", o.keep, "keep the files at the end (W2 alone then reads W1's files)");
  auto* quick = cmd->add_flag("--quick", o.quick, "small sizes: the whole suite in a few minutes");
  auto size = CLI::AsSizeValue(false);
  auto* writers = cmd->add_option("--writers", o.writers, "W1/W2/W4: writers (and W2 readers)")->check(CLI::Range(1, 1024));
  auto* ckpt = cmd->add_option("--checkpoint-size", o.checkpoint_bytes, "W1: bytes per writer (e.g. 1GiB)")->transform(size);
  cmd->add_option("--io-size", o.io_bytes, "W1/W2: bytes per write/read call")->transform(size);
  auto* files = cmd->add_option("--files", o.files, "W3: number of files")->check(CLI::Range(1, 100000000));
  cmd->add_option("--file-size", o.file_bytes, "W3: bytes per file")->transform(size);
  cmd->add_option("--dirs", o.dirs, "W3: directories")->check(CLI::Range(1, 1000000));
  cmd->add_option("--readers", o.readers, "W3: concurrent readers")->check(CLI::Range(1, 1024));
  cmd->add_option("--md-clients", o.md_clients, "W5: clients")->check(CLI::Range(1, 1024));
  auto* md_files = cmd->add_option("--md-files", o.md_files, "W5: files per client")->check(CLI::Range(1, 100000000));
  cmd->add_option("--open-clients", o.open_clients, "W6: clients")->check(CLI::Range(1, 1024));
  cmd->add_option("--open-files", o.open_files, "W6: files")->check(CLI::Range(1, 10000000));
  cmd->add_option("--open-read-size", o.open_read_bytes, "W6: bytes per file (read at each open)")->transform(size);
  auto* open_s = cmd->add_option("--open-seconds", o.open_seconds, "W6: duration")->check(CLI::Range(0.1, 86400.0));
  cmd->add_option("--kill-after", o.kill_after_s, "W7: seconds of load before the SIGKILL");
  cmd->add_option("--restart-after", o.restart_after_s, "W7: seconds between the kill and the restart");
  cmd->add_option("--kill-role", o.kill_role, "W7: which server to kill (DATA_DIR/run/<role>.pid)");
  cmd->add_option("--tail", o.tail_s, "W7: seconds of load after every target serves again");
  cmd->add_option("--serving-timeout", o.serving_timeout_s, "W7: give up waiting for the targets after this long");
  cmd->add_option("--seed", o.seed, "random seed (read orders)");
  cmd->add_option("--weft-binary", o.weft_binary, "W7: the weft binary for `weft up` (default: this one)");
  cmd->callback([=] {
    (void)writers;
    if (!workloads.empty()) o.workloads = workloads;
    if (quick->count() > 0) {
      if (ckpt->count() == 0) o.checkpoint_bytes = 64u << 20;
      if (files->count() == 0) o.files = 2000;
      if (md_files->count() == 0) o.md_files = 1000;
      if (open_s->count() == 0) o.open_seconds = 3;
    }
    if (o.io_bytes == 0 || o.file_bytes == 0 || o.open_read_bytes == 0)
      return fail("bench: --io-size, --file-size and --open-read-size must be > 0", 2);
    o.command = command_line();
    exit_code() = bench::run(o);
  });
}

}  // namespace weft::cli
