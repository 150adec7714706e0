#include "mgmt/lease.h"

#include <deque>
#include <tuple>

#include <gtest/gtest.h>

#include "mgmt/test_util.h"

namespace weft::mgmt {
namespace {

using namespace std::chrono_literals;

TEST(LeaseKeeper, GrantCountsFromSendTimeAndOnlyExtends) {
  ManualClock clock;
  LeaseKeeper keeper(clock);
  EXPECT_FALSE(keeper.can_serve_writes()) << "no lease before the first grant";
  HeartbeatTicket first = keeper.begin_heartbeat();
  clock.advance(3s);  // the reply takes 3 s
  keeper.on_granted(first, 10s);
  EXPECT_TRUE(keeper.can_serve_writes());
  EXPECT_EQ(keeper.remaining(), 7s);
  HeartbeatTicket second = keeper.begin_heartbeat();
  clock.advance(1s);
  keeper.on_granted(second, 10s);
  EXPECT_EQ(keeper.remaining(), 9s);
  keeper.on_granted(first, 10s);  // a duplicate of an older reply never shortens
  EXPECT_EQ(keeper.remaining(), 9s);
  clock.advance(9s - 1ns);
  EXPECT_TRUE(keeper.can_serve_writes());
  clock.advance(1ns);
  EXPECT_FALSE(keeper.can_serve_writes());
  EXPECT_EQ(keeper.remaining(), Duration::zero());
}

// The meta GC restarts its read-hold window after any gap in its lease,
// even one that began and ended between two of its looks.
TEST(LeaseKeeper, CountsTheGapsInTheLease) {
  ManualClock clock;
  LeaseKeeper keeper(clock);
  keeper.on_granted(keeper.begin_heartbeat(), 3s);
  EXPECT_EQ(keeper.gaps(), 0u) << "the first grant ends no gap";
  clock.advance(2s);
  keeper.on_granted(keeper.begin_heartbeat(), 3s);
  EXPECT_EQ(keeper.gaps(), 0u) << "renewed in time";
  clock.advance(4s);  // ran out 1 s ago
  HeartbeatTicket late = keeper.begin_heartbeat();
  keeper.on_granted(late, 3s);
  EXPECT_EQ(keeper.gaps(), 1u);
  keeper.revoke();
  EXPECT_EQ(keeper.gaps(), 2u);
  keeper.on_granted(keeper.begin_heartbeat(), 3s);
  EXPECT_EQ(keeper.gaps(), 2u) << "the grant after a revoke ends the gap the revoke counted";
}

TEST(LeaseKeeper, RevokeIgnoresRepliesToEarlierHeartbeats) {
  ManualClock clock;
  LeaseKeeper keeper(clock);
  HeartbeatTicket before = keeper.begin_heartbeat();
  keeper.revoke();
  keeper.on_granted(before, 10s);
  EXPECT_FALSE(keeper.can_serve_writes());
  HeartbeatTicket after = keeper.begin_heartbeat();
  keeper.on_granted(after, 10s);
  EXPECT_TRUE(keeper.can_serve_writes());
  keeper.revoke();
  EXPECT_FALSE(keeper.can_serve_writes());
}

// (request delay, reply delay, heartbeat interval, drop every nth reply, storage clock offset)
using Delays = std::tuple<Duration, Duration, Duration, int, Duration>;

class NoSplitBrain : public ::testing::TestWithParam<Delays> {};

// A storage server heartbeats through a network with the given delays, then is
// partitioned. At every instant where mgmtd considers the node dead, the
// storage side must already have stopped serving writes.
TEST_P(NoSplitBrain, StorageStopsWritesBeforeMgmtdDeclaresItDead) {
  auto [request_delay, reply_delay, interval, drop_every, offset] = GetParam();
  testing::Harness h("", {.lease = 10s, .grace = 2s});
  ManualClock storage_clock(h.clock.wall_ns() + offset.count());
  LeaseKeeper keeper(storage_clock);
  HeartbeatTicket reg_ticket = keeper.begin_heartbeat();
  NodeId node = h.add_storage(1, 1).node_id;
  keeper.on_granted(reg_ticket, 10s);

  struct Msg { TimePoint at; HeartbeatTicket ticket; };  // `at` on mgmtd's clock
  std::deque<Msg> requests, replies;
  const Duration step = 50ms, partition_at = 40s, end = 80s;
  TimePoint start = h.clock.now();
  Duration next_beat = interval;
  int replies_sent = 0;
  bool declared = false, stopped = false;
  for (Duration t = Duration::zero(); t < end; t += step) {
    TimePoint now = h.clock.now();
    if (t >= next_beat && t < partition_at) {
      requests.push_back({now + request_delay, keeper.begin_heartbeat()});
      next_beat += interval;
    }
    while (!requests.empty() && requests.front().at <= now) {
      auto reply = h.state->heartbeat({.node_id = node, .incarnation = 1});
      ASSERT_TRUE(reply.has_value()) << reply.error();
      if (drop_every == 0 || ++replies_sent % drop_every != 0)
        replies.push_back({now + reply_delay, requests.front().ticket});
      requests.pop_front();
    }
    while (!replies.empty() && replies.front().at <= now) {
      keeper.on_granted(replies.front().ticket, 10s);
      replies.pop_front();
    }
    ASSERT_TRUE(h.state->tick().has_value());
    bool dead = h.state->routing().nodes.at(node).state == NodeState::kDown;
    if (dead) {
      ASSERT_FALSE(keeper.can_serve_writes()) << "split brain at t=" << (now - start).count() << "ns";
    }
    declared |= dead;
    stopped |= !keeper.can_serve_writes() && t >= partition_at;
    h.clock.advance(step);
    storage_clock.advance(step);
  }
  EXPECT_TRUE(declared) << "the partitioned node must be declared dead";
  EXPECT_TRUE(stopped);
}

INSTANTIATE_TEST_SUITE_P(Delays, NoSplitBrain,
                         ::testing::Combine(::testing::Values(Duration(0), Duration(300ms), Duration(2s), Duration(9s)),
                                            ::testing::Values(Duration(0), Duration(500ms), Duration(4s), Duration(12s)),
                                            ::testing::Values(Duration(1s), Duration(3s)),
                                            ::testing::Values(0, 2),
                                            ::testing::Values(Duration(0), Duration(3600s))));

}  // namespace
}  // namespace weft::mgmt
