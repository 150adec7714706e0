#include <limits>

#include <rocksdb/db.h>
#include <rocksdb/perf_context.h>
#include <rocksdb/perf_level.h>

#include "meta/codec.h"
#include "meta/gc_floor.h"
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
  auto w1 = s().open(writer(), f, {.read = false, .write = true});
  auto w2 = s().open(writer(), f, {.read = true, .write = true});
  ASSERT_OK(w1);
  ASSERT_OK(w2);
  EXPECT_NE(w1->session_id, w2->session_id);
  EXPECT_EQ(count_prefix(s().db(), key::session_prefix(f)), 2u);
  ASSERT_OK(s().close(root(), f, w1->session_id));
  EXPECT_CODE(s().close(root(), f, w1->session_id), Code::kBadHandle);
  ASSERT_OK(s().close(root(), f, w2->session_id));
  EXPECT_EQ(count_prefix(s().db(), key::session_prefix(f)), 0u);
  auto c = s().create(writer(), kRootIno, "g", 0644, true, /*open_for_write=*/true);
  ASSERT_OK(c);
  EXPECT_NE(c->session_id, 0u);
  EXPECT_EQ(count_prefix(s().db(), key::session_prefix(c->inode.ino)), 1u);
  ASSERT_OK(s().close(root(), c->inode.ino, c->session_id));
}

TEST_F(SessionTest, LengthOnlyGrowsTruncateSetsExactly) {
  auto c = s().create(writer(), kRootIno, "f", 0644, true, true);
  ASSERT_OK(c);
  Ino f = c->inode.ino;
  uint64_t sid = c->session_id;
  EXPECT_EQ(s().report_length(root(), f, sid, 4096)->inode.size, 4096u);
  EXPECT_EQ(s().report_length(root(), f, sid, 100)->inode.size, 4096u);
  EXPECT_EQ(s().report_length(root(), f, sid, 1 << 20)->inode.size, 1u << 20);
  EXPECT_CODE(s().report_length(root(), f, sid + 1000, 1), Code::kBadHandle);
  EXPECT_EQ(s().setattr(root(), f, SetAttr{.size = 10})->size, 10u);
  EXPECT_EQ(s().getattr(root(), f)->size, 10u);
  ASSERT_OK(s().close(root(), f, sid));
  EXPECT_CODE(s().report_length(root(), f, sid, 1), Code::kBadHandle);
}

// A length past kFileBytesMax would hand the chunk GC a chunk count that
// wraps to 0 (UINT64_MAX: the file's chunks are never removed) or that no
// pass finishes (2^62 bytes: 2^42 removals), and a negative st_size.
TEST_F(SessionTest, FileLengthIsBounded) {
  auto c = s().create(writer(), kRootIno, "f", 0644, true, true);
  ASSERT_OK(c);
  Ino f = c->inode.ino;
  uint64_t sid = c->session_id;
  for (uint64_t bad : {kFileBytesMax + 1, uint64_t{1} << 62, UINT64_MAX}) {
    EXPECT_CODE(s().report_length(root(), f, sid, bad), Code::kFileTooBig);
    EXPECT_CODE(s().setattr(root(), f, SetAttr{.size = bad}), Code::kFileTooBig);
  }
  EXPECT_EQ(s().getattr(root(), f)->size, 0u);
  EXPECT_EQ(Status(Code::kFileTooBig, "").posix_errno(), EFBIG);
  EXPECT_EQ(s().report_length(root(), f, sid, kFileBytesMax)->inode.size, kFileBytesMax);
  EXPECT_EQ(s().setattr(root(), f, SetAttr{.size = kFileBytesMax})->size, kFileBytesMax);
  ASSERT_OK(s().close(root(), f, sid));
  ASSERT_OK(s().unlink(root(), kRootIno, "f"));
  auto gc = s().gc_pending(10);
  ASSERT_EQ(gc->size(), 1u);
  EXPECT_EQ(chunk_count((*gc)[0].inode.size, Layout::kChunkBytesMin), uint64_t{1} << 28);
  ASSERT_OK(s().gc_done(root(), f));
}

// A queued file's ctime is when it was queued, however it got there: the
// chunk GC keeps it that long for readers (meta/read_holds.h).
class QueuedTimeTest : public StoreTest {
 protected:
  StoreOptions options() override {
    StoreOptions o = StoreTest::options();
    o.clock = &clock_;
    return o;
  }
  int64_t queued_ctime(Ino ino) {
    auto gc = s().gc_pending(100);
    EXPECT_TRUE(gc.has_value());
    if (!gc) return -1;
    for (const auto& item : *gc)
      if (item.ino == ino) return item.inode.ctime_ns;
    return -1;
  }
  ManualClock clock_;
};

TEST_F(QueuedTimeTest, AQueuedFileCarriesTheTimeItWasQueued) {
  Ino unlinked = create("unlinked");
  Ino replaced = create("replaced");
  Ino other = create("other");
  for (Ino f : {unlinked, replaced}) ASSERT_OK(s().setattr(root(), f, SetAttr{.size = 4096}));
  auto w = s().create(with_req(root(), 5, 1), kRootIno, "written", 0644, true, /*open_for_write=*/true);
  ASSERT_OK(w);
  ASSERT_OK(s().report_length(with_req(root(), 5, 2), w->inode.ino, w->session_id, 4096));

  clock_.advance(std::chrono::seconds(5));
  ASSERT_OK(s().unlink(root(), kRootIno, "unlinked"));
  EXPECT_EQ(queued_ctime(unlinked), clock_.wall_ns());
  clock_.advance(std::chrono::seconds(5));
  ASSERT_OK(s().rename(root(), kRootIno, "other", kRootIno, "replaced"));
  EXPECT_EQ(queued_ctime(replaced), clock_.wall_ns());
  EXPECT_EQ(queued_ctime(other), -1);
  clock_.advance(std::chrono::seconds(5));
  ASSERT_OK(s().unlink(root(), kRootIno, "written"));
  EXPECT_EQ(queued_ctime(w->inode.ino), -1) << "kept for its writer";
  clock_.advance(std::chrono::seconds(7));
  ASSERT_OK(s().close(with_req(root(), 5, 3), w->inode.ino, w->session_id));
  EXPECT_EQ(queued_ctime(w->inode.ino), clock_.wall_ns()) << "queued at the last close, not at the unlink";
}

// close_with_length is report_length and close in one commit: the length
// grows (never shrinks), the session is gone, and a refusal changes neither.
TEST_F(SessionTest, CloseWithLengthReportsAndClosesInOneCommit) {
  Context mine = on_connection(user(1000, 100), 11), theirs = on_connection(user(1000, 100), 12);
  Ino f = create("f", kRootIno, 06777);
  auto w = s().open(mine, f, {.read = false, .write = true});
  ASSERT_OK(w);
  const uint64_t sid = w->session_id;
  ASSERT_OK(s().report_length(on_connection(root(), 11), f, sid, 8192));  // root's keeps setuid
  EXPECT_CODE(s().close_with_length(theirs, f, sid, 1 << 20), Code::kBadHandle);
  EXPECT_CODE(s().close_with_length(mine, f, sid, kFileBytesMax + 1), Code::kFileTooBig);
  EXPECT_EQ(s().getattr(root(), f)->size, 8192u) << "refused: nothing changed";
  EXPECT_EQ(count_prefix(s().db(), key::session_prefix(f)), 1u) << "refused: the session stays";

  auto closed = s().close_with_length(mine, f, sid, 4096);
  ASSERT_OK(closed);
  EXPECT_EQ(closed->inode.size, 8192u) << "a length only grows";
  EXPECT_EQ(closed->inode.mode & 07777, 0777u) << "a writer's report drops setuid and setgid";
  EXPECT_EQ(count_prefix(s().db(), key::session_prefix(f)), 0u);
  EXPECT_CODE(s().close_with_length(mine, f, sid, 1), Code::kBadHandle);
  EXPECT_CODE(s().close(mine, f, sid), Code::kBadHandle);

  auto again = s().open(mine, f, {.read = false, .write = true});
  ASSERT_OK(again);
  EXPECT_EQ(s().close_with_length(mine, f, again->session_id, 1 << 20)->inode.size, 1u << 20);
  EXPECT_EQ(s().getattr(root(), f)->size, 1u << 20);
}

// The last writer of an unlinked file closing with its length queues the file
// for GC with that length: every chunk it wrote is collected.
TEST_F(SessionTest, CloseWithLengthOfAnUnlinkedFileQueuesItWithItsLength) {
  auto w = s().create(with_req(root(), 5, 1), kRootIno, "f", 0644, true, /*open_for_write=*/true);
  ASSERT_OK(w);
  ASSERT_OK(s().unlink(root(), kRootIno, "f"));
  EXPECT_TRUE(s().gc_pending(10)->empty()) << "kept for its writer";
  auto closed = s().close_with_length(with_req(root(), 5, 2), w->inode.ino, w->session_id, 3 << 20);
  ASSERT_OK(closed);
  auto gc = s().gc_pending(10);
  ASSERT_EQ(gc->size(), 1u);
  EXPECT_EQ((*gc)[0].ino, w->inode.ino);
  EXPECT_EQ((*gc)[0].inode.size, 3u << 20);
  EXPECT_CODE(s().getattr(root(), w->inode.ino), Code::kNotFound);
  // A retry of it (its reply lost) is answered as before.
  auto retried = s().close_with_length(with_req(root(), 5, 2), w->inode.ino, w->session_id, 3 << 20);
  ASSERT_OK(retried);
  EXPECT_EQ(retried->inode.size, 3u << 20);
  EXPECT_EQ(s().gc_pending(10)->size(), 1u);
}

TEST(ChunkCount, RoundsUpWithoutOverflow) {
  EXPECT_EQ(chunk_count(0, 65536), 0u);
  EXPECT_EQ(chunk_count(1, 65536), 1u);
  EXPECT_EQ(chunk_count(65536, 65536), 1u);
  EXPECT_EQ(chunk_count(65537, 65536), 2u);
  EXPECT_EQ(chunk_count(UINT64_MAX, 65536), uint64_t{1} << 48) << "(size + chunk - 1) / chunk wraps to 0 here";
  EXPECT_EQ(chunk_count(UINT64_MAX, Layout::kChunkBytesMax), uint64_t{1} << 38);
  EXPECT_EQ(chunk_count(123, 0), 0u);
}

// Only the client that opened a write session (or root) reports lengths
// through it or closes it: session ids are sequential, and another client's
// close would end the owner's session under it.
TEST_F(SessionTest, OnlyItsOwnerUsesASession) {
  Context mine = on_connection(user(1000, 100), 11), theirs = on_connection(user(1000, 100), 12);
  Ino f = create("f", kRootIno, 0666);
  auto w = s().open(mine, f, {.read = false, .write = true});
  ASSERT_OK(w);
  const uint64_t sid = w->session_id;
  EXPECT_CODE(s().report_length(theirs, f, sid, 4096), Code::kBadHandle);
  EXPECT_CODE(s().close(theirs, f, sid), Code::kBadHandle);
  EXPECT_CODE(s().close(with_req(user(1000, 100), 12, 1), f, sid), Code::kBadHandle);
  EXPECT_EQ(s().report_length(mine, f, sid, 4096)->inode.size, 4096u);
  ASSERT_OK(s().unlink(root(), kRootIno, "f"));
  EXPECT_CODE(s().close(theirs, f, sid), Code::kBadHandle);
  ASSERT_OK(s().getattr(root(), f));  // still there for its writer
  EXPECT_EQ(s().report_length(mine, f, sid, 8192)->inode.size, 8192u);
  ASSERT_OK(s().close(with_req(user(1000, 100), 11, 1), f, sid));  // a request id names the client too
  ASSERT_EQ(s().gc_pending(10)->size(), 1u);
  Ino g = create("g", kRootIno, 0666);
  auto w2 = s().open(mine, g, {.read = false, .write = true});
  ASSERT_OK(w2);
  ASSERT_OK(s().close(root(), g, w2->session_id));  // root (the reaper) may
}

// A truncate by another client removes the chunks past its length, also
// those a writer wrote before it and has not reported: that writer's report
// past the cut counts only up to it and names the cut, until the writer
// reports again acknowledging it (after looking at what storage holds). The
// truncating client's own sessions are not marked (it orders its reports
// after its truncates itself).
TEST_F(SessionTest, AReportPastAnotherClientsTruncateIsCappedUntilTheWriterAnswersIt) {
  Context writer_ctx = on_connection(root(), 11), cutter = on_connection(root(), 12);
  Ino f = create("f", kRootIno, 0666);
  auto w = s().open(writer_ctx, f, {.read = false, .write = true});
  ASSERT_OK(w);
  const uint64_t sid = w->session_id;
  auto own = s().open(cutter, f, {.read = false, .write = true});
  ASSERT_OK(own);
  ASSERT_OK(s().report_length(writer_ctx, f, sid, 8192));
  SetAttr cut;
  cut.size = 100;
  ASSERT_OK(s().setattr(cutter, f, cut));

  auto capped = s().report_length(writer_ctx, f, sid, 1 << 20);
  ASSERT_OK(capped);
  EXPECT_EQ(capped->inode.size, 100u) << "the report brought the cut range back";
  EXPECT_EQ(capped->cut, (SessionCut{1, 100}));
  auto below = s().report_length(writer_ctx, f, sid, 50);  // not past the cut: taken, the cut stays
  ASSERT_OK(below);
  EXPECT_EQ(below->cut, SessionCut{});
  EXPECT_EQ(s().report_length(writer_ctx, f, sid, 1 << 20)->cut, (SessionCut{1, 100}));
  EXPECT_EQ(s().report_length(cutter, f, own->session_id, 300)->cut, SessionCut{}) << "the cutter's own session";

  // A second truncate before the writer answered: the shorter length, a new
  // generation; an answer to the first is not an answer to it.
  cut.size = 40;
  ASSERT_OK(s().setattr(cutter, f, cut));
  cut.size = 70;
  ASSERT_OK(s().setattr(cutter, f, cut));
  EXPECT_EQ(s().report_length(writer_ctx, f, sid, 4096, /*ack_cut=*/1)->cut, (SessionCut{3, 40}));
  EXPECT_EQ(s().getattr(root(), f)->size, 70u);
  auto answered = s().report_length(writer_ctx, f, sid, 4096, /*ack_cut=*/3);
  ASSERT_OK(answered);
  EXPECT_EQ(answered->cut, SessionCut{});
  EXPECT_EQ(answered->inode.size, 4096u);
  EXPECT_EQ(s().report_length(writer_ctx, f, sid, 8192)->inode.size, 8192u) << "answered: no cap any more";

  // A retried capped report (its reply lost) is answered as before, even
  // once the cut was answered.
  cut.size = 10;
  ASSERT_OK(s().setattr(cutter, f, cut));
  Context once = with_req(root(), 11, 1);
  EXPECT_EQ(s().report_length(once, f, sid, 1 << 20)->cut, (SessionCut{4, 10}));
  ASSERT_OK(s().report_length(writer_ctx, f, sid, 10, /*ack_cut=*/4));
  EXPECT_EQ(s().report_length(once, f, sid, 1 << 20)->cut, (SessionCut{4, 10}));
  EXPECT_EQ(s().getattr(root(), f)->size, 10u);
  ASSERT_OK(s().setattr(cutter, f, cut));  // cut 5, to 10 again

  // close_with_length capped keeps the session open for the answer.
  auto closing = s().close_with_length(writer_ctx, f, sid, 1 << 20);
  ASSERT_OK(closing);
  EXPECT_EQ(closing->cut, (SessionCut{5, 10}));
  EXPECT_EQ(count_prefix(s().db(), key::session_prefix(f)), 2u) << "the capped close ended the session";
  auto closed = s().close_with_length(writer_ctx, f, sid, 20, /*ack_cut=*/5);
  ASSERT_OK(closed);
  EXPECT_EQ(closed->cut, SessionCut{});
  EXPECT_EQ(closed->inode.size, 20u);
  EXPECT_EQ(count_prefix(s().db(), key::session_prefix(f)), 1u);
  ASSERT_OK(s().close(cutter, f, own->session_id));

  // A client from before cuts would never answer one: its session is not
  // marked, and its reports are taken whole.
  auto old = s().open(writer_ctx, f, {.read = false, .write = true, .answers_cuts = false});
  ASSERT_OK(old);
  ASSERT_OK(s().setattr(cutter, f, cut));
  auto whole = s().report_length(writer_ctx, f, old->session_id, 4096);
  ASSERT_OK(whole);
  EXPECT_EQ(whole->cut, SessionCut{});
  EXPECT_EQ(whole->inode.size, 4096u);
  ASSERT_OK(s().close(writer_ctx, f, old->session_id));

  // A truncate that removed no chunks (an extension) marks no session.
  auto w2 = s().open(writer_ctx, f, {.read = false, .write = true});
  ASSERT_OK(w2);
  SetAttr grow;
  grow.size = 8192;
  grow.no_cut = true;
  ASSERT_OK(s().setattr(cutter, f, grow));
  EXPECT_EQ(s().report_length(writer_ctx, f, w2->session_id, 1 << 20)->cut, SessionCut{});
  EXPECT_EQ(s().getattr(root(), f)->size, 1u << 20);
  ASSERT_OK(s().close(writer_ctx, f, w2->session_id));
}

// A truncate through the caller's own write session needs no write
// permission now (ftruncate(2) on a file opened for writing, since made
// read-only); without one, or through another client's, it does.
TEST_F(SessionTest, TruncateThroughOwnWriteSessionNeedsNoWritePermission) {
  Context mine = on_connection(user(1000, 100), 11), theirs = on_connection(user(1000, 100), 12);
  Ino f = create("f", kRootIno, 0666);
  auto w = s().open(mine, f, {.read = false, .write = true});
  ASSERT_OK(w);
  ASSERT_OK(s().report_length(mine, f, w->session_id, 8192));
  SetAttr ro;
  ro.mode = 0444;
  ASSERT_OK(s().setattr(root(), f, ro));
  SetAttr cut;
  cut.size = 100;
  EXPECT_CODE(s().setattr(mine, f, cut), Code::kPermissionDenied);
  cut.size_session = w->session_id;
  EXPECT_CODE(s().setattr(theirs, f, cut), Code::kPermissionDenied);
  cut.size_session = w->session_id + 1000;  // no such session
  EXPECT_CODE(s().setattr(mine, f, cut), Code::kPermissionDenied);
  cut.size_session = w->session_id;
  auto done = s().setattr(mine, f, cut);
  ASSERT_OK(done);
  EXPECT_EQ(done->size, 100u);
  ASSERT_OK(s().close(mine, f, w->session_id));
  EXPECT_CODE(s().setattr(mine, f, cut), Code::kPermissionDenied);  // a closed session permits nothing
}

TEST_F(SessionTest, UnlinkedWhileOpenIsQueuedAtLastClose) {
  auto c = s().create(writer(), kRootIno, "f", 0644, true, true);
  Ino f = c->inode.ino;
  auto w2 = s().open(writer(), f, {.write = true});
  ASSERT_OK(w2);
  ASSERT_OK(s().unlink(root(), kRootIno, "f"));
  EXPECT_TRUE(s().gc_pending(10)->empty());
  auto still = s().getattr(root(), f);  // fstat on an open unlinked file
  ASSERT_OK(still);
  EXPECT_EQ(still->nlink, 0u);
  EXPECT_CODE(s().open(writer(), f, {.write = true}), Code::kNotFound);
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
  ASSERT_OK(s().report_length(with_req(root(), 11, 2), a->inode.ino, a->session_id, 1));  // chunks to collect
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

class GcQueueTest : public StoreTest {
 protected:
  // A file with some length, unlinked: queued for chunk GC.
  Ino queued_file(const std::string& name) {
    Ino f = create(name);
    EXPECT_TRUE(s().setattr(root(), f, SetAttr{.size = 1}).has_value());
    EXPECT_TRUE(s().unlink(root(), kRootIno, name).has_value());
    return f;
  }
};

TEST_F(GcQueueTest, Drains) {
  for (int i = 0; i < 5; ++i) queued_file(fmt::format("f{}", i));
  auto first = s().gc_pending(3);
  ASSERT_EQ(first->size(), 3u);
  EXPECT_CODE(s().gc_done(user(1, 1), (*first)[0].ino), Code::kNotPermitted);
  for (auto& item : *first) ASSERT_OK(s().gc_done(root(), item.ino));
  EXPECT_CODE(s().gc_done(root(), (*first)[0].ino), Code::kNotFound);
  EXPECT_EQ(s().gc_pending(10)->size(), 2u);
  auto rest = s().gc_pending(10);
  ASSERT_OK(rest);
  ASSERT_EQ(rest->size(), 2u) << "what was not done is handed out again";
  std::vector<Ino> inos{(*rest)[0].ino, (*rest)[1].ino, (*first)[0].ino};
  auto done = s().gc_done(root(), std::span<const Ino>(inos));
  ASSERT_OK(done);
  EXPECT_EQ(*done, 2u) << "one commit for many files; those done before are skipped";
  EXPECT_TRUE(s().gc_pending(10)->empty());
}

// A worker goes round the queue with a cursor: each scan from one hands out
// what lies behind it, the last comes back short, and a scan from the front
// still finds everything (a cursor scan leaves the floor where it was).
TEST_F(GcQueueTest, ScansFromACursorHandOutWhatLiesBehindIt) {
  std::vector<Ino> queued;
  for (int i = 0; i < 5; ++i) queued.push_back(queued_file(fmt::format("f{}", i)));
  auto inos_of = [](const Result<std::vector<GcItem>>& r) {
    std::vector<Ino> inos;
    for (auto& item : *r) inos.push_back(item.ino);
    return inos;
  };
  auto first = s().gc_pending(2, std::nullopt);
  ASSERT_OK(first);
  EXPECT_EQ(inos_of(first), (std::vector<Ino>{queued[0], queued[1]}));
  auto second = s().gc_pending(2, queued[1]);
  ASSERT_OK(second);
  EXPECT_EQ(inos_of(second), (std::vector<Ino>{queued[2], queued[3]}));
  auto last = s().gc_pending(2, queued[3]);
  ASSERT_OK(last);
  EXPECT_EQ(inos_of(last), (std::vector<Ino>{queued[4]})) << "short: the end of the queue";
  EXPECT_TRUE(s().gc_pending(2, queued[4])->empty());
  EXPECT_TRUE(s().gc_pending(2, std::numeric_limits<Ino>::max())->empty());
  EXPECT_EQ(inos_of(s().gc_pending(10, Ino{0})), queued) << "a cursor below every item";
  EXPECT_EQ(inos_of(s().gc_pending(10)), queued) << "the front is where it was";
  // A cursor below the floor (the front's tombstones) starts at the floor.
  ASSERT_OK(s().gc_done(root(), queued[0]));
  ASSERT_OK(s().gc_done(root(), queued[1]));
  EXPECT_EQ(inos_of(s().gc_pending(10)), (std::vector<Ino>(queued.begin() + 2, queued.end())));
  EXPECT_EQ(inos_of(s().gc_pending(10, queued[0])), (std::vector<Ino>(queued.begin() + 2, queued.end())));
}

// Nothing to remove from storage: an empty file is destroyed without a GC entry.
TEST_F(GcQueueTest, EmptyFilesAreNotQueued) {
  Ino e = create("empty");
  ASSERT_OK(s().unlink(root(), kRootIno, "empty"));
  EXPECT_CODE(s().getattr(root(), e), Code::kNotFound);
  auto w = s().create(writer(), kRootIno, "open-empty", 0644, true, true);
  ASSERT_OK(w);
  ASSERT_OK(s().unlink(root(), kRootIno, "open-empty"));
  ASSERT_OK(s().close(root(), w->inode.ino, w->session_id));
  EXPECT_CODE(s().getattr(root(), w->inode.ino), Code::kNotFound);
  EXPECT_TRUE(s().gc_pending(10)->empty());
  EXPECT_EQ(count_prefix(s().db(), std::string(1, key::kGcPrefix)), 0u);
}

// The queue's front fills with the tombstones of finished items; a scan
// starts past them, finds items queued behind its start later (with the queue
// empty or not), and an empty queue is not scanned at all.
TEST_F(GcQueueTest, ScansSkipFinishedItems) {
  Ino low = create("low");  // the lowest inode, queued after others were done
  ASSERT_OK(s().setattr(root(), low, SetAttr{.size = 1}));
  for (int i = 0; i < 2000; ++i) queued_file(fmt::format("f{}", i));
  struct CountPerf {
    CountPerf() { rocksdb::SetPerfLevel(rocksdb::PerfLevel::kEnableCount); }
    ~CountPerf() { rocksdb::SetPerfLevel(rocksdb::PerfLevel::kDisable); }
  } counting;
  auto skipped_by = [&](auto&& scan) {
    rocksdb::get_perf_context()->Reset();
    scan();
    return rocksdb::get_perf_context()->internal_delete_skipped_count;
  };
  auto finish = [&](const std::vector<GcItem>& batch) {
    std::vector<Ino> inos;
    for (auto& item : batch) inos.push_back(item.ino);
    EXPECT_EQ(*s().gc_done(root(), std::span<const Ino>(inos)), batch.size());
  };
  size_t handed_out = 0;
  uint64_t skipped = 0;
  for (int pass = 0;; ++pass) {
    if (pass == 3) {
      ASSERT_OK(s().unlink(root(), kRootIno, "low"));  // below the scans' start now
    }
    std::vector<GcItem> batch;
    skipped += skipped_by([&] { batch = *s().gc_pending(64); });
    if (batch.empty()) break;
    if (pass == 3) {
      EXPECT_EQ(batch[0].ino, low) << "an item queued below the scans' start is found";
    }
    finish(batch);
    handed_out += batch.size();
  }
  EXPECT_EQ(handed_out, 2001u);
  // Scans from the prefix would wade through every earlier batch's tombstones
  // (~31,000 in all here); starting past them, each tombstone is passed about
  // once (again only after "low" landed below the start).
  EXPECT_LE(skipped, 2u * handed_out) << "scans start past the tombstones of earlier batches";
  Ino late = queued_file("late");
  auto again = s().gc_pending(64);
  ASSERT_EQ(again->size(), 1u) << "an item queued into the emptied queue is found";
  EXPECT_EQ((*again)[0].ino, late);
  ASSERT_OK(s().gc_done(root(), late));
  EXPECT_TRUE(s().gc_pending(64)->empty());
  EXPECT_EQ(skipped_by([&] { EXPECT_TRUE(s().gc_pending(64)->empty()); }), 0u) << "an empty queue is not scanned";
}

TEST(GcFloor, AScanNeverRaisesItAboveWhatWasQueuedDuringTheScan) {
  GcFloor floor;
  EXPECT_FALSE(floor.mark().empty) << "unknown at start: the first scan looks";
  floor.raise(Ino{50});
  EXPECT_EQ(floor.mark().floor, 50u);
  floor.mark();
  floor.lower(70);  // committed while the scan ran: its snapshot may lack it
  floor.raise(Ino{90});
  EXPECT_EQ(floor.mark().floor, 70u) << "not past what was queued during the scan";
  floor.lower(20);
  floor.raise(Ino{60});
  EXPECT_EQ(floor.mark().floor, 20u);
  floor.raise(Ino{60});
  EXPECT_EQ(floor.mark().floor, 60u) << "nothing queued during that scan: past the tombstones";
  floor.mark();
  floor.lower(80);
  floor.raise(std::nullopt);
  EXPECT_FALSE(floor.mark().empty) << "queued during a scan that found nothing";
  floor.raise(std::nullopt);
  EXPECT_TRUE(floor.mark().empty);
  floor.lower(90);
  auto m = floor.mark();
  EXPECT_FALSE(m.empty);
  EXPECT_EQ(m.floor, 90u) << "queued into an empty queue: the scan starts there";
}

}  // namespace
}  // namespace weft::meta::testing
