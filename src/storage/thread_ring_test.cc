#include "storage/thread_ring.h"

#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <future>
#include <memory>
#include <vector>

#include <asio/post.hpp>

#include "common/buffer.h"
#include "rpc/io_pool.h"
#include "storage/test_util.h"

namespace weft::storage {
namespace {

// A file of `blocks` 4 KiB blocks, block i filled with pattern(4096, i), opened O_DIRECT.
int make_file(const std::string& path, int blocks) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_DIRECT, 0644);
  if (fd < 0) return fd;
  for (int i = 0; i < blocks; ++i) {
    Buffer b = Buffer::copy_of(testing::pattern(4096, i));
    if (::pwrite(fd, b.data(), 4096, off_t{i} * 4096) != 4096) return -1;
  }
  return fd;
}

TEST(ThreadRing, OnlyOnIoPoolThreads) { EXPECT_EQ(ThreadRing::for_this_thread(), nullptr); }

// More reads than the ring holds, all queued in one event-loop turn: every
// callback runs once on the submitting thread with the right bytes, and the
// reads reach the kernel in a few io_uring_enter calls, not one per read.
TEST(ThreadRing, BatchesReadsAndCompletesOnTheSameThread) {
  constexpr int kReads = 600;  // > kEntries: the rest wait for completions
  constexpr int kBlocks = 64;
  testing::TempDir dir;
  int fd = make_file(dir.path() + "/f", kBlocks);
  ASSERT_GE(fd, 0);
  rpc::IoPool io(1, "ring-test");
  struct State {
    std::vector<Buffer> bufs;
    int completed = 0, wrong = 0, foreign_thread = 0;
    std::promise<void> all_done;
  };
  auto st = std::make_shared<State>();
  for (int i = 0; i < kReads; ++i) st->bufs.push_back(Buffer::allocate(4096));
  std::promise<std::pair<uint64_t, bool>> stats;
  asio::post(io.at(0), [&, st] {
    ThreadRing* ring = ThreadRing::for_this_thread();
    ASSERT_NE(ring, nullptr);
    for (int i = 0; i < kReads; ++i) {
      int block = i % kBlocks;
      ring->submit_read(fd, st->bufs[i].data(), 4096, uint64_t(block) * 4096, [&, st, i, block, ring](int res) {
        if (!io.in_pool_thread()) st->foreign_thread++;
        auto want = testing::pattern(4096, block);
        if (res != 4096 || std::memcmp(st->bufs[i].data(), want.data(), 4096) != 0) st->wrong++;
        if (++st->completed == kReads) {
          stats.set_value({ring->submit_calls(), ring->inflight() == 0});
          st->all_done.set_value();
        }
      });
    }
    EXPECT_EQ(ring->submit_calls(), 0u);  // nothing submitted before the loop turn ends
  });
  auto done = st->all_done.get_future();
  ASSERT_EQ(done.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  auto [calls, idle] = stats.get_future().get();
  EXPECT_EQ(st->wrong, 0);
  EXPECT_EQ(st->foreign_thread, 0);
  EXPECT_TRUE(idle);
  EXPECT_GE(calls, 3u);  // 600 reads through 256 entries need at least three submissions
  EXPECT_LT(calls, 100u);
  io.stop();
  ::close(fd);
}

TEST(ThreadRing, ReportsErrorsToTheCallback) {
  rpc::IoPool io(1, "ring-test");
  Buffer b = Buffer::allocate(4096);
  std::promise<int> res;
  asio::post(io.at(0), [&] {
    ThreadRing* ring = ThreadRing::for_this_thread();
    ASSERT_NE(ring, nullptr);
    ring->submit_read(-1, b.data(), 4096, 0, [&](int r) { res.set_value(r); });
  });
  auto f = res.get_future();
  ASSERT_EQ(f.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(f.get(), -EBADF);
  io.stop();
}

// A thread that exits with reads in the kernel waits for them (their
// buffers stay valid) and drops the callbacks uncalled.
TEST(ThreadRing, ThreadExitWithReadsInFlight) {
  testing::TempDir dir;
  int fd = make_file(dir.path() + "/g", 8);
  ASSERT_GE(fd, 0);
  auto called = std::make_shared<std::atomic<int>>(0);
  {
    rpc::IoPool io(1, "ring-test");
    std::promise<void> queued;
    asio::post(io.at(0), [&] {
      ThreadRing* ring = ThreadRing::for_this_thread();
      for (int i = 0; i < 8; ++i) {
        auto buf = std::make_shared<Buffer>(Buffer::allocate(4096));
        ring->submit_read(fd, buf->data(), 4096, uint64_t(i) * 4096, [buf, called](int) { called->fetch_add(1); });
      }
      queued.set_value();
    });
    queued.get_future().wait();
    io.stop();  // the thread exits; its ring's destructor drains
  }
  EXPECT_LE(called->load(), 8);
  ::close(fd);
}

}  // namespace
}  // namespace weft::storage
