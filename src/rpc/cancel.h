// rpc/cancel.h
// Cancellation of in-flight calls. A CancelSource hands out tokens; cancel()
// runs every registered callback once (on the cancelling thread). A call
// cancelled before its answer completes with Code::kCancelled; its request
// may still reach the server. Thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <vector>

namespace weft::rpc {

class CancelState {
 public:
  bool cancelled() const {
    std::lock_guard lock(mu_);
    return cancelled_;
  }
  // Runs fn now if already cancelled.
  void on_cancel(std::function<void()> fn) {
    {
      std::lock_guard lock(mu_);
      if (!cancelled_) {
        callbacks_.push_back(std::move(fn));
        return;
      }
    }
    fn();
  }
  void cancel() {
    std::vector<std::function<void()>> run;
    {
      std::lock_guard lock(mu_);
      if (cancelled_) return;
      cancelled_ = true;
      run.swap(callbacks_);
    }
    for (auto& fn : run) fn();
  }

 private:
  mutable std::mutex mu_;
  bool cancelled_ = false;
  std::vector<std::function<void()>> callbacks_;
};

using CancelToken = std::shared_ptr<CancelState>;

class CancelSource {
 public:
  CancelSource() : state_(std::make_shared<CancelState>()) {}
  CancelToken token() const { return state_; }
  void cancel() { state_->cancel(); }

 private:
  CancelToken state_;
};

}  // namespace weft::rpc
