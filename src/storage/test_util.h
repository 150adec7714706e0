// storage/test_util.h
// Helpers for the storage tests: a temporary directory removed at scope end
// and deterministic chunk contents. Test-only.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "common/temp_dir.h"
#include "common/random.h"

namespace weft::storage::testing {

using weft::testing::TempDir;

inline std::vector<std::byte> pattern(size_t n, uint64_t seed) {
  std::vector<std::byte> out(n);
  Xoshiro256 rng(seed);
  for (size_t i = 0; i < n; i += 8) {
    uint64_t v = rng.next_u64();
    for (size_t j = 0; j < 8 && i + j < n; ++j) out[i + j] = static_cast<std::byte>(v >> (8 * j));
  }
  return out;
}

}  // namespace weft::storage::testing
