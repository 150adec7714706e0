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
  EXPECT_EQ(h.state->meta_store(), (MetaStoreRecord{.store_id = kOtherStore, .ids_issued_below = 5000}));
  h.reopen();
  EXPECT_EQ(h.state->meta_store(), (MetaStoreRecord{.store_id = kOtherStore, .ids_issued_below = 5000}));
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
