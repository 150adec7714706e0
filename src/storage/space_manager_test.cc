#include "storage/space_manager.h"

#include <gtest/gtest.h>

#include "storage/chunk_meta.h"

namespace weft::storage {
namespace {

TEST(SpaceManager, AllocatesLowestFreeSlotAndCountsBytes) {
  SpaceManager s(4, 1 << 30);
  for (uint32_t i = 0; i < 130; ++i) {
    auto r = s.allocate(1);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->slot, i);
  }
  EXPECT_EQ(s.used_bytes(), 130u * 8192);
  s.free({1, 5});
  s.free({1, 70});
  EXPECT_EQ(s.allocate(1)->slot, 5u);
  EXPECT_EQ(s.allocate(1)->slot, 70u);
  EXPECT_EQ(s.allocate(1)->slot, 130u);
  EXPECT_EQ(s.allocate(0)->slot, 0u);
  EXPECT_EQ(s.used_bytes(), 131u * 8192 + 4096);
  EXPECT_EQ(s.slot_high_water(1), 131u);
}

TEST(SpaceManager, CapacityIsEnforced) {
  SpaceManager s(4, 3 * 4096);
  ASSERT_TRUE(s.allocate(1).has_value());
  ASSERT_TRUE(s.allocate(0).has_value());
  auto r = s.allocate(0);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code(), Code::kNoSpace);
  EXPECT_NE(r.error().message().find("full"), std::string::npos);
  s.free({1, 0});
  EXPECT_TRUE(s.allocate(0).has_value());
}

// Slot numbers are 32 bits: past the last one a class is full (kNoSpace)
// rather than wrapping onto slot 0 under a live chunk. Here with a limit of 130.
TEST(SpaceManager, AClassWithoutFreeSlotNumbersIsFull) {
  SpaceManager s(2, uint64_t{1} << 40, 130);
  for (uint32_t i = 0; i < 130; ++i) {
    auto r = s.allocate(1);
    ASSERT_TRUE(r.has_value()) << r.error();
    EXPECT_EQ(r->slot, i);
  }
  auto full = s.allocate(1);
  ASSERT_FALSE(full.has_value()) << "slot " << full->slot;
  EXPECT_EQ(full.error().code(), Code::kNoSpace);
  EXPECT_NE(full.error().message().find("slots"), std::string::npos) << full.error();
  EXPECT_EQ(s.used_bytes(), 130u * 8192);
  EXPECT_TRUE(s.allocate(0).has_value()) << "another class has its own slots";
  s.free({1, 77});
  EXPECT_EQ(s.allocate(1)->slot, 77u);
  EXPECT_EQ(SpaceManager::kSlotsPerClassMax, uint64_t{1} << 32);
}

TEST(SpaceManager, DoubleClaimFromIndexIsCorruption) {
  SpaceManager s(4, 1 << 30);
  ASSERT_TRUE(s.mark_used({2, 9}).has_value());
  EXPECT_EQ(s.mark_used({2, 9}).error().code(), Code::kCorruption);
  EXPECT_EQ(s.mark_used({7, 0}).error().code(), Code::kCorruption);
  EXPECT_EQ(s.used_bytes(), 16384u);
  EXPECT_EQ(s.allocate(2)->slot, 0u);
}

TEST(SpaceManager, PinnedSlotIsNotReusedUntilUnpinned) {
  SpaceManager s(1, 1 << 30);
  SlotRef a = *s.allocate(0);
  s.pin(a);
  s.pin(a);
  s.free(a);
  EXPECT_FALSE(s.is_used(a));
  EXPECT_EQ(s.allocate(0)->slot, 1u);  // slot 0 still held by readers
  s.unpin(a);
  EXPECT_EQ(s.allocate(0)->slot, 2u);
  s.unpin(a);
  EXPECT_EQ(s.allocate(0)->slot, 0u);
  EXPECT_EQ(s.used_bytes(), 3u * 4096);
}

// The punch pass takes the highest free slots beyond the slack; while it
// punches them allocate() hands out others, and once punched they come back
// as holes that must be re-backed before a write.
TEST(SpaceManager, PunchTakesTheHighestFreeSlotsBeyondTheSlackAndReturnsHoles) {
  SpaceManager s(1, 1 << 30);
  for (uint32_t i = 0; i < 10; ++i) ASSERT_TRUE(s.allocate(0).has_value());
  for (uint32_t i = 2; i < 10; ++i) s.free({0, i});
  EXPECT_EQ(s.holding_bytes(), 8u * 4096);
  auto runs = s.take_for_punch(0, 2 * 4096, 100);
  ASSERT_EQ(runs, (std::vector<SlotRun>{{4, 6}}));
  EXPECT_EQ(s.holding_bytes(), 2u * 4096);
  EXPECT_FALSE(s.is_used({0, 4}));
  auto a = s.allocate(0);  // the slack: free, backed
  EXPECT_EQ(a->slot, 2u);
  EXPECT_FALSE(a->needs_backing);
  EXPECT_EQ(s.allocate(0)->slot, 3u);
  auto past = s.allocate(0);  // 4..9 are being punched: never handed out
  EXPECT_EQ(past->slot, 10u);
  EXPECT_FALSE(past->needs_backing);
  EXPECT_TRUE(s.take_for_punch(0, 0, 100).empty()) << "nothing else is free";
  s.punched(0, runs, true);
  auto hole = s.allocate(0);
  EXPECT_EQ(hole->slot, 4u);
  EXPECT_TRUE(hole->needs_backing);
  EXPECT_EQ(s.used_bytes(), 6u * 4096);
  // Written and freed again, it holds space again.
  s.free(*hole);
  EXPECT_EQ(s.take_for_punch(0, 0, 100), (std::vector<SlotRun>{{4, 1}}));
}

TEST(SpaceManager, PunchTakesBatchesAndSplitsRuns) {
  SpaceManager s(1, 1 << 30);
  for (uint32_t i = 0; i < 200; ++i) ASSERT_TRUE(s.allocate(0).has_value());
  for (uint32_t i : {1u, 2u, 3u, 70u, 130u, 131u, 199u}) s.free({0, i});
  auto first = s.take_for_punch(0, 0, 3);
  EXPECT_EQ(first, (std::vector<SlotRun>{{199, 1}, {130, 2}}));
  auto second = s.take_for_punch(0, 0, 100);
  EXPECT_EQ(second, (std::vector<SlotRun>{{70, 1}, {1, 3}}));
  s.punched(0, first, true);
  s.punched(0, second, true);
  EXPECT_EQ(s.holding_bytes(), 0u);
  EXPECT_EQ(s.used_bytes(), 193u * 4096);
}

// A slot freed under a read's pin becomes punchable only at the last unpin.
TEST(SpaceManager, PinnedSlotIsNotPunchedUntilUnpinned) {
  SpaceManager s(1, 1 << 30);
  SlotRef a = *s.allocate(0);
  s.pin(a);
  s.free(a);
  EXPECT_TRUE(s.take_for_punch(0, 0, 100).empty());
  s.unpin(a);
  EXPECT_EQ(s.take_for_punch(0, 0, 100), (std::vector<SlotRun>{{0, 1}}));
}

// After a restart the free slots inside a slab file may hold space or be
// holes: both. A failed punch leaves them so too.
TEST(SpaceManager, FreeSlotsFoundAtOpenAreUnknownAndAFailedPunchKeepsThemSo) {
  SpaceManager s(1, 1 << 30);
  ASSERT_TRUE(s.mark_used({0, 1}).has_value());
  s.mark_free_unknown(0, 70);
  EXPECT_EQ(s.holding_bytes(), 69u * 4096);
  auto first = s.allocate(0);
  EXPECT_EQ(first->slot, 0u);
  EXPECT_TRUE(first->needs_backing);
  EXPECT_EQ(s.holding_bytes(), 68u * 4096);
  auto runs = s.take_for_punch(0, 0, 1000);
  EXPECT_EQ(runs, (std::vector<SlotRun>{{2, 68}}));
  s.punched(0, runs, false);
  EXPECT_EQ(s.holding_bytes(), 68u * 4096);
  auto next = s.allocate(0);
  EXPECT_EQ(next->slot, 2u);
  EXPECT_TRUE(next->needs_backing);
  // Past the slab file: fresh growth, nothing to re-back.
  for (uint32_t i = 3; i < 70; ++i) ASSERT_TRUE(s.allocate(0).has_value());
  EXPECT_FALSE(s.allocate(0)->needs_backing);
}

// A slot whose re-backing failed is freed as a hole (and as holding space
// if the failed fallocate may have left some).
TEST(SpaceManager, AFailedBackingFreesTheSlotAsAHole) {
  SpaceManager s(1, 1 << 30);
  SlotRef a = *s.allocate(0);
  s.free_unbacked(a, false);
  EXPECT_EQ(s.used_bytes(), 0u);
  EXPECT_EQ(s.holding_bytes(), 0u);
  EXPECT_TRUE(s.allocate(0)->needs_backing);
  s.free_unbacked(a, true);
  EXPECT_EQ(s.holding_bytes(), 4096u);
  EXPECT_TRUE(s.allocate(0)->needs_backing);
}

}  // namespace
}  // namespace weft::storage
