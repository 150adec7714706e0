// The index committer: concurrent commits share one synced write, each is
// acknowledged only after the slab sync and the index write that cover it,
// and a failed group fails (and applies) none of its commits.
#include "storage/index_committer.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <thread>

#include <rocksdb/db.h>

#include "common/buffer.h"
#include "common/fault.h"
#include "storage/test_util.h"

namespace weft::storage {
namespace {

class IndexCommitterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    rocksdb::Options o;
    o.create_if_missing = true;
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(o, dir_.path() + "/index", &raw).ok());
    db_.reset(raw);
    auto ring = IoRing::create(32);
    ASSERT_TRUE(ring.has_value());
    ring_ = std::move(*ring);
    auto slab = SlabFile::open(dir_.path() + "/slab", 4096, 1 << 20);
    ASSERT_TRUE(slab.has_value());
    slab_ = std::move(*slab);
    ASSERT_TRUE(slab_->ensure_slots(64).has_value());
  }
  std::optional<std::string> get(const std::string& key) {
    std::string v;
    return db_->Get(rocksdb::ReadOptions(), key, &v).ok() ? std::optional(v) : std::nullopt;
  }
  // `n` threads announce themselves, then each writes a slot and commits key
  // k<i>; a long linger makes the leader wait for all of them.
  std::vector<Result<void>> commit_concurrently(IndexCommitter& c, int n, std::vector<uint64_t>* tickets = nullptr) {
    std::vector<Result<void>> results(n);
    std::vector<uint64_t> got(n);
    std::vector<std::thread> threads;
    std::atomic<int> announced{0};
    for (int i = 0; i < n; ++i)
      threads.emplace_back([&, i] {
        IndexCommitter::Intent intent(c);
        announced++;
        while (announced.load() < n) std::this_thread::yield();
        Buffer b = Buffer::allocate(4096);
        b.resize(4096);
        auto t = slab_->write(*ring_, static_cast<uint32_t>(i), b.data(), 4096);
        ASSERT_TRUE(t.has_value());
        got[i] = *t;
        results[i] = c.commit({{"k" + std::to_string(i), "v"}}, SlabTicket{slab_.get(), *t});
        // Acknowledged = durable: the slab sync covering the slot finished first.
        if (results[i]) {
          EXPECT_GE(slab_->synced_ticket(), *t);
        }
      });
    for (auto& t : threads) t.join();
    if (tickets) *tickets = got;
    return results;
  }

  testing::TempDir dir_;
  std::unique_ptr<rocksdb::DB> db_;
  std::unique_ptr<IoRing> ring_;
  std::unique_ptr<SlabFile> slab_;
};

TEST_F(IndexCommitterTest, ConcurrentCommitsShareOneSyncedWriteAfterTheSlabSync) {
  IndexCommitter c(db_.get(), ring_.get(), nullptr, std::chrono::seconds(10));
  auto results = commit_concurrently(c, 6);
  for (auto& r : results) EXPECT_TRUE(r.has_value()) << r.error();
  EXPECT_EQ(c.groups(), 1u);           // the leader waited for every announced commit
  EXPECT_EQ(slab_->sync_calls(), 1u);  // and synced the slab once for all of them
  for (int i = 0; i < 6; ++i) EXPECT_EQ(get("k" + std::to_string(i)), "v");
}

TEST_F(IndexCommitterTest, FailedGroupFailsAndAppliesNoneOfItsCommits) {
  IndexCommitter c(db_.get(), ring_.get(), nullptr, std::chrono::seconds(10));
  {
    fault::Scope fail("storage.index.write_fail", {.hits_max = 1});
    auto results = commit_concurrently(c, 4);
    for (auto& r : results) {
      ASSERT_FALSE(r.has_value());
      EXPECT_EQ(r.error().code(), Code::kIoError);
    }
  }
  for (int i = 0; i < 4; ++i) EXPECT_FALSE(get("k" + std::to_string(i)).has_value());
  ASSERT_TRUE(c.commit({{"k0", "w"}, {"k1", std::nullopt}}, std::nullopt).has_value());
  EXPECT_EQ(get("k0"), "w");
  EXPECT_EQ(c.groups(), 2u);
}

TEST_F(IndexCommitterTest, FailedSlabSyncFailsTheCommitBeforeTheIndexChanges) {
  IndexCommitter c(db_.get(), ring_.get());
  Buffer b = Buffer::allocate(4096);
  b.resize(4096);
  auto t = slab_->write(*ring_, 0, b.data(), 4096);
  ASSERT_TRUE(t.has_value());
  fault::Scope fail("storage.slab.fdatasync_eio", {.hits_max = 1});
  auto r = c.commit({{"k", "v"}}, SlabTicket{slab_.get(), *t});
  ASSERT_FALSE(r.has_value());
  EXPECT_FALSE(get("k").has_value());
}

}  // namespace
}  // namespace weft::storage
