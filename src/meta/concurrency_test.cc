// Many threads mutating one namespace at once; fsck must find it consistent.
#include <atomic>
#include <cstdio>
#include <memory>
#include <thread>

#include "common/fault.h"
#include "common/random.h"
#include "meta/ops.h"
#include "meta/test_util.h"

namespace weft::meta::testing {
namespace {

class ConcurrencyTest : public StoreTest {
 protected:
  StoreOptions options() override {
    auto o = StoreTest::options();
    o.ino_batch = 4096;
    return o;
  }
};

// Errors a random operation may legitimately get; anything else is a bug.
bool expected_error(Code c) {
  switch (c) {
    case Code::kNotFound: case Code::kExists: case Code::kNotEmpty: case Code::kIsDirectory:
    case Code::kNotDirectory: case Code::kInvalidArgument: case Code::kNotPermitted: case Code::kBadHandle:
      return true;
    default:
      return false;
  }
}

TEST_F(ConcurrencyTest, RandomOpsKeepNamespaceConsistent) {
  fault::Scope slow_commits("meta.commit.delay", {.probability = 0.5});
  constexpr int kThreads = 8, kOps = 2500, kNames = 24;
  std::vector<Ino> dirs{kRootIno};
  for (int i = 0; i < 4; ++i) dirs.push_back(mkdir(fmt::format("d{}", i)));
  std::atomic<int> unexpected{0}, succeeded{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Xoshiro256 rng(1000 + t);
      auto dir = [&] {  // a top-level dir, or a subdirectory found by lookup
        Ino d = dirs[rng.uniform(dirs.size())];
        if (rng.uniform(3) == 0) {
          auto sub = s().lookup(root(), d, fmt::format("n{}", rng.uniform(kNames)));
          if (sub && sub->is_dir()) return sub->ino;
        }
        return d;
      };
      auto name = [&] { return fmt::format("n{}", rng.uniform(kNames)); };
      for (int i = 0; i < kOps; ++i) {
        Result<void> r;
        switch (rng.uniform(11)) {
          case 0: case 1: r = to_void(s().create(root(), dir(), name(), 0644, rng.uniform(2), false)); break;
          case 2: r = to_void(s().mkdir(root(), dir(), name(), 0755)); break;
          case 3: r = s().unlink(root(), dir(), name()); break;
          case 4: r = s().rmdir(root(), dir(), name()); break;
          case 5: case 6: {
            auto flags = static_cast<RenameFlags>(rng.uniform(3));
            r = s().rename(root(), dir(), name(), dir(), name(), flags);
            break;
          }
          case 7: {
            auto f = s().lookup(root(), dir(), name());
            r = f ? to_void(s().link(root(), f->ino, dir(), name())) : to_void(f);
            break;
          }
          case 8: {
            auto f = s().create(writer(), dir(), name(), 0644, false, true);
            if (f) {
              (void)s().report_length(root(), f->inode.ino, f->session_id, rng.uniform(1 << 20));
              r = s().close(root(), f->inode.ino, f->session_id);
            } else {
              r = std::unexpected(f.error());
            }
            break;
          }
          case 9: {
            auto f = s().lookup(root(), dir(), name());
            r = f && f->is_file() ? to_void(s().setattr(root(), f->ino, SetAttr{.mode = 0600, .size = rng.uniform(100)}))
                                  : to_void(f);
            break;
          }
          case 10: {
            auto f = s().lookup(root(), dir(), name());
            r = f ? s().setxattr(root(), f->ino, "user.k", "v", XattrFlags::kAny) : to_void(f);
            break;
          }
        }
        if (r) {
          succeeded++;
        } else if (!expected_error(r.error().code())) {
          if (unexpected++ < 10) ADD_FAILURE() << r.error();
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(unexpected.load(), 0);
  EXPECT_GT(succeeded.load(), kThreads * kOps / 10);
  uint64_t retries = registry_.counter("weft_meta_commit_retries_total", "").value();
  RecordProperty("succeeded", succeeded.load());
  RecordProperty("commit_retries", static_cast<int>(retries));
  std::printf("%d of %d ops succeeded, %lu commit retries\n", succeeded.load(), kThreads * kOps,
              static_cast<unsigned long>(retries));
  auto report = fsck(*s().db());
  ASSERT_OK(report);
  EXPECT_TRUE(report->ok()) << report->summary();
  EXPECT_GT(report->inodes, 5u);
}

TEST_F(ConcurrencyTest, SharedDirectoryCreatesAllLand) {
  constexpr int kThreads = 8, kFiles = 300;
  Ino d = mkdir("shared");
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kFiles; ++i) {
        bool ok = i % 10 == 0 ? s().mkdir(root(), d, fmt::format("t{}_{}", t, i), 0755).has_value()
                              : s().create(root(), d, fmt::format("t{}_{}", t, i), 0644, true, false).has_value();
        if (!ok) failures++;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  size_t n = 0;
  std::string cookie;
  for (;;) {
    auto p = s().readdir(root(), d, cookie, 1000);
    ASSERT_OK(p);
    n += p->entries.size();
    cookie = p->cookie;
    if (p->eof) break;
  }
  EXPECT_EQ(n, size_t{kThreads * kFiles});
  EXPECT_EQ(s().getattr(root(), d)->nlink, 2u + kThreads * kFiles / 10);
  EXPECT_EQ(s().statfs(root())->inodes_used, 2u + kThreads * kFiles);
}

// A directory's subdirectory count is merged without a lock, so mkdirs and
// renames that take its last link at once (each under the shared lock) must
// still be ordered: exactly one gets it, the others EMLINK.
TEST_F(ConcurrencyTest, ConcurrentMkdirsNeverPushADirectoryPastItsLinkLimit) {
  Ino full = mkdir("full");
  for (uint32_t i = 2; i < kLinkCountMax - 1; ++i) mkdir("d" + std::to_string(i), full);
  ASSERT_EQ(s().getattr(root(), full)->nlink, kLinkCountMax - 1);
  std::vector<Ino> movers;
  for (int t = 0; t < 4; ++t) movers.push_back(mkdir(fmt::format("m{}", t)));
  fault::Scope slow_commits("meta.commit.delay");  // locks held 500 us longer: the calls overlap
  constexpr int kThreads = 8;
  std::atomic<int> ready{0}, made{0}, full_errors{0}, other{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      ready++;
      while (ready.load() < kThreads) std::this_thread::yield();
      // Half mkdir, half move a directory in.
      auto r = t % 2 == 0 ? to_void(s().mkdir(root(), full, fmt::format("last{}", t), 0755))
                          : s().rename(root(), kRootIno, fmt::format("m{}", t / 2), full, fmt::format("last{}", t));
      if (r) made++;
      else if (r.error().code() == Code::kTooManyLinks) full_errors++;
      else other++;
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(made.load(), 1);
  EXPECT_EQ(full_errors.load(), kThreads - 1);
  EXPECT_EQ(other.load(), 0);
  EXPECT_EQ(s().getattr(root(), full)->nlink, kLinkCountMax);
  auto report = fsck(*s().db());
  ASSERT_OK(report);
  EXPECT_TRUE(report->ok()) << report->summary();
}

TEST_F(ConcurrencyTest, CrossRenamesOfDirectoriesNeverMakeCycles) {
  // Two threads repeatedly try a->b/a and b->a/b style moves: at most one wins.
  Ino a = mkdir("a"), b = mkdir("b");
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        Ino x = t % 2 ? a : b, y = t % 2 ? b : a;
        auto px = s().getattr(root(), x), py = s().getattr(root(), y);
        if (!px || !py) continue;
        auto name = s().readdir(root(), px->parent, "", 100);
        if (!name) continue;
        for (auto& e : name->entries)
          if (e.ino == x) (void)s().rename(root(), px->parent, e.name, y, e.name);
        // move it back to the root so the race repeats
        auto p2 = s().getattr(root(), x);
        if (!p2) continue;
        auto back = s().readdir(root(), p2->parent, "", 100);
        if (!back) continue;
        for (auto& e : back->entries)
          if (e.ino == x && p2->parent != kRootIno) (void)s().rename(root(), p2->parent, e.name, kRootIno, e.name);
      }
    });
  }
  for (auto& th : threads) th.join();
  auto report = fsck(*s().db());
  ASSERT_OK(report);
  EXPECT_TRUE(report->ok()) << report->summary();
}

// Two renames whose names are hard links of each other's inodes
// (d1/x1 -> d2/y1 while d2/y2 -> d1/x2, x* naming X and y* naming Y) lock
// the same two inodes: in the order of their names they took them in
// opposite orders, a deadlock RocksDB broke by aborting one (a retry; under
// a steady stream, EBUSY after 20). In inode order they never deadlock.
TEST_F(ConcurrencyTest, RenamesOverHardLinksOfEachOthersInodesDoNotDeadlock) {
  Ino d1 = mkdir("d1"), d2 = mkdir("d2");
  const Ino x = create("x1", d1), y = create("y1", d2);
  ASSERT_OK(s().link(root(), x, d1, "x2"));
  ASSERT_OK(s().link(root(), y, d2, "y2"));
  ASSERT_OK(s().link(root(), x, kRootIno, "keep-x"));  // never replaced: neither inode goes
  ASSERT_OK(s().link(root(), y, kRootIno, "keep-y"));
  const uint64_t retries = registry_.counter("weft_meta_commit_retries_total", "").value();
  fault::Scope slow("meta.rename.between_inode_locks");  // 1 ms with the first inode locked: the renames overlap
  constexpr int kRounds = 200;
  std::atomic<int> failed{0};
  // Each thread has its two names back (the source it renamed, the target
  // naming its own inode again), then renames one over the other: every
  // round moves a name and locks both inodes. The threads' names differ.
  auto round = [&](Ino src_ino, Ino src_dir, const char* src, Ino dst_ino, Ino dst_dir, const char* dst) {
    if (!s().link(root(), src_ino, src_dir, src)) failed.fetch_add(1);
    if (!s().unlink(root(), dst_dir, dst) || !s().link(root(), dst_ino, dst_dir, dst)) failed.fetch_add(1);
    if (!s().rename(root(), src_dir, src, dst_dir, dst)) failed.fetch_add(1);
  };
  ASSERT_OK(s().unlink(root(), d1, "x1"));  // as each round leaves it
  ASSERT_OK(s().unlink(root(), d2, "y2"));
  std::thread t1([&] {
    for (int i = 0; i < kRounds; ++i) round(x, d1, "x1", y, d2, "y1");
  });
  std::thread t2([&] {
    for (int i = 0; i < kRounds; ++i) round(y, d2, "y2", x, d1, "x2");
  });
  t1.join();
  t2.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(registry_.counter("weft_meta_commit_retries_total", "").value(), retries)
      << "transactions aborted by deadlock detection (or lock timeouts)";
}

// rename("a/x", "a"), rename("a", "a/y") and link(a, a, "x") hold a shared
// lock on a and used to take a's inode exclusively before they refused:
// two at once each waited for the other's shared lock (a deadlock, broken by
// aborting one and retrying it); so did link(a, b, "x") beside
// link(b, a, "y"). They answer from the entries and the type now.
TEST_F(ConcurrencyTest, RefusedRenamesAndLinksOfADirectoryIntoItselfDoNotDeadlock) {
  const Ino a = mkdir("a"), b = mkdir("b");
  create("x", a);
  const uint64_t retries = registry_.counter("weft_meta_commit_retries_total", "").value();
  constexpr int kRounds = 200;
  std::atomic<int> wrong{0};
  auto expect = [&](const Result<void>& r, Code code) {
    if (r || r.error().code() != code) wrong.fetch_add(1);
  };
  auto worker = [&] {
    for (int i = 0; i < kRounds; ++i) {
      expect(s().rename(root(), a, "x", kRootIno, "a"), Code::kNotEmpty);
      expect(s().rename(root(), a, "x", kRootIno, "a", RenameFlags::kExchange), Code::kInvalidArgument);
      expect(s().rename(root(), kRootIno, "a", a, "y"), Code::kInvalidArgument);
      for (auto [dir, into] : {std::pair{a, a}, std::pair{a, b}, std::pair{b, a}}) {
        auto linked = s().link(root(), dir, into, "link");
        expect(linked ? Result<void>{} : Result<void>(std::unexpected(linked.error())), Code::kNotPermitted);
      }
    }
  };
  std::thread t1(worker), t2(worker);
  t1.join();
  t2.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(registry_.counter("weft_meta_commit_retries_total", "").value(), retries)
      << "transactions aborted by deadlock detection (or lock timeouts)";
}

class DurableTest : public StoreTest {
 protected:
  StoreOptions options() override {
    auto o = StoreTest::options();
    o.sync = true;
    return o;
  }
};

TEST_F(DurableTest, OneWalSyncCoversManyConcurrentCommits) {
  constexpr int kThreads = 8, kFiles = 40;
  auto& syncs = registry_.counter("weft_meta_wal_syncs_total", "");
  uint64_t before = syncs.value();
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kFiles; ++i)
        if (!s().create(root(), kRootIno, fmt::format("f{}_{}", t, i), 0644, true, false)) failures++;
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  uint64_t used = syncs.value() - before;
  EXPECT_GE(used, 1u);                        // acknowledged commits were synced
  EXPECT_LT(used, uint64_t{kThreads * kFiles});  // ...in groups
  std::printf("%d commits, %lu WAL syncs\n", kThreads * kFiles, static_cast<unsigned long>(used));
}

// The path the RPC service takes: commits under DeferSync return before their
// sync; when_durable callbacks fire only after one sync covering all of them.
TEST_F(DurableTest, DeferredCommitsAreAckedTogetherAfterOneSync) {
  constexpr int kCommits = 8;
  auto& syncs = registry_.counter("weft_meta_wal_syncs_total", "");
  // Holds the sync back (10 ms a hit) until the test lets it go: with 5 hits
  // (50 ms) a commit loop held up longer was split over two syncs.
  auto delay = std::make_unique<fault::Scope>("meta.wal_sync.delay", fault::Spec{.probability = 1.0, .hits_max = 3000});
  uint64_t before = syncs.value();
  std::atomic<int> acked{0}, failed{0};
  for (int i = 0; i < kCommits; ++i) {
    DeferSync defer;
    ASSERT_OK(s().create(with_req(root(), 9, i + 1), kRootIno, fmt::format("d{}", i), 0644, true, false));
    ASSERT_TRUE(defer.sync_pending());
    s().when_durable([&](Result<void> r) { (r ? acked : failed)++; });
  }
  EXPECT_EQ(acked.load(), 0);  // the one sync is still held back by the fault point
  delay.reset();
  for (int i = 0; i < 5000 && acked.load() + failed.load() < kCommits; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_EQ(acked.load(), kCommits);
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(syncs.value() - before, 1u);
}

// After a failed WAL sync nothing is acknowledged any more, not even a retry
// of a request whose commit that sync covered, nor commits a later sync would
// cover: that sync could succeed without the pages the failed one lost.
TEST_F(DurableTest, AFailedWalSyncFailsEveryLaterAcknowledgement) {
  {
    fault::Scope fail("meta.wal_sync.fail", {.probability = 1.0, .hits_max = 1});
    EXPECT_CODE(s().create(with_req(root(), 9, 1), kRootIno, "a", 0644, true, false), Code::kIoError);
  }
  EXPECT_CODE(s().create(with_req(root(), 9, 1), kRootIno, "a", 0644, true, false), Code::kIoError);  // the retry
  EXPECT_CODE(s().create(with_req(root(), 9, 2), kRootIno, "b", 0644, true, false), Code::kIoError);
  EXPECT_CODE(s().mkdir(root(), kRootIno, "c", 0755), Code::kIoError);
  std::atomic<int> failed{0};
  {
    DeferSync defer;
    ASSERT_OK(s().create(with_req(root(), 9, 3), kRootIno, "d", 0644, true, false));
    s().when_durable([&](Result<void> r) { failed += r ? 0 : 1; });
  }
  EXPECT_EQ(failed.load(), 1);
}

// A retried request answered from its record also waits for a sync: the
// original commit may not have been durable yet.
TEST_F(DurableTest, ReplayedRequestWaitsForTheSync) {
  ASSERT_OK(s().create(with_req(root(), 9, 1), kRootIno, "r", 0644, true, false));
  DeferSync defer;
  ASSERT_OK(s().create(with_req(root(), 9, 1), kRootIno, "r", 0644, true, false));
  EXPECT_TRUE(defer.sync_pending());
}

}  // namespace
}  // namespace weft::meta::testing
