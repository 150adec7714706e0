// storage/space_manager.h
// Which slots of which size class are in use, and how many bytes that is
// against the target's capacity. Rebuilt from the index at open (mark_used),
// never persisted on its own. Readers pin the slot they read so a slot freed
// by a concurrent commit is not handed out again until the read finished.
// Threading: thread-safe (one mutex; every operation is O(1) amortised apart
// from the lowest-free-slot search, which scans a bitmap word at a time).
// Invariants: used_bytes() == sum of class_bytes over used slots; a pinned
// slot that is freed stays allocated until its last unpin.
#pragma once

#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "common/status.h"

namespace weft::storage {

struct SlotRef {
  uint32_t size_class = 0;
  uint32_t slot = 0;
  bool operator==(const SlotRef&) const = default;
};

class SpaceManager {
 public:
  // Slots a class may have: slot numbers are 32 bits (ChunkMeta::slot).
  static constexpr uint64_t kSlotsPerClassMax = uint64_t{1} << 32;

  // `slots_per_class_max`: at most kSlotsPerClassMax (tests lower it).
  SpaceManager(uint32_t class_count, uint64_t capacity_bytes, uint64_t slots_per_class_max = kSlotsPerClassMax);

  // Marks a slot found in the index. kCorruption if it is already used
  // (two index entries claim one slot).
  Result<void> mark_used(SlotRef ref);
  // The lowest free slot of `size_class`, or kNoSpace when the capacity
  // would be exceeded or the class has no free slot number left.
  Result<SlotRef> allocate(uint32_t size_class);
  void free(SlotRef ref);
  void pin(SlotRef ref);
  void unpin(SlotRef ref);

  bool is_used(SlotRef ref) const;
  uint64_t used_bytes() const;
  uint64_t capacity_bytes() const;
  void set_capacity_bytes(uint64_t bytes);
  // Slots ever allocated in the class (highest used slot + 1 is <= this).
  uint64_t slot_high_water(uint32_t size_class) const;

 private:
  struct ClassState {
    std::vector<uint64_t> bitmap;  // bit set = used
    size_t hint_word = 0;          // no free bit below this word
    std::unordered_map<uint32_t, uint32_t> pins;
    std::unordered_map<uint32_t, bool> free_on_unpin;
  };
  void set_bit(ClassState& c, uint32_t slot);
  void release_locked(SlotRef ref);  // REQUIRES: mu_ held

  mutable std::mutex mu_;
  std::vector<ClassState> classes_;
  uint64_t used_bytes_ = 0;
  uint64_t capacity_bytes_;
  const uint64_t slots_per_class_max_;
};

}  // namespace weft::storage
