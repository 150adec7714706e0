#include "client/batch_workers.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>

#include "common/fault.h"

namespace weft::client {
namespace {

// The system refusing the first worker thread refuses the job (the caller
// fails what it stood for) instead of throwing out of submit() or queueing
// a job nothing will ever run.
TEST(BatchWorkers, WithoutAnyThreadAJobIsRefusedNotLost) {
  BatchWorkers workers(1);  // one worker: the jobs run in submission order
  std::atomic<int> ran{0};
  {
    fault::Scope refused("client.batch_workers.thread_refused");
    EXPECT_FALSE(workers.submit([&] { ++ran; }));
    EXPECT_EQ(refused.triggered(), 1);
  }
  EXPECT_TRUE(workers.submit([&] { ++ran; }));  // a thread starts now
  std::promise<void> done;
  EXPECT_TRUE(workers.submit([&] { done.set_value(); }));
  done.get_future().wait();
  EXPECT_EQ(ran.load(), 1) << "the refused job ran after all";
}

// With a worker running, a refused extra thread leaves the job queued for it.
TEST(BatchWorkers, ARefusedExtraThreadLeavesTheJobToTheRunningOnes) {
  BatchWorkers workers(4);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::promise<void> first_started;
  ASSERT_TRUE(workers.submit([&] {
    first_started.set_value();
    released.wait();
  }));
  first_started.get_future().wait();  // the only worker is busy: a second would start
  std::promise<void> second_ran;
  {
    fault::Scope refused("client.batch_workers.thread_refused");
    ASSERT_TRUE(workers.submit([&] { second_ran.set_value(); }));
    EXPECT_EQ(refused.triggered(), 1);
  }
  release.set_value();
  EXPECT_EQ(second_ran.get_future().wait_for(std::chrono::seconds(10)), std::future_status::ready)
      << "the queued job never ran";
}

}  // namespace
}  // namespace weft::client
