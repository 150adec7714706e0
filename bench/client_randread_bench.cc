// 4 KiB random reads through libweft at a fixed queue depth, beside the same
// reads with O_DIRECT pread on a local file (the disk), in one run.
// Usage: client_randread_bench --config DIR/client.toml [--file-mib 1024]
//          [--qd 16] [--seconds 10] [--baseline-dir /var/tmp] [--block-kib 4]
// --block-kib 128 --qd 1 shows what one W3-sized read costs beside the disk.
// --batch B: the same queue depth through submit_reads, qd/B batches of B
// reads in flight from one thread (p50/p99 are then per batch).
// Queue depth = reader threads, each with one read outstanding (what the
// BASELINES.md figure measured with fio-style QD16 on the disk).
// Both files hold benchsuite/content.h content and every read is checked
// (after its latency is taken). IOPS = reads that succeeded, whole and
// correct / elapsed seconds; p50/p99 are nearest-rank over every read (or
// batch) issued, failed ones included.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <future>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "benchsuite/content.h"
#include "common/buffer.h"
#include "weft/client.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Figures {
  double iops = 0;  // good reads / elapsed
  double p50_us = 0;
  double p99_us = 0;
  uint64_t errors = 0;      // reads that failed or came back short
  uint64_t mismatches = 0;  // reads whose bytes differ from the file's content
};

// Nearest rank: the smallest value with at least p of the values at or below it.
float percentile(const std::vector<float>& sorted, double p) {
  if (sorted.empty()) return 0;
  auto k = static_cast<size_t>(std::ceil(p * static_cast<double>(sorted.size())));
  return sorted[std::clamp<size_t>(k, 1, sorted.size()) - 1];
}

Figures finish(std::vector<float>& lat, uint64_t good, uint64_t errors, uint64_t mismatches, double elapsed) {
  std::sort(lat.begin(), lat.end());
  Figures f;
  f.iops = elapsed > 0 ? static_cast<double>(good) / elapsed : 0;
  f.p50_us = percentile(lat, 0.50);
  f.p99_us = percentile(lat, 0.99);
  f.errors = errors;
  f.mismatches = mismatches;
  return f;
}

// The file's content at `offset` (benchsuite/content.h).
bool matches(std::span<const std::byte> data, uint64_t key, uint64_t offset) {
  return weft::bench::count_mismatches(data, key, offset) == 0;
}

// Runs `qd` threads calling read_one(thread, offset) (true: a whole block
// read) for `seconds`; check(thread, offset) then verifies the block, untimed.
template <class F, class C>
Figures run(int qd, double seconds, uint64_t file_bytes, size_t block, F read_one, C check) {
  std::vector<std::vector<float>> lat(static_cast<size_t>(qd));
  std::atomic<uint64_t> errors{0}, mismatches{0}, good{0};
  std::vector<std::thread> threads;
  auto start_all = Clock::now();
  auto end = start_all + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  for (int t = 0; t < qd; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(static_cast<uint64_t>(t) * 7919 + 1);
      uint64_t blocks = file_bytes / block;
      while (Clock::now() < end) {
        uint64_t off = (rng() % blocks) * block;
        auto start = Clock::now();
        bool ok = read_one(t, off);
        lat[static_cast<size_t>(t)].push_back(
            std::chrono::duration<float, std::micro>(Clock::now() - start).count());
        if (!ok) errors.fetch_add(1);
        else if (!check(t, off)) mismatches.fetch_add(1);
        else good.fetch_add(1);
      }
    });
  }
  for (auto& th : threads) th.join();
  double elapsed = std::chrono::duration<double>(Clock::now() - start_all).count();
  std::vector<float> all;
  for (auto& l : lat) all.insert(all.end(), l.begin(), l.end());
  return finish(all, good.load(), errors.load(), mismatches.load(), elapsed);
}

// One thread keeps qd/batch batches of `batch` reads in flight through
// submit_reads (the native asynchronous path): it waits for the oldest and
// submits the next in its place. Latency is per batch, submit to completion.
Figures run_batches(weft::Client& c, const weft::Inode& inode, int qd, int batch, double seconds, uint64_t file_bytes,
                    size_t block, std::vector<std::vector<std::byte>>& bufs, uint64_t key) {
  struct Pending {
    Clock::time_point start;
    std::future<std::vector<weft::Result<size_t>>> done;
    std::vector<uint64_t> offsets;
  };
  int slots = std::max(1, qd / batch);
  std::mt19937_64 rng(104729);
  auto submit = [&](int slot) {
    std::vector<weft::ReadOp> ops(static_cast<size_t>(batch));
    std::vector<uint64_t> offsets;
    for (int k = 0; k < batch; ++k) {
      auto& op = ops[static_cast<size_t>(k)];
      op.ino = inode.ino;
      op.offset = (rng() % (file_bytes / block)) * block;
      offsets.push_back(op.offset);
      op.dst = bufs[static_cast<size_t>(slot * batch + k)];
      op.layout = inode.layout;
      op.file_size = inode.size;
    }
    return Pending{Clock::now(), c.submit_reads(c.default_cred(), std::move(ops)), std::move(offsets)};
  };
  std::deque<std::pair<int, Pending>> inflight;
  for (int s = 0; s < slots; ++s) inflight.emplace_back(s, submit(s));
  std::vector<float> lat;
  uint64_t errors = 0, mismatches = 0, good = 0;
  auto start = Clock::now();
  auto end = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  while (!inflight.empty()) {
    auto [slot, p] = std::move(inflight.front());
    inflight.pop_front();
    auto results = p.done.get();
    lat.push_back(std::chrono::duration<float, std::micro>(Clock::now() - p.start).count());
    for (size_t k = 0; k < results.size(); ++k) {
      const auto& r = results[k];
      if (!r || *r != block) {
        ++errors;
      } else if (!matches(bufs[static_cast<size_t>(slot * batch) + k], key, p.offsets[k])) {
        ++mismatches;
      } else {
        ++good;
      }
    }
    if (Clock::now() < end) inflight.emplace_back(slot, submit(slot));
  }
  double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  return finish(lat, good, errors, mismatches, elapsed);
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
  const uint64_t key = weft::bench::file_key(path);
  // The data file (reused when it is already there with the right size and
  // its first block has the expected content).
  auto existing = c.resolve(c.default_cred(), path);
  bool reuse = existing && existing->size == bytes;
  if (reuse) {
    std::vector<std::byte> head(std::min<uint64_t>(bytes, 1 << 20));
    auto f = c.open_path(c.default_cred(), path, O_RDONLY);
    auto n = f ? (*f)->pread(head, 0) : weft::Result<size_t>(std::unexpected(f.error()));
    reuse = n && *n == head.size() && matches(head, key, 0);
  }
  if (!reuse) {
    auto f = c.open_path(c.default_cred(), path, O_CREAT | O_WRONLY | O_TRUNC);
    if (!f) return std::fprintf(stderr, "create: %s\n", f.error().to_string().c_str()), 1;
    std::vector<std::byte> block(8 << 20);
    for (uint64_t off = 0; off < bytes; off += block.size()) {
      auto part = std::span(block).first(std::min<uint64_t>(block.size(), bytes - off));
      weft::bench::fill_content(part, key, off);
      if (auto w = (*f)->pwrite(part, off); !w)
        return std::fprintf(stderr, "write: %s\n", w.error().to_string().c_str()), 1;
    }
    if (auto r = (*f)->close(); !r) return std::fprintf(stderr, "close: %s\n", r.error().to_string().c_str()), 1;
  }
  auto file = c.open_path(c.default_cred(), path, O_RDONLY);
  if (!file) return std::fprintf(stderr, "open: %s\n", file.error().to_string().c_str()), 1;
  // One buffer per read in flight: qd, or qd/batch batches of `batch`.
  size_t buffers = static_cast<size_t>(std::max(qd, std::max(1, qd / std::max(1, batch)) * batch));
  std::vector<std::vector<std::byte>> bufs(buffers, std::vector<std::byte>(block));
  Figures weft_fig;
  if (batch <= 1) {
    weft_fig = run(
        qd, seconds, bytes, block,
        [&](int t, uint64_t off) {
          auto n = (*file)->pread(bufs[static_cast<size_t>(t)], off);
          return n && *n == block;
        },
        [&](int t, uint64_t off) { return matches(bufs[static_cast<size_t>(t)], key, off); });
  } else {
    auto inode = c.resolve(c.default_cred(), path);
    if (!inode) return std::fprintf(stderr, "resolve: %s\n", inode.error().to_string().c_str()), 1;
    weft_fig = run_batches(c, *inode, qd, batch, seconds, bytes, block, bufs, key);
  }

  // Baseline: the same reads on a local file, O_DIRECT (no page cache).
  std::string local = baseline_dir + "/weft-randread-baseline.dat";
  int fd = ::open(local.c_str(), O_RDWR | O_CREAT, 0644);
  if (fd < 0) return std::perror("baseline file"), 1;
  struct stat st {};
  ::fstat(fd, &st);
  bool local_ok = static_cast<uint64_t>(st.st_size) == bytes;
  if (local_ok) {
    std::vector<std::byte> head(std::min<uint64_t>(bytes, 1 << 20));
    local_ok = ::pread(fd, head.data(), head.size(), 0) == static_cast<ssize_t>(head.size()) && matches(head, key, 0);
  }
  if (!local_ok) {
    std::vector<std::byte> block(8 << 20);
    for (uint64_t off = 0; off < bytes; off += block.size()) {
      auto part = std::span(block).first(std::min<uint64_t>(block.size(), bytes - off));
      weft::bench::fill_content(part, key, off);
      if (::pwrite(fd, part.data(), part.size(), static_cast<off_t>(off)) != static_cast<ssize_t>(part.size()))
        return std::perror("baseline write"), 1;
    }
    ::fsync(fd);
  }
  ::close(fd);
  int dfd = ::open(local.c_str(), O_RDONLY | O_DIRECT);
  if (dfd < 0) return std::perror("baseline O_DIRECT"), 1;
  std::vector<weft::Buffer> dbufs;
  for (int t = 0; t < qd; ++t) dbufs.push_back(weft::Buffer::allocate(block));
  Figures disk = run(
      qd, seconds, bytes, block,
      [&](int t, uint64_t off) {
        return ::pread(dfd, dbufs[static_cast<size_t>(t)].data(), block, static_cast<off_t>(off)) ==
               static_cast<ssize_t>(block);
      },
      [&](int t, uint64_t off) {
        auto& b = dbufs[static_cast<size_t>(t)];
        return matches(std::span<const std::byte>(b.data(), block), key, off);
      });
  ::close(dfd);
  if (!keep_baseline) ::unlink(local.c_str());

  std::printf("%zu KiB random reads, QD %d, %.0f s, file %llu MiB\n", block_kib, qd, seconds,
              static_cast<unsigned long long>(file_mib));
  std::printf("%-22s %10s %10s %10s %7s %9s\n", "", "IOPS", "p50 us", "p99 us", "errors", "mismatch");
  std::printf("%-22s %10.0f %10.0f %10.0f %7llu %9llu\n", "weft (native)", weft_fig.iops, weft_fig.p50_us,
              weft_fig.p99_us, static_cast<unsigned long long>(weft_fig.errors),
              static_cast<unsigned long long>(weft_fig.mismatches));
  std::printf("%-22s %10.0f %10.0f %10.0f %7llu %9llu\n", "local O_DIRECT", disk.iops, disk.p50_us, disk.p99_us,
              static_cast<unsigned long long>(disk.errors), static_cast<unsigned long long>(disk.mismatches));
  std::printf("(IOPS: whole, verified reads / elapsed s; every read checked%s)\n",
              batch > 1 ? "; weft p50/p99 per batch" : "");
  std::printf("ratio weft/local IOPS: %.2f\n", disk.iops > 0 ? weft_fig.iops / disk.iops : 0.0);
  return weft_fig.errors == 0 && weft_fig.mismatches == 0 && disk.errors == 0 && disk.mismatches == 0 ? 0 : 1;
}
