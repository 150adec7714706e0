#include "storage/chunk_locks.h"

#include <asio/associated_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/post.hpp>

namespace weft::storage {

// The initiation of a lock wait: takes the lock at once if it is free,
// otherwise queues the handler, which unlock() posts to its executor.
struct ChunkLocks::Enqueue {
  ChunkLocks* self;
  ChunkId id;

  template <class Handler>
  void operator()(Handler&& handler) const {
    auto ex = asio::get_associated_executor(handler);
    std::move_only_function<void()> wake = [h = std::move(handler), ex]() mutable { asio::post(ex, std::move(h)); };
    {
      std::lock_guard lock(self->mu_);
      auto [it, inserted] = self->held_.try_emplace(id);
      if (!inserted) {
        it->second.push_back(std::move(wake));
        return;
      }
    }
    wake();
  }
};

Task<ChunkLocks::Guard> ChunkLocks::lock(ChunkId id) {
  co_await asio::async_initiate<decltype(asio::use_awaitable), void()>(Enqueue{this, id}, asio::use_awaitable);
  co_return Guard(this, id);
}

void ChunkLocks::unlock(const ChunkId& id) {
  std::move_only_function<void()> next;
  {
    std::lock_guard lock(mu_);
    auto it = held_.find(id);
    if (it == held_.end()) return;
    if (it->second.empty()) {
      held_.erase(it);
      return;
    }
    next = std::move(it->second.front());
    it->second.pop_front();
  }
  next();  // ownership passes to the waiter
}

bool ChunkLocks::is_held(const ChunkId& id) const {
  std::lock_guard lock(mu_);
  return held_.contains(id);
}

size_t ChunkLocks::held() const {
  std::lock_guard lock(mu_);
  return held_.size();
}

std::vector<ChunkId> ChunkLocks::held_ids() const {
  std::lock_guard lock(mu_);
  std::vector<ChunkId> out;
  out.reserve(held_.size());
  for (const auto& [id, waiters] : held_) out.push_back(id);
  return out;
}

}  // namespace weft::storage
