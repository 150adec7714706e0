#include "client/session_closer.h"

#include <algorithm>
#include <cerrno>
#include <system_error>

#include "common/fault.h"
#include "common/logging.h"

namespace weft::client {

SessionCloser::SessionCloser(Close close, std::chrono::milliseconds first_retry)
    : close_(std::move(close)), first_retry_(first_retry) {}

SessionCloser::~SessionCloser() { stop(); }

bool SessionCloser::worth_retrying(Code code) { return code_retryable(code) || code == Code::kIoError; }

Result<void> SessionCloser::close(const meta::Cred& cred, meta::Ino ino, uint64_t session, bool abandon) {
  Pending p{cred, ino, session, abandon};
  auto r = attempt(p);
  if (r || !worth_retrying(r.error().code())) return r;
  std::lock_guard lock(mu_);
  if (stopping_) return r;
  if (queue_.size() >= kQueuedMax) {
    WEFT_LOG_WARN("the end of write session {} of file {} did not reach meta ({}), and {} others wait to be tried "
                  "again: it stays open at meta until this client's lease ends",
                  session, ino, r.error(), queue_.size());
    return r;
  }
  if (!thread_.joinable()) {
    try {
      if (WEFT_FAULT("client.session_closer.thread_refused"))
        throw std::system_error(EAGAIN, std::generic_category(), "injected");
      thread_ = std::thread([this] { run(); });
    } catch (const std::exception& e) {  // std::system_error (EAGAIN: a process or memory limit), bad_alloc
      WEFT_LOG_WARN("the end of write session {} of file {} did not reach meta ({}), and no thread could start to "
                    "try it again ({}): it stays open at meta until this client's lease ends",
                    session, ino, r.error(), e.what());
      return r;
    }
  }
  queue_.push_back(std::move(p));
  return r;
}

void SessionCloser::stop() {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    if (!queue_.empty())
      WEFT_LOG_WARN("{} write sessions whose end did not reach meta stay open there until this client's lease ends",
                    queue_.size());
    queue_.clear();
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

size_t SessionCloser::queued() const {
  std::lock_guard lock(mu_);
  return queue_.size();
}

uint64_t SessionCloser::retried_ok() const {
  std::lock_guard lock(mu_);
  return retried_ok_;
}

void SessionCloser::run() {
  std::unique_lock lock(mu_);
  std::chrono::milliseconds wait = first_retry_;
  while (true) {
    // Sleeps while the queue is empty, and between passes.
    cv_.wait_for(lock, wait, [&] { return stopping_; });
    if (stopping_) return;
    if (queue_.empty()) {
      wait = first_retry_;
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      continue;  // a newly queued close waits first_retry_ too
    }
    wait = pass(lock) ? first_retry_ : std::min(wait * 2, kRetryMax);
  }
}

Result<void> SessionCloser::attempt(const Pending& p) {
  // Tests: meta stays out of reach longer than the meta client retries.
  if (WEFT_FAULT("client.session_close.fail")) return error(Code::kUnavailable, "injected: meta is out of reach");
  return close_(p.cred, p.ino, p.session, p.abandon);
}

bool SessionCloser::pass(std::unique_lock<std::mutex>& lock) {
  while (!queue_.empty() && !stopping_) {
    const Pending p = queue_.front();
    lock.unlock();
    auto r = attempt(p);
    lock.lock();
    if (stopping_) return true;  // stop() cleared the queue
    if (!r && worth_retrying(r.error().code())) {
      // Still away (or this session's commit fails): the entry goes last, so
      // one that keeps failing holds up no other for good.
      queue_.push_back(queue_.front());
      queue_.pop_front();
      return false;
    }
    // Ended, or answered (kBadHandle: the session is gone already).
    if (r)
      ++retried_ok_;
    else if (r.error().code() != Code::kBadHandle)
      WEFT_LOG_WARN("meta refused to end write session {} of file {}: {}", p.session, p.ino, r.error());
    queue_.pop_front();
  }
  return true;
}

}  // namespace weft::client
