// spawn_windowed (client/core.h): every task runs once, the ones running
// together hold no more than the budget (a task larger than it runs
// alone), a task that throws does not stop the rest, and `then` runs once,
// after the last (also for no tasks).
#include <gtest/gtest.h>

#include <chrono>
#include <stdexcept>

#include <asio/steady_timer.hpp>

#include "client/core.h"

namespace weft::client {
namespace {

struct Probe {
  std::mutex mu;
  size_t held = 0, peak = 0, running = 0;
  size_t running_with_big = 0;  // the most tasks running while the big one ran
  bool big_running = false;
  std::vector<int> ran;
};

Task<Result<void>> hold(Probe* p, size_t i, size_t bytes, bool big, bool throws) {
  {
    std::lock_guard lock(p->mu);
    p->held += bytes;
    ++p->running;
    if (big) p->big_running = true;
    if (!big) p->peak = std::max(p->peak, p->held);
    if (p->big_running) p->running_with_big = std::max(p->running_with_big, p->running);
    ++p->ran[i];
  }
  asio::steady_timer t(co_await asio::this_coro::executor, std::chrono::milliseconds(2));
  co_await t.async_wait(use_nothrow);
  {
    std::lock_guard lock(p->mu);
    p->held -= bytes;
    --p->running;
    if (big) p->big_running = false;
  }
  if (throws) throw std::runtime_error("a task that throws");
  co_return Result<void>{};
}

TEST(SpawnWindowed, TasksRunWithinTheBudgetAndThenOnce) {
  rpc::IoPool io(2, "t");
  constexpr size_t kBudget = 10;
  std::vector<size_t> bytes(40, 3);
  bytes[7] = 50;  // larger than the budget: runs alone
  Probe p;
  p.ran.assign(bytes.size(), 0);
  std::atomic<int> thens{0};
  Countdown done(1);
  spawn_windowed(
      io, bytes, kBudget,
      [&p, &bytes](size_t i) { return hold(&p, i, bytes[i], i == 7, i == 12); },
      [&] {
        ++thens;
        done.count_down();
      });
  done.wait();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // a second `then` would come now
  EXPECT_EQ(thens.load(), 1);
  for (size_t i = 0; i < bytes.size(); ++i) EXPECT_EQ(p.ran[i], 1) << "task " << i;
  EXPECT_LE(p.peak, kBudget);
  EXPECT_GE(p.peak, 9u) << "the window never filled: tasks ran one at a time";
  EXPECT_EQ(p.running_with_big, 1u) << "the task over the budget ran beside others";
  EXPECT_EQ(p.held, 0u);
}

TEST(SpawnWindowed, NoTasksStillEnds) {
  rpc::IoPool io(1, "t");
  int thens = 0;
  spawn_windowed(io, {}, 10, [](size_t) -> Task<Result<void>> { co_return Result<void>{}; }, [&] { ++thens; });
  EXPECT_EQ(thens, 1);
}

}  // namespace
}  // namespace weft::client
