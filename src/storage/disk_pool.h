// storage/disk_pool.h
// A bounded pool of threads for blocking chunk engine calls, awaitable from
// coroutines on I/O threads: `auto r = co_await pool.run(job);` runs `job`
// on a pool thread and resumes the caller on its own executor. At most
// `queue_max` jobs are queued or running; beyond that run() answers
// kOverloaded (retryable) without queueing.
// Threading: thread-safe. Destroy only after every run() completed.
#pragma once

#include <atomic>
#include <type_traits>

#include <asio/co_spawn.hpp>
#include <asio/thread_pool.hpp>
#include <asio/use_awaitable.hpp>

#include "common/metrics.h"
#include "common/status.h"
#include "rpc/task.h"

namespace weft::storage {

class DiskPool {
 public:
  DiskPool(size_t threads, size_t queue_max) : pool_(threads), queue_max_(queue_max) {}
  ~DiskPool() { pool_.join(); }
  DiskPool(const DiskPool&) = delete;
  DiskPool& operator=(const DiskPool&) = delete;

  // F: () -> Result<T>. Pass a named callable (g++ 12: no capturing lambda
  // written inside a co_await expression).
  template <class F>
  Task<std::invoke_result_t<F&>> run(F job) {
    using R = std::invoke_result_t<F&>;
    if (depth_.fetch_add(1, std::memory_order_relaxed) >= queue_max_) {
      depth_.fetch_sub(1, std::memory_order_relaxed);
      co_return R(error(Code::kOverloaded, "disk pool full ({} jobs)", queue_max_));
    }
    auto spawned = asio::co_spawn(pool_, invoke<R, F>(std::move(job)), asio::use_awaitable);
    R r = co_await std::move(spawned);
    depth_.fetch_sub(1, std::memory_order_relaxed);
    co_return r;
  }

  size_t depth() const { return depth_.load(std::memory_order_relaxed); }
  void stop() { pool_.join(); }

 private:
  template <class R, class F>
  static Task<R> invoke(F job) {
    co_return job();
  }

  asio::thread_pool pool_;
  const size_t queue_max_;
  std::atomic<size_t> depth_{0};
};

}  // namespace weft::storage
