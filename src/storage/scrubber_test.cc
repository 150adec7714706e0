// Corruption on disk: reads, verify and the scrubber must all report it as
// Code::kCorruption, for the damaged blocks/chunk only.
#include "storage/scrubber.h"

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <thread>

#include <unistd.h>

#include "storage/test_util.h"

namespace weft::storage {
namespace {

using testing::pattern;

class CorruptionTest : public ::testing::Test {
 protected:
  void SetUp() override { open(); }
  void open() {
    auto e = testing::open_engine(engine_, dir_.path(), testing::small_engine_options(1ull << 30, "scrub"), registry_);
    ASSERT_TRUE(e.has_value()) << e.error();
  }
  // Flips one byte of the committed chunk `id` at `offset`, on disk, with the engine closed.
  void flip_byte(const ChunkId& id, uint64_t offset) {
    testing::DiskByte at = testing::committed_byte(*engine_, id, offset);
    engine_.reset();
    ASSERT_TRUE(testing::flip_bits(at, 0x01)) << at.path;
    open();
  }
  uint64_t checksum_failures() { return registry_.counter("weft_storage_checksum_failures_total", "", {{"target", "scrub"}}).value(); }

  testing::TempDir dir_;
  metrics::Registry registry_;
  std::unique_ptr<ChunkEngine> engine_;
};

TEST_F(CorruptionTest, FlippedByteIsDetectedByReadsVerifyAndScrubber) {
  std::vector<ChunkId> ids;
  std::map<ChunkId, std::vector<std::byte>> data;
  for (uint64_t i = 0; i < 10; ++i) {
    ChunkId id{100, i};
    ids.push_back(id);
    data[id] = pattern(256 * 1024, i);
    ASSERT_TRUE(engine_->write(id, Update::write(0, data[id])).has_value());
  }
  ChunkId bad = ids[4];
  flip_byte(bad, 2 * 4096 + 123);  // block 2

  auto r = engine_->read(bad, 2 * 4096, 4096);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code(), Code::kCorruption);
  EXPECT_NE(r.error().message().find("block 2"), std::string::npos) << r.error();
  EXPECT_EQ(engine_->read(bad, 0, 1 << 20).error().code(), Code::kCorruption);
  EXPECT_GE(checksum_failures(), 2u);
  // Blocks that are intact still read: a 4 KiB read checks only its block.
  auto ok = engine_->read(bad, 3 * 4096, 4096);
  ASSERT_TRUE(ok.has_value()) << ok.error();
  EXPECT_TRUE(std::equal(ok->data().begin(), ok->data().end(), data[bad].begin() + 3 * 4096));
  EXPECT_EQ(engine_->verify(bad).error().code(), Code::kCorruption);
  // A partial update cannot build on corrupt data...
  auto patch = pattern(10, 9);
  EXPECT_EQ(engine_->write(bad, Update::write(100, patch)).error().code(), Code::kCorruption);
  for (auto& id : ids) {
    if (id == bad) continue;
    auto all = engine_->read(id, 0, 1 << 20);
    ASSERT_TRUE(all.has_value()) << id << all.error();
    EXPECT_TRUE(std::equal(all->data().begin(), all->data().end(), data[id].begin(), data[id].end()));
  }

  std::vector<ChunkId> reported;
  ScrubOptions so;
  so.bytes_per_sec = 1ull << 30;
  so.on_corrupt = [&](const ChunkId& id, const Status& s) {
    reported.push_back(id);
    EXPECT_EQ(s.code(), Code::kCorruption);
  };
  Scrubber scrubber(*engine_, so, registry_);
  ScrubReport report = scrubber.run_pass();
  EXPECT_EQ(report.chunks, 10u);
  EXPECT_EQ(report.bytes, 10u * 256 * 1024);
  EXPECT_EQ(report.corrupt, std::vector<ChunkId>{bad});
  EXPECT_EQ(reported, std::vector<ChunkId>{bad});
  EXPECT_EQ(scrubber.corrupt_chunks(), std::vector<ChunkId>{bad});

  // ...but a full overwrite (e.g. a resync) heals the chunk.
  ASSERT_TRUE(engine_->write(bad, Update::replace(data[bad])).has_value());
  EXPECT_TRUE(scrubber.run_pass().corrupt.empty());
  EXPECT_TRUE(scrubber.corrupt_chunks().empty());
}

// A chunk repaired while the pass that found it still runs (the storage
// service's repair answers on another thread) is not listed when it ends, nor
// is one repaired after it.
TEST_F(CorruptionTest, ForgottenChunksAreNoLongerListed) {
  for (uint64_t i = 0; i < 4; ++i)
    ASSERT_TRUE(engine_->write(ChunkId{7, i}, Update::write(0, pattern(8192, i))).has_value());
  flip_byte(ChunkId{7, 1}, 10);
  flip_byte(ChunkId{7, 2}, 10);
  Scrubber* self = nullptr;
  ScrubOptions so;
  so.bytes_per_sec = 1ull << 30;
  so.on_corrupt = [&](const ChunkId& id, const Status&) {
    if (id == ChunkId{7, 1}) self->forget(id);
  };
  Scrubber scrubber(*engine_, so, registry_);
  self = &scrubber;
  ScrubReport report = scrubber.run_pass();
  EXPECT_EQ(report.corrupt, (std::vector<ChunkId>{ChunkId{7, 1}, ChunkId{7, 2}})) << "the report names what it found";
  EXPECT_EQ(scrubber.corrupt_chunks(), (std::vector<ChunkId>{ChunkId{7, 2}}));
  scrubber.forget(ChunkId{7, 2});
  EXPECT_TRUE(scrubber.corrupt_chunks().empty());
}

// A chunk the disk cannot give back (a media error, a slab cut short) is
// what a scrub pass is for finding too: reported, counted and logged, not
// taken for a checksum failure (a repair does not mend an I/O error).
TEST_F(CorruptionTest, AnUnreadableChunkIsReportedNotSkipped) {
  ChunkId id{9, 0};
  ASSERT_TRUE(engine_->write(id, Update::write(0, pattern(64 * 1024, 9))).has_value());
  testing::DiskByte at = testing::committed_byte(*engine_, id, 0);
  ASSERT_EQ(::truncate(at.path.c_str(), 0), 0) << at.path;
  auto v = engine_->verify(id);
  ASSERT_FALSE(v.has_value());
  ASSERT_NE(v.error().code(), Code::kCorruption) << v.error();
  int handed = 0;
  ScrubOptions so;
  so.bytes_per_sec = 1ull << 30;
  so.on_corrupt = [&](const ChunkId&, const Status&) { handed++; };
  Scrubber scrubber(*engine_, so, registry_);
  ScrubReport report = scrubber.run_pass();
  EXPECT_EQ(report.unreadable, std::vector<ChunkId>{id});
  EXPECT_TRUE(report.corrupt.empty());
  EXPECT_EQ(handed, 0);
  EXPECT_EQ(registry_.counter("weft_storage_scrub_unreadable_chunks_total", "", {{"target", "scrub"}}).value(), 1u);
}

// The pace of a pass stays right past 2^64 / 10^6 bytes (18 TB): 20 TB at
// 64 MiB/s is about 3.45 days, not a wrapped-around moment.
TEST(ScrubPace, LargePassesAreNotWrappedAround) {
  auto t = scrub_pace(20'000'000'000'000ull, 64ull << 20);
  EXPECT_NEAR(std::chrono::duration<double>(t).count(), 20e12 / (64.0 * 1024 * 1024), 1.0);
  EXPECT_EQ(scrub_pace(1 << 20, 1 << 20), std::chrono::seconds(1));
  EXPECT_EQ(scrub_pace(1, 0), scrub_pace(1, 1)) << "a rate of 0 counts as 1 byte/s";
}

TEST_F(CorruptionTest, CorruptChunkCrcIsFoundEvenWhenBlocksMatch) {
  // Damage in the unused tail of the last block is harmless: CRCs cover valid bytes only.
  ChunkId id{1, 1};
  auto d = pattern(5000, 1);
  ASSERT_TRUE(engine_->write(id, Update::write(0, d)).has_value());
  flip_byte(id, 6000);
  EXPECT_TRUE(engine_->verify(id).has_value());
  flip_byte(id, 4999);
  EXPECT_EQ(engine_->verify(id).error().code(), Code::kCorruption);
}

TEST_F(CorruptionTest, BackgroundScrubberIsRateLimitedAndFindsCorruption) {
  for (uint64_t i = 0; i < 8; ++i)
    ASSERT_TRUE(engine_->write(ChunkId{5, i}, Update::write(0, pattern(128 * 1024, i))).has_value());
  flip_byte(ChunkId{5, 6}, 77);
  std::atomic<int> found{0};
  ScrubOptions so;
  so.bytes_per_sec = 2 << 20;  // 1 MiB of chunks -> about 0.5 s per pass
  so.pass_interval = std::chrono::milliseconds(10);
  so.on_corrupt = [&](const ChunkId& id, const Status&) {
    if (id == ChunkId{5, 6}) found++;
  };
  Scrubber scrubber(*engine_, so, registry_);
  auto start = std::chrono::steady_clock::now();
  scrubber.start();
  while (scrubber.passes() < 1 && std::chrono::steady_clock::now() - start < std::chrono::seconds(10))
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  auto elapsed = std::chrono::steady_clock::now() - start;
  scrubber.stop();
  EXPECT_GE(scrubber.passes(), 1u);
  EXPECT_GE(found.load(), 1);
  EXPECT_GE(elapsed, std::chrono::milliseconds(400)) << "the rate bound was not applied";
  EXPECT_EQ(scrubber.corrupt_chunks(), (std::vector<ChunkId>{ChunkId{5, 6}}));
}

}  // namespace
}  // namespace weft::storage
