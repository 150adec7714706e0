#include "common/crc32c.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace weft {
namespace {

TEST(Crc32c, StandardCheckValue) {
  const std::string s = "123456789";
  EXPECT_EQ(crc32c(s.data(), s.size()), 0xE3069283u);
  EXPECT_EQ(crc32c(nullptr, 0), 0u);
}

TEST(Crc32c, ExtendEqualsWhole) {
  std::vector<unsigned char> data(100000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<unsigned char>(i * 7 + 3);
  uint32_t whole = crc32c(data.data(), data.size());
  uint32_t part = crc32c_extend(0, data.data(), 333);
  part = crc32c_extend(part, data.data() + 333, data.size() - 333);
  EXPECT_EQ(whole, part);
  data[5000] ^= 1;
  EXPECT_NE(crc32c(data.data(), data.size()), whole);
}

}  // namespace
}  // namespace weft
