#include <thread>

#include <rocksdb/db.h>

#include "common/fault.h"
#include "meta/test_util.h"

namespace weft::meta::testing {
namespace {

using RetryTest = StoreTest;

TEST_F(RetryTest, RetriedCreateReturnsOriginalResult) {
  Context ctx = with_req(root(), 42, 1);
  auto first = s().create(ctx, kRootIno, "f", 0644, true, true);
  ASSERT_OK(first);
  auto again = s().create(ctx, kRootIno, "f", 0644, true, true);
  ASSERT_OK(again);  // not kExists
  EXPECT_EQ(again->inode.ino, first->inode.ino);
  EXPECT_EQ(again->session_id, first->session_id);
  EXPECT_FALSE(again->existed);
  // A new request id executes again.
  EXPECT_CODE(s().create(with_req(root(), 42, 2), kRootIno, "f", 0644, true, false), Code::kExists);
  EXPECT_EQ(registry_.counter("weft_meta_request_replays_total", "").value(), 1u);
  // A create that opened an existing file says so again when retried.
  Context open_ctx = with_req(root(), 42, 3);
  auto opened = s().create(open_ctx, kRootIno, "f", 0644, false, false);
  ASSERT_OK(opened);
  EXPECT_TRUE(opened->existed);
  auto reopened = s().create(open_ctx, kRootIno, "f", 0644, false, false);
  ASSERT_OK(reopened);
  EXPECT_TRUE(reopened->existed);
  ASSERT_OK(s().close(root(), first->inode.ino, first->session_id));
}

// A request id names one mutation: a client that reuses one for another op
// (a bug) is refused instead of answered with the first op's outcome, and
// nothing changes. The op is in the retry record (RequestRecord::op).
TEST_F(RetryTest, ARequestIdReusedForAnotherOpIsRefused) {
  create("a");
  Context ctx = with_req(root(), 42, 7);
  ASSERT_OK(s().unlink(ctx, kRootIno, "a"));
  auto reused = s().mkdir(ctx, kRootIno, "d", 0755);
  ASSERT_FALSE(reused.has_value());
  EXPECT_EQ(reused.error().code(), Code::kInvalidArgument);
  EXPECT_NE(reused.error().message().find("unlink"), std::string::npos) << reused.error().message();
  EXPECT_CODE(s().lookup(root(), kRootIno, "d"), Code::kNotFound);
  ASSERT_OK(s().unlink(ctx, kRootIno, "a"));  // the retry of the op itself is answered as before
}

TEST_F(RetryTest, RetriedUnlinkAndRenameDoNotFail) {
  create("a");
  create("b");
  ASSERT_OK(s().unlink(with_req(root(), 7, 10), kRootIno, "a"));
  ASSERT_OK(s().unlink(with_req(root(), 7, 10), kRootIno, "a"));  // not kNotFound
  ASSERT_OK(s().rename(with_req(root(), 7, 11), kRootIno, "b", kRootIno, "c"));
  ASSERT_OK(s().rename(with_req(root(), 7, 11), kRootIno, "b", kRootIno, "c"));
  EXPECT_CODE(s().unlink(with_req(root(), 8, 10), kRootIno, "a"), Code::kNotFound);  // other client
}

// set_layout asks mgmtd whether a chain table exists before its
// transaction; a retry of one that committed gets the original answer even
// when another layout was set since and mgmtd is away (or the table gone).
TEST_F(RetryTest, RetriedSetLayoutAnswersAsBeforeWhateverMgmtdSaysNow) {
  Ino d = mkdir("d");
  bool mgmtd_up = true;
  s().set_chain_table_check([&](uint32_t) -> Result<void> {
    if (!mgmtd_up) return error(Code::kUnavailable, "mgmtd unreachable");
    return {};
  });
  Layout l = *s().get_layout(root(), d);
  l.chain_table_id = 7;
  Context ctx = with_req(root(), 9, 1);
  ASSERT_OK(s().set_layout(ctx, d, l));  // its reply is lost
  Layout other = l;
  other.chain_table_id = 8;
  ASSERT_OK(s().set_layout(with_req(root(), 10, 1), d, other));
  mgmtd_up = false;
  ASSERT_OK(s().set_layout(ctx, d, l));  // the retry: answered from its record, not kBusy
  EXPECT_EQ(s().get_layout(root(), d)->chain_table_id, 8u);  // and nothing applied again
  EXPECT_CODE(s().set_layout(with_req(root(), 9, 2), d, l), Code::kBusy);  // a new request asks
}

// A ParentCheck's name is a name like any other: one of 4 MiB was carried
// into the kStaleHandle message and so into the retry record, which the
// retry could not decode (kCorruption instead of the original answer).
TEST_F(RetryTest, ParentCheckNamesAreValidated) {
  Ino d = mkdir("d");
  const ParentCheck huge{kRootIno, std::string(4 << 20, 'n')};
  Context ctx = with_req(root(), 5, 1);
  EXPECT_CODE(s().create(ctx, d, "f", 0644, true, false, huge), Code::kNameTooLong);
  EXPECT_CODE(s().create(ctx, d, "f", 0644, true, false, huge), Code::kNameTooLong);  // the retry
  EXPECT_CODE(s().unlink(with_req(root(), 5, 2), d, "f", ParentCheck{kRootIno, "a/b"}), Code::kInvalidArgument);
  EXPECT_CODE(s().rmdir(with_req(root(), 5, 3), d, "f", ParentCheck{kRootIno, ""}), Code::kInvalidArgument);
  ASSERT_OK(s().create(with_req(root(), 5, 4), d, "f", 0644, true, false, ParentCheck{kRootIno, "d"}));
}

TEST_F(RetryTest, ErrorsAreRecordedToo) {
  Ino d = mkdir("d");
  create("x", d);
  Context ctx = with_req(root(), 9, 1);
  EXPECT_CODE(s().rmdir(ctx, kRootIno, "d"), Code::kNotEmpty);
  ASSERT_OK(s().unlink(root(), d, "x"));
  // The retry returns the original error, it does not remove the now empty dir.
  EXPECT_CODE(s().rmdir(ctx, kRootIno, "d"), Code::kNotEmpty);
  EXPECT_EQ(s().lookup(root(), kRootIno, "d")->ino, d);
}

TEST_F(RetryTest, RecordsSurviveReopen) {
  Context ctx = with_req(root(), 5, 3);
  auto m = s().mkdir(ctx, kRootIno, "d", 0755);
  ASSERT_OK(m);
  ASSERT_NO_FATAL_FAILURE(open());
  auto again = s().mkdir(ctx, kRootIno, "d", 0755);
  ASSERT_OK(again);
  EXPECT_EQ(again->ino, m->ino);
}

class WindowTest : public StoreTest {
  StoreOptions options() override {
    auto o = StoreTest::options();
    o.request_window = 4;
    return o;
  }
};

TEST_F(WindowTest, OnlyTheLastWindowIsKept) {
  for (uint64_t seq = 1; seq <= 10; ++seq)
    ASSERT_OK(s().create(with_req(root(), 3, seq), kRootIno, fmt::format("f{}", seq), 0644, true, false));
  // seq 7..10 are remembered: a retry succeeds with the original inode.
  ASSERT_OK(s().create(with_req(root(), 3, 8), kRootIno, "f8", 0644, true, false));
  // seq 2 fell out of the window: it executes again and sees the file.
  EXPECT_CODE(s().create(with_req(root(), 3, 2), kRootIno, "f2", 0644, true, false), Code::kExists);
  std::unique_ptr<rocksdb::Iterator> it(s().db()->NewIterator(rocksdb::ReadOptions()));
  size_t records = 0;
  for (it->Seek("R"); it->Valid() && it->key().starts_with("R"); it->Next()) ++records;
  EXPECT_LE(records, 5u);
}

// A set_layout refused before its transaction (mgmtd away) records nothing
// but used its number: the record a window behind it goes, as when a request
// is recorded (else it stayed until the client went idle).
TEST_F(WindowTest, ASetLayoutRefusedBeforeItsRecordMovesTheWindowOn) {
  ASSERT_OK(s().create(with_req(root(), 3, 1), kRootIno, "a", 0644, true, false));
  ASSERT_OK(s().create(with_req(root(), 3, 2), kRootIno, "b", 0644, true, false));
  s().set_chain_table_check([](uint32_t) -> Result<void> { return error(Code::kUnavailable, "mgmtd unreachable"); });
  Layout l = *s().get_layout(root(), kRootIno);
  l.chain_table_id = 7;
  EXPECT_CODE(s().set_layout(with_req(root(), 3, 5), kRootIno, l), Code::kBusy);
  l.stripe_count = 0;  // refused by validate_layout, before mgmtd is asked
  EXPECT_CODE(s().set_layout(with_req(root(), 3, 6), kRootIno, l), Code::kInvalidArgument);
  // Records 1 and 2 went: the same requests now run afresh (the names exist: O_EXCL).
  EXPECT_CODE(s().create(with_req(root(), 3, 1), kRootIno, "a", 0644, true, false), Code::kExists);
  EXPECT_CODE(s().create(with_req(root(), 3, 2), kRootIno, "b", 0644, true, false), Code::kExists);
}

TEST_F(RetryTest, ExpireByAge) {
  ASSERT_OK(s().mkdir(with_req(root(), 1, 1), kRootIno, "a", 0755));
  ASSERT_OK(s().mkdir(with_req(root(), 2, 1), kRootIno, "b", 0755));
  EXPECT_EQ(s().expire_requests(int64_t{3600} * 1'000'000'000)->removed, 0u);
  EXPECT_EQ(s().expire_requests(-1)->removed, 2u);
  EXPECT_CODE(s().mkdir(with_req(root(), 1, 1), kRootIno, "a", 0755), Code::kExists);
}

TEST_F(RetryTest, FailedCommitLeavesNoTrace) {
  {
    fault::Scope fail("meta.commit.fail", {.hits_max = 1});
    EXPECT_CODE(s().create(with_req(root(), 4, 1), kRootIno, "f", 0644, true, false), Code::kIoError);
  }
  EXPECT_CODE(s().lookup(root(), kRootIno, "f"), Code::kNotFound);
  ASSERT_OK(s().create(with_req(root(), 4, 1), kRootIno, "f", 0644, true, false));  // retry executes
}

TEST_F(RetryTest, LockConflictsAreRetriedThenGiveUp) {
  auto& retries = registry_.counter("weft_meta_commit_retries_total", "");
  {
    fault::Scope conflict("meta.txn.conflict", {.hits_max = 3});
    ASSERT_OK(s().mkdir(root(), kRootIno, "a", 0755));
    EXPECT_EQ(conflict.triggered(), 3);
  }
  EXPECT_EQ(retries.value(), 3u);
  {
    fault::Scope conflict("meta.txn.conflict");
    EXPECT_CODE(s().mkdir(root(), kRootIno, "b", 0755), Code::kBusy);
  }
  EXPECT_CODE(s().lookup(root(), kRootIno, "b"), Code::kNotFound);
}

TEST_F(RetryTest, ConcurrentSameRequestExecutesOnce) {
  std::vector<std::thread> ts;
  std::atomic<int> ok{0};
  for (int i = 0; i < 4; ++i)
    ts.emplace_back([&] {
      if (s().create(with_req(root(), 77, 1), kRootIno, "once", 0644, true, false)) ok++;
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(ok.load(), 4);
  EXPECT_EQ(s().statfs(root())->inodes_used, 2u);
}

}  // namespace
}  // namespace weft::meta::testing
