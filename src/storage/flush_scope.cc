#include "storage/flush_scope.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/vfs.h>

#include <fstream>
#include <sstream>

#include <fmt/format.h>

namespace weft::storage {
namespace {

constexpr long kExt4Magic = 0xEF53;
constexpr long kXfsMagic = 0x58465342;

// The kernel's name of the block device holding `dir` ("vda", "loop0").
std::string device_name(const std::string& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return {};
  std::ifstream uevent(fmt::format("/sys/dev/block/{}:{}/uevent", major(st.st_dev), minor(st.st_dev)));
  std::string line;
  while (std::getline(uevent, line))
    if (line.starts_with("DEVNAME=")) return line.substr(8);
  return {};
}

// ext4 lists its mount options per device; data=journal appears only when set.
bool ext4_journals_data(const std::string& dir) {
  std::string dev = device_name(dir);
  if (dev.empty()) return true;  // cannot tell: assume the unsafe case
  std::ifstream options("/proc/fs/ext4/" + dev + "/options");
  if (!options) return true;
  std::stringstream text;
  text << options.rdbuf();
  return text.str().find("data=journal") != std::string::npos;
}

}  // namespace

bool one_fdatasync_flushes_all(const std::string& dir) {
  struct statfs fs {};
  if (::statfs(dir.c_str(), &fs) != 0) return false;
  if (fs.f_type == kXfsMagic) return true;
  if (fs.f_type == kExt4Magic) return !ext4_journals_data(dir);
  return false;
}

bool one_fdatasync_flushes_both(const std::string& a, const std::string& b) {
  struct stat sa {}, sb {};
  return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev &&
         one_fdatasync_flushes_all(a);
}

}  // namespace weft::storage
