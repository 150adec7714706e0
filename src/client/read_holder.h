// client/read_holder.h
// Keeps this client's read holds at meta (meta/read_holds.h): on a thread of
// its own, it sends meta the inodes of every File open here, in one call,
// as often as meta asks (its renew_ms; 1 s until meta said). So a file
// unlinked or renamed over by anyone while it is open here keeps its data
// until it is closed here, as a local file does. Nothing is sent while
// nothing is open and meta already knows that.
// A failed renewal is tried again after kRetry (at most the interval); a
// meta that keeps no holds (renew_ms 0) or does not know the method is asked
// again after kIdle only.
// Threading: start()/stop() from the owner; renew_once() from anywhere
// (renewals are serialized: an older list never lands after a newer one).
#pragma once

#include <chrono>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "common/periodic.h"
#include "common/status.h"
#include "meta/types.h"

namespace weft::client {

class ReadHolder {
 public:
  // Sends the list; returns meta's renewal interval (0: meta keeps none).
  using Send = std::function<Result<std::chrono::milliseconds>(std::span<const meta::Ino>)>;
  // The inodes open here now.
  using OpenInodes = std::function<std::vector<meta::Ino>()>;

  static constexpr std::chrono::milliseconds kFirst{1000};
  static constexpr std::chrono::milliseconds kRetry{200};
  static constexpr std::chrono::milliseconds kIdle{60000};
  // Inodes one renewal names (meta's ReadHolds::kInodesPerClientMax).
  static constexpr size_t kInodesMax = 65536;

  ReadHolder(Send send, OpenInodes open);
  ~ReadHolder();
  ReadHolder(const ReadHolder&) = delete;
  ReadHolder& operator=(const ReadHolder&) = delete;

  void start();
  void stop();
  // One renewal now (what the thread does); returns the wait before the next.
  std::chrono::milliseconds renew_once();

 private:
  const Send send_;
  const OpenInodes open_;
  std::mutex mu_;  // serializes renewals
  std::chrono::milliseconds interval_ = kFirst;  // GUARDED_BY(mu_)
  bool meta_holds_some_ = false;                 // GUARDED_BY(mu_): the last list sent was not empty
  bool warned_truncated_ = false;                // GUARDED_BY(mu_)
  std::optional<PeriodicThread> thread_;         // from start()
};

}  // namespace weft::client
