#include "meta/permission.h"

#include <algorithm>

namespace weft::meta {

bool Cred::in_group(uint32_t g) const {
  return gid == g || std::find(groups.begin(), groups.end(), g) != groups.end();
}

Result<void> check_access(const Inode& inode, const Cred& cred, uint32_t mask) {
  mask &= 7;
  if (cred.uid == 0) {
    if (!(mask & kAccessExec) || inode.is_dir() || (inode.mode & 0111)) return {};
    return error(Code::kPermissionDenied, "inode {}: no execute bit set, not even root", inode.ino);
  }
  uint32_t bits;
  if (cred.uid == inode.uid) {
    bits = (inode.mode >> 6) & 7;
  } else if (cred.in_group(inode.gid)) {
    bits = (inode.mode >> 3) & 7;
  } else {
    bits = inode.mode & 7;
  }
  if ((bits & mask) == mask) return {};
  return error(Code::kPermissionDenied, "inode {} mode {:o}: access {:o} denied to uid {}", inode.ino,
               inode.mode, mask, cred.uid);
}

Result<void> check_remove(const Inode& dir, const Inode& victim, const Cred& cred) {
  WEFT_RETURN_IF_ERROR(check_access(dir, cred, kAccessWrite | kAccessExec));
  if ((dir.mode & kModeSticky) && cred.uid != 0 && cred.uid != dir.uid && cred.uid != victim.uid)
    return error(Code::kNotPermitted, "sticky directory {}: uid {} owns neither it nor inode {}", dir.ino,
                 cred.uid, victim.ino);
  return {};
}

Result<void> check_name(std::string_view name) {
  if (name.empty()) return error(Code::kInvalidArgument, "empty name");
  if (name.size() > kNameBytesMax) return error(Code::kNameTooLong, "name of {} bytes", name.size());
  if (name.find('/') != std::string_view::npos || name.find('\0') != std::string_view::npos)
    return error(Code::kInvalidArgument, "name contains '/' or NUL");
  return {};
}

}  // namespace weft::meta
