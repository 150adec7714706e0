#include "storage/space_manager.h"

#include <algorithm>
#include <bit>

#include "common/assert.h"
#include "storage/chunk_meta.h"

namespace weft::storage {

SpaceManager::SpaceManager(uint32_t class_count, uint64_t capacity_bytes, uint64_t slots_per_class_max)
    : classes_(class_count),
      capacity_bytes_(capacity_bytes),
      slots_per_class_max_(std::min(slots_per_class_max, kSlotsPerClassMax)) {}

void SpaceManager::set_bit(std::vector<uint64_t>& bits, uint32_t slot) {
  size_t word = slot / 64;
  if (bits.size() <= word) bits.resize(word + 1, 0);
  bits[word] |= uint64_t{1} << (slot % 64);
}

bool SpaceManager::clear_bit(std::vector<uint64_t>& bits, uint32_t slot) {
  size_t word = slot / 64;
  uint64_t mask = uint64_t{1} << (slot % 64);
  if (word >= bits.size() || (bits[word] & mask) == 0) return false;
  bits[word] &= ~mask;
  return true;
}

void SpaceManager::set_holding(ClassState& c, uint32_t slot) {
  size_t word = slot / 64;
  if (word < c.holding.size() && ((c.holding[word] >> (slot % 64)) & 1)) return;
  set_bit(c.holding, slot);
  ++c.holding_count;
  c.holding_top_word = std::max(c.holding_top_word, word);
}

Result<void> SpaceManager::mark_used(SlotRef ref) {
  std::lock_guard lock(mu_);
  if (ref.size_class >= classes_.size())
    return error(Code::kCorruption, "index names size class {} but only {} exist", ref.size_class, classes_.size());
  ClassState& c = classes_[ref.size_class];
  size_t word = ref.slot / 64;
  if (word < c.bitmap.size() && (c.bitmap[word] >> (ref.slot % 64)) & 1)
    return error(Code::kCorruption, "slot {} of class {} claimed by two index entries", ref.slot, ref.size_class);
  set_bit(c.bitmap, ref.slot);
  used_bytes_ += class_bytes(ref.size_class);
  return {};
}

void SpaceManager::mark_free_unknown(uint32_t size_class, uint64_t slot_count) {
  std::lock_guard lock(mu_);
  ClassState& c = classes_[size_class];
  slot_count = std::min(slot_count, slots_per_class_max_);
  size_t words = (slot_count + 63) / 64;
  if (words == 0) return;
  c.bitmap.resize(std::max(c.bitmap.size(), words), 0);
  c.holding.resize(std::max(c.holding.size(), words), 0);
  c.hole.resize(std::max(c.hole.size(), words), 0);
  for (size_t w = 0; w < words; ++w) {
    uint64_t in_file = w + 1 < words || slot_count % 64 == 0 ? ~uint64_t{0} : (uint64_t{1} << (slot_count % 64)) - 1;
    uint64_t unknown = ~c.bitmap[w] & in_file;
    c.holding_count += static_cast<uint64_t>(std::popcount(unknown & ~c.holding[w]));
    c.holding[w] |= unknown;
    c.hole[w] |= unknown;
  }
  c.holding_top_word = std::max(c.holding_top_word, words - 1);
}

Result<Allocation> SpaceManager::allocate(uint32_t size_class) {
  WEFT_ASSERT(size_class < classes_.size());
  std::lock_guard lock(mu_);
  uint64_t bytes = class_bytes(size_class);
  if (used_bytes_ + bytes > capacity_bytes_)
    return error(Code::kNoSpace, "target full: {} bytes used of {} capacity, a {} byte slot does not fit", used_bytes_,
                 capacity_bytes_, bytes);
  ClassState& c = classes_[size_class];
  size_t w = c.hint_word;
  while (w < c.bitmap.size() && c.bitmap[w] == ~uint64_t{0}) ++w;
  c.hint_word = w;
  uint64_t slot = uint64_t{w} * 64;
  if (w < c.bitmap.size()) slot += static_cast<uint64_t>(std::countr_one(c.bitmap[w]));
  // Every slot number of the class is taken (a 32-bit number would wrap onto slot 0).
  if (slot >= slots_per_class_max_)
    return error(Code::kNoSpace, "size class {} has all its {} slots in use, a {} byte slot does not fit", size_class,
                 slots_per_class_max_, bytes);
  Allocation a;
  a.size_class = size_class;
  a.slot = static_cast<uint32_t>(slot);
  set_bit(c.bitmap, a.slot);
  if (clear_bit(c.holding, a.slot)) --c.holding_count;
  a.needs_backing = clear_bit(c.hole, a.slot);
  used_bytes_ += bytes;
  return a;
}

void SpaceManager::release_locked(SlotRef ref) {
  ClassState& c = classes_[ref.size_class];
  size_t word = ref.slot / 64;
  WEFT_ASSERT_MSG(word < c.bitmap.size() && ((c.bitmap[word] >> (ref.slot % 64)) & 1), "freeing a free slot");
  c.bitmap[word] &= ~(uint64_t{1} << (ref.slot % 64));
  c.hint_word = std::min(c.hint_word, word);
  used_bytes_ -= class_bytes(ref.size_class);
  set_holding(c, ref.slot);
}

void SpaceManager::free_unbacked(SlotRef ref, bool may_hold_space) {
  WEFT_ASSERT(ref.size_class < classes_.size());
  std::lock_guard lock(mu_);
  ClassState& c = classes_[ref.size_class];
  WEFT_ASSERT_MSG(!c.pins.contains(ref.slot), "free_unbacked of a pinned slot");
  bool was_used = clear_bit(c.bitmap, ref.slot);
  WEFT_ASSERT_MSG(was_used, "freeing a free slot");
  c.hint_word = std::min<size_t>(c.hint_word, ref.slot / 64);
  used_bytes_ -= class_bytes(ref.size_class);
  set_bit(c.hole, ref.slot);
  if (may_hold_space) set_holding(c, ref.slot);
}

std::vector<SlotRun> SpaceManager::take_for_punch(uint32_t size_class, uint64_t keep_bytes, size_t slots_max) {
  WEFT_ASSERT(size_class < classes_.size());
  std::lock_guard lock(mu_);
  ClassState& c = classes_[size_class];
  uint64_t keep = keep_bytes / class_bytes(size_class);
  if (c.holding_count <= keep) return {};
  uint64_t want = std::min<uint64_t>(c.holding_count - keep, slots_max);
  std::vector<SlotRun> runs;
  size_t w = std::min(c.holding_top_word + 1, c.holding.size());
  while (want > 0 && w-- > 0) {
    c.holding_top_word = w;
    while (want > 0 && c.holding[w] != 0) {
      int bit = 63 - std::countl_zero(c.holding[w]);
      uint32_t slot = static_cast<uint32_t>(w * 64 + static_cast<size_t>(bit));
      c.holding[w] &= ~(uint64_t{1} << bit);
      --c.holding_count;
      --want;
      set_bit(c.bitmap, slot);  // taken: allocate() skips it
      c.punching.insert(slot);
      if (!runs.empty() && runs.back().first == uint64_t{slot} + 1) {  // 64-bit: slot 2^32-1 ends no run at 0
        --runs.back().first;
        ++runs.back().count;
      } else {
        runs.push_back({slot, 1});
      }
    }
  }
  return runs;
}

void SpaceManager::punched(uint32_t size_class, const std::vector<SlotRun>& runs, bool ok) {
  std::lock_guard lock(mu_);
  ClassState& c = classes_[size_class];
  for (const SlotRun& run : runs)
    for (uint64_t s = run.first; s < uint64_t{run.first} + run.count; ++s) {  // a run may end at 2^32
      const auto slot = static_cast<uint32_t>(s);
      bool taken = c.punching.erase(slot) == 1;
      WEFT_ASSERT_MSG(taken, "punched() of a slot not taken for punching");
      clear_bit(c.bitmap, slot);
      c.hint_word = std::min<size_t>(c.hint_word, slot / 64);
      set_bit(c.hole, slot);
      if (!ok) set_holding(c, slot);
    }
}

uint64_t SpaceManager::holding_bytes() const {
  std::lock_guard lock(mu_);
  uint64_t total = 0;
  for (uint32_t k = 0; k < classes_.size(); ++k) total += classes_[k].holding_count * class_bytes(k);
  return total;
}

void SpaceManager::free(SlotRef ref) {
  WEFT_ASSERT(ref.size_class < classes_.size());
  std::lock_guard lock(mu_);
  ClassState& c = classes_[ref.size_class];
  if (c.pins.contains(ref.slot)) {
    WEFT_ASSERT_MSG(!c.free_on_unpin.contains(ref.slot), "slot freed twice");
    c.free_on_unpin[ref.slot] = true;
    return;
  }
  release_locked(ref);
}

void SpaceManager::pin(SlotRef ref) {
  std::lock_guard lock(mu_);
  ++classes_[ref.size_class].pins[ref.slot];
}

void SpaceManager::unpin(SlotRef ref) {
  std::lock_guard lock(mu_);
  ClassState& c = classes_[ref.size_class];
  auto it = c.pins.find(ref.slot);
  WEFT_ASSERT_MSG(it != c.pins.end(), "unpin of a slot that is not pinned");
  if (--it->second > 0) return;
  c.pins.erase(it);
  if (c.free_on_unpin.erase(ref.slot) > 0) release_locked(ref);
}

bool SpaceManager::is_used(SlotRef ref) const {
  std::lock_guard lock(mu_);
  const ClassState& c = classes_[ref.size_class];
  size_t word = ref.slot / 64;
  if (word >= c.bitmap.size()) return false;
  if (c.free_on_unpin.contains(ref.slot) || c.punching.contains(ref.slot)) return false;
  return (c.bitmap[word] >> (ref.slot % 64)) & 1;
}

uint64_t SpaceManager::used_bytes() const {
  std::lock_guard lock(mu_);
  return used_bytes_;
}

uint64_t SpaceManager::capacity_bytes() const {
  std::lock_guard lock(mu_);
  return capacity_bytes_;
}

void SpaceManager::set_capacity_bytes(uint64_t bytes) {
  std::lock_guard lock(mu_);
  capacity_bytes_ = bytes;
}

uint64_t SpaceManager::slot_high_water(uint32_t size_class) const {
  std::lock_guard lock(mu_);
  const ClassState& c = classes_[size_class];
  for (size_t w = c.bitmap.size(); w-- > 0;)
    if (c.bitmap[w] != 0) return w * 64 + 64 - static_cast<uint64_t>(std::countl_zero(c.bitmap[w]));
  return 0;
}

}  // namespace weft::storage
