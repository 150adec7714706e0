#include "common/free_space.h"

#include <sys/statvfs.h>

#include <cerrno>
#include <cstring>

namespace weft {

namespace {
int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

FreeSpaceGuard::FreeSpaceGuard(std::string dir, uint64_t reserve_bytes, std::chrono::milliseconds max_age)
    : dir_(std::move(dir)),
      reserve_(reserve_bytes),
      max_age_ns_(std::chrono::duration_cast<std::chrono::nanoseconds>(max_age).count()) {}

Result<uint64_t> FreeSpaceGuard::available_bytes() {
  struct statvfs vfs {};
  if (::statvfs(dir_.c_str(), &vfs) != 0)
    return error(Code::kIoError, "statvfs {}: {}", dir_, std::strerror(errno));
  uint64_t available = uint64_t{vfs.f_bavail} * vfs.f_frsize;
  uint64_t quarter = uint64_t{vfs.f_blocks} * vfs.f_frsize / 4;  // 0: a size not reported (some FUSE)
  if (quarter > 0 && reserve_.load(std::memory_order_relaxed) > quarter)
    reserve_.store(quarter, std::memory_order_relaxed);
  last_available_.store(available, std::memory_order_relaxed);
  fs_id_.store(static_cast<uint64_t>(vfs.f_fsid), std::memory_order_relaxed);
  last_read_ns_.store(now_ns(), std::memory_order_release);
  return available;
}

uint64_t FreeSpaceGuard::headroom_bytes() {
  int64_t read_at = last_read_ns_.load(std::memory_order_acquire);
  uint64_t available = last_available_.load(std::memory_order_relaxed);
  if (read_at == 0 || now_ns() - read_at > max_age_ns_) {
    if (auto fresh = available_bytes()) available = *fresh;
  }
  uint64_t reserve = reserve_bytes();
  return available > reserve ? available - reserve : 0;
}

Result<void> FreeSpaceGuard::admit(Kind kind, uint64_t bytes) {
  if (reserve_bytes() == 0) return {};
  int64_t read_at = last_read_ns_.load(std::memory_order_acquire);
  uint64_t available = last_available_.load(std::memory_order_relaxed);
  if (read_at == 0 || now_ns() - read_at > max_age_ns_ || available < 2 * reserve_bytes() + bytes) {
    WEFT_TRY(available, available_bytes());
  }
  uint64_t reserve = reserve_bytes();
  uint64_t floor = kind == Kind::kGrow ? reserve : reserve / 4;
  if (available >= floor && available - floor >= bytes) return {};
  return error(Code::kNoSpace, "{}: filesystem full ({} bytes free, {} kept in reserve for the store)", dir_,
               available, reserve);
}

}  // namespace weft
