#include "common/log_throttle.h"

#include <fmt/format.h>

namespace weft {

std::optional<uint64_t> LogThrottle::admit() {
  TimePoint now = clock_.now();
  std::lock_guard lock(mu_);
  if (last_ && now - *last_ < interval_) {
    ++held_;
    return std::nullopt;
  }
  last_ = now;
  uint64_t held = held_;
  held_ = 0;
  return held;
}

std::string LogThrottle::held_back(uint64_t n) {
  return n == 0 ? std::string() : fmt::format(" ({} more like it held back)", n);
}

}  // namespace weft
