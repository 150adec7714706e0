// client/read_holder.h
// Keeps this client's read holds at meta (meta/read_holds.h): on a thread of
// its own, it sends meta the inodes this client has open for reading only
// (Files open for writing hold a write session, which keeps the file), in one
// call, as often as meta asks (its renew_ms, within [kTimeoutMin, kIdle];
// kDefault until meta said). So
// a file unlinked or renamed over by anyone while it is open here keeps its
// data until it is closed here, as a local file does. Nothing is sent while
// nothing is open and meta already knows that.
// Timing (what read_holds.h's margin counts on): each call waits at most one
// renewal interval for its answer, and renewals start one interval apart
// however long a call took. A call that failed for want of an answer (meta
// down, a timeout) is tried again after kRetry; one meta refused (it is
// overloaded, or the list is too long) after the interval. A meta that keeps
// no holds (renew_ms 0) or does not know the method is asked again after
// kIdle. Renewals that keep failing for two intervals are logged as a
// warning (at most once a minute): this client's readers of files removed
// meanwhile may get ESTALE.
// Renewals are numbered (ascending from 1): a call that timed out here may
// still reach meta after the next one, and meta then ignores it.
// stop() releases: when meta holds some of this client's inodes and answered
// the last renewal (taken or refused), it is told the client holds none (one
// call of at most kTimeoutMin, from the thread calling stop(): plus a connect
// when that thread has no channel to meta yet), so files removed meanwhile
// are collected without waiting out the hold.
// Threading: start()/stop() from the owner; renew_once() from anywhere
// (renewals are serialized).
#pragma once

#include <chrono>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "common/log_throttle.h"
#include "common/periodic.h"
#include "common/status.h"
#include "meta/types.h"

namespace weft::client {

class ReadHolder {
 public:
  // Sends the list, waiting at most `timeout`; returns meta's renewal
  // interval (0: meta keeps none).
  using Send = std::function<Result<std::chrono::milliseconds>(std::span<const meta::Ino>,
                                                               std::chrono::milliseconds timeout, uint64_t seq)>;
  // The inodes open here for reading only, now.
  using OpenInodes = std::function<std::vector<meta::Ino>()>;

  static constexpr std::chrono::milliseconds kFirst{250};     // the first renewal after start()
  static constexpr std::chrono::milliseconds kDefault{1000};  // the interval until meta said
  static constexpr std::chrono::milliseconds kRetry{200};
  static constexpr std::chrono::milliseconds kIdle{5000};
  static constexpr std::chrono::milliseconds kTimeoutMin{250};
  // Inodes one renewal names (meta's ReadHolds::kInodesPerClientMax).
  static constexpr size_t kInodesMax = 65536;

  ReadHolder(Send send, OpenInodes open);
  ~ReadHolder();
  ReadHolder(const ReadHolder&) = delete;
  ReadHolder& operator=(const ReadHolder&) = delete;

  void start();
  // Stops the thread and releases the holds (see above); idempotent.
  void stop();
  // One renewal now (what the thread does); returns the wait before the
  // next, counted from when this one started (the thread subtracts the time
  // it took).
  std::chrono::milliseconds renew_once();

 private:
  // The wait before the next renewal after one that failed with `s`.
  std::chrono::milliseconds after_failure(const Status& s, size_t inodes);  // REQUIRES(mu_)

  const Send send_;
  const OpenInodes open_;
  std::mutex mu_;  // serializes renewals
  std::chrono::milliseconds interval_ = kDefault;  // GUARDED_BY(mu_)
  uint64_t seq_ = 0;                               // GUARDED_BY(mu_): the last renewal's number
  bool meta_holds_some_ = false;                   // GUARDED_BY(mu_): the last list sent was not empty
  bool warned_truncated_ = false;                  // GUARDED_BY(mu_)
  bool answered_ = false;                          // GUARDED_BY(mu_): meta answered the last renewal
  // GUARDED_BY(mu_): when renewals started to fail (none since the last success).
  std::optional<std::chrono::steady_clock::time_point> failing_since_;
  LogThrottle failure_log_{std::chrono::minutes(1)};
  std::optional<PeriodicThread> thread_;  // from start()
};

}  // namespace weft::client
