#include "common/free_space.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "common/small_fs.h"
#include "common/temp_dir.h"

namespace weft {
namespace {

using testing::SmallFs;

TEST(FreeSpaceGuard, RefusesGrowthBelowTheReserveAndReleasesBelowAQuarter) {
  weft::testing::TempDir dir;
  auto fs = SmallFs::mount(dir.path(), 16 << 20, SmallFs::Type::kTmpfs);
  if (!fs) GTEST_SKIP() << "cannot mount a small filesystem here: " << fs.error();
  const uint64_t reserve = 4 << 20;
  FreeSpaceGuard guard((*fs)->path(), reserve, std::chrono::milliseconds(0));
  EXPECT_TRUE(guard.admit(FreeSpaceGuard::Kind::kGrow));

  // Below the reserve: growth refused with a message naming the directory, removal admitted.
  ASSERT_TRUE((*fs)->fill_until(reserve - (1 << 20)));
  auto refused = guard.admit(FreeSpaceGuard::Kind::kGrow);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), Code::kNoSpace);
  EXPECT_NE(refused.error().message().find((*fs)->path()), std::string::npos) << refused.error().message();
  EXPECT_TRUE(guard.admit(FreeSpaceGuard::Kind::kRelease));

  // A write that would itself eat into the reserve is refused too.
  (*fs)->unfill();
  ASSERT_TRUE((*fs)->fill_until(reserve + (1 << 20)));
  EXPECT_TRUE(guard.admit(FreeSpaceGuard::Kind::kGrow, 512 << 10));
  EXPECT_EQ(guard.admit(FreeSpaceGuard::Kind::kGrow, 2 << 20).error().code(), Code::kNoSpace);

  // Below a quarter: removals refused too.
  ASSERT_TRUE((*fs)->fill_until(reserve / 8));
  EXPECT_EQ(guard.admit(FreeSpaceGuard::Kind::kRelease).error().code(), Code::kNoSpace);

  // Near the edge every call reads afresh, however long max_age is: space
  // freed is admitted at once.
  FreeSpaceGuard slow((*fs)->path(), reserve, std::chrono::hours(1));
  EXPECT_FALSE(slow.admit(FreeSpaceGuard::Kind::kGrow));
  (*fs)->unfill();
  EXPECT_TRUE(slow.admit(FreeSpaceGuard::Kind::kGrow));
  EXPECT_TRUE(guard.admit(FreeSpaceGuard::Kind::kGrow));
}

TEST(FreeSpaceGuard, ReserveIsAtMostAQuarterOfTheFilesystem) {
  weft::testing::TempDir dir;
  auto fs = SmallFs::mount(dir.path(), 16 << 20, SmallFs::Type::kTmpfs);
  if (!fs) GTEST_SKIP() << "cannot mount a small filesystem here: " << fs.error();
  FreeSpaceGuard guard((*fs)->path(), 256 << 20, std::chrono::milliseconds(0));
  EXPECT_TRUE(guard.admit(FreeSpaceGuard::Kind::kGrow));  // a 16 MiB disk is not full at once
  EXPECT_EQ(guard.reserve_bytes(), 4u << 20);
  ASSERT_TRUE((*fs)->fill_until(3 << 20));
  EXPECT_EQ(guard.admit(FreeSpaceGuard::Kind::kGrow).error().code(), Code::kNoSpace);
}

TEST(FreeSpaceGuard, ZeroReserveAdmitsEverything) {
  FreeSpaceGuard guard("/nonexistent/dir", 0);
  EXPECT_TRUE(guard.admit(FreeSpaceGuard::Kind::kGrow));
}

TEST(FreeSpaceGuard, MissingDirectoryIsAnError) {
  FreeSpaceGuard guard("/nonexistent/dir", 1 << 20);
  auto r = guard.admit(FreeSpaceGuard::Kind::kGrow);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kIoError);  // not ENOENT to a client whose create it refuses
  EXPECT_NE(r.error().message().find("/nonexistent/dir"), std::string::npos);
}

// Two directories of one filesystem have one id (targets sharing a disk count
// its free space once); another filesystem has another; none before a reading.
TEST(FreeSpaceGuard, DirectoriesOfOneFilesystemShareItsId) {
  testing::TempDir dir;
  std::filesystem::create_directories(dir.path() + "/a");
  std::filesystem::create_directories(dir.path() + "/b");
  FreeSpaceGuard a(dir.path() + "/a", 0), b(dir.path() + "/b", 0), proc("/proc", 0);
  EXPECT_EQ(a.fs_id(), 0u) << "no reading yet";
  ASSERT_TRUE(a.available_bytes());
  ASSERT_TRUE(b.available_bytes());
  EXPECT_NE(a.fs_id(), 0u);
  EXPECT_EQ(a.fs_id(), b.fs_id());
  ASSERT_TRUE(proc.available_bytes());
  EXPECT_NE(proc.fs_id(), a.fs_id());
}

}  // namespace
}  // namespace weft
