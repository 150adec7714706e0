// The orphan sweep removes the chunks of inodes meta no longer has, once they
// have been orphans for the grace, and nothing else: not the chunks of
// inodes meta has, nor of inodes at or above meta's issued-id mark, nor
// anything while meta cannot answer or the write fence is down.
#include "storage/orphan_sweep.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <thread>
#include <set>
#include <utility>

#include "storage/test_util.h"

namespace weft::storage {
namespace {

using testing::pattern;

struct FakeMeta final : InodeOracle {
  std::set<uint64_t>* live;
  uint64_t* below;
  uint64_t* store;
  bool* down;
  uint64_t* switch_store_after_exist;  // nonzero: the next mark() comes from this store
  Result<std::vector<bool>> exist(const std::vector<uint64_t>& inos) override {
    if (*down) return error(Code::kUnavailable, "meta down");
    std::vector<bool> out;
    for (uint64_t i : inos) out.push_back(live->contains(i));
    if (*switch_store_after_exist) *store = std::exchange(*switch_store_after_exist, 0);
    return out;
  }
  Result<MetaMark> mark() override {
    if (*down) return error(Code::kUnavailable, "meta down");
    if (grow_per_question && ++marks % 2 == 0) *below += grow_per_question;  // files created meanwhile
    return MetaMark{.ids_issued_below = *below, .store_id = *store, .cluster_store_id = *cluster_store};
  }
  uint64_t* cluster_store;  // what mgmtd records (routing)
  uint64_t grow_per_question = 0;
  uint64_t marks = 0;
};

class OrphanSweepTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto e =
        testing::open_engine(engine_, dir_.path(), testing::small_engine_options(1ull << 30, "orphans"), registry_);
    ASSERT_TRUE(e.has_value()) << e.error();
  }
  std::unique_ptr<OrphanSweep> sweep(std::chrono::milliseconds grace, std::function<bool()> fence = {},
                                     size_t inodes_per_s = 0, uint64_t grow_per_question = 0,
                                     size_t list_page = 4096) {
    OrphanSweepOptions o;
    o.grace = grace;
    o.batch = 2;  // several questions per pass
    o.inodes_per_s = inodes_per_s;
    o.list_page = list_page;
    o.write_fence = std::move(fence);
    o.tracked_max = tracked_max_;
    auto meta = std::make_unique<FakeMeta>();
    meta->live = &live_;
    meta->below = &below_;
    meta->store = &store_;
    meta->down = &down_;
    meta->switch_store_after_exist = &switch_store_;
    meta->cluster_store = &cluster_store_;
    meta->grow_per_question = grow_per_question;
    return std::make_unique<OrphanSweep>(o, std::move(meta), std::vector<OrphanSweep::Target>{{7, engine_.get()}},
                                         registry_);
  }
  void put(uint64_t ino, uint64_t chunks) {
    auto data = pattern(5000, ino);
    for (uint64_t i = 0; i < chunks; ++i) {
      Update u = Update::write(0, data);
      u.chain_id = 3;
      ASSERT_TRUE(engine_->write(ChunkId{ino, i}, u).has_value());
    }
  }
  std::set<uint64_t> inodes_held() {
    std::set<uint64_t> out;
    auto all = engine_->list(std::nullopt, 1000);
    EXPECT_TRUE(all.has_value());
    if (all)
      for (const auto& c : *all) out.insert(c.id.inode);
    return out;
  }

  testing::TempDir dir_;
  metrics::Registry registry_;
  std::unique_ptr<ChunkEngine> engine_;
  std::set<uint64_t> live_{10, 12};
  uint64_t below_ = 100;
  uint64_t store_ = 0xabc;
  bool down_ = false;
  uint64_t switch_store_ = 0;
  uint64_t cluster_store_ = 0;  // 0: an mgmtd that does not say
  size_t tracked_max_ = 1000000;
};

TEST_F(OrphanSweepTest, ChunksOfInodesMetaNoLongerHasGoAfterTheGrace) {
  put(10, 3);   // live
  put(11, 5);   // gone
  put(12, 1);   // live
  put(13, 2);   // gone
  put(150, 2);  // not handed out yet as far as meta says: never judged
  auto s = sweep(std::chrono::milliseconds(0));
  EXPECT_EQ(s->run_once(), 7u);
  EXPECT_EQ(inodes_held(), (std::set<uint64_t>{10, 12, 150}));
  EXPECT_EQ(engine_->list(std::nullopt, 1000)->size(), 6u);
}

// At most tracked_max orphans are timed at once (after a store change every
// inode may be one); an orphan whose chunks all went is not kept, so with no
// grace the limit holds nothing back.
TEST_F(OrphanSweepTest, OrphansWhoseChunksWentAreNotKeptTimed) {
  for (uint64_t ino : {21, 22, 23, 24, 25}) put(ino, 2);
  put(10, 1);  // live
  tracked_max_ = 2;
  auto s = sweep(std::chrono::milliseconds(0));
  EXPECT_EQ(s->run_once(), 10u);
  EXPECT_EQ(inodes_held(), (std::set<uint64_t>{10}));
  EXPECT_EQ(s->orphans_timed(), 0u);
}

// With a grace, the orphans past the limit are timed once the first ones went.
TEST_F(OrphanSweepTest, OrphansPastTheTrackedLimitAreTimedInALaterPass) {
  for (uint64_t ino : {21, 22, 23}) put(ino, 1);
  tracked_max_ = 2;
  auto s = sweep(std::chrono::milliseconds(300));
  EXPECT_EQ(s->run_once(), 0u);
  EXPECT_EQ(s->orphans_timed(), 2u);
  std::this_thread::sleep_for(std::chrono::milliseconds(350));
  EXPECT_EQ(s->run_once(), 2u);  // 21 and 22, timed since the first pass; 23 timed from here
  EXPECT_EQ(inodes_held(), (std::set<uint64_t>{23}));
  EXPECT_EQ(s->orphans_timed(), 1u);
  EXPECT_EQ(s->run_once(), 0u);
  std::this_thread::sleep_for(std::chrono::milliseconds(350));
  EXPECT_EQ(s->run_once(), 1u);
  EXPECT_TRUE(inodes_held().empty());
  EXPECT_EQ(s->orphans_timed(), 0u);
}

// The limit counts the orphans timed before that a pass has not met yet:
// new orphans listed before them do not push the count past it.
TEST_F(OrphanSweepTest, TheTrackedLimitKeepsRoomForOrphansTimedBefore) {
  put(30, 1);
  put(31, 1);
  tracked_max_ = 2;
  auto s = sweep(std::chrono::milliseconds(300));
  EXPECT_EQ(s->run_once(), 0u);
  put(21, 1);  // new orphans, listed before 30 and 31
  put(22, 1);
  EXPECT_EQ(s->run_once(), 0u);
  EXPECT_EQ(s->orphans_timed(), 2u) << "30 and 31 only";
  std::this_thread::sleep_for(std::chrono::milliseconds(350));
  EXPECT_EQ(s->run_once(), 2u);
  EXPECT_EQ(inodes_held(), (std::set<uint64_t>{21, 22}));
  EXPECT_EQ(s->run_once(), 0u);  // 21 and 22 timed from here
  EXPECT_EQ(s->orphans_timed(), 2u);
  std::this_thread::sleep_for(std::chrono::milliseconds(350));
  EXPECT_EQ(s->run_once(), 2u);
  EXPECT_TRUE(inodes_held().empty());
}

TEST_F(OrphanSweepTest, NothingGoesWithinTheGraceWhileMetaIsDownOrTheFenceIsUp) {
  put(11, 2);
  auto s = sweep(std::chrono::hours(1));
  EXPECT_EQ(s->run_once(), 0u);
  EXPECT_EQ(s->run_once(), 0u);
  down_ = true;
  auto quick = sweep(std::chrono::milliseconds(0));
  EXPECT_EQ(quick->run_once(), 0u);
  down_ = false;
  below_ = 0;  // a meta that does not say which ids it handed out
  EXPECT_EQ(quick->run_once(), 0u);
  below_ = 100;
  EXPECT_EQ(sweep(std::chrono::milliseconds(0), [] { return false; })->run_once(), 0u);
  EXPECT_EQ(inodes_held(), (std::set<uint64_t>{11}));
  EXPECT_EQ(quick->run_once(), 2u);
  EXPECT_TRUE(inodes_held().empty());
}

TEST_F(OrphanSweepTest, AChunkWithAnUpdatePendingStaysForALaterPass) {
  put(11, 2);
  auto data = pattern(100, 1);  // outlives u: an Update does not own its bytes
  Update u = Update::write(0, data);
  u.chain_id = 3;
  ASSERT_TRUE(engine_->stage(ChunkId{11, 1}, 2, u).has_value());
  auto s = sweep(std::chrono::milliseconds(0));
  EXPECT_EQ(s->run_once(), 1u);
  ASSERT_TRUE(engine_->commit(ChunkId{11, 1}, 2).has_value());
  EXPECT_EQ(s->run_once(), 1u);
  EXPECT_TRUE(inodes_held().empty());
}

// A target remembers the meta store it heard first and the highest mark:
// answers from another store (a meta started on an empty store), a lower
// mark (a store restored from an older copy) or two stores in one question
// remove nothing, also after a restart, until the state file is removed.
TEST_F(OrphanSweepTest, ItStopsWhenAnotherMetaStoreAnswers) {
  put(11, 1);
  put(13, 1);
  live_ = {11, 13};
  EXPECT_EQ(sweep(std::chrono::milliseconds(0))->run_once(), 0u);  // remembers store abc, mark 100
  live_ = {};
  store_ = 0xdef;  // an empty store made in its place
  EXPECT_EQ(sweep(std::chrono::milliseconds(0))->run_once(), 0u);
  store_ = 0xabc;
  below_ = 50;  // the right store, but an older copy of it
  EXPECT_EQ(sweep(std::chrono::milliseconds(0))->run_once(), 0u);
  below_ = 100;
  switch_store_ = 0xdef;  // failed over to another store in the middle of a question
  EXPECT_EQ(sweep(std::chrono::milliseconds(0))->run_once(), 0u);
  EXPECT_EQ(inodes_held(), (std::set<uint64_t>{11, 13}));
  store_ = 0xabc;
  EXPECT_EQ(sweep(std::chrono::milliseconds(0))->run_once(), 2u);  // the store of record again
  put(15, 1);
  store_ = 0xdef;
  ASSERT_TRUE(std::filesystem::remove(std::filesystem::path(dir_.path()) / OrphanSweep::kStateFile));
  EXPECT_EQ(sweep(std::chrono::milliseconds(0))->run_once(), 1u);  // the operator said the new store is right
}

// mgmtd's record of the cluster's meta store (routing) comes first: a meta
// answering from another store judges nothing (its first contact included),
// and a new store that mgmtd records (an accepted --accept-store-change)
// restarts the sweep with it, no state file to remove by hand, the old
// store's orphans forgotten.
TEST_F(OrphanSweepTest, AStoreChangeMgmtdRecordsRestartsTheSweepWithTheNewStore) {
  put(11, 1);
  put(13, 1);
  live_ = {11, 13};
  cluster_store_ = 0xabc;
  store_ = 0xdef;  // a first contact with a store that is not the cluster's
  EXPECT_EQ(sweep(std::chrono::milliseconds(0))->run_once(), 0u);
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::path(dir_.path()) / OrphanSweep::kStateFile))
      << "nothing remembered of it";
  store_ = 0xabc;
  live_ = {13};  // 11 is an orphan of the old store: seen, within its grace
  auto slow = sweep(std::chrono::hours(1));
  EXPECT_EQ(slow->run_once(), 0u);  // remembers abc
  live_ = {};
  store_ = 0xdef;  // the new store serves before mgmtd's record says so: nothing
  EXPECT_EQ(slow->run_once(), 0u);
  cluster_store_ = 0xdef;  // mgmtd accepted the change
  below_ = (uint64_t{1} << 32) + 100;
  auto quick = sweep(std::chrono::milliseconds(0));
  EXPECT_EQ(quick->run_once(), 2u) << "the new store is the one of record: the sweep goes on with it";
  EXPECT_TRUE(inodes_held().empty());
  std::ifstream in(std::filesystem::path(dir_.path()) / OrphanSweep::kStateFile);
  std::string store;
  in >> store;
  EXPECT_EQ(store, "def");
  // Without mgmtd's word, another store still stops the sweep.
  put(15, 1);
  store_ = 0x123;
  cluster_store_ = 0;
  EXPECT_EQ(quick->run_once(), 0u);
  EXPECT_EQ(inodes_held(), (std::set<uint64_t>{15}));
}

// mgmtd records a store without an operator's word too (the first it hears
// after losing its state, one a restored mgmtd takes with
// --accept-older-state): a store whose ids were not raised past what the
// target saw (a meta on an empty data_dir) judges nothing, or every inode it
// lacks would go.
TEST_F(OrphanSweepTest, AStoreMgmtdRecordsWhoseIdsWereNotRaisedStopsTheSweep) {
  put(11, 1);
  put(13, 1);
  live_ = {11, 13};
  below_ = 5000;
  cluster_store_ = store_ = 0xabc;
  auto s = sweep(std::chrono::milliseconds(0));
  EXPECT_EQ(s->run_once(), 0u);  // remembers abc, ids below 5000
  live_ = {};
  store_ = cluster_store_ = 0xdef;  // a fresh store mgmtd recorded
  below_ = 4;
  EXPECT_EQ(s->run_once(), 0u);
  below_ = 5000 + (uint64_t{1} << 30);  // grown, yet not by a change's margin
  EXPECT_EQ(s->run_once(), 0u);
  EXPECT_EQ(inodes_held(), (std::set<uint64_t>{11, 13}));
}

// The restart forgets the old store's orphans: their grace starts again.
TEST_F(OrphanSweepTest, AStoreChangeForgetsWhenTheOldStoresOrphansWereSeen) {
  put(11, 1);
  live_ = {};
  cluster_store_ = 0xabc;
  auto s = sweep(std::chrono::milliseconds(300));
  EXPECT_EQ(s->run_once(), 0u);  // 11 seen orphaned (store abc)
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  store_ = cluster_store_ = 0xdef;
  below_ += uint64_t{1} << 32;  // an accepted change raised its ids past the old mark
  EXPECT_EQ(s->run_once(), 0u) << "a first sighting for the new store";
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  EXPECT_EQ(s->run_once(), 1u);
}

// Each pass asks about every inode a target holds: at most inodes_per_s per
// second, and a stop does not wait for the pace.
TEST_F(OrphanSweepTest, APassAsksMetaAtTheConfiguredRateAndStopsAtOnce) {
  for (uint64_t ino = 20; ino < 26; ++ino) put(ino, 1);
  live_ = {20, 21, 22, 23, 24, 25};
  auto paced = sweep(std::chrono::milliseconds(0), {}, /*inodes_per_s=*/10);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(paced->run_once(), 0u);
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(380))
      << "3 questions of 2 inodes at 10 inodes/s: the third is due 0.4 s after the first";
  auto slow = sweep(std::chrono::milliseconds(0), {}, /*inodes_per_s=*/1);
  slow->start();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto stop_at = std::chrono::steady_clock::now();
  slow->stop();
  EXPECT_LT(std::chrono::steady_clock::now() - stop_at, std::chrono::seconds(2)) << "the pass would take 4 s";
}

// The remembered mark grows with every create: its file is rewritten at most
// once per pass (the first question that saw it grow), not per question.
TEST_F(OrphanSweepTest, TheStateFileIsWrittenOncePerPass) {
  for (uint64_t ino = 20; ino < 26; ++ino) put(ino, 1);
  live_ = {20, 21, 22, 23, 24, 25};
  auto s = sweep(std::chrono::milliseconds(0), {}, 0, /*grow_per_question=*/5);
  EXPECT_EQ(s->run_once(), 0u);  // marks 100, 105, 110 for its three questions
  std::ifstream in(std::filesystem::path(dir_.path()) / OrphanSweep::kStateFile);
  std::string store;
  uint64_t mark = 0;
  in >> store >> mark;
  EXPECT_EQ(store, "abc");
  EXPECT_EQ(mark, 100u);
}

// Removing one orphan's chunks checks the lease fence per page of the
// listing: a huge orphan does not go on being removed after the lease lapsed.
TEST_F(OrphanSweepTest, AHugeOrphansRemovalStopsWhenTheFenceGoesDown) {
  put(11, 150);
  int fence_checks = 0;
  // Up for the pass's start, the judgement and the first page only.
  auto s = sweep(std::chrono::milliseconds(0), [&] { return ++fence_checks <= 3; }, 0, 0, /*list_page=*/100);
  EXPECT_EQ(s->run_once(), 100u);
  EXPECT_EQ(engine_->list(std::nullopt, 1000)->size(), 50u);
}

}  // namespace
}  // namespace weft::storage
