// chunk_engine_bench: the chunk engine against a raw O_DIRECT baseline on the
// same disk, in the same run.
//   1 MiB sequential writes (durable: raw pwrite+fdatasync vs engine write);
//   --write-rounds N repeats that comparison N more times, each round on a
//   fresh preallocated raw file and fresh chunks, raw and engine alternating,
//   and prints every round's ratio and their median, with where the engine's
//   time went (stage = slot write, plus its fdatasync unless deferred; commit =
//   the group's slab and index syncs;
//   --linger-us and --defer-slot-sync set EngineOptions commit_linger_us_max
//   and defer_slot_sync), --reads 0 stops after the writes;
//   1 MiB sequential reads, 4 KiB random reads at queue depth --qd: through
//   the engine's own ring (any thread submits, a reaper thread completes) and
//   through the per-I/O-thread ring the storage server's read handler uses
//   (storage/thread_ring.h: submitted and completed on one event-loop thread).
// Usage: chunk_engine_bench [--dir /var/tmp] [--dataset-mib 512] [--threads 4]
//                           [--qd 16] [--seconds 5] [--write-rounds 0] [--reads 1] [--linger-us N]
//                           [--defer-slot-sync 1]
#include <fcntl.h>
#include <unistd.h>

#include <liburing.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <asio/post.hpp>

#include "common/buffer.h"
#include "common/random.h"
#include "rpc/io_pool.h"
#include "storage/chunk_engine.h"
#include "storage/thread_ring.h"

using namespace weft;
using namespace weft::storage;
using Clock = std::chrono::steady_clock;

namespace {

constexpr uint32_t kMiB = 1 << 20;

struct Args {
  std::string dir = "/var/tmp";
  uint64_t dataset_mib = 512;
  int threads = 4;
  int qd = 16;
  double seconds = 5;
  int write_rounds = 0;
  bool reads = true;  // --reads 0: write lines only
  int linger_us = -1;  // --linger-us: the engine's commit_linger_us_max (-1: its default)
  bool defer_slot_sync = true;  // --defer-slot-sync 0: EngineOptions::defer_slot_sync off
};

struct Figure {
  double mib_per_s = 0, iops = 0, p50_us = 0, p99_us = 0;
};

double secs(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

Figure summarize(std::vector<double>& lat_us, uint64_t bytes, Clock::duration wall) {
  Figure f;
  std::sort(lat_us.begin(), lat_us.end());
  f.mib_per_s = static_cast<double>(bytes) / kMiB / secs(wall);
  f.iops = static_cast<double>(lat_us.size()) / secs(wall);
  if (!lat_us.empty()) {
    f.p50_us = lat_us[lat_us.size() / 2];
    f.p99_us = lat_us[std::min(lat_us.size() - 1, lat_us.size() * 99 / 100)];
  }
  return f;
}

// Runs fn(thread, i) for i in [0, n) split over `threads` threads; returns latencies.
template <class Fn>
Figure run_parallel(int threads, uint64_t n, uint64_t bytes_each, Fn fn) {
  std::vector<std::vector<double>> lat(threads);
  auto start = Clock::now();
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&, t] {
      for (uint64_t i = t; i < n; i += threads) {
        auto s = Clock::now();
        fn(t, i);
        lat[t].push_back(secs(Clock::now() - s) * 1e6);
      }
    });
  for (auto& th : ts) th.join();
  auto wall = Clock::now() - start;
  std::vector<double> all;
  for (auto& v : lat) all.insert(all.end(), v.begin(), v.end());
  return summarize(all, n * bytes_each, wall);
}

void die(const char* what) {
  std::perror(what);
  std::exit(1);
}

// Raw io_uring 4 KiB random reads at queue depth qd on one thread.
Figure raw_random_reads(int fd, uint64_t blocks, int qd, double seconds) {
  io_uring ring;
  if (io_uring_queue_init(qd * 2, &ring, 0) < 0) die("io_uring_queue_init");
  std::vector<Buffer> bufs;
  std::vector<Clock::time_point> started(qd);
  for (int i = 0; i < qd; ++i) bufs.push_back(Buffer::allocate(4096));
  Xoshiro256 rng(1);
  auto submit = [&](int slot) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring);
    io_uring_prep_read(sqe, fd, bufs[slot].data(), 4096, rng.uniform(blocks) * 4096);
    io_uring_sqe_set_data64(sqe, slot);
    started[slot] = Clock::now();
  };
  std::vector<double> lat;
  auto start = Clock::now();
  auto end = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  for (int i = 0; i < qd; ++i) submit(i);
  io_uring_submit(&ring);
  int inflight = qd;
  while (inflight > 0) {
    io_uring_cqe* cqe;
    if (io_uring_wait_cqe(&ring, &cqe) < 0) die("io_uring_wait_cqe");
    int slot = static_cast<int>(io_uring_cqe_get_data64(cqe));
    if (cqe->res != 4096) die("raw read");
    io_uring_cqe_seen(&ring, cqe);
    auto now = Clock::now();
    lat.push_back(secs(now - started[slot]) * 1e6);
    if (now < end) {
      submit(slot);
      io_uring_submit(&ring);
    } else {
      --inflight;
    }
  }
  auto wall = Clock::now() - start;
  io_uring_queue_exit(&ring);
  return summarize(lat, lat.size() * 4096, wall);
}

// Engine 4 KiB random reads: one driver thread keeps qd read_async calls in flight.
Figure engine_random_reads(ChunkEngine& e, uint64_t chunks, int qd, double seconds) {
  std::mutex mu;
  std::vector<double> lat;
  std::atomic<int> inflight{0};
  std::atomic<bool> failed{false};
  Xoshiro256 rng(2);
  auto start = Clock::now();
  auto end = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  while (Clock::now() < end) {
    int cur = inflight.load();
    if (cur >= qd) {
      inflight.wait(cur);
      continue;
    }
    inflight.fetch_add(1);
    ChunkId id{1, rng.uniform(chunks)};
    uint32_t off = static_cast<uint32_t>(rng.uniform(kMiB / 4096) * 4096);
    auto s = Clock::now();
    e.read_async(id, off, 4096, [&, s](Result<ReadResult> r) {
      if (!r || r->data_length != 4096) failed = true;
      double us = secs(Clock::now() - s) * 1e6;
      {
        std::lock_guard lock(mu);
        lat.push_back(us);
      }
      inflight.fetch_sub(1);
      inflight.notify_one();
    });
  }
  while (inflight.load() > 0) std::this_thread::yield();
  auto wall = Clock::now() - start;
  if (failed) die("engine random read");
  return summarize(lat, lat.size() * 4096, wall);
}

// Keeps qd read_async calls in flight from one I/O thread through its
// ThreadRing: each completion (on that thread) issues the next read.
struct RingDriver {
  ChunkEngine& e;
  ThreadRing& ring;
  uint64_t chunks;
  Clock::time_point end;
  Xoshiro256 rng{3};
  std::vector<double> lat;
  int inflight = 0;
  bool failed = false;
  std::promise<void> done;

  void issue() {
    ++inflight;
    ChunkId id{1, rng.uniform(chunks)};
    uint32_t off = static_cast<uint32_t>(rng.uniform(kMiB / 4096) * 4096);
    auto s = Clock::now();
    e.read_async(id, off, 4096, ring, [this, s](Result<ReadResult> r) {
      if (!r || r->data_length != 4096) failed = true;
      lat.push_back(secs(Clock::now() - s) * 1e6);
      --inflight;
      if (!failed && Clock::now() < end) {
        issue();
      } else if (inflight == 0) {
        done.set_value();
      }
    });
  }
};

Figure engine_random_reads_thread_ring(ChunkEngine& e, uint64_t chunks, int qd, double seconds) {
  rpc::IoPool io(1, "bench-io");
  std::unique_ptr<RingDriver> d;
  auto start = Clock::now();
  auto end = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  std::promise<void> started;
  asio::post(io.at(0), [&] {
    ThreadRing* ring = ThreadRing::for_this_thread();
    if (!ring) die("thread ring");
    d = std::make_unique<RingDriver>(RingDriver{e, *ring, chunks, end});
    for (int i = 0; i < qd; ++i) d->issue();
    started.set_value();
  });
  started.get_future().wait();
  d->done.get_future().wait();
  auto wall = Clock::now() - start;
  io.stop();
  if (d->failed) die("engine random read (thread ring)");
  return summarize(d->lat, d->lat.size() * 4096, wall);
}

void print(const char* what, const Figure& raw, const Figure& eng, bool iops) {
  if (iops) {
    std::printf("%-28s raw %9.0f IOPS p99 %7.0f us | engine %9.0f IOPS p99 %7.0f us | ratio %5.1f%%\n", what,
                raw.iops, raw.p99_us, eng.iops, eng.p99_us, 100 * eng.iops / raw.iops);
  } else {
    std::printf("%-28s raw %9.1f MiB/s p99 %7.0f us | engine %9.1f MiB/s p99 %7.0f us | ratio %5.1f%%\n", what,
                raw.mib_per_s, raw.p99_us, eng.mib_per_s, eng.p99_us, 100 * eng.mib_per_s / raw.mib_per_s);
  }
  std::fflush(stdout);
}

// Mean of the observations a histogram got since `before` (count, sum).
struct HistMark {
  uint64_t count = 0, sum = 0;
};
HistMark mark(const metrics::Histogram& h) { return {h.count(), h.sum()}; }
double mean_since(const metrics::Histogram& h, HistMark before) {
  uint64_t n = h.count() - before.count;
  return n == 0 ? 0 : static_cast<double>(h.sum() - before.sum) / static_cast<double>(n);
}

// One more raw-vs-engine durable write round on fresh space: a new
// preallocated raw file and chunks of inode `inode` (new slots).
double write_round(const Args& a, const std::string& root, ChunkEngine& e, std::vector<Buffer>& bufs, uint64_t inode) {
  uint64_t n = a.dataset_mib;
  std::string path = root + "/raw_round.dat";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0644);
  if (fd < 0 || ::fallocate(fd, 0, 0, static_cast<off_t>(n * kMiB)) != 0) die("raw round file");
  Figure raw = run_parallel(a.threads, n, kMiB, [&](int t, uint64_t i) {
    if (::pwrite(fd, bufs[t].data(), kMiB, static_cast<off_t>(i * kMiB)) != kMiB || ::fdatasync(fd) != 0) die("raw write");
  });
  ::close(fd);
  ::unlink(path.c_str());
  auto& reg = metrics::Registry::global();
  metrics::Labels l{{"target", "bench"}};
  auto& stage = reg.histogram("weft_storage_stage_latency_us", "", l);
  auto& commit = reg.histogram("weft_storage_commit_latency_us", "", l);
  auto& group = reg.histogram("weft_storage_commit_group_size", "", l);
  HistMark s0 = mark(stage), c0 = mark(commit), g0 = mark(group);
  Figure eng = run_parallel(a.threads, n, kMiB, [&](int t, uint64_t i) {
    auto r = e.write(ChunkId{inode, i}, Update::write(0, bufs[t].span()));
    if (!r) die(r.error().to_string().c_str());
  });
  double ratio = 100 * eng.mib_per_s / raw.mib_per_s;
  std::printf("  write round %-3lu raw %7.1f MiB/s | engine %7.1f MiB/s | ratio %5.1f%% | engine mean stage %6.0f us "
              "commit %6.0f us group %4.1f\n",
              inode, raw.mib_per_s, eng.mib_per_s, ratio, mean_since(stage, s0), mean_since(commit, c0),
              mean_since(group, g0));
  std::fflush(stdout);
  return ratio;
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--dir") a.dir = v;
    else if (k == "--dataset-mib") a.dataset_mib = std::stoull(v);
    else if (k == "--threads") a.threads = std::stoi(v);
    else if (k == "--qd") a.qd = std::stoi(v);
    else if (k == "--seconds") a.seconds = std::stod(v);
    else if (k == "--write-rounds") a.write_rounds = std::stoi(v);
    else if (k == "--reads") a.reads = v != "0";
    else if (k == "--linger-us") a.linger_us = std::stoi(v);
    else if (k == "--defer-slot-sync") a.defer_slot_sync = v != "0";
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      std::exit(2);
    }
  }
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  Args a = parse(argc, argv);
  std::string root = a.dir + "/weft_chunk_bench_" + std::to_string(::getpid());
  std::filesystem::create_directories(root);
  uint64_t n = a.dataset_mib;
  std::printf("dir %s, dataset %lu MiB, %d threads for 1 MiB I/O, qd %d for 4 KiB random reads\n", root.c_str(), n,
              a.threads, a.qd);

  std::string raw_path = root + "/raw.dat";
  int fd = ::open(raw_path.c_str(), O_RDWR | O_CREAT | O_DIRECT, 0644);
  if (fd < 0 || ::fallocate(fd, 0, 0, static_cast<off_t>(n * kMiB)) != 0) die("raw file");
  EngineOptions o;
  o.target_id = "bench";
  o.chunk_size_max = kMiB;
  if (a.linger_us >= 0) o.commit_linger_us_max = static_cast<uint32_t>(a.linger_us);
  o.defer_slot_sync = a.defer_slot_sync;
  auto opened = ChunkEngine::open(root + "/target", o);
  if (!opened) {
    std::fprintf(stderr, "open engine: %s\n", opened.error().to_string().c_str());
    return 1;
  }
  ChunkEngine& e = **opened;
  std::vector<Buffer> bufs;
  for (int t = 0; t < a.threads; ++t) {
    bufs.push_back(Buffer::allocate(kMiB));
    for (uint32_t i = 0; i < kMiB; ++i) bufs[t].data()[i] = std::byte(i * 131 + t);
  }

  Figure raw_w = run_parallel(a.threads, n, kMiB, [&](int t, uint64_t i) {
    if (::pwrite(fd, bufs[t].data(), kMiB, static_cast<off_t>(i * kMiB)) != kMiB || ::fdatasync(fd) != 0) die("raw write");
  });
  Figure eng_w = run_parallel(a.threads, n, kMiB, [&](int t, uint64_t i) {
    auto r = e.write(ChunkId{1, i}, Update::write(0, bufs[t].span()));
    if (!r) die(r.error().to_string().c_str());
  });
  print("1 MiB seq write (durable)", raw_w, eng_w, false);
  if (a.write_rounds > 0) {
    std::vector<double> ratios;
    for (int r = 0; r < a.write_rounds; ++r) ratios.push_back(write_round(a, root, e, bufs, 100 + r));
    std::sort(ratios.begin(), ratios.end());
    std::printf("1 MiB seq write, %d rounds    median ratio %5.1f%% (min %5.1f%%, max %5.1f%%)\n", a.write_rounds,
                ratios[ratios.size() / 2], ratios.front(), ratios.back());
    std::fflush(stdout);
  }

  if (!a.reads) {
    ::close(fd);
    opened->reset();
    std::filesystem::remove_all(root);
    return 0;
  }
  Figure raw_r = run_parallel(a.threads, n, kMiB, [&](int t, uint64_t i) {
    if (::pread(fd, bufs[t].data(), kMiB, static_cast<off_t>(i * kMiB)) != kMiB) die("raw read");
  });
  Figure eng_r = run_parallel(a.threads, n, kMiB, [&](int, uint64_t i) {
    auto r = e.read(ChunkId{1, i}, 0, kMiB);
    if (!r || r->data_length != kMiB) die("engine read");
  });
  print("1 MiB seq read", raw_r, eng_r, false);

  Figure raw_rr = raw_random_reads(fd, n * kMiB / 4096, a.qd, a.seconds);
  Figure eng_rr = engine_random_reads(e, n, a.qd, a.seconds);
  print("4 KiB random read (shared)", raw_rr, eng_rr, true);
  Figure raw_rr2 = raw_random_reads(fd, n * kMiB / 4096, a.qd, a.seconds);
  Figure eng_tr = engine_random_reads_thread_ring(e, n, a.qd, a.seconds);
  print("4 KiB random read (thread)", raw_rr2, eng_tr, true);

  ::close(fd);
  opened->reset();
  std::filesystem::remove_all(root);
  return 0;
}
