#include "meta/session_reaper.h"

#include <rocksdb/db.h>

#include <map>
#include <string>
#include <vector>

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


// What a dead writer stored past the length counts when its session closes
// (the file's length becomes its end, as its close would have made it); a
// file it left nothing past and an unlinked file close as they did; a
// listing that fails keeps the session.
TEST_F(SessionReaperTest, ADeadWritersDataPastTheLengthCountsWhenItsSessionCloses) {
  Reply wrote = open_for_write(11, "wrote");
  Reply quiet = open_for_write(11, "quiet");
  Reply gone = open_for_write(11, "gone");
  ASSERT_OK(s().report_length(root(), quiet.inode.ino, quiet.session_id, 700));
  ASSERT_OK(s().unlink(root(), kRootIno, "gone"));
  Ino old_file = create("old");
  auto old = s().open(on_connection(root(), 11), old_file, {.read = false, .write = true, .answers_cuts = false});
  ASSERT_OK(old);
  auto quiet_before = s().getattr(root(), quiet.inode.ino);
  ASSERT_OK(quiet_before);
  clock_.advance(120s);
  std::map<Ino, uint64_t> listed;  // inode -> the length it was listed from
  bool storage_away = true;
  StoredEnd stored_end = [&](const Inode& n, uint64_t from) -> Result<uint64_t> {
    EXPECT_EQ(n.size, from);
    listed[n.ino] = from;
    if (storage_away) return error(Code::kUnavailable, "chain 3 has no serving replica");
    if (n.ino == wrote.inode.ino) return uint64_t{5 << 20};
    if (n.ino == old_file) return uint64_t{4096};
    return from;
  };
  auto dead = [](uint64_t) { return false; };
  auto r = reap_sessions(s(), dead, clock_.wall_ns(), stored_end);
  ASSERT_OK(r);
  EXPECT_EQ(r->failed, 3u) << "storage unreachable: nothing known of what was left";
  EXPECT_EQ(r->closed, 1u) << "the unlinked file";
  EXPECT_EQ(sessions_of(wrote.inode.ino), 1u);
  EXPECT_EQ(sessions_of(quiet.inode.ino), 1u);
  EXPECT_EQ(sessions_of(old_file), 1u);
  EXPECT_EQ(listed.count(gone.inode.ino), 0u) << "an unlinked file's chunks all go to GC";
  EXPECT_EQ(sessions_of(gone.inode.ino), 0u);

  storage_away = false;
  listed.clear();
  r = reap_sessions(s(), dead, clock_.wall_ns(), stored_end);
  ASSERT_OK(r);
  EXPECT_EQ(r->closed, 3u);
  EXPECT_EQ(r->lengthened, 2u);
  EXPECT_EQ(r->failed, 0u);
  EXPECT_EQ(listed[quiet.inode.ino], 700u);
  for (Ino f : {wrote.inode.ino, quiet.inode.ino, old_file}) EXPECT_EQ(sessions_of(f), 0u);
  auto n = s().getattr(root(), wrote.inode.ino);
  ASSERT_OK(n);
  EXPECT_EQ(n->size, uint64_t{5 << 20}) << "the dead writer's data is in the file";
  n = s().getattr(root(), old_file);
  ASSERT_OK(n);
  EXPECT_EQ(n->size, 4096u) << "a client from before cut answers: the same";
  n = s().getattr(root(), quiet.inode.ino);
  ASSERT_OK(n);
  EXPECT_EQ(n->size, 700u);
  EXPECT_EQ(n->mtime_ns, quiet_before->mtime_ns) << "nothing found: a plain close";
}

// A truncate while storage is listed, by another client or by the dead
// client itself (cut off from mgmtd, it may still run; its own truncates
// mark none of its sessions): the listing may have counted what it removed,
// so nothing is closed and storage is listed again, up to 3 times in a
// pass, then at the next pass. What was written after the truncate counts.
TEST_F(SessionReaperTest, AFileThatChangesWhileStorageIsListedIsListedAgain) {
  Reply w = open_for_write(11, "f");
  const Ino f = w.inode.ino;
  ASSERT_OK(s().report_length(root(), f, w.session_id, 8000));
  clock_.advance(120s);
  int lists = 0;
  const uint64_t cuts[] = {1000, 900, 800, 700};
  StoredEnd stored_end = [&](const Inode& n, uint64_t from) -> Result<uint64_t> {
    EXPECT_EQ(n.size, from);
    if (lists > 0) {
      EXPECT_EQ(from, cuts[lists - 1]) << "listed again from the new length";
    }
    ++lists;
    if (lists <= 4) {
      SetAttr cut;
      cut.size = cuts[lists - 1];
      Context by = on_connection(root(), lists % 2 == 1 ? 12 : 11);
      EXPECT_TRUE(s().setattr(by, f, cut).has_value());  // the same clock tick: ctime still moves
      return uint64_t{9000};  // what was there before the truncate
    }
    return uint64_t{1500};  // written after the truncates
  };
  auto dead = [](uint64_t) { return false; };
  auto r = reap_sessions(s(), dead, clock_.wall_ns(), stored_end);
  ASSERT_OK(r);
  EXPECT_EQ(lists, 3);
  EXPECT_EQ(r->changed, 1u);
  EXPECT_EQ(r->closed, 0u);
  EXPECT_EQ(sessions_of(f), 1u);
  auto n = s().getattr(root(), f);
  ASSERT_OK(n);
  EXPECT_EQ(n->size, 800u) << "a listing before a truncate brought the removed range back";
  r = reap_sessions(s(), dead, clock_.wall_ns(), stored_end);
  ASSERT_OK(r);
  EXPECT_EQ(lists, 5);
  EXPECT_EQ(r->lengthened, 1u);
  EXPECT_EQ(sessions_of(f), 0u);
  n = s().getattr(root(), f);
  ASSERT_OK(n);
  EXPECT_EQ(n->size, 1500u);
}

// A session whose listing failed waits before its next try (1 s from its
// failure, doubling, at most 5 min) while the others are tried; a stopping
// reaper tries none.
TEST_F(SessionReaperTest, ASessionWhoseListingFailedWaitsItsBackOff) {
  Reply stuck = open_for_write(11, "stuck");
  clock_.advance(120s);
  int tries = 0;
  StoredEnd failing = [&](const Inode&, uint64_t) -> Result<uint64_t> {
    ++tries;
    clock_.advance(10ms);  // a listing takes time: the back-off counts from its failure
    return error(Code::kUnavailable, "no serving replica");
  };
  auto dead = [](uint64_t) { return false; };
  ReapState state;
  state.clock = &clock_;
  auto pass = [&](std::chrono::milliseconds after) {
    clock_.advance(after);
    auto r = reap_sessions(s(), dead, clock_.wall_ns() + 1, failing, &state);  // every session is old enough
    EXPECT_TRUE(r.has_value());
    return r.value_or(ReapResult{});
  };
  EXPECT_EQ(pass(0ms).failed, 1u);  // fails at t0 + 10 ms
  Reply later = open_for_write(11, "later");
  EXPECT_EQ(tries, 1);
  ReapResult r = pass(0ms);
  EXPECT_EQ(r.waiting, 1u);
  EXPECT_EQ(r.failed, 1u) << "the new session is tried";  // fails at t0 + 20 ms
  EXPECT_EQ(tries, 2);
  pass(989ms);  // t0 + 1009 ms
  EXPECT_EQ(tries, 2);
  pass(1ms);  // t0 + 1010 ms: the first is due, not the second
  EXPECT_EQ(tries, 3);
  pass(10ms);
  EXPECT_EQ(tries, 4);
  for (int i = 0; i < 10; ++i) pass(std::chrono::minutes(5));
  for (int i = 0; i < 3; ++i) {
    const int before = tries;
    pass(std::chrono::minutes(5));
    EXPECT_EQ(tries, before + 2) << "at most 5 min apart";
  }
  state.stop = true;
  const int before = tries;
  r = pass(std::chrono::hours(1));
  EXPECT_EQ(tries, before);
  EXPECT_EQ(r.waiting, 2u);
  EXPECT_EQ(sessions_of(stuck.inode.ino), 1u);
  ASSERT_OK(s().close(root(), stuck.inode.ino, stuck.session_id));
  ASSERT_OK(s().close(root(), later.inode.ino, later.session_id));
}

// Many sessions on storage that cannot be listed: a pass gives up listing
// after 4 failures (each costs the storage client's retry time), sessions
// that need no listing still close, and the sessions never tried go first
// in the next pass.
TEST_F(SessionReaperTest, APassListsOnlyUntilFourListingsFailed) {
  std::vector<Reply> files;
  for (int i = 0; i < 10; ++i) files.push_back(open_for_write(11, "f" + std::to_string(i)));
  Reply gone = open_for_write(11, "gone");
  ASSERT_OK(s().unlink(root(), kRootIno, "gone"));
  clock_.advance(120s);
  std::vector<Ino> listed;
  StoredEnd failing = [&](const Inode& n, uint64_t) -> Result<uint64_t> {
    listed.push_back(n.ino);
    return error(Code::kUnavailable, "no serving replica");
  };
  auto dead = [](uint64_t) { return false; };
  ReapState state;
  state.clock = &clock_;
  auto r = reap_sessions(s(), dead, clock_.wall_ns(), failing, &state);
  ASSERT_OK(r);
  EXPECT_EQ(r->failed, 4u);
  EXPECT_EQ(r->waiting, 6u);
  EXPECT_EQ(r->closed, 1u) << "the unlinked file needs no listing";
  EXPECT_EQ(sessions_of(gone.inode.ino), 0u);
  ASSERT_EQ(listed.size(), 4u);
  listed.clear();
  r = reap_sessions(s(), dead, clock_.wall_ns(), failing, &state);
  ASSERT_OK(r);
  ASSERT_EQ(listed.size(), 4u);
  for (Ino ino : listed)
    EXPECT_GE(ino, files[4].inode.ino) << "the sessions not tried yet go first, not those in back-off";
  for (const Reply& f : files) ASSERT_OK(s().close(root(), f.inode.ino, f.session_id));
}

// A writer whose last length report failed abandons its session instead of
// closing it (MetaStore::abandon_session): the reaper closes it once min_age
// has passed since the abandon, whatever the client's lease, with what
// storage holds, but nothing past a length set after the abandon (its
// writes all came before it), even an extension by its own client. Only the
// session's owner (or root) abandons it.
TEST_F(SessionReaperTest, AnAbandonedSessionIsClosedWithWhatStorageHolds) {
  Reply abandoned = open_for_write(11, "abandoned");
  Reply extended = open_for_write(11, "extended");
  Reply kept = open_for_write(11, "kept");
  const Ino f = abandoned.inode.ino, g = extended.inode.ino;
  clock_.advance(600s);
  EXPECT_CODE(s().abandon_session(on_connection(user(1000, 100), 12), f, abandoned.session_id), Code::kBadHandle);
  ASSERT_OK(s().abandon_session(on_connection(root(), 11), f, abandoned.session_id));
  ASSERT_OK(s().abandon_session(on_connection(root(), 11), f, abandoned.session_id));  // again: no change
  EXPECT_CODE(s().abandon_session(on_connection(root(), 11), f, 999), Code::kBadHandle);
  ASSERT_OK(s().abandon_session(on_connection(root(), 11), g, extended.session_id));
  std::string raw;
  ASSERT_TRUE(s().db()->Get(rocksdb::ReadOptions(), key::session(f, abandoned.session_id), &raw).ok());
  EXPECT_TRUE(decode_session(raw)->abandoned);
  SetAttr extend;
  extend.size = 1000;
  extend.no_cut = true;  // an extension: nothing removed on storage
  ASSERT_OK(s().setattr(on_connection(root(), 11), g, extend));
  StoredEnd stored_end = [&](const Inode& n, uint64_t from) -> Result<uint64_t> {
    return n.ino == kept.inode.ino ? from : uint64_t{3 << 20};
  };
  auto alive = [](uint64_t) { return true; };
  const auto min_age = std::chrono::nanoseconds(120s).count();
  auto r = reap_sessions(s(), alive, clock_.wall_ns() - min_age, stored_end);
  ASSERT_OK(r);
  EXPECT_EQ(r->closed, 0u) << "abandoned just now: a write given up on may still land";
  clock_.advance(121s);
  r = reap_sessions(s(), alive, clock_.wall_ns() - min_age, stored_end);
  ASSERT_OK(r);
  EXPECT_EQ(r->closed, 2u);
  EXPECT_EQ(r->lengthened, 2u);
  EXPECT_EQ(sessions_of(f), 0u);
  EXPECT_EQ(sessions_of(g), 0u);
  EXPECT_EQ(sessions_of(kept.inode.ino), 1u) << "a live client's session";
  auto n = s().getattr(root(), f);
  ASSERT_OK(n);
  EXPECT_EQ(n->size, uint64_t{3 << 20});
  n = s().getattr(root(), g);
  ASSERT_OK(n);
  EXPECT_EQ(n->size, 1000u) << "the bytes past the extension were written before it";
  ASSERT_OK(s().close(root(), kept.inode.ino, kept.session_id));
}

// A meta outside a cluster runs no session reaper: an abandon closes the
// session there, as a close does, rather than leave it open for good.
class NoReaperTest : public StoreTest {
 protected:
  StoreOptions options() override {
    StoreOptions o = StoreTest::options();
    o.sessions_reaped = false;
    return o;
  }
};

TEST_F(NoReaperTest, AnAbandonClosesTheSession) {
  auto w = s().create(with_req(root(), 11, 1), kRootIno, "f", 0644, true, /*open_for_write=*/true);
  ASSERT_OK(w);
  ASSERT_OK(s().unlink(root(), kRootIno, "f"));
  ASSERT_OK(s().abandon_session(on_connection(root(), 11), w->inode.ino, w->session_id));
  EXPECT_CODE(s().close(root(), w->inode.ino, w->session_id), Code::kBadHandle);  // closed by the abandon
  EXPECT_CODE(s().getattr(root(), w->inode.ino), Code::kNotFound);  // the unlinked file its session kept is gone
}

}  // namespace
}  // namespace weft::meta::testing
