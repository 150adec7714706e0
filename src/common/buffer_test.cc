#include "common/buffer.h"

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

namespace weft {
namespace {

TEST(Buffer, AlignedAndSized) {
  Buffer b = Buffer::allocate(5000);
  EXPECT_EQ(b.size(), 5000u);
  EXPECT_GE(b.capacity(), 5000u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 4096, 0u);
  std::memset(b.data(), 7, b.size());
  b.resize(10);
  EXPECT_EQ(b.size(), 10u);
}

TEST(Buffer, LargeBuffersAreReusedFromThePool) {
  size_t before = Buffer::pool_cached_bytes();
  std::byte* first;
  {
    Buffer b = Buffer::allocate(1 << 20);
    first = b.data();
    EXPECT_EQ(b.capacity(), 1u << 20);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 4096, 0u);
  }
  EXPECT_EQ(Buffer::pool_cached_bytes(), before + (1u << 20));
  Buffer again = Buffer::allocate((1 << 20) - 100);
  EXPECT_EQ(again.data(), first);
  EXPECT_EQ(Buffer::pool_cached_bytes(), before);
  Buffer copy = Buffer::copy_of(again.span().subspan(0, 100));
  EXPECT_EQ(copy.size(), 100u);
}

TEST(Buffer, PooledBytesHeldAndTheirPeakAreCountedByCapacity) {
  const size_t before = Buffer::pooled_bytes_held();
  Buffer::reset_pooled_peak();
  EXPECT_EQ(Buffer::pooled_bytes_peak(), before);
  {
    Buffer a = Buffer::allocate(3 << 20);  // a 4 MiB class
    Buffer small = Buffer::allocate(1000);  // not pool-sized: not counted
    EXPECT_EQ(Buffer::pooled_bytes_held(), before + (4u << 20));
    {
      Buffer b = Buffer::allocate(1 << 20);
      EXPECT_EQ(Buffer::pooled_bytes_held(), before + (5u << 20));
    }
    EXPECT_EQ(Buffer::pooled_bytes_held(), before + (4u << 20));
  }
  EXPECT_EQ(Buffer::pooled_bytes_held(), before);
  EXPECT_EQ(Buffer::pooled_bytes_peak(), before + (5u << 20));
  Buffer::reset_pooled_peak();
  EXPECT_EQ(Buffer::pooled_bytes_peak(), before);
}

// A process forked while another thread held one of the pool's locks (a
// client's I/O thread freeing a reply while Python forks a DataLoader
// worker) must not find it held forever: the child's first buffer of that
// size class would wait for good.
TEST(Buffer, AChildForkedWhileThePoolIsBusyCanAllocate) {
  std::atomic<bool> stop{false};
  std::thread churn([&] {
    while (!stop.load(std::memory_order_relaxed)) {
      Buffer b = Buffer::allocate(64 << 10);
      b.data()[0] = std::byte{1};
    }
  });
  int hung = 0;
  for (int i = 0; i < 300 && hung == 0; ++i) {
    pid_t pid = ::fork();
    if (pid == 0) {
      Buffer b = Buffer::allocate(64 << 10);  // the churning thread's class
      ::_exit(b.data() != nullptr ? 0 : 1);
    }
    ASSERT_GT(pid, 0);
    int status = 0;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (::waitpid(pid, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, &status, 0);
        ++hung;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  stop = true;
  churn.join();
  EXPECT_EQ(hung, 0) << "a child forked mid-allocation waited for a lock nobody would release";
}

}  // namespace
}  // namespace weft
