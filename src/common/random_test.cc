#include "common/random.h"

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>

namespace weft {
namespace {

// A child of fork() must not draw what its parent draws next: ids from it
// (client ids) would collide between the two processes.
TEST(Random, ParentAndChildOfAForkDrawDifferently) {
  (void)thread_random().next_u64();  // the generator exists before the fork
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    uint64_t v[2] = {thread_random().next_u64(), random_id()};
    _exit(::write(fds[1], v, sizeof(v)) == sizeof(v) ? 0 : 1);
  }
  uint64_t mine[2] = {thread_random().next_u64(), random_id()};
  uint64_t child[2] = {0, 0};
  ASSERT_EQ(::read(fds[0], child, sizeof(child)), static_cast<ssize_t>(sizeof(child)));
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ::close(fds[0]);
  ::close(fds[1]);
  EXPECT_NE(mine[0], child[0]);
  EXPECT_NE(mine[1], child[1]);
  EXPECT_NE(random_id(), 0u);
}

TEST(Random, DeterministicPerSeed) {
  Xoshiro256 a(42), b(42), c(43);
  for (int i = 0; i < 100; ++i) {
    uint64_t x = a.next_u64();
    EXPECT_EQ(x, b.next_u64());
    EXPECT_NE(x, c.next_u64());
  }
}

TEST(Random, PortableShuffleIsFixed) {
  // Placement depends on this exact output: changing it moves every chunk.
  auto p = portable_permutation(8, 7);
  auto again = portable_permutation(8, 7);
  EXPECT_EQ(p, again);
  auto sorted = p;
  std::sort(sorted.begin(), sorted.end());
  for (uint32_t i = 0; i < 8; ++i) EXPECT_EQ(sorted[i], i);
  std::vector<uint32_t> golden = {6, 0, 2, 3, 4, 7, 1, 5};
  EXPECT_EQ(p, golden) << "portable_permutation output changed: on-disk placement would move";
}

TEST(Random, UniformInRange) {
  Xoshiro256 r(1);
  for (int i = 0; i < 10000; ++i) EXPECT_LT(r.uniform(7), 7u);
}

}  // namespace
}  // namespace weft
