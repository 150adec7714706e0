// Space of the chunk engine: making a slot writable (slab growth, re-backing
// a punched slot), the space pass that punches free slots, and the capacity
// figures. The rules are in chunk_engine.h ("Space").
#include <algorithm>

#include "common/log_throttle.h"
#include "common/logging.h"
#include "storage/chunk_engine.h"
#include "storage/engine_internal.h"

namespace weft::storage {

namespace {
// Slots one take_for_punch hands out: allocate() waits for at most one batch's selection.
constexpr size_t kPunchBatchSlots = 4096;
}  // namespace

Result<void> ChunkEngine::make_writable(SlabFile& file, const Allocation& slot) {
  if (slot.slot >= file.slot_count()) {  // the slab file must grow: by one extent
    WEFT_RETURN_IF_ERROR(
        space_guard_->admit(FreeSpaceGuard::Kind::kGrow, std::max(options_.extent_bytes, file.slot_bytes())));
    return file.ensure_slots(uint64_t{slot.slot} + 1);
  }
  if (!slot.needs_backing) return {};
  WEFT_RETURN_IF_ERROR(space_guard_->admit(FreeSpaceGuard::Kind::kGrow, file.slot_bytes()));
  return file.back(slot.slot);
}

void ChunkEngine::release_unwritten(SlabFile* file, const Allocation& slot, bool backed) {
  if (backed) return space_.free(slot);
  // A failed fallocate may have allocated part of the range: punch it again.
  // Past the file's end (its growth failed) there is nothing to punch.
  bool holds = file && slot.slot < file->slot_count() && !file->punch(slot.slot, 1);
  space_.free_unbacked(slot, holds);
}

Result<uint64_t> ChunkEngine::punch_free_slots() {
  std::lock_guard pass(punch_mu_);
  uint64_t punched = 0;
  for (uint32_t c = 0; c < class_count_ && !punch_unsupported_.load(); ++c) {
    WEFT_TRY(uint64_t bytes, punch_class(c));
    punched += bytes;
  }
  return punched;
}

// A batch at a time: its slots are out of allocate()'s reach until punched()
// gives them back, as holes (or, the punch failed, as unknown).
Result<uint64_t> ChunkEngine::punch_class(uint32_t size_class) {
  uint64_t punched = 0;
  for (;;) {
    std::vector<SlotRun> runs = space_.take_for_punch(size_class, options_.free_slack_bytes, kPunchBatchSlots);
    if (runs.empty()) return punched;
    Result<void> done = [&]() -> Result<void> {
      WEFT_TRY(SlabFile * file, slab(size_class));
      for (const SlotRun& run : runs) {
        WEFT_RETURN_IF_ERROR(file->punch(run.first, run.count));
        punched += uint64_t{run.count} * class_bytes(size_class);
      }
      return {};
    }();
    space_.punched(size_class, runs, done.has_value());
    if (!done) {
      if (done.error().code() == Code::kNotSupported) punch_unsupported_.store(true);
      return error(done.error());
    }
  }
}

std::chrono::nanoseconds ChunkEngine::space_pass_tick() {
  if (auto synced = committer_->sync_retired_keys(); !synced) {
    if (auto held = space_log_->admit())
      WEFT_LOG_WARN("target {} ({}): space pass: {}{}", options_.target_id, dir_, synced.error(),
                    LogThrottle::held_back(*held));
  }
  auto punched = punch_free_slots();
  if (!punched) {
    if (auto held = space_log_->admit())
      WEFT_LOG_WARN("target {} ({}): space pass: {}{}{}", options_.target_id, dir_, punched.error(),
                    punch_unsupported_.load() ? " (no more punches: free slots keep their space)" : "",
                    LogThrottle::held_back(*held));
  }
  return std::chrono::milliseconds(options_.space_pass_interval_ms);
}

uint64_t ChunkEngine::free_bytes() const {
  uint64_t used = space_.used_bytes(), cap = space_.capacity_bytes();
  uint64_t own = used >= cap ? 0 : cap - used;
  return std::min(own, space_guard_->headroom_bytes());
}

uint64_t ChunkEngine::fs_id() const { return space_guard_->fs_id(); }

uint64_t ChunkEngine::fs_free_bytes() const { return space_guard_->headroom_bytes(); }

uint64_t ChunkEngine::capacity_bytes() const { return space_.used_bytes() + free_bytes(); }

}  // namespace weft::storage
