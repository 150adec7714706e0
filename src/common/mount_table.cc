#include "common/mount_table.h"

#include <fstream>
#include <sstream>

namespace weft {

std::string unescape_mount_field(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    bool octal = s[i] == '\\' && i + 3 < s.size();
    for (size_t k = 1; octal && k <= 3; ++k) octal = s[i + k] >= '0' && s[i + k] <= '7';
    if (octal) {
      out += static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

std::optional<MountEntry> find_in_mounts(std::istream& mounts, const std::string& point) {
  std::optional<MountEntry> found;
  std::string line;
  while (std::getline(mounts, line)) {
    // source mount-point type options dump pass
    std::istringstream fields(line);
    std::string source, at, type;
    if (!(fields >> source >> at >> type)) continue;
    if (unescape_mount_field(at) == point) found = MountEntry{point, type, ""};
  }
  return found;
}

std::optional<MountEntry> find_in_mountinfo(std::istream& mountinfo, const std::string& point) {
  std::optional<MountEntry> found;
  std::string line;
  while (std::getline(mountinfo, line)) {
    // id parent major:minor root mount-point options [optional fields] - type source super-options
    std::istringstream fields(line);
    std::string id, parent, device, root, at, word, type;
    if (!(fields >> id >> parent >> device >> root >> at)) continue;
    while (fields >> word && word != "-") {
    }
    fields >> type;
    if (unescape_mount_field(at) == point) found = MountEntry{point, type, device};
  }
  return found;
}

std::optional<MountEntry> mount_at(const std::string& point) {
  std::ifstream in("/proc/self/mounts");
  return find_in_mounts(in, point);
}

Result<std::string> mounted_device(const std::string& point) {
  std::ifstream in("/proc/self/mountinfo");
  if (!in) return error(Code::kIoError, "cannot read /proc/self/mountinfo");
  auto m = find_in_mountinfo(in, point);
  if (!m) return error(Code::kNotFound, "{} is not in /proc/self/mountinfo", point);
  return m->device;
}

}  // namespace weft
