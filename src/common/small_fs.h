// common/small_fs.h (tests only)
// A small filesystem mounted for a test, to meet a full disk for real:
// tmpfs, or ext4 on a loop device where O_DIRECT is needed (tmpfs refuses
// it). Needs root (the tests run as root in CI); mount() says why it could
// not mount so the test can skip. Unmounted by the destructor (a lazy
// unmount: a file still open does not keep it busy; the loop device is
// released with the last reference), even when the test failed.
#pragma once

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <expected>
#include <filesystem>
#include <memory>
#include <string>

#include <fmt/format.h>

namespace weft::testing {

class SmallFs {
 public:
  enum class Type { kTmpfs, kExt4 };

  // Mounts a filesystem of about `bytes` at `parent`/small (the ext4 image
  // lives beside it in `parent`).
  static std::expected<std::unique_ptr<SmallFs>, std::string> mount(const std::string& parent, uint64_t bytes,
                                                                     Type type) {
    std::string mnt = parent + "/small";
    std::error_code ec;
    std::filesystem::create_directories(mnt, ec);
    if (ec) return std::unexpected("mkdir " + mnt + ": " + ec.message());
    if (type == Type::kTmpfs) {
      std::string opts = fmt::format("size={}", bytes);
      if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, opts.c_str()) != 0)
        return std::unexpected(std::string("mount tmpfs (needs root): ") + std::strerror(errno));
    } else {
      std::string image = parent + "/small.img";
      int fd = ::open(image.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
      if (fd < 0) return std::unexpected("create " + image);
      bool sized = ::ftruncate(fd, static_cast<off_t>(bytes)) == 0;
      ::close(fd);
      if (!sized) return std::unexpected("size " + image);
      std::string cmd = fmt::format("mkfs.ext4 -q -F -m 0 '{}' >/dev/null 2>&1 && mount -o loop '{}' '{}' 2>/dev/null",
                                    image, image, mnt);
      if (std::system(cmd.c_str()) != 0) return std::unexpected("mkfs.ext4 + mount -o loop failed (needs root)");
    }
    return std::unique_ptr<SmallFs>(new SmallFs(mnt));
  }

  ~SmallFs() { ::umount2(path_.c_str(), MNT_DETACH); }
  SmallFs(const SmallFs&) = delete;
  SmallFs& operator=(const SmallFs&) = delete;

  const std::string& path() const { return path_; }

  static uint64_t available_bytes(const std::string& path) {
    struct statvfs vfs {};
    if (::statvfs(path.c_str(), &vfs) != 0) return 0;
    return uint64_t{vfs.f_bavail} * vfs.f_frsize;
  }
  uint64_t available_bytes() const { return available_bytes(path_); }

  // Grows the file `filler` until about `left` bytes stay available (the
  // filesystem's own bookkeeping makes it approximate, within a block or two).
  // False if it could not (the filesystem already has less free).
  bool fill_until(uint64_t left) {
    uint64_t avail = available_bytes();
    if (avail <= left) return avail == left;
    int fd = ::open((path_ + "/filler").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return false;
    struct stat st {};
    ::fstat(fd, &st);
    bool ok = ::fallocate(fd, 0, st.st_size, static_cast<off_t>(avail - left)) == 0;
    ::close(fd);
    return ok;
  }
  // Removes the filler.
  void unfill() { ::unlink((path_ + "/filler").c_str()); }

 private:
  explicit SmallFs(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

}  // namespace weft::testing
