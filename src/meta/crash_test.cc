// Durability with a real crash: a child process (this test binary re-executed
// with a gtest filter) performs mutations with synced commits and reports each
// acknowledged one over a pipe; the parent SIGKILLs it at a random point,
// reopens the store and checks that every acknowledged operation is there.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <set>
#include <thread>

#include "common/crash_child.h"
#include "common/random.h"
#include "meta/ops.h"
#include "meta/test_util.h"

namespace weft::meta::testing {
namespace {

constexpr uint64_t kDirs = 4;

// The deterministic script: op i < kDirs is mkdir d{i}; after that op i of
// block b = (i - kDirs) / 5 is
//   0: create d{b%4}/a{b}   1: create d{b%4}/b{b}   2: rename a{b} -> d{(b+1)%4}/c{b}
//   3: unlink d{b%4}/b{b}   4: mkdir d{b%4}/m{b}
using Model = std::map<std::string, std::set<std::string>>;  // dir -> names

void apply(Model& m, uint64_t i) {
  if (i < kDirs) {
    m[fmt::format("d{}", i)];
    return;
  }
  uint64_t b = (i - kDirs) / 5, j = (i - kDirs) % 5;
  std::string d = fmt::format("d{}", b % kDirs), d2 = fmt::format("d{}", (b + 1) % kDirs);
  switch (j) {
    case 0: m[d].insert(fmt::format("a{}", b)); break;
    case 1: m[d].insert(fmt::format("b{}", b)); break;
    case 2: m[d].erase(fmt::format("a{}", b)); m[d2].insert(fmt::format("c{}", b)); break;
    case 3: m[d].erase(fmt::format("b{}", b)); break;
    case 4: m[d].insert(fmt::format("m{}", b)); break;
  }
}

Result<void> run_op(MetaStore& s, uint64_t i, std::vector<Ino>& dirs) {
  Context ctx = with_req(root(), 1, i + 1);
  if (i < kDirs) {
    WEFT_TRY(Inode d, s.mkdir(ctx, kRootIno, fmt::format("d{}", i), 0755));
    dirs.push_back(d.ino);
    return {};
  }
  uint64_t b = (i - kDirs) / 5, j = (i - kDirs) % 5;
  Ino d = dirs[b % kDirs], d2 = dirs[(b + 1) % kDirs];
  switch (j) {
    case 0: return to_void(s.create(ctx, d, fmt::format("a{}", b), 0644, true, false));
    case 1: return to_void(s.create(ctx, d, fmt::format("b{}", b), 0644, true, false));
    case 2: return s.rename(ctx, d, fmt::format("a{}", b), d2, fmt::format("c{}", b));
    case 3: return s.unlink(ctx, d, fmt::format("b{}", b));
    default: {
      WEFT_TRY(Inode m, s.mkdir(ctx, d, fmt::format("m{}", b), 0755));
      (void)m;
      return {};
    }
  }
}

StoreOptions durable_options(const std::string& path) {
  StoreOptions o;
  o.path = path;
  o.sync = true;
  o.ino_batch = 16;  // exercise the persisted high-water mark across the crash
  return o;
}

// The child: runs the script forever, writing each acknowledged op index.
TEST(CrashChild, Run) {
  const char* path = getenv("WEFT_META_CRASH_DB");
  const char* fd_text = getenv("WEFT_META_CRASH_FD");
  if (!path || !fd_text) GTEST_SKIP() << "only runs as the child of CrashTest";
  int fd = atoi(fd_text);
  auto store = MetaStore::open(durable_options(path));
  ASSERT_TRUE(store.has_value()) << store.error();
  std::vector<Ino> dirs;
  for (uint64_t i = 0;; ++i) {
    auto r = run_op(**store, i, dirs);
    ASSERT_TRUE(r.has_value()) << "op " << i << ": " << r.error();
    ASSERT_EQ(write(fd, &i, sizeof(i)), static_cast<ssize_t>(sizeof(i)));
  }
}

Model read_back(MetaStore& s) {
  Model m;
  auto top = s.readdir(root(), kRootIno, "", 1000);
  EXPECT_TRUE(top.has_value());
  if (!top) return m;
  for (auto& d : top->entries) {
    auto& names = m[d.name];
    std::string cookie;
    for (;;) {
      auto p = s.readdir(root(), d.ino, cookie, 1000);
      EXPECT_TRUE(p.has_value());
      if (!p) break;
      for (auto& e : p->entries) names.insert(e.name);
      cookie = p->cookie;
      if (p->eof) break;
    }
  }
  return m;
}

void crash_round(uint64_t kill_after_acks) {
  TempDir dir;
  std::string db = dir.path() + "/db";
  uint64_t acked = 0;
  ASSERT_NO_FATAL_FAILURE(weft::testing::run_child_until_killed("CrashChild.Run", "WEFT_META_CRASH_FD",
                                                                {{"WEFT_META_CRASH_DB", db}}, kill_after_acks, &acked));

  auto store = MetaStore::open(durable_options(db));
  ASSERT_TRUE(store.has_value()) << store.error();
  Model got = read_back(**store);
  Model want, want_next;
  for (uint64_t i = 0; i < acked; ++i) apply(want, i);
  want_next = want;
  apply(want_next, acked);  // the op in flight at the kill may have committed
  EXPECT_TRUE(got == want || got == want_next) << "after " << acked << " acknowledged ops the namespace differs";
  auto report = fsck(*(*store)->db());
  ASSERT_TRUE(report.has_value()) << report.error();
  EXPECT_TRUE(report->ok()) << report->summary();
  // The store keeps working after recovery, and a retried request is answered from its record.
  ASSERT_TRUE((*store)->mkdir(root(), kRootIno, "after", 0755).has_value());
  std::vector<Ino> dirs;
  for (uint64_t i = 0; i < kDirs; ++i) dirs.push_back((*store)->lookup(root(), kRootIno, fmt::format("d{}", i))->ino);
  EXPECT_TRUE(run_op(**store, acked - 1, dirs).has_value()) << "retry of the last acknowledged op";
}

TEST(CrashTest, AcknowledgedOpsSurviveSigkill) {
  Xoshiro256 rng(static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
  for (int round = 0; round < 3; ++round) {
    uint64_t kill_after = 20 + rng.uniform(200);
    SCOPED_TRACE(fmt::format("round {} kill after {} acks", round, kill_after));
    ASSERT_NO_FATAL_FAILURE(crash_round(kill_after));
  }
}

}  // namespace
}  // namespace weft::meta::testing
