// common/mount_table.h
// What is mounted where, from the kernel's tables (/proc/self/mounts and
// /proc/self/mountinfo), read as text: never by touching the mount point,
// whose FUSE daemon may not answer (not started yet, stuck, or dead).
// Paths in those tables escape space, tab, newline and backslash as \ooo.
// Threading: pure functions (the readers open the files each call).
#pragma once

#include <istream>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace weft {

struct MountEntry {
  std::string point;   // unescaped
  std::string type;    // "ext4", "fuse.weft", ...
  std::string device;  // "major:minor" (mountinfo only)
};

std::string unescape_mount_field(std::string_view s);

// The last mount on `point` (the one visible there) in a /proc/self/mounts
// text, or nullopt.
std::optional<MountEntry> find_in_mounts(std::istream& mounts, const std::string& point);
// The same in a /proc/self/mountinfo text, with the device filled in.
std::optional<MountEntry> find_in_mountinfo(std::istream& mountinfo, const std::string& point);

// Readers of this process's tables.
std::optional<MountEntry> mount_at(const std::string& point);
Result<std::string> mounted_device(const std::string& point);  // "major:minor"

}  // namespace weft
