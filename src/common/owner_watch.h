// common/owner_watch.h
// Runs a callback once when another process (the "owner") ends: the
// `--owner-pid PID` / WEFT_OWNER_PID of `weft serve`, `weft up` and
// `weft mount`, so that servers and mounts a test started stop when the test
// process dies, however it dies (docs/local-cluster.md).
// How: a pidfd of the owner (pidfd_open(2), Linux 5.3+), polled on a thread
// of the watch together with an eventfd that the destructor uses to wake it.
// Threading: on_gone runs on the watch's thread (which blocks every signal),
// at most once; it must not destroy the watch. Destroying (or moving over)
// the watch wakes the thread and joins it: once that returns, on_gone is not
// running and will not run.
// A pid names a process, not a process that was started later with the same
// number: the pidfd is taken at once, so a reused pid is never watched.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>

#include "common/status.h"

namespace weft {

class OwnerWatch {
 public:
  OwnerWatch();  // watches nothing
  OwnerWatch(OwnerWatch&&) noexcept;
  OwnerWatch& operator=(OwnerWatch&&) noexcept;
  ~OwnerWatch();

  // The watched process; 0 when nothing is watched.
  pid_t pid() const;

 private:
  struct State;  // the descriptors and the thread (owner_watch.cc)
  friend Result<OwnerWatch> watch_owner(pid_t pid, std::function<void()> on_gone, std::chrono::milliseconds delay);
  explicit OwnerWatch(std::unique_ptr<State> state);

  std::unique_ptr<State> state_;
};

// Watches `pid`: on_gone runs `delay` after it exits (unless the watch is
// destroyed in between). Errors, in one line: kInvalidArgument for a pid <= 0;
// kNotFound when no such process exists or it has exited already (a zombie
// not reaped yet); kNotSupported without pidfd_open; kOverloaded when the
// system refuses the thread (fault point common.owner_watch.thread_refused).
Result<OwnerWatch> watch_owner(pid_t pid, std::function<void()> on_gone,
                               std::chrono::milliseconds delay = std::chrono::milliseconds(0));

// The same checks as watch_owner, without watching: for a command that checks
// its owner before it forks the process that will watch it.
Result<void> check_owner(pid_t pid);

}  // namespace weft
