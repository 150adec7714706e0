// `weft up` and `weft down`: a whole cluster on this machine under one data
// directory (cli/local_cluster.h, docs/local-cluster.md).
#include <signal.h>
#include <unistd.h>

#include <cstdio>

#include "cli/commands.h"
#include "cli/local_cluster.h"
#include "common/owner_watch.h"

namespace weft::cli {
namespace {

struct UpFlags {
  local::UpOptions options;
  uint32_t storage_servers = local::kDefaultStorageServers;
  uint32_t targets_per_server = local::kDefaultTargetsPerServer;
  uint32_t replicas = local::kDefaultReplicas;
  uint32_t base_port = 0;
};

}  // namespace

void add_up_commands(CLI::App& app) {
  static UpFlags up_flags;
  auto* up = app.add_subcommand("up", "Start a whole cluster on this machine (mgmtd, storage servers, meta)");
  auto& o = up_flags.options;
  up->add_option("--data-dir", o.data_dir, "where configs, data, logs and pid files live")->capture_default_str();
  auto* n = up->add_option("--storage-servers", up_flags.storage_servers, "storage server processes")
                ->capture_default_str()
                ->check(CLI::Range(1, 64));
  auto* m = up->add_option("--targets-per-server", up_flags.targets_per_server, "targets (directories) per server")
                ->capture_default_str()
                ->check(CLI::Range(1, 64));
  auto* r = up->add_option("--replicas", up_flags.replicas, "replicas per chain (at most --storage-servers)")
                ->capture_default_str()
                ->check(CLI::Range(1, 16));
  auto* p = up->add_option("--base-port", up_flags.base_port,
                           "mgmtd on P, meta on P+1, storage-i on P+1+i (default: free ports are probed)")
                ->check(CLI::Range(1024, 65535));
  up->add_option("--mount", o.mount, "also mount the file system here (weft mount --background)");
  up->add_option("--timeout", o.timeout_s, "seconds to wait for each step")
      ->capture_default_str()
      ->check(CLI::Range(1, 3600));
  add_owner_pid_option(*up, o.owner_pid);
  up->callback([&app, n, m, r, p] {
    auto& f = up_flags;
    auto& opts = f.options;
    if (n->count() > 0) opts.storage_servers = f.storage_servers;
    if (m->count() > 0) opts.targets_per_server = f.targets_per_server;
    if (r->count() > 0) opts.replicas = f.replicas;
    if (p->count() > 0) opts.base_port = f.base_port;
    auto named_mount = [](CLI::App* sub) { return sub->get_name() == "mount"; };
    opts.mount_available = !app.get_subcommands(named_mount).empty();
    // `up` itself stops too (SIGTERM's default action) when its owner exits
    // while it starts the cluster; what it started stops on its own.
    auto owner_pid = owner_pid_or_env(opts.owner_pid);
    if (!owner_pid) return fail("up: " + owner_pid.error().message());
    opts.owner_pid = *owner_pid;
    OwnerWatch owner;
    if (opts.owner_pid != 0) {
      auto watch = watch_owner(opts.owner_pid, [pid = opts.owner_pid] {
        std::fprintf(stderr, "weft: up: its owner, process %d, exited: stopping (what it started stops too)\n",
                     static_cast<int>(pid));
        ::kill(::getpid(), SIGTERM);
      });
      if (!watch) return fail("up: " + owner_pid_error(watch.error()));
      owner = std::move(*watch);
    }
    if (auto res = local::up(opts, stdout); !res) fail("up: " + res.error().message());
  });

  static std::string down_dir = "./weft-data";
  auto* down = app.add_subcommand("down", "Stop the cluster `weft up` started (and unmount it)");
  down->add_option("--data-dir", down_dir, "the directory given to weft up")->capture_default_str();
  down->callback([] {
    if (auto res = local::down(down_dir, stdout); !res) fail("down: " + res.error().message());
  });
}

}  // namespace weft::cli
