// common/log_throttle.h
// At most one log line per interval from one place. For warnings that a
// hostile or broken peer can cause once per connection (a port scan leaving
// connections without a Hello, a client with the wrong token, malformed
// frames): the first of a burst is logged and names its peer, a flood is not,
// and the next line let through says how many were held back. Metrics count
// every occurrence.
// Threading: thread-safe (one mutex; only on paths that log).
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>

#include "common/clock.h"

namespace weft {

class LogThrottle {
 public:
  explicit LogThrottle(Duration interval = std::chrono::seconds(1), const Clock& clock = SystemClock::instance())
      : interval_(interval), clock_(clock) {}

  // nullopt: hold this line back. Otherwise log it: the value is how many
  // were held back since the last line let through.
  std::optional<uint64_t> admit();

  // " (N more like it held back)" for N > 0, else "": to append to a line.
  static std::string held_back(uint64_t n);

 private:
  const Duration interval_;
  const Clock& clock_;
  std::mutex mu_;
  std::optional<TimePoint> last_;  // guarded by mu_
  uint64_t held_ = 0;              // guarded by mu_
};

}  // namespace weft
