// storage_server_bench: the storage server over loopback (chains of 1 and 2
// servers in this process, real RPC) beside the chunk engine alone, same run,
// same disk:
//   1 MiB chunk writes and reads (GiB/s), 4 KiB random reads (IOPS, p99).
// Usage: storage_server_bench [--dir /var/tmp] [--dataset-mib 256] [--threads 4]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "common/logging.h"
#include "common/random.h"
#include "rpc/server.h"
#include "storage/storage_server.h"
#include "storage/storage_test_client.h"
#include "storage/test_util.h"

using namespace weft;
using namespace weft::storage;
using SteadyClock = std::chrono::steady_clock;

namespace {

constexpr uint32_t kMiB = 1 << 20;
constexpr char kToken[] = "bench";

struct Args {
  std::string dir = "/var/tmp";
  uint64_t dataset_mib = 256;
  int threads = 4;
  double seconds = 3;
};

struct Figure {
  double gib_per_s = 0, iops = 0, p99_us = 0;
};

// Runs `op(thread, i)` for i in [0, count) split over threads (count 0: until `seconds` pass).
Figure run(int threads, uint64_t count, double seconds, uint64_t bytes_per_op,
           const std::function<bool(int, uint64_t)>& op) {
  std::vector<std::vector<double>> lat(threads);
  std::atomic<uint64_t> next{0}, done{0};
  std::atomic<bool> failed{false};
  auto start = SteadyClock::now();
  auto deadline = start + std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(seconds));
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&, t] {
      while (true) {
        uint64_t i = next++;
        if (count ? i >= count : SteadyClock::now() > deadline) break;
        auto s = SteadyClock::now();
        if (!op(t, i)) failed = true;
        lat[t].push_back(std::chrono::duration<double, std::micro>(SteadyClock::now() - s).count());
        done++;
      }
    });
  for (auto& t : ts) t.join();
  double wall = std::chrono::duration<double>(SteadyClock::now() - start).count();
  std::vector<double> all;
  for (auto& l : lat) all.insert(all.end(), l.begin(), l.end());
  std::sort(all.begin(), all.end());
  Figure f;
  f.gib_per_s = static_cast<double>(done.load() * bytes_per_op) / (1024.0 * kMiB) / wall;
  f.iops = static_cast<double>(done.load()) / wall;
  if (!all.empty()) f.p99_us = all[std::min(all.size() - 1, all.size() * 99 / 100)];
  if (failed) std::fprintf(stderr, "some operations failed\n");
  return f;
}

void print(const char* what, const Figure& w, const Figure& r, const Figure& rr) {
  std::printf("%-22s write 1MiB %6.2f GiB/s | read 1MiB %6.2f GiB/s | rand 4KiB read %8.0f IOPS p99 %7.0f us\n", what,
              w.gib_per_s, r.gib_per_s, rr.iops, rr.p99_us);
}

void bench_engine(const Args& a, const std::vector<std::byte>& data) {
  storage::testing::TempDir dir;
  EngineOptions eo;
  eo.target_id = "bench-engine";
  eo.chunk_size_max = kMiB;
  auto engine = ChunkEngine::open(dir.path(), eo);
  if (!engine) return (void)std::fprintf(stderr, "engine: %s\n", engine.error().to_string().c_str());
  ChunkEngine& e = **engine;
  uint64_t n = a.dataset_mib;
  auto w = run(a.threads, n, 0, kMiB, [&](int, uint64_t i) { return e.write(ChunkId{1, i}, Update::write(0, data)).has_value(); });
  auto r = run(a.threads, n, 0, kMiB, [&](int, uint64_t i) { return e.read(ChunkId{1, i}, 0, kMiB).has_value(); });
  std::vector<Xoshiro256> rng;
  for (int t = 0; t < a.threads; ++t) rng.emplace_back(t + 1);
  auto rr = run(a.threads, 0, a.seconds, 4096, [&](int t, uint64_t) {
    uint64_t v = rng[t].next_u64();
    return e.read(ChunkId{1, v % n}, static_cast<uint32_t>((v >> 32) % 256) * 4096, 4096).has_value();
  });
  print("chunk engine alone", w, r, rr);
}

struct Node {
  Node(rpc::IoPool& io, const std::string& base, const std::string& name, mgmt::TargetId t) {
    StorageConfig sc;
    sc.targets.push_back({t, base + "/" + name, 0, kMiB});
    service = std::move(*open_storage_service(io, sc, rpc::ServiceConfig{.cluster_token = kToken, .name = name}));
    server = std::make_unique<rpc::Server>(io, rpc::ServerOptions{.cluster_token = kToken, .name = name});
    service->register_methods(*server);
    port = *server->listen("127.0.0.1", 0);
  }
  ~Node() {
    server->stop();
    service->stop();
  }
  rpc::Endpoint ep() const { return {"127.0.0.1", port}; }
  std::unique_ptr<StorageService> service;
  std::unique_ptr<rpc::Server> server;
  uint16_t port = 0;
};

void bench_chain(const Args& a, const std::vector<std::byte>& data, int replicas) {
  storage::testing::TempDir dir;
  rpc::IoPool io(2);
  std::vector<std::unique_ptr<Node>> nodes;
  storage::testing::ChainSpec chain{1, 1, {}};
  std::vector<std::pair<mgmt::TargetId, std::string>> targets;
  std::vector<rpc::Endpoint> eps;
  for (int i = 0; i < replicas; ++i) {
    nodes.push_back(std::make_unique<Node>(io, dir.path(), "s" + std::to_string(i), 101 + i));
    chain.entries.push_back({mgmt::TargetId(101 + i), mgmt::TargetState::kServing});
    targets.push_back({mgmt::TargetId(101 + i), nodes.back()->ep().to_string()});
    eps.push_back(nodes.back()->ep());
  }
  rpc::IoPool client_io(2);
  storage::testing::StorageTestClient client(client_io, kToken);
  if (auto r = client.set_routing(eps, targets, {chain}, 1); !r)
    return (void)std::fprintf(stderr, "routing: %s\n", r.error().to_string().c_str());
  auto head = nodes[0]->ep();
  auto tail = nodes.back()->ep();
  uint64_t n = a.dataset_mib;
  auto w = run(a.threads, n, 0, kMiB,
               [&](int, uint64_t i) { return client.write(head, 1, 1, ChunkId{1, i}, 0, data, 0, 0, kMiB).has_value(); });
  auto r = run(a.threads, n, 0, kMiB, [&](int, uint64_t i) {
    auto out = client.read(tail, 1, 1, ChunkId{1, i}, 0, kMiB);
    return out && out->result.code() == 0;
  });
  std::vector<Xoshiro256> rng;
  for (int t = 0; t < a.threads; ++t) rng.emplace_back(t + 1);
  auto rr = run(a.threads, 0, a.seconds, 4096, [&](int t, uint64_t) {
    uint64_t v = rng[t].next_u64();
    auto out = client.read(nodes[v % replicas]->ep(), 1, 1, ChunkId{1, v % n},
                           static_cast<uint32_t>((v >> 32) % 256) * 4096, 4096);
    return out && out->result.code() == 0;
  });
  std::string what = "server, chain of " + std::to_string(replicas);
  print(what.c_str(), w, r, rr);
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--dir") a.dir = v;
    else if (k == "--dataset-mib") a.dataset_mib = std::stoull(v);
    else if (k == "--threads") a.threads = std::stoi(v);
    else if (k == "--seconds") a.seconds = std::stod(v);
  }
  setenv("TMPDIR", a.dir.c_str(), 1);
  spdlog::set_level(spdlog::level::warn);
  auto data = storage::testing::pattern(kMiB, 7);
  std::printf("dataset %llu MiB, %d client threads, dir %s\n", static_cast<unsigned long long>(a.dataset_mib),
              a.threads, a.dir.c_str());
  bench_engine(a, data);
  bench_chain(a, data, 1);
  bench_chain(a, data, 2);
  return 0;
}
