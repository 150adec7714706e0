// 4 KiB random reads through libweft at a fixed queue depth, beside the same
// reads with O_DIRECT pread on a local file (the disk), in one run.
// Usage: client_randread_bench --config DIR/client.toml [--file-mib 1024]
//          [--qd 16] [--seconds 10] [--baseline-dir /var/tmp] [--block-kib 4]
// --block-kib 128 --qd 1 shows what one W3-sized read costs beside the disk.
// --batch B: the same queue depth through submit_reads, qd/B batches of B
// reads in flight from one thread (p50/p99 are then per batch).
// Queue depth = reader threads, each with one read outstanding (what the
// BASELINES.md figure measured with fio-style QD16 on the disk).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <future>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/buffer.h"
#include "weft/client.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Figures {
  double iops = 0;
  double p50_us = 0;
  double p99_us = 0;
  uint64_t errors = 0;
};

// Runs `qd` threads calling read_one(thread, offset) for `seconds`.
template <class F>
Figures run(int qd, double seconds, uint64_t file_bytes, size_t block, F read_one) {
  std::vector<std::vector<float>> lat(static_cast<size_t>(qd));
  std::atomic<uint64_t> errors{0};
  std::vector<std::thread> threads;
  auto end = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  for (int t = 0; t < qd; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(static_cast<uint64_t>(t) * 7919 + 1);
      uint64_t blocks = file_bytes / block;
      while (Clock::now() < end) {
        uint64_t off = (rng() % blocks) * block;
        auto start = Clock::now();
        if (!read_one(t, off)) errors.fetch_add(1);
        lat[static_cast<size_t>(t)].push_back(
            std::chrono::duration<float, std::micro>(Clock::now() - start).count());
      }
    });
  }
  for (auto& th : threads) th.join();
  std::vector<float> all;
  for (auto& l : lat) all.insert(all.end(), l.begin(), l.end());
  std::sort(all.begin(), all.end());
  Figures f;
  if (all.empty()) return f;
  f.iops = static_cast<double>(all.size()) / seconds;
  f.p50_us = all[all.size() / 2];
  f.p99_us = all[all.size() * 99 / 100];
  f.errors = errors.load();
  return f;
}

// One thread keeps qd/batch batches of `batch` reads in flight through
// submit_reads (the native asynchronous path): it waits for the oldest and
// submits the next in its place. Latency is per batch, submit to completion.
Figures run_batches(weft::Client& c, const weft::Inode& inode, int qd, int batch, double seconds, uint64_t file_bytes,
                    size_t block, std::vector<std::vector<std::byte>>& bufs) {
  struct Pending {
    Clock::time_point start;
    std::future<std::vector<weft::Result<size_t>>> done;
  };
  int slots = std::max(1, qd / batch);
  std::mt19937_64 rng(104729);
  auto submit = [&](int slot) {
    std::vector<weft::ReadOp> ops(static_cast<size_t>(batch));
    for (int k = 0; k < batch; ++k) {
      auto& op = ops[static_cast<size_t>(k)];
      op.ino = inode.ino;
      op.offset = (rng() % (file_bytes / block)) * block;
      op.dst = bufs[static_cast<size_t>(slot * batch + k)];
      op.layout = inode.layout;
      op.file_size = inode.size;
    }
    return Pending{Clock::now(), c.submit_reads(c.default_cred(), std::move(ops))};
  };
  std::deque<std::pair<int, Pending>> inflight;
  for (int s = 0; s < slots; ++s) inflight.emplace_back(s, submit(s));
  std::vector<float> lat;
  uint64_t errors = 0, reads = 0;
  auto start = Clock::now();
  auto end = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  while (!inflight.empty()) {
    auto [slot, p] = std::move(inflight.front());
    inflight.pop_front();
    for (auto& r : p.done.get()) errors += (!r || *r != block) ? 1 : 0;
    lat.push_back(std::chrono::duration<float, std::micro>(Clock::now() - p.start).count());
    reads += static_cast<uint64_t>(batch);
    if (Clock::now() < end) inflight.emplace_back(slot, submit(slot));
  }
  double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  std::sort(lat.begin(), lat.end());
  Figures f;
  if (lat.empty()) return f;
  f.iops = static_cast<double>(reads) / elapsed;
  f.p50_us = lat[lat.size() / 2];
  f.p99_us = lat[lat.size() * 99 / 100];
  f.errors = errors;
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"random reads (4 KiB by default) through libweft vs O_DIRECT on a local file"};
  std::string config, baseline_dir = "/var/tmp";
  uint64_t file_mib = 1024;
  int qd = 16;
  double seconds = 10;
  size_t block_kib = 4;
  app.add_option("--config", config, "client config")->required();
  app.add_option("--file-mib", file_mib);
  app.add_option("--qd", qd);
  app.add_option("--seconds", seconds);
  app.add_option("--baseline-dir", baseline_dir);
  bool keep_baseline = false;
  int batch = 1;
  app.add_option("--batch", batch,
                 "reads per submit_reads batch; one thread keeps qd/batch batches in flight (1: a pread per thread)");
  app.add_flag("--keep-baseline", keep_baseline, "keep the local baseline file for the next run (it is reused when its size matches)");
  app.add_option("--block-kib", block_kib, "read size, KiB (a power of two up to 1024)")->check(CLI::Range(1, 1024));
  CLI11_PARSE(app, argc, argv);
  const size_t block = block_kib << 10;
  const uint64_t bytes = file_mib << 20;

  weft::ClientOptions o;
  o.config_path = config;
  auto client = weft::Client::connect(o);
  if (!client) return std::fprintf(stderr, "connect: %s\n", client.error().to_string().c_str()), 1;
  auto& c = **client;
  std::string path = "/randread-bench.dat";
  // The data file (reused when it is already there with the right size).
  auto existing = c.resolve(c.default_cred(), path);
  if (!existing || existing->size != bytes) {
    auto f = c.open_path(c.default_cred(), path, O_CREAT | O_WRONLY | O_TRUNC);
    if (!f) return std::fprintf(stderr, "create: %s\n", f.error().to_string().c_str()), 1;
    std::vector<std::byte> block(8 << 20);
    std::mt19937_64 rng(1);
    for (auto& b : block) b = static_cast<std::byte>(rng());
    for (uint64_t off = 0; off < bytes; off += block.size())
      if (auto w = (*f)->pwrite(std::span(block).first(std::min<uint64_t>(block.size(), bytes - off)), off); !w)
        return std::fprintf(stderr, "write: %s\n", w.error().to_string().c_str()), 1;
    if (auto r = (*f)->close(); !r) return std::fprintf(stderr, "close: %s\n", r.error().to_string().c_str()), 1;
  }
  auto file = c.open_path(c.default_cred(), path, O_RDONLY);
  if (!file) return std::fprintf(stderr, "open: %s\n", file.error().to_string().c_str()), 1;
  // One buffer per read in flight: qd, or qd/batch batches of `batch`.
  size_t buffers = static_cast<size_t>(std::max(qd, std::max(1, qd / std::max(1, batch)) * batch));
  std::vector<std::vector<std::byte>> bufs(buffers, std::vector<std::byte>(block));
  Figures weft_fig;
  if (batch <= 1) {
    weft_fig = run(qd, seconds, bytes, block, [&](int t, uint64_t off) {
      auto n = (*file)->pread(bufs[static_cast<size_t>(t)], off);
      return n && *n == block;
    });
  } else {
    auto inode = c.resolve(c.default_cred(), path);
    if (!inode) return std::fprintf(stderr, "resolve: %s\n", inode.error().to_string().c_str()), 1;
    weft_fig = run_batches(c, *inode, qd, batch, seconds, bytes, block, bufs);
  }

  // Baseline: the same reads on a local file, O_DIRECT (no page cache).
  std::string local = baseline_dir + "/weft-randread-baseline.dat";
  int fd = ::open(local.c_str(), O_RDWR | O_CREAT, 0644);
  if (fd < 0) return std::perror("baseline file"), 1;
  struct stat st {};
  ::fstat(fd, &st);
  if (static_cast<uint64_t>(st.st_size) != bytes) {
    std::vector<char> block(8 << 20, 'x');
    for (uint64_t off = 0; off < bytes; off += block.size())
      if (::pwrite(fd, block.data(), std::min<uint64_t>(block.size(), bytes - off), static_cast<off_t>(off)) < 0)
        return std::perror("baseline write"), 1;
    ::fsync(fd);
  }
  ::close(fd);
  int dfd = ::open(local.c_str(), O_RDONLY | O_DIRECT);
  if (dfd < 0) return std::perror("baseline O_DIRECT"), 1;
  std::vector<weft::Buffer> dbufs;
  for (int t = 0; t < qd; ++t) dbufs.push_back(weft::Buffer::allocate(block));
  Figures disk = run(qd, seconds, bytes, block, [&](int t, uint64_t off) {
    return ::pread(dfd, dbufs[static_cast<size_t>(t)].data(), block, static_cast<off_t>(off)) == static_cast<ssize_t>(block);
  });
  ::close(dfd);
  if (!keep_baseline) ::unlink(local.c_str());

  std::printf("%zu KiB random reads, QD %d, %.0f s, file %llu MiB\n", block_kib, qd, seconds,
              static_cast<unsigned long long>(file_mib));
  std::printf("%-22s %10s %10s %10s %7s\n", "", "IOPS", "p50 us", "p99 us", "errors");
  std::printf("%-22s %10.0f %10.0f %10.0f %7llu\n", "weft (native)", weft_fig.iops, weft_fig.p50_us, weft_fig.p99_us,
              static_cast<unsigned long long>(weft_fig.errors));
  std::printf("%-22s %10.0f %10.0f %10.0f %7llu\n", "local O_DIRECT", disk.iops, disk.p50_us, disk.p99_us,
              static_cast<unsigned long long>(disk.errors));
  std::printf("ratio weft/local IOPS: %.2f\n", disk.iops > 0 ? weft_fig.iops / disk.iops : 0.0);
  return weft_fig.errors == 0 ? 0 : 1;
}
