// storage/test_util.h
// Helpers for the storage tests: a temporary directory removed at scope end
// and deterministic chunk contents. Test-only.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "common/random.h"

namespace weft::storage::testing {

class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/weft_storage_XXXXXX";
    char* made = ::mkdtemp(tmpl.data());
    path_ = made ? made : "";
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

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
