#include "common/rocks_env.h"

#include <fcntl.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>


namespace weft {
namespace {

using rocksdb::IODebugContext;
using rocksdb::IOOptions;
using rocksdb::IOStatus;

IOStatus errno_status(const std::string& what, const std::string& path, int err) {
  if (err == ENOSPC || err == EDQUOT) return IOStatus::NoSpace(what + " " + path, std::strerror(err));
  return IOStatus::IOError(what + " " + path, std::strerror(err));
}

// "000123.log": RocksDB's WAL names (the info log is "LOG", "LOG.old.<n>").
bool is_wal_name(const std::string& path) {
  size_t slash = path.rfind('/');
  std::string_view name(path);
  if (slash != std::string::npos) name.remove_prefix(slash + 1);
  if (!name.ends_with(".log") || name.size() == 4) return false;
  name.remove_suffix(4);
  return std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; });
}

thread_local int t_without_flush = 0;          // live WalSyncWithoutFlush scopes on this thread
std::atomic<uint64_t> g_deferred_syncs{0};

// A WAL written at `size_` over zeros that reach `zeroed_`. Invariant: bytes
// [size_, zeroed_) are zeros whose blocks and file size are durable, so a sync
// after an Append below zeroed_ flushes data only.
class PrezeroedWal final : public rocksdb::FSWritableFile {
 public:
  PrezeroedWal(std::string path, int fd, const rocksdb::FileOptions& options, uint64_t first_step,
               uint64_t max_step)
      : FSWritableFile(options), path_(std::move(path)), fd_(fd), step_(first_step), max_step_(max_step) {}
  ~PrezeroedWal() override {
    if (fd_ >= 0) ::close(fd_);
  }

  IOStatus Append(const rocksdb::Slice& data, const IOOptions&, IODebugContext*) override {
    if (size_ + data.size() > zeroed_) {
      IOStatus s = zero_ahead(size_ + data.size());
      if (!s.ok()) return s;
    }
    IOStatus s = pwrite_all(data.data(), data.size(), size_);
    if (s.ok()) size_ += data.size();
    return s;
  }

  // Only RocksDB's direct-I/O path truncates a WAL; honoured all the same.
  IOStatus Truncate(uint64_t size, const IOOptions&, IODebugContext*) override {
    if (::ftruncate(fd_, static_cast<off_t>(size)) != 0) return errno_status("truncate", path_, errno);
    size_ = zeroed_ = size;
    return IOStatus::OK();
  }

  IOStatus Close(const IOOptions&, IODebugContext*) override {
    int fd = std::exchange(fd_, -1);
    if (fd >= 0 && ::close(fd) != 0) return errno_status("close", path_, errno);
    return IOStatus::OK();
  }

  IOStatus Flush(const IOOptions&, IODebugContext*) override { return IOStatus::OK(); }

  IOStatus Sync(const IOOptions&, IODebugContext*) override {
    if (t_without_flush > 0) {
      // The pages reach the device; its cache flush is the caller's (WalSyncWithoutFlush).
      if (::sync_file_range(fd_, 0, 0, SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER) != 0)
        return errno_status("sync_file_range", path_, errno);
      g_deferred_syncs.fetch_add(1, std::memory_order_relaxed);
      return IOStatus::OK();
    }
    if (::fdatasync(fd_) != 0) return errno_status("fdatasync", path_, errno);
    return IOStatus::OK();
  }

  IOStatus Fsync(const IOOptions&, IODebugContext*) override {
    if (::fsync(fd_) != 0) return errno_status("fsync", path_, errno);
    return IOStatus::OK();
  }

  // pwrite and fdatasync of one fd may run concurrently.
  bool IsSyncThreadSafe() const override { return true; }

  uint64_t GetFileSize(const IOOptions&, IODebugContext*) override { return size_; }

  // The zeros are the preallocation; RocksDB's fallocate would only add
  // unwritten extents, whose first write is a metadata change again.
  IOStatus Allocate(uint64_t, uint64_t, const IOOptions&, IODebugContext*) override { return IOStatus::OK(); }

 private:
  IOStatus pwrite_all(const char* p, size_t n, uint64_t offset) {
    while (n > 0) {
      ssize_t w = ::pwrite(fd_, p, n, static_cast<off_t>(offset));
      if (w < 0) {
        if (errno == EINTR) continue;
        return errno_status("write", path_, errno);
      }
      p += w;
      n -= static_cast<size_t>(w);
      offset += static_cast<uint64_t>(w);
    }
    return IOStatus::OK();
  }

  // Extends the zeros past `need` by the current step (which doubles up to
  // max_step_: small logs stay small) and makes them durable.
  // On a nearly full disk the step shrinks to what this append needs, so
  // ENOSPC comes no earlier than it would for an append.
  IOStatus zero_ahead(uint64_t need) {
    uint64_t end = std::max(need, zeroed_ + step_);
    step_ = std::min(step_ * 2, max_step_);
    IOStatus s = zero_to(end);
    uint64_t just_enough = (need + 4095) / 4096 * 4096;
    if (s.IsNoSpace() && just_enough < end) s = zero_to(just_enough);
    return s;
  }

  IOStatus zero_to(uint64_t end) {
    static const char kZeros[1 << 16] = {};
    for (uint64_t off = zeroed_; off < end;) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(sizeof kZeros, end - off));
      IOStatus s = pwrite_all(kZeros, n, off);
      if (!s.ok()) return s;
      off += n;
    }
    if (::fdatasync(fd_) != 0) return errno_status("fdatasync", path_, errno);
    zeroed_ = end;
    return IOStatus::OK();
  }

  std::string path_;
  int fd_;
  uint64_t size_ = 0;
  uint64_t zeroed_ = 0;
  uint64_t step_;
  uint64_t max_step_;
};

// RocksDB's log format (db/log_format.h, stable since LevelDB): 32 KiB blocks
// of records, each a 7-byte header (crc32c 4, length 2 little-endian, type 1)
// and its payload; a block's last < 7 bytes are zero padding.
constexpr uint64_t kLogBlock = 32768;
constexpr uint64_t kLogHeader = 7;

// Passes a WAL through up to its first all-zero record header (the pre-zeroed
// space), then reports the end of the file. Records are overwrites of zeros,
// so a power loss in the middle of a sync may keep a later page and lose an
// earlier one; RocksDB's reader would skip the zeros of the lost page as
// padding and replay what follows, i.e. a commit without one it depends on.
// Ending the log at the first zero header keeps replay to a prefix, as with
// appends. The headers are found in the bytes as they pass (no second read).
class PrefixReader final : public rocksdb::FSSequentialFile {
 public:
  explicit PrefixReader(std::unique_ptr<rocksdb::FSSequentialFile> base) : base_(std::move(base)) {}

  IOStatus Read(size_t n, const IOOptions& options, rocksdb::Slice* result, char* scratch,
                IODebugContext* dbg) override {
    if (ended_) {
      *result = rocksdb::Slice();
      return IOStatus::OK();
    }
    IOStatus s = base_->Read(n, options, result, scratch, dbg);
    if (!s.ok()) return s;
    const uint64_t begin = pos_;
    pos_ += result->size();
    if (std::optional<uint64_t> end = scan(result->data(), begin)) {
      ended_ = true;
      // A zero header begun in an earlier read left < 7 zero bytes with
      // RocksDB: a truncated header at the end of the log, which it ignores.
      *result = rocksdb::Slice(result->data(), *end > begin ? *end - begin : 0);
    }
    return IOStatus::OK();
  }

  // Read and drop: the headers in the skipped bytes are checked all the same.
  IOStatus Skip(uint64_t n) override {
    std::vector<char> scratch(std::min<uint64_t>(n, kLogBlock));
    while (n > 0 && !ended_) {
      rocksdb::Slice got;
      IOStatus s = Read(static_cast<size_t>(std::min<uint64_t>(n, scratch.size())), IOOptions(), &got,
                        scratch.data(), nullptr);
      if (!s.ok()) return s;
      if (got.empty()) break;
      n -= got.size();
    }
    return IOStatus::OK();
  }

 private:
  // Walks the record headers among bytes [begin, pos_) (`data` holds them);
  // returns where the log ends if a zero header is among them.
  std::optional<uint64_t> scan(const char* data, uint64_t begin) {
    for (;;) {
      uint64_t left = kLogBlock - next_header_ % kLogBlock;
      if (left < kLogHeader) {  // a block's trailer
        next_header_ += left;
        continue;
      }
      for (; have_ < kLogHeader && next_header_ + have_ < pos_; ++have_)
        header_[have_] = static_cast<unsigned char>(data[next_header_ + have_ - begin]);
      if (have_ < kLogHeader) return std::nullopt;  // the rest comes with the next read
      if (std::all_of(header_, header_ + kLogHeader, [](unsigned char c) { return c == 0; })) return next_header_;
      next_header_ += kLogHeader + (header_[4] | (uint64_t{header_[5]} << 8));
      have_ = 0;
    }
  }

  std::unique_ptr<rocksdb::FSSequentialFile> base_;
  uint64_t pos_ = 0;          // bytes read from base_
  uint64_t next_header_ = 0;  // offset of the next record header
  unsigned char header_[kLogHeader] = {};
  uint64_t have_ = 0;         // bytes of that header seen so far
  bool ended_ = false;
};

class PrezeroedWalFs final : public rocksdb::FileSystemWrapper {
 public:
  PrezeroedWalFs(std::shared_ptr<rocksdb::FileSystem> base, uint64_t first_step, uint64_t max_step)
      : FileSystemWrapper(std::move(base)), first_step_(first_step), max_step_(std::max(first_step, max_step)) {}

  static const char* kClassName() { return "WeftPrezeroedWalFs"; }
  const char* Name() const override { return kClassName(); }

  IOStatus NewWritableFile(const std::string& path, const rocksdb::FileOptions& options,
                           std::unique_ptr<rocksdb::FSWritableFile>* result, IODebugContext* dbg) override {
    if (!is_wal_name(path) || options.use_direct_writes || options.use_mmap_writes)
      return target()->NewWritableFile(path, options, result, dbg);
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return errno_status("open", path, errno);
    *result = std::make_unique<PrezeroedWal>(path, fd, options, first_step_, max_step_);
    return IOStatus::OK();
  }

  IOStatus NewSequentialFile(const std::string& path, const rocksdb::FileOptions& options,
                             std::unique_ptr<rocksdb::FSSequentialFile>* result, IODebugContext* dbg) override {
    IOStatus s = target()->NewSequentialFile(path, options, result, dbg);
    if (!s.ok() || !is_wal_name(path) || options.use_direct_reads) return s;
    *result = std::make_unique<PrefixReader>(std::move(*result));
    return IOStatus::OK();
  }

 private:
  uint64_t first_step_;
  uint64_t max_step_;
};

}  // namespace

std::shared_ptr<rocksdb::FileSystem> prezeroed_wal_fs(std::shared_ptr<rocksdb::FileSystem> base,
                                                      uint64_t first_step, uint64_t max_step) {
  return std::make_shared<PrezeroedWalFs>(std::move(base), std::max<uint64_t>(first_step, 4096), max_step);
}

rocksdb::Env* rocks_env() {
  static rocksdb::Env* env = rocksdb::NewCompositeEnv(prezeroed_wal_fs(rocksdb::FileSystem::Default())).release();
  return env;
}

WalSyncWithoutFlush::WalSyncWithoutFlush() { ++t_without_flush; }
WalSyncWithoutFlush::~WalSyncWithoutFlush() { --t_without_flush; }
uint64_t WalSyncWithoutFlush::deferred_syncs() { return g_deferred_syncs.load(std::memory_order_relaxed); }

}  // namespace weft
