// common/periodic.h
// A thread that calls `tick` after `first_wait`, then again after whatever
// wait each tick returns, until stopped. The housekeeping loops of the
// servers and the client (retry-record expiry, session reaping, lease
// renewal) are this.
// Threading: stop() (or the destructor) wakes the thread at once, even in
// the middle of a wait, and joins it; a tick that is running finishes first.
// `tick` runs on the periodic thread only. stop() is idempotent and must not
// be called from the tick.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace weft {

// How often a sweep with grace period `grace` looks: a quarter of it, between
// 1 s and `at_most` (so what it removes waits at most grace + grace/4).
std::chrono::milliseconds quarter_of_grace(std::chrono::milliseconds grace, std::chrono::milliseconds at_most);

class PeriodicThread {
 public:
  using Wait = std::chrono::nanoseconds;
  using Tick = std::function<Wait()>;  // returns the wait before the next tick

  PeriodicThread(Wait first_wait, Tick tick);
  ~PeriodicThread();
  PeriodicThread(const PeriodicThread&) = delete;
  PeriodicThread& operator=(const PeriodicThread&) = delete;

  void stop();

 private:
  void run(Wait wait);

  const Tick tick_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;  // GUARDED_BY(mu_)
  std::thread thread_;
};

// A pass (a sweep over a store) run every `interval` on a PeriodicThread,
// which a stop ends early: the pass polls stopping() between its steps.
// start() after stop() does not start it again. Threading: start/stop from
// the owner; stopping() from anywhere. Declare it after whatever the pass
// uses, so it stops first.
class RepeatingPass {
 public:
  void start(std::chrono::milliseconds interval, std::function<void()> pass);
  void stop();
  bool stopping() const { return stop_now_.load(); }

 private:
  std::atomic<bool> stop_now_{false};
  std::unique_ptr<PeriodicThread> thread_;
};

}  // namespace weft
