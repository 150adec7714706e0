// storage/disk_pool.h
// A bounded pool of threads for blocking chunk engine calls, awaitable from
// coroutines on I/O threads: `auto r = co_await pool.run(job);` runs `job`
// on a pool thread and resumes the caller on its own executor. At most
// `queue_max` jobs are queued or running; beyond that run() answers
// kOverloaded (retryable) without queueing. Two ways past that refusal, for
// jobs whose refusal would leave work half done (a chain member whose
// successor already committed an update must stage and commit it too):
// admit() takes a place in the queue ahead of its job, and finish() runs a
// job that completes admitted work (a commit or an abort: at most one at a
// time per update, so the queue stays bounded).
// Fault point storage.disk_pool.full: run() and admit() refuse as if full.
// Threading: thread-safe. Destroy only after every run() completed.
#pragma once

#include <atomic>
#include <type_traits>
#include <utility>

#include <asio/co_spawn.hpp>
#include <asio/thread_pool.hpp>
#include <asio/use_awaitable.hpp>

#include "common/assert.h"
#include "common/fault.h"
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

  // A place in the queue taken by admit(), given back when its job ends (or
  // at destruction if no job used it). Move-only.
  class Admission {
   public:
    Admission() = default;
    Admission(Admission&& o) noexcept : pool_(std::exchange(o.pool_, nullptr)) {}
    Admission& operator=(Admission&& o) noexcept {
      if (this != &o) {
        release();
        pool_ = std::exchange(o.pool_, nullptr);
      }
      return *this;
    }
    ~Admission() { release(); }

   private:
    friend class DiskPool;
    explicit Admission(DiskPool* pool) : pool_(pool) {}
    void release() {
      if (pool_) std::exchange(pool_, nullptr)->depth_.fetch_sub(1, std::memory_order_relaxed);
    }
    DiskPool* pool_ = nullptr;
  };

  // kOverloaded when the queue is full, as run() would answer.
  Result<Admission> admit() {
    if (!take_place()) return error(Code::kOverloaded, "disk pool full ({} jobs)", queue_max_);
    return Admission(this);
  }

  // F: () -> Result<T>. Pass a named callable (g++ 12: no capturing lambda
  // written inside a co_await expression).
  template <class F>
  Task<std::invoke_result_t<F&>> run(F job) {
    using R = std::invoke_result_t<F&>;
    if (!take_place()) co_return R(error(Code::kOverloaded, "disk pool full ({} jobs)", queue_max_));
    co_return co_await spawn(std::move(job));
  }
  // Runs `job` in the place `admitted` holds (it takes it over): never refused.
  template <class F>
  Task<std::invoke_result_t<F&>> run(Admission& admitted, F job) {
    WEFT_ASSERT(admitted.pool_ == this);
    admitted.pool_ = nullptr;
    co_return co_await spawn(std::move(job));
  }
  // Runs `job` even beyond queue_max (see above): never refused.
  template <class F>
  Task<std::invoke_result_t<F&>> finish(F job) {
    depth_.fetch_add(1, std::memory_order_relaxed);
    co_return co_await spawn(std::move(job));
  }

  size_t depth() const { return depth_.load(std::memory_order_relaxed); }
  void stop() { pool_.join(); }

 private:
  bool take_place() {
    if (WEFT_FAULT("storage.disk_pool.full")) return false;
    if (depth_.fetch_add(1, std::memory_order_relaxed) < queue_max_) return true;
    depth_.fetch_sub(1, std::memory_order_relaxed);
    return false;
  }
  // Runs `job` on a pool thread, then gives its place back.
  template <class F>
  Task<std::invoke_result_t<F&>> spawn(F job) {
    using R = std::invoke_result_t<F&>;
    auto spawned = asio::co_spawn(pool_, invoke<R, F>(std::move(job)), asio::use_awaitable);
    R r = co_await std::move(spawned);
    depth_.fetch_sub(1, std::memory_order_relaxed);
    co_return r;
  }
  template <class R, class F>
  static Task<R> invoke(F job) {
    co_return job();
  }

  asio::thread_pool pool_;
  const size_t queue_max_;
  std::atomic<size_t> depth_{0};
};

}  // namespace weft::storage
