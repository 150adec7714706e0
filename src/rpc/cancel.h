// rpc/cancel.h
// Cancellation of in-flight calls. A CancelSource hands out tokens; cancel()
// runs every registered callback once (on the cancelling thread). A call
// cancelled before its answer completes with Code::kCancelled; its request
// may still reach the server. A call that ends first drops its callback
// (CancelRegistration): a long-lived source serving many calls keeps none of
// theirs. Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace weft::rpc {

class CancelState {
 public:
  bool cancelled() const {
    std::lock_guard lock(mu_);
    return cancelled_;
  }
  // Runs fn now if already cancelled (and returns 0); else keeps it until
  // cancel() or forget(returned id).
  uint64_t on_cancel(std::function<void()> fn) {
    {
      std::lock_guard lock(mu_);
      if (!cancelled_) {
        callbacks_.emplace(++last_id_, std::move(fn));
        return last_id_;
      }
    }
    fn();
    return 0;
  }
  void forget(uint64_t id) {
    std::lock_guard lock(mu_);
    callbacks_.erase(id);
  }
  void cancel() {
    std::map<uint64_t, std::function<void()>> run;
    {
      std::lock_guard lock(mu_);
      if (cancelled_) return;
      cancelled_ = true;
      run.swap(callbacks_);
    }
    for (auto& [id, fn] : run) fn();
  }
  size_t registered() const {
    std::lock_guard lock(mu_);
    return callbacks_.size();
  }

 private:
  mutable std::mutex mu_;
  bool cancelled_ = false;
  uint64_t last_id_ = 0;                                 // GUARDED_BY(mu_)
  std::map<uint64_t, std::function<void()>> callbacks_;  // GUARDED_BY(mu_)
};

using CancelToken = std::shared_ptr<CancelState>;

// A callback registered with a token, dropped with this (the call ended).
class CancelRegistration {
 public:
  CancelRegistration() = default;
  CancelRegistration(CancelToken token, uint64_t id) : token_(std::move(token)), id_(id) {}
  CancelRegistration(CancelRegistration&& o) noexcept : token_(std::move(o.token_)), id_(std::exchange(o.id_, 0)) {}
  CancelRegistration& operator=(CancelRegistration&& o) noexcept {
    if (this != &o) {
      reset();
      token_ = std::move(o.token_);
      id_ = std::exchange(o.id_, 0);
    }
    return *this;
  }
  ~CancelRegistration() { reset(); }

 private:
  void reset() {
    if (token_ && id_ != 0) token_->forget(id_);
    token_.reset();
    id_ = 0;
  }
  CancelToken token_;
  uint64_t id_ = 0;
};

class CancelSource {
 public:
  CancelSource() : state_(std::make_shared<CancelState>()) {}
  CancelToken token() const { return state_; }
  void cancel() { state_->cancel(); }

 private:
  CancelToken state_;
};

}  // namespace weft::rpc
