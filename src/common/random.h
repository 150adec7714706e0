// common/random.h
// Randomness behind a small interface, and a portable shuffle: chunk
// placement depends on it, so its output must be identical on every
// platform and standard library (never std::shuffle / std::uniform_*).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace weft {

class Random {
 public:
  virtual ~Random() = default;
  virtual uint64_t next_u64() = 0;
  // Uniform in [0, bound), bound > 0, without modulo bias (Lemire).
  uint64_t uniform(uint64_t bound);
};

// xoshiro256** seeded through splitmix64: fast, deterministic per seed.
class Xoshiro256 final : public Random {
 public:
  explicit Xoshiro256(uint64_t seed);
  uint64_t next_u64() override;

 private:
  uint64_t s_[4];
};

// A generator seeded from the OS (std::random_device) for jitter and seeds;
// reseeded in the child after fork() (otherwise both would draw the same).
Random& thread_random();
// A non-zero 64-bit id that no other process or client draws: client ids
// (meta and storage take two requests with one (client id, sequence) for one
// request retried). From the OS's entropy each time.
uint64_t random_id();

// Fisher-Yates with Xoshiro256(seed): same permutation everywhere.
template <class T>
void portable_shuffle(std::span<T> items, uint64_t seed) {
  Xoshiro256 rng(seed);
  for (size_t i = items.size(); i > 1; --i) {
    size_t j = static_cast<size_t>(rng.uniform(i));
    std::swap(items[i - 1], items[j]);
  }
}

// The permutation 0..n-1 of portable_shuffle.
std::vector<uint32_t> portable_permutation(uint32_t n, uint64_t seed);

}  // namespace weft
