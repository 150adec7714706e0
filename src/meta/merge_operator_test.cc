#include "meta/merge_operator.h"

#include <rocksdb/db.h>

#include <limits>

#include "meta/codec.h"
#include "meta/test_util.h"

namespace weft::meta::testing {
namespace {

class MergeOperatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    rocksdb::Options o;
    o.create_if_missing = true;
    o.merge_operator = make_merge_operator();
    rocksdb::DB* db = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(o, dir_.path() + "/db", &db).ok());
    db_.reset(db);
  }
  void merge(const std::string& k, const std::string& v) {
    ASSERT_TRUE(db_->Merge(rocksdb::WriteOptions(), k, v).ok());
  }
  std::string get(const std::string& k) {
    std::string v;
    EXPECT_TRUE(db_->Get(rocksdb::ReadOptions(), k, &v).ok());
    return v;
  }

  TempDir dir_;
  std::unique_ptr<rocksdb::DB> db_;
};

TEST_F(MergeOperatorTest, DirStatFoldsTimesByMaxAndLinksBySum) {
  std::string k = key::dir_stat(7);
  merge(k, encode_dir_stat({10, 20, 1}));
  merge(k, encode_dir_stat({30, 5, 1}));
  merge(k, encode_dir_stat({15, 25, -1}));
  EXPECT_EQ(decode_dir_stat(get(k)).value(), (DirStat{30, 25, 1}));
  ASSERT_TRUE(db_->Put(rocksdb::WriteOptions(), k, encode_dir_stat({100, 100, 3})).ok());
  merge(k, encode_dir_stat({50, 200, 2}));
  merge(k, encode_dir_stat({60, 10, -1}));
  EXPECT_EQ(decode_dir_stat(get(k)).value(), (DirStat{100, 200, 4}));
}

// An mtime far ahead of a change's (set to the future, or meta's clock
// stepped back) is replaced by it; within 10 s the later one stays
// (concurrent changes commit out of their clocks' order); ctime takes the
// maximum. Over flushes and compactions too.
TEST_F(MergeOperatorTest, DirStatMtimeFollowsAChangeMadeFarBehindIt) {
  constexpr int64_t s = 1'000'000'000;
  std::string k = key::dir_stat(8);
  ASSERT_TRUE(db_->Put(rocksdb::WriteOptions(), k, encode_dir_stat({4000 * s, 900 * s, 0})).ok());
  merge(k, encode_dir_stat({1000 * s, 1000 * s, 1}));
  EXPECT_EQ(decode_dir_stat(get(k)).value(), (DirStat{1000 * s, 1000 * s, 1}));
  merge(k, encode_dir_stat({1002 * s, 1002 * s, 0}));
  merge(k, encode_dir_stat({1001 * s, 1001 * s, 0}));  // committed after a later change
  EXPECT_EQ(decode_dir_stat(get(k)).value(), (DirStat{1002 * s, 1002 * s, 1}));
  ASSERT_TRUE(db_->Flush(rocksdb::FlushOptions()).ok());
  merge(k, encode_dir_stat({5000 * s, 5000 * s, 0}));
  ASSERT_TRUE(db_->Flush(rocksdb::FlushOptions()).ok());
  merge(k, encode_dir_stat({1003 * s, 1003 * s, 0}));
  merge(k, encode_dir_stat({1004 * s, 1004 * s, -1}));
  ASSERT_TRUE(db_->CompactRange(rocksdb::CompactRangeOptions(), nullptr, nullptr).ok());
  EXPECT_EQ(decode_dir_stat(get(k)).value(), (DirStat{1004 * s, 5000 * s, 0}));
}

// An mtime set to either end of the range (utimensat takes any value) is
// followed by the next change's, with no overflow on the way (the asan
// preset's UBSan caught `acc - 10 s` below INT64_MIN).
TEST_F(MergeOperatorTest, DirStatMtimeAtTheEndsOfTheRangeFollowsAChange) {
  constexpr int64_t s = 1'000'000'000;
  for (int64_t extreme : {std::numeric_limits<int64_t>::min() + 1, std::numeric_limits<int64_t>::max()}) {
    std::string k = key::dir_stat(9);
    ASSERT_TRUE(db_->Put(rocksdb::WriteOptions(), k, encode_dir_stat({extreme, 900 * s, 0})).ok());
    merge(k, encode_dir_stat({1000 * s, 1000 * s, 1}));
    EXPECT_EQ(decode_dir_stat(get(k)).value(), (DirStat{1000 * s, 1000 * s, 1})) << extreme;
  }
}

TEST_F(MergeOperatorTest, CounterAddsOverFlushes) {
  std::string k(key::kInodeCount);
  for (int i = 0; i < 10; ++i) merge(k, encode_i64(i % 3 == 0 ? -1 : 2));
  ASSERT_TRUE(db_->Flush(rocksdb::FlushOptions()).ok());
  merge(k, encode_i64(5));
  EXPECT_EQ(decode_i64(get(k)).value(), 4 * -1 + 6 * 2 + 5);
}

TEST_F(MergeOperatorTest, MalformedOperandIsAnError) {
  std::string k = key::dir_stat(9);
  merge(k, encode_dir_stat({1, 1, 0}));
  merge(k, "garbage");
  std::string v;
  EXPECT_FALSE(db_->Get(rocksdb::ReadOptions(), k, &v).ok());
}

}  // namespace
}  // namespace weft::meta::testing
