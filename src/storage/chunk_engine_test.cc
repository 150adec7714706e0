#include "storage/chunk_engine.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <cstring>
#include <filesystem>
#include <thread>

#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include "common/crc32c.h"
#include "common/fault.h"
#include "common/small_fs.h"
#include "storage/engine_test_fixture.h"
#include "storage/flush_scope.h"
#include "storage/scrubber.h"
#include "storage/test_util.h"

namespace weft::storage {
namespace {

using testing::pattern;

std::vector<std::byte> bytes_of(const ReadResult& r) { return {r.data().begin(), r.data().end()}; }

// No reserve: whatever /tmp has free (the full-disk test below sets one).
class ChunkEngineTest : public testing::EngineTest {
 protected:
  ChunkEngineTest() : EngineTest("test") {}
  std::vector<std::byte> read_all(const ChunkId& id) {
    auto r = engine_->read(id, 0, 1 << 20);
    EXPECT_TRUE(r.has_value()) << r.error();
    return r ? bytes_of(*r) : std::vector<std::byte>{};
  }
  // Reopens as after a crash: the last group's restart-check keys stay
  // (a clean close drops them). The restart tests need one-flush groups,
  // which this test directory's filesystem must allow.
  void reopen_after_crash() {
    crash();
    if (!IsSkipped()) open();
  }
  // Closes as a crash would (see above), without reopening.
  void crash() {
    if (!one_fdatasync_flushes_all(dir_.path())) GTEST_SKIP() << dir_.path() << ": no one-flush groups here";
    fault::Scope keep("storage.index.keep_restart_keys");
    engine_.reset();
    if (keep.triggered() == 0) GTEST_SKIP() << "fault injection compiled out";
  }
  // A write whose group a power cut is taken to interrupt before its flush
  // returned: its restart-check keys stay (a durable group drops them).
  Result<WriteResult> write_unflushed(const ChunkId& id, const Update& u) {
    fault::Scope keep("storage.index.keep_restart_keys");
    return engine_->write(id, u);
  }
  void expect_space_matches_index() {
    auto idx = engine_->index_bytes();
    ASSERT_TRUE(idx.has_value());
    EXPECT_EQ(engine_->used_bytes(), *idx);
  }
};

// The data id is drawn once and kept in the index: the same across reopens
// (and what ensure_data_id reads before an open), another one for a target
// whose directory was emptied (mgmtd then knows its data is gone).
TEST_F(ChunkEngineTest, TheDataIdStaysWithTheIndexAndChangesWhenItIsLost) {
  const uint64_t id = engine_->data_id();
  EXPECT_NE(id, 0u);
  ASSERT_TRUE(engine_->write(ChunkId{1, 1}, Update::write(0, pattern(4096, 1))).has_value());
  engine_.reset();
  auto before_open = ChunkEngine::ensure_data_id(dir_.path());
  ASSERT_TRUE(before_open.has_value()) << before_open.error();
  EXPECT_EQ(*before_open, id);
  open();
  EXPECT_EQ(engine_->data_id(), id);
  engine_.reset();
  for (const auto& entry : std::filesystem::directory_iterator(dir_.path())) std::filesystem::remove_all(entry.path());
  auto fresh = ChunkEngine::ensure_data_id(dir_.path());
  ASSERT_TRUE(fresh.has_value()) << fresh.error();
  EXPECT_NE(*fresh, id);
  open();
  EXPECT_EQ(engine_->data_id(), *fresh) << "the engine opens the index ensure_data_id created";
}

TEST_F(ChunkEngineTest, FullWriteReadRoundTrip) {
  ChunkId id{42, 7};
  auto data = pattern(100000, 1);
  auto w = engine_->write(id, Update::write(0, data));
  ASSERT_TRUE(w.has_value()) << w.error();
  EXPECT_EQ(w->version, 1u);
  EXPECT_EQ(w->length, 100000u);
  EXPECT_EQ(w->chunk_crc, crc32c(data.data(), data.size()));
  EXPECT_EQ(read_all(id), data);
  auto r = engine_->read(id, 5000, 3);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(bytes_of(*r), std::vector<std::byte>(data.begin() + 5000, data.begin() + 5003));
  EXPECT_EQ(r->version, 1u);
  EXPECT_EQ(r->chunk_length, 100000u);
  EXPECT_FALSE(r->data_crc) << "a partial read leaves the reply's CRC to the caller";
  // A read of the whole chunk (also one asking for more) carries its CRC, checked in one pass.
  for (uint32_t len : {100000u, 1u << 20}) {
    auto whole = engine_->read(id, 0, len);
    ASSERT_TRUE(whole.has_value()) << whole.error();
    EXPECT_EQ(whole->data_length, 100000u);
    ASSERT_TRUE(whole->data_crc);
    EXPECT_EQ(*whole->data_crc, crc32c(data.data(), data.size()));
  }
  auto info = engine_->stat(id);
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->version, 1u);
  EXPECT_EQ(info->chunk_crc, w->chunk_crc);
  EXPECT_EQ(engine_->used_bytes(), 128u * 1024);  // 100000 bytes -> 128 KiB class
}

TEST_F(ChunkEngineTest, PartialWritesAndRangeReads) {
  ChunkId id{1, 0};
  std::vector<std::byte> model = pattern(20000, 2);
  ASSERT_TRUE(engine_->write(id, Update::write(0, model)).has_value());
  auto patch = pattern(5000, 3);
  ASSERT_TRUE(engine_->write(id, Update::write(3000, patch)).has_value());
  std::copy(patch.begin(), patch.end(), model.begin() + 3000);
  auto tail = pattern(100, 4);  // past the end: the gap reads as zeros
  ASSERT_TRUE(engine_->write(id, Update::write(30000, tail)).has_value());
  model.resize(30100, std::byte{0});
  std::copy(tail.begin(), tail.end(), model.begin() + 30000);
  EXPECT_EQ(read_all(id), model);
  for (auto [off, len] : std::vector<std::pair<uint32_t, uint32_t>>{{0, 1}, {4095, 2}, {8191, 4097}, {29999, 500}}) {
    auto r = engine_->read(id, off, len);
    ASSERT_TRUE(r.has_value());
    size_t end = std::min<size_t>(off + len, model.size());
    EXPECT_EQ(bytes_of(*r), std::vector<std::byte>(model.begin() + off, model.begin() + end)) << off;
  }
  auto past = engine_->read(id, 40000, 100);
  ASSERT_TRUE(past.has_value());
  EXPECT_EQ(past->data_length, 0u);
  EXPECT_EQ(engine_->stat(id)->version, 3u);
  expect_space_matches_index();
}

TEST_F(ChunkEngineTest, TruncateShrinksAndExtends) {
  ChunkId id{1, 1};
  auto data = pattern(50000, 5);
  ASSERT_TRUE(engine_->write(id, Update::write(0, data)).has_value());
  auto t = engine_->write(id, Update::truncate(5000));
  ASSERT_TRUE(t.has_value()) << t.error();
  EXPECT_EQ(read_all(id), std::vector<std::byte>(data.begin(), data.begin() + 5000));
  EXPECT_EQ(engine_->stat(id)->size_class, 1u);
  ASSERT_TRUE(engine_->write(id, Update::truncate(9000)).has_value());
  auto expect = std::vector<std::byte>(data.begin(), data.begin() + 5000);
  expect.resize(9000, std::byte{0});
  EXPECT_EQ(read_all(id), expect);
  ASSERT_TRUE(engine_->write(id, Update::truncate(0)).has_value());
  EXPECT_TRUE(read_all(id).empty());
  EXPECT_EQ(engine_->stat(id)->length, 0u);
  expect_space_matches_index();
}

TEST_F(ChunkEngineTest, RemoveAndUnknownChunks) {
  ChunkId id{9, 9};
  EXPECT_EQ(engine_->read(id, 0, 10).error().code(), Code::kNotFound);
  EXPECT_EQ(engine_->stat(id).error().code(), Code::kNotFound);
  EXPECT_EQ(engine_->remove(id).error().code(), Code::kNotFound);
  EXPECT_EQ(engine_->verify(id).error().code(), Code::kNotFound);
  ASSERT_TRUE(engine_->write(id, Update::write(0, pattern(10, 1))).has_value());
  ASSERT_TRUE(engine_->remove(id).has_value());
  EXPECT_EQ(engine_->read(id, 0, 10).error().code(), Code::kNotFound);
  EXPECT_EQ(engine_->used_bytes(), 0u);
  auto again = engine_->write(id, Update::write(0, pattern(10, 1)));
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->version, 1u);  // a removed chunk starts over
}

TEST_F(ChunkEngineTest, BadInputIsRejectedWithClearErrors) {
  ChunkId id{3, 3};
  auto big = pattern((1 << 20) + 1, 1);
  auto r = engine_->write(id, Update::write(0, big));
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code(), Code::kInvalidArgument);
  EXPECT_NE(r.error().message().find("past chunk size"), std::string::npos) << r.error();
  auto small = pattern(10, 1);
  EXPECT_EQ(engine_->write(id, Update::write((1 << 20) + 1, small)).error().code(), Code::kInvalidArgument);
  EXPECT_EQ(engine_->write(id, Update::write((1 << 20) - 5, small)).error().code(), Code::kInvalidArgument);
  EXPECT_EQ(engine_->write(id, Update::write(4090, small, 4096)).error().code(), Code::kInvalidArgument);
  EXPECT_EQ(engine_->write(id, Update::write(0, small, 2 << 20)).error().code(), Code::kInvalidArgument);
  EXPECT_EQ(engine_->write(id, Update::truncate((1 << 20) + 1)).error().code(), Code::kInvalidArgument);
  EXPECT_EQ(engine_->read(id, (1 << 20) + 1, 1).error().code(), Code::kInvalidArgument);
  EXPECT_EQ(engine_->used_bytes(), 0u);  // nothing leaked
  EXPECT_TRUE(engine_->write(id, Update::write((1 << 20) - 10, small)).has_value());  // exactly to the end
}

// A write of no bytes would change nothing but the version (and, past the
// chunk's end, zero-fill up to its offset): refused, the chunk untouched.
// (Clients never send one; a file grows by meta's size alone, the bytes
// between read as zeros.)
TEST_F(ChunkEngineTest, ZeroLengthWriteIsRefusedAndChangesNothing) {
  ChunkId id{4, 4};
  ASSERT_TRUE(engine_->write(id, Update::write(0, pattern(100, 1))).has_value());
  auto r = engine_->write(id, Update::write(5000, {}));
  ASSERT_FALSE(r.has_value()) << "version " << r->version << ", length " << r->length;
  EXPECT_EQ(r.error().code(), Code::kInvalidArgument);
  EXPECT_EQ(engine_->stat(id)->version, 1u);
  EXPECT_EQ(engine_->stat(id)->length, 100u);
  EXPECT_EQ(engine_->stage(id, 2, Update::write(0, {})).error().code(), Code::kInvalidArgument);
  EXPECT_EQ(engine_->stat(id)->pending_version, 0u);
  ChunkId absent{4, 5};
  EXPECT_EQ(engine_->write(absent, Update::write(0, {})).error().code(), Code::kInvalidArgument);
  EXPECT_EQ(engine_->stat(absent).error().code(), Code::kNotFound);
  EXPECT_TRUE(engine_->write(absent, Update::replace({})).has_value()) << "an empty chunk is copied as a replace";
}

// An empty chunk (truncated to 0, or an empty replacement) occupies no slot:
// its record is durable with the index's sync, while a slot for it would lie
// in slab growth that nothing syncs (no slot write), which a power cut may
// lose: the next open then found the index using a slot past the slab's end
// and refused the target.
TEST_F(ChunkEngineTest, AnEmptyChunkHoldsNoSlot) {
  const ChunkId data_chunk{4, 6}, truncated{4, 7}, replaced{4, 8}, emptied{4, 9};
  ASSERT_TRUE(engine_->write(data_chunk, Update::write(0, pattern(8192, 1))));
  ASSERT_TRUE(engine_->write(truncated, Update::truncate(0)));
  ASSERT_TRUE(engine_->write(replaced, Update::replace({})));
  ASSERT_TRUE(engine_->write(emptied, Update::write(0, pattern(100, 2))));
  ASSERT_TRUE(engine_->write(emptied, Update::truncate(0)));
  EXPECT_EQ(engine_->used_bytes(), 8192u);
  expect_space_matches_index();
  // What a power cut may leave of the 4 KiB class: its slab file's growth
  // was never synced (no slot of it was written).
  engine_.reset();
  const std::string slab0 = dir_.path() + "/slab_00_4k.dat";
  if (std::filesystem::exists(slab0)) {
    ASSERT_EQ(::truncate(slab0.c_str(), 0), 0);
  }
  ASSERT_NO_FATAL_FAILURE(open());
  for (const ChunkId& id : {truncated, replaced, emptied}) {
    auto r = engine_->read(id, 0, 4096);
    ASSERT_TRUE(r.has_value()) << id << ": " << r.error();
    EXPECT_EQ(r->data_length, 0u);
    EXPECT_TRUE(engine_->verify(id).has_value()) << id;
  }
  EXPECT_EQ(engine_->used_bytes(), 8192u);
  expect_space_matches_index();
  // They grow, shrink and go like any chunk.
  auto grown = pattern(3000, 3);
  ASSERT_TRUE(engine_->write(truncated, Update::write(0, grown)));
  EXPECT_EQ(read_all(truncated), grown);
  ASSERT_TRUE(engine_->stage(replaced, 2, Update::write(0, grown)));
  ASSERT_TRUE(engine_->abort(replaced, 2));
  ASSERT_TRUE(engine_->remove(emptied));
  ASSERT_TRUE(engine_->write(emptied, Update::replace({})));
  ASSERT_TRUE(engine_->stage(emptied, 2, Update::truncate(0)));
  ASSERT_TRUE(engine_->remove(emptied));
  EXPECT_EQ(engine_->used_bytes(), 8192u + 4096u);
  expect_space_matches_index();
  ASSERT_NO_FATAL_FAILURE(open());
  EXPECT_EQ(read_all(truncated), grown);
  expect_space_matches_index();
}

TEST_F(ChunkEngineTest, StageCommitVersions) {
  ChunkId id{5, 0};
  auto v1 = pattern(8000, 1), v2 = pattern(8000, 2);
  ASSERT_TRUE(engine_->write(id, Update::write(0, v1)).has_value());
  EXPECT_EQ(engine_->stage(id, 1, Update::write(0, v2)).error().code(), Code::kVersionMismatch);
  EXPECT_EQ(engine_->stage(id, 3, Update::write(0, v2)).error().code(), Code::kVersionMismatch);
  auto s = engine_->stage(id, 2, Update::write(0, v2));
  ASSERT_TRUE(s.has_value()) << s.error();
  // The committed version stays readable while v2 is pending.
  auto r = engine_->read(id, 0, 8000);
  EXPECT_EQ(r->version, 1u);
  EXPECT_EQ(bytes_of(*r), v1);
  EXPECT_EQ(engine_->stat(id)->pending_version, 2u);
  EXPECT_EQ(engine_->commit(id, 3).error().code(), Code::kVersionMismatch);
  auto c = engine_->commit(id, 2);
  ASSERT_TRUE(c.has_value()) << c.error();
  r = engine_->read(id, 0, 8000);
  EXPECT_EQ(r->version, 2u);
  EXPECT_EQ(bytes_of(*r), v2);
  EXPECT_TRUE(engine_->commit(id, 2).has_value());  // idempotent retry
  EXPECT_EQ(engine_->commit(id, 1).error().code(), Code::kVersionMismatch);
  // Restaging replaces the pending slot; abort frees it.
  ASSERT_TRUE(engine_->stage(id, 3, Update::write(0, v1)).has_value());
  ASSERT_TRUE(engine_->stage(id, 3, Update::write(0, v1)).has_value());
  EXPECT_EQ(engine_->used_bytes(), 2u * 8192);
  ASSERT_TRUE(engine_->abort(id, 3).has_value());
  EXPECT_EQ(engine_->used_bytes(), 8192u);
  // A resync replacement may carry any version.
  ASSERT_TRUE(engine_->stage(id, 10, Update::replace(v1)).has_value());
  ASSERT_TRUE(engine_->commit(id, 10).has_value());
  EXPECT_EQ(engine_->stat(id)->version, 10u);
  EXPECT_EQ(read_all(id), v1);
  expect_space_matches_index();
}

TEST_F(ChunkEngineTest, GrowingChunkMovesToLargerClassAndFreesOldSlot) {
  ChunkId id{6, 0};
  auto small = pattern(4096, 1);
  ASSERT_TRUE(engine_->write(id, Update::write(0, small)).has_value());
  ChunkMeta before = *engine_->committed_meta(id);
  EXPECT_EQ(before.size_class, 0u);
  auto more = pattern((1 << 20) - 4096, 2);
  ASSERT_TRUE(engine_->write(id, Update::write(4096, more)).has_value());
  ChunkMeta after = *engine_->committed_meta(id);
  EXPECT_EQ(after.size_class, 8u);
  EXPECT_EQ(engine_->used_bytes(), 1u << 20);  // the 4 KiB slot was freed
  auto all = read_all(id);
  ASSERT_EQ(all.size(), 1u << 20);
  EXPECT_TRUE(std::equal(small.begin(), small.end(), all.begin()));
  EXPECT_TRUE(std::equal(more.begin(), more.end(), all.begin() + 4096));
  // The freed 4 KiB slot is reused by the next small chunk.
  ASSERT_TRUE(engine_->write(ChunkId{6, 1}, Update::write(0, small)).has_value());
  EXPECT_EQ(engine_->committed_meta(ChunkId{6, 1})->slot, before.slot);
}

TEST_F(ChunkEngineTest, ListInIdOrderFromStartKey) {
  std::vector<ChunkId> ids{{2, 1}, {1, 5}, {1, 0}, {3, 0}, {2, 0}, {1, 300}};
  for (auto& id : ids) ASSERT_TRUE(engine_->write(id, Update::write(0, pattern(100, id.index))).has_value());
  auto all = engine_->list(std::nullopt, 100);
  ASSERT_TRUE(all.has_value());
  std::vector<ChunkId> got;
  for (auto& c : *all) got.push_back(c.id);
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(got, ids);
  auto page = engine_->list(ChunkId{1, 6}, 2);
  ASSERT_EQ(page->size(), 2u);
  EXPECT_EQ((*page)[0].id, (ChunkId{1, 300}));
  EXPECT_EQ((*page)[1].id, (ChunkId{2, 0}));
  EXPECT_EQ((*page)[0].length, 100u);
  EXPECT_EQ((*page)[0].version, 1u);
}

// A full page that ends with the largest id {2^64-1, 2^64-1} has no next
// page: paging through the index (index_bytes() pages by 1024, the scrubber
// by 256) stops there instead of wrapping around to {0, 0} and starting over.
TEST_F(ChunkEngineTest, ListingsStopAtTheLargestChunkId) {
  EXPECT_EQ((ChunkId{5, UINT64_MAX}.successor()), (ChunkId{6, 0}));
  EXPECT_EQ((ChunkId{UINT64_MAX, UINT64_MAX}.successor()), std::nullopt);
  constexpr int kThreads = 8, kChunks = 1024;  // the largest id is the last of the fourth scrubber page
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = t; i < kChunks; i += kThreads) {
        ChunkId id = i == kChunks - 1 ? ChunkId{UINT64_MAX, UINT64_MAX} : ChunkId{1, uint64_t(i)};
        if (!engine_->write(id, Update::write(0, pattern(100, uint64_t(i))))) failures++;
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_EQ(failures.load(), 0);
  expect_space_matches_index();
  ScrubOptions so;
  so.bytes_per_sec = 1ull << 40;
  Scrubber scrubber(*engine_, so, registry_);
  ScrubReport report = scrubber.run_pass();
  EXPECT_FALSE(report.interrupted);
  EXPECT_EQ(report.chunks, uint64_t(kChunks)) << "each chunk is scrubbed once per pass";
}

std::vector<ChunkId> ids_of(const Result<std::vector<ChunkInfo>>& list) {
  std::vector<ChunkId> out;
  if (list) {
    for (auto& c : *list) out.push_back(c.id);
  }
  return out;
}

Update in_chain(Update u, uint32_t chain) {
  u.chain_id = chain;
  return u;
}

TEST_F(ChunkEngineTest, ListingsStopAtTheirEnd) {
  auto data = pattern(100, 1);
  for (ChunkId id : {ChunkId{5, 0}, ChunkId{5, 3}, ChunkId{6, 0}, ChunkId{7, 1}})
    ASSERT_TRUE(engine_->write(id, in_chain(Update::write(0, data), 1)).has_value());
  ASSERT_TRUE(engine_->write(ChunkId{5, 2}, Update::write(0, data)).has_value());  // unknown chain
  ASSERT_TRUE(engine_->write(ChunkId{8, 0}, in_chain(Update::write(0, data), 2)).has_value());
  // One inode's chunks (RemoveRange's listing): the unknown-chain one too, nothing of inode 6 on.
  EXPECT_EQ(ids_of(engine_->list_chain(1, ChunkId{5, 0}, 100, ChunkId::past_inode(5))),
            (std::vector<ChunkId>{{5, 0}, {5, 2}, {5, 3}}));
  EXPECT_EQ(ids_of(engine_->list_chain(1, ChunkId{5, 1}, 100, ChunkId{5, 3})), (std::vector<ChunkId>{{5, 2}}));
  EXPECT_EQ(ids_of(engine_->list_chain(1, ChunkId{6, 0}, 100, ChunkId::past_inode(6))),
            (std::vector<ChunkId>{{6, 0}}));
  EXPECT_TRUE(engine_->list_chain(1, ChunkId{4, 0}, 100, ChunkId::past_inode(4))->empty());
  EXPECT_EQ(ids_of(engine_->list_chain(2, ChunkId{5, 0}, 100, ChunkId::past_inode(7))),
            (std::vector<ChunkId>{{5, 2}}));  // chain 2 has inode 8 only: its listing stops before
  EXPECT_EQ(ids_of(engine_->list(ChunkId{5, 1}, 100, ChunkId::past_inode(5))),
            (std::vector<ChunkId>{{5, 2}, {5, 3}}));
  EXPECT_EQ(ids_of(engine_->list(ChunkId{7, 0}, 100, ChunkId::past_inode(8))),
            (std::vector<ChunkId>{{7, 1}, {8, 0}}));
  // count_max still applies, and no end lists on.
  EXPECT_EQ(ids_of(engine_->list_chain(1, ChunkId{5, 0}, 2, ChunkId::past_inode(5))),
            (std::vector<ChunkId>{{5, 0}, {5, 2}}));
  EXPECT_EQ(engine_->list_chain(1, ChunkId{5, 0}, 100)->size(), 5u);
  EXPECT_EQ(ChunkId::past_inode(UINT64_MAX), std::nullopt);
}

TEST_F(ChunkEngineTest, ChainIsRecordedAndListedPerChain) {
  auto data = pattern(100, 1);
  for (uint64_t i = 0; i < 6; ++i)
    ASSERT_TRUE(engine_->write(ChunkId{i, 0}, in_chain(Update::write(0, data), 1 + i % 2)).has_value());
  // An update without a chain keeps the chunk's; a truncate in chain 1 keeps it in chain 1.
  ASSERT_TRUE(engine_->write(ChunkId{0, 0}, Update::write(0, data)).has_value());
  ASSERT_TRUE(engine_->write(ChunkId{2, 0}, in_chain(Update::truncate(10), 1)).has_value());
  EXPECT_EQ(engine_->stat(ChunkId{0, 0})->chain_id, 1u);
  EXPECT_EQ(ids_of(engine_->list_chain(1, std::nullopt, 100)),
            (std::vector<ChunkId>{{0, 0}, {2, 0}, {4, 0}}));
  EXPECT_EQ(ids_of(engine_->list_chain(2, std::nullopt, 100)),
            (std::vector<ChunkId>{{1, 0}, {3, 0}, {5, 0}}));
  EXPECT_EQ(ids_of(engine_->list_chain(2, ChunkId{1, 1}, 1)), (std::vector<ChunkId>{{3, 0}}));
  EXPECT_TRUE(engine_->list_chain(3, std::nullopt, 100)->empty());
  // A chunk rewritten through another chain moves; a removed one leaves its chain.
  ASSERT_TRUE(engine_->write(ChunkId{1, 0}, in_chain(Update::write(0, data), 1)).has_value());
  ASSERT_TRUE(engine_->remove(ChunkId{4, 0}).has_value());
  // Staged but not committed: still listed under its old chain.
  ASSERT_TRUE(engine_->stage(ChunkId{3, 0}, 2, in_chain(Update::write(0, data), 1)).has_value());
  auto expect_lists = [&] {
    EXPECT_EQ(ids_of(engine_->list_chain(1, std::nullopt, 100)), (std::vector<ChunkId>{{0, 0}, {1, 0}, {2, 0}}));
    EXPECT_EQ(ids_of(engine_->list_chain(2, std::nullopt, 100)), (std::vector<ChunkId>{{3, 0}, {5, 0}}));
    auto all = engine_->list(std::nullopt, 100);
    ASSERT_TRUE(all);
    ASSERT_EQ(all->size(), 5u);
    EXPECT_EQ((*all)[1].chain_id, 1u);
    EXPECT_EQ((*all)[3].chain_id, 2u);
  };
  expect_lists();
  open();  // the records and the per-chain index survive a restart
  expect_lists();
  expect_space_matches_index();
}

// chains() names each chain with chunks once (unknown chain left out), also a
// chain with the largest id; remove_if_in_chain removes a chunk only while its
// record names that chain and no update of it is pending.
TEST_F(ChunkEngineTest, ChainsAndRemovalOfOneChainsChunks) {
  auto data = pattern(100, 1);
  EXPECT_TRUE(engine_->chains()->empty());
  ASSERT_TRUE(engine_->write(ChunkId{1, 0}, Update::write(0, data)).has_value());  // unknown chain
  EXPECT_TRUE(engine_->chains()->empty());
  for (uint64_t i = 0; i < 4; ++i)
    ASSERT_TRUE(engine_->write(ChunkId{2, i}, in_chain(Update::write(0, data), 7)).has_value());
  ASSERT_TRUE(engine_->write(ChunkId{3, 0}, in_chain(Update::write(0, data), 3)).has_value());
  ASSERT_TRUE(engine_->write(ChunkId{4, 0}, in_chain(Update::write(0, data), UINT32_MAX)).has_value());
  EXPECT_EQ(*engine_->chains(), (std::vector<uint32_t>{3, 7, UINT32_MAX}));

  uint64_t used = engine_->used_bytes();
  EXPECT_FALSE(*engine_->remove_if_in_chain(ChunkId{1, 0}, 7)) << "unknown chain: not chain 7's";
  EXPECT_FALSE(*engine_->remove_if_in_chain(ChunkId{3, 0}, 7)) << "chain 3's";
  EXPECT_FALSE(*engine_->remove_if_in_chain(ChunkId{9, 0}, 7)) << "absent";
  ASSERT_TRUE(engine_->stage(ChunkId{2, 1}, 2, in_chain(Update::write(0, data), 7)).has_value());
  EXPECT_FALSE(*engine_->remove_if_in_chain(ChunkId{2, 1}, 7)) << "an update is pending";
  EXPECT_TRUE(*engine_->remove_if_in_chain(ChunkId{2, 0}, 7));
  EXPECT_TRUE(*engine_->remove_if_in_chain(ChunkId{2, 2}, 7));
  EXPECT_TRUE(*engine_->remove_if_in_chain(ChunkId{2, 3}, 7));
  EXPECT_LT(engine_->used_bytes(), used);
  EXPECT_EQ(engine_->stat(ChunkId{2, 0}).error().code(), Code::kNotFound);
  EXPECT_EQ(ids_of(engine_->list_chain(7, std::nullopt, 100)), (std::vector<ChunkId>{{1, 0}, {2, 1}}));
  ASSERT_TRUE(engine_->commit(ChunkId{2, 1}, 2).has_value());
  EXPECT_TRUE(*engine_->remove_if_in_chain(ChunkId{2, 1}, 7));
  EXPECT_EQ(*engine_->chains(), (std::vector<uint32_t>{3, UINT32_MAX}));
  open();  // the removals were durable
  EXPECT_EQ(*engine_->chains(), (std::vector<uint32_t>{3, UINT32_MAX}));
  EXPECT_EQ(ids_of(engine_->list(std::nullopt, 100)), (std::vector<ChunkId>{{1, 0}, {3, 0}, {4, 0}}));
}

// Rewrites the index as format 1 wrote it: records without a chain, no
// per-chain index, format "weft-chunk-engine-1".
void downgrade_to_format1(const std::string& dir) {
  rocksdb::DB* raw = nullptr;
  ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), dir + "/index", &raw).ok());
  std::unique_ptr<rocksdb::DB> db(raw);
  rocksdb::WriteBatch batch;
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    std::string key = it->key().ToString();
    if (key[0] == 'k') batch.Delete(key);
    if (key[0] != 'c') continue;
    auto m = ChunkMeta::decode(it->value().ToString());
    ASSERT_TRUE(m);
    std::string v = m->encode();
    v.erase(24, 4);  // the chain id field
    v[0] = 1;
    v.resize(v.size() - 4);
    uint32_t crc = crc32c(v.data(), v.size());
    for (int i = 0; i < 4; ++i) v.push_back(static_cast<char>(crc >> (8 * i)));
    batch.Put(key, v);
  }
  batch.Put("mformat", "weft-chunk-engine-1");
  ASSERT_TRUE(db->Write(rocksdb::WriteOptions(), &batch).ok());
}

TEST_F(ChunkEngineTest, Format1IndexIsMigratedWithChainUnknown) {
  auto data = pattern(5000, 3);
  for (uint64_t i = 0; i < 4; ++i)
    ASSERT_TRUE(engine_->write(ChunkId{i, 0}, in_chain(Update::write(0, data), 7)).has_value());
  engine_.reset();
  ASSERT_NO_FATAL_FAILURE(downgrade_to_format1(dir_.path()));
  open();
  for (uint64_t i = 0; i < 4; ++i) {
    EXPECT_EQ(read_all(ChunkId{i, 0}), data);
    EXPECT_EQ(engine_->stat(ChunkId{i, 0})->chain_id, kChainUnknown);
  }
  // Unknown-chain chunks may belong to any chain: every chain lists them.
  EXPECT_EQ(engine_->list_chain(7, std::nullopt, 100)->size(), 4u);
  EXPECT_EQ(engine_->list_chain(8, std::nullopt, 100)->size(), 4u);
  // Rewritten through chain 7, a chunk is known to be chain 7's from then on.
  ASSERT_TRUE(engine_->write(ChunkId{1, 0}, in_chain(Update::write(0, data), 7)).has_value());
  EXPECT_EQ(ids_of(engine_->list_chain(8, std::nullopt, 100)), (std::vector<ChunkId>{{0, 0}, {2, 0}, {3, 0}}));
  open();  // migrated once; still the same after another restart
  EXPECT_EQ(engine_->stat(ChunkId{1, 0})->chain_id, 7u);
  EXPECT_EQ(ids_of(engine_->list_chain(7, std::nullopt, 100)).size(), 4u);
  EXPECT_EQ(ids_of(engine_->list_chain(8, std::nullopt, 100)).size(), 3u);
  expect_space_matches_index();
}

TEST_F(ChunkEngineTest, ReopenKeepsDataAndRebuildsAllocation) {
  std::map<ChunkId, std::vector<std::byte>> model;
  for (uint64_t i = 0; i < 40; ++i) {
    ChunkId id{i % 4, i};
    model[id] = pattern(1000 + i * 7919, i);
    ASSERT_TRUE(engine_->write(id, Update::write(0, model[id])).has_value());
  }
  ASSERT_TRUE(engine_->remove(ChunkId{0, 0}).has_value());
  model.erase(ChunkId{0, 0});
  ASSERT_TRUE(engine_->stage(ChunkId{1, 1}, 2, Update::write(0, pattern(10, 1))).has_value());  // dropped
  uint64_t committed_bytes = *engine_->index_bytes();
  open();
  EXPECT_EQ(engine_->used_bytes(), committed_bytes);
  for (auto& [id, data] : model) EXPECT_EQ(read_all(id), data) << id;
  EXPECT_EQ(engine_->stat(ChunkId{1, 1})->pending_version, 0u);
  // New allocations never overwrite live chunks.
  for (uint64_t i = 100; i < 140; ++i)
    ASSERT_TRUE(engine_->write(ChunkId{9, i}, Update::write(0, pattern(1000 + (i - 100) * 7919, i))).has_value());
  for (auto& [id, data] : model) EXPECT_EQ(read_all(id), data) << id;
  expect_space_matches_index();
}

TEST_F(ChunkEngineTest, FullTargetRejectsWritesAndKeepsServingReads) {
  auto o = options();
  o.capacity_bytes = 64 * 1024;
  ASSERT_NO_FATAL_FAILURE(open(o));
  auto d = pattern(32 * 1024, 1);
  ASSERT_TRUE(engine_->write(ChunkId{1, 0}, Update::write(0, d)).has_value());
  auto full = engine_->write(ChunkId{1, 1}, Update::write(0, pattern(40 * 1024, 2)));
  ASSERT_FALSE(full.has_value());
  EXPECT_EQ(full.error().code(), Code::kNoSpace);
  EXPECT_NE(full.error().message().find("full"), std::string::npos);
  // Copy-on-write needs room for the new slot too.
  EXPECT_EQ(engine_->write(ChunkId{1, 0}, Update::write(0, pattern(32 * 1024 + 1, 3))).error().code(), Code::kNoSpace);
  EXPECT_EQ(read_all(ChunkId{1, 0}), d);
  EXPECT_EQ(engine_->free_bytes(), 32u * 1024);
  EXPECT_TRUE(engine_->write(ChunkId{1, 2}, Update::write(0, pattern(100, 4))).has_value());
  expect_space_matches_index();
}

TEST_F(ChunkEngineTest, DiskEnospcIsNoSpace) {
  fault::Scope f("storage.slab.fallocate_enospc");
  auto r = engine_->write(ChunkId{1, 0}, Update::write(0, pattern(100, 1)));
  if (f.triggered() == 0) GTEST_SKIP() << "fault injection compiled out";
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code(), Code::kNoSpace);
  EXPECT_EQ(engine_->used_bytes(), 0u);
}

// A target whose filesystem fills up for real (ext4 on a loop device: slabs
// use O_DIRECT, which tmpfs refuses). With capacity 0 the engine stops at the
// reserve, so the index never meets a full disk; reads and removals go on;
// nothing acknowledged is lost across a reopen.
TEST(ChunkEngineFullDisk, KeepsItsReserveAndLosesNothing) {
  weft::testing::TempDir dir;
  auto fs = weft::testing::SmallFs::mount(dir.path(), 96 << 20, weft::testing::SmallFs::Type::kExt4);
  if (!fs) GTEST_SKIP() << "cannot mount a small filesystem here: " << fs.error();
  metrics::Registry registry;
  EngineOptions o = testing::small_engine_options(0);
  o.reserve_bytes = 16 << 20;
  const std::string path = (*fs)->path() + "/target";
  std::unique_ptr<ChunkEngine> engine;
  auto opened = testing::open_engine(engine, path, o, registry);
  ASSERT_TRUE(opened) << opened.error();
  EXPECT_LE(engine->capacity_bytes(), (*fs)->available_bytes() - o.reserve_bytes + (1 << 20));

  std::map<ChunkId, std::vector<std::byte>> model;
  Result<WriteResult> w;
  for (uint32_t i = 0; i < 1000; ++i) {
    auto data = pattern(256 << 10, i);
    w = engine->write(ChunkId{1, i}, Update::write(0, data));
    if (!w) break;
    model[ChunkId{1, i}] = std::move(data);
  }
  ASSERT_FALSE(w);
  EXPECT_EQ(w.error().code(), Code::kNoSpace) << w.error();
  EXPECT_GT(model.size(), 100u);
  EXPECT_GT((*fs)->available_bytes(), o.reserve_bytes / 2) << "the reserve was eaten into";

  // A removal frees a slot inside the slab: the next write of that size
  // class uses it without growing the file, however little the disk has.
  ASSERT_TRUE(engine->remove(ChunkId{1, 0}));
  model.erase(ChunkId{1, 0});
  auto reused = engine->write(ChunkId{1, 0}, Update::write(0, pattern(200 << 10, 5)));
  ASSERT_TRUE(reused) << reused.error();
  model[ChunkId{1, 0}] = pattern(200 << 10, 5);

  // Someone else fills the filesystem below the reserve: a write that needs
  // a slab to grow is refused (a new size class here), removals and reads go on.
  ASSERT_TRUE((*fs)->fill_until(o.reserve_bytes / 2));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // older than the guard's last reading
  auto refused = engine->write(ChunkId{2, 0}, Update::write(0, pattern(4096, 7)));
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), Code::kNoSpace);
  ASSERT_TRUE(engine->remove(ChunkId{1, 1}));
  model.erase(ChunkId{1, 1});
  // Below a quarter of the reserve nothing is written, not even the index.
  ASSERT_TRUE((*fs)->fill_until(o.reserve_bytes / 8));
  EXPECT_EQ(engine->write(ChunkId{1, 1}, Update::write(0, pattern(4096, 8))).error().code(), Code::kNoSpace);
  EXPECT_EQ(engine->remove(ChunkId{1, 2}).error().code(), Code::kNoSpace);
  for (auto& [id, data] : model) {
    auto r = engine->read(id, 0, 1 << 20);
    ASSERT_TRUE(r) << r.error();
    EXPECT_EQ(bytes_of(*r), data) << id;
  }
  (*fs)->unfill();  // back to where the engine itself stopped: slots freed inside its slabs are usable
  auto after = engine->write(ChunkId{2, 0}, Update::write(0, pattern(256 << 10, 7)));
  ASSERT_TRUE(after) << after.error();
  model[ChunkId{2, 0}] = pattern(256 << 10, 7);

  opened = testing::open_engine(engine, path, o, registry);
  ASSERT_TRUE(opened) << opened.error();
  for (auto& [id, data] : model) {
    auto r = engine->read(id, 0, 1 << 20);
    ASSERT_TRUE(r) << r.error();
    EXPECT_EQ(bytes_of(*r), data) << id;
  }
  auto idx = engine->index_bytes();
  ASSERT_TRUE(idx);
  EXPECT_EQ(engine->used_bytes(), *idx);
}

// What a power cut before a commit group's device flush can leave: the
// group's index record on the disk, its slot not (here: other bytes in it).
void clobber_slot(ChunkEngine& e, const ChunkId& id) {
  auto meta = e.committed_meta(id);
  ASSERT_TRUE(meta) << meta.error();
  int fd = ::open(e.slab_path(meta->size_class).c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  std::string junk(4096, 'Z');
  ASSERT_EQ(::pwrite(fd, junk.data(), junk.size(), static_cast<off_t>(uint64_t{meta->slot} * class_bytes(meta->size_class))),
            4096);
  ::close(fd);
}

// A clean close drops the last group's restart-check keys (it is durable):
// damage found later is corruption, not a group lost in a power cut.
TEST_F(ChunkEngineTest, RestartCheckKeysGoAtACleanClose) {
  const ChunkId id{5, 4};
  ASSERT_TRUE(engine_->write(id, Update::write(0, pattern(8192, 1))));
  ASSERT_TRUE(engine_->write(id, Update::write(0, pattern(8192, 2))));
  ASSERT_NO_FATAL_FAILURE(clobber_slot(*engine_, id));
  ASSERT_NO_FATAL_FAILURE(open());
  EXPECT_EQ(engine_->read(id, 0, 8192).error().code(), Code::kCorruption);
  EXPECT_EQ(engine_->committed_meta(id)->version, 2u);
}

// Once a group's flush returned its restart-check keys go, idle target or
// not: damage found in its chunks after a crash is corruption (kept for
// repair), not a lost write. The check used to roll the acknowledged version
// back to the previous one, whose freed slot still verified (the free
// slack is not punched), and to drop an acknowledged new chunk.
TEST_F(ChunkEngineTest, DamageAfterTheLastGroupWasFlushedIsNotTakenForALostWrite) {
  const ChunkId id{5, 5}, fresh{5, 6};
  ASSERT_TRUE(engine_->write(id, Update::write(0, pattern(8192, 1))));
  ASSERT_TRUE(engine_->write(id, Update::write(0, pattern(8192, 2))));  // the last group
  ASSERT_NO_FATAL_FAILURE(clobber_slot(*engine_, id));
  ASSERT_NO_FATAL_FAILURE(reopen_after_crash());
  if (IsSkipped()) return;
  EXPECT_EQ(engine_->committed_meta(id)->version, 2u) << "rolled back";
  EXPECT_EQ(engine_->read(id, 0, 8192).error().code(), Code::kCorruption);

  ASSERT_TRUE(engine_->write(fresh, Update::write(0, pattern(8192, 3))));  // the last group
  ASSERT_NO_FATAL_FAILURE(clobber_slot(*engine_, fresh));
  ASSERT_NO_FATAL_FAILURE(reopen_after_crash());
  ASSERT_TRUE(engine_->committed_meta(fresh).has_value()) << "an acknowledged chunk was dropped";
  EXPECT_EQ(engine_->read(fresh, 0, 8192).error().code(), Code::kCorruption);
  expect_space_matches_index();
}

TEST_F(ChunkEngineTest, RestartCheckPutsBackThePreviousVersionOfTheLastGroup) {
  const ChunkId id{5, 0};
  auto v1 = pattern(64 << 10, 1);
  ASSERT_TRUE(engine_->write(id, Update::write(0, v1)));
  ASSERT_TRUE(write_unflushed(id, Update::write(0, pattern(64 << 10, 2))));
  ASSERT_NO_FATAL_FAILURE(clobber_slot(*engine_, id));
  ASSERT_NO_FATAL_FAILURE(reopen_after_crash());
  EXPECT_EQ(read_all(id), v1);
  EXPECT_EQ(engine_->committed_meta(id)->version, 1u);
  expect_space_matches_index();
  // Settled once: the next open finds nothing to check.
  ASSERT_NO_FATAL_FAILURE(open());
  EXPECT_EQ(read_all(id), v1);
}

// A slab flush that fails after the group's index record was written: the
// engine refuses updates until reopened and serves the previous version, and
// the listing says the same as reads (the record already in the index is not
// what a read returns). The restart check settles it at the next open.
TEST_F(ChunkEngineTest, ListingAfterAFailedGroupFlushMatchesReads) {
  if (!one_fdatasync_flushes_all(dir_.path())) GTEST_SKIP() << dir_.path() << ": no one-flush groups here";
  const ChunkId id{6, 0};
  auto v1 = pattern(8192, 1);
  ASSERT_TRUE(engine_->write(id, Update::write(0, v1)));
  {
    fault::Scope fail("storage.slab.fdatasync_eio", {.hits_max = 1});
    auto r = engine_->write(id, Update::write(0, pattern(8192, 2)));
    if (fail.triggered() == 0) GTEST_SKIP() << "fault injection compiled out";
    ASSERT_FALSE(r.has_value());
  }
  EXPECT_EQ(read_all(id), v1);
  auto listed = engine_->list(std::nullopt, 16);
  ASSERT_TRUE(listed.has_value()) << listed.error();
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ(listed->front().version, 1u);
  EXPECT_FALSE(engine_->write(ChunkId{6, 1}, Update::write(0, v1)).has_value()) << "refuses until reopened";
  ASSERT_NO_FATAL_FAILURE(open());  // a failed committer keeps its restart keys
  EXPECT_EQ(read_all(id).size(), 8192u);  // whichever version the disk holds, whole
  EXPECT_TRUE(engine_->write(ChunkId{6, 1}, Update::write(0, v1)).has_value());
}

TEST_F(ChunkEngineTest, RestartCheckDropsANewChunkOfTheLastGroupThatDidNotLand) {
  const ChunkId id{5, 1};
  ASSERT_TRUE(write_unflushed(id, Update::write(0, pattern(8192, 3))));
  ASSERT_NO_FATAL_FAILURE(clobber_slot(*engine_, id));
  ASSERT_NO_FATAL_FAILURE(reopen_after_crash());
  EXPECT_EQ(engine_->read(id, 0, 4096).error().code(), Code::kNotFound);
  expect_space_matches_index();
}

// Only the last group is checked: a chunk of an earlier group was flushed
// before the next group started, so damage to it is corruption, reported by
// reads (not silently rolled back at open).
TEST_F(ChunkEngineTest, RestartCheckLeavesEarlierGroupsAlone) {
  const ChunkId earlier{5, 2}, last{5, 3};
  ASSERT_TRUE(engine_->write(earlier, Update::write(0, pattern(8192, 4))));
  ASSERT_TRUE(engine_->write(earlier, Update::write(0, pattern(8192, 5))));
  auto last_data = pattern(8192, 6);
  ASSERT_TRUE(write_unflushed(last, Update::write(0, last_data)));
  ASSERT_NO_FATAL_FAILURE(clobber_slot(*engine_, earlier));
  ASSERT_NO_FATAL_FAILURE(reopen_after_crash());
  EXPECT_EQ(engine_->read(earlier, 0, 8192).error().code(), Code::kCorruption);
  EXPECT_EQ(engine_->committed_meta(earlier)->version, 2u);
  EXPECT_EQ(read_all(last), last_data);
}

// Reopened after a crash with a smaller chunk_size_max, a target whose index
// has larger chunks is refused (kConfig) before the restart check writes
// anything: an acknowledged version of the last group in a size class the
// smaller maximum lacks is neither rolled back nor dropped.
TEST_F(ChunkEngineTest, RestartCheckUnderASmallerMaximumRefusesAndChangesNothing) {
  const ChunkId big{7, 0}, x{7, 1};
  auto big_data = pattern(1 << 20, 1);
  ASSERT_TRUE(engine_->write(big, Update::write(0, big_data)));
  ASSERT_TRUE(engine_->write(x, Update::write(0, pattern(8192, 2))));
  auto x2 = pattern(512 << 10, 3);
  ASSERT_TRUE(write_unflushed(x, Update::write(0, x2)));  // the last group
  ASSERT_NO_FATAL_FAILURE(crash());
  if (IsSkipped()) return;
  EngineOptions smaller = options();
  smaller.chunk_size_max = 64 << 10;
  for (int i = 0; i < 2; ++i) {  // the first refusal changed nothing: refused again
    auto e = ChunkEngine::open(dir_.path(), smaller, registry_);
    ASSERT_FALSE(e.has_value());
    EXPECT_EQ(e.error().code(), Code::kConfig) << e.error();
  }
  ASSERT_NO_FATAL_FAILURE(open());
  EXPECT_EQ(engine_->committed_meta(x)->version, 2u);
  EXPECT_EQ(read_all(x), x2);
  EXPECT_EQ(read_all(big), big_data);
  expect_space_matches_index();

  // The last group's new chunk is the only one too large: it is not dropped
  // to make the index fit the smaller maximum.
  ASSERT_TRUE(engine_->remove(big));
  ASSERT_TRUE(engine_->write(x, Update::truncate(8192)));
  const ChunkId fresh{7, 2};
  auto fresh_data = pattern(256 << 10, 4);
  ASSERT_TRUE(write_unflushed(fresh, Update::write(0, fresh_data)));
  ASSERT_NO_FATAL_FAILURE(crash());
  auto e = ChunkEngine::open(dir_.path(), smaller, registry_);
  ASSERT_FALSE(e.has_value()) << "opened by dropping the last group's chunk";
  EXPECT_EQ(e.error().code(), Code::kConfig) << e.error();
  ASSERT_NO_FATAL_FAILURE(open());
  EXPECT_EQ(read_all(fresh), fresh_data);
  expect_space_matches_index();
}

// A slab file missing at open cannot tell whether the last group's slot
// reached the disk (a new slab file's entry is made durable before its first
// slot is written): the open is refused and nothing is rolled back.
TEST_F(ChunkEngineTest, RestartCheckRefusesWhenASlabFileIsMissing) {
  const ChunkId id{7, 3};
  ASSERT_TRUE(engine_->write(id, Update::write(0, pattern(8192, 1))));
  auto v2 = pattern(64 << 10, 2);
  ASSERT_TRUE(write_unflushed(id, Update::write(0, v2)));  // the first chunk of its size class
  const std::string path = engine_->slab_path(engine_->committed_meta(id)->size_class);
  ASSERT_NO_FATAL_FAILURE(crash());
  if (IsSkipped()) return;
  ASSERT_EQ(::rename(path.c_str(), (path + ".away").c_str()), 0);
  auto e = ChunkEngine::open(dir_.path(), options(), registry_);
  ASSERT_FALSE(e.has_value()) << "version 2 was taken for a lost write";
  EXPECT_EQ(e.error().code(), Code::kCorruption) << e.error();
  EXPECT_NE(e.error().message().find("missing"), std::string::npos) << e.error();
  ASSERT_EQ(::rename((path + ".away").c_str(), path.c_str()), 0);
  ASSERT_NO_FATAL_FAILURE(open());
  EXPECT_EQ(engine_->committed_meta(id)->version, 2u);
  EXPECT_EQ(read_all(id), v2);
}

// An index write that fails may still have written the record (a failed WAL
// sync), in either commit order: the engine refuses every update until it is
// reopened, and the failed version's slot is never released (a restage, an
// abort or a removal would let another chunk's bytes into the slot that the
// record names). Reopened, the index says what the disk holds.
TEST_F(ChunkEngineTest, AFailedIndexWriteRefusesEveryUpdateUntilReopened) {
  const ChunkId x{9, 0}, y{9, 1};
  ASSERT_TRUE(engine_->write(x, Update::write(0, pattern(4096, 1))));
  struct Case {
    const char* what;
    Update update;
    std::vector<std::byte> content;
  };
  auto v3 = pattern(8192, 3);
  std::vector<Case> cases{{"a truncate (no slot to sync)", Update::truncate(0), {}},
                          {"a write (a slot to sync)", Update::write(0, v3), v3}};
  uint64_t version = 1;
  for (auto& c : cases) {
    SCOPED_TRACE(c.what);
    ++version;
    {
      fault::Scope fail("storage.index.write_then_fail", {.hits_max = 1});
      auto r = engine_->write(x, c.update);
      if (fail.triggered() == 0) GTEST_SKIP() << "fault injection compiled out";
      ASSERT_FALSE(r.has_value());
    }
    EXPECT_TRUE(engine_->failed());
    ASSERT_TRUE(engine_->failure().has_value());
    EXPECT_NE(engine_->failure()->message().find("reopened"), std::string::npos) << *engine_->failure();
    // Nothing releases the failed version's slot or takes a new one.
    uint64_t used = engine_->used_bytes();
    EXPECT_FALSE(engine_->stage(x, version, Update::write(0, pattern(8192, 4))).has_value());
    EXPECT_TRUE(engine_->abort(x, version).has_value());
    EXPECT_FALSE(engine_->write(y, Update::write(0, pattern(8192, 5))).has_value());
    EXPECT_FALSE(engine_->remove(x).has_value());
    EXPECT_FALSE(engine_->remove_if_in_chain(x, kChainUnknown).has_value());
    EXPECT_EQ(engine_->used_bytes(), used);
    EXPECT_EQ(engine_->stat(x)->version, version - 1) << "reads serve the last committed version";
    // The record was written: after the reopen the chunk is that version, whole.
    ASSERT_NO_FATAL_FAILURE(open());
    EXPECT_FALSE(engine_->failed());
    EXPECT_EQ(engine_->committed_meta(x)->version, version);
    EXPECT_EQ(read_all(x), c.content);
    EXPECT_EQ(engine_->read(y, 0, 4096).error().code(), Code::kNotFound);
    expect_space_matches_index();
  }
  ASSERT_TRUE(engine_->write(y, Update::write(0, pattern(8192, 6))));
}

TEST_F(ChunkEngineTest, DefaultCapacityIsFilesystemFreeSpace) {
  engine_.reset();
  auto o = options();
  o.capacity_bytes = 0;
  auto e = ChunkEngine::open(dir_.path(), o, registry_);
  ASSERT_TRUE(e.has_value());
  EXPECT_GT((*e)->capacity_bytes(), 1u << 20);
  EXPECT_NE(registry_.prometheus_text().find("weft_storage_free_bytes{target=\"test\"}"), std::string::npos);
}

TEST_F(ChunkEngineTest, ConcurrentWritersAndReaders) {
  constexpr int kThreads = 6, kChunks = 8, kRounds = 12;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < kRounds; ++round) {
        for (int c = 0; c < kChunks; ++c) {
          ChunkId id{uint64_t(t), uint64_t(c)};
          auto data = pattern(4096 * (1 + (round + c) % 20), t * 1000 + round * 10 + c);
          if (!engine_->write(id, Update::write(0, data))) failures++;
          auto r = engine_->read(id, 0, 1 << 20);
          if (!r || bytes_of(*r) != data || r->version != uint64_t(round + 1)) failures++;
          // Other threads read a shared chunk that keeps changing: never corrupt.
          auto shared = engine_->read(ChunkId{0, 0}, 0, 1 << 20);
          if (!shared && shared.error().code() != Code::kNotFound) failures++;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  expect_space_matches_index();
  auto chunks = engine_->list(std::nullopt, 1000);
  EXPECT_EQ(chunks->size(), size_t(kThreads * kChunks));
}

TEST_F(ChunkEngineTest, ConcurrentUpdatesOfOneChunkAreSerialised) {
  ChunkId id{7, 7};
  constexpr int kThreads = 4, kEach = 10;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        auto d = pattern(100, t * 100 + i);
        (void)engine_->write(id, Update::write(uint32_t(t * 100), d));
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(engine_->stat(id)->version, uint64_t(kThreads * kEach));
  auto all = read_all(id);
  ASSERT_EQ(all.size(), 400u);
  for (int t = 0; t < kThreads; ++t) {
    auto d = pattern(100, t * 100 + kEach - 1);  // each region holds its writer's last write
    EXPECT_TRUE(std::equal(d.begin(), d.end(), all.begin() + t * 100)) << t;
  }
  expect_space_matches_index();
}

TEST_F(ChunkEngineTest, MetricsCountBytesAndOps) {
  ChunkId id{8, 0};
  ASSERT_TRUE(engine_->write(id, Update::write(0, pattern(5000, 1))).has_value());
  ASSERT_TRUE(engine_->read(id, 0, 5000).has_value());
  std::string text = registry_.prometheus_text();
  EXPECT_NE(text.find("weft_storage_bytes_written_total{target=\"test\"} 5000"), std::string::npos) << text;
  EXPECT_NE(text.find("weft_storage_bytes_read_total{target=\"test\"} 5000"), std::string::npos);
  EXPECT_NE(text.find("weft_storage_used_bytes{target=\"test\"} 8192"), std::string::npos);
  EXPECT_NE(text.find("weft_storage_read_latency_us"), std::string::npos);
}

}  // namespace
}  // namespace weft::storage
