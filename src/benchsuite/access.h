// benchsuite/access.h
// How a workload reaches the files it measures: one interface, two ways in.
//   - PosixAccess: open/pread/pwrite/fsync/stat/unlink under a directory (a
//     FUSE mount of Weft, or any plain directory: the local-disk baseline);
//   - NativeAccess: libweft (include/weft/client.h) under a path of a Weft
//     cluster.
// Workloads use paths relative to the access's root ("w1/ckpt-0"), so each
// workload is written once. session() gives a new independent client of the
// same target (its own libweft Client, or just itself for POSIX, where every
// open is its own fd) for workloads that model several clients.
// Threading: Access and Handle are thread-safe (as libweft and the kernel are).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"

namespace weft::bench {

// An open file.
class Handle {
 public:
  virtual ~Handle() = default;
  // Reads up to dst.size() bytes; short only at the end of the file.
  virtual Result<size_t> pread(std::span<std::byte> dst, uint64_t offset) = 0;
  virtual Result<void> pwrite(std::span<const std::byte> src, uint64_t offset) = 0;
  virtual Result<void> fsync() = 0;
  virtual Result<void> close() = 0;
  // Drops the file's pages from the kernel's page cache (POSIX:
  // posix_fadvise DONTNEED), so a later read of it is cold again; nothing
  // for native handles (libweft keeps no file data).
  virtual void drop_cache() {}
};

class Access {
 public:
  virtual ~Access() = default;
  // "native", "mount" or "directory" (the `access` of WORKLOADS.md).
  virtual std::string kind() const = 0;
  // What was given on the command line ("weft:///bench", "/mnt/weft/bench").
  virtual std::string target() const = 0;

  // `flags`: O_RDONLY / O_WRONLY | O_CREAT | O_TRUNC ...
  virtual Result<std::unique_ptr<Handle>> open(const std::string& rel, int flags) = 0;
  virtual Result<void> mkdirs(const std::string& rel) = 0;
  // The size of a file; kNotFound (or the errno's code) when missing.
  virtual Result<uint64_t> stat(const std::string& rel) = 0;
  virtual Result<void> remove(const std::string& rel) = 0;  // a file or an empty directory
  // Removes rel and everything under it; missing is fine.
  virtual Result<void> remove_tree(const std::string& rel) = 0;
  // An independent client of the same target (see the header comment).
  virtual Result<std::unique_ptr<Access>> session() = 0;
  // Makes the next reads cold: for POSIX, sync and drop the page cache; for
  // native, a fresh Client (plus the page cache drop, which empties the
  // servers' cached metadata when they run on this machine). Says what was done.
  virtual std::string make_cold() = 0;
};

// "weft://MGMTD_ADDR/PATH" or "weft:///PATH" (native; `config` is the client
// config, MGMTD_ADDR overrides its mgmtd address), otherwise a directory
// (created if missing; "mount" when it is on a FUSE file system).
Result<std::unique_ptr<Access>> open_access(const std::string& target, const std::string& config,
                                            double statahead_s, std::optional<size_t> early_read_bytes = {});

// sync(), then `echo 3 > /proc/sys/vm/drop_caches`. Returns what happened
// ("page cache dropped" or why not).
std::string drop_page_cache();

}  // namespace weft::bench
