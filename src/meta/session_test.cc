#include <rocksdb/db.h>

#include "meta/codec.h"
#include "meta/test_util.h"

namespace weft::meta::testing {
namespace {

using SessionTest = StoreTest;

size_t count_prefix(rocksdb::DB* db, const std::string& prefix) {
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
  size_t n = 0;
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) ++n;
  return n;
}

TEST_F(SessionTest, ReadOnlyOpenWritesNothing) {
  Ino f = create("f");
  auto seq_before = s().db()->GetLatestSequenceNumber();
  for (int i = 0; i < 1000; ++i) {
    auto r = s().open(root(), f, {.read = true, .write = false});
    ASSERT_OK(r);
    EXPECT_EQ(r->session_id, 0u);
  }
  EXPECT_EQ(s().db()->GetLatestSequenceNumber(), seq_before);
}

TEST_F(SessionTest, OpenChecksPermissionsAndType) {
  Ino f = create("f", kRootIno, 0640);
  Ino d = mkdir("d");
  EXPECT_CODE(s().open(user(1000, 100), f, {.read = true}), Code::kPermissionDenied);
  EXPECT_CODE(s().open(user(1000, 0), f, {.read = true, .write = true}), Code::kPermissionDenied);
  ASSERT_OK(s().open(user(1000, 0), f, {.read = true}));
  EXPECT_CODE(s().open(root(), d, {.read = true, .write = true}), Code::kIsDirectory);
  ASSERT_OK(s().open(root(), d, {.read = true}));
  EXPECT_CODE(s().open(root(), 987654, {.read = true}), Code::kNotFound);
}

TEST_F(SessionTest, WriteSessionsAreRecordedAndClosed) {
  Ino f = create("f");
  auto w1 = s().open(root(), f, {.read = false, .write = true});
  auto w2 = s().open(root(), f, {.read = true, .write = true});
  ASSERT_OK(w1);
  ASSERT_OK(w2);
  EXPECT_NE(w1->session_id, w2->session_id);
  EXPECT_EQ(count_prefix(s().db(), key::session_prefix(f)), 2u);
  ASSERT_OK(s().close(root(), f, w1->session_id));
  EXPECT_CODE(s().close(root(), f, w1->session_id), Code::kBadHandle);
  ASSERT_OK(s().close(root(), f, w2->session_id));
  EXPECT_EQ(count_prefix(s().db(), key::session_prefix(f)), 0u);
  auto c = s().create(root(), kRootIno, "g", 0644, true, /*open_for_write=*/true);
  ASSERT_OK(c);
  EXPECT_NE(c->session_id, 0u);
  EXPECT_EQ(count_prefix(s().db(), key::session_prefix(c->inode.ino)), 1u);
  ASSERT_OK(s().close(root(), c->inode.ino, c->session_id));
}

TEST_F(SessionTest, LengthOnlyGrowsTruncateSetsExactly) {
  auto c = s().create(root(), kRootIno, "f", 0644, true, true);
  ASSERT_OK(c);
  Ino f = c->inode.ino;
  uint64_t sid = c->session_id;
  EXPECT_EQ(s().report_length(root(), f, sid, 4096)->size, 4096u);
  EXPECT_EQ(s().report_length(root(), f, sid, 100)->size, 4096u);
  EXPECT_EQ(s().report_length(root(), f, sid, 1 << 20)->size, 1u << 20);
  EXPECT_CODE(s().report_length(root(), f, sid + 1000, 1), Code::kBadHandle);
  EXPECT_EQ(s().setattr(root(), f, SetAttr{.size = 10})->size, 10u);
  EXPECT_EQ(s().getattr(root(), f)->size, 10u);
  ASSERT_OK(s().close(root(), f, sid));
  EXPECT_CODE(s().report_length(root(), f, sid, 1), Code::kBadHandle);
}

TEST_F(SessionTest, UnlinkedWhileOpenIsQueuedAtLastClose) {
  auto c = s().create(root(), kRootIno, "f", 0644, true, true);
  Ino f = c->inode.ino;
  auto w2 = s().open(root(), f, {.write = true});
  ASSERT_OK(w2);
  ASSERT_OK(s().unlink(root(), kRootIno, "f"));
  EXPECT_TRUE(s().gc_pending(10)->empty());
  auto still = s().getattr(root(), f);  // fstat on an open unlinked file
  ASSERT_OK(still);
  EXPECT_EQ(still->nlink, 0u);
  EXPECT_CODE(s().open(root(), f, {.write = true}), Code::kNotFound);
  ASSERT_OK(s().report_length(root(), f, c->session_id, 777));
  ASSERT_OK(s().close(root(), f, c->session_id));
  EXPECT_TRUE(s().gc_pending(10)->empty());
  ASSERT_OK(s().close(root(), f, w2->session_id));
  auto gc = s().gc_pending(10);
  ASSERT_EQ(gc->size(), 1u);
  EXPECT_EQ((*gc)[0].ino, f);
  EXPECT_EQ((*gc)[0].inode.size, 777u);
  EXPECT_CODE(s().getattr(root(), f), Code::kNotFound);
}

TEST_F(SessionTest, DroppingAClientsSessionsReleasesItsFiles) {
  Context c1 = with_req(root(), 11, 1), c2 = with_req(root(), 12, 1);
  auto a = s().create(c1, kRootIno, "a", 0644, true, true);
  auto b = s().create(c2, kRootIno, "b", 0644, true, true);
  ASSERT_OK(a);
  ASSERT_OK(b);
  ASSERT_OK(s().unlink(root(), kRootIno, "a"));
  EXPECT_TRUE(s().gc_pending(10)->empty());
  EXPECT_EQ(*s().drop_sessions_of(11), 1u);
  auto gc = s().gc_pending(10);
  ASSERT_EQ(gc->size(), 1u);
  EXPECT_EQ((*gc)[0].ino, a->inode.ino);
  EXPECT_EQ(count_prefix(s().db(), key::session_prefix(b->inode.ino)), 1u);  // other client untouched
  EXPECT_EQ(*s().drop_sessions_of(11), 0u);
  ASSERT_OK(s().close(root(), b->inode.ino, b->session_id));
}

TEST_F(SessionTest, GcQueueDrains) {
  for (int i = 0; i < 5; ++i) create(fmt::format("f{}", i));
  for (int i = 0; i < 5; ++i) ASSERT_OK(s().unlink(root(), kRootIno, fmt::format("f{}", i)));
  auto first = s().gc_pending(3);
  ASSERT_EQ(first->size(), 3u);
  EXPECT_CODE(s().gc_done(user(1, 1), (*first)[0].ino), Code::kNotPermitted);
  for (auto& item : *first) ASSERT_OK(s().gc_done(root(), item.ino));
  EXPECT_CODE(s().gc_done(root(), (*first)[0].ino), Code::kNotFound);
  EXPECT_EQ(s().gc_pending(10)->size(), 2u);
  auto rest = s().gc_pending(10);
  ASSERT_OK(rest);
  for (auto& item : *rest) ASSERT_OK(s().gc_done(root(), item.ino));
  EXPECT_TRUE(s().gc_pending(10)->empty());
}

}  // namespace
}  // namespace weft::meta::testing
