#include "benchsuite/workloads.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "benchsuite/cluster_control.h"
#include "benchsuite/content.h"

namespace weft::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr double kGiB = 1024.0 * 1024 * 1024;
constexpr double kMiB = 1024.0 * 1024;

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
double ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// Failed operations and checked bytes of one run.
struct Tally {
  std::atomic<uint64_t> errors{0};
  std::atomic<uint64_t> checked{0};
  std::atomic<uint64_t> mismatched{0};
  std::atomic<uint64_t> unread{0};  // reads that failed: their bytes were not verified
  std::mutex mu;
  std::vector<std::string> first;
  uint64_t shown = 0;

  void fail(const std::string& what) {
    errors.fetch_add(1);
    std::lock_guard lock(mu);
    if (first.size() < 5) first.push_back(what);
  }
  void into(Run& r) {
    r.errors += errors.load();
    r.checked_bytes += checked.load();
    r.mismatched_bytes += mismatched.load();
    r.failed_reads += unread.load();
    for (auto& f : first) r.notes.push_back("error: " + f);
    if (errors.load() > first.size())
      r.notes.push_back(fmt::format("... and {} more errors", errors.load() - first.size()));
  }
};

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  size_t k = static_cast<size_t>(std::ceil(p * static_cast<double>(v.size())));
  k = std::clamp<size_t>(k, 1, v.size()) - 1;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

// Per-second throughput/latency and the stalls (W7). Every thread of the
// load is a lane (a reader or a writer); a lane's stall is the longest time
// it went without completing an operation successfully: from its start or
// its previous success to its next success (a failed operation is no
// progress), and, for a lane still running at the end, to the end. So one
// blocked writer shows even while the readers keep completing.
class Recorder {
 public:
  enum Kind { kRead = 0, kWrite = 1 };
  explicit Recorder(Clock::time_point start) : start_(start) {}

  // A new lane, starting now; returns its id.
  size_t lane(Kind kind) {
    double t = now();
    std::lock_guard lock(mu_);
    lanes_.push_back(Lane{kind, t, 0, false});
    return lanes_.size() - 1;
  }
  // One operation of `lane` ended: the bytes it moved, its latency, whether it succeeded.
  void op(size_t lane, uint64_t bytes, double latency_ms, bool ok) {
    double t = now();
    size_t b = static_cast<size_t>(std::max(0.0, t));
    std::lock_guard lock(mu_);
    auto& l = lanes_.at(lane);
    if (buckets_.size() <= b) buckets_.resize(b + 1);
    auto& k = buckets_[b];
    (l.kind == kRead ? k.read : k.write) += bytes;
    k.latencies.push_back(latency_ms);
    if (!ok) {
      ++k.errors;
      return;
    }
    ++k.ops;
    l.max_gap = std::max(l.max_gap, t - l.last);
    l.last = t;
  }
  // The lane's thread ended (after its last operation): the time since its
  // last success counts (a lane whose operations failed until the load
  // stopped stalled that long), nothing after.
  void finish(size_t lane) {
    double t = now();
    std::lock_guard lock(mu_);
    auto& l = lanes_.at(lane);
    l.max_gap = std::max(l.max_gap, t - l.last);
    l.done = true;
  }
  double now() const { return seconds(Clock::now() - start_); }

  struct Stalls {
    double all = 0, read = 0, write = 0;
  };
  // Longest stall of any lane (and of any reader, any writer) up to `end`.
  Stalls stalls(double end) {
    std::lock_guard lock(mu_);
    Stalls s;
    for (const auto& l : lanes_) {
      double g = l.done ? l.max_gap : std::max(l.max_gap, end - l.last);
      (l.kind == kRead ? s.read : s.write) = std::max(l.kind == kRead ? s.read : s.write, g);
      s.all = std::max(s.all, g);
    }
    return s;
  }
  std::vector<TimelinePoint> timeline(double end) {
    std::lock_guard lock(mu_);
    std::vector<TimelinePoint> out;
    size_t n = std::min(buckets_.size(), static_cast<size_t>(std::ceil(end)));
    for (size_t i = 0; i < n; ++i) {
      const auto& k = buckets_[i];
      TimelinePoint p;
      double width = std::min(1.0, end - static_cast<double>(i));
      if (width <= 0) break;
      p.t = static_cast<double>(i) + width;
      p.read_mib_per_s = static_cast<double>(k.read) / kMiB / width;
      p.write_mib_per_s = static_cast<double>(k.write) / kMiB / width;
      p.mib_per_s = p.read_mib_per_s + p.write_mib_per_s;
      p.latency_p99_ms = percentile(k.latencies, 0.99);
      p.ops = k.ops;
      p.errors = k.errors;
      out.push_back(p);
    }
    return out;
  }

 private:
  struct Bucket {
    uint64_t read = 0, write = 0, ops = 0, errors = 0;
    std::vector<double> latencies;
  };
  struct Lane {
    Kind kind;
    double last;     // start, or the last success
    double max_gap;  // longest time between successes so far
    bool done;
  };
  const Clock::time_point start_;
  std::mutex mu_;
  std::vector<Bucket> buckets_;
  std::vector<Lane> lanes_;
};

// One thread's lane of a Recorder, or nothing (no recorder).
class Lane {
 public:
  Lane(Recorder* rec, Recorder::Kind kind) : rec_(rec), id_(rec ? rec->lane(kind) : 0) {}
  ~Lane() {
    if (rec_) rec_->finish(id_);
  }
  Lane(const Lane&) = delete;
  Lane& operator=(const Lane&) = delete;
  void op(uint64_t bytes, Clock::time_point t0, bool ok) {
    if (rec_) rec_->op(id_, bytes, ms(Clock::now() - t0), ok);
  }

 private:
  Recorder* rec_;
  size_t id_;
};

struct WriteDone {
  bool ok = false;
  uint64_t bytes = 0;  // written successfully
  Clock::time_point synced{};
};

// Writes a whole file (content of `key`) in io-sized writes, fsync, close.
// Every step (the open, which creates or truncates, each write, the fsync,
// the close) is one operation of `lane`.
WriteDone write_file(Access& a, const std::string& name, uint64_t key, uint64_t size, uint64_t io,
                     std::vector<std::byte>& buf, Progress* p, Lane* lane, Tally& tally) {
  WriteDone done;
  auto t0 = Clock::now();
  auto h = a.open(name, O_WRONLY | O_CREAT | O_TRUNC);
  if (lane) lane->op(0, t0, h.has_value());
  if (!h) {
    tally.fail(h.error().message());
    return done;
  }
  buf.resize(io);
  for (uint64_t off = 0; off < size; off += io) {
    size_t n = static_cast<size_t>(std::min<uint64_t>(io, size - off));
    std::span<std::byte> s(buf.data(), n);
    fill_content(s, key, off);
    t0 = Clock::now();
    auto r = (*h)->pwrite(s, off);
    if (lane) lane->op(r ? n : 0, t0, r.has_value());
    if (!r) {
      tally.fail(fmt::format("write {} at {}: {}", name, off, r.error().message()));
      return done;
    }
    done.bytes += n;
    if (p) p->add(n);
  }
  t0 = Clock::now();
  auto s = (*h)->fsync();
  done.synced = Clock::now();
  if (lane) lane->op(0, t0, s.has_value());
  if (!s) {
    tally.fail(fmt::format("fsync {}: {}", name, s.error().message()));
    return done;
  }
  t0 = Clock::now();
  auto c = (*h)->close();
  if (lane) lane->op(0, t0, c.has_value());
  if (!c) {
    tally.fail(fmt::format("close {}: {}", name, c.error().message()));
    return done;
  }
  done.ok = true;
  return done;
}

// Reads a whole file in io-sized reads and checks every byte, and that the
// file ends where it should (the last read asks for one byte more). False on
// an error, a mismatch or a wrong length (all counted). With `drop_cache`,
// the file's pages are dropped from the page cache after the read (POSIX;
// the time that takes is added to *untimed, not to the read).
bool read_file(Access& a, const std::string& name, uint64_t key, uint64_t size, uint64_t io,
               std::vector<std::byte>& buf, Progress* p, Tally& tally, bool drop_cache = false,
               Clock::duration* untimed = nullptr) {
  auto h = a.open(name, O_RDONLY);
  if (!h) {
    tally.unread.fetch_add(1);
    tally.fail(h.error().message());
    return false;
  }
  io = std::max<uint64_t>(1, io);
  buf.resize(std::min(io, size) + 1);
  uint64_t bad = 0, first_bad = 0;
  uint64_t off = 0;
  bool longer = false;
  while (true) {
    uint64_t left = size - off;
    size_t want = static_cast<size_t>(left <= io ? left + 1 : io);  // the last read: one byte more
    auto n = (*h)->pread(std::span(buf.data(), want), off);
    if (!n) {
      tally.unread.fetch_add(1);
      tally.fail(fmt::format("read {} at {}: {}", name, off, n.error().message()));
      return false;
    }
    uint64_t valid = std::min<uint64_t>(*n, left);
    if (*n > left) longer = true;
    uint64_t m = count_mismatches(std::span<const std::byte>(buf.data(), valid), key, off);
    if (m && !bad) first_bad = off;
    bad += m;
    tally.checked.fetch_add(valid, std::memory_order_relaxed);
    if (p) p->add(valid);
    off += valid;
    if (*n < want || off >= size) break;
  }
  if (drop_cache) {
    auto d0 = Clock::now();
    (*h)->drop_cache();
    if (untimed) *untimed += Clock::now() - d0;
  }
  (void)(*h)->close();
  if (off < size || longer) {
    tally.unread.fetch_add(1);
    tally.fail(longer ? fmt::format("{}: longer than the {} bytes expected", name, size)
                      : fmt::format("{}: {} bytes, expected {}", name, off, size));
    return false;
  }
  if (bad) {
    tally.mismatched.fetch_add(bad);
    tally.fail(fmt::format("{}: {} bytes differ from the expected content (first in the block at offset {})", name,
                           bad, first_bad));
    return false;
  }
  return true;
}

std::string ckpt_name(const std::string& dir, uint32_t i) { return fmt::format("{}/ckpt-{}", dir, i); }
std::string w3_name(const Options& o, uint32_t i) { return fmt::format("w3/d{:03}/f{:06}", i % o.dirs, i); }
// n independent clients of the target (W5 and W6 run one per simulated client).
Result<std::vector<std::unique_ptr<Access>>> open_sessions(Access& a, uint32_t n) {
  std::vector<std::unique_ptr<Access>> out;
  for (uint32_t c = 0; c < n; ++c) {
    WEFT_TRY(auto s, a.session());
    out.push_back(std::move(s));
  }
  return out;
}

std::string w6_name(uint32_t i) { return fmt::format("w6/f{:04}", i); }

template <class Fn>
void parallel(uint32_t n, Fn fn) {
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (uint32_t i = 0; i < n; ++i) threads.emplace_back([&fn, i] { fn(i); });
  for (auto& t : threads) t.join();
}

struct WriteStats {
  double seconds = 0, gib_per_s = 0, writer_min = 0, writer_max = 0;
  uint64_t bytes = 0;  // written successfully
};

// W1's core: o.writers files of o.checkpoint_bytes under dir, in parallel.
// gib_per_s counts the bytes actually written (a writer that failed early
// adds only what it wrote).
WriteStats checkpoint_write(Access& a, const std::string& dir, const Options& o, Progress* p, Recorder* rec,
                            Tally& tally) {
  if (auto r = a.mkdirs(dir); !r) tally.fail(r.error().message());
  std::vector<Clock::time_point> start(o.writers), end(o.writers);
  std::atomic<uint64_t> bytes{0};
  parallel(o.writers, [&](uint32_t i) {
    Lane lane(rec, Recorder::kWrite);
    std::vector<std::byte> buf;
    std::string name = ckpt_name(dir, i);
    start[i] = Clock::now();
    auto d = write_file(a, name, file_key(name), o.checkpoint_bytes, o.io_bytes, buf, p, &lane, tally);
    end[i] = d.ok ? d.synced : Clock::now();
    bytes.fetch_add(d.bytes);
  });
  WriteStats s;
  auto first = *std::min_element(start.begin(), start.end());
  auto last = *std::max_element(end.begin(), end.end());
  s.seconds = seconds(last - first);
  s.bytes = bytes.load();
  s.gib_per_s = s.seconds > 0 ? static_cast<double>(s.bytes) / kGiB / s.seconds : 0;
  s.writer_min = 1e300;
  for (uint32_t i = 0; i < o.writers; ++i) {
    double w = seconds(end[i] - start[i]);
    s.writer_min = std::min(s.writer_min, w);
    s.writer_max = std::max(s.writer_max, w);
  }
  return s;
}

struct ReadStats {
  uint64_t files = 0, bytes = 0;  // read and verified
  uint64_t attempts = 0;          // file reads started
  uint64_t passes = 0;            // times the readers started through the permutation (>1: wrapped around)
  double seconds = 0;
  std::vector<double> latencies;  // ms per file read, failed ones included (the time the reader waited)
};

// W3's read phase: o.readers readers take the files of `perm` in order
// (each once); with `stop`, they cycle through it until *stop is set. After
// each file its pages are dropped from the page cache (POSIX), so a second
// pass is as cold as the first on a local file system too (libweft keeps no
// file data).
ReadStats read_files(Access& a, const Options& o, const std::vector<uint32_t>& perm, Progress* p, Recorder* rec,
                     Tally& tally, const std::atomic<bool>* stop) {
  std::atomic<uint64_t> next{0};
  std::mutex mu;
  ReadStats s;
  Clock::duration untimed_all{};  // every reader's page cache drops (under mu)
  auto t0 = Clock::now();
  parallel(o.readers, [&](uint32_t) {
    Lane lane(rec, Recorder::kRead);
    std::vector<std::byte> buf;
    std::vector<double> lat;
    uint64_t files = 0, bytes = 0, attempts = 0;
    Clock::duration dropped_all{};
    while (true) {
      if (stop && stop->load()) break;
      uint64_t k = next.fetch_add(1);
      if (!stop && k >= perm.size()) break;
      uint32_t i = perm[k % perm.size()];
      std::string name = w3_name(o, i);
      auto f0 = Clock::now();
      Clock::duration dropped{};
      bool ok = read_file(a, name, file_key(name), o.file_bytes, o.file_bytes, buf, nullptr, tally, true, &dropped);
      // The op's latency without the page cache drop (lane.op times from f0).
      double l = ms(Clock::now() - f0 - dropped);
      dropped_all += dropped;
      if (rec) lane.op(ok ? o.file_bytes : 0, f0 + dropped, ok);
      if (p) p->add(1);
      ++attempts;
      lat.push_back(l);
      if (ok) {
        ++files;
        bytes += o.file_bytes;
      }
    }
    std::lock_guard lock(mu);
    s.files += files;
    s.bytes += bytes;
    s.attempts += attempts;
    s.latencies.insert(s.latencies.end(), lat.begin(), lat.end());
    untimed_all += dropped_all;
  });
  // Without the page cache drops (POSIX only: libweft has nothing to drop),
  // as the latencies are: the wall time less the readers' mean time in them.
  const auto wall = Clock::now() - t0;
  const auto untimed_each = o.readers > 0 ? untimed_all / o.readers : Clock::duration{};
  s.seconds = seconds(wall - std::min(untimed_each, wall));
  s.passes = perm.empty() ? 0 : (s.attempts + perm.size() - 1) / perm.size();
  return s;
}

std::vector<uint32_t> permutation(const Options& o, uint64_t salt) {
  std::vector<uint32_t> perm(o.files);
  for (uint32_t i = 0; i < o.files; ++i) perm[i] = i;
  std::mt19937_64 rng(o.seed + salt);
  std::shuffle(perm.begin(), perm.end(), rng);
  return perm;
}

// Creates W3's files (o.readers threads); returns files/s.
double w3_setup(Access& a, const Options& o, Progress& p, Tally& tally) {
  for (uint32_t d = 0; d < o.dirs; ++d)
    if (auto r = a.mkdirs(fmt::format("w3/d{:03}", d)); !r) tally.fail(r.error().message());
  p.begin("W3 setup (create files)", o.files, "files");
  std::atomic<uint32_t> next{0}, written{0};
  auto t0 = Clock::now();
  parallel(o.readers, [&](uint32_t) {
    std::vector<std::byte> buf;
    for (uint32_t i = next.fetch_add(1); i < o.files; i = next.fetch_add(1)) {
      std::string name = w3_name(o, i);
      if (write_file(a, name, file_key(name), o.file_bytes, o.file_bytes, buf, nullptr, nullptr, tally).ok)
        written.fetch_add(1);
      p.add(1);
    }
  });
  double s = seconds(Clock::now() - t0);
  p.end();
  return s > 0 ? written.load() / s : 0;  // files made, not files tried
}

void ensure_w3(Access& a, TargetState& st, const Options& o, Progress& p, Run& run, Tally& tally) {
  if (st.w3_ready) return;
  auto first = a.stat(w3_name(o, 0));
  auto last = a.stat(w3_name(o, o.files - 1));
  if (first && last && *first == o.file_bytes && *last == o.file_bytes) {
    run.notes.push_back("reused W3's files already on the target");
  } else {
    run.notes.push_back("created W3's files first");
    w3_setup(a, o, p, tally);
  }
  st.w3_ready = true;
}

// Makes the next reads cold (docs/bench.md "Caches"): for a native target
// whose cluster the suite controls (--data-dir), the meta server is restarted
// first (its RocksDB memtable and block cache start empty, as drop_caches
// empties a local file system's dentry and inode caches); then
// Access::make_cold (fresh client, page cache dropped). Says what was done.
// A failed meta restart ends the workload (MetaRestartFailed, caught by
// run_workload): only called between phases, with no thread of the workload running.
struct MetaRestartFailed {
  std::string why;
};

std::string make_cold(Access& a, TargetState& st) {
  std::string meta;
  if (a.kind() == "native") {
    if (st.cluster) {
      auto r = st.cluster->restart_meta();
      if (!r) throw MetaRestartFailed{"meta restart failed: " + r.error().message()};
      meta = *r;
    } else {
      meta = "meta server caches not dropped (no --data-dir: the suite does not control the cluster)";
    }
  } else if (a.kind() == "mount") {
    meta = "meta server caches not dropped (mount target: the suite does not restart the servers behind a mount)";
  }
  std::string what = a.make_cold();
  return meta.empty() ? what : meta + "; " + what;
}

// "Alone" references of W4 and W7, measured right before the load under the
// same conditions as the load: made cold the same way, reads of the same
// permutation, writes of fresh files into a fresh directory.
double read_alone_p99(Access& a, TargetState& st, const Options& o, uint64_t salt, Progress& p, Run& run,
                      Tally& tally) {
  run.notes.push_back("reads alone: " + make_cold(a, st));
  p.begin("reads alone (W3's files)", o.files, "files");
  auto r = read_files(a, o, permutation(o, salt), &p, nullptr, tally, nullptr);
  p.end();
  return percentile(r.latencies, 0.99);
}

// ---------------- the workloads ----------------

Run w1(Access& a, TargetState&, const Options& o, Progress& p) {
  Run run;
  Tally tally;
  p.begin("W1 checkpoint write", uint64_t{o.writers} * o.checkpoint_bytes, "B");
  auto s = checkpoint_write(a, "w1", o, &p, nullptr, tally);
  p.end();
  run.figures = {{"gib_per_s", s.gib_per_s},
                 {"seconds", s.seconds},
                 {"writer_seconds_min", s.writer_min},
                 {"writer_seconds_max", s.writer_max}};
  tally.into(run);
  return run;
}

Run w2(Access& a, TargetState& st, const Options& o, Progress& p) {
  Run run;
  Tally tally;
  bool present = true;
  for (uint32_t i = 0; i < o.writers; ++i) {
    auto s = a.stat(ckpt_name("w1", i));
    if (!s || *s != o.checkpoint_bytes) present = false;
  }
  if (!present) {
    run.notes.push_back("W1's files were missing: written first (not timed)");
    p.begin("W2 setup (W1's files)", uint64_t{o.writers} * o.checkpoint_bytes, "B");
    checkpoint_write(a, "w1", o, &p, nullptr, tally);
    p.end();
  }
  run.notes.push_back("cache: " + make_cold(a, st));
  p.begin("W2 checkpoint restore", uint64_t{o.writers} * o.checkpoint_bytes, "B");
  const uint64_t checked_before = tally.checked.load();
  auto t0 = Clock::now();
  parallel(o.writers, [&](uint32_t i) {
    std::vector<std::byte> buf;
    std::string name = ckpt_name("w1", i);
    read_file(a, name, file_key(name), o.checkpoint_bytes, o.io_bytes, buf, &p, tally);
  });
  double secs = seconds(Clock::now() - t0);
  p.end();
  // The bytes read (and checked), not the bytes asked for: a reader that
  // failed early moved less (as W1 counts what was written).
  const double read_bytes = static_cast<double>(tally.checked.load() - checked_before);
  run.figures = {{"gib_per_s", secs > 0 ? read_bytes / kGiB / secs : 0}, {"seconds", secs}};
  tally.into(run);
  return run;
}

Run w3(Access& a, TargetState& st, const Options& o, Progress& p) {
  Run run;
  Tally tally;
  double setup = w3_setup(a, o, p, tally);
  st.w3_ready = true;
  run.notes.push_back("cache: " + make_cold(a, st));
  p.begin("W3 first epoch", o.files, "files");
  auto r = read_files(a, o, permutation(o, 3), &p, nullptr, tally, nullptr);
  p.end();
  run.figures = {{"files_per_s", r.seconds > 0 ? r.files / r.seconds : 0},
                 {"mib_per_s", r.seconds > 0 ? r.bytes / kMiB / r.seconds : 0},
                 {"latency_p50_ms", percentile(r.latencies, 0.5)},
                 {"latency_p99_ms", percentile(r.latencies, 0.99)},
                 {"setup_files_per_s", setup}};
  tally.into(run);
  return run;
}

// W3 readers cycling while W1 writers write once (into `dir`).
struct Mixed {
  WriteStats write;
  ReadStats read;
};
Mixed mixed(Access& a, const Options& o, uint64_t salt, const std::string& dir, Progress* p, Recorder* rec,
            Tally& tally) {
  std::atomic<bool> stop{false};
  Mixed m;
  std::thread readers([&] { m.read = read_files(a, o, permutation(o, salt), nullptr, rec, tally, &stop); });
  m.write = checkpoint_write(a, dir, o, p, rec, tally);
  stop = true;
  readers.join();
  return m;
}

std::string wrap_note(const ReadStats& r, const Options& o) {
  if (r.passes <= 1) return "";
  return fmt::format("the readers went {} times through the {} files (each file's pages dropped after its read, so "
                     "every pass is cold)",
                     r.passes, o.files);
}

Run w4(Access& a, TargetState& st, const Options& o, Progress& p) {
  Run run;
  Tally tally;
  ensure_w3(a, st, o, p, run, tally);
  (void)a.remove_tree("w4");
  // Alone, right before the load: the same reads (permutation 4, cold) and
  // the same writes (fresh files in a fresh directory, cold).
  double p99_alone = read_alone_p99(a, st, o, 4, p, run, tally);
  run.notes.push_back("writes alone (w4/alone): " + make_cold(a, st));
  p.begin("writes alone (fresh files)", uint64_t{o.writers} * o.checkpoint_bytes, "B");
  auto alone = checkpoint_write(a, "w4/alone", o, &p, nullptr, tally);
  p.end();
  run.notes.push_back("under load (w4/load): " + make_cold(a, st));
  p.begin("W4 mixed (W1 + W3)", uint64_t{o.writers} * o.checkpoint_bytes, "B");
  auto m = mixed(a, o, 4, "w4/load", &p, nullptr, tally);
  p.end();
  if (auto n = wrap_note(m.read, o); !n.empty()) run.notes.push_back(n);
  double p99 = percentile(m.read.latencies, 0.99);
  run.figures = {{"read_latency_p99_ratio", p99_alone > 0 ? p99 / p99_alone : 0},
                 {"write_gib_per_s_ratio", alone.gib_per_s > 0 ? m.write.gib_per_s / alone.gib_per_s : 0},
                 {"read_latency_p99_ms", p99},
                 {"read_latency_p99_alone_ms", p99_alone},
                 {"read_files_per_s", m.read.seconds > 0 ? m.read.files / m.read.seconds : 0},
                 {"write_gib_per_s", m.write.gib_per_s},
                 {"write_gib_per_s_alone", alone.gib_per_s}};
  tally.into(run);
  return run;
}

Run w5(Access& a, TargetState&, const Options& o, Progress& p) {
  Run run;
  Tally tally;
  (void)a.remove_tree("w5");
  for (uint32_t c = 0; c < o.md_clients; ++c)
    if (auto r = a.mkdirs(fmt::format("w5/c{}", c)); !r) tally.fail(r.error().message());
  if (auto r = a.mkdirs("w5/shared"); !r) tally.fail(r.error().message());
  auto sessions = open_sessions(a, o.md_clients);
  if (!sessions) {
    tally.fail(sessions.error().message());
    tally.into(run);
    return run;
  }
  std::vector<std::unique_ptr<Access>> clients = std::move(*sessions);
  auto phase = [&](const std::string& figure, const std::string& label, auto op) {
    p.begin(label, uint64_t{o.md_clients} * o.md_files, "ops");
    std::atomic<uint64_t> done{0};
    auto t0 = Clock::now();
    parallel(o.md_clients, [&](uint32_t c) {
      for (uint32_t i = 0; i < o.md_files; ++i) {
        Result<void> r = op(*clients[c], c, i);
        if (r) done.fetch_add(1);
        else tally.fail(r.error().message());
        p.add(1);
      }
    });
    double s = seconds(Clock::now() - t0);
    p.end();
    run.figures[figure] = s > 0 ? static_cast<double>(done.load()) / s : 0;  // operations that succeeded
  };
  auto create = [](Access& c, const std::string& name) -> Result<void> {
    auto h = c.open(name, O_WRONLY | O_CREAT | O_EXCL);
    if (!h) return std::unexpected(h.error());
    return (*h)->close();
  };
  auto stat = [](Access& c, const std::string& name) -> Result<void> {
    auto s = c.stat(name);
    if (!s) return std::unexpected(s.error());
    if (*s != 0) return error(Code::kInternal, "{}: size {}, expected 0", name, *s);
    return {};
  };
  auto own = [](uint32_t c, uint32_t i) { return fmt::format("w5/c{}/f{}", c, i); };
  auto shared = [](uint32_t c, uint32_t i) { return fmt::format("w5/shared/c{}-f{}", c, i); };
  phase("create_ops_per_s", "W5 create (own dirs)", [&](Access& c, uint32_t k, uint32_t i) { return create(c, own(k, i)); });
  phase("stat_ops_per_s", "W5 stat (own dirs)", [&](Access& c, uint32_t k, uint32_t i) { return stat(c, own(k, i)); });
  phase("remove_ops_per_s", "W5 remove (own dirs)",
        [&](Access& c, uint32_t k, uint32_t i) { return c.remove(own(k, i)); });
  phase("shared_create_ops_per_s", "W5 create (shared dir)",
        [&](Access& c, uint32_t k, uint32_t i) { return create(c, shared(k, i)); });
  phase("shared_stat_ops_per_s", "W5 stat (shared dir)",
        [&](Access& c, uint32_t k, uint32_t i) { return stat(c, shared(k, i)); });
  phase("shared_remove_ops_per_s", "W5 remove (shared dir)",
        [&](Access& c, uint32_t k, uint32_t i) { return c.remove(shared(k, i)); });
  clients.clear();
  (void)a.remove_tree("w5");
  run.notes.push_back(fmt::format("{} clients ({})", o.md_clients,
                                  a.kind() == "native" ? "one libweft Client each" : "threads, own fds"));
  tally.into(run);
  return run;
}

Run w6(Access& a, TargetState&, const Options& o, Progress& p) {
  Run run;
  Tally tally;
  if (auto r = a.mkdirs("w6"); !r) tally.fail(r.error().message());
  p.begin("W6 setup (files)", o.open_files, "files");
  {
    std::atomic<uint32_t> next{0};
    parallel(4, [&](uint32_t) {
      std::vector<std::byte> buf;
      for (uint32_t i = next.fetch_add(1); i < o.open_files; i = next.fetch_add(1)) {
        std::string name = w6_name(i);
        write_file(a, name, file_key(name), o.open_read_bytes, o.open_read_bytes, buf, nullptr, nullptr, tally);
        p.add(1);
      }
    });
  }
  p.end();
  auto sessions = open_sessions(a, o.open_clients);
  if (!sessions) {
    tally.fail(sessions.error().message());
    tally.into(run);
    return run;
  }
  std::vector<std::unique_ptr<Access>> clients = std::move(*sessions);
  std::mutex mu;
  std::vector<double> all;
  uint64_t total = 0;
  p.begin("W6 many opens", 0, "opens", o.open_seconds);
  auto t0 = Clock::now();
  auto deadline = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.open_seconds));
  parallel(o.open_clients, [&](uint32_t c) {
    std::mt19937_64 rng(o.seed * 977 + c);
    std::vector<std::byte> buf;
    std::vector<double> lat;
    while (Clock::now() < deadline) {
      uint32_t i = static_cast<uint32_t>(rng() % o.open_files);
      std::string name = w6_name(i);
      auto f0 = Clock::now();
      bool ok = read_file(*clients[c], name, file_key(name), o.open_read_bytes, o.open_read_bytes, buf, nullptr, tally);
      if (ok) lat.push_back(ms(Clock::now() - f0));
      p.add(1);
    }
    std::lock_guard lock(mu);
    total += lat.size();
    all.insert(all.end(), lat.begin(), lat.end());
  });
  double secs = seconds(Clock::now() - t0);
  p.end();
  run.figures = {{"opens_per_s", secs > 0 ? total / secs : 0},
                 {"latency_p50_ms", percentile(all, 0.5)},
                 {"latency_p99_ms", percentile(all, 0.99)}};
  run.notes.push_back(fmt::format("{} clients ({}), files of {} B", o.open_clients,
                                  a.kind() == "native" ? "one libweft Client each" : "threads, own fds",
                                  o.open_read_bytes));
  tally.into(run);
  return run;
}

// W7's writers: each rewrites its file dir/ckpt-<i> again and again (open
// O_TRUNC, generation g = 1, 2, ... with different content), until `stop` or
// `generations` are done. Used alone and under load, so both write the same
// way (the first generation creates the file, the others truncate it).
struct Rewriters {
  explicit Rewriters(uint32_t n) : generation(n, 0), any_done(n, 0) {}
  std::vector<uint64_t> generation;  // last generation written completely
  std::vector<uint8_t> any_done;     // per writer; not vector<bool> (written concurrently)
  std::atomic<uint64_t> bytes{0};    // written successfully
  double seconds = 0;                // first open to the last writer's end
};
void rewrite(Access& a, const std::string& dir, const Options& o, uint64_t generations, const std::atomic<bool>* stop,
             Recorder* rec, Progress* p, Tally& tally, Rewriters& w) {
  if (auto r = a.mkdirs(dir); !r) tally.fail(r.error().message());
  auto t0 = Clock::now();
  parallel(o.writers, [&](uint32_t i) {
    Lane lane(rec, Recorder::kWrite);
    std::vector<std::byte> buf;
    std::string name = ckpt_name(dir, i);
    for (uint64_t g = 1; g <= generations && !(stop && stop->load()); ++g) {
      auto d = write_file(a, name, file_key(name, g), o.checkpoint_bytes, o.io_bytes, buf, p, &lane, tally);
      w.bytes.fetch_add(d.bytes);
      if (d.ok) {
        w.generation[i] = g;
        w.any_done[i] = 1;
      } else {
        w.any_done[i] = 0;  // content unknown after a failed generation
      }
    }
  });
  w.seconds = seconds(Clock::now() - t0);
}

Run w7(Access& a, TargetState& st, const Options& o, Progress& p) {
  Run run;
  Tally tally;
  if (!st.cluster) {
    tally.fail("W7 needs --data-dir (the `weft up` directory of the cluster behind the target)" +
               (st.cluster_error.empty() ? std::string() : ": " + st.cluster_error));
    tally.into(run);
    return run;
  }
  ClusterControl& cluster = *st.cluster;
  ensure_w3(a, st, o, p, run, tally);
  (void)a.remove_tree("w7");
  // Alone, right before the load, written and read as under load.
  double p99_alone = read_alone_p99(a, st, o, 7, p, run, tally);
  run.notes.push_back("writes alone (w7/alone, 2 generations per writer): " + make_cold(a, st));
  p.begin("writes alone (2 generations)", uint64_t{o.writers} * o.checkpoint_bytes * 2, "B");
  Rewriters alone(o.writers);
  rewrite(a, "w7/alone", o, 2, nullptr, nullptr, &p, tally, alone);
  p.end();
  double wgib_alone = alone.seconds > 0 ? static_cast<double>(alone.bytes.load()) / kGiB / alone.seconds : 0;
  run.notes.push_back("under load (w7/load): " + make_cold(a, st));

  auto start = Clock::now();
  Recorder rec(start);
  std::atomic<bool> stop{false};
  Rewriters load(o.writers);
  ReadStats reads;
  std::thread readers([&] { reads = read_files(a, o, permutation(o, 7), &p, &rec, tally, &stop); });
  std::thread writers([&] { rewrite(a, "w7/load", o, UINT64_MAX, &stop, &rec, nullptr, tally, load); });
  double total_guess = o.kill_after_s + o.restart_after_s + 5 + o.tail_s;
  p.begin("W7 failure under load", 0, "files", total_guess);
  auto sleep_until = [&](double t) {
    while (rec.now() < t) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  };
  sleep_until(o.kill_after_s);
  auto killed = cluster.kill(o.kill_role);
  double t_kill = rec.now();
  bool seen_down = false;
  bool up_started = false;
  double t_restart = -1, t_serving = -1;
  if (!killed) {
    tally.fail("W7 kill: " + killed.error().message());
  } else {
    run.events["kill"] = t_kill;
    p.note(fmt::format("  W7: killed {} (pid {}) with SIGKILL at t={:.1f}s", o.kill_role, *killed, t_kill));
    // Watch until the restart (to see mgmtd notice), restart, watch until all serve.
    while (rec.now() < t_kill + o.restart_after_s) {
      auto s = cluster.poll();
      if (s && !s->all_serving && !seen_down) {
        seen_down = true;
        run.events["offline"] = rec.now();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    std::string log = o.data_dir + "/logs/bench-up.log";
    auto up = cluster.start_up(log);
    t_restart = rec.now();
    run.events["restart"] = t_restart;
    if (!up) {
      tally.fail("W7 restart: " + up.error().message());
      run.notes.push_back(fmt::format("{} was killed at t={:.1f}s and NOT restarted (starting `weft up` failed: {}); "
                                      "it stays down: restart it with `weft up --data-dir {}`",
                                      o.kill_role, t_kill, up.error().message(), o.data_dir));
    } else {
      up_started = true;
      p.note(fmt::format("  W7: restarting with `weft up --data-dir {}` at t={:.1f}s (log {})", o.data_dir, t_restart,
                         log));
      std::string last_detail;
      while (rec.now() < t_restart + o.serving_timeout_s) {
        auto up_status = cluster.up_status();
        bool up_ok = up_status && WIFEXITED(*up_status) && WEXITSTATUS(*up_status) == 0;
        auto s = cluster.poll();
        if (s) {
          if (!s->all_serving) {
            seen_down = true;
            last_detail = s->detail;
          } else if (seen_down || up_ok) {
            t_serving = rec.now();
            break;
          }
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
      }
      if (t_serving < 0) {
        tally.fail(fmt::format("W7: not every target serving {} s after the restart:{}", o.serving_timeout_s,
                               last_detail));
      } else {
        run.events["serving"] = t_serving;
        p.note(fmt::format("  W7: every target serving again at t={:.1f}s ({:.1f}s after the restart)", t_serving,
                           t_serving - t_restart));
      }
    }
  }
  sleep_until(std::max(rec.now(), (t_serving > 0 ? t_serving : rec.now())) + o.tail_s);
  stop = true;
  writers.join();
  readers.join();
  double t_end = rec.now();
  p.end();
  if (up_started) {
    // `up` waits for the servers with its own --timeout (30 s); give it as
    // long as the targets were given, then end it.
    double wait_s = std::min(60.0, o.serving_timeout_s);
    auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(wait_s));
    auto up_status = cluster.up_status();
    while (!up_status && Clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      up_status = cluster.up_status();
    }
    if (!up_status) {
      std::string how = cluster.stop_up();
      tally.fail(fmt::format("W7: `weft up` still running {:g} s after the load stopped: ended it ({})", wait_s, how));
      run.notes.push_back(fmt::format("`weft up --data-dir {}` did not finish and was ended ({}); {} may not be "
                                      "running: check with `weft status`, restart with `weft up --data-dir {}`",
                                      o.data_dir, how, o.kill_role, o.data_dir));
    } else if (!(WIFEXITED(*up_status) && WEXITSTATUS(*up_status) == 0)) {
      // `up` gives up after its own --timeout (30 s) while targets resync; what
      // counts here is whether every target serves again (t_serving).
      std::string what = fmt::format("`weft up --data-dir {}` exited with an error (see {}/logs/bench-up.log)",
                                     o.data_dir, o.data_dir);
      if (t_serving < 0) tally.fail("W7: " + what);
      else run.notes.push_back(what + "; every target served again anyway");
    }
  }

  // Every byte afterwards: the checkpoints as last written (under load and
  // alone: both went through the failure), and W3's files.
  run.notes.push_back("verify after the load: " + a.make_cold());
  p.begin("W7 verify every byte", uint64_t{o.writers} * o.checkpoint_bytes * 2 + o.files * o.file_bytes, "B");
  parallel(o.writers, [&](uint32_t i) {
    std::vector<std::byte> buf;
    for (const auto* w : {&load, &alone}) {
      if (!w->any_done[i]) continue;
      std::string name = ckpt_name(w == &load ? "w7/load" : "w7/alone", i);
      read_file(a, name, file_key(name, w->generation[i]), o.checkpoint_bytes, o.io_bytes, buf, &p, tally);
    }
  });
  {
    std::atomic<uint32_t> next{0};
    parallel(o.readers, [&](uint32_t) {
      std::vector<std::byte> buf;
      for (uint32_t i = next.fetch_add(1); i < o.files; i = next.fetch_add(1)) {
        std::string name = w3_name(o, i);
        read_file(a, name, file_key(name), o.file_bytes, o.file_bytes, buf, &p, tally);
      }
    });
  }
  p.end();

  run.timeline = rec.timeline(t_end);
  run.events["end"] = t_end;
  if (auto n = wrap_note(reads, o); !n.empty()) run.notes.push_back(n);
  double p99 = percentile(reads.latencies, 0.99);
  double wgib = t_end > 0 ? static_cast<double>(load.bytes.load()) / kGiB / t_end : 0;
  auto stalls = rec.stalls(t_end);
  run.figures = {{"stall_max_s", stalls.all},
                 {"read_stall_max_s", stalls.read},
                 {"write_stall_max_s", stalls.write},
                 {"resync_s", t_serving > 0 ? t_serving - t_restart : -1},
                 {"read_latency_p99_ms", p99},
                 {"read_latency_p99_alone_ms", p99_alone},
                 {"read_latency_p99_ratio", p99_alone > 0 ? p99 / p99_alone : 0},
                 {"write_gib_per_s", wgib},
                 {"write_gib_per_s_alone", wgib_alone},
                 {"write_gib_per_s_ratio", wgib_alone > 0 ? wgib / wgib_alone : 0},
                 {"read_files_per_s", reads.seconds > 0 ? reads.files / reads.seconds : 0},
                 {"load_seconds", t_end}};
  tally.into(run);
  return run;
}

}  // namespace

namespace {

Run dispatch(const std::string& id, Access& a, TargetState& st, const Options& o, Progress& p) {
  if (id == "W1") return w1(a, st, o, p);
  if (id == "W2") return w2(a, st, o, p);
  if (id == "W3") return w3(a, st, o, p);
  if (id == "W4") return w4(a, st, o, p);
  if (id == "W5") return w5(a, st, o, p);
  if (id == "W6") return w6(a, st, o, p);
  if (id == "W7") return w7(a, st, o, p);
  Run r;
  r.errors = 1;
  r.notes.push_back("unknown workload " + id);
  return r;
}

}  // namespace

Run run_workload(const std::string& id, Access& a, TargetState& st, const Options& o, Progress& p) {
  Run r;
  if (!st.aborted.empty()) {
    r.errors = 1;
    r.notes.push_back("skipped: " + st.aborted + " earlier in this run");
    return r;
  }
  try {
    return dispatch(id, a, st, o, p);
  } catch (const MetaRestartFailed& e) {
    p.end();
    st.aborted = e.why;
    r.errors = 1;
    r.notes.push_back("aborted: " + e.why + " (the cluster's meta server may be down: the remaining workloads on this "
                      "target are skipped)");
    return r;
  }
}

}  // namespace weft::bench
