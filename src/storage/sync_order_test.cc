#include "storage/sync_order.h"

#include <gtest/gtest.h>

namespace weft::storage {
namespace {

// Per chain, at one chain version: the latest order applied to each chunk.
TEST(SyncOrder, RemembersTheLastUpdateOfEachChunkAtOneChainVersion) {
  SyncOrder s;
  const ChunkId a{1, 0}, b{1, 1};
  EXPECT_EQ(s.last_applied(7, 2, a), 0u);
  s.applied(7, 2, a, 100);
  s.applied(7, 2, a, 90);  // orders only grow for a chunk (an older update cannot be applied after a newer one)
  s.applied(7, 2, b, 50);
  EXPECT_EQ(s.last_applied(7, 2, a), 100u);
  EXPECT_EQ(s.last_applied(7, 2, b), 50u);
  EXPECT_EQ(s.last_applied(7, 3, a), 0u) << "another chain version";
  EXPECT_EQ(s.last_applied(8, 2, a), 0u) << "another chain";
  EXPECT_EQ(s.size(), 2u);
}

// A new chain version (another sync) starts over; an update that finishes
// after its chain moved on changes nothing (it wiped the newer version's
// entries, and a late copy of such a chunk went through). A routing change
// keeps only the chains the target syncs, at their version there.
TEST(SyncOrder, KeepsOnlyTheChainVersionsTheTargetSyncs) {
  SyncOrder s;
  const ChunkId a{1, 0}, b{2, 0};
  s.applied(7, 2, a, 100);
  s.applied(8, 5, a, 60);
  s.applied(7, 3, b, 10);
  EXPECT_EQ(s.last_applied(7, 2, a), 0u);
  EXPECT_EQ(s.last_applied(7, 3, b), 10u);
  s.applied(7, 2, a, 200);  // of version 2, finished late
  EXPECT_EQ(s.last_applied(7, 3, b), 10u) << "version 3's entries were dropped";
  EXPECT_EQ(s.last_applied(7, 2, a), 0u);
  EXPECT_EQ(s.size(), 2u);
  s.retain({{8, 5}, {7, 4}});  // chain 7 moved on to version 4 (another sync), chain 8 is still synced
  EXPECT_EQ(s.last_applied(7, 3, b), 0u);
  EXPECT_EQ(s.last_applied(8, 5, a), 60u);
  EXPECT_EQ(s.size(), 1u);
  s.retain({});  // serves every chain
  EXPECT_EQ(s.size(), 0u);
}

// Bounded: past kEntriesMax chunks, new ones are not remembered one by one;
// known ones still move on. The guard fails closed: an update of a chunk not
// remembered raises its bucket's floor, so a copy of that chunk (or of any
// chunk of its bucket) sent before the update is still refused; other
// buckets and other chains are not held back, and the next chain version
// starts over.
TEST(SyncOrder, PastItsBoundItRefusesByBucket) {
  SyncOrder s;
  for (uint64_t i = 0; i < SyncOrder::kEntriesMax; ++i) s.applied(1, 1, ChunkId{i, 0}, i + 1);
  EXPECT_EQ(s.size(), SyncOrder::kEntriesMax);
  const ChunkId late{UINT64_MAX, 0};
  EXPECT_EQ(s.last_applied(1, 1, late), 0u) << "not updated yet: nothing to refuse";
  const uint64_t update_order = uint64_t{1} << 40;
  s.applied(1, 1, late, update_order);
  EXPECT_EQ(s.size(), SyncOrder::kEntriesMax);
  EXPECT_GE(s.last_applied(1, 1, late), update_order) << "a copy sent before the update must be refused";
  // Chunks of other buckets keep their own orders; a remembered chunk's
  // later update still moves it on.
  size_t same_bucket = 0, other_bucket = 0;
  for (uint64_t i = 0; i < 4 * SyncOrder::kOverflowBuckets; ++i) {
    const ChunkId other{UINT64_MAX - 1, i};
    const uint64_t last = s.last_applied(1, 1, other);
    if (last == update_order) ++same_bucket;
    else if (last == 0) ++other_bucket;
    else ADD_FAILURE() << "unexpected order " << last;
  }
  EXPECT_GT(other_bucket, 3 * SyncOrder::kOverflowBuckets) << "the floor holds back its bucket only";
  EXPECT_GT(same_bucket, 0u);
  for (uint64_t i = 0; i < SyncOrder::kEntriesMax; ++i)
    if (s.last_applied(1, 1, ChunkId{i, 0}) != i + 1)
      FAIL() << "remembered chunk " << i << " is held back by a floor: " << s.last_applied(1, 1, ChunkId{i, 0});
  s.applied(1, 1, ChunkId{3, 0}, UINT64_MAX);
  EXPECT_EQ(s.last_applied(1, 1, ChunkId{3, 0}), UINT64_MAX);
  EXPECT_EQ(s.last_applied(2, 1, late), 0u) << "another chain";
  s.applied(1, 2, ChunkId{5, 0}, 7);  // the chain's next sync
  EXPECT_EQ(s.last_applied(1, 2, late), 0u) << "a new chain version forgets the floors";
  EXPECT_EQ(s.size(), 1u);
}

// A chunk updated while not remembered, then remembered once there is room
// again (another chain's entries went), keeps its bucket's floor: the
// update made unremembered still refuses a copy sent before it.
TEST(SyncOrder, AChunkRememberedLaterStartsAtItsBucketsFloor) {
  SyncOrder s;
  for (uint64_t i = 0; i < SyncOrder::kEntriesMax; ++i) s.applied(2, 1, ChunkId{i, 0}, 1);
  const ChunkId x{UINT64_MAX, 3};
  s.applied(1, 1, x, 1000);  // not remembered: the floor
  EXPECT_GE(s.last_applied(1, 1, x), 1000u);
  s.retain({{1, 1}});  // chain 2 synced: its entries go
  EXPECT_EQ(s.size(), 0u);
  s.applied(1, 1, x, 10);  // remembered now (an update that finished late)
  EXPECT_EQ(s.size(), 1u);
  EXPECT_GE(s.last_applied(1, 1, x), 1000u);
}

}  // namespace
}  // namespace weft::storage
