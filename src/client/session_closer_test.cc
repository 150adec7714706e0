#include "client/session_closer.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "common/fault.h"

namespace weft::client {
namespace {

using std::chrono::milliseconds;

// A meta that answers closes with `answer` (settable), recording each call.
struct FakeMeta {
  struct Call {
    meta::Ino ino;
    uint64_t session;
    bool abandon;
  };
  std::mutex mu;
  std::vector<Call> calls;
  Code answer = Code::kOk;

  SessionCloser::Close fn() {
    return [this](const meta::Cred&, meta::Ino ino, uint64_t session, bool abandon) -> Result<void> {
      std::lock_guard lock(mu);
      calls.push_back({ino, session, abandon});
      if (answer == Code::kOk) return {};
      return error(answer, "fake meta");
    };
  }
  void set(Code c) {
    std::lock_guard lock(mu);
    answer = c;
  }
  std::vector<Call> seen() {
    std::lock_guard lock(mu);
    return calls;
  }
};

bool wait_for(const std::function<bool()>& done, milliseconds at_most = milliseconds(5000)) {
  const auto until = std::chrono::steady_clock::now() + at_most;
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(milliseconds(2));
  }
  return true;
}

TEST(SessionCloser, AClosedOrRefusedSessionIsNotTriedAgain) {
  FakeMeta meta;
  SessionCloser closer(meta.fn(), milliseconds(5));
  EXPECT_TRUE(closer.close({}, 7, 70, false).has_value());
  meta.set(Code::kBadHandle);  // gone already
  auto r = closer.close({}, 8, 80, true);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code(), Code::kBadHandle);
  EXPECT_EQ(closer.queued(), 0u);
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_EQ(meta.seen().size(), 2u) << "a close meta answered was sent again";
}

TEST(SessionCloser, ACloseMetaNeverHeardIsTriedAgainUntilItLands) {
  for (Code failure : {Code::kUnavailable, Code::kTimeout, Code::kIoError}) {
    SCOPED_TRACE(std::string(code_name(failure)));
    FakeMeta meta;
    meta.set(failure);
    SessionCloser closer(meta.fn(), milliseconds(5));
    auto r = closer.close({}, 9, 90, true);
    ASSERT_FALSE(r.has_value()) << "the caller's close did not reach meta";
    EXPECT_EQ(r.error().code(), failure);
    EXPECT_EQ(closer.queued(), 1u);
    ASSERT_TRUE(wait_for([&] { return meta.seen().size() >= 3; })) << "not tried again";
    EXPECT_EQ(closer.queued(), 1u);
    meta.set(Code::kOk);
    ASSERT_TRUE(wait_for([&] { return closer.queued() == 0; }));
    EXPECT_EQ(closer.retried_ok(), 1u);
    for (const auto& c : meta.seen()) {
      EXPECT_EQ(c.ino, 9u);
      EXPECT_EQ(c.session, 90u);
      EXPECT_TRUE(c.abandon) << "a retry changed what the close asks";
    }
    const size_t calls = meta.seen().size();
    std::this_thread::sleep_for(milliseconds(50));
    EXPECT_EQ(meta.seen().size(), calls) << "a landed close was sent again";
  }
}

// While meta stays away, a pass stops at the first close (the others would
// only wait out their own retries), which goes last, and the passes back off.
// The system refusing the retry thread leaves the caller's error (the
// session stays open at meta until the lease ends), not std::terminate.
TEST(SessionCloser, WithoutARetryThreadTheCloseIsNotQueued) {
  FakeMeta meta;
  meta.set(Code::kUnavailable);
  SessionCloser closer(meta.fn(), milliseconds(5));
  {
    fault::Scope refused("client.session_closer.thread_refused");
    auto r = closer.close({}, 9, 90, false);
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error().code(), Code::kUnavailable);
    EXPECT_EQ(refused.triggered(), 1);
  }
  EXPECT_EQ(closer.queued(), 0u);
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_EQ(meta.seen().size(), 1u);
  EXPECT_FALSE(closer.close({}, 10, 100, false).has_value());  // the thread starts now
  EXPECT_EQ(closer.queued(), 1u);
}

TEST(SessionCloser, WhileMetaStaysAwayOnePerPassIsTriedLessOftenEachTime) {
  FakeMeta meta;
  meta.set(Code::kUnavailable);
  SessionCloser closer(meta.fn(), milliseconds(10));
  for (uint64_t s = 1; s <= 3; ++s) (void)closer.close({}, 100 + s, s, false);
  std::this_thread::sleep_for(milliseconds(400));
  auto seen = meta.seen();
  ASSERT_GE(seen.size(), 5u);  // 3 closes, then retries after 10, 20, 40 ... ms
  // Doubling from 10 ms: at most ~6 retries fit in 400 ms (one every 10 ms would be 40).
  EXPECT_LE(seen.size(), 3u + 8u) << "no back-off";
  for (size_t i = 3; i < seen.size(); ++i)
    EXPECT_EQ(seen[i].session, (i - 3) % 3 + 1) << "one close per pass, in turn";
  meta.set(Code::kOk);
  ASSERT_TRUE(wait_for([&] { return closer.queued() == 0; }));
  EXPECT_EQ(closer.retried_ok(), 3u);
  seen = meta.seen();
  ASSERT_GE(seen.size(), 3u);
  std::set<uint64_t> last{seen[seen.size() - 3].session, seen[seen.size() - 2].session, seen.back().session};
  EXPECT_EQ(last, (std::set<uint64_t>{1, 2, 3})) << "each ended once";
}

// A session whose close keeps failing (its commit at meta fails) holds up
// no other: it goes last after each try.
TEST(SessionCloser, OneThatKeepsFailingHoldsUpNoOther) {
  std::mutex mu;
  std::vector<uint64_t> ended;
  // Sessions 2 and 3 fail once too (meta away for them), then meta answers them.
  std::atomic<bool> away{true};
  SessionCloser other(
      [&](const meta::Cred&, meta::Ino, uint64_t session, bool) -> Result<void> {
        if (session == 1) return error(Code::kIoError, "fake meta: this inode's commit fails");
        if (away.load()) return error(Code::kUnavailable, "fake meta: away");
        std::lock_guard lock(mu);
        ended.push_back(session);
        return {};
      },
      milliseconds(5));
  (void)other.close({}, 101, 1, false);
  (void)other.close({}, 102, 2, false);
  (void)other.close({}, 103, 3, false);
  away = false;
  ASSERT_TRUE(wait_for([&] { return other.queued() == 1; })) << "sessions 2 and 3 never ended behind session 1";
  std::lock_guard lock(mu);
  EXPECT_EQ(std::set<uint64_t>(ended.begin(), ended.end()), (std::set<uint64_t>{2, 3}));
}

TEST(SessionCloser, StopDropsWhatWaits) {
  FakeMeta meta;
  meta.set(Code::kUnavailable);
  SessionCloser closer(meta.fn(), milliseconds(20));
  (void)closer.close({}, 5, 50, false);
  EXPECT_EQ(closer.queued(), 1u);
  closer.stop();
  EXPECT_EQ(closer.queued(), 0u);
  const size_t calls = meta.seen().size();
  meta.set(Code::kOk);
  std::this_thread::sleep_for(milliseconds(60));
  EXPECT_EQ(meta.seen().size(), calls) << "tried after stop";
  // A close after stop is still sent, just not queued.
  EXPECT_TRUE(closer.close({}, 6, 60, false).has_value());
  meta.set(Code::kUnavailable);
  EXPECT_FALSE(closer.close({}, 6, 61, false).has_value());
  EXPECT_EQ(closer.queued(), 0u);
}

}  // namespace
}  // namespace weft::client
