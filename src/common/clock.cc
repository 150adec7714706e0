#include "common/clock.h"

#include <time.h>

namespace weft {

int64_t SystemClock::wall_ns() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

SystemClock& SystemClock::instance() {
  static SystemClock clock;
  return clock;
}

TimePoint BootClock::now() const {
  timespec ts{};
  ::clock_gettime(CLOCK_BOOTTIME, &ts);
  return TimePoint(Duration(int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec));
}

BootClock& BootClock::instance() {
  static BootClock clock;
  return clock;
}

}  // namespace weft
