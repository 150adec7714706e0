// storage/slab_file.h
// One slab file per size class: an array of equal-sized slots opened with
// O_DIRECT. The file grows in fixed-size extents preallocated with fallocate,
// so slot writes never extend the file. Durability of slot writes is grouped:
// write() returns a ticket once the write completed; sync_to(ticket) waits
// for one fdatasync that started after that, shared by all writers waiting at
// the time. The chunk engine's index committer calls sync_to for the slots of
// a whole commit group.
// Threading: all methods are thread-safe. The SlabFile owns its fd.
// Invariants: slot_count() * slot_bytes() <= file size; a failed fdatasync is
// sticky (every later sync_to fails): the kernel may have dropped the
// dirty pages, so nothing written since can be acknowledged.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "common/status.h"
#include "storage/io_ring.h"

namespace weft::storage {

class SlabFile {
 public:
  // `failed_flag`, if given, is set when a sync fails (the owner's cheap
  // "any slab file failed"; it must outlive the file).
  static Result<std::unique_ptr<SlabFile>> open(const std::string& path, uint64_t slot_bytes, uint64_t extent_bytes,
                                                std::atomic<bool>* failed_flag = nullptr);
  ~SlabFile();
  SlabFile(const SlabFile&) = delete;
  SlabFile& operator=(const SlabFile&) = delete;

  int fd() const { return fd_; }
  uint64_t slot_bytes() const { return slot_bytes_; }
  const std::string& path() const { return path_; }
  // Slots backed by preallocated space.
  uint64_t slot_count() const;
  // Preallocates whole extents until `slots` slots exist. ENOSPC -> kNoSpace.
  Result<void> ensure_slots(uint64_t slots);
  // Gives the space of slots [first, first + count) back to the filesystem
  // (a hole; the file keeps its size, the slots read as zeros).
  // REQUIRES: nothing reads or writes them meanwhile (SpaceManager's punching state).
  Result<void> punch(uint32_t first, uint32_t count);
  // Allocates the space of a slot that may be a hole, so that writing it
  // cannot fail for lack of space. ENOSPC -> kNoSpace. REQUIRES: slot < slot_count().
  Result<void> back(uint32_t slot);

  // Writes `len` bytes (4 KiB multiple, aligned buffer) at the start of slot
  // `slot`; returns the write's sync ticket (not yet durable).
  Result<uint64_t> write(IoRing& ring, uint32_t slot, const void* buf, uint32_t len);
  // Waits for a group fdatasync that covers every write up to `ticket`.
  Result<void> sync_to(IoRing& ring, uint64_t ticket);
  // Waits for an fdatasync that starts after this call (not one already
  // running or done): its device flush then covers whatever reached the
  // device before the call, e.g. an index record written without a flush.
  Result<void> sync_from_now(IoRing& ring);
  // Reads `len` bytes at `offset_in_slot` of `slot` (both 4 KiB multiples).
  Result<void> read(IoRing& ring, uint32_t slot, uint64_t offset_in_slot, void* buf, uint32_t len);

  // The sticky failure of an earlier sync, if any (every later sync_to fails with it).
  std::optional<Status> failure() const;
  uint64_t sync_calls() const;
  // The highest ticket a finished fdatasync covers.
  uint64_t synced_ticket() const;

 private:
  SlabFile(std::string path, int fd, uint64_t slot_bytes, uint64_t extent_bytes, uint64_t file_bytes,
           std::atomic<bool>* failed_flag);

  const std::string path_;
  const int fd_;
  const uint64_t slot_bytes_;
  const uint64_t extent_bytes_;
  std::atomic<bool>* const failed_flag_;

  mutable std::mutex grow_mu_;
  uint64_t file_bytes_;  // GUARDED_BY(grow_mu_)

  mutable std::mutex sync_mu_;
  std::condition_variable sync_cv_;
  uint64_t writes_done_ = 0;       // GUARDED_BY(sync_mu_): tickets handed out
  uint64_t writes_synced_ = 0;     // GUARDED_BY(sync_mu_): tickets covered by a finished sync
  bool syncing_ = false;           // GUARDED_BY(sync_mu_)
  std::optional<Status> failed_;   // GUARDED_BY(sync_mu_): sticky sync failure
  uint64_t sync_calls_ = 0;        // GUARDED_BY(sync_mu_)
};

}  // namespace weft::storage
