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

void SpaceManager::set_bit(ClassState& c, uint32_t slot) {
  size_t word = slot / 64;
  if (c.bitmap.size() <= word) c.bitmap.resize(word + 1, 0);
  c.bitmap[word] |= uint64_t{1} << (slot % 64);
}

Result<void> SpaceManager::mark_used(SlotRef ref) {
  std::lock_guard lock(mu_);
  if (ref.size_class >= classes_.size())
    return error(Code::kCorruption, "index names size class {} but only {} exist", ref.size_class, classes_.size());
  ClassState& c = classes_[ref.size_class];
  size_t word = ref.slot / 64;
  if (word < c.bitmap.size() && (c.bitmap[word] >> (ref.slot % 64)) & 1)
    return error(Code::kCorruption, "slot {} of class {} claimed by two index entries", ref.slot, ref.size_class);
  set_bit(c, ref.slot);
  used_bytes_ += class_bytes(ref.size_class);
  return {};
}

Result<SlotRef> SpaceManager::allocate(uint32_t size_class) {
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
  set_bit(c, static_cast<uint32_t>(slot));
  used_bytes_ += bytes;
  return SlotRef{size_class, static_cast<uint32_t>(slot)};
}

void SpaceManager::release_locked(SlotRef ref) {
  ClassState& c = classes_[ref.size_class];
  size_t word = ref.slot / 64;
  WEFT_ASSERT_MSG(word < c.bitmap.size() && ((c.bitmap[word] >> (ref.slot % 64)) & 1), "freeing a free slot");
  c.bitmap[word] &= ~(uint64_t{1} << (ref.slot % 64));
  c.hint_word = std::min(c.hint_word, word);
  used_bytes_ -= class_bytes(ref.size_class);
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
  if (c.free_on_unpin.contains(ref.slot)) return false;
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
