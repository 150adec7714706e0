// mgmtd's check of meta's store (mgmt/cluster_state.h, "Meta's store"): the
// first store heard becomes the cluster's, the highest issued-id mark heard is
// kept (registrations and heartbeats), another store or a lower mark is
// refused unless the operator accepts the change, and the record survives a
// restart of mgmtd.
#include <gtest/gtest.h>

#include "mgmt/state_codec.h"
#include "mgmt/test_util.h"

namespace weft::mgmt {
namespace {

using testing::Harness;
using testing::TempDir;
using namespace std::chrono_literals;

constexpr uint64_t kStore = 0xa11ce, kOtherStore = 0xb0b;

RegisterRequest meta(uint64_t store_id, uint64_t mark, uint64_t incarnation = 1, bool accept = false) {
  return {.kind = NodeKind::kMeta,
          .address = "meta:8000",
          .incarnation = incarnation,
          .meta_store = {.store_id = store_id, .ids_issued_below = mark},
          .accept_store_change = accept};
}

TEST(MetaStoreCheck, TheFirstStoreHeardBecomesTheClustersAndTheSameStoreIsAccepted) {
  Harness h;
  EXPECT_EQ(h.state->meta_store(), MetaStoreRecord{}) << "a new cluster knows no store";
  auto first = h.state->register_node(meta(kStore, 5000));
  ASSERT_TRUE(first) << first.error();
  EXPECT_TRUE(first->meta_store_checked);
  EXPECT_EQ(first->meta_ids_mark, 0u);
  EXPECT_EQ(h.state->meta_store(), (MetaStoreRecord{.store_id = kStore, .ids_issued_below = 5000}));
  // The same store restarted (a new incarnation) with the same or a higher mark.
  auto same = h.state->register_node(meta(kStore, 5000, 2));
  ASSERT_TRUE(same) << same.error();
  EXPECT_EQ(same->meta_ids_mark, 5000u);
  auto higher = h.state->register_node(meta(kStore, 9000, 3));
  ASSERT_TRUE(higher) << higher.error();
  EXPECT_EQ(h.state->meta_store().ids_issued_below, 9000u);
}

TEST(MetaStoreCheck, AnotherStoreIsRefusedSayingWhatToDo) {
  Harness h;
  ASSERT_TRUE(h.state->register_node(meta(kStore, 5000)));
  // Meta restarted on an empty data_dir: a new store, counting from the start.
  auto other = h.state->register_node(meta(kOtherStore, 2, 2));
  ASSERT_FALSE(other);
  EXPECT_EQ(other.error().code(), Code::kNotPermitted);
  const std::string& why = other.error().message();
  EXPECT_NE(why.find("data_dir"), std::string::npos) << why;
  EXPECT_NE(why.find("--accept-store-change"), std::string::npos) << why;
  EXPECT_EQ(why.find('\n'), std::string::npos) << "one line";
  EXPECT_EQ(h.state->meta_store(), (MetaStoreRecord{.store_id = kStore, .ids_issued_below = 5000}));
  EXPECT_EQ(h.state->routing().nodes.at(1).incarnation, 1u) << "the refused registration left no trace";
  // Another store with a higher mark is another store all the same.
  EXPECT_FALSE(h.state->register_node(meta(kOtherStore, 1'000'000, 3)));
}

TEST(MetaStoreCheck, ALowerMarkIsRefused) {
  Harness h;
  ASSERT_TRUE(h.state->register_node(meta(kStore, 5000)));
  // The same store restored from an older copy: it would issue ids 4096.. again.
  auto older = h.state->register_node(meta(kStore, 4096, 2));
  ASSERT_FALSE(older);
  EXPECT_EQ(older.error().code(), Code::kNotPermitted);
  EXPECT_NE(older.error().message().find("backup"), std::string::npos) << older.error();
  EXPECT_NE(older.error().message().find("--accept-store-change"), std::string::npos) << older.error();
  EXPECT_EQ(h.state->meta_store().ids_issued_below, 5000u);
}

TEST(MetaStoreCheck, HeartbeatsOfTheMetaNodeRaiseTheMark) {
  Harness h;
  RegisterReply m = h.state->register_node(meta(kStore, 5000)).value();
  ASSERT_TRUE(h.state->heartbeat({.node_id = m.node_id, .incarnation = 1, .meta_ids_issued_below = 9096}));
  EXPECT_EQ(h.state->meta_store().ids_issued_below, 9096u);
  ASSERT_TRUE(h.state->heartbeat({.node_id = m.node_id, .incarnation = 1, .meta_ids_issued_below = 10}));
  EXPECT_EQ(h.state->meta_store().ids_issued_below, 9096u) << "never lowered";
  ASSERT_TRUE(h.state->heartbeat({.node_id = m.node_id, .incarnation = 1}));
  EXPECT_EQ(h.state->meta_store().ids_issued_below, 9096u) << "0: not told";
  // Only a meta node speaks for meta's store.
  NodeId storage = h.add_storage(1, 1).node_id;
  ASSERT_TRUE(h.state->heartbeat({.node_id = storage, .incarnation = 1, .meta_ids_issued_below = 1 << 30}));
  EXPECT_EQ(h.state->meta_store().ids_issued_below, 9096u);
  // The restarted meta must now report at least the raised mark.
  EXPECT_FALSE(h.state->register_node(meta(kStore, 5000, 2)));
  EXPECT_TRUE(h.state->register_node(meta(kStore, 9096, 2)));
}

TEST(MetaStoreCheck, TheRecordSurvivesARestartOfMgmtd) {
  TempDir dir;
  Harness h(dir.path() + "/state");
  RegisterReply m = h.state->register_node(meta(kStore, 5000)).value();
  ASSERT_TRUE(h.state->heartbeat({.node_id = m.node_id, .incarnation = 1, .meta_ids_issued_below = 9096}));
  h.reopen();
  ASSERT_TRUE(h.state);
  EXPECT_EQ(h.state->meta_store(), (MetaStoreRecord{.store_id = kStore, .ids_issued_below = 9096}));
  EXPECT_FALSE(h.state->register_node(meta(kOtherStore, 2, 2))) << "another store, after the restart too";
  EXPECT_FALSE(h.state->register_node(meta(kStore, 5000, 2))) << "a lower mark, after the restart too";
  EXPECT_TRUE(h.state->register_node(meta(kStore, 9096, 2)));
}

TEST(MetaStoreCheck, TheOperatorsOverrideRecordsTheNewStoreAndKeepsTheHigherMark) {
  TempDir dir;
  Harness h(dir.path() + "/state");
  ASSERT_TRUE(h.state->register_node(meta(kStore, 5000)));
  auto changed = h.state->register_node(meta(kOtherStore, 2, 2, /*accept=*/true));
  ASSERT_TRUE(changed) << changed.error();
  EXPECT_TRUE(changed->meta_store_checked);
  EXPECT_EQ(changed->meta_ids_mark, 5000u) << "what the new store must raise its next id past";
  // The record is the floor the new store raises its ids to before it serves
  // (not its mark before that): its ids are covered from the first one.
  const MetaStoreRecord raised{.store_id = kOtherStore, .ids_issued_below = 5000 + kStoreChangeIdMargin};
  EXPECT_EQ(h.state->meta_store(), raised);
  h.reopen();
  EXPECT_EQ(h.state->meta_store(), raised);
  // Until the new store raised its ids (and reports so), its low mark is refused
  // without the flag: a crash before the raise cannot slip through.
  EXPECT_FALSE(h.state->register_node(meta(kOtherStore, 2, 3)));
  EXPECT_FALSE(h.state->register_node(meta(kStore, 5000, 3))) << "the old store is another store now";
  EXPECT_TRUE(h.state->register_node(meta(kOtherStore, 5000 + (1ull << 32), 3)));
  // A lower mark of the same store, accepted.
  auto restored = h.state->register_node(meta(kOtherStore, 7, 4, /*accept=*/true));
  ASSERT_TRUE(restored) << restored.error();
  EXPECT_EQ(restored->meta_ids_mark, 5000 + (1ull << 32));
}

// Store S2 was accepted, served without a heartbeat reaching mgmtd, and S3
// replaced it: S3 raised past the floor recorded for S2, not past S2's mark
// before its raise, so S3's ids are not S2's; and a restarted S2 (its mark
// above the floor) does not pass for a change mgmtd missed, even with
// --accept-older-state.
TEST(MetaStoreCheck, ASecondChangeRaisesPastTheFirstOnesFloorBeforeItsFirstHeartbeat) {
  TempDir dir;
  Harness h(dir.path() + "/state");
  ASSERT_TRUE(h.state->register_node(meta(kStore, 5000)));
  auto s2 = h.state->register_node(meta(kOtherStore, 2, 2, /*accept=*/true));
  ASSERT_TRUE(s2) << s2.error();
  const uint64_t s2_floor = s2->meta_ids_mark + kStoreChangeIdMargin;  // what S2 raised to
  constexpr uint64_t kThirdStore = 0xc0c;
  auto s3 = h.state->register_node(meta(kThirdStore, 2, 3, /*accept=*/true));
  ASSERT_TRUE(s3) << s3.error();
  EXPECT_GE(s3->meta_ids_mark, s2_floor) << "S3 raises past every id S2 may have issued since its raise";
  h.options.accept_older_state = true;
  h.reopen();
  EXPECT_FALSE(h.state->register_node(meta(kOtherStore, s2_floor + 100, 4))) << "S2 restarted: not the store of record";
  EXPECT_EQ(h.state->meta_store().store_id, kThirdStore);
}

TEST(MetaStoreCheck, AMetaThatReportsNoStoreIsAcceptedUnchecked) {
  Harness h;
  ASSERT_TRUE(h.state->register_node(meta(kStore, 5000)));
  auto old = h.state->register_node(meta(0, 0, 2));
  ASSERT_TRUE(old) << old.error();
  EXPECT_FALSE(old->meta_store_checked);
  EXPECT_EQ(h.state->meta_store(), (MetaStoreRecord{.store_id = kStore, .ids_issued_below = 5000}));
  // Storage nodes carry no store at all.
  EXPECT_TRUE(h.add_storage(1, 1).node_id != kInvalidNode);
  EXPECT_EQ(h.state->meta_store().store_id, kStore);
}

// Without a record there is no mark to raise a new store's ids past: the
// operator's override is refused (saying to start without it), nothing is
// recorded; without it, the store is recorded as the first heard.
TEST(MetaStoreCheck, TheOverrideIsRefusedWhileNoStoreIsRecorded) {
  Harness h;
  auto refused = h.state->register_node(meta(kStore, 5000, 1, /*accept=*/true));
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), Code::kNotPermitted);
  EXPECT_NE(refused.error().message().find("no record"), std::string::npos) << refused.error();
  EXPECT_NE(refused.error().message().find("without the flag"), std::string::npos) << refused.error();
  EXPECT_EQ(h.state->meta_store(), MetaStoreRecord{});
  EXPECT_TRUE(h.state->routing().nodes.empty()) << "the refused registration left no trace";
  ASSERT_TRUE(h.state->register_node(meta(kStore, 5000, 2)));
  EXPECT_EQ(h.state->meta_store(), (MetaStoreRecord{.store_id = kStore, .ids_issued_below = 5000}));
}

// A running meta heartbeats with its store id: once another meta's accepted
// change replaced its store, its heartbeats are refused (kNotPermitted: its
// client fences itself) and its mark no longer counts.
TEST(MetaStoreCheck, AHeartbeatOfAReplacedStoreIsRefused) {
  Harness h;
  RegisterReply old_meta = h.state->register_node(meta(kStore, 5000)).value();
  ASSERT_TRUE(h.state->heartbeat({.node_id = old_meta.node_id, .incarnation = 1, .meta_ids_issued_below = 6000,
                                  .meta_store_id = kStore}));
  RegisterRequest other = meta(kOtherStore, 2, 1, /*accept=*/true);
  other.address = "meta2:8000";
  RegisterReply new_meta = h.state->register_node(other).value();
  const RoutingVersion after_change = h.state->routing_version();
  EXPECT_EQ(h.state->routing().meta_store_id, kOtherStore) << "routing shows the store of record";
  auto refused = h.state->heartbeat({.node_id = old_meta.node_id, .incarnation = 1, .meta_ids_issued_below = 7000,
                                     .meta_store_id = kStore});
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), Code::kNotPermitted);
  EXPECT_NE(refused.error().message().find("no longer the cluster's meta store"), std::string::npos)
      << refused.error();
  EXPECT_EQ(refused.error().message().find('\n'), std::string::npos) << "one line";
  EXPECT_EQ(h.state->meta_store(), (MetaStoreRecord{.store_id = kOtherStore, .ids_issued_below = 6000 + (1ull << 32)}));
  ASSERT_TRUE(h.state->heartbeat({.node_id = new_meta.node_id, .incarnation = 1,
                                  .meta_ids_issued_below = 6000 + (1ull << 32), .meta_store_id = kOtherStore}));
  EXPECT_EQ(h.state->meta_store().ids_issued_below, 6000 + (1ull << 32));
  EXPECT_EQ(h.state->routing_version(), after_change) << "a mark is not a routing change";
  // A meta older than the store id in heartbeats is not checked.
  EXPECT_TRUE(h.state->heartbeat({.node_id = old_meta.node_id, .incarnation = 1}));
}

// Split brain: a meta cut off from mgmtd keeps its lease until it runs out,
// and serves the replaced store meanwhile. The meta taking over is told to
// wait until no other meta can hold a lease: lease + grace after the last
// heartbeat mgmtd accepted from any of them (mgmt/lease.h), a longer lease
// granted before a restart of mgmtd too; a meta declared dead holds none. A
// retried registration of the same process (its first reply lost) is told
// again, its own first registration counting (it overwrote the record of a
// former process at its address).
TEST(MetaStoreCheck, AStoreChangeServesOnlyOnceNoMetaOnTheReplacedStoreCanHoldALease) {
  Harness h;  // lease 10 s, grace 5 s
  RegisterReply old_meta = h.state->register_node(meta(kStore, 5000)).value();
  EXPECT_EQ(old_meta.serve_after, Duration::zero()) << "no change";
  h.clock.advance(4s);
  ASSERT_TRUE(h.state->heartbeat({.node_id = old_meta.node_id, .incarnation = 1, .meta_store_id = kStore}));
  h.clock.advance(3s);  // the old meta's lease (sent before mgmtd got it) ends at most 10 s after that heartbeat
  RegisterRequest other = meta(kOtherStore, 2, 7, /*accept=*/true);
  other.address = "meta2:8000";
  auto changed = h.state->register_node(other);
  ASSERT_TRUE(changed) << changed.error();
  EXPECT_EQ(changed->serve_after, 12s) << "10 s lease + 5 s grace after the heartbeat 3 s ago";
  // The old meta's next heartbeat is refused and renews nothing.
  h.clock.advance(1s);
  ASSERT_FALSE(h.state->heartbeat({.node_id = old_meta.node_id, .incarnation = 1, .meta_store_id = kStore}));
  auto retried = h.state->register_node(other);  // its first reply was lost
  ASSERT_TRUE(retried) << retried.error();
  EXPECT_EQ(retried->serve_after, 14s) << "its own first registration's record counts: 15 s after it";
  // Past the deadline mgmtd declares the old meta dead: it counts no more. A
  // former incarnation at the new meta's own address does (it may still run
  // where clients reach it): the new meta restarted with the flag again.
  h.clock.advance(11s);
  ASSERT_TRUE(h.state->tick());
  EXPECT_EQ(h.state->routing().nodes.at(old_meta.node_id).state, NodeState::kDown);
  other.incarnation = 8;
  auto restarted = h.state->register_node(other);
  ASSERT_TRUE(restarted) << restarted.error();
  EXPECT_EQ(restarted->serve_after, 4s) << "incarnation 7 re-registered 11 s ago, its lease then ended 15 s later";
  h.clock.advance(5s);
  other.incarnation = 9;
  EXPECT_EQ(h.state->register_node(other)->serve_after, 10s) << "incarnation 8 registered 5 s ago";
  // Storage nodes and a meta without the flag never wait.
  EXPECT_EQ(h.add_storage(0, 1).serve_after, Duration::zero());
}

// The wait goes with the change, not with the flag: a meta that registered
// with --accept-store-change and restarts without it before its wait is over
// still waits for a meta at another address; alone at its address, a meta
// restarting on the cluster's store waits for nothing.
TEST(MetaStoreCheck, AMetaRestartedWithoutTheFlagStillWaitsForAnotherMetasLease) {
  Harness h;  // lease 10 s, grace 5 s
  ASSERT_TRUE(h.state->register_node(meta(kStore, 5000)));
  RegisterRequest other = meta(kOtherStore, 2, 1, /*accept=*/true);
  other.address = "meta2:8000";
  EXPECT_EQ(h.state->register_node(other)->serve_after, 15s);
  h.clock.advance(2s);
  RegisterRequest restarted = meta(kOtherStore, h.state->meta_store().ids_issued_below, 2);
  restarted.address = "meta2:8000";
  auto r = h.state->register_node(restarted);
  ASSERT_TRUE(r) << r.error();
  EXPECT_EQ(r->serve_after, 13s) << "the meta on the replaced store may still serve";
  h.clock.advance(13s);
  ASSERT_TRUE(h.state->tick());
  restarted.incarnation = 3;
  EXPECT_EQ(h.state->register_node(restarted)->serve_after, Duration::zero())
      << "the other meta is down; its own former incarnation is the cluster's store";
}

// mgmtd restored from a backup older than a store change: the meta serving
// the new store issued ids from past the recorded mark plus the margin (its
// raise). Refused without --accept-older-state (kVersionMismatch: the meta
// waits, not fenced), naming the option; recorded with it. A fresh or wrong
// store (a low mark), an older copy (a lower mark), or another store below
// that bound stay refused as before, with the option too: only the meta's
// --accept-store-change takes them.
TEST(MetaStoreCheck, AStoreFromAChangeMgmtdsOlderStateMissedNeedsAcceptOlderState) {
  TempDir dir;
  Harness h(dir.path() + "/state");
  ASSERT_TRUE(h.state->register_node(meta(kStore, 5000)));  // the backup's record
  const uint64_t changed_mark = 9000 + kStoreChangeIdMargin;
  auto behind = h.state->register_node(meta(kOtherStore, changed_mark, 2));
  ASSERT_FALSE(behind);
  EXPECT_EQ(behind.error().code(), Code::kVersionMismatch);
  EXPECT_NE(behind.error().message().find("--accept-older-state"), std::string::npos) << behind.error();
  EXPECT_EQ(behind.error().message().find('\n'), std::string::npos) << "one line";
  EXPECT_EQ(h.state->meta_store(), (MetaStoreRecord{.store_id = kStore, .ids_issued_below = 5000}));

  h.options.accept_older_state = true;
  h.reopen();
  // Still refused, with the option: an emptied data_dir, an older copy, a store below the bound.
  auto fresh = h.state->register_node(meta(0xf5e5, 2, 3));
  ASSERT_FALSE(fresh);
  EXPECT_EQ(fresh.error().code(), Code::kNotPermitted);
  EXPECT_NE(fresh.error().message().find("--accept-store-change"), std::string::npos) << fresh.error();
  EXPECT_FALSE(h.state->register_node(meta(kStore, 4000, 3))) << "an older copy of the recorded store";
  EXPECT_FALSE(h.state->register_node(meta(0xf5e5, 5000 + kStoreChangeIdMargin - 1, 3))) << "below the bound";
  EXPECT_EQ(h.state->meta_store(), (MetaStoreRecord{.store_id = kStore, .ids_issued_below = 5000}));
  // The cluster's newer view.
  const RoutingVersion before = h.state->routing_version();
  auto accepted = h.state->register_node(meta(kOtherStore, changed_mark, 3));
  ASSERT_TRUE(accepted) << accepted.error();
  EXPECT_EQ(h.state->meta_store(), (MetaStoreRecord{.store_id = kOtherStore, .ids_issued_below = changed_mark}));
  EXPECT_GT(h.state->routing_version(), before);
  EXPECT_EQ(h.state->routing().meta_store_id, kOtherStore);
  h.reopen();
  EXPECT_EQ(h.state->meta_store(), (MetaStoreRecord{.store_id = kOtherStore, .ids_issued_below = changed_mark}));
  EXPECT_EQ(h.state->routing().meta_store_id, kOtherStore) << "routing shows the record after a restart too";
  EXPECT_FALSE(h.state->register_node(meta(kStore, 5000, 4))) << "the old store is another store now";
}

// The same through heartbeats: a meta that kept running while mgmtd was
// restored (mgmtd knows its node and incarnation) and serves a store from a
// change the restored state does not know.
TEST(MetaStoreCheck, AHeartbeatFromAChangeMgmtdsOlderStateMissedNeedsAcceptOlderState) {
  TempDir dir;
  Harness h(dir.path() + "/state");
  RegisterReply m = h.state->register_node(meta(kStore, 5000)).value();
  const HeartbeatRequest beat{.node_id = m.node_id, .incarnation = 1,
                              .meta_ids_issued_below = 9000 + kStoreChangeIdMargin, .meta_store_id = kOtherStore};
  auto refused = h.state->heartbeat(beat);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), Code::kVersionMismatch);
  EXPECT_NE(refused.error().message().find("--accept-older-state"), std::string::npos) << refused.error();
  auto fresh = h.state->heartbeat({.node_id = m.node_id, .incarnation = 1, .meta_ids_issued_below = 9,
                                   .meta_store_id = 0xf5e5});
  ASSERT_FALSE(fresh);
  EXPECT_EQ(fresh.error().code(), Code::kNotPermitted);
  h.options.accept_older_state = true;
  h.reopen();
  const RoutingVersion before = h.state->routing_version();
  ASSERT_TRUE(h.state->heartbeat(beat));
  EXPECT_EQ(h.state->meta_store(), (MetaStoreRecord{.store_id = kOtherStore, .ids_issued_below = beat.meta_ids_issued_below}));
  EXPECT_GT(h.state->routing_version(), before) << "storage learns the store of record";
  EXPECT_FALSE(h.state->heartbeat({.node_id = m.node_id, .incarnation = 1, .meta_ids_issued_below = 9,
                                   .meta_store_id = 0xf5e5}))
      << "a fresh store, with the option too";
}

TEST(StateCodec, TheMetaStoreRecordRoundTripsAndAnOlderStateHasNone) {
  const MetaStoreRecord in{.store_id = 0xfeedfacecafe, .ids_issued_below = 1ull << 40};
  PersistedState out;
  ASSERT_TRUE(decode_record(meta_store_key(), encode_meta_store(in), out).has_value());
  EXPECT_EQ(out.meta_store, in);
  std::string cut = encode_meta_store(in);
  cut.pop_back();
  EXPECT_FALSE(decode_record(meta_store_key(), cut, out).has_value());
  // A state directory written before the record: none known, nothing refused.
  TempDir dir;
  {
    Harness h(dir.path() + "/state");
    h.add_storage(1, 1);
  }
  Harness h(dir.path() + "/state");
  EXPECT_EQ(h.state->meta_store(), MetaStoreRecord{});
  EXPECT_TRUE(h.state->register_node(meta(kStore, 5000)));
}

}  // namespace
}  // namespace weft::mgmt
