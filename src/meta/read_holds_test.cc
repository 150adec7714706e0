// The read holds the chunk GC respects (meta/read_holds.h), on a manual clock.
#include "meta/read_holds.h"

#include <gtest/gtest.h>

#include <vector>

namespace weft::meta {
namespace {

using namespace std::chrono_literals;

class ReadHoldsTest : public ::testing::Test {
 protected:
  // A file queued now (the wall clock of clock_).
  int64_t now_wall() const { return clock_.wall_ns(); }
  // A file queued a minute ago: only holds and the window can keep it.
  int64_t queued_long_ago() const { return now_wall() - int64_t{60'000'000'000}; }
  std::vector<Ino> inos(std::initializer_list<Ino> l) { return std::vector<Ino>(l); }
  ManualClock clock_;
};

TEST_F(ReadHoldsTest, AFileGoesOnlyOnceItWasQueuedForTheHoldAndTheTableExistedThatLong) {
  ReadHolds h(clock_, 4000ms);
  EXPECT_EQ(h.renew_interval(), 1000ms);
  const int64_t queued_at_start = now_wall();
  clock_.advance(3999ms);
  EXPECT_FALSE(h.may_collect(1, queued_at_start - int64_t{3'600'000'000'000}))
      << "a table younger than the hold has not heard every reader yet (a restarted meta)";
  clock_.advance(1ms);
  EXPECT_TRUE(h.may_collect(1, queued_at_start - int64_t{3'600'000'000'000}));
  const int64_t queued = now_wall();
  clock_.advance(3999ms);
  EXPECT_FALSE(h.may_collect(2, queued)) << "a reader that opened it before the unlink may not have renewed yet";
  clock_.advance(1ms);
  EXPECT_TRUE(h.may_collect(2, queued));
}

TEST_F(ReadHoldsTest, AHeldFileStaysUntilItsHoldersLetGoOrStopRenewing) {
  ReadHolds h(clock_, 4000ms);
  clock_.advance(10s);
  const int64_t old = queued_long_ago();
  ASSERT_TRUE(h.renew(7, inos({1, 2})).has_value());
  ASSERT_TRUE(h.renew(8, inos({2, 3})).has_value());
  EXPECT_EQ(h.clients(), 2u);
  EXPECT_EQ(h.held(), 3u);
  EXPECT_FALSE(h.may_collect(1, old));
  EXPECT_FALSE(h.may_collect(2, old));
  EXPECT_TRUE(h.may_collect(4, old));
  // A renewal replaces the client's list: 1 is no longer open there.
  ASSERT_TRUE(h.renew(7, inos({2})).has_value());
  EXPECT_TRUE(h.may_collect(1, old));
  EXPECT_FALSE(h.may_collect(2, old));
  // Client 8 let go of everything; 7 still holds 2.
  ASSERT_TRUE(h.renew(8, {}).has_value());
  EXPECT_EQ(h.clients(), 1u);
  EXPECT_TRUE(h.may_collect(3, old));
  EXPECT_FALSE(h.may_collect(2, old));
  // Client 7 stops renewing (crashed, cut off): its hold lasts `hold` from its last renewal.
  clock_.advance(3999ms);
  EXPECT_FALSE(h.may_collect(2, old));
  clock_.advance(1ms);
  EXPECT_TRUE(h.may_collect(2, old));
  EXPECT_EQ(h.clients(), 0u);
  EXPECT_EQ(h.held(), 0u);
}

TEST_F(ReadHoldsTest, ARenewalOlderThanOneTakenChangesNothing) {
  ReadHolds h(clock_, 4000ms);
  clock_.advance(10s);
  const int64_t old = queued_long_ago();
  ASSERT_TRUE(h.renew(7, inos({1}), 5).has_value());
  ASSERT_TRUE(h.renew(7, inos({2}), 7).has_value());
  clock_.advance(3s);
  // Renewal 6 timed out at the client and reaches meta only now.
  EXPECT_TRUE(h.renew(7, inos({1}), 6).has_value()) << "not an error: the client has moved on";
  EXPECT_TRUE(h.renew(7, inos({1}), 7).has_value()) << "nor is a duplicate";
  EXPECT_TRUE(h.renew(7, inos({2}), 6).has_value()) << "a late one naming the same list";
  EXPECT_TRUE(h.may_collect(1, old)) << "renewal 7's list stands";
  EXPECT_FALSE(h.may_collect(2, old));
  clock_.advance(1s);
  EXPECT_TRUE(h.may_collect(2, old)) << "the late renewals renewed nothing either";
  // A release (an empty list) stands against a late renewal too, though
  // the client's holder is gone.
  ASSERT_TRUE(h.renew(9, inos({5}), 5).has_value());
  ASSERT_TRUE(h.renew(9, {}, 6).has_value());
  EXPECT_EQ(h.clients(), 0u) << "client 7 expired, client 9 released";
  ASSERT_TRUE(h.renew(9, inos({5}), 5).has_value());
  EXPECT_TRUE(h.may_collect(5, old)) << "the late renewal brought the released list back";
  ASSERT_TRUE(h.renew(9, inos({5}), 7).has_value());
  EXPECT_FALSE(h.may_collect(5, old)) << "a newer one holds again";
  // Unnumbered renewals (a client from before numbering) always count.
  ASSERT_TRUE(h.renew(8, inos({3}), 0).has_value());
  ASSERT_TRUE(h.renew(8, inos({4}), 0).has_value());
  EXPECT_TRUE(h.may_collect(3, old));
  EXPECT_FALSE(h.may_collect(4, old));
}

TEST_F(ReadHoldsTest, RenewingKeepsAHoldPastItsFirstExpiry) {
  ReadHolds h(clock_, 4000ms);
  clock_.advance(10s);
  const int64_t old = queued_long_ago();
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(h.renew(7, inos({5})).has_value());
    clock_.advance(h.renew_interval());
    EXPECT_FALSE(h.may_collect(5, old)) << "renewal " << i;
  }
}

TEST_F(ReadHoldsTest, BadRenewalsAreRefusedAndChangeNothing) {
  ReadHolds h(clock_, 4000ms);
  clock_.advance(10s);
  const int64_t old = queued_long_ago();
  EXPECT_EQ(h.renew(0, inos({1})).error().code(), Code::kInvalidArgument) << "a connection without a client id";
  ASSERT_TRUE(h.renew(7, inos({1})).has_value());
  std::vector<Ino> many(ReadHolds::kInodesPerClientMax + 1, 9);
  EXPECT_EQ(h.renew(7, many).error().code(), Code::kTooBig);
  EXPECT_FALSE(h.may_collect(1, old)) << "a refused renewal keeps the client's previous list";
  EXPECT_TRUE(h.may_collect(9, old));
}

TEST_F(ReadHoldsTest, AllClientsTogetherHoldABoundedNumberOfInodes) {
  ReadHolds h(clock_, 4000ms);
  std::vector<Ino> full(ReadHolds::kInodesPerClientMax);
  for (size_t i = 0; i < full.size(); ++i) full[i] = i + 1;
  const uint64_t clients = ReadHolds::kInodesMax / ReadHolds::kInodesPerClientMax;
  for (uint64_t c = 1; c <= clients; ++c) ASSERT_TRUE(h.renew(c, full).has_value()) << c;
  EXPECT_EQ(h.renew(clients + 1, inos({1})).error().code(), Code::kOverloaded);
  EXPECT_TRUE(h.renew(1, inos({1})).has_value()) << "a client that shrinks its list always may";
  EXPECT_TRUE(h.renew(clients + 1, inos({1})).has_value()) << "room again";
}

TEST_F(ReadHoldsTest, NothingGoesForAHoldAfterTheWindowRestarts) {
  ReadHolds h(clock_, 4000ms);
  clock_.advance(10s);
  const int64_t old = queued_long_ago();
  ASSERT_TRUE(h.may_collect(1, old));
  h.restart_window();  // meta starts serving, or regained its lease: readers renew first
  clock_.advance(3999ms);
  EXPECT_FALSE(h.may_collect(1, old));
  clock_.advance(1ms);
  EXPECT_TRUE(h.may_collect(1, old));
}

TEST_F(ReadHoldsTest, ARefusedRenewalOfAClientKeepsWhatItHeld) {
  ReadHolds h(clock_, 4000ms);
  clock_.advance(10s);
  const int64_t old = queued_long_ago();
  std::vector<Ino> full(ReadHolds::kInodesPerClientMax);
  for (size_t i = 0; i < full.size(); ++i) full[i] = i + 1000;
  const std::vector<Ino> almost(full.begin(), full.end() - 1);
  const uint64_t clients = ReadHolds::kInodesMax / ReadHolds::kInodesPerClientMax;
  ASSERT_TRUE(h.renew(clients + 1, inos({7})).has_value());
  for (uint64_t c = 1; c < clients; ++c) ASSERT_TRUE(h.renew(c, full).has_value()) << c;
  ASSERT_TRUE(h.renew(clients, almost).has_value()) << "exactly full now";
  clock_.advance(3s);
  auto refused = h.renew(clients + 1, inos({7, 8}));
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code(), Code::kOverloaded);
  clock_.advance(3s);  // past the first renewal's expiry; the others' lists lapsed
  EXPECT_FALSE(h.may_collect(7, old)) << "the refused renewal kept the client's earlier hold";
  EXPECT_TRUE(h.may_collect(1000, old));
  clock_.advance(1s);
  EXPECT_TRUE(h.may_collect(7, old)) << "renewed for one hold only";
}

TEST_F(ReadHoldsTest, AZeroHoldKeepsNothing) {
  ReadHolds h(clock_, 0ms);
  EXPECT_EQ(h.renew_interval(), 0ms);
  ASSERT_TRUE(h.renew(7, inos({1})).has_value());
  EXPECT_EQ(h.clients(), 0u);
  EXPECT_TRUE(h.may_collect(1, now_wall()));
}

}  // namespace
}  // namespace weft::meta
