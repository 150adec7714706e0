// client/batch_workers.h
// A few threads that run blocking jobs, for the asynchronous batch calls
// whose steps block (a write batch buffers its writes, waiting when
// write-behind is full, then waits for the acks): a submitted batch costs a
// queue entry, not a thread of its own. The threads start at the first job,
// so a client that never submits has none.
// Order: a job carries keys (a write batch: the inodes it writes); jobs that
// share a key run one at a time, in submission order (a later batch's bytes
// land after an earlier one's). Jobs with no key in common may run at once,
// and start in submission order as far as that allows.
// Parallelism: at most `threads` jobs run at once; each job's own I/O is
// parallel underneath (write-behind flushes chunks concurrently).
// Threading: submit() is thread-safe. Jobs must not call submit() and wait
// for the result (with every worker waiting, nothing would run it).
// Lifetime: the destructor runs the jobs still queued, then joins.
// Threads refused (EAGAIN: a process or memory limit): the queue waits for
// the workers there are; with none, submit() refuses the job.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <system_error>
#include <thread>
#include <vector>

#include "common/fault.h"

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

  // `keys`: what the job must not run alongside (see above); none: it may
  // run beside any job. False: the system refused the first worker thread;
  // the job was dropped unrun (the caller fails what it stood for).
  [[nodiscard]] bool submit(std::move_only_function<void()> job, std::vector<uint64_t> keys = {}) {
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    std::optional<Job> dropped;  // destroyed outside the lock (a File's last reference closes it)
    {
      std::lock_guard lock(mu_);
      queue_.push_back(Job{std::move(job), std::move(keys)});
      // One more thread while some are busy and the pool is not full.
      if (idle_ == 0 && threads_.size() < threads_max_ && !start_thread_locked()) {
        if (threads_.empty()) {
          dropped = std::move(queue_.back());
          queue_.pop_back();
        }
        // Else the running workers take it when they are free.
      }
    }
    if (dropped) return false;
    cv_.notify_one();
    return true;
  }

 private:
  struct Job {
    std::move_only_function<void()> run;
    std::vector<uint64_t> keys;  // sorted, distinct
  };

  // The first queued job none of whose keys a running job holds or a job
  // queued before it has. REQUIRES(mu_).
  std::optional<size_t> runnable_locked() const {
    std::set<uint64_t> ahead;  // keys of the jobs that wait before it
    for (size_t i = 0; i < queue_.size(); ++i) {
      const auto& keys = queue_[i].keys;
      bool blocked = std::any_of(keys.begin(), keys.end(),
                                 [&](uint64_t k) { return running_keys_.contains(k) || ahead.contains(k); });
      if (!blocked) return i;
      ahead.insert(keys.begin(), keys.end());
    }
    return std::nullopt;
  }

  // REQUIRES(mu_). False when the system refuses the thread (or the memory for it).
  bool start_thread_locked() {
    try {
      if (WEFT_FAULT("client.batch_workers.thread_refused"))
        throw std::system_error(EAGAIN, std::generic_category(), "injected");
      threads_.emplace_back([this] { run(); });
      return true;
    } catch (const std::exception&) {  // std::system_error (EAGAIN), or bad_alloc growing threads_
      return false;  // the caller's error says it when it matters (no worker at all)
    }
  }

  void run() {
    std::unique_lock lock(mu_);
    while (true) {
      ++idle_;
      std::optional<size_t> next;
      cv_.wait(lock, [&] {
        next = runnable_locked();
        return next || (stopping_ && queue_.empty());
      });
      --idle_;
      if (!next) return;  // stopping, and nothing left to run
      Job job = std::move(queue_[*next]);
      queue_.erase(queue_.begin() + static_cast<std::ptrdiff_t>(*next));
      running_keys_.insert(job.keys.begin(), job.keys.end());
      lock.unlock();
      job.run();
      job.run = nullptr;  // what it held (a File's last reference closes it) goes outside the lock
      lock.lock();
      for (uint64_t k : job.keys) running_keys_.erase(k);
      // Jobs that waited for these keys may start (on any waiting thread).
      if (!job.keys.empty()) cv_.notify_all();
    }
  }

  const size_t threads_max_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;                  // GUARDED_BY(mu_)
  std::set<uint64_t> running_keys_;        // GUARDED_BY(mu_): keys of the jobs running (one job each)
  std::vector<std::thread> threads_;       // GUARDED_BY(mu_); joined by the destructor
  size_t idle_ = 0;                        // GUARDED_BY(mu_): threads waiting for a job
  bool stopping_ = false;                  // GUARDED_BY(mu_)
};

}  // namespace weft::client
