#include "common/clock.h"

#include <time.h>

#include <thread>

#include <gtest/gtest.h>

namespace weft {
namespace {

using namespace std::chrono_literals;

// BootClock reads CLOCK_BOOTTIME in nanoseconds: it never runs behind the
// monotonic clock (both count from boot; it adds suspended time) and moves
// with it while the machine is awake.
TEST(BootClock, CountsFromBootInNanosecondsAndMovesWithTheMonotonicClock) {
  auto monotonic = [] {
    timespec ts{};
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    return Duration(int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec);
  };
  const Duration m0 = monotonic();
  const TimePoint b0 = BootClock::instance().now();
  EXPECT_GE(b0.time_since_epoch(), m0);
  std::this_thread::sleep_for(50ms);
  const TimePoint b1 = BootClock::instance().now();
  const Duration m1 = monotonic();
  EXPECT_GE(b1 - b0, 50ms);
  EXPECT_LE(b1 - b0, (m1 - m0) + 1ms) << "awake, both clocks move alike";
}

}  // namespace
}  // namespace weft
