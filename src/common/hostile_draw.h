// common/hostile_draw.h
// For the hostile-request and hostile-reply tests (src/*/hostile_*_test.cc):
// the seed of a storm and the draws its values come from. The seed is the
// suite's fixed one unless WEFT_HOSTILE_SEED (decimal, or 0x hex) replaces
// it, so a failing run can be repeated exactly.
// Threading: a HostileDraw is one thread's.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <map>
#include <random>
#include <string>
#include <utility>

namespace weft {

// How a storm's requests to one method were answered: code name -> count.
using HostileCodeCounts = std::map<std::string, int>;

// One method's summary line part, " kOk 12 kNotFound 3", and its total.
inline std::pair<std::string, int> describe_counts(const HostileCodeCounts& codes) {
  std::string line;
  int total = 0;
  for (const auto& [code, n] : codes) {
    line += " " + code + " " + std::to_string(n);
    total += n;
  }
  return {line, total};
}

inline uint64_t hostile_seed(uint64_t fixed) {
  const char* env = std::getenv("WEFT_HOSTILE_SEED");
  return env != nullptr && *env != '\0' ? std::strtoull(env, nullptr, 0) : fixed;
}

class HostileDraw {
 public:
  explicit HostileDraw(uint64_t seed) : rng_(seed) {}
  std::mt19937_64& rng() { return rng_; }
  uint64_t u64() { return rng_(); }
  uint32_t u32() { return static_cast<uint32_t>(rng_()); }
  // REQUIRES: n > 0.
  size_t below(size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng_); }
  uint64_t between(uint64_t lo, uint64_t hi) { return std::uniform_int_distribution<uint64_t>(lo, hi)(rng_); }
  bool chance(int percent) { return below(100) < static_cast<size_t>(percent); }
  template <class T>
  T one_of(std::initializer_list<T> values) {
    return values.begin()[below(values.size())];
  }

 protected:
  std::mt19937_64 rng_;
};

}  // namespace weft
