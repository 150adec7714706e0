#include "common/free_space.h"

#include <sys/statvfs.h>

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>

namespace weft {

namespace {
int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
// FNV-1a, continued from `h`.
uint64_t fnv1a(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// This machine (this boot): filesystem ids are unique on one machine only
// (XFS's is the device number, and cloned images share ext4 UUIDs), so they
// are qualified by the kernel's boot id (the host name where it is missing).
uint64_t machine_hash() {
  static const uint64_t hash = [] {
    std::string id;
    if (std::ifstream in("/proc/sys/kernel/random/boot_id"); in) std::getline(in, id);
    if (id.empty()) {
      char host[256] = {};
      if (::gethostname(host, sizeof host - 1) == 0) id = host;
    }
    return fnv1a(14695981039346656037ull, id.data(), id.size());
  }();
  return hash;
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
  const uint64_t fsid = static_cast<uint64_t>(vfs.f_fsid);
  uint64_t id = fsid == 0 ? 0 : fnv1a(machine_hash(), &fsid, sizeof fsid);
  fs_id_.store(fsid != 0 && id == 0 ? 1 : id, std::memory_order_relaxed);
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
