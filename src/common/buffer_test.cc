#include "common/buffer.h"

#include <gtest/gtest.h>

#include <cstring>

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

}  // namespace
}  // namespace weft
