#include "mgmt/target_states.h"

#include <gtest/gtest.h>

#include "mgmt/test_util.h"

namespace weft::mgmt {
namespace {

constexpr auto S = TargetState::kServing;
constexpr auto Y = TargetState::kSyncing;
constexpr auto O = TargetState::kOffline;
constexpr auto L = TargetState::kLastServing;

ChainInfo chain(std::vector<ChainEntry> entries) {
  ChainInfo c{.id = 7, .table_id = 1, .version = 1, .entries = std::move(entries)};
  EXPECT_TRUE(check_chain(c).has_value()) << check_chain(c).error();
  return c;
}

void expect_chain(const ChainInfo& c, const std::vector<ChainEntry>& want) {
  EXPECT_EQ(c.entries, want);
  EXPECT_TRUE(check_chain(c).has_value()) << check_chain(c).error();
}

TEST(TargetStates, ServingFailsWithOtherServingMovesToEndOffline) {
  ChainInfo c = chain({{1, S}, {2, S}, {3, S}});
  EXPECT_TRUE(fail_target(c, 1));
  expect_chain(c, {{2, S}, {3, S}, {1, O}});
  EXPECT_TRUE(fail_target(c, 3));
  expect_chain(c, {{2, S}, {1, O}, {3, O}});
}

TEST(TargetStates, LastServingFailureKeepsItInPlaceAndDemotesSyncing) {
  ChainInfo c = chain({{2, S}, {3, Y}, {1, O}});
  EXPECT_TRUE(fail_target(c, 2));
  expect_chain(c, {{2, L}, {3, O}, {1, O}});
  EXPECT_FALSE(route_chain(c).has_value());
  EXPECT_EQ(route_chain(c).error().code(), Code::kUnavailable);
}

TEST(TargetStates, SyncingFailsGoesOfflineAtEnd) {
  ChainInfo c = chain({{1, S}, {2, Y}, {3, Y}, {4, O}});
  EXPECT_TRUE(fail_target(c, 2));
  expect_chain(c, {{1, S}, {3, Y}, {4, O}, {2, O}});
}

TEST(TargetStates, SyncDoneMakesServingAfterLastServing) {
  ChainInfo c = chain({{1, S}, {2, Y}, {3, Y}});
  EXPECT_TRUE(sync_done(c, 3));
  expect_chain(c, {{1, S}, {3, S}, {2, Y}});
  EXPECT_TRUE(sync_done(c, 2));
  expect_chain(c, {{1, S}, {3, S}, {2, S}});
}

TEST(TargetStates, OfflineReturnsAsSyncingAtTailOfWritePath) {
  ChainInfo c = chain({{1, S}, {2, Y}, {3, O}, {4, O}});
  EXPECT_TRUE(return_target(c, 4));
  expect_chain(c, {{1, S}, {2, Y}, {4, Y}, {3, O}});
  auto route = route_chain(c);
  ASSERT_TRUE(route.has_value());
  EXPECT_EQ(route->tail(), 4u);
  EXPECT_EQ(route->readable, (std::vector<TargetId>{1}));
}

TEST(TargetStates, OfflineWaitsWhileChainHasOnlyLastServing) {
  ChainInfo c = chain({{1, L}, {2, O}});
  EXPECT_FALSE(return_target(c, 2));
  expect_chain(c, {{1, L}, {2, O}});
}

TEST(TargetStates, LastServingReturnsServingWithoutResyncThenWaitersRejoin) {
  ChainInfo c = chain({{1, L}, {2, O}, {3, O}});
  EXPECT_TRUE(return_target(c, 1));
  expect_chain(c, {{1, S}, {2, O}, {3, O}});
  EXPECT_TRUE(rejoin_up_targets(c, [](TargetId t) { return t == 3; }));
  expect_chain(c, {{1, S}, {3, Y}, {2, O}});
  EXPECT_FALSE(rejoin_up_targets(c, [](TargetId t) { return t == 3; }));
}

TEST(TargetStates, RejoinReturnsLastServingFirstThenWaiters) {
  ChainInfo c = chain({{1, L}, {2, O}, {3, O}});
  EXPECT_FALSE(rejoin_up_targets(c, [](TargetId t) { return t != 1; })) << "waiters wait for target 1";
  expect_chain(c, {{1, L}, {2, O}, {3, O}});
  EXPECT_TRUE(rejoin_up_targets(c, [](TargetId) { return true; }));
  expect_chain(c, {{1, S}, {2, Y}, {3, Y}});
}

TEST(TargetStates, NoOpTransitions) {
  ChainInfo c = chain({{1, S}, {2, Y}, {3, O}});
  EXPECT_FALSE(fail_target(c, 3));    // offline FAIL
  EXPECT_FALSE(return_target(c, 1));  // serving RETURN
  EXPECT_FALSE(return_target(c, 2));  // syncing RETURN
  EXPECT_FALSE(sync_done(c, 1));      // serving SYNCED
  EXPECT_FALSE(sync_done(c, 3));      // offline SYNCED
  EXPECT_FALSE(fail_target(c, 99));   // not a member
  EXPECT_FALSE(return_target(c, 99));
  EXPECT_FALSE(sync_done(c, 99));
  expect_chain(c, {{1, S}, {2, Y}, {3, O}});
  ChainInfo l = chain({{1, L}, {2, O}});
  EXPECT_FALSE(fail_target(l, 1));  // last-serving FAIL
  EXPECT_FALSE(sync_done(l, 1));    // last-serving SYNCED
  expect_chain(l, {{1, L}, {2, O}});
}

TEST(TargetStates, SingleReplicaChainGoesLastServingAndBack) {
  ChainInfo c = chain({{5, S}});
  EXPECT_TRUE(fail_target(c, 5));
  expect_chain(c, {{5, L}});
  EXPECT_TRUE(return_target(c, 5));
  expect_chain(c, {{5, S}});
}

TEST(TargetStates, Summary) {
  EXPECT_EQ(summarize_target(true, std::vector<TargetState>{}), S);
  EXPECT_EQ(summarize_target(false, std::vector<TargetState>{}), O);
  EXPECT_EQ(summarize_target(true, std::vector{S, Y}), Y);
  EXPECT_EQ(summarize_target(true, std::vector{S, O}), O);
  EXPECT_EQ(summarize_target(false, std::vector{O, L}), L);
  EXPECT_EQ(summarize_target(true, std::vector{S, S}), S);
}

}  // namespace
}  // namespace weft::mgmt
