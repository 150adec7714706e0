// storage/space_manager.h
// Which slots of which size class are in use, and how many bytes that is
// against the target's capacity. Rebuilt from the index at open (mark_used),
// never persisted on its own. Readers pin the slot they read so a slot freed
// by a concurrent commit is not handed out again until the read finished.
//
// Giving space back (the chunk engine's punch pass, chunk_engine.h): a free
// slot is in one of these states, each a bit of its own per class:
//   holding  - it may hold filesystem space (freed after use, or found free
//              inside a slab file at open): a candidate to punch;
//   hole     - it may be a hole (punched, or found free at open): allocate()
//              says so (Allocation::needs_backing) and the writer re-backs it
//              (fallocate) before writing it;
//   punching - taken by take_for_punch() until punched(): allocate() skips it
//              (it counts as taken, not as used bytes).
// A slot found free at open is both holding and hole (unknown). allocate()
// clears holding and hole. Only free slots whose last pin is gone become
// holding, so a punch never runs under a read of the slot.
// Threading: thread-safe (one mutex; every operation is O(1) amortised apart
// from the lowest-free-slot search, which scans a bitmap word at a time, and
// take_for_punch, which scans down from the highest holding slot).
// Invariants: used_bytes() == sum of class_bytes over used slots; a pinned
// slot that is freed stays allocated until its last unpin; a holding, hole
// or punching slot is never used; a punching slot is neither holding nor hole.
#pragma once

#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/status.h"

namespace weft::storage {

struct SlotRef {
  uint32_t size_class = 0;
  uint32_t slot = 0;
  bool operator==(const SlotRef&) const = default;
};

// An allocated slot; needs_backing: it may be a hole (SpaceManager's "hole"
// state), so its range must be allocated (SlabFile::back) before a write.
struct Allocation : SlotRef {
  bool needs_backing = false;
};

// Consecutive slots [first, first + count) of one class.
struct SlotRun {
  uint32_t first = 0;
  uint32_t count = 0;
  bool operator==(const SlotRun&) const = default;
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
  // Marks every free slot below `slot_count` (the slab file's slots) as
  // holding and hole: after a restart nobody knows which were punched. Call
  // after the index's mark_used calls.
  void mark_free_unknown(uint32_t size_class, uint64_t slot_count);
  // The lowest free slot of `size_class`, or kNoSpace when the capacity
  // would be exceeded or the class has no free slot number left.
  Result<Allocation> allocate(uint32_t size_class);
  // Frees a slot that may hold disk space (it was written, or its write
  // failed): it becomes holding once its last pin is gone.
  void free(SlotRef ref);
  // Frees a slot whose backing failed (never written): it becomes a hole,
  // and holding too if `may_hold_space` (a failed fallocate may have left
  // part of its range allocated). REQUIRES: not pinned.
  void free_unbacked(SlotRef ref, bool may_hold_space);
  void pin(SlotRef ref);
  void unpin(SlotRef ref);

  // Takes up to `slots_max` holding slots of `size_class` for punching, the
  // highest first, leaving the lowest `keep_bytes` worth of them holding
  // (allocate() hands out the lowest: those are reused without a fallocate).
  // Runs in descending order. Every slot taken must be given back with punched().
  std::vector<SlotRun> take_for_punch(uint32_t size_class, uint64_t keep_bytes, size_t slots_max);
  // Gives taken slots back: `ok` - punched, they become holes; otherwise
  // (the punch failed, maybe half done) holding and hole.
  void punched(uint32_t size_class, const std::vector<SlotRun>& runs, bool ok);
  // Bytes of holding slots (free, maybe still taking filesystem space).
  uint64_t holding_bytes() const;

  bool is_used(SlotRef ref) const;
  uint64_t used_bytes() const;
  uint64_t capacity_bytes() const;
  void set_capacity_bytes(uint64_t bytes);
  // Highest taken slot + 1 (used or being punched; at open: used).
  uint64_t slot_high_water(uint32_t size_class) const;

 private:
  struct ClassState {
    std::vector<uint64_t> bitmap;   // bit set = taken (used or punching)
    std::vector<uint64_t> holding;  // bit set = free, may hold disk space
    std::vector<uint64_t> hole;     // bit set = free, may be a hole
    size_t hint_word = 0;           // no free bit below this word
    size_t holding_top_word = 0;    // no holding bit above this word
    uint64_t holding_count = 0;
    std::unordered_map<uint32_t, uint32_t> pins;
    std::unordered_map<uint32_t, bool> free_on_unpin;
    std::unordered_set<uint32_t> punching;
  };
  static void set_bit(std::vector<uint64_t>& bits, uint32_t slot);
  static bool clear_bit(std::vector<uint64_t>& bits, uint32_t slot);  // true if it was set
  void set_holding(ClassState& c, uint32_t slot);  // REQUIRES: mu_ held
  void release_locked(SlotRef ref);  // REQUIRES: mu_ held; the slot becomes holding

  mutable std::mutex mu_;
  std::vector<ClassState> classes_;
  uint64_t used_bytes_ = 0;
  uint64_t capacity_bytes_;
  const uint64_t slots_per_class_max_;
};

}  // namespace weft::storage
