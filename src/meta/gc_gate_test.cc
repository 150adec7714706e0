// When meta's chunk GC may take files (meta/gc_gate.h), on a manual clock.
#include "meta/gc_gate.h"

#include <gtest/gtest.h>

namespace weft::meta {
namespace {

using namespace std::chrono_literals;

// A file queued long ago: only holds and the window keep it (meta/read_holds.h).
int64_t long_ago(const ManualClock& clock) { return clock.wall_ns() - int64_t{3'600'000'000'000}; }

TEST(GcGate, NothingIsCollectedBeforeServingNorBeforeReadersHadAWindowAfterIt) {
  ManualClock clock;
  ReadHolds holds(clock, 4000ms);
  clock.advance(10s);  // the window of the table's creation is long over
  GcGate gate(holds, clock.now() + 3s);  // mgmtd's serve_after: 3 s
  EXPECT_FALSE(gate.may_run(true, 0, clock.now())) << "not serving yet: readers' renewals are refused";
  clock.advance(2999ms);
  EXPECT_FALSE(gate.may_run(true, 0, clock.now()));
  EXPECT_TRUE(holds.may_collect(1, long_ago(clock))) << "(what the window alone would allow)";
  clock.advance(1ms);
  EXPECT_FALSE(gate.may_run(true, 0, clock.now())) << "serving starts: the readers' window with it";
  EXPECT_FALSE(holds.may_collect(1, long_ago(clock)));
  EXPECT_TRUE(gate.may_run(true, 0, clock.now())) << "passes may run; the window keeps files meanwhile";
  clock.advance(4000ms);
  EXPECT_TRUE(holds.may_collect(1, long_ago(clock)));
}

TEST(GcGate, NoPassWithoutALeaseAndANewWindowAfterEachLapse) {
  ManualClock clock;
  ReadHolds holds(clock, 4000ms);
  clock.advance(10s);
  GcGate gate(holds, TimePoint{});  // serving already
  EXPECT_FALSE(gate.may_run(false, 0, clock.now())) << "no lease";
  EXPECT_FALSE(gate.may_run(true, 0, clock.now())) << "the first pass under the lease opens the window";
  EXPECT_TRUE(gate.may_run(true, 0, clock.now()));
  clock.advance(4s);
  EXPECT_TRUE(holds.may_collect(1, long_ago(clock)));
  EXPECT_FALSE(gate.may_run(false, 0, clock.now())) << "the lease ran out";
  EXPECT_FALSE(gate.may_run(true, 1, clock.now())) << "regained after a gap: readers' holds lapsed here";
  EXPECT_FALSE(holds.may_collect(1, long_ago(clock)));
  EXPECT_TRUE(gate.may_run(true, 1, clock.now()));
  clock.advance(4s);
  EXPECT_TRUE(holds.may_collect(1, long_ago(clock)));
}

}  // namespace
}  // namespace weft::meta
