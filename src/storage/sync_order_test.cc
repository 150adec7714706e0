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

// Bounded: past kEntriesMax chunks, new ones are not remembered; known ones
// still move on.
TEST(SyncOrder, RemembersAtMostItsBoundOfChunks) {
  SyncOrder s;
  for (uint64_t i = 0; i < SyncOrder::kEntriesMax; ++i) s.applied(1, 1, ChunkId{i, 0}, i + 1);
  s.applied(1, 1, ChunkId{UINT64_MAX, 0}, 5);
  EXPECT_EQ(s.size(), SyncOrder::kEntriesMax);
  EXPECT_EQ(s.last_applied(1, 1, ChunkId{UINT64_MAX, 0}), 0u);
  s.applied(1, 1, ChunkId{3, 0}, UINT64_MAX);
  EXPECT_EQ(s.last_applied(1, 1, ChunkId{3, 0}), UINT64_MAX);
}

}  // namespace
}  // namespace weft::storage
