// common/clock.h
// Time behind a small interface so tests (and a future simulator) can drive
// it. Servers take a Clock& and never call std::chrono clocks directly for
// anything that decides behaviour (leases, deadlines, rates).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace weft {

using Duration = std::chrono::nanoseconds;
using TimePoint = std::chrono::time_point<std::chrono::steady_clock, Duration>;

class Clock {
 public:
  virtual ~Clock() = default;
  // Monotonic time, for deadlines and leases.
  virtual TimePoint now() const = 0;
  // Wall-clock time in nanoseconds since the Unix epoch, for file times.
  virtual int64_t wall_ns() const = 0;
};

class SystemClock final : public Clock {
 public:
  TimePoint now() const override { return std::chrono::steady_clock::now(); }
  int64_t wall_ns() const override;
  static SystemClock& instance();
};

// Monotonic time that also counts the time the machine spent suspended
// (CLOCK_BOOTTIME; CLOCK_MONOTONIC, behind steady_clock, stops meanwhile).
// For a lease held on this machine: mgmtd's clock ran on while this machine
// slept, so after a suspend longer than the lease mgmtd may have declared
// this server dead; a lease on the monotonic clock would still look valid
// here and the server would serve as if nothing happened. Its time points
// are NOT comparable with steady_clock's (they differ by the suspended time).
class BootClock final : public Clock {
 public:
  TimePoint now() const override;
  int64_t wall_ns() const override { return SystemClock::instance().wall_ns(); }
  static BootClock& instance();
};

// A clock that moves only when told to. Thread-safe.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(int64_t start_ns = 1'000'000'000) : ns_(start_ns) {}
  TimePoint now() const override { return TimePoint(Duration(ns_.load())); }
  int64_t wall_ns() const override { return ns_.load(); }
  void advance(Duration d) { ns_.fetch_add(d.count()); }

 private:
  std::atomic<int64_t> ns_;
};

// Microseconds elapsed since `start` on the steady clock: for metrics.
inline uint64_t elapsed_us(std::chrono::steady_clock::time_point start) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                   std::chrono::steady_clock::now() - start)
                                   .count());
}

}  // namespace weft
