#include "rpc/io_pool.h"

#include <pthread.h>

#include "common/assert.h"

namespace weft::rpc {
namespace {
thread_local const IoPool* t_pool = nullptr;
thread_local asio::io_context* t_context = nullptr;
thread_local size_t t_index = 0;
}

IoPool::IoPool(size_t threads, std::string name) {
  WEFT_ASSERT(threads > 0);
  for (size_t i = 0; i < threads; ++i) {
    contexts_.push_back(std::make_unique<asio::io_context>(1));
    guards_.emplace_back(contexts_.back()->get_executor());
  }
  try {
    for (size_t i = 0; i < threads; ++i) {
      threads_.emplace_back([this, i, name] {
        t_pool = this;
        t_context = contexts_[i].get();
        t_index = i;
        std::string thread_name = (name + "-" + std::to_string(i)).substr(0, 15);
        pthread_setname_np(pthread_self(), thread_name.c_str());
        contexts_[i]->run();
      });
    }
  } catch (...) {
    stop();  // joinable threads left to the members' destructors would terminate the process
    throw;
  }
}

IoPool::~IoPool() { stop(); }

asio::io_context& IoPool::next() { return *contexts_[next_.fetch_add(1, std::memory_order_relaxed) % contexts_.size()]; }

bool IoPool::in_pool_thread() const { return t_pool == this; }

asio::io_context* IoPool::current_context() { return t_context; }

size_t IoPool::current_index() const { return t_pool == this ? t_index : contexts_.size(); }

void IoPool::stop() {
  if (stopped_) return;
  stopped_ = true;
  guards_.clear();
  for (auto& c : contexts_) c->stop();
  for (auto& t : threads_)
    if (t.joinable()) t.join();
}

}  // namespace weft::rpc
