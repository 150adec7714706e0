#include "storage/io_ring.h"

#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <chrono>
#include <thread>
#include <vector>

#include "common/buffer.h"
#include "common/fault.h"
#include "storage/test_util.h"

namespace weft::storage {
namespace {

TEST(IoRing, ConcurrentWritesAndReadsRoundTrip) {
  testing::TempDir dir;
  std::string path = dir.path() + "/f";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_DIRECT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::fallocate(fd, 0, 0, 64 * 4096), 0);
  auto ring = IoRing::create(8);
  ASSERT_TRUE(ring.has_value()) << ring.error();
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 16; ++i) {
        int block = t * 16 + i;
        auto data = testing::pattern(4096, block);
        Buffer w = Buffer::copy_of(data);
        if ((*ring)->write(fd, w.data(), 4096, uint64_t(block) * 4096) != 4096) failures++;
        Buffer r = Buffer::allocate(4096);
        if ((*ring)->read(fd, r.data(), 4096, uint64_t(block) * 4096) != 4096) failures++;
        if (std::memcmp(r.data(), data.data(), 4096) != 0) failures++;
      }
      if ((*ring)->fdatasync(fd) != 0) failures++;
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  // The reaper runs an op's callback (which wakes its waiter) before it
  // counts the op out of the depth: give it the moment it takes.
  for (int i = 0; i < 1000 && (*ring)->depth() != 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ((*ring)->depth(), 0);
  ::close(fd);
}

TEST(IoRing, AsyncBatchAndErrors) {
  auto ring = IoRing::create(4);
  ASSERT_TRUE(ring.has_value());
  Buffer b = Buffer::allocate(4096);
  EXPECT_EQ((*ring)->read(-1, b.data(), 4096, 0), -EBADF);
  std::atomic<int> done{0};
  testing::TempDir dir;
  std::string path = dir.path() + "/g";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_DIRECT, 0644);
  ASSERT_EQ(::fallocate(fd, 0, 0, 4096 * 32), 0);
  std::vector<Buffer> bufs;
  for (int i = 0; i < 32; ++i) bufs.push_back(Buffer::allocate(4096));
  for (int i = 0; i < 32; ++i)  // more than the ring holds: the rest queue
    (*ring)->submit_read(fd, bufs[i].data(), 4096, uint64_t(i) * 4096, [&](int res) {
      if (res == 4096) done.fetch_add(1);
    });
  while (done.load() < 32) std::this_thread::yield();
  EXPECT_LE((*ring)->submit_calls(), 32u + 2u);
  ::close(fd);
}

// A short submit (the kernel took fewer entries than the SQ held) is retried
// at once: the rest do not wait in the SQ for a later submission, which a
// quiet target may never make.
TEST(IoRing, AShortSubmitIsRetried) {
  auto ring = IoRing::create(8);
  ASSERT_TRUE(ring.has_value());
  testing::TempDir dir;
  std::string path = dir.path() + "/h";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_DIRECT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::fallocate(fd, 0, 0, 4096), 0);
  Buffer b = Buffer::allocate(4096);
  std::atomic<int> result{1};
  {
    fault::Scope shortened("storage.ring.submit_short", {.hits_max = 1});
    (*ring)->submit_read(fd, b.data(), 4096, 0, [&](int res) {
      result.store(res);
      result.notify_one();
    });
    if (shortened.triggered() == 0) GTEST_SKIP() << "fault injection compiled out";
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (result.load() == 1 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(result.load(), 4096) << "the read stayed in the submission queue";
  EXPECT_EQ((*ring)->read(fd, b.data(), 4096, 0), 4096);
  ::close(fd);
}

}  // namespace
}  // namespace weft::storage
