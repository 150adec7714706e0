#include "common/owner_watch.h"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <optional>
#include <system_error>
#include <thread>
#include <utility>

#include "common/fault.h"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434  // the same number on every architecture
#endif

namespace weft {
namespace {

// Whether `fd` polls readable now; for a pidfd: the process has exited.
bool readable_now(int fd) {
  pollfd p{fd, POLLIN, 0};
  int n = 0;
  while ((n = ::poll(&p, 1, 0)) < 0 && errno == EINTR) {
  }
  return n > 0;
}

// A pidfd (close-on-exec, as pidfd_open makes every one) of `pid`, which runs.
Result<int> open_live_pidfd(pid_t pid) {
  if (pid <= 0) return error(Code::kInvalidArgument, "owner pid {}: not a process id", pid);
  const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) {
    const int err = errno;
    if (err == ESRCH) return error(Code::kNotFound, "owner pid {}: no such process", pid);
    if (err == ENOSYS)
      return error(Code::kNotSupported, "owner pid {}: this kernel has no pidfd_open (Linux 5.3 or later)", pid);
    return errno_error(err, fmt::format("pidfd_open of owner pid {}", pid));
  }
  if (readable_now(fd)) {  // a zombie: exited, not reaped yet
    ::close(fd);
    return error(Code::kNotFound, "owner pid {}: the process has exited", pid);
  }
  return fd;
}

}  // namespace

struct OwnerWatch::State {
  pid_t pid = 0;
  int pidfd = -1;
  int wake_fd = -1;  // eventfd: written once by the destructor
  std::function<void()> on_gone;
  std::chrono::milliseconds delay{0};
  std::thread thread;

  ~State() {
    if (thread.joinable()) {
      const uint64_t one = 1;
      (void)!::write(wake_fd, &one, sizeof one);
      thread.join();
    }
    if (pidfd >= 0) ::close(pidfd);
    if (wake_fd >= 0) ::close(wake_fd);
  }

  void run() {
    pollfd fds[2] = {{wake_fd, POLLIN, 0}, {pidfd, POLLIN, 0}};
    if (!wait(fds, 2, std::nullopt)) return;  // woken: stopping
    if (delay.count() > 0 && !wait(fds, 1, std::chrono::steady_clock::now() + delay)) return;
    on_gone();
  }

  // Polls `fds` (the wake fd first) until one is ready or `until` passes;
  // false when the wake fd is.
  static bool wait(pollfd* fds, nfds_t n, std::optional<std::chrono::steady_clock::time_point> until) {
    for (;;) {
      int timeout_ms = -1;
      if (until) {
        auto left = std::chrono::ceil<std::chrono::milliseconds>(*until - std::chrono::steady_clock::now());
        timeout_ms = static_cast<int>(std::max<int64_t>(0, left.count()));
      }
      const int ready = ::poll(fds, n, timeout_ms);
      if (ready < 0) {
        // EINTR; ENOMEM, which passes: look again.
        if (errno != EINTR) std::this_thread::sleep_for(std::chrono::milliseconds(100));
        continue;
      }
      if (fds[0].revents != 0) return false;
      if (ready > 0 || until) return true;  // the owner exited, or the delay is over
    }
  }
};

OwnerWatch::OwnerWatch() = default;
OwnerWatch::OwnerWatch(std::unique_ptr<State> state) : state_(std::move(state)) {}
OwnerWatch::OwnerWatch(OwnerWatch&&) noexcept = default;
OwnerWatch& OwnerWatch::operator=(OwnerWatch&&) noexcept = default;
OwnerWatch::~OwnerWatch() = default;

pid_t OwnerWatch::pid() const { return state_ ? state_->pid : 0; }

Result<OwnerWatch> watch_owner(pid_t pid, std::function<void()> on_gone, std::chrono::milliseconds delay) {
  auto state = std::make_unique<OwnerWatch::State>();
  state->pid = pid;
  state->on_gone = std::move(on_gone);
  state->delay = delay;
  WEFT_TRY(state->pidfd, open_live_pidfd(pid));
  state->wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (state->wake_fd < 0) return errno_error(errno, "eventfd");
  // The thread takes no signal (a mount's stop signals must reach its main
  // thread): it starts with every signal blocked, then the caller's mask
  // comes back.
  sigset_t all, old;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);
  try {
    if (WEFT_FAULT("common.owner_watch.thread_refused"))
      throw std::system_error(EAGAIN, std::generic_category(), "injected");
    state->thread = std::thread([s = state.get()] { s->run(); });
  } catch (const std::exception& e) {  // std::system_error (EAGAIN: a process or memory limit), bad_alloc
    ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
    return error(Code::kOverloaded, "owner pid {}: cannot start the thread that watches it: {}", pid, e.what());
  }
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return OwnerWatch(std::move(state));
}

Result<void> check_owner(pid_t pid) {
  WEFT_TRY(int fd, open_live_pidfd(pid));
  ::close(fd);
  return {};
}

}  // namespace weft
