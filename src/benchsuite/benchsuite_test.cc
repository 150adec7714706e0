// The workloads of `weft bench` against an in-memory file system (a fake
// Access that can block, fail or lengthen chosen operations) and a fake
// cluster (ClusterControl): what each figure measures, and that "alone" and
// "under load" are measured the same way.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "benchsuite/access.h"
#include "benchsuite/bench.h"
#include "benchsuite/cluster_control.h"
#include "benchsuite/progress.h"
#include "benchsuite/workloads.h"

namespace weft::bench {
namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;

// The shared state of a fake file system and what happened to it.
struct FakeFs {
  std::mutex mu;
  std::map<std::string, std::vector<std::byte>> files;
  std::vector<std::string> events;  // "cold", "wopen <path> new|existing"
  // Once armed, the next open for writing of a checkpoint sleeps this long
  // (what W7's writers feel when a truncate waits for a dead server).
  std::atomic<bool> block_next_writer_open{false};
  double writer_open_sleep_s = 0;
  std::string fail_writes_of;   // pwrite at offset > 0 of this file fails
  std::string lengthen_on_close;  // one byte appended at its close
  std::atomic<uint64_t> drops{0};
  std::atomic<uint64_t> read_opens{0};
  bool fail_reads_once_killed = false;  // every pread fails from the kill on
  std::string fail_reads_of;            // every pread of this file fails
  std::chrono::milliseconds drop_takes{0};  // each page cache drop sleeps this long
  std::atomic<bool> reads_failing{false};

  void event(std::string e) {
    std::lock_guard lock(mu);
    events.push_back(std::move(e));
  }
};

class FakeHandle final : public Handle {
 public:
  FakeHandle(FakeFs& fs, std::string name) : fs_(fs), name_(std::move(name)) {}
  Result<size_t> pread(std::span<std::byte> dst, uint64_t offset) override {
    if (fs_.reads_failing) return error(Code::kUnavailable, "injected read failure");
    std::lock_guard lock(fs_.mu);
    if (name_ == fs_.fail_reads_of) return error(Code::kIoError, "injected read failure of {}", name_);
    auto& f = fs_.files[name_];
    if (offset >= f.size()) return size_t{0};
    size_t n = std::min<size_t>(dst.size(), f.size() - offset);
    std::memcpy(dst.data(), f.data() + offset, n);
    return n;
  }
  Result<void> pwrite(std::span<const std::byte> src, uint64_t offset) override {
    std::lock_guard lock(fs_.mu);
    if (offset > 0 && name_ == fs_.fail_writes_of) return error(Code::kIoError, "injected write failure");
    auto& f = fs_.files[name_];
    if (f.size() < offset + src.size()) f.resize(offset + src.size());
    std::memcpy(f.data() + offset, src.data(), src.size());
    return {};
  }
  Result<void> fsync() override { return {}; }
  Result<void> close() override {
    std::lock_guard lock(fs_.mu);
    if (name_ == fs_.lengthen_on_close) fs_.files[name_].push_back(std::byte{0});
    return {};
  }
  void drop_cache() override {
    std::this_thread::sleep_for(fs_.drop_takes);
    fs_.drops.fetch_add(1);
  }

 private:
  FakeFs& fs_;
  std::string name_;
};

class FakeAccess final : public Access {
 public:
  FakeAccess(FakeFs& fs, std::string kind) : fs_(fs), kind_(std::move(kind)) {}
  std::string kind() const override { return kind_; }
  std::string target() const override { return "fake"; }
  Result<std::unique_ptr<Handle>> open(const std::string& rel, int flags) override {
    if ((flags & O_ACCMODE) != O_RDONLY) {
      if (rel.find("ckpt") != std::string::npos && fs_.block_next_writer_open.exchange(false))
        std::this_thread::sleep_for(std::chrono::duration<double>(fs_.writer_open_sleep_s));
      std::lock_guard lock(fs_.mu);
      auto it = fs_.files.find(rel);
      bool existed = it != fs_.files.end();
      if (existed && (flags & O_EXCL)) return error(Code::kExists, "{} exists", rel);
      if (!existed && !(flags & O_CREAT)) return error(Code::kNotFound, "{}", rel);
      if (flags & O_TRUNC) fs_.files[rel].clear();
      else fs_.files[rel];
      if (rel.find("ckpt") != std::string::npos)
        fs_.events.push_back("wopen " + rel + (existed ? " existing" : " new"));
    } else {
      std::lock_guard lock(fs_.mu);
      if (!fs_.files.contains(rel)) return error(Code::kNotFound, "{}", rel);
      fs_.read_opens.fetch_add(1);
    }
    return std::unique_ptr<Handle>(std::make_unique<FakeHandle>(fs_, rel));
  }
  Result<void> mkdirs(const std::string&) override { return {}; }
  Result<uint64_t> stat(const std::string& rel) override {
    std::lock_guard lock(fs_.mu);
    auto it = fs_.files.find(rel);
    if (it == fs_.files.end()) return error(Code::kNotFound, "{}", rel);
    return it->second.size();
  }
  Result<void> remove(const std::string& rel) override {
    std::lock_guard lock(fs_.mu);
    if (fs_.files.erase(rel) == 0) return error(Code::kNotFound, "{}", rel);
    return {};
  }
  Result<void> remove_tree(const std::string& rel) override {
    std::lock_guard lock(fs_.mu);
    for (auto it = fs_.files.lower_bound(rel + "/"); it != fs_.files.end() && it->first.starts_with(rel + "/");)
      it = fs_.files.erase(it);
    return {};
  }
  Result<std::unique_ptr<Access>> session() override {
    return std::unique_ptr<Access>(std::make_unique<FakeAccess>(fs_, kind_));
  }
  std::string make_cold() override {
    fs_.event("cold");
    return "fake cold";
  }

 private:
  FakeFs& fs_;
  std::string kind_;
};

class FakeCluster final : public ClusterControl {
 public:
  explicit FakeCluster(FakeFs& fs) : fs_(fs) {}
  bool fail_start_up = false;
  bool up_never_ends = false;
  bool fail_meta_restart = false;
  std::atomic<int> meta_restarts{0};
  int stops = 0;

  Result<pid_t> kill(const std::string&) override {
    killed_ = true;
    fs_.block_next_writer_open = true;
    if (fs_.fail_reads_once_killed) fs_.reads_failing = true;
    return pid_t{4242};
  }
  Result<void> start_up(const std::string&) override {
    if (fail_start_up) return error(Code::kUnavailable, "injected: cannot start weft up");
    started_ = true;
    return {};
  }
  std::optional<int> up_status() override {
    if (!started_ || up_never_ends || stopped_) return stopped_ ? std::optional<int>(9) : std::nullopt;
    return 0;
  }
  std::string stop_up() override {
    ++stops;
    stopped_ = true;
    return "fake SIGTERM";
  }
  Result<ServingState> poll() override {
    ServingState s;
    s.all_serving = !killed_ || started_;
    if (!s.all_serving) s.detail = " target 1 offline;";
    return s;
  }
  Result<std::string> restart_meta() override {
    meta_restarts.fetch_add(1);
    fs_.event("meta-restart");
    if (fail_meta_restart) return error(Code::kUnavailable, "injected: weft up failed");
    return std::string("fake meta restart");
  }

 private:
  FakeFs& fs_;
  bool killed_ = false, started_ = false, stopped_ = false;
};

Options small() {
  Options o;
  o.writers = 2;
  o.checkpoint_bytes = 256 << 10;
  o.io_bytes = 64 << 10;
  o.files = 40;
  o.file_bytes = 4096;
  o.dirs = 4;
  o.readers = 2;
  o.kill_after_s = 0.5;
  o.restart_after_s = 0.3;
  o.tail_s = 0.5;
  o.serving_timeout_s = 5;
  o.data_dir = "/nonexistent-benchsuite-test";
  return o;
}

bool has_note(const bench::Run& r, const std::string& part) {
  for (const auto& n : r.notes)
    if (n.find(part) != std::string::npos) return true;
  return false;
}

std::string notes(const bench::Run& r) {
  std::string s;
  for (const auto& n : r.notes) s += n + "\n";
  return s;
}

// The checkpoint opens of `dir`, in order: true when the file existed (a truncate).
std::vector<bool> write_opens(FakeFs& fs, const std::string& dir) {
  std::vector<bool> out;
  std::lock_guard lock(fs.mu);
  for (const auto& e : fs.events)
    if (e.starts_with("wopen " + dir + "/ckpt-")) out.push_back(e.ends_with(" existing"));
  return out;
}

enum class Cluster { kNone, kControlled };

// One target of `weft bench`: a fake file system reached through an Access of
// `kind`. With Cluster::kControlled the target has a fake local cluster behind
// it (--data-dir) that the workloads may kill, restart and poll.
struct FakeTarget {
  FakeFs fs;
  FakeAccess access;
  FakeCluster cluster{fs};
  TargetState st;
  Progress progress;

  FakeTarget(std::string kind, Cluster c) : access(fs, std::move(kind)) {
    if (c == Cluster::kControlled) st.cluster = &cluster;
  }
  bench::Run run(const std::string& workload, const Options& o = small()) {
    return run_workload(workload, access, st, o, progress);
  }
};

TEST(W7, StallMaxCountsAWriterBlockedInOpenWhileReadsKeepSucceeding) {
  FakeTarget t("native", Cluster::kControlled);
  t.fs.writer_open_sleep_s = 2.5;
  bench::Run r = t.run("W7");
  EXPECT_EQ(r.errors, 0u) << notes(r);
  EXPECT_TRUE(r.verified()) << notes(r);
  EXPECT_GE(r.figures.at("stall_max_s"), 2.5);
  EXPECT_GE(r.figures.at("write_stall_max_s"), 2.5);
  // The readers never waited for it (what hid the stall before).
  EXPECT_LT(r.figures.at("read_stall_max_s"), 1.5);
  uint64_t reads_during_block = 0;
  for (const auto& pt : r.timeline)
    if (pt.t > 1.5 && pt.t <= 3.0) reads_during_block += pt.read_mib_per_s > 0 ? 1 : 0;
  EXPECT_GT(reads_during_block, 0u);
}

// Readers whose every read fails from the kill until the load stops stalled
// all that time: a failed read is no progress (their lanes used to end
// "done" with the stall before the kill only).
TEST(W7, ReadersThatFailUntilTheEndStalledUntilTheEnd) {
  FakeTarget t("native", Cluster::kControlled);
  t.fs.fail_reads_once_killed = true;
  bench::Run r = t.run("W7");
  EXPECT_GT(r.errors, 0u) << notes(r);
  ASSERT_TRUE(r.events.contains("kill") && r.events.contains("end"));
  const double failing = r.events.at("end") - r.events.at("kill");
  EXPECT_GE(r.figures.at("read_stall_max_s"), failing - 0.2) << notes(r);
  EXPECT_GE(r.figures.at("stall_max_s"), failing - 0.2);
}

TEST(W7, AloneAndUnderLoadWritersRewriteFreshFilesTheSameWay) {
  FakeTarget t("native", Cluster::kControlled);
  Options o = small();
  bench::Run r = t.run("W7", o);
  EXPECT_EQ(r.errors, 0u) << notes(r);
  for (const char* dir : {"w7/alone", "w7/load"}) {
    auto opens = write_opens(t.fs, dir);
    ASSERT_GE(opens.size(), 2u * o.writers) << dir;
    // Each writer's first generation creates its file, the later ones truncate it.
    size_t fresh = 0, truncating = 0;
    for (bool existed : opens) (existed ? truncating : fresh) += 1;
    EXPECT_EQ(fresh, o.writers) << dir;
    EXPECT_GE(truncating, o.writers) << dir;
  }
  EXPECT_GT(r.figures.at("write_gib_per_s_alone"), 0);
  // Every cold step restarted meta (the same warm-up for alone and under load).
  std::lock_guard lock(t.fs.mu);
  int colds = 0, restarts_before_cold = 0;
  for (size_t i = 0; i < t.fs.events.size(); ++i) {
    if (t.fs.events[i] != "cold") continue;
    ++colds;
    if (i > 0 && t.fs.events[i - 1] == "meta-restart") ++restarts_before_cold;
  }
  EXPECT_EQ(restarts_before_cold, 3);  // reads alone, writes alone, under load (not the verification)
  EXPECT_EQ(t.cluster.meta_restarts.load(), 3);
}

TEST(W7, RestartThatCannotStartIsAnErrorWithANote) {
  FakeTarget t("directory", Cluster::kControlled);
  t.cluster.fail_start_up = true;
  bench::Run r = t.run("W7");
  EXPECT_GT(r.errors, 0u);
  EXPECT_TRUE(has_note(r, "NOT restarted")) << notes(r);
  EXPECT_TRUE(has_note(r, "stays down")) << notes(r);
}

TEST(W7, UpStillRunningAfterTheLoadIsEndedAndReported) {
  FakeTarget t("directory", Cluster::kControlled);
  t.cluster.up_never_ends = true;
  Options o = small();
  o.serving_timeout_s = 1;
  bench::Run r = t.run("W7", o);
  EXPECT_EQ(t.cluster.stops, 1);
  EXPECT_GT(r.errors, 0u);
  EXPECT_TRUE(has_note(r, "was ended (fake SIGTERM)")) << notes(r);
}

TEST(W4, AloneAndUnderLoadWritesBothCreateFreshFilesAfterTheSameColdStep) {
  FakeTarget t("native", Cluster::kControlled);
  Options o = small();
  // W1 ran first and left its files: they must not be the reference any more.
  bench::Run w1 = t.run("W1", o);
  ASSERT_EQ(w1.errors, 0u);
  {
    std::lock_guard lock(t.fs.mu);
    t.fs.events.clear();
  }
  bench::Run r = t.run("W4", o);
  EXPECT_EQ(r.errors, 0u) << notes(r);
  EXPECT_TRUE(r.verified());
  std::vector<std::string> seq;  // cold steps and checkpoint opens, in order
  std::set<std::string> dirs;
  {
    std::lock_guard lock(t.fs.mu);
    for (const auto& e : t.fs.events) {
      if (e == "cold") seq.push_back("cold");
      if (e.starts_with("wopen ")) {
        EXPECT_TRUE(e.ends_with(" new")) << e << ": a truncate of an existing checkpoint";
        seq.push_back("w");
        dirs.insert(e.substr(6, e.rfind('/') - 6));
      }
    }
  }
  // reads alone (cold), writes alone (cold, 2 fresh files), load (cold, 2 fresh files)
  EXPECT_EQ(seq, (std::vector<std::string>{"cold", "cold", "w", "w", "cold", "w", "w"}));
  EXPECT_EQ(dirs.size(), 2u);
  EXPECT_FALSE(dirs.contains("w1"));
  EXPECT_EQ(t.cluster.meta_restarts.load(), 3);
  EXPECT_GT(r.figures.at("write_gib_per_s_alone"), 0);
  EXPECT_GT(r.figures.at("read_latency_p99_alone_ms"), 0);
}

// A stand-in for a server: `/bin/sh serve KIND --config CONFIG` runs the
// script "serve" of `dir` (a sleep), so its command line has a server's
// exact shape. Killed and reaped by the destructor.
struct FakeServer {
  pid_t pid = -1;
  FakeServer(const std::string& dir, const std::string& config) {
    std::vector<std::string> args = {"/bin/sh", "serve", "storage", "--config", config};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid = ::fork();
    if (pid == 0) {
      ::setpgid(0, 0);  // a group of its own: the destructor kills the script's sleep too
      if (::chdir(dir.c_str()) == 0) ::execv("/bin/sh", argv.data());  // argv made before the fork
      ::_exit(127);
    }
    if (pid > 0) {
      ::setpgid(pid, pid);  // here too: whichever runs first
      group = pid;
    }
  }
  bool running() const { return pid > 0 && ::kill(pid, 0) == 0 && ::waitpid(pid, nullptr, WNOHANG) == 0; }
  ~FakeServer() {
    if (group > 0) ::kill(-group, SIGKILL);  // the group outlives its leader's pid: never reused meanwhile
    if (pid > 0) ::waitpid(pid, nullptr, 0);  // never kill(-1) or wait(-1): every process
  }
  pid_t group = -1;
};

// kill_role signals only the server `weft up` started for this cluster's
// role: a pid file naming another cluster's server (a reused pid) is refused.
TEST(ClusterControl, KillRoleSignalsOnlyThisClustersServer) {
  const auto base = std::filesystem::temp_directory_path() / ("benchsuite-kill-" + std::to_string(::getpid()));
  const std::string ours = base / "a", other = base / "b";
  std::filesystem::create_directories(ours + "/run");
  std::filesystem::create_directories(other + "/conf");
  { std::ofstream(ours + "/serve") << "sleep 30; :\n"; }
  auto write_pid = [&](pid_t pid) { std::ofstream(ours + "/run/storage-1.pid") << pid << "\n"; };
  FakeServer elsewhere(ours, other + "/conf/storage-1.toml");
  FakeServer mine(ours, ours + "/conf/storage-1.toml");
  auto shaped = [](pid_t pid) {
    for (int i = 0; i < 200; ++i) {  // until the child has exec'd
      std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline");
      std::string cmd((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (cmd.starts_with(std::string("/bin/sh\0serve", 13))) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  };
  ASSERT_TRUE(shaped(elsewhere.pid) && shaped(mine.pid));
  write_pid(elsewhere.pid);
  auto refused = kill_role(ours, "storage-1");
  ASSERT_FALSE(refused.has_value()) << "killed pid " << *refused << ", another cluster's server";
  EXPECT_EQ(refused.error().code(), Code::kNotFound) << refused.error();
  EXPECT_TRUE(elsewhere.running());
  write_pid(mine.pid);
  auto killed = kill_role(ours, "storage-1");
  ASSERT_TRUE(killed.has_value()) << killed.error();
  EXPECT_EQ(*killed, mine.pid);
  int status = 0;
  ASSERT_EQ(::waitpid(mine.pid, &status, 0), mine.pid);
  mine.pid = -1;  // reaped: its pid may be another process's by now
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  std::filesystem::remove_all(base);
}

TEST(W1, ThroughputCountsOnlyTheBytesWritten) {
  FakeTarget t("directory", Cluster::kNone);
  t.fs.fail_writes_of = "w1/ckpt-0";
  Options o = small();
  o.writers = 4;
  bench::Run r = t.run("W1", o);
  EXPECT_EQ(r.errors, 1u);
  double bytes = r.figures.at("gib_per_s") * r.figures.at("seconds") * kGiB;
  double expected = 3.0 * static_cast<double>(o.checkpoint_bytes) + static_cast<double>(o.io_bytes);
  EXPECT_NEAR(bytes, expected, expected * 1e-6);
}

// A reader that failed at once read nothing: the rate counts the bytes read
// (it used to credit every file's whole size).
TEST(W2, ThroughputCountsOnlyTheBytesRead) {
  FakeTarget t("directory", Cluster::kNone);
  Options o = small();
  o.writers = 4;
  ASSERT_EQ(t.run("W1", o).errors, 0u);
  t.fs.fail_reads_of = "w1/ckpt-0";
  bench::Run r = t.run("W2", o);
  EXPECT_EQ(r.errors, 1u) << notes(r);
  double bytes = r.figures.at("gib_per_s") * r.figures.at("seconds") * kGiB;
  double expected = 3.0 * static_cast<double>(o.checkpoint_bytes);
  EXPECT_NEAR(bytes, expected, expected * 1e-6);
}

// The page cache drop after each file (POSIX targets only) is not read time:
// not in the latencies, nor in the rate (a 5 ms drop per file held the rate
// of 2 readers near 400 files/s, whatever the reads cost).
TEST(W3, ThePageCacheDropsAreNotInTheRate) {
  FakeTarget t("directory", Cluster::kNone);
  t.fs.drop_takes = std::chrono::milliseconds(5);
  Options o = small();
  o.files = 200;  // ~0.5 s of drops per reader: their uneven split stays small beside it
  bench::Run r = t.run("W3", o);
  EXPECT_EQ(r.errors, 0u) << notes(r);
  EXPECT_GE(t.fs.drops.load(), o.files);
  EXPECT_LT(r.figures.at("latency_p50_ms"), 2.5);
  // With the drops counted the rate is at most readers / 5 ms = 400 files/s.
  EXPECT_GT(r.figures.at("files_per_s"), 3 * o.readers / 0.005) << "the drops' time counted";
}

TEST(W3, AFileLongerThanExpectedFailsVerification) {
  FakeTarget t("directory", Cluster::kNone);
  t.fs.lengthen_on_close = "w3/d001/f000001";
  bench::Run r = t.run("W3");
  EXPECT_EQ(r.errors, 1u) << notes(r);
  EXPECT_FALSE(r.verified());
  EXPECT_TRUE(has_note(r, "w3/d001/f000001: longer than the 4096 bytes expected")) << notes(r);
}

// A meta restart that fails (its server may stay down) ends the workload with
// an error at once, before any timed read, and the workloads after it on that
// target are skipped: their calls would wait out their retries, file by file.
TEST(W3, AFailedMetaRestartAbortsTheWorkloadAndSkipsTheRest) {
  FakeTarget t("native", Cluster::kControlled);
  t.cluster.fail_meta_restart = true;
  bench::Run r = t.run("W3");
  EXPECT_EQ(r.errors, 1u) << notes(r);
  EXPECT_TRUE(has_note(r, "aborted: meta restart failed")) << notes(r);
  EXPECT_EQ(t.fs.drops.load(), 0u) << "timed reads ran without a meta server";
  bench::Run next = t.run("W4");
  EXPECT_EQ(next.errors, 1u);
  EXPECT_TRUE(has_note(next, "skipped: meta restart failed")) << notes(next);
  EXPECT_EQ(t.cluster.meta_restarts.load(), 1);
}

TEST(W3, NativeTargetOfAControlledClusterRestartsMetaBeforeTheTimedReads) {
  FakeTarget t("native", Cluster::kControlled);
  Options o = small();
  bench::Run r = t.run("W3", o);
  EXPECT_EQ(r.errors, 0u) << notes(r);
  EXPECT_EQ(t.cluster.meta_restarts.load(), 1);
  EXPECT_TRUE(has_note(r, "cache: fake meta restart; fake cold")) << notes(r);
  // Every file's pages are dropped after its read.
  EXPECT_EQ(t.fs.drops.load(), o.files);
}

TEST(W3, NativeTargetWithoutDataDirSaysMetaCachesWereNotDropped) {
  FakeTarget t("native", Cluster::kNone);
  bench::Run r = t.run("W3");
  EXPECT_EQ(r.errors, 0u) << notes(r);
  EXPECT_TRUE(has_note(r, "meta server caches not dropped")) << notes(r);
}

TEST(W4, ReadersThatWrapAroundSayHowManyPasses) {
  FakeTarget t("directory", Cluster::kNone);
  Options o = small();
  o.files = 4;
  o.dirs = 1;
  o.checkpoint_bytes = 8 << 20;  // long enough for the readers to go round
  bench::Run r = t.run("W4", o);
  EXPECT_EQ(r.errors, 0u) << notes(r);
  EXPECT_TRUE(has_note(r, "times through the 4 files")) << notes(r);
  EXPECT_EQ(t.fs.drops.load(), t.fs.read_opens.load());
}

}  // namespace
}  // namespace weft::bench
