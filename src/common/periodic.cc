#include "common/periodic.h"

#include <algorithm>
#include <utility>

namespace weft {

PeriodicThread::PeriodicThread(Wait first_wait, Tick tick)
    : tick_(std::move(tick)), thread_([this, first_wait] { run(first_wait); }) {}

PeriodicThread::~PeriodicThread() { stop(); }

void PeriodicThread::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void PeriodicThread::run(Wait wait) {
  std::unique_lock lock(mu_);
  while (!cv_.wait_for(lock, wait, [this] { return stopping_; })) {
    lock.unlock();
    wait = tick_();
    lock.lock();
  }
}

void RepeatingPass::start(std::chrono::milliseconds interval, std::function<void()> pass) {
  if (thread_) return;
  thread_ = std::make_unique<PeriodicThread>(interval, [interval, pass = std::move(pass)] {
    pass();
    return PeriodicThread::Wait(interval);
  });
}

void RepeatingPass::stop() {
  stop_now_ = true;  // a pass under way ends at its next check
  if (thread_) thread_->stop();
}

std::chrono::milliseconds quarter_of_grace(std::chrono::milliseconds grace, std::chrono::milliseconds at_most) {
  return std::clamp<std::chrono::milliseconds>(grace / 4, std::chrono::seconds(1), at_most);
}

}  // namespace weft
