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

Result<void> check_xattr_name(std::string_view name) {
  if (name.empty() || name.size() > kXattrNameBytesMax)
    return error(Code::kOutOfRange, "xattr name of {} bytes", name.size());
  if (name.find('\0') != std::string_view::npos) return error(Code::kInvalidArgument, "xattr name contains NUL");
  return {};
}

namespace {

// As Linux's xattr_permission: what may not be read reads as absent (ENODATA).
Result<void> check_xattr_permission(const Inode& n, const Cred& c, std::string_view name, bool write) {
  if (name.starts_with("user.")) {
    if (!n.is_file() && !n.is_dir()) {
      if (!write) return error(Code::kNoData, "no xattr '{}': user xattrs only on files and directories", name);
      return error(Code::kNotPermitted, "user xattrs only on files and directories");
    }
    const bool owner_or_root = c.uid == 0 || c.uid == n.uid;
    if (write && n.is_dir() && (n.mode & kModeSticky) && !owner_or_root)
      return error(Code::kNotPermitted, "only the owner may set user xattrs of sticky directory {}", n.ino);
    return check_access(n, c, write ? kAccessWrite : kAccessRead);
  }
  if (name.starts_with("trusted.") && !write && c.uid != 0) return error(Code::kNoData, "no xattr '{}'", name);
  if (name.starts_with("trusted.") || (write && name.starts_with("security."))) {
    if (c.uid != 0) return error(Code::kNotPermitted, "xattr '{}' needs root", name);
    return {};
  }
  if (name.starts_with("security.")) return {};
  return error(Code::kNotSupported, "xattr namespace of '{}' not supported", name);
}

}  // namespace

Result<void> check_xattr_access(const Inode& n, const Cred& c, std::string_view name, bool write) {
  WEFT_RETURN_IF_ERROR(check_xattr_name(name));
  WEFT_RETURN_IF_ERROR(check_xattr_permission(n, c, name, write));
  // As Linux's xattr_resolve_name, which vfs_setxattr and vfs_getxattr call
  // after the permission check: a namespace prefix alone names nothing.
  for (std::string_view prefix : {"user.", "trusted.", "security."})
    if (name == prefix) return error(Code::kInvalidArgument, "xattr name '{}' is a namespace without a name", name);
  return {};
}

}  // namespace weft::meta
