#include "client/read_holder.h"

#include <algorithm>

#include "common/logging.h"

namespace weft::client {

ReadHolder::ReadHolder(Send send, OpenInodes open) : send_(std::move(send)), open_(std::move(open)) {}

ReadHolder::~ReadHolder() { stop(); }

void ReadHolder::start() {
  thread_.emplace(kFirst, [this] { return std::chrono::duration_cast<PeriodicThread::Wait>(renew_once()); });
}

void ReadHolder::stop() {
  if (thread_) thread_->stop();
}

std::chrono::milliseconds ReadHolder::renew_once() {
  std::lock_guard lock(mu_);
  std::vector<meta::Ino> inos = open_();
  if (inos.empty() && !meta_holds_some_) return interval_;
  std::sort(inos.begin(), inos.end());
  inos.erase(std::unique(inos.begin(), inos.end()), inos.end());
  if (inos.size() > kInodesMax) {
    if (!warned_truncated_)
      WEFT_LOG_WARN("{} files are open here; meta keeps the data of the first {} only if they are removed meanwhile",
                    inos.size(), kInodesMax);
    warned_truncated_ = true;
    inos.resize(kInodesMax);
  }
  auto r = send_(inos);
  if (!r) {
    if (r.error().code() == Code::kUnknownMethod) {  // a meta from before read holds
      meta_holds_some_ = false;
      return interval_ = kIdle;
    }
    WEFT_LOG_DEBUG("read holds of {} files: {}", inos.size(), r.error());
    return std::min(interval_, kRetry);
  }
  if (r->count() <= 0) {  // meta keeps none
    meta_holds_some_ = false;
    return interval_ = kIdle;
  }
  meta_holds_some_ = !inos.empty();
  return interval_ = std::min(*r, kIdle);
}

}  // namespace weft::client
