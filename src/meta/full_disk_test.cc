// The meta store on a filesystem that fills up: mutations that add data are
// refused with kNoSpace before RocksDB could meet the full disk (it would
// abort the process), removals still work, a retried request gets its
// original answer, and nothing acknowledged is lost.
#include <chrono>
#include <thread>

#include <gtest/gtest.h>

#include "common/small_fs.h"
#include "meta/test_util.h"

namespace weft::meta::testing {
namespace {

using weft::testing::SmallFs;

constexpr uint64_t kReserve = 8 << 20;
constexpr uint64_t kWindow = 4;  // retry records kept per client

class FullDiskTest : public StoreTest {
 protected:
  void SetUp() override {
    auto fs = SmallFs::mount(dir_.path(), 48 << 20, SmallFs::Type::kTmpfs);
    if (!fs) GTEST_SKIP() << "cannot mount a small filesystem here: " << fs.error();
    fs_ = std::move(*fs);
    StoreTest::SetUp();
  }
  void TearDown() override {
    StoreTest::TearDown();
    store_.reset();  // before the filesystem goes
  }
  StoreOptions options() override {
    StoreOptions o = StoreTest::options();
    o.path = fs_->path() + "/db";
    o.sync = true;  // the real path: group-synced WAL
    o.reserve_bytes = kReserve;
    o.request_window = kWindow;
    return o;
  }
  std::unique_ptr<SmallFs> fs_;
};

TEST_F(FullDiskTest, RefusesGrowthKeepsRemovalsAndLosesNothing) {
  Ino dir = mkdir("d");
  for (int i = 0; i < 20; ++i) create("f" + std::to_string(i), dir);
  auto first = s().create(with_req(root(), 7, 1), dir, "retried", 0644, true, false);
  ASSERT_TRUE(first) << first.error();

  ASSERT_TRUE(fs_->fill_until(kReserve - (2 << 20)));
  // Free space is read again once the last reading is 20 ms old (far from the edge).
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_CODE(s().create(root(), dir, "new", 0644, true, false), Code::kNoSpace);
  EXPECT_CODE(s().mkdir(root(), dir, "sub", 0755), Code::kNoSpace);
  EXPECT_CODE(s().symlink(root(), dir, "link", "target"), Code::kNoSpace);
  // The refused create left nothing behind.
  EXPECT_CODE(s().lookup(root(), dir, "new"), Code::kNotFound);
  // A retry of a create that succeeded gets its original answer, not ENOSPC.
  auto again = s().create(with_req(root(), 7, 1), dir, "retried", 0644, true, false);
  ASSERT_TRUE(again) << again.error();
  EXPECT_EQ(again->inode.ino, first->inode.ino);
  // Reads and removals go on.
  EXPECT_TRUE(s().lookup(root(), dir, "f3"));
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(s().unlink(root(), dir, "f" + std::to_string(i)));
  EXPECT_TRUE(s().rename(root(), dir, "f10", dir, "renamed"));

  fs_->unfill();
  create("after", dir);

  ASSERT_NO_FATAL_FAILURE(open());  // everything acknowledged is there after a restart
  for (int i = 0; i < 10; ++i) EXPECT_CODE(s().lookup(root(), dir, "f" + std::to_string(i)), Code::kNotFound);
  for (int i = 11; i < 20; ++i) EXPECT_TRUE(s().lookup(root(), dir, "f" + std::to_string(i)));
  EXPECT_TRUE(s().lookup(root(), dir, "renamed"));
  EXPECT_TRUE(s().lookup(root(), dir, "retried"));
  EXPECT_TRUE(s().lookup(root(), dir, "after"));
}

// A request refused for space still takes its number's place in the
// client's retry window: the record a window behind it goes, as when a
// request is recorded (else it stayed until the client went idle).
TEST_F(FullDiskTest, ARefusedRequestMovesItsClientsRetryWindowOn) {
  Ino dir = mkdir("d");
  ASSERT_TRUE(s().create(with_req(root(), 9, 1), dir, "a", 0644, true, false));
  ASSERT_TRUE(s().create(with_req(root(), 9, 1), dir, "a", 0644, true, false)) << "a retry: its first answer";
  ASSERT_TRUE(fs_->fill_until(kReserve - (2 << 20)));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // free space is read again
  EXPECT_CODE(s().create(with_req(root(), 9, 1 + kWindow), dir, "b", 0644, true, false), Code::kNoSpace);
  fs_->unfill();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  // Record 1 went: the same request now runs afresh (the name exists: O_EXCL).
  EXPECT_CODE(s().create(with_req(root(), 9, 1), dir, "a", 0644, true, false), Code::kExists);
}

}  // namespace
}  // namespace weft::meta::testing
