#include "client/read_holder.h"

#include <algorithm>

#include "common/logging.h"

namespace weft::client {

using std::chrono::milliseconds;

ReadHolder::ReadHolder(Send send, OpenInodes open) : send_(std::move(send)), open_(std::move(open)) {}

ReadHolder::~ReadHolder() { stop(); }

void ReadHolder::start() {
  // The next renewal starts an interval after this one started, however long it took.
  thread_.emplace(kFirst, [this] {
    const auto start = std::chrono::steady_clock::now();
    const PeriodicThread::Wait wait = renew_once();
    return std::max(PeriodicThread::Wait::zero(), wait - (std::chrono::steady_clock::now() - start));
  });
}

void ReadHolder::stop() {
  if (thread_) thread_->stop();
  std::lock_guard lock(mu_);
  // Not when the last renewal had no answer: meta is likely out of reach, and
  // a client shutting down should not wait for it. The holds then expire.
  if (!meta_holds_some_ || !answered_) return;
  // Best effort: a release that fails leaves the holds to expire.
  if (auto r = send_({}, kTimeoutMin, ++seq_); !r)
    WEFT_LOG_DEBUG("releasing this client's read holds: {}", r.error());
  meta_holds_some_ = false;
}

milliseconds ReadHolder::renew_once() {
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
  auto r = send_(inos, std::clamp(interval_, kTimeoutMin, kIdle), ++seq_);
  if (!r) return after_failure(r.error(), inos.size());
  answered_ = true;
  failing_since_.reset();
  if (r->count() <= 0) {  // meta keeps none
    meta_holds_some_ = false;
    return interval_ = kIdle;
  }
  meta_holds_some_ = !inos.empty();
  // Never sooner than kTimeoutMin: meta asks for a quarter of its hold, at
  // least 1 s ([meta] read_hold_ms >= 4000); 1 ms from a broken one would
  // have this thread call it a thousand times a second.
  return interval_ = std::clamp(*r, kTimeoutMin, kIdle);
}

milliseconds ReadHolder::after_failure(const Status& s, size_t inodes) {
  if (s.code() == Code::kUnknownMethod) {  // a meta from before read holds
    meta_holds_some_ = false;
    failing_since_.reset();
    return interval_ = kIdle;
  }
  const auto now = std::chrono::steady_clock::now();
  if (!failing_since_) failing_since_ = now;
  if (now - *failing_since_ >= 2 * interval_) {
    if (auto held = failure_log_.admit())
      WEFT_LOG_WARN("meta has not taken this client's read holds for {} ms ({} open files): {}; files removed "
                    "meanwhile may read as ESTALE here{}",
                    std::chrono::duration_cast<milliseconds>(now - *failing_since_).count(), inodes, s,
                    LogThrottle::held_back(*held));
  }
  // Meta answered and refused: asking again at once would only add load.
  const bool refused = s.code() == Code::kOverloaded || !s.retryable();
  answered_ = refused;  // a refused renewal still leaves meta holding the previous list
  return refused ? interval_ : std::min(interval_, kRetry);
}

}  // namespace weft::client
