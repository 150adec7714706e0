#include "common/periodic.h"

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

}  // namespace weft
