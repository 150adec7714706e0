// meta_bench: W5 (metadata storm) against a meta server over loopback TCP
// through MetaClient (no FUSE, no client cache: every operation is an RPC).
// Clients are threads, each with its own rpc::Client. Phases: creates, stats
// (lookup) and removes of N empty files per client in its own directory
// ("easy"), then the same in one shared directory ("hard"), then creates
// from 16 clients in their own directories. The same phases run on a local
// directory with POSIX calls (open(O_CREAT|O_EXCL)/close, stat, unlink) as a
// same-run baseline. By default the server runs in this process (its own
// I/O threads, 16 blocking threads, synced WAL); --server HOST:PORT uses a
// running `weft serve meta` instead. Each phase also reports the process's CPU
// time (user + system) and context switches per operation: with the server in
// process that is the whole cost of an operation, clients included, and it
// holds up on a shared machine better than ops/s.
// Usage: meta_bench [--files N] [--clients 4] [--wide-clients 16] [--dir PATH]
//                   [--posix-dir PATH] [--server HOST:PORT --token T] [--nosync] [--no-linger]
//                   [--json FILE] [--no-posix] [--own-only | --wide-only] [--server-threads 2] [--tcp]
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "common/metrics.h"
#include "meta/meta_client.h"
#include "meta/meta_store.h"
#include "meta/service.h"
#include "rpc/client.h"
#include "rpc/server.h"

namespace weft::meta {
namespace {

struct Args {
  int files = 10000;
  int clients = 4;
  int wide_clients = 16;
  std::string dir = "/tmp/weft_meta_bench_rpc";
  std::string posix_dir = "/tmp/weft_meta_bench_posix";
  std::string server;
  std::string token = "bench";
  bool sync = true;
  bool linger = true;
  bool posix = true;       // --no-posix: skip the baseline (profiling runs)
  bool own_only = false;   // --own-only: only the own-directory phases
  bool wide_only = false;  // --wide-only: only the many-client creates
  int server_threads = 2;  // --server-threads: RPC I/O threads of the in-process server
  bool tcp = false;        // --tcp: loopback TCP, not the server's Unix socket (rpc/local_socket.h)
  std::string json;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (s == "--files") a.files = std::atoi(next().c_str());
    else if (s == "--clients") a.clients = std::atoi(next().c_str());
    else if (s == "--wide-clients") a.wide_clients = std::atoi(next().c_str());
    else if (s == "--dir") a.dir = next();
    else if (s == "--posix-dir") a.posix_dir = next();
    else if (s == "--server") a.server = next();
    else if (s == "--token") a.token = next();
    else if (s == "--nosync") a.sync = false;
    else if (s == "--no-linger") a.linger = false;
    else if (s == "--json") a.json = next();
    else if (s == "--no-posix") a.posix = false;
    else if (s == "--own-only") a.own_only = true;
    else if (s == "--wide-only") a.wide_only = true;
    else if (s == "--tcp") a.tcp = true;
    else if (s == "--server-threads") a.server_threads = std::max(1, std::atoi(next().c_str()));
    else {
      fmt::print(stderr, "unknown argument {}\n", s);
      std::exit(2);
    }
  }
  if (a.own_only && a.wide_only) {
    fmt::print(stderr, "--own-only and --wide-only leave no phase to run\n");
    std::exit(2);
  }
  return a;
}

// One client's operation i; returns false on error.
using OpFn = std::function<bool(int client, int i)>;

struct PhaseResult {
  double ops_per_s = 0;
  uint64_t errors = 0;
  double cpu_us_per_op = 0;  // whole process (clients + in-process server), user + system
  double csw_per_op = 0;     // voluntary + involuntary context switches
};

struct Usage {
  double cpu_us = 0;
  double csw = 0;
};

Usage process_usage() {
  struct rusage ru;
  ::getrusage(RUSAGE_SELF, &ru);
  auto us = [](const timeval& t) { return static_cast<double>(t.tv_sec) * 1e6 + static_cast<double>(t.tv_usec); };
  return Usage{us(ru.ru_utime) + us(ru.ru_stime), static_cast<double>(ru.ru_nvcsw + ru.ru_nivcsw)};
}

PhaseResult run_phase(int clients, int files, const OpFn& op) {
  std::atomic<uint64_t> errors{0};
  std::vector<std::thread> threads;
  Usage usage_start = process_usage();
  auto start = std::chrono::steady_clock::now();
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      for (int i = 0; i < files; ++i)
        if (!op(c, i)) errors.fetch_add(1);
    });
  }
  for (auto& t : threads) t.join();
  auto end = std::chrono::steady_clock::now();
  double s = std::chrono::duration<double>(end - start).count();
  // steady_clock is CLOCK_MONOTONIC: `perf record -k CLOCK_MONOTONIC` + `perf report --time` slices a phase.
  if (std::getenv("META_BENCH_PHASE_TIMES"))
    fmt::print(stderr, "phase {:.6f},{:.6f}\n", std::chrono::duration<double>(start.time_since_epoch()).count(),
               std::chrono::duration<double>(end.time_since_epoch()).count());
  Usage usage_end = process_usage();
  double ops = clients * static_cast<double>(files);
  return PhaseResult{ops / s, errors.load(), (usage_end.cpu_us - usage_start.cpu_us) / ops,
                     (usage_end.csw - usage_start.csw) / ops};
}

// The operations a W5 run needs, on one backend (RPC or POSIX).
struct Backend {
  std::function<bool(int client, const std::string& dir)> mkdir;  // dir names are relative to the root
  std::function<bool(int client, const std::string& dir, const std::string& name)> create, stat, remove;
};

std::string file_name(bool shared, int client, int i) {
  return shared ? fmt::format("c{}-f{}", client, i) : fmt::format("f{}", i);
}

// Runs the W5 phases; keys as in WORKLOADS.md.
std::map<std::string, PhaseResult> run_w5(Backend& b, const Args& a, const std::string& tag) {
  std::map<std::string, PhaseResult> out;
  for (bool shared : {false, true}) {
    if (a.wide_only || (shared && a.own_only)) break;
    auto dir_of = [&](int c) { return shared ? tag + "-shared" : fmt::format("{}-own{}", tag, c); };
    if (shared) b.mkdir(0, dir_of(0));
    else
      for (int c = 0; c < a.clients; ++c) b.mkdir(c, dir_of(c));
    std::string prefix = shared ? "shared_" : "";
    out[prefix + "create_ops_per_s"] =
        run_phase(a.clients, a.files, [&](int c, int i) { return b.create(c, dir_of(c), file_name(shared, c, i)); });
    out[prefix + "stat_ops_per_s"] =
        run_phase(a.clients, a.files, [&](int c, int i) { return b.stat(c, dir_of(c), file_name(shared, c, i)); });
    out[prefix + "remove_ops_per_s"] =
        run_phase(a.clients, a.files, [&](int c, int i) { return b.remove(c, dir_of(c), file_name(shared, c, i)); });
  }
  if (a.own_only) return out;
  std::string wide = fmt::format("{}-wide", tag);
  for (int c = 0; c < a.wide_clients; ++c) b.mkdir(c, fmt::format("{}{}", wide, c));
  out[fmt::format("create_{}_clients_ops_per_s", a.wide_clients)] = run_phase(
      a.wide_clients, a.files, [&](int c, int i) { return b.create(c, fmt::format("{}{}", wide, c), file_name(false, c, i)); });
  return out;
}

// --- the RPC backend ---

struct RpcBench {
  rpc::IoPool io{2, "bench-client"};
  std::vector<std::unique_ptr<rpc::Client>> rpcs;
  std::vector<std::unique_ptr<MetaClient>> clients;
  std::mutex mu;
  std::map<std::string, Ino> dirs;  // guarded by mu

  RpcBench(const Args& a, rpc::Endpoint ep) {
    int n = std::max(a.clients, a.wide_clients);
    for (int i = 0; i < n; ++i) {
      rpcs.push_back(
          std::make_unique<rpc::Client>(io, rpc::ClientOptions{.cluster_token = a.token, .local_socket = !a.tcp}));
      clients.push_back(std::make_unique<MetaClient>(io, *rpcs.back(), MetaClientOptions{.addresses = {ep}}));
    }
  }
  Ino dir(const std::string& name) {
    std::lock_guard lock(mu);
    return dirs.at(name);
  }
  Backend backend() {
    Backend b;
    b.mkdir = [this](int c, const std::string& d) {
      auto r = clients[c]->mkdir(Cred{}, kRootIno, d, 0755);
      if (!r) return false;
      std::lock_guard lock(mu);
      dirs[d] = r->ino;
      return true;
    };
    b.create = [this](int c, const std::string& d, const std::string& n) {
      return clients[c]->create(Cred{}, dir(d), n, 0644, true, false).has_value();
    };
    b.stat = [this](int c, const std::string& d, const std::string& n) {
      return clients[c]->lookup(Cred{}, dir(d), n).has_value();
    };
    b.remove = [this](int c, const std::string& d, const std::string& n) {
      return clients[c]->unlink(Cred{}, dir(d), n).has_value();
    };
    return b;
  }
};

// --- the POSIX baseline ---

Backend posix_backend(const std::string& root) {
  Backend b;
  b.mkdir = [root](int, const std::string& d) { return ::mkdir((root + "/" + d).c_str(), 0755) == 0; };
  b.create = [root](int, const std::string& d, const std::string& n) {
    int fd = ::open((root + "/" + d + "/" + n).c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644);
    if (fd < 0) return false;
    ::close(fd);
    return true;
  };
  b.stat = [root](int, const std::string& d, const std::string& n) {
    struct stat st;
    return ::stat((root + "/" + d + "/" + n).c_str(), &st) == 0;
  };
  b.remove = [root](int, const std::string& d, const std::string& n) {
    return ::unlink((root + "/" + d + "/" + n).c_str()) == 0;
  };
  return b;
}

void print_table(const std::map<std::string, PhaseResult>& meta, const std::map<std::string, PhaseResult>& posix) {
  fmt::print("{:<34} {:>12} {:>12} {:>8} {:>7} {:>10} {:>8}\n", "phase", "weft ops/s", "posix ops/s", "ratio",
             "errors", "cpu us/op", "csw/op");
  for (const auto& [k, v] : meta) {
    PhaseResult p = posix.contains(k) ? posix.at(k) : PhaseResult{};
    fmt::print("{:<34} {:>12.0f} {:>12.0f} {:>8.3f} {:>7} {:>10.1f} {:>8.2f}\n", k, v.ops_per_s, p.ops_per_s,
               p.ops_per_s > 0 ? v.ops_per_s / p.ops_per_s : 0.0, v.errors + p.errors, v.cpu_us_per_op, v.csw_per_op);
  }
}

void write_json(const std::string& path, const Args& a, const std::map<std::string, PhaseResult>& meta,
                const std::map<std::string, PhaseResult>& posix) {
  std::ofstream out(path);
  out << fmt::format("{{\"workload\": \"W5\", \"files_per_client\": {}, \"clients\": {}, \"sync\": {},\n", a.files,
                     a.clients, a.sync ? "true" : "false");
  out << fmt::format("\"cores\": {}, \"cache\": \"none (every op is an RPC)\",\n",
                     std::thread::hardware_concurrency());
  for (const auto* m : {&meta, &posix}) {
    out << (m == &meta ? "\"weft\": {" : ", \"posix\": {");
    bool first = true;
    for (const auto& [k, v] : *m) {
      out << fmt::format("{}\"{}\": {:.1f}", first ? "" : ", ", k, v.ops_per_s);
      first = false;
    }
    out << "}\n";
  }
  out << "}\n";
}

int run(const Args& a) {
  std::error_code ec;
  std::filesystem::remove_all(a.dir, ec);
  std::filesystem::remove_all(a.posix_dir, ec);
  std::filesystem::create_directories(a.dir);
  std::filesystem::create_directories(a.posix_dir);

  metrics::Registry registry;
  rpc::IoPool server_io(static_cast<size_t>(a.server_threads), "bench-server");
  std::unique_ptr<MetaStore> store;
  std::unique_ptr<rpc::Server> server;
  rpc::Endpoint ep{"127.0.0.1", 0};
  if (a.server.empty()) {
    StoreOptions so;
    so.path = a.dir + "/store";
    so.sync = a.sync;
    so.group_linger = a.linger;
    so.registry = &registry;
    auto s = MetaStore::open(so);
    if (!s) return fmt::print(stderr, "open store: {}\n", s.error()), 1;
    store = std::move(*s);
    server = std::make_unique<rpc::Server>(
        server_io, rpc::ServerOptions{.cluster_token = a.token, .name = "meta-bench", .blocking_threads = 16},
        registry);
    register_meta_service(*server, *store);
    auto port = server->listen("127.0.0.1", 0);
    if (!port) return fmt::print(stderr, "listen: {}\n", port.error()), 1;
    ep.port = *port;
  } else {
    auto parsed = rpc::Endpoint::parse(a.server);
    if (!parsed) return fmt::print(stderr, "--server: {}\n", parsed.error()), 1;
    ep = *parsed;
  }
  fmt::print("W5 meta_bench: {} files per client, {} clients (+{} for creates), sync={}, server={} ({}), cores={}\n",
             a.files, a.clients, a.wide_clients, a.sync, a.server.empty() ? "in-process" : a.server,
             a.tcp ? "loopback TCP" : "Unix socket on this host, else TCP",
             std::thread::hardware_concurrency());
  fmt::print("cache: none (every operation is an RPC; POSIX baseline goes through the kernel dcache)\n");
  auto tag = fmt::format("run{}", ::getpid());
  std::map<std::string, PhaseResult> meta;
  {
    RpcBench bench(a, ep);
    Backend b = bench.backend();
    meta = run_w5(b, a, tag);
  }
  Backend pb = posix_backend(a.posix_dir);
  std::map<std::string, PhaseResult> posix;
  if (a.posix) posix = run_w5(pb, a, tag);
  print_table(meta, posix);
  if (store) {
    uint64_t commits = 0;
    for (const char* op : {"create", "mkdir", "unlink"})
      commits += registry.counter("weft_meta_ops_total", "", {{"op", op}}).value();
    uint64_t syncs = registry.counter("weft_meta_wal_syncs_total", "").value();
    auto& sync_us = registry.histogram("weft_meta_wal_sync_us", "");
    fmt::print("server: {} mutations, {} WAL fsyncs ({:.1f} commits per fsync), fsync mean {:.0f} us, p50 {} us\n",
               commits, syncs, syncs ? static_cast<double>(commits) / static_cast<double>(syncs) : 0.0,
               sync_us.count() ? static_cast<double>(sync_us.sum()) / static_cast<double>(sync_us.count()) : 0.0,
               sync_us.quantile(0.5));
  }
  if (!a.json.empty()) write_json(a.json, a, meta, posix);
  if (server) server->stop();
  server.reset();
  store.reset();  // closed before its directory goes
  std::filesystem::remove_all(a.dir, ec);
  std::filesystem::remove_all(a.posix_dir, ec);
  return 0;
}

}  // namespace
}  // namespace weft::meta

int main(int argc, char** argv) { return weft::meta::run(weft::meta::parse(argc, argv)); }
