#include "storage/slab_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "common/assert.h"
#include "common/fault.h"

namespace weft::storage {

Result<std::unique_ptr<SlabFile>> SlabFile::open(const std::string& path, uint64_t slot_bytes, uint64_t extent_bytes,
                                                 std::atomic<bool>* failed_flag) {
  WEFT_ASSERT(slot_bytes % 4096 == 0 && slot_bytes > 0);
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0644);
  if (fd < 0) return errno_error(errno, "open slab file " + path);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return errno_error(err, "fstat " + path);
  }
  uint64_t extent = std::max(extent_bytes / slot_bytes, uint64_t{1}) * slot_bytes;
  return std::unique_ptr<SlabFile>(
      new SlabFile(path, fd, slot_bytes, extent, static_cast<uint64_t>(st.st_size), failed_flag));
}

SlabFile::SlabFile(std::string path, int fd, uint64_t slot_bytes, uint64_t extent_bytes, uint64_t file_bytes,
                   std::atomic<bool>* failed_flag)
    : path_(std::move(path)),
      fd_(fd),
      slot_bytes_(slot_bytes),
      extent_bytes_(extent_bytes),
      failed_flag_(failed_flag),
      file_bytes_(file_bytes) {}

SlabFile::~SlabFile() { ::close(fd_); }

uint64_t SlabFile::slot_count() const {
  std::lock_guard lock(grow_mu_);
  return file_bytes_ / slot_bytes_;
}

Result<void> SlabFile::ensure_slots(uint64_t slots) {
  std::lock_guard lock(grow_mu_);
  uint64_t need = slots * slot_bytes_;
  while (file_bytes_ < need) {
    uint64_t start = file_bytes_ / extent_bytes_ * extent_bytes_;  // extents stay aligned
    if (WEFT_FAULT("storage.slab.fallocate_enospc")) return error(Code::kNoSpace, "injected: fallocate {}", path_);
    if (::fallocate(fd_, 0, static_cast<off_t>(start), static_cast<off_t>(extent_bytes_)) != 0) {
      int err = errno;
      return errno_error(err, fmt::format("fallocate {} bytes at {} in {}", extent_bytes_, start, path_));
    }
    file_bytes_ = start + extent_bytes_;
  }
  return {};
}

Result<void> SlabFile::punch(uint32_t first, uint32_t count) {
  off_t offset = static_cast<off_t>(uint64_t{first} * slot_bytes_);
  off_t len = static_cast<off_t>(uint64_t{count} * slot_bytes_);
  if (WEFT_FAULT("storage.slab.punch_fail")) return error(Code::kIoError, "injected: punch {}", path_);
  if (::fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, offset, len) != 0) {
    int err = errno;
    return errno_error(err, fmt::format("punch slots {}..{} of {}", first, first + count - 1, path_));
  }
  return {};
}

Result<void> SlabFile::back(uint32_t slot) {
  WEFT_ASSERT(slot < slot_count());
  if (WEFT_FAULT("storage.slab.back_enospc")) return error(Code::kNoSpace, "injected: back slot of {}", path_);
  if (::fallocate(fd_, 0, static_cast<off_t>(uint64_t{slot} * slot_bytes_), static_cast<off_t>(slot_bytes_)) != 0) {
    int err = errno;
    return errno_error(err, fmt::format("allocate slot {} of {}", slot, path_));
  }
  return {};
}

Result<uint64_t> SlabFile::write(IoRing& ring, uint32_t slot, const void* buf, uint32_t len) {
  WEFT_ASSERT(len <= slot_bytes_ && len % 4096 == 0);
  if (WEFT_FAULT("storage.slab.write_eio")) return error(Code::kIoError, "injected: write {}", path_);
  int res = ring.write(fd_, buf, len, uint64_t{slot} * slot_bytes_);
  if (res < 0) return errno_error(-res, fmt::format("write slot {} of {}", slot, path_));
  if (static_cast<uint32_t>(res) != len)
    return error(Code::kIoError, "short write to slot {} of {}: {} of {} bytes", slot, path_, res, len);
  std::lock_guard lock(sync_mu_);
  return ++writes_done_;
}

Result<void> SlabFile::read(IoRing& ring, uint32_t slot, uint64_t offset_in_slot, void* buf, uint32_t len) {
  WEFT_ASSERT(offset_in_slot + len <= slot_bytes_);
  int res = ring.read(fd_, buf, len, uint64_t{slot} * slot_bytes_ + offset_in_slot);
  if (res < 0) return errno_error(-res, fmt::format("read slot {} of {}", slot, path_));
  if (static_cast<uint32_t>(res) != len)
    return error(Code::kIoError, "short read of slot {} of {}: {} of {} bytes", slot, path_, res, len);
  return {};
}

// A ticket taken after the caller's write completed is covered by any sync
// that starts after the ticket was taken. One waiter at a time leads a sync
// for every ticket issued so far; the others wait for it.
Result<void> SlabFile::sync_to(IoRing& ring, uint64_t ticket) {
  std::unique_lock lock(sync_mu_);
  WEFT_ASSERT(ticket <= writes_done_);
  while (writes_synced_ < ticket) {
    if (failed_) return error(*failed_);
    if (syncing_) {
      sync_cv_.wait(lock);
      continue;
    }
    syncing_ = true;
    uint64_t target = writes_done_;
    ++sync_calls_;
    lock.unlock();
    int res = WEFT_FAULT("storage.slab.fdatasync_eio") ? -EIO : ring.fdatasync(fd_);
    lock.lock();
    syncing_ = false;
    if (res < 0) {
      failed_ = errno_error(-res, "fdatasync " + path_).error();
      if (failed_flag_) failed_flag_->store(true);
    } else {
      writes_synced_ = std::max(writes_synced_, target);
    }
    sync_cv_.notify_all();
  }
  return {};
}

// A ticket taken now, as if a write completed now: only a sync that starts
// later covers it (tickets need not stand for real writes).
Result<void> SlabFile::sync_from_now(IoRing& ring) {
  uint64_t ticket;
  {
    std::lock_guard lock(sync_mu_);
    ticket = ++writes_done_;
  }
  return sync_to(ring, ticket);
}

uint64_t SlabFile::synced_ticket() const {
  std::lock_guard lock(sync_mu_);
  return writes_synced_;
}

std::optional<Status> SlabFile::failure() const {
  std::lock_guard lock(sync_mu_);
  return failed_;
}

uint64_t SlabFile::sync_calls() const {
  std::lock_guard lock(sync_mu_);
  return sync_calls_;
}

}  // namespace weft::storage
