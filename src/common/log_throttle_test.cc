#include "common/log_throttle.h"

#include <gtest/gtest.h>

namespace weft {
namespace {

using namespace std::chrono_literals;

TEST(LogThrottle, OneLinePerIntervalAndTheCountOfTheRest) {
  ManualClock clock;
  LogThrottle t(1s, clock);
  EXPECT_EQ(t.admit(), std::optional<uint64_t>(0));
  for (int i = 0; i < 5; ++i) EXPECT_EQ(t.admit(), std::nullopt);
  clock.advance(999ms);
  EXPECT_EQ(t.admit(), std::nullopt);
  clock.advance(1ms);
  EXPECT_EQ(t.admit(), std::optional<uint64_t>(6));  // the six held back since
  EXPECT_EQ(t.admit(), std::nullopt);
  clock.advance(10s);
  EXPECT_EQ(t.admit(), std::optional<uint64_t>(1));
  clock.advance(10s);
  EXPECT_EQ(t.admit(), std::optional<uint64_t>(0));
  EXPECT_EQ(LogThrottle::held_back(0), "");
  EXPECT_EQ(LogThrottle::held_back(3), " (3 more like it held back)");
}

}  // namespace
}  // namespace weft
