#include "common/periodic.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace weft {
namespace {

using namespace std::chrono_literals;

TEST(PeriodicThread, TicksUntilStoppedWithTheWaitEachTickReturns) {
  std::atomic<int> ticks{0};
  PeriodicThread p(1ms, [&]() -> PeriodicThread::Wait {
    // After the third tick, wait "forever": only stop() ends that wait.
    return ++ticks < 3 ? PeriodicThread::Wait(1ms) : PeriodicThread::Wait(1h);
  });
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (ticks.load() < 3 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(1ms);
  ASSERT_EQ(ticks.load(), 3);
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(ticks.load(), 3) << "the 1 h wait was not honoured";
  auto start = std::chrono::steady_clock::now();
  p.stop();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s) << "stop() did not cut the wait short";
  p.stop();  // idempotent
  EXPECT_EQ(ticks.load(), 3);
}

TEST(PeriodicThread, DestructorStopsBeforeTheFirstTick) {
  std::atomic<int> ticks{0};
  auto start = std::chrono::steady_clock::now();
  {
    PeriodicThread p(1h, [&] {
      ++ticks;
      return PeriodicThread::Wait(1h);
    });
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  EXPECT_EQ(ticks.load(), 0);
}

}  // namespace
}  // namespace weft
