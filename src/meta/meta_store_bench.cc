// meta_store_bench: W5-like metadata load on MetaStore directly (no RPC).
// For 4 and 16 threads, each thread creates N files, stats them (lookup),
// then removes them, first in its own directory, then all in one shared
// directory. Commits are durable (synced WAL) unless --nosync.
// Usage: meta_store_bench [--files N] [--threads 4,16] [--dir PATH] [--nosync] [--raw]
//                         [--no-group-sync] [--own-only]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <rocksdb/db.h>

#include "common/metrics.h"
#include "meta/meta_store.h"

namespace weft::meta {
namespace {

struct Args {
  int files = 10000;
  std::vector<int> threads{4, 16};
  std::string dir = "/tmp/weft_meta_bench";
  bool sync = true;
  bool raw = false;
  bool group_sync = true;
  bool shared = true, own = true;  // also measure plain synced RocksDB puts, the floor of any commit
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    if (s == "--files" && i + 1 < argc) a.files = std::atoi(argv[++i]);
    else if (s == "--dir" && i + 1 < argc) a.dir = argv[++i];
    else if (s == "--nosync") a.sync = false;
    else if (s == "--raw") a.raw = true;
    else if (s == "--no-group-sync") a.group_sync = false;
    else if (s == "--own-only") a.shared = false;
    else if (s == "--threads" && i + 1 < argc) {
      a.threads.clear();
      std::string list = argv[++i];
      for (size_t p = 0; p < list.size();) {
        size_t q = list.find(',', p);
        a.threads.push_back(std::atoi(list.substr(p, q - p).c_str()));
        p = q == std::string::npos ? list.size() : q + 1;
      }
    }
  }
  return a;
}

// Runs fn(thread, i) for every i < files on `threads` threads; returns ops/s.
template <class F>
double phase(int threads, int files, F fn) {
  auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> ts;
  std::atomic<int> errors{0};
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&, t] {
      for (int i = 0; i < files; ++i)
        if (!fn(t, i)) errors++;
    });
  for (auto& th : ts) th.join();
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (errors) fmt::print(stderr, "  {} operations failed\n", errors.load());
  return threads * files / secs;
}

void run(MetaStore& s, int threads, int files, bool shared) {
  Context ctx;
  std::string base = fmt::format("{}_{}", shared ? "shared" : "own", threads);
  auto top = s.mkdir(ctx, kRootIno, base, 0755);
  if (!top) return fmt::print(stderr, "mkdir: {}\n", top.error().to_string());
  std::vector<Ino> dirs(threads, top->ino);
  if (!shared)
    for (int t = 0; t < threads; ++t) dirs[t] = s.mkdir(ctx, top->ino, fmt::format("t{}", t), 0755)->ino;
  auto name = [](int t, int i) { return fmt::format("f{}_{}", t, i); };
  double create = phase(threads, files, [&](int t, int i) {
    return s.create(ctx, dirs[t], name(t, i), 0644, true, false).has_value();
  });
  double stat = phase(threads, files, [&](int t, int i) { return s.lookup(ctx, dirs[t], name(t, i)).has_value(); });
  double remove = phase(threads, files, [&](int t, int i) { return s.unlink(ctx, dirs[t], name(t, i)).has_value(); });
  fmt::print("{:>6} dir{} {:>2} threads x {} files: create {:>8.0f} ops/s  stat {:>9.0f} ops/s  remove {:>8.0f} ops/s\n",
             shared ? "shared" : "own", shared ? " " : "s", threads, files, create, stat, remove);
  std::fflush(stdout);
}

void run_raw(rocksdb::DB& db, int threads, int files, bool sync) {
  rocksdb::WriteOptions wo;
  wo.sync = sync;
  double put = phase(threads, files, [&](int t, int i) {
    return db.Put(wo, fmt::format("Zraw_{}_{}", t, i), "value-of-about-64-bytes-like-an-inode-record-0123456789").ok();
  });
  double del = phase(threads, files, [&](int t, int i) { return db.Delete(wo, fmt::format("Zraw_{}_{}", t, i)).ok(); });
  fmt::print("   raw rocksdb {:>2} threads x {} keys: put {:>8.0f} ops/s  delete {:>8.0f} ops/s\n", threads, files, put, del);
  std::fflush(stdout);
}

}  // namespace
}  // namespace weft::meta

int main(int argc, char** argv) {
  using namespace weft::meta;
  Args a = parse(argc, argv);
  std::filesystem::remove_all(a.dir);
  StoreOptions o;
  o.path = a.dir;
  o.sync = a.sync;
  o.group_sync = a.group_sync;
  o.chain_count = 16;
  auto store = MetaStore::open(o);
  if (!store) {
    fmt::print(stderr, "open: {}\n", store.error().to_string());
    return 1;
  }
  fmt::print("meta_store_bench: sync={} group_sync={} path={}\n", a.sync, a.group_sync, a.dir);
  if (a.raw)
    for (int t : a.threads) run_raw(*(*store)->db(), t, a.files, a.sync);
  for (bool shared : {false, true})
    if (shared ? a.shared : a.own)
      for (int t : a.threads) run(**store, t, a.files, shared);
  auto& reg = weft::metrics::Registry::global();
  fmt::print("commit retries (lock conflicts): {}\n", reg.counter("weft_meta_commit_retries_total", "").value());
  auto& h = reg.histogram("weft_meta_op_latency_us", "", {{"op", "create"}});
  fmt::print("create latency: p50 {} us, p99 {} us\n", h.quantile(0.5), h.quantile(0.99));
  store->reset();
  std::filesystem::remove_all(a.dir);
  return 0;
}
