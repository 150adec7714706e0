// client/batch_workers.h
// A few threads that run blocking jobs in submission order, for the
// asynchronous batch calls whose steps block (a write batch buffers its
// writes, waiting when write-behind is full, then waits for the acks): a
// submitted batch costs a queue entry, not a thread of its own. The threads
// start at the first job, so a client that never submits has none.
// Parallelism: at most `threads` jobs run at once; each job's own I/O is
// parallel underneath (write-behind flushes chunks concurrently).
// Threading: submit() is thread-safe. Jobs must not call submit() and wait
// for the result (with every worker waiting, nothing would run it).
// Lifetime: the destructor runs the jobs still queued, then joins.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace weft::client {

class BatchWorkers {
 public:
  explicit BatchWorkers(size_t threads) : threads_max_(threads == 0 ? 1 : threads) {}
  ~BatchWorkers() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  BatchWorkers(const BatchWorkers&) = delete;
  BatchWorkers& operator=(const BatchWorkers&) = delete;

  void submit(std::move_only_function<void()> job) {
    {
      std::lock_guard lock(mu_);
      queue_.push_back(std::move(job));
      // One more thread while some are busy and the pool is not full.
      if (idle_ == 0 && threads_.size() < threads_max_) threads_.emplace_back([this] { run(); });
    }
    cv_.notify_one();
  }

 private:
  void run() {
    std::unique_lock lock(mu_);
    while (true) {
      ++idle_;
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      --idle_;
      if (queue_.empty()) return;  // stopping, and nothing left to run
      auto job = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      job();
      job = nullptr;  // what it held (a File's last reference closes it) goes outside the lock
      lock.lock();
    }
  }

  const size_t threads_max_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::move_only_function<void()>> queue_;  // GUARDED_BY(mu_)
  std::vector<std::thread> threads_;                    // GUARDED_BY(mu_); joined by the destructor
  size_t idle_ = 0;                                     // GUARDED_BY(mu_): threads waiting for a job
  bool stopping_ = false;                               // GUARDED_BY(mu_)
};

}  // namespace weft::client
