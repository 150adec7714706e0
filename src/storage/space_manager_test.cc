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

}  // namespace
}  // namespace weft::storage
