// The chunk engine gives freed slots' space back to the filesystem (the
// space pass punches them) and reports the space the filesystem really has
// (chunk_engine.h, "Space").
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <thread>

#include "common/fault.h"
#include "common/small_fs.h"
#include "storage/chunk_engine.h"
#include "storage/engine_test_fixture.h"
#include "storage/test_util.h"

namespace weft::storage {
namespace {

using testing::pattern;

std::vector<std::byte> read_bytes(ChunkEngine& e, const ChunkId& id) {
  auto r = e.read(id, 0, 1 << 20);
  EXPECT_TRUE(r.has_value()) << id << ": " << r.error();
  if (!r) return {};
  return {r->data().begin(), r->data().end()};
}

uint64_t allocated_bytes(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return 0;
  return uint64_t(st.st_blocks) * 512;
}

void expect_space_matches_index(ChunkEngine& e) {
  auto idx = e.index_bytes();
  ASSERT_TRUE(idx.has_value());
  EXPECT_EQ(e.used_bytes(), *idx);
}

class ChunkEngineSpaceTest : public testing::EngineTest {
 protected:
  ChunkEngineSpaceTest() : EngineTest("space") {}
  // Every freed slot is punched, by the test's own passes only.
  EngineOptions options() override {
    EngineOptions o = EngineTest::options();
    o.free_slack_bytes = 0;
    o.space_pass_interval_ms = 0;
    return o;
  }
  void write(const ChunkId& id, const std::vector<std::byte>& data) {
    auto w = engine_->write(id, Update::write(0, data));
    ASSERT_TRUE(w.has_value()) << id << ": " << w.error();
    model_[id] = data;
  }
  void remove(const ChunkId& id) {
    ASSERT_TRUE(engine_->remove(id).has_value()) << id;
    model_.erase(id);
  }
  void expect_model() {
    for (auto& [id, data] : model_) EXPECT_EQ(read_bytes(*engine_, id), data) << id;
    expect_space_matches_index(*engine_);
  }
  uint32_t slot_of(const ChunkId& id) { return engine_->committed_meta(id)->slot; }

  std::map<ChunkId, std::vector<std::byte>> model_;
};

// A freed slot reused before the pass keeps the new data: the pass punches
// only what is still free. A punched slot reused later is re-backed first.
TEST_F(ChunkEngineSpaceTest, AFreedThenReusedSlotKeepsItsNewDataThroughThePunchPass) {
  const std::string slab = engine_->slab_path(4);  // 64 KiB slots
  for (uint64_t i = 0; i < 4; ++i) ASSERT_NO_FATAL_FAILURE(write(ChunkId{1, i}, pattern(64 << 10, i)));
  uint32_t slot1 = slot_of(ChunkId{1, 1}), slot2 = slot_of(ChunkId{1, 2});
  uint64_t before = allocated_bytes(slab);
  ASSERT_NO_FATAL_FAILURE(remove(ChunkId{1, 1}));
  ASSERT_NO_FATAL_FAILURE(remove(ChunkId{1, 2}));
  ASSERT_NO_FATAL_FAILURE(write(ChunkId{2, 0}, pattern(64 << 10, 20)));
  EXPECT_EQ(slot_of(ChunkId{2, 0}), slot1) << "the lowest free slot is reused";

  auto punched = engine_->punch_free_slots();
  ASSERT_TRUE(punched.has_value()) << punched.error();
  EXPECT_EQ(*punched, 64u << 10) << "only the slot still free";
  EXPECT_EQ(allocated_bytes(slab), before - (64 << 10));
  EXPECT_EQ(engine_->unpunched_free_bytes(), 0u);
  ASSERT_NO_FATAL_FAILURE(expect_model());

  // The punched slot is handed out again, re-backed, and keeps what is written.
  ASSERT_NO_FATAL_FAILURE(write(ChunkId{2, 1}, pattern(64 << 10, 21)));
  EXPECT_EQ(slot_of(ChunkId{2, 1}), slot2);
  EXPECT_EQ(allocated_bytes(slab), before);
  ASSERT_TRUE(engine_->punch_free_slots().has_value());
  ASSERT_NO_FATAL_FAILURE(expect_model());

  // After a reopen every free slot in the slab is unknown: punched again, nothing live touched.
  ASSERT_NO_FATAL_FAILURE(remove(ChunkId{1, 3}));
  ASSERT_NO_FATAL_FAILURE(open());
  EXPECT_GT(engine_->unpunched_free_bytes(), 0u);
  ASSERT_TRUE(engine_->punch_free_slots().has_value());
  EXPECT_EQ(engine_->unpunched_free_bytes(), 0u);
  ASSERT_NO_FATAL_FAILURE(expect_model());
  ASSERT_NO_FATAL_FAILURE(write(ChunkId{1, 3}, pattern(64 << 10, 33)));
  ASSERT_NO_FATAL_FAILURE(open());
  ASSERT_NO_FATAL_FAILURE(expect_model());
}

// The slack: free slots up to free_slack_bytes per class keep their space
// (the lowest, which allocation takes first); the rest is punched.
TEST_F(ChunkEngineSpaceTest, TheSlackKeepsTheLowestFreeSlots) {
  auto o = options();
  o.free_slack_bytes = 2 * (64 << 10);
  ASSERT_NO_FATAL_FAILURE(open(o));
  for (uint64_t i = 0; i < 6; ++i) ASSERT_NO_FATAL_FAILURE(write(ChunkId{1, i}, pattern(64 << 10, i)));
  for (uint64_t i = 0; i < 5; ++i) ASSERT_NO_FATAL_FAILURE(remove(ChunkId{1, i}));
  auto punched = engine_->punch_free_slots();
  ASSERT_TRUE(punched.has_value());
  EXPECT_EQ(*punched, 3u * (64 << 10));
  EXPECT_EQ(engine_->unpunched_free_bytes(), 2u * (64 << 10));
  ASSERT_NO_FATAL_FAILURE(write(ChunkId{2, 0}, pattern(64 << 10, 9)));
  EXPECT_EQ(slot_of(ChunkId{2, 0}), 0u);
  ASSERT_NO_FATAL_FAILURE(expect_model());
}

// Re-backing a punched slot that the filesystem cannot back fails the write
// with kNoSpace and leaves nothing behind; the next write takes the slot.
TEST_F(ChunkEngineSpaceTest, AFailedReBackingIsNoSpaceAndChangesNothing) {
  ASSERT_NO_FATAL_FAILURE(write(ChunkId{1, 0}, pattern(64 << 10, 1)));
  ASSERT_NO_FATAL_FAILURE(write(ChunkId{1, 1}, pattern(64 << 10, 2)));
  uint32_t freed = slot_of(ChunkId{1, 0});
  ASSERT_NO_FATAL_FAILURE(remove(ChunkId{1, 0}));
  ASSERT_TRUE(engine_->punch_free_slots().has_value());
  uint64_t used = engine_->used_bytes(), allocated = allocated_bytes(engine_->slab_path(4));
  {
    fault::Scope enospc("storage.slab.back_enospc");
    if (!WEFT_FAULT("storage.slab.back_enospc")) GTEST_SKIP() << "fault injection compiled out";
    auto w = engine_->write(ChunkId{2, 0}, Update::write(0, pattern(64 << 10, 3)));
    EXPECT_EQ(enospc.triggered(), 2) << "the write re-backs the punched slot";
    ASSERT_FALSE(w.has_value());
    EXPECT_EQ(w.error().code(), Code::kNoSpace) << w.error();
  }
  EXPECT_EQ(engine_->stat(ChunkId{2, 0}).error().code(), Code::kNotFound);
  EXPECT_EQ(engine_->used_bytes(), used);
  EXPECT_EQ(engine_->unpunched_free_bytes(), 0u);
  EXPECT_EQ(allocated_bytes(engine_->slab_path(4)), allocated);
  ASSERT_NO_FATAL_FAILURE(write(ChunkId{2, 0}, pattern(64 << 10, 4)));
  EXPECT_EQ(slot_of(ChunkId{2, 0}), freed);
  ASSERT_NO_FATAL_FAILURE(expect_model());
}

// Writers, removers and readers against punch passes run back to back:
// no read ever meets a punched (zeroed) slot, no write is lost.
TEST_F(ChunkEngineSpaceTest, PunchPassesRacingWritesRemovesAndReadsLoseNothing) {
  constexpr int kThreads = 4, kChunks = 6, kRounds = 25;
  std::atomic<bool> stop{false};
  std::atomic<int> failures{0};
  std::atomic<uint64_t> punched{0};
  std::thread puncher([&] {
    while (!stop.load()) {
      auto p = engine_->punch_free_slots();
      if (!p) failures++;
      else punched += *p;
    }
  });
  std::mutex model_mu;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < kRounds; ++round) {
        for (int c = 0; c < kChunks; ++c) {
          ChunkId id{uint64_t(t + 1), uint64_t(c)};
          if ((round + c) % 5 == 4) {
            auto r = engine_->remove(id);
            if (!r && r.error().code() != Code::kNotFound) failures++;
            std::lock_guard lock(model_mu);
            model_.erase(id);
            continue;
          }
          auto data = pattern(4096 * (1 + (round * 7 + c) % 24), t * 100000 + round * 100 + c);
          if (!engine_->write(id, Update::replace(data))) failures++;
          if (read_bytes(*engine_, id) != data) failures++;
          {
            std::lock_guard lock(model_mu);
            model_[id] = data;
          }
          // Another thread's chunk, changing under the read: never corrupt.
          auto other = engine_->read(ChunkId{uint64_t((t + 1) % kThreads + 1), uint64_t(c)}, 0, 1 << 20);
          if (!other && other.error().code() != Code::kNotFound) failures++;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  stop = true;
  puncher.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_GT(punched.load(), 0u);
  ASSERT_NO_FATAL_FAILURE(expect_model());
  ASSERT_NO_FATAL_FAILURE(open());
  ASSERT_TRUE(engine_->punch_free_slots().has_value());
  ASSERT_NO_FATAL_FAILURE(expect_model());
}

// The bug this fixes: a target filled with small chunks that were then all
// removed kept their slab's space, and large chunks found the disk full for
// good. Now the space pass (here on its own thread) gives it back.
TEST(ChunkEngineSpaceFullDisk, SmallChunksRemovedGiveTheirSpaceToLargeOnes) {
  weft::testing::TempDir dir;
  auto fs = weft::testing::SmallFs::mount(dir.path(), 48 << 20, weft::testing::SmallFs::Type::kExt4);
  if (!fs) GTEST_SKIP() << "cannot mount a small filesystem here: " << fs.error();
  metrics::Registry registry;
  EngineOptions o = testing::small_engine_options(0);
  o.reserve_bytes = 8 << 20;
  o.free_slack_bytes = 0;
  o.space_pass_interval_ms = 10;
  const std::string path = (*fs)->path() + "/target";
  std::unique_ptr<ChunkEngine> engine;
  auto opened = testing::open_engine(engine, path, o, registry);
  ASSERT_TRUE(opened) << opened.error();

  constexpr int kThreads = 8;
  constexpr uint32_t kSmall = 32 << 10;
  std::vector<std::vector<ChunkId>> written(kThreads);
  std::vector<Status> ended(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (uint64_t i = 0;; ++i) {
        ChunkId id{uint64_t(t + 1), i};
        auto w = engine->write(id, Update::write(0, pattern(kSmall, i)));
        if (!w) {
          ended[t] = w.error();
          return;
        }
        written[t].push_back(id);
      }
    });
  for (auto& th : threads) th.join();
  size_t small_count = 0;
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(ended[t].code(), Code::kNoSpace) << ended[t];
    small_count += written[t].size();
  }
  const uint64_t small_bytes = small_count * kSmall;
  EXPECT_GT(small_bytes, 16u << 20);
  EXPECT_LT(engine->free_bytes(), 2u << 20) << "a full filesystem shows as full";

  threads.clear();
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (const ChunkId& id : written[t]) EXPECT_TRUE(engine->remove(id)) << id;
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(engine->used_bytes(), 0u);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (engine->unpunched_free_bytes() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(engine->unpunched_free_bytes(), 0u) << "the space pass did not run";
  std::this_thread::sleep_for(std::chrono::milliseconds(30));  // older than the guard's last reading
  EXPECT_GT(engine->free_bytes(), small_bytes * 3 / 4);

  std::map<ChunkId, std::vector<std::byte>> large;
  Result<WriteResult> w;
  for (uint64_t i = 0; i < 1000; ++i) {
    auto data = pattern(1 << 20, 1000 + i);
    w = engine->write(ChunkId{9, i}, Update::write(0, data));
    if (!w) break;
    large[ChunkId{9, i}] = std::move(data);
  }
  ASSERT_FALSE(w);
  EXPECT_EQ(w.error().code(), Code::kNoSpace) << w.error();
  EXPECT_GE(large.size() << 20, small_bytes * 3 / 4) << "large chunks did not get the small ones' space";

  opened = testing::open_engine(engine, path, o, registry);
  ASSERT_TRUE(opened) << opened.error();
  for (auto& [id, data] : large) EXPECT_EQ(read_bytes(*engine, id), data) << id;
  expect_space_matches_index(*engine);
}

// Free space is the filesystem's when that is less than the configured
// capacity leaves: several targets on one filesystem each see it, and once
// it fills from elsewhere every one of them shows full, and a write that
// needs the filesystem (growth, re-backing a punched slot) is kNoSpace.
TEST(ChunkEngineSpaceFullDisk, FreeSpaceFollowsTheFilesystemOnEveryTarget) {
  weft::testing::TempDir dir;
  auto fs = weft::testing::SmallFs::mount(dir.path(), 64 << 20, weft::testing::SmallFs::Type::kExt4);
  if (!fs) GTEST_SKIP() << "cannot mount a small filesystem here: " << fs.error();
  metrics::Registry registry;
  EngineOptions o = testing::small_engine_options(1ull << 30, "configured");  // more than the filesystem has
  o.reserve_bytes = 8 << 20;
  o.free_slack_bytes = 0;
  o.space_pass_interval_ms = 0;
  auto a = ChunkEngine::open((*fs)->path() + "/a", o, registry);
  ASSERT_TRUE(a) << a.error();
  o.capacity_bytes = 0;
  o.target_id = "auto";
  auto b = ChunkEngine::open((*fs)->path() + "/b", o, registry);
  ASSERT_TRUE(b) << b.error();
  std::vector<ChunkEngine*> engines{a->get(), b->get()};

  for (ChunkEngine* e : engines) {
    auto w = e->write(ChunkId{1, 0}, Update::write(0, pattern(1 << 20, 1)));
    ASSERT_TRUE(w) << w.error();
    ASSERT_TRUE(e->write(ChunkId{1, 1}, Update::write(0, pattern(1 << 20, 2))));
    ASSERT_TRUE(e->remove(ChunkId{1, 0}));
    ASSERT_TRUE(e->punch_free_slots());
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  uint64_t headroom = (*fs)->available_bytes() - o.reserve_bytes;
  for (ChunkEngine* e : engines) {
    EXPECT_LE(e->free_bytes(), headroom + (1 << 20)) << e->options().target_id;
    EXPECT_GE(e->free_bytes() + (1 << 20), headroom) << e->options().target_id;
    EXPECT_EQ(e->capacity_bytes(), e->used_bytes() + e->free_bytes());
  }

  ASSERT_TRUE((*fs)->fill_until(o.reserve_bytes / 2));
  std::this_thread::sleep_for(std::chrono::milliseconds(30));  // older than the guards' last readings
  for (ChunkEngine* e : engines) {
    SCOPED_TRACE(e->options().target_id);
    EXPECT_EQ(e->free_bytes(), 0u);
    EXPECT_EQ(e->capacity_bytes(), e->used_bytes());
    uint64_t used = e->used_bytes();
    // Slot 0 was punched: re-backing it needs the filesystem.
    auto refused = e->write(ChunkId{2, 0}, Update::write(0, pattern(1 << 20, 3)));
    ASSERT_FALSE(refused);
    EXPECT_EQ(refused.error().code(), Code::kNoSpace) << refused.error();
    EXPECT_EQ(e->used_bytes(), used);
    EXPECT_EQ(read_bytes(*e, ChunkId{1, 1}), pattern(1 << 20, 2));
  }
  (*fs)->unfill();
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  for (ChunkEngine* e : engines) {
    auto w = e->write(ChunkId{2, 0}, Update::write(0, pattern(1 << 20, 3)));
    ASSERT_TRUE(w) << w.error();
    EXPECT_EQ(e->committed_meta(ChunkId{2, 0})->slot, 0u);
    EXPECT_EQ(read_bytes(*e, ChunkId{2, 0}), pattern(1 << 20, 3));
    expect_space_matches_index(*e);
  }
}

}  // namespace
}  // namespace weft::storage
