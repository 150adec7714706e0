// rpc/io_pool.h
// A few I/O threads, each running its own io_context (no shared queue, no
// cross-thread locking on the hot path). A connection lives on one context
// for its whole life; work that blocks never runs here.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>

namespace weft::rpc {

class IoPool {
 public:
  // Throws std::system_error when the system refuses a thread (EAGAIN: a
  // process or memory limit), after stopping the ones it started: an
  // exception the caller may catch, not std::terminate.
  explicit IoPool(size_t threads, std::string name = "io");
  ~IoPool();
  IoPool(const IoPool&) = delete;
  IoPool& operator=(const IoPool&) = delete;

  // Round-robin choice of a context for a new connection.
  asio::io_context& next();
  asio::io_context& at(size_t i) { return *contexts_[i]; }
  size_t size() const { return contexts_.size(); }
  // True on one of this pool's threads.
  bool in_pool_thread() const;
  // On an I/O thread of any IoPool: the io_context it runs (which outlives
  // the thread, so thread-local state may refer to it); else null.
  static asio::io_context* current_context();
  // On one of this pool's threads: its index (for at()); else size().
  size_t current_index() const;
  // Stops every context and joins the threads (idempotent).
  void stop();

 private:
  using Guard = asio::executor_work_guard<asio::io_context::executor_type>;
  std::vector<std::unique_ptr<asio::io_context>> contexts_;
  std::vector<Guard> guards_;
  std::vector<std::thread> threads_;
  std::atomic<size_t> next_{0};
  bool stopped_ = false;
};

}  // namespace weft::rpc
