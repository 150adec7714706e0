// client/session_closer.h
// Ends write sessions at meta, and keeps trying the ends that did not get
// through. A session meta never hears the end of stays open as long as this
// client holds its lease (meta's reaper closes only the sessions of clients
// without one): for a long-lived client (a mount) that is days, and a file
// unlinked while open for writing keeps its chunks all that time. So a close
// that failed for want of meta (its own retries ran out: meta down, a
// partition) or because meta could not commit (kIoError) is queued here and
// tried again on a thread of this class: after kFirstRetry, then backing
// off (doubling) to kRetryMax while meta stays unreachable. A pass tries the
// queue in order and stops at the first close that fails that way again (meta
// is still away: the others would only wait out their own retries), which
// goes to the back (one that fails for good holds up no other). An answer
// that is not such a failure ends the entry: kBadHandle says the session is
// gone already (a lost reply of a close that landed, or the reaper).
// The queue holds at most kQueuedMax sessions; past that a failed close is
// dropped (logged) and left to the lease's end. stop() drops what is queued
// (the client's lease then ends, and meta's reaper closes them).
// Fault point: "client.session_close.fail" fails a close (kUnavailable) without calling meta.
// Threading: thread-safe. The retry thread starts with the first queued
// close; stop() waits for a close in flight on it (at most the meta client's
// retry time) and must not be called from the Close function.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "common/status.h"
#include "meta/types.h"

namespace weft::client {

class SessionCloser {
 public:
  // One close at meta (MetaClient::close, with its own retries).
  using Close = std::function<Result<void>(const meta::Cred&, meta::Ino, uint64_t session, bool abandon)>;

  static constexpr std::chrono::milliseconds kFirstRetry{1000};
  static constexpr std::chrono::milliseconds kRetryMax{60000};
  static constexpr size_t kQueuedMax = 100000;

  explicit SessionCloser(Close close, std::chrono::milliseconds first_retry = kFirstRetry);
  ~SessionCloser();
  SessionCloser(const SessionCloser&) = delete;
  SessionCloser& operator=(const SessionCloser&) = delete;

  // Ends the session now; a failure worth another try is queued (see above)
  // and still returned: the caller's close did not reach meta.
  Result<void> close(const meta::Cred& cred, meta::Ino ino, uint64_t session, bool abandon);
  void stop();

  // Observability (tests): sessions queued now; ends that got through on a retry.
  size_t queued() const;
  uint64_t retried_ok() const;

  // Whether a close that failed with `code` is tried again.
  static bool worth_retrying(Code code);

 private:
  struct Pending {
    meta::Cred cred;
    meta::Ino ino;
    uint64_t session;
    bool abandon;
  };

  Result<void> attempt(const Pending& p);
  void run();
  // One pass over the queue (the lock is released around each call); false
  // when it stopped at a close that failed again.
  bool pass(std::unique_lock<std::mutex>& lock);

  const Close close_;
  const std::chrono::milliseconds first_retry_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> queue_;  // guarded by mu_, oldest first
  bool stopping_ = false;      // guarded by mu_
  uint64_t retried_ok_ = 0;    // guarded by mu_
  std::thread thread_;         // started (under mu_) with the first queued close
};

}  // namespace weft::client
