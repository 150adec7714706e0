#include "common/durable_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>

namespace weft {

Result<void> replace_file_durably(const std::string& path, std::string_view text) {
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!dir.empty()) std::filesystem::create_directories(dir, ec);
  if (ec) return error(Code::kIoError, "create {}: {}", dir.string(), ec.message());
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return errno_error(errno, "create " + tmp);
  bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && ::fdatasync(fd) == 0;
  int err = errno;
  ::close(fd);
  // A failed replace leaves nothing behind (path a directory, a full disk).
  if (!ok) {
    ::unlink(tmp.c_str());
    return errno_error(err, "write " + tmp);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    err = errno;
    ::unlink(tmp.c_str());
    return errno_error(err, "rename " + tmp + " to " + path);
  }
  if (int d = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); d >= 0) {
    ::fsync(d);
    ::close(d);
  }
  return {};
}

}  // namespace weft
