#include "common/owner_watch.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "common/fault.h"

namespace weft {
namespace {

using namespace std::chrono_literals;

// A child process that sleeps until killed; killed and reaped by the destructor.
class Sleeper {
 public:
  Sleeper() : pid_(::fork()) {
    if (pid_ == 0) {
      for (;;) ::pause();
    }
  }
  ~Sleeper() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  Sleeper(const Sleeper&) = delete;
  Sleeper& operator=(const Sleeper&) = delete;

  pid_t pid() const { return pid_; }
  // Kills it and leaves it a zombie (not reaped): it has exited all the same.
  void kill_unreaped() {
    ::kill(pid_, SIGKILL);
    siginfo_t info{};
    ::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOWAIT);
  }

 private:
  pid_t pid_;
};

template <class Pred>
bool within(std::chrono::milliseconds limit, Pred pred) {
  for (auto until = std::chrono::steady_clock::now() + limit; std::chrono::steady_clock::now() < until;) {
    if (pred()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return pred();
}

TEST(OwnerWatch, RunsOnGoneOnceWhenTheOwnerExits) {
  Sleeper owner;
  ASSERT_GT(owner.pid(), 0);
  std::atomic<int> calls{0};
  auto watch = watch_owner(owner.pid(), [&] { ++calls; });
  ASSERT_TRUE(watch.has_value()) << watch.error();
  EXPECT_EQ(watch->pid(), owner.pid());
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(calls.load(), 0) << "the owner still runs";
  owner.kill_unreaped();
  EXPECT_TRUE(within(5s, [&] { return calls.load() > 0; }));
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(calls.load(), 1);
}

TEST(OwnerWatch, RunsOnGoneTheDelayAfterTheOwnerExitsUnlessDestroyedFirst) {
  Sleeper owner, other;
  std::atomic<int> calls{0}, other_calls{0};
  auto watch = watch_owner(owner.pid(), [&] { ++calls; }, 400ms);
  auto destroyed = watch_owner(other.pid(), [&] { ++other_calls; }, 400ms);
  ASSERT_TRUE(watch.has_value()) << watch.error();
  ASSERT_TRUE(destroyed.has_value()) << destroyed.error();
  const auto killed = std::chrono::steady_clock::now();
  owner.kill_unreaped();
  other.kill_unreaped();
  std::this_thread::sleep_for(150ms);
  EXPECT_EQ(calls.load(), 0) << "before the delay";
  *destroyed = OwnerWatch();  // within the delay: its on_gone never runs
  EXPECT_TRUE(within(5s, [&] { return calls.load() > 0; }));
  EXPECT_GE(std::chrono::steady_clock::now() - killed, 400ms);
  std::this_thread::sleep_for(400ms);
  EXPECT_EQ(calls.load(), 1);
  EXPECT_EQ(other_calls.load(), 0);
}

TEST(OwnerWatch, RefusesAPidWithNoProcess) {
  pid_t gone = ::fork();
  if (gone == 0) ::_exit(0);
  ASSERT_GT(gone, 0);
  ASSERT_EQ(::waitpid(gone, nullptr, 0), gone);  // reaped: the pid names nothing
  bool called = false;
  auto watch = watch_owner(gone, [&] { called = true; });
  ASSERT_FALSE(watch.has_value());
  EXPECT_EQ(watch.error().code(), Code::kNotFound);
  EXPECT_NE(watch.error().message().find("no such process"), std::string::npos) << watch.error();
  EXPECT_EQ(watch.error().message().find('\n'), std::string::npos) << "one line";
  EXPECT_FALSE(check_owner(gone).has_value());
  EXPECT_FALSE(called);
  for (pid_t bad : {0, -1}) {
    auto w = watch_owner(bad, [] {});
    ASSERT_FALSE(w.has_value());
    EXPECT_EQ(w.error().code(), Code::kInvalidArgument) << w.error();
    EXPECT_EQ(check_owner(bad).error().code(), Code::kInvalidArgument);
  }
}

TEST(OwnerWatch, RefusesAnOwnerThatHasExitedButIsNotReaped) {
  Sleeper owner;
  owner.kill_unreaped();
  auto watch = watch_owner(owner.pid(), [] {});
  ASSERT_FALSE(watch.has_value());
  EXPECT_EQ(watch.error().code(), Code::kNotFound);
  EXPECT_NE(watch.error().message().find("has exited"), std::string::npos) << watch.error();
  EXPECT_FALSE(check_owner(owner.pid()).has_value());
}

TEST(OwnerWatch, CheckOwnerAcceptsALiveProcess) {
  EXPECT_TRUE(check_owner(::getpid()).has_value());
  Sleeper owner;
  EXPECT_TRUE(check_owner(owner.pid()).has_value());
}

TEST(OwnerWatch, DestroyedWhileTheOwnerLivesItNeverRunsOnGone) {
  Sleeper owner;
  std::atomic<int> calls{0};
  {
    auto watch = watch_owner(owner.pid(), [&] { ++calls; });
    ASSERT_TRUE(watch.has_value()) << watch.error();
  }  // joined here
  owner.kill_unreaped();
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(calls.load(), 0);
}

TEST(OwnerWatch, AMovedWatchKeepsWatchingAndAssigningStopsTheOldOne) {
  Sleeper first, second;
  std::atomic<int> first_calls{0}, second_calls{0};
  auto made = watch_owner(first.pid(), [&] { ++first_calls; });
  ASSERT_TRUE(made.has_value()) << made.error();
  OwnerWatch watch = std::move(*made);
  EXPECT_EQ(made->pid(), 0);  // moved from: watches nothing
  EXPECT_EQ(watch.pid(), first.pid());
  auto other = watch_owner(second.pid(), [&] { ++second_calls; });
  ASSERT_TRUE(other.has_value()) << other.error();
  watch = std::move(*other);  // the watch of `first` stops
  EXPECT_EQ(watch.pid(), second.pid());
  first.kill_unreaped();
  second.kill_unreaped();
  EXPECT_TRUE(within(5s, [&] { return second_calls.load() > 0; }));
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(first_calls.load(), 0);
  EXPECT_EQ(second_calls.load(), 1);
}

TEST(OwnerWatch, ARefusedThreadIsAnError) {
  Sleeper owner;
  fault::Scope refused("common.owner_watch.thread_refused");
  auto watch = watch_owner(owner.pid(), [] {});
  ASSERT_FALSE(watch.has_value());
  EXPECT_EQ(watch.error().code(), Code::kOverloaded);
  EXPECT_NE(watch.error().message().find("cannot start the thread"), std::string::npos) << watch.error();
  EXPECT_EQ(refused.triggered(), 1);
}

// The watch's thread blocks every signal: a stop signal the callback raises
// for the process goes to a thread that takes it (the mount's main thread).
TEST(OwnerWatch, TheWatchThreadTakesNoSignal) {
  Sleeper owner;
  std::atomic<bool> blocked{false};
  auto watch = watch_owner(owner.pid(), [&] {
    sigset_t mask;
    ::pthread_sigmask(SIG_BLOCK, nullptr, &mask);
    blocked = sigismember(&mask, SIGTERM) == 1 && sigismember(&mask, SIGINT) == 1;
  });
  ASSERT_TRUE(watch.has_value()) << watch.error();
  sigset_t mine;
  ::pthread_sigmask(SIG_BLOCK, nullptr, &mine);
  EXPECT_EQ(sigismember(&mine, SIGTERM), 0) << "the caller's mask is restored";
  owner.kill_unreaped();
  EXPECT_TRUE(within(5s, [&] { return blocked.load(); }));
}

}  // namespace
}  // namespace weft
