#include "meta/session_reaper.h"

#include <rocksdb/db.h>

#include "meta/codec.h"
#include "meta/test_util.h"

namespace weft::meta::testing {
namespace {

using namespace std::chrono_literals;

class SessionReaperTest : public StoreTest {
 protected:
  StoreOptions options() override {
    StoreOptions o = StoreTest::options();
    o.clock = &clock_;
    return o;
  }
  size_t sessions_of(Ino ino) {
    std::unique_ptr<rocksdb::Iterator> it(s().db()->NewIterator(rocksdb::ReadOptions()));
    size_t n = 0;
    std::string prefix = key::session_prefix(ino);
    for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) ++n;
    return n;
  }
  Reply open_for_write(uint64_t client, const std::string& name) {
    auto r = s().create(with_req(root(), client, ++seq_), kRootIno, name, 0644, true, /*open_for_write=*/true);
    EXPECT_TRUE(r.has_value()) << r.error();
    return r ? *r : Reply{};
  }
  ManualClock clock_;
  uint64_t seq_ = 0;
};

TEST_F(SessionReaperTest, ClosesOnlyOldSessionsOfClientsWithoutALease) {
  Reply dead_old = open_for_write(11, "dead-old");
  Reply live_old = open_for_write(12, "live-old");
  ASSERT_OK(s().report_length(root(), dead_old.inode.ino, dead_old.session_id, 4096));  // chunks to collect
  ASSERT_OK(s().unlink(root(), kRootIno, "dead-old"));  // kept alive by its session
  clock_.advance(120s);
  Reply dead_new = open_for_write(11, "dead-new");
  auto alive = [](uint64_t id) { return id == 12; };
  auto r = reap_sessions(s(), alive, clock_.wall_ns() - std::chrono::nanoseconds(60s).count());
  ASSERT_OK(r);
  EXPECT_EQ(r->scanned, 3u);
  EXPECT_EQ(r->closed, 1u);
  EXPECT_EQ(sessions_of(dead_old.inode.ino), 0u);
  EXPECT_EQ(sessions_of(live_old.inode.ino), 1u) << "a client holding a lease keeps its sessions";
  EXPECT_EQ(sessions_of(dead_new.inode.ino), 1u) << "young sessions are kept: the first heartbeat may be in flight";
  auto gc = s().gc_pending(10);
  ASSERT_OK(gc);
  ASSERT_EQ(gc->size(), 1u) << "the unlinked file its session kept alive goes to GC";
  EXPECT_EQ((*gc)[0].ino, dead_old.inode.ino);
  ASSERT_OK(s().close(root(), live_old.inode.ino, live_old.session_id));
  ASSERT_OK(s().close(root(), dead_new.inode.ino, dead_new.session_id));
}

// A session whose close fails (its inode record unreadable) is counted and
// skipped: the sessions after it are still closed.
TEST_F(SessionReaperTest, ASessionThatCannotBeClosedDoesNotStopTheOthers) {
  Reply broken = open_for_write(11, "broken");
  Reply later = open_for_write(11, "later");
  ASSERT_LT(broken.inode.ino, later.inode.ino) << "scanned in inode order: the broken one first";
  std::string record;
  ASSERT_TRUE(s().db()->Get(rocksdb::ReadOptions(), key::inode(broken.inode.ino), &record).ok());
  ASSERT_TRUE(s().db()->Put(rocksdb::WriteOptions(), key::inode(broken.inode.ino), "not an inode").ok());
  clock_.advance(120s);
  auto r = reap_sessions(s(), [](uint64_t) { return false; }, clock_.wall_ns() - std::chrono::nanoseconds(60s).count());
  ASSERT_OK(r);
  EXPECT_EQ(r->failed, 1u);
  EXPECT_EQ(r->closed, 1u);
  EXPECT_EQ(sessions_of(later.inode.ino), 0u);
  EXPECT_EQ(sessions_of(broken.inode.ino), 1u);
  ASSERT_TRUE(s().db()->Put(rocksdb::WriteOptions(), key::inode(broken.inode.ino), record).ok());  // for the fsck
  ASSERT_OK(s().close(root(), broken.inode.ino, broken.session_id));
}

TEST_F(SessionReaperTest, NeverClosesWithoutACompleteClientList) {
  Reply f = open_for_write(11, "f");
  clock_.advance(600s);
  bool complete = false;
  bool failing = true;
  SessionReaper reaper(
      s(), clock_,
      [&]() -> Result<std::optional<std::unordered_set<uint64_t>>> {
        if (failing) return error(Code::kUnavailable, "mgmtd away");
        if (!complete) return std::optional<std::unordered_set<uint64_t>>();
        return std::optional<std::unordered_set<uint64_t>>(std::unordered_set<uint64_t>{99});
      },
      std::chrono::hours(1), 60s);
  EXPECT_FALSE(reaper.reap_once().has_value()) << "mgmtd unreachable: an error, nothing closed";
  EXPECT_EQ(sessions_of(f.inode.ino), 1u);
  failing = false;
  ASSERT_OK(reaper.reap_once());
  EXPECT_EQ(sessions_of(f.inode.ino), 1u) << "an incomplete list (mgmtd just restarted) proves nothing";
  complete = true;
  auto r = reaper.reap_once();
  ASSERT_OK(r);
  EXPECT_EQ(r->closed, 1u);
  EXPECT_EQ(sessions_of(f.inode.ino), 0u);
}

// A write open without a request id is owned by its connection's client id
// and reaped like any other; one with no client id at all is refused (no
// lease could ever free its session).
TEST_F(SessionReaperTest, WriteOpensWithoutARequestIdHaveTheirConnectionsOwner) {
  EXPECT_CODE(s().create(root(), kRootIno, "anon", 0644, true, /*open_for_write=*/true), Code::kInvalidArgument);
  EXPECT_CODE(s().lookup(root(), kRootIno, "anon"), Code::kNotFound);
  Ino f = create("f");
  EXPECT_CODE(s().open(user(1000, 100), f, {.read = false, .write = true}), Code::kPermissionDenied);
  EXPECT_CODE(s().open(root(), f, {.read = false, .write = true}), Code::kInvalidArgument);
  EXPECT_EQ(sessions_of(f), 0u);
  auto w = s().open(on_connection(root(), 21), f, {.read = false, .write = true});
  ASSERT_OK(w);
  auto c = s().create(on_connection(root(), 21), kRootIno, "g", 0644, true, /*open_for_write=*/true);
  ASSERT_OK(c);
  std::string raw;
  ASSERT_TRUE(s().db()->Get(rocksdb::ReadOptions(), key::session(f, w->session_id), &raw).ok());
  EXPECT_EQ(decode_session(raw)->client_id, 21u);
  clock_.advance(600s);
  auto r = reap_sessions(s(), [](uint64_t id) { return id != 21; }, clock_.wall_ns());
  ASSERT_OK(r);
  EXPECT_EQ(r->closed, 2u) << "client 21 holds no lease";
  EXPECT_EQ(sessions_of(f), 0u);
  EXPECT_EQ(sessions_of(c->inode.ino), 0u);
}

// Sessions recorded without a client id (before write opens required one)
// belong to no lease that could be missing: they are kept.
TEST_F(SessionReaperTest, SessionsWithoutAClientIdAreKept) {
  Ino f = create("old");
  const uint64_t sid = 987654321;
  ASSERT_TRUE(s().db()->Put(rocksdb::WriteOptions(), key::session(f, sid), encode_session({0, clock_.wall_ns()})).ok());
  clock_.advance(600s);
  auto r = reap_sessions(s(), [](uint64_t) { return false; }, clock_.wall_ns());
  ASSERT_OK(r);
  EXPECT_EQ(r->closed, 0u);
  ASSERT_OK(s().close(root(), f, sid));
}

}  // namespace
}  // namespace weft::meta::testing
