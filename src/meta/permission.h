// meta/permission.h
// POSIX permission rules of the namespace, as pure functions of inodes and
// caller credentials: rwx mode bits for owner/group/other (supplementary
// groups count), root (uid 0) bypassing read/write always and execute when
// any x bit is set or the inode is a directory, the sticky bit, and name
// validation. Threading: pure functions.
#pragma once

#include <string_view>

#include "common/status.h"
#include "meta/types.h"

namespace weft::meta {

enum Access : uint32_t { kAccessRead = 4, kAccessWrite = 2, kAccessExec = 1 };

// kPermissionDenied (EACCES) unless cred may access `inode` for every bit of `mask`.
Result<void> check_access(const Inode& inode, const Cred& cred, uint32_t mask);

// Removing or renaming `victim` out of `dir`: needs w+x on dir and, when dir is
// sticky, the caller must own dir or victim or be root (kNotPermitted, EPERM).
Result<void> check_remove(const Inode& dir, const Inode& victim, const Cred& cred);

// A FIFO, socket or device is opened by the kernel of the host that opens it
// (a mount's); Weft holds no data for it, so meta and libweft refuse to open
// one themselves: kNotSupported (EOPNOTSUPP).
inline std::unexpected<Status> special_not_openable(Ino ino) {
  return error(Code::kNotSupported, "inode {} is a FIFO, socket or device: open it through a mount", ino);
}

// May `cred` read (`write` false) or set/remove `name` of inode `n`, as
// Linux's xattr_permission and xattr_resolve_name: kOutOfRange (ERANGE) /
// kInvalidArgument for a bad name, kNoData for what may not be read (it
// reads as absent), kNotPermitted / kPermissionDenied, kNotSupported for a
// namespace other than user, trusted, security. Meta decides by it; a mount
// answers by it too where it knows the inode has no xattrs.
Result<void> check_xattr_access(const Inode& n, const Cred& cred, std::string_view name, bool write);
// The name alone: 1..kXattrNameBytesMax bytes (kOutOfRange), no NUL (kInvalidArgument).
Result<void> check_xattr_name(std::string_view name);

// A single path component: not empty, no '/' or NUL (kInvalidArgument), at
// most 255 bytes (kNameTooLong). "." and ".." pass; callers decide.
Result<void> check_name(std::string_view name);
inline bool is_dot_or_dotdot(std::string_view name) { return name == "." || name == ".."; }

}  // namespace weft::meta
