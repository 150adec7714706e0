// meta/path_walk.h
// Resolves an absolute path to an inode through MetaStore lookups, the way
// the kernel's path walk does: search permission on every directory walked,
// "." and "..", symlinks followed (absolute ones restart at the root) up to 40
// per walk (kLoop beyond), kNotDirectory when a non-final component or a path
// with a trailing slash is not a directory, kNameTooLong for a component over
// 255 bytes or a path over 4095. The walk is not atomic: each step is one
// lookup, as in POSIX. Threading: thread-safe (stateless).
#pragma once

#include <string_view>

#include "meta/meta_store.h"

namespace weft::meta {

inline constexpr int kSymlinkFollowMax = 40;
inline constexpr size_t kPathBytesMax = 4095;

// follow_last: also follow a symlink in the final component (stat vs lstat).
Result<Inode> resolve_path(MetaStore& store, const Context& ctx, std::string_view path, bool follow_last = true);

}  // namespace weft::meta
