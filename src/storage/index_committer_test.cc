// The index committer: concurrent commits share one synced write, each is
// acknowledged only after the slab sync and the index write that cover it,
// and a failed group fails (and applies) none of its commits.
#include "storage/index_committer.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <thread>

#include <rocksdb/db.h>
#include <rocksdb/statistics.h>

#include "common/buffer.h"
#include "common/fault.h"
#include "common/rocks_env.h"
#include "storage/test_util.h"

namespace weft::storage {
namespace {

class IndexCommitterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    rocksdb::Options o;
    o.create_if_missing = true;
    o.env = rocks_env();  // so that the one-flush order really leaves the WAL's flush out
    o.statistics = stats_ = rocksdb::CreateDBStatistics();
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
  // Writes a zeroed 4 KiB slot; its sync ticket.
  Result<uint64_t> write_slot(uint32_t slot) {
    Buffer b = Buffer::allocate(4096);
    b.resize(4096);
    return slab_->write(*ring_, slot, b.data(), 4096);
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
        auto t = write_slot(static_cast<uint32_t>(i));
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
  std::shared_ptr<rocksdb::Statistics> stats_;
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
  EXPECT_EQ(c.groups(), 1u);
  // A failed index write is sticky (see below).
  EXPECT_TRUE(c.failed());
  EXPECT_FALSE(c.commit({{"k0", "w"}}, std::nullopt).has_value());
  EXPECT_FALSE(get("k0").has_value());
}

// An index write that fails after its record was written (a failed WAL sync),
// in either order, with or without slab writes: the record may be durable
// although the commits failed, so every later commit fails until the engine
// is reopened (the group's slots must stay allocated).
TEST_F(IndexCommitterTest, AFailedIndexWriteIsStickyInBothOrders) {
  for (bool one_flush : {false, true})
    for (bool with_slot : {false, true}) {
      SCOPED_TRACE(fmt::format("one_flush {} with_slot {}", one_flush, with_slot));
      IndexCommitter c(db_.get(), ring_.get(), nullptr, std::chrono::microseconds(100), one_flush);
      std::optional<SlabTicket> slab;
      if (with_slot) {
        auto t = write_slot(0);
        ASSERT_TRUE(t.has_value());
        slab = SlabTicket{slab_.get(), *t};
      }
      const std::string key = fmt::format("f{}{}", one_flush, with_slot);
      {
        fault::Scope fail("storage.index.write_then_fail", {.hits_max = 1});
        auto r = c.commit({{key, "v"}}, slab);
        if (fail.triggered() == 0) GTEST_SKIP() << "fault injection compiled out";
        ASSERT_FALSE(r.has_value());
        EXPECT_EQ(r.error().code(), Code::kIoError);
      }
      EXPECT_EQ(get(key), "v") << "the fault point writes the record first";
      EXPECT_TRUE(c.failed());
      auto later = c.commit({{key + "2", "v"}}, std::nullopt);
      ASSERT_FALSE(later.has_value());
      EXPECT_NE(later.error().message().find("reopened"), std::string::npos) << later.error();
      EXPECT_FALSE(get(key + "2").has_value());
    }
}

TEST_F(IndexCommitterTest, FailedSlabSyncFailsTheCommitBeforeTheIndexChanges) {
  IndexCommitter c(db_.get(), ring_.get());
  auto t = write_slot(0);
  ASSERT_TRUE(t.has_value());
  fault::Scope fail("storage.slab.fdatasync_eio", {.hits_max = 1});
  auto r = c.commit({{"k", "v"}}, SlabTicket{slab_.get(), *t});
  ASSERT_FALSE(r.has_value());
  EXPECT_FALSE(get("k").has_value());
}

// One flush: the record is written first with its WAL sync leaving the device
// flush out, then the slab sync flushes both; the commit is acknowledged after
// that sync only.
TEST_F(IndexCommitterTest, OneFlushWritesTheRecordThenSyncsTheSlab) {
  IndexCommitter c(db_.get(), ring_.get(), nullptr, std::chrono::seconds(10), /*one_flush=*/true);
  uint64_t deferred = WalSyncWithoutFlush::deferred_syncs();
  std::vector<uint64_t> tickets;
  auto results = commit_concurrently(c, 4, &tickets);  // checks synced_ticket >= ticket at each ack
  for (auto& r : results) EXPECT_TRUE(r.has_value()) << r.error();
  EXPECT_EQ(c.groups(), 1u);
  EXPECT_EQ(slab_->sync_calls(), 1u);
  EXPECT_EQ(WalSyncWithoutFlush::deferred_syncs(), deferred + 1);
  // A group without slab writes has nothing to flush after it: a normal synced write.
  ASSERT_TRUE(c.commit({{"r", "v"}}, std::nullopt));
  EXPECT_EQ(WalSyncWithoutFlush::deferred_syncs(), deferred + 1);
  EXPECT_EQ(get("r"), "v");
}

// The slot was already covered by an earlier slab sync (another group's
// leader syncs every write done when it starts): the record still needs a
// flush that starts after it was written, so the slab is synced again.
TEST_F(IndexCommitterTest, OneFlushSyncsAfterTheRecordEvenWhenTheSlotIsSynced) {
  IndexCommitter c(db_.get(), ring_.get(), nullptr, std::chrono::microseconds(100), /*one_flush=*/true);
  auto t = write_slot(0);
  ASSERT_TRUE(t.has_value());
  ASSERT_TRUE(slab_->sync_to(*ring_, *t));
  ASSERT_EQ(slab_->sync_calls(), 1u);
  ASSERT_TRUE(c.commit({{"k", "v"}}, SlabTicket{slab_.get(), *t}));
  EXPECT_EQ(slab_->sync_calls(), 2u);
}

// A slab sync that fails after the record was written: the record may be on
// the disk with its slot lost, so the committer refuses everything after it
// (the engine's restart check settles the group at the next open).
TEST_F(IndexCommitterTest, OneFlushSlabSyncFailureIsSticky) {
  IndexCommitter c(db_.get(), ring_.get(), nullptr, std::chrono::microseconds(100), /*one_flush=*/true);
  auto t = write_slot(0);
  ASSERT_TRUE(t.has_value());
  {
    fault::Scope fail("storage.slab.fdatasync_eio", {.hits_max = 1});
    auto r = c.commit({{"k", "v"}}, SlabTicket{slab_.get(), *t});
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error().code(), Code::kIoError);
  }
  EXPECT_EQ(get("k"), "v");  // written before the failed sync: why the failure is sticky
  auto later = c.commit({{"k2", "v"}}, std::nullopt);
  ASSERT_FALSE(later.has_value());
  EXPECT_NE(later.error().message().find("reopen"), std::string::npos) << later.error();
  EXPECT_FALSE(get("k2").has_value());
}

TEST_F(IndexCommitterTest, UntilNextGroupKeysLastOneGroup) {
  IndexCommitter c(db_.get(), ring_.get(), nullptr, std::chrono::microseconds(100), /*one_flush=*/true);
  ASSERT_TRUE(c.commit({{"a", "1"}, {"Va", "prev", true}}, std::nullopt));
  EXPECT_EQ(get("Va"), "prev");
  ASSERT_TRUE(c.commit({{"b", "1"}, {"Vb", "prev", true}}, std::nullopt));
  EXPECT_FALSE(get("Va").has_value());
  EXPECT_EQ(get("Vb"), "prev");
  // The same key again in the next group: put after the delete, so it stays.
  ASSERT_TRUE(c.commit({{"b", "2"}, {"Vb", "again", true}}, std::nullopt));
  EXPECT_EQ(get("Vb"), "again");
  ASSERT_TRUE(c.commit({{"c", "1"}}, std::nullopt));
  EXPECT_FALSE(get("Vb").has_value());
}

// A durable group's restart-check keys are deleted without a sync; an idle
// committer is asked (by the engine's space pass) to make that durable, and
// does so once; a later group's synced write covers it too.
TEST_F(IndexCommitterTest, RetiredRestartKeysAreMadeDurableOnRequest) {
  IndexCommitter c(db_.get(), ring_.get(), nullptr, std::chrono::microseconds(100), /*one_flush=*/true);
  EXPECT_FALSE(c.retired_keys_unsynced());
  auto t = write_slot(0);
  ASSERT_TRUE(t.has_value());
  ASSERT_TRUE(c.commit({{"a", "1"}, {"Va", "prev", true}}, SlabTicket{slab_.get(), *t}));
  EXPECT_FALSE(get("Va").has_value()) << "retired once the group's flush returned";
  EXPECT_TRUE(c.retired_keys_unsynced());
  ASSERT_TRUE(c.sync_retired_keys());
  EXPECT_FALSE(c.retired_keys_unsynced());
  ASSERT_TRUE(c.sync_retired_keys()) << "nothing to do";
  auto t2 = write_slot(1);
  ASSERT_TRUE(t2.has_value());
  ASSERT_TRUE(c.commit({{"b", "1"}, {"Vb", "prev", true}}, SlabTicket{slab_.get(), *t2}));
  EXPECT_TRUE(c.retired_keys_unsynced());
  ASSERT_TRUE(c.commit({{"c", "1"}}, std::nullopt));  // a synced write after the delete
  EXPECT_FALSE(c.retired_keys_unsynced());
}

// A committer closed while its retired keys' deletes are unsynced (a clean
// stop before the engine's space pass asked) syncs them: left in the WAL
// unsynced, a power cut after the stop could bring a key back, and the next
// open roll an acknowledged version back for damage to its new slot.
TEST_F(IndexCommitterTest, AClosedCommitterMakesItsRetiredKeysDurable) {
  uint64_t syncs = 0;
  {
    IndexCommitter c(db_.get(), ring_.get(), nullptr, std::chrono::microseconds(100), /*one_flush=*/true);
    auto t = write_slot(0);
    ASSERT_TRUE(t.has_value());
    ASSERT_TRUE(c.commit({{"a", "1"}, {"Va", "prev", true}}, SlabTicket{slab_.get(), *t}));
    ASSERT_TRUE(c.retired_keys_unsynced());
    syncs = stats_->getTickerCount(rocksdb::WAL_FILE_SYNCED);
  }
  EXPECT_GT(stats_->getTickerCount(rocksdb::WAL_FILE_SYNCED), syncs) << "the deletes were left unsynced";
  EXPECT_FALSE(get("Va").has_value());
}

}  // namespace
}  // namespace weft::storage
