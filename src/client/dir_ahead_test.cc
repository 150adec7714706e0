// Statahead's rules (client/dir_ahead.h), without a cluster.
#include "client/dir_ahead.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace weft::client {
namespace {

using std::chrono::milliseconds;
constexpr meta::Ino kDir = 7;

meta::Inode dir_inode(uint32_t mode, uint32_t uid = 1000) {
  meta::Inode d;
  d.ino = kDir;
  d.type = meta::InodeType::kDirectory;
  d.mode = mode;
  d.uid = uid;
  d.gid = uid;
  return d;
}

std::vector<meta::DirEntry> listing(int n) {
  std::vector<meta::DirEntry> v;
  for (int i = 0; i < n; ++i) {
    meta::DirEntry e;
    e.name = "f" + std::to_string(i);
    e.ino = 100 + static_cast<meta::Ino>(i);
    e.attr.ino = e.ino;
    e.attr.mode = 0644;
    e.attr.size = static_cast<uint64_t>(i);
    v.push_back(e);
  }
  return v;
}

meta::Cred user(uint32_t uid) { return meta::Cred{uid, uid, {}}; }

TEST(DirAhead, ListsAfterRepeatedMissesAndAnswersWhileFresh) {
  DirAhead a({});
  auto t = DirAhead::Clock::now();
  EXPECT_FALSE(a.find(kDir, "f1", user(1000), t));
  EXPECT_FALSE(a.note_miss(kDir, t));                    // one miss: a single lookup, no listing
  EXPECT_TRUE(a.note_miss(kDir, t + milliseconds(10)));  // the second within ttl: list it
  EXPECT_FALSE(a.note_miss(kDir, t + milliseconds(11)));  // one lister at a time
  a.store(kDir, dir_inode(0755), listing(3), a.generation(), t + milliseconds(10));
  auto hit = a.find(kDir, "f2", user(1000), t + milliseconds(20));
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->inode.ino, 102u);
  EXPECT_EQ(hit->inode.size, 2u);
  EXPECT_EQ(hit->fetched, t + milliseconds(10));
  EXPECT_FALSE(a.find(kDir, "f9", user(1000), t + milliseconds(20))) << "no negative answers";
  EXPECT_FALSE(a.find(kDir, ".", user(1000), t + milliseconds(20)));
  EXPECT_FALSE(a.find(kDir, "f2", user(1000), t + milliseconds(1010))) << "older than ttl";
}

TEST(DirAhead, MissesFarApartDoNotList) {
  DirAhead a({});
  auto t = DirAhead::Clock::now();
  EXPECT_FALSE(a.note_miss(kDir, t));
  EXPECT_FALSE(a.note_miss(kDir, t + milliseconds(1500)));
  EXPECT_TRUE(a.note_miss(kDir, t + milliseconds(1600)));
}

TEST(DirAhead, AChangeHereDropsListingsAndDiscardsAFetchItOverlapped) {
  DirAhead a({});
  auto t = DirAhead::Clock::now();
  a.store(kDir, dir_inode(0755), listing(3), a.generation(), t);
  ASSERT_TRUE(a.find(kDir, "f0", user(1000), t));
  a.changed();
  EXPECT_FALSE(a.find(kDir, "f0", user(1000), t));
  uint64_t g = a.generation();  // a fetch starts...
  a.changed();                  // ...a rename here completes meanwhile
  a.store(kDir, dir_inode(0755), listing(3), g, t);
  EXPECT_FALSE(a.find(kDir, "f0", user(1000), t)) << "the listing may predate the change";
  EXPECT_EQ(a.listings(), 0u);
}

TEST(DirAhead, OnlyCallersWhoMaySearchTheDirectoryAreAnswered) {
  DirAhead a({});
  auto t = DirAhead::Clock::now();
  a.store(kDir, dir_inode(0700, 1000), listing(2), a.generation(), t);
  EXPECT_TRUE(a.find(kDir, "f1", user(1000), t));
  EXPECT_TRUE(a.find(kDir, "f1", meta::Cred::root(), t));
  EXPECT_FALSE(a.find(kDir, "f1", user(2000), t)) << "no x for others: meta must say EACCES";
}

TEST(DirAhead, FailedOrOversizeListingsAreNotRetriedForAWhile) {
  DirAhead::Options o;
  o.misses_before_listing = 1;
  DirAhead a(o);
  auto t = DirAhead::Clock::now();
  ASSERT_TRUE(a.note_miss(kDir, t));
  a.give_up(kDir, t);
  EXPECT_FALSE(a.note_miss(kDir, t + milliseconds(9000)));
  EXPECT_TRUE(a.note_miss(kDir, t + milliseconds(10001)));
}

TEST(DirAhead, EntriesWithoutAttributesAreLeftToMeta) {
  DirAhead a({});
  auto t = DirAhead::Clock::now();
  auto v = listing(2);
  v[1].attr = {};
  a.store(kDir, dir_inode(0755), v, a.generation(), t);
  EXPECT_TRUE(a.find(kDir, "f0", user(1000), t));
  EXPECT_FALSE(a.find(kDir, "f1", user(1000), t));
}

TEST(DirAhead, KeepsAtMostDirsMaxListingsAndOffMeansOff) {
  DirAhead::Options o;
  o.dirs_max = 4;
  DirAhead a(o);
  auto t = DirAhead::Clock::now();
  for (meta::Ino d = 1; d <= 10; ++d) a.store(d, dir_inode(0755), listing(1), a.generation(), t + milliseconds(d));
  EXPECT_EQ(a.listings(), 4u);
  EXPECT_TRUE(a.find(10, "f0", user(1000), t + milliseconds(20))) << "the newest are kept";
  EXPECT_FALSE(a.find(1, "f0", user(1000), t + milliseconds(20)));

  o.ttl_s = 0;
  DirAhead off(o);
  EXPECT_FALSE(off.enabled());
  EXPECT_FALSE(off.note_miss(kDir, t));
  EXPECT_FALSE(off.note_miss(kDir, t));
}

TEST(DirAhead, ManyDirectoriesTouchedWithinTheTtlStayBounded) {
  DirAhead::Options o;
  o.dirs_max = 4;
  o.ttl_s = 30;
  DirAhead a(o);
  auto t = DirAhead::Clock::now();
  for (meta::Ino d = 1000; d < 11000; ++d) {
    a.note_miss(d, t);  // one miss each: none is listed, every one is fresh
    ASSERT_LE(a.tracked(), 4 * o.dirs_max) << "after directory " << d;
  }
  // A listing in progress survives the trims.
  auto t2 = t + std::chrono::milliseconds(1);
  ASSERT_FALSE(a.note_miss(kDir, t2));
  ASSERT_TRUE(a.note_miss(kDir, t2));
  for (meta::Ino d = 20000; d < 20100; ++d) a.note_miss(d, t2);
  a.store(kDir, dir_inode(0755), listing(2), a.generation(), t2);
  EXPECT_TRUE(a.find(kDir, "f1", user(1000), t2));
}

// A scan lists many large directories: what is kept stays within the total
// entry cap at every step, and once the listings are older than the ttl the
// next lookup frees them all (they used to stay until 4 * dirs_max
// directories were tracked, up to dirs_max * entries_max Inodes).
TEST(DirAhead, ListingsAreFreedPastTheTtlAndTheirEntriesCapped) {
  DirAhead::Options o;  // the defaults: 256 listings, 65536 entries in all
  o.entries_max = 1000;
  o.entries_total_max = 20000;
  DirAhead a(o);
  auto t = DirAhead::Clock::now();
  const auto big = listing(1000);
  size_t peak = 0;
  for (meta::Ino d = 1000; d < 1300; ++d) {
    auto at = t + milliseconds(d - 1000);
    a.store(d, dir_inode(0755), big, a.generation(), at);
    ASSERT_LE(a.entries_total(), o.entries_total_max) << "after directory " << d;
    peak = std::max(peak, a.entries_total());
    EXPECT_TRUE(a.find(d, "f999", user(1000), at)) << "the newest listing is kept";
  }
  EXPECT_EQ(peak, o.entries_total_max);
  EXPECT_EQ(a.listings(), 20u);
  EXPECT_FALSE(a.find(1000, "f1", user(1000), t + milliseconds(300))) << "the oldest went first";
  // Past the ttl (1 s) of the newest: one more lookup, and nothing is kept.
  EXPECT_FALSE(a.find(kDir, "f1", user(1000), t + milliseconds(1300)));
  EXPECT_EQ(a.listings(), 0u);
  EXPECT_EQ(a.entries_total(), 0u);
  // store() drops the expired ones too.
  a.store(1, dir_inode(0755), big, a.generation(), t + milliseconds(1400));
  a.store(2, dir_inode(0755), listing(3), a.generation(), t + milliseconds(2500));
  EXPECT_EQ(a.listings(), 1u);
  EXPECT_EQ(a.entries_total(), 3u);
  // A directory larger than the cap is not kept; the cap is never below entries_max.
  a.store(3, dir_inode(0755), listing(20001), a.generation(), t + milliseconds(2500));
  EXPECT_FALSE(a.find(3, "f1", user(1000), t + milliseconds(2500)));
  o.entries_total_max = 10;
  DirAhead small(o);
  small.store(kDir, dir_inode(0755), big, small.generation(), t);
  EXPECT_TRUE(small.find(kDir, "f999", user(1000), t)) << "one listing of entries_max fits";
}

}  // namespace
}  // namespace weft::client
