#include "common/random.h"

#include <pthread.h>

#include <atomic>
#include <random>

namespace weft {
namespace {

// fork() copies the calling thread's generator: parent and child would draw
// the same "random" ids from then on (two clients with one client id, whose
// mutations meta then takes for retries of each other). Children count here.
std::atomic<uint64_t> g_forks{0};
void count_fork_in_child() { g_forks.fetch_add(1, std::memory_order_relaxed); }

// Registered once at load, never inside a first thread_random() call (a fork
// in the middle of that call's static initialisation would leave the
// child's guard taken).
[[maybe_unused]] const bool kForkCounted = ::pthread_atfork(nullptr, nullptr, count_fork_in_child) == 0;

uint64_t os_seed() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

}  // namespace

uint64_t Random::uniform(uint64_t bound) {
  // Lemire's nearly divisionless method.
  unsigned __int128 m = static_cast<unsigned __int128>(next_u64()) * bound;
  auto low = static_cast<uint64_t>(m);
  if (low < bound) {
    uint64_t threshold = -bound % bound;
    while (low < threshold) {
      m = static_cast<unsigned __int128>(next_u64()) * bound;
      low = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

Xoshiro256::Xoshiro256(uint64_t seed) {
  for (auto& s : s_) s = splitmix64(seed);
}

uint64_t Xoshiro256::next_u64() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

Random& thread_random() {
  struct Seeded {
    Xoshiro256 rng{os_seed()};
    uint64_t forks = g_forks.load(std::memory_order_relaxed);
  };
  thread_local Seeded t;
  if (uint64_t f = g_forks.load(std::memory_order_relaxed); f != t.forks) {  // a child of a fork: reseed
    t.rng = Xoshiro256(os_seed());
    t.forks = f;
  }
  return t.rng;
}

uint64_t random_id() { return os_seed() | 1; }

std::vector<uint32_t> portable_permutation(uint32_t n, uint64_t seed) {
  std::vector<uint32_t> order(n);
  for (uint32_t i = 0; i < n; ++i) order[i] = i;
  portable_shuffle(std::span<uint32_t>(order), seed);
  return order;
}

}  // namespace weft
