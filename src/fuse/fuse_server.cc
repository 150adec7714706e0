#define FUSE_USE_VERSION 312
#include "fuse/fuse_server.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fuse_lowlevel.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/assert.h"
#include "common/fault.h"
#include "common/logging.h"
#include "common/mount_table.h"
#include "client/dir_ahead.h"
#include "fuse/dir_cursor.h"
#include "meta/permission.h"
#include "weft/client.h"

namespace weft::fuse {

namespace {

using client::DirAhead;

constexpr uint32_t kReaddirPageEntries = 512;
constexpr const char* kCapabilityXattr = "security.capability";
// __FMODE_EXEC (the kernel's FMODE_EXEC, not in its UAPI headers): the open
// flags of exec(2), which FUSE passes on to the daemon's OPEN.
constexpr int kFmodeExec = 0x20;

int errno_of(const Status& s) {
  // A server that does not know a method (an older meta during an upgrade):
  // not ENOSYS, which the kernel takes as "never send this request again"
  // for the life of the mount (xattrs, create, flush, fsync, access).
  if (s.code() == Code::kUnknownMethod) return EOPNOTSUPP;
  // What libweft retries until it gives up (a lease or version that did not
  // come right in time): EAGAIN from a blocking read, write or open makes
  // many programs spin (Python raises BlockingIOError). An I/O error.
  if (s.code() == Code::kLeaseExpired || s.code() == Code::kVersionMismatch) return EIO;
  int e = s.posix_errno();
  return e > 0 ? e : EIO;
}

// A request naming an inode (OPEN, GETATTR, SETATTR, OPENDIR, READLINK, the
// xattrs, ACCESS) names one the kernel looked up earlier and still caches
// (entry_timeout): another client (or an unlink here) may have removed it
// since, and put something else under its name. Meta has nothing left of it.
// ESTALE makes the kernel walk the path again once (LOOKUP_REVAL), as for
// NFS: stat(2), chmod(2), opendir, open, getxattr... then find the name's inode now,
// or ENOENT; open(O_CREAT) creates the name afresh. (A call on a descriptor
// has no path to walk again: fstat of a file open here is answered from its
// handle, but a directory descriptor's fstat or xattr call gets the ESTALE.)
int inode_errno(const Status& s) { return s.code() == Code::kNotFound ? ESTALE : errno_of(s); }

timespec timespec_of(int64_t ns) {
  timespec ts{};
  ts.tv_sec = ns / 1000000000;
  ts.tv_nsec = ns % 1000000000;
  if (ts.tv_nsec < 0) {
    ts.tv_nsec += 1000000000;
    ts.tv_sec -= 1;
  }
  return ts;
}

// Times past what int64 nanoseconds hold (before 1678, after 2262) are
// clamped, as a filesystem clamps to its own range; INT64_MIN stays free for
// SetAttr::kTimeNow.
int64_t ns_of(const timespec& ts) {
  constexpr int64_t kSecondsMax = INT64_MAX / 1000000000 - 1;
  if (ts.tv_sec > kSecondsMax) return INT64_MAX;
  if (ts.tv_sec < -kSecondsMax) return INT64_MIN + 1;
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// Each inode type and its S_IF* bits.
constexpr std::pair<InodeType, mode_t> kTypeBits[] = {
    {InodeType::kFile, S_IFREG},        {InodeType::kDirectory, S_IFDIR},  {InodeType::kSymlink, S_IFLNK},
    {InodeType::kFifo, S_IFIFO},        {InodeType::kSocket, S_IFSOCK},    {InodeType::kCharDevice, S_IFCHR},
    {InodeType::kBlockDevice, S_IFBLK},
};

mode_t type_bits(InodeType t) {
  for (auto [type, bits] : kTypeBits)
    if (type == t) return bits;
  return S_IFREG;
}

// The special file mknod(2) asks for; nullopt for a regular file (created
// like open(O_CREAT|O_EXCL)) and for what Weft cannot hold.
std::optional<InodeType> special_type_of(mode_t mode) {
  for (auto [type, bits] : kTypeBits)
    if (bits == (mode & S_IFMT) && meta::is_special_type(type)) return type;
  return std::nullopt;
}

// An open file: fi->fh points at it (owned by the registry while open).
struct OpenFile {
  Ino ino = 0;
  std::shared_ptr<File> file;
  bool writable = false;
  bool direct_io = false;  // opened with FOPEN_DIRECT_IO
  // When the File last learned the length from meta (steady clock, ns): a
  // short read asks again once that is older than the attribute timeout.
  std::atomic<int64_t> size_known_ns{0};

  // Released (op_release): its close ran or runs. close_mu is held across
  // that close and the counting of its outcome, so an fsync through another
  // handle that finds it closed waits until the outcome is on the inode.
  std::atomic<bool> released{false};
  std::mutex close_mu;
  // How many of the inode's write-back failures (the server's wb_errors_)
  // this handle reported or was opened after. GUARDED_BY the server's files_mu_.
  uint64_t errors_seen = 0;
  // This handle's failure for good (File::failed: every later call repeats
  // it; or its close at release failed) is counted on the inode already.
  // GUARDED_BY the server's files_mu_.
  bool failure_counted = false;
};

int64_t steady_ns(std::chrono::steady_clock::time_point t = std::chrono::steady_clock::now()) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

// An open directory: fi->fh points at it.
struct OpenDir {
  Ino ino = 0;
  Ino parent = 0;
  Inode opened;  // the directory's attributes at OPENDIR, then at each page's fetch (search checks)
  std::mutex mu;
  DirCursor cursor;
  // The cursor's current page: the mount's change count before it was
  // fetched, and when its fetch began (readdirplus).
  uint64_t page_changes = 0;
  uint64_t page_xattr_changes = 0;  // the mount's xattr_change_count() then
  // Client::length_reports() when it was fetched: a report since makes its
  // lengths older than this mount's writes (checked per entry, readdir_common).
  uint64_t page_reports = 0;
  std::chrono::steady_clock::time_point page_at{};
};

OpenFile* file_of(fuse_file_info* fi) { return reinterpret_cast<OpenFile*>(fi->fh); }
OpenDir* dir_of(fuse_file_info* fi) { return reinterpret_cast<OpenDir*>(fi->fh); }

// FUSE mounts get the kernel's default read-ahead of 128 KiB whatever the
// daemon asks in init (max_readahead is only a cap), so sequential reads
// arrive as 128 KiB requests. The mount's backing device info takes more:
// /sys/class/bdi/MAJOR:MINOR/read_ahead_kb (root only). `dir` is absolute
// without symlinks; the device comes from mountinfo, since statting the mount
// point would ask this daemon, which is not serving yet.
Result<void> set_read_ahead(const std::string& dir, unsigned kb) {
  WEFT_TRY(std::string device, mounted_device(dir));
  std::string path = "/sys/class/bdi/" + device + "/read_ahead_kb";
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) {
    return error(Code::kIoError, "read-ahead stays at the kernel's default: cannot open {}: {}", path,
                 std::strerror(errno));
  }
  std::string value = std::to_string(kb);
  bool ok = ::write(fd, value.data(), value.size()) == static_cast<ssize_t>(value.size());
  int saved = errno;
  ::close(fd);
  if (!ok) return error(Code::kIoError, "read-ahead: writing {} to {}: {}", value, path, std::strerror(saved));
  return {};
}

// Per-thread read buffer: reads are up to 1 MiB and faulting fresh pages in
// for every request costs more than the copy.
std::vector<std::byte>& read_buffer(size_t size) {
  thread_local std::vector<std::byte> buf;
  if (buf.size() < size) buf.resize(size);
  return buf;
}

}  // namespace

class FuseServer::Impl {
 public:
  Impl(Client& client, MountOptions options, std::string mountpoint)
      : client_(client),
        options_(std::move(options)),
        mountpoint_(std::move(mountpoint)),
        ahead_(ahead_options(options_)) {}

  ~Impl() {
    unmount();
    if (session_) fuse_session_destroy(session_);
    // Files the kernel never released (the daemon stopped while they were
    // open): flush what they buffered.
    std::unordered_map<Ino, std::vector<std::shared_ptr<OpenFile>>> left;
    {
      std::lock_guard lk(files_mu_);
      left.swap(open_files_);
    }
    for (auto& [ino, files] : left) {
      for (auto& f : files) (void)f->file->close();
    }
    // The session is gone: no READDIR or RELEASEDIR runs any more.
    for (OpenDir* d : open_dirs_) delete d;
    open_dirs_.clear();
    if (stop_signals_ignored_)
      for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::signal(sig, SIG_DFL);
  }

  Result<void> mount() {
    static const fuse_lowlevel_ops ops = make_ops();
    std::string opts = options_.fuse_option_string();
    std::vector<std::string> argv_s = {"weft", "-o", opts};
    std::vector<char*> argv;
    for (auto& a : argv_s) argv.push_back(a.data());
    fuse_args args = FUSE_ARGS_INIT(static_cast<int>(argv.size()), argv.data());
    session_ = fuse_session_new(&args, &ops, sizeof(ops), this);
    fuse_opt_free_args(&args);  // the copy libfuse's option parsing made
    if (!session_) {
      return error(Code::kInvalidArgument, "cannot create the FUSE session with options '{}' (see the message above)",
                   opts);
    }
    std::error_code ec;
    std::string absolute = std::filesystem::canonical(mountpoint_, ec).string();  // before it is a FUSE mount
    mount_path_ = absolute.empty() ? mountpoint_ : absolute;
    if (fuse_session_mount(session_, mountpoint_.c_str()) != 0) {
      return error(Code::kIoError, "cannot mount on {} (see the message above; is /dev/fuse usable?)", mountpoint_);
    }
    mounted_ = true;
    if (options_.read_ahead_kb > 0) {
      // Not fatal: the mount works with the kernel's 128 KiB, only slower.
      if (auto r = set_read_ahead(absolute, options_.read_ahead_kb); !r) WEFT_LOG_WARN("{}", r.error().message());
    }
    return {};
  }

  // SIGINT/SIGTERM/SIGHUP stop the daemon. The handler only wakes a thread
  // of ours, which first has the kernel write back its dirty pages while the
  // workers still serve (with writeback_cache, what processes wrote to files
  // they still hold open is in the page cache, not here: ending the loop at
  // once, as libfuse's own handlers do, lost it), then ends the loop.
  Result<int> run() {
    int pipe_fds[2];
    if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return error(Code::kInternal, "pipe: {}", std::strerror(errno));
    stop_pipe_ = pipe_fds[1];
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    struct sigaction wake {};
    wake.sa_handler = [](int) {};  // only interrupts the loop's wait (no SA_RESTART)
    sigemptyset(&wake.sa_mask);
    if (::sigaction(SIGINT, &sa, nullptr) != 0 || ::sigaction(SIGTERM, &sa, nullptr) != 0 ||
        ::sigaction(SIGHUP, &sa, nullptr) != 0 || ::sigaction(SIGUSR1, &wake, nullptr) != 0) {
      int err = errno;
      stop_pipe_ = -1;
      ::close(pipe_fds[0]);
      ::close(pipe_fds[1]);
      return error(Code::kInternal, "cannot install signal handlers: {}", std::strerror(err));
    }
    ::signal(SIGPIPE, SIG_IGN);  // a closed log pipe must not kill the mount (as libfuse's handlers did)
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    sigaddset(&set, SIGUSR1);
    pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
    std::atomic<bool> loop_done{false};
    const pthread_t loop_thread = pthread_self();
    std::thread stopper;
    try {
      stopper = std::thread([&, read_fd = pipe_fds[0]] {
        char sig = 0;
        while (::read(read_fd, &sig, 1) < 0 && errno == EINTR) {
        }
        if (loop_done) return;
        WEFT_LOG_INFO("signal {}: writing back and unmounting {}", static_cast<int>(sig), mountpoint_);
        // In every cache mode: shared writable mappings dirty the kernel's
        // pages without writeback_cache too.
        sync_mount();
        wait_for_written_back_pages();
        fuse_session_exit(session_);
        // The loop's thread notices the exit once its wait is interrupted;
        // again until it has (a signal just before it waits is lost).
        while (!loop_done) {
          pthread_kill(loop_thread, SIGUSR1);
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
      });
    } catch (const std::exception& e) {  // std::system_error (EAGAIN: a process or memory limit), bad_alloc
      stop_pipe_ = -1;
      for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::signal(sig, SIG_DFL);  // the handler would swallow them now
      ::close(pipe_fds[0]);
      ::close(pipe_fds[1]);
      unmount();
      return error(Code::kOverloaded, "cannot start the mount's stop thread: {}", e.what());
    }
    std::unique_ptr<fuse_loop_config, decltype(&fuse_loop_cfg_destroy)> config(fuse_loop_cfg_create(),
                                                                               &fuse_loop_cfg_destroy);
    WEFT_ASSERT_MSG(config != nullptr, "fuse_loop_cfg_create: out of memory");
    fuse_loop_cfg_set_clone_fd(config.get(), 1);
    fuse_loop_cfg_set_max_threads(config.get(), options_.max_threads);
    fuse_loop_cfg_set_idle_threads(config.get(), options_.max_idle_threads);
    int r = fuse_session_loop_mt(session_, config.get());
    loop_done = true;
    char done = 0;
    (void)!::write(pipe_fds[1], &done, 1);  // a stopper still waiting for a signal returns
    stopper.join();
    // Ignored, not the default, until ~Impl has closed what the kernel left
    // open: a second Ctrl-C (or the SIGHUP of a closing terminal) must not
    // kill the flush of bytes write(2) returned for. SIGKILL still stops it.
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::signal(sig, SIG_IGN);
    stop_signals_ignored_ = true;
    stop_pipe_ = -1;
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    unmount();
    if (r < 0) return error(Code::kIoError, "FUSE session loop failed: {}", std::strerror(-r));
    return r;
  }

  static void on_stop_signal(int sig) {
    char c = static_cast<char>(sig);
    if (int fd = stop_pipe_; fd >= 0) (void)!::write(fd, &c, 1);  // async-signal-safe
  }

  // After sync_mount: serves on until the writes it queued are in. syncfs
  // queues them but does not wait for FUSE's replies (this kernel ends a
  // FUSE page's writeback early, or skips the wait: an unprivileged daemon
  // must not hang sync), and a loop ended meanwhile loses them: whole 1 MiB
  // writes of a shared mapping were. The queued writes reach the workers at
  // once, so the first quiet spell with none in progress ends the wait.
  void wait_for_written_back_pages() {
    constexpr auto kQuiet = std::chrono::milliseconds(300);
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    auto last_seen = writes_seen_.load();
    auto quiet_since = std::chrono::steady_clock::now();
    while (std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      auto seen = writes_seen_.load();
      auto now = std::chrono::steady_clock::now();
      if (seen != last_seen || writes_in_progress_.load() > 0) {
        last_seen = seen;
        quiet_since = now;
      } else if (now - quiet_since >= kQuiet) {
        return;
      }
    }
    WEFT_LOG_WARN("stop: writes of {} still arriving after 30 s; unmounting anyway", mountpoint_);
  }

  // syncfs(2) on the mount: the kernel sends what its page cache holds for
  // this file system (served by the running workers).
  void sync_mount() {
    // This open reaches op_opendir from this thread: answered without meta
    // (own_open_tid_), so a cluster gone before the mount does not hold the
    // stop for the client's whole retry time.
    own_open_tid_ = ::gettid();
    int fd = ::open(mount_path_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    own_open_tid_ = 0;
    if (fd < 0) {
      WEFT_LOG_WARN("open {} to write it back: {}", mount_path_, std::strerror(errno));
      return;
    }
    if (::syncfs(fd) != 0) WEFT_LOG_WARN("syncfs {}: {}", mount_path_, std::strerror(errno));
    ::close(fd);
  }

  void unmount() {
    std::lock_guard lk(mount_mu_);
    if (mounted_ && session_) {
      fuse_session_unmount(session_);
      mounted_ = false;
    }
  }

  const std::string& mountpoint() const { return mountpoint_; }

 private:
  // Every request handler starts here: it also names the libfuse worker it
  // runs on "weft-fuse" (once per thread), so `top -H` and /proc show them.
  static Impl* self(fuse_req_t req) {
    thread_local bool named = false;
    if (!named) {
      pthread_setname_np(pthread_self(), "weft-fuse");
      named = true;
    }
    return static_cast<Impl*>(fuse_req_userdata(req));
  }
  static inline std::atomic<int> stop_pipe_{-1};  // write end: signal handler -> stopper thread
  // The thread whose open of the root is sync_mount's (see op_opendir); 0: none.
  std::atomic<pid_t> own_open_tid_{0};
  bool stop_signals_ignored_ = false;             // run() ignored them until the final flush is done
  std::once_flag groups_warned_;                  // groups_unread

  // ---- credentials, attributes ----

  // libfuse reads a caller's supplementary groups from /proc, which it cannot
  // in another PID namespace (a container) or under hidepid: meta then checks
  // without them, and a user whose access comes from one is refused. Said
  // once per mount, with the first reason (not ENOENT: a caller that exited).
  void groups_unread(int err) {
    if (err == ENOENT) return;
    std::call_once(groups_warned_, [err] {
      WEFT_LOG_WARN("mount: cannot read a caller's supplementary groups ({}: /proc not readable for its process, "
                    "e.g. another PID namespace or hidepid): access is checked without them",
                    std::strerror(err));
    });
  }

  static Cred cred_of(fuse_req_t req) {
    const fuse_ctx* ctx = fuse_req_ctx(req);
    Cred cred;
    cred.uid = ctx->uid;
    cred.gid = ctx->gid;
    if (ctx->uid != 0) {  // root passes every check: skip reading /proc
      gid_t groups[64];
      int n = fuse_req_getgroups(req, 64, groups);
      if (n < 0) self(req)->groups_unread(-n);
      if (n > 64) {
        std::vector<gid_t> more(n);
        n = fuse_req_getgroups(req, n, more.data());
        if (n > 0) cred.groups.assign(more.begin(), more.begin() + std::min<size_t>(n, more.size()));
      } else if (n > 0) {
        cred.groups.assign(groups, groups + n);
      }
    }
    return cred;
  }

  // The size the kernel should see: meta's, or more when files open here
  // have buffered writes meta does not know yet. Not the length a handle
  // knew at open: meta's may be newer (another client's truncate).
  void apply_local_size(Inode& in) {
    if (!in.is_file()) return;
    std::lock_guard lk(files_mu_);
    auto it = open_files_.find(in.ino);
    if (it == open_files_.end()) return;
    for (auto& f : it->second) {
      if (f->writable) in.size = std::max(in.size, f->file->unreported_end());
    }
  }

  struct stat stat_of(const Inode& in) const {
    struct stat st {};
    st.st_ino = in.ino;
    st.st_mode = type_bits(in.type) | (in.mode & 07777);
    st.st_nlink = in.nlink;
    st.st_uid = in.uid;
    st.st_gid = in.gid;
    st.st_size = static_cast<off_t>(in.size);
    st.st_rdev = static_cast<dev_t>(in.rdev);
    st.st_blksize = in.is_file() && in.layout.chunk_bytes ? in.layout.chunk_bytes : 4096;
    st.st_blocks = static_cast<blkcnt_t>((in.size + 511) / 512);
    st.st_atim = timespec_of(in.atime_ns);
    st.st_mtim = timespec_of(in.mtime_ns);
    st.st_ctim = timespec_of(in.ctime_ns);
    return st;
  }

  // `age`: how old `in` already is (answered from a listing); the kernel
  // trusts it only for what is left of the timeouts.
  fuse_entry_param entry_of(Inode in, double age = 0) {
    apply_local_size(in);
    fuse_entry_param e{};
    e.ino = in.ino;
    e.generation = 0;
    e.attr = stat_of(in);
    e.attr_timeout = std::max(0.0, options_.attr_timeout_s - age);
    e.entry_timeout = std::max(0.0, options_.entry_timeout_s - age);
    return e;
  }

  static DirAhead::Options ahead_options(const MountOptions& m) {
    DirAhead::Options o;
    o.ttl_s = m.statahead_entries == 0 ? 0.0 : std::min(m.attr_timeout_s, m.entry_timeout_s);
    o.entries_max = m.statahead_entries;
    return o;
  }

  // ---- lookup counts ----

  void add_lookup(Ino ino) {
    std::lock_guard lk(lookups_mu_);
    ++lookups_[ino];
  }
  void forget_ino(Ino ino, uint64_t n) {
    std::lock_guard lk(lookups_mu_);
    auto it = lookups_.find(ino);
    if (it == lookups_.end()) return;
    if (it->second <= n) {
      lookups_.erase(it);
      known_.erase(ino);
    } else {
      it->second -= n;
    }
  }

  // ---- inodes as meta last returned them here ----
  // A read-only open of a file fetched less than attr_timeout_s ago skips
  // meta (one round trip of the three a first-epoch file costs): the kernel
  // trusts the same attributes that long. So does a getxattr or listxattr
  // of an inode meta said has no xattrs (ls -l asks every entry for
  // security.selinux): answered here, as meta would (the same rules on the
  // same attributes), without a round trip. Entries live while the kernel
  // holds the inode (forget erases them) and are dropped when a handle that
  // may change the file opens or closes here, or an xattr is set or removed
  // here. Another client's change shows after attr_timeout_s, as its other
  // attribute changes do.
  // When attributes were asked for: taken before the meta call. Attributes
  // fetched across a change made through this mount (a flush, a release, a
  // write) may be older than what meta has now: those are not remembered.
  // Attributes from a listing page (readdirplus) serve the xattr answer
  // only: opens keep to what a lookup or getattr fetched (a page's lengths
  // have their own rules, readdir_reply).
  struct Fetched {
    uint64_t changes = 0;  // change_count() then
    std::chrono::steady_clock::time_point at;
    // xattr_change_count() before the meta call (its reply's xattr presence
    // holds only if none was set or removed here since); kXattrsUnknown:
    // not known (statahead hits), the presence is not remembered.
    uint64_t xattr_changes = kXattrsUnknown;
  };
  static constexpr uint64_t kXattrsUnknown = UINT64_MAX;
  struct KnownInode {
    Inode inode;
    std::chrono::steady_clock::time_point at;  // Fetched::at
    bool listed = false;                       // from a listing page
  };
  Fetched fetching() const { return {change_count(), std::chrono::steady_clock::now(), xattr_change_count()}; }
  // For the result of this mount's own change (which moves change_count()
  // itself): `xattrs_before` is xattr_change_count() read before the call.
  Fetched own_change(uint64_t xattrs_before) const {
    Fetched f = fetching();
    f.xattr_changes = xattrs_before;
    return f;
  }
  uint64_t xattr_change_count() const { return xattr_changes_.load(std::memory_order_acquire); }
  void remember(const Inode& in, const Fetched& f, bool listed = false) {
    if (options_.attr_timeout_s <= 0) return;
    std::lock_guard lk(lookups_mu_);
    if (change_count() != f.changes) return;
    KnownInode k{in, f.at, listed};
    if (f.xattr_changes != xattr_change_count()) k.inode.xattrs = meta::XattrPresence::kUnknown;
    auto [it, added] = known_.try_emplace(in.ino, k);
    if (added) return;
    // A page does not replace what a lookup or getattr fetched that an open
    // may still go by (fresh_known).
    const std::chrono::duration<double> age = std::chrono::steady_clock::now() - it->second.at;
    const bool open_may_use = !it->second.listed && age.count() < options_.attr_timeout_s;
    if (!(listed && open_may_use)) it->second = k;
  }
  void drop_known(Ino ino) {
    std::lock_guard lk(lookups_mu_);
    known_.erase(ino);
    data_changed();  // a fetch under way must not put it back (remember() compares under the same lock)
  }
  // An xattr of `ino` set or removed here (or maybe: the call failed): its
  // remembered attributes go, and no reply fetched before counts as to xattrs.
  // The count moves first: a remember() after it (under lookups_mu_) marks
  // the presence unknown, one before it is erased by drop_known.
  void xattrs_changed(Ino ino) {
    xattr_changes_.fetch_add(1, std::memory_order_acq_rel);
    drop_known(ino);
  }
  // What an open may go by (fetched by a lookup or getattr).
  std::optional<KnownInode> fresh_known(Ino ino) {
    auto k = fresh_known_any(ino);
    if (k && k->listed) return std::nullopt;
    return k;
  }
  // What this mount last knew of `ino`, however old.
  std::optional<Inode> last_known(Ino ino) {
    std::lock_guard lk(lookups_mu_);
    auto it = known_.find(ino);
    if (it == known_.end()) return std::nullopt;
    return it->second.inode;
  }
  // The inode's fresh attributes when meta said it has no xattrs.
  std::optional<Inode> known_without_xattrs(Ino ino) {
    auto k = fresh_known_any(ino);
    if (!k || k->inode.xattrs != meta::XattrPresence::kNone) return std::nullopt;
    return k->inode;
  }
  std::optional<KnownInode> fresh_known_any(Ino ino) {
    std::lock_guard lk(lookups_mu_);
    auto it = known_.find(ino);
    if (it == known_.end()) return std::nullopt;
    std::chrono::duration<double> age = std::chrono::steady_clock::now() - it->second.at;
    if (age.count() >= options_.attr_timeout_s) return std::nullopt;
    return it->second;
  }

  void reply_entry(fuse_req_t req, const Inode& in, const Fetched& f) {
    std::chrono::duration<double> age = std::chrono::steady_clock::now() - f.at;
    fuse_entry_param e = entry_of(in, age.count());
    // Counted before the reply: once the kernel has it, a FORGET for it may
    // run on another thread at once, and must find the count.
    add_lookup(in.ino);
    remember(in, f);
    if (fuse_reply_entry(req, &e) != 0) forget_ino(in.ino, 1);
  }

  // ---- open files ----

  // `size_known_at`: when the length `file` holds was fetched from meta.
  std::shared_ptr<OpenFile> register_file(Ino ino, std::shared_ptr<File> file, bool writable,
                                          std::chrono::steady_clock::time_point size_known_at) {
    if (writable) {
      drop_known(ino);
      changed();
    }
    auto of = std::make_shared<OpenFile>();
    of->ino = ino;
    of->file = std::move(file);
    of->writable = writable;
    of->size_known_ns = steady_ns(size_known_at);
    std::lock_guard lk(files_mu_);
    open_files_[ino].push_back(of);
    // Linux's errseq_sample: the latest failure is this handle's to hear of
    // too unless some descriptor has reported it already.
    if (auto e = wb_errors_.find(ino); e != wb_errors_.end())
      of->errors_seen = e->second.count - (e->second.reported ? 0 : 1);
    return of;
  }

  // A handle whose open the kernel never took (the reply failed: the request
  // was interrupted) is closed as op_release closes one, marked released
  // first: an fsync through another handle holding it meanwhile must not
  // count its closed File's kBadHandle as the inode's failure. Nothing was
  // written through it, so its close's outcome is nobody's to hear.
  void close_unreplied(const std::shared_ptr<OpenFile>& of) {
    {
      std::lock_guard counting(of->close_mu);
      of->released = true;
      (void)of->file->close();
    }
    unregister_file(of.get());
  }

  std::shared_ptr<OpenFile> unregister_file(OpenFile* raw) {
    if (raw->writable) {  // its writes changed the size meta holds
      drop_known(raw->ino);
      changed();
    }
    std::lock_guard lk(files_mu_);
    auto it = open_files_.find(raw->ino);
    if (it == open_files_.end()) return nullptr;
    auto& v = it->second;
    for (size_t i = 0; i < v.size(); ++i) {
      if (v[i].get() == raw) {
        auto of = std::move(v[i]);
        v.erase(v.begin() + static_cast<ptrdiff_t>(i));
        if (v.empty()) {
          open_files_.erase(it);
          wb_errors_.erase(raw->ino);  // no descriptor is left to tell
        }
        return of;
      }
    }
    return nullptr;
  }

  std::vector<std::shared_ptr<OpenFile>> files_of(Ino ino) {
    std::lock_guard lk(files_mu_);
    auto it = open_files_.find(ino);
    if (it == open_files_.end()) return {};
    return it->second;
  }

  // Counts a failure of `f` for good (its File failed or lost its session:
  // every later call repeats it; or its close failed at release, after which
  // nothing retries) on its inode's write-back errors (wb_errors_), once per
  // handle.
  void count_failure(OpenFile& f, int err) {
    std::lock_guard lk(files_mu_);
    if (f.failure_counted) return;
    f.failure_counted = true;
    WritebackErrors& e = wb_errors_[f.ino];
    ++e.count;
    e.err = err;
    e.reported = false;
  }

  // The errno of a failed flush, fsync or close of a handle. kBadHandle from
  // one not released here is meta's: its write session is gone (the session
  // reaper closed it while this client held no lease), so what it wrote past
  // the length meta holds may not count: EIO, as a lost write.
  static int writeback_errno(const Status& s) { return s.code() == Code::kBadHandle ? EIO : errno_of(s); }

  // Runs `op` (fsync or flush) on every handle open for writing on `ino`
  // here and answers for `caller`: its own failure every time; else the
  // first failure of another handle in this call that the next flush retries
  // (a length report: answered while it fails, forgotten once it went
  // through); else the latest failure for good of the inode's handles (one
  // closed since too) that `caller` has not been told of, once per open file
  // description, as Linux's errseq (one opened after it was told to some
  // descriptor does not hear of it). `consume` false (a flush: close(2) of
  // one of several descriptors sharing the handle) tells without marking it
  // told. Without a caller: the first failure of this call. A handle
  // released meanwhile is not asked: its close's outcome is counted by
  // op_release (waited for).
  template <class Op>
  int each_writer(Ino ino, OpenFile* caller, Op op, bool consume = true) {
    int first = 0, own = 0, passing = 0;
    for (auto& f : files_of(ino)) {
      if (!f->writable) continue;
      Result<void> r = op(*f->file);
      if (r) continue;
      if (f->released.load()) {
        std::lock_guard counted(f->close_mu);
        continue;
      }
      const int err = writeback_errno(r.error());
      // For good: a failed write, or meta's end of the session (kBadHandle:
      // every later call of that File answers so).
      if (f->file->failed() || r.error().code() == Code::kBadHandle) count_failure(*f, err);
      else if (passing == 0) passing = err;
      if (first == 0) first = err;
      if (f.get() == caller) own = err;
    }
    if (caller == nullptr) return first;
    if (own != 0) return own;
    std::lock_guard lk(files_mu_);
    auto e = wb_errors_.find(ino);
    if (e == wb_errors_.end() || e->second.count == caller->errors_seen) return passing;
    if (consume) {
      caller->errors_seen = e->second.count;
      e->second.reported = true;
    }
    return e->second.err;
  }
  int sync_inode(Ino ino, OpenFile* caller) {
    return each_writer(ino, caller, [](File& f) { return f.fsync(); });
  }

  bool has_other_writers(Ino ino, const OpenFile* except) {
    std::lock_guard lk(files_mu_);
    auto it = open_files_.find(ino);
    if (it == open_files_.end()) return false;
    for (auto& f : it->second) {
      if (f.get() != except && f->writable) return true;
    }
    return false;
  }

  int open_flags(int fuse_flags, bool create) const {
    // The caller's access mode, so that meta checks the permission the open
    // needs: with writeback_cache the kernel fills partial pages with reads
    // through a handle opened write-only, which op_read serves with
    // File::pread_page_fill (the kernel refuses read(2) on such a
    // descriptor itself).
    int flags = fuse_flags & (O_ACCMODE | O_TRUNC | (create ? O_EXCL : 0));
    if (create) flags |= O_CREAT;
    return flags;
  }

  void set_open_reply(fuse_file_info* fi, OpenFile* of) const {
    fi->fh = reinterpret_cast<uint64_t>(of);
    fi->noflush = of->writable ? 0 : 1;  // nothing to flush: spare close(2) a round trip
    fi->direct_io = options_.direct_io ? 1 : 0;
    of->direct_io = options_.direct_io;
    fi->keep_cache = options_.keep_cache ? 1 : 0;
  }

  // ---- operations ----

  static void op_init(void* userdata, fuse_conn_info* conn) {
    auto* s = static_cast<Impl*>(userdata);
    conn->max_write = kMaxIoBytes;  // libfuse derives max_pages from it
    conn->max_read = kMaxIoBytes;
    // The kernel keeps min(this, the bdi's read_ahead_kb set at mount).
    conn->max_readahead = std::max<unsigned>(kMaxIoBytes, s->options_.read_ahead_kb * 1024u);
    conn->max_background = 64;
    conn->congestion_threshold = 48;
    conn->time_gran = 1;
    auto want = [conn](unsigned cap, bool on) {
      if (on && (conn->capable & cap)) {
        conn->want |= cap;
      } else {
        conn->want &= ~cap;
      }
    };
    want(FUSE_CAP_ATOMIC_O_TRUNC, true);
    want(FUSE_CAP_ASYNC_READ, true);
    want(FUSE_CAP_PARALLEL_DIROPS, true);
    want(FUSE_CAP_READDIRPLUS, true);
    want(FUSE_CAP_READDIRPLUS_AUTO, true);
    want(FUSE_CAP_AUTO_INVAL_DATA, true);
    want(FUSE_CAP_ASYNC_DIO, true);
    want(FUSE_CAP_WRITEBACK_CACHE, s->options_.writeback_cache);
    // The kernel clears setuid/setgid bits itself (through setattr).
    want(FUSE_CAP_HANDLE_KILLPRIV, false);
    want(FUSE_CAP_POSIX_LOCKS, false);
    want(FUSE_CAP_FLOCK_LOCKS, false);
    want(FUSE_CAP_SPLICE_READ, false);
    want(FUSE_CAP_SPLICE_WRITE, false);
    want(FUSE_CAP_SPLICE_MOVE, false);
  }

  // Something may have changed through this mount: statahead listings go.
  void changed() {
    data_changed();
    ahead_.changed();
  }
  // The data (so the size or mtime) of a file may have changed through this
  // mount: a write, a flush. Called once the change is made, before the reply.
  void data_changed() { changes_.fetch_add(1, std::memory_order_acq_rel); }
  // What attributes fetched from meta are checked against: the changes above
  // plus every length libweft reported to meta. A read, flush or fsync through
  // any handle may report one, after which apply_local_size no longer adds
  // those writes: attributes fetched before (a listing page, a remembered
  // inode) may hold meta's older length, which would shrink the kernel's size
  // under the writer (its next O_APPEND write would land over acknowledged
  // bytes). Both counters only grow, so the sum moves when either does.
  uint64_t change_count() const { return changes_.load(std::memory_order_acquire) + client_.length_reports(); }

  static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
    auto* s = self(req);
    const Cred cred = cred_of(req);
    if (s->ahead_.enabled()) {
      auto now = std::chrono::steady_clock::now();
      auto hit = s->ahead_.find(parent, name, cred, now);
      if (!hit && s->ahead_.note_miss(parent, now)) {
        s->ahead_.list(s->client_, cred, parent);
        hit = s->ahead_.find(parent, name, cred, std::chrono::steady_clock::now());
      }
      // A listing holds a file's length from its fetch, and a writer here
      // may have reported a longer one since (flush, fsync, a read through
      // another handle: data_changed() does not drop listings): meta answers.
      if (hit && s->has_other_writers(hit->inode.ino, nullptr)) hit.reset();
      if (hit) {
        // DirAhead drops its listings at every change (changed()) itself.
        // (Its xattr presence is not remembered: kXattrsUnknown.)
        s->reply_entry(req, hit->inode, Fetched{s->change_count(), hit->fetched});
        return;
      }
    }
    const Fetched f = s->fetching();
    auto r = s->client_.lookup(cred, parent, name);
    if (!r) {
      if (r.error().code() == Code::kNotFound && s->options_.negative_timeout_s > 0) {
        fuse_entry_param e{};
        e.ino = 0;
        e.entry_timeout = s->options_.negative_timeout_s;
        fuse_reply_entry(req, &e);
        return;
      }
      fuse_reply_err(req, errno_of(r.error()));
      return;
    }
    s->reply_entry(req, *r, f);
  }

  static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) {
    self(req)->forget_ino(ino, nlookup);
    fuse_reply_none(req);
  }

  static void op_forget_multi(fuse_req_t req, size_t count, fuse_forget_data* forgets) {
    auto* s = self(req);
    for (size_t i = 0; i < count; ++i) s->forget_ino(forgets[i].ino, forgets[i].nlookup);
    fuse_reply_none(req);
  }

  static void op_getattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info* /*fi*/) {
    auto* s = self(req);
    if (s->is_own_open(req, ino)) {
      // The kernel's permission check before sync_mount's open (with
      // default_permissions, once the root's attributes are stale): what
      // this mount last knew of the root, else a directory of this
      // process's own; cached by nobody (timeout 0).
      Inode root = s->last_known(ino).value_or(Inode{});
      if (root.ino != ino) {
        root.ino = ino;
        root.type = InodeType::kDirectory;
        root.mode = 0700;
        root.nlink = 2;
        root.uid = ::geteuid();
        root.gid = ::getegid();
      }
      struct stat st = s->stat_of(root);
      fuse_reply_attr(req, &st, 0);
      return;
    }
    const Fetched f = s->fetching();
    auto r = s->client_.getattr(cred_of(req), ino);
    if (!r && r.error().code() == Code::kNotFound) {
      // Removed while open here (fstat(2), and the kernel's check before a
      // read): as on Linux, the open file is still there, with no link.
      if (auto files = s->files_of(ino); !files.empty()) {
        s->reply_attr_of_removed(req, *files.front());
        return;
      }
    }
    if (!r) {
      fuse_reply_err(req, inode_errno(r.error()));
      return;
    }
    s->remember(*r, f);
    s->apply_local_size(*r);
    struct stat st = s->stat_of(*r);
    fuse_reply_attr(req, &st, s->options_.attr_timeout_s);
  }

  static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set, fuse_file_info* fi) {
    auto* s = self(req);
    const uint64_t xattrs_before = s->xattr_change_count();
    SetAttr sa;
    if (to_set & FUSE_SET_ATTR_MODE) sa.mode = attr->st_mode & 07777;
    if (to_set & FUSE_SET_ATTR_UID) sa.uid = attr->st_uid;
    if (to_set & FUSE_SET_ATTR_GID) sa.gid = attr->st_gid;
    if (to_set & FUSE_SET_ATTR_SIZE) sa.size = static_cast<uint64_t>(attr->st_size);
    if (to_set & FUSE_SET_ATTR_ATIME_NOW) {
      sa.atime_ns = SetAttr::kTimeNow;
    } else if (to_set & FUSE_SET_ATTR_ATIME) {
      sa.atime_ns = ns_of(attr->st_atim);
    }
    if (to_set & FUSE_SET_ATTR_MTIME_NOW) {
      sa.mtime_ns = SetAttr::kTimeNow;
    } else if (to_set & FUSE_SET_ATTR_MTIME) {
      sa.mtime_ns = ns_of(attr->st_mtim);
    }
    // A size Weft cannot hold fails before anything changes, as Linux
    // checks it (inode_newsize_ok) before it changes a mode or a time.
    if (sa.size && *sa.size > meta::kFileBytesMax) {
      fuse_reply_err(req, EFBIG);
      return;
    }
    Cred cred = cred_of(req);
    OpenFile* handle = fi && fi->fh && file_of(fi)->writable ? file_of(fi) : nullptr;
    if ((sa.size || sa.mtime_ns) && handle) {
      // This handle's earlier writes land before the truncate (or the new
      // time), and their failure is this call's (ftruncate, futimens).
      // libweft flushes the inode's other Files open here itself.
      if (auto r = handle->file->flush(); !r) {
        fuse_reply_err(req, errno_of(r.error()));
        return;
      }
    }
    std::optional<Inode> updated;
    // Every attribute but the size first: a refusal (EPERM, EACCES) leaves
    // the file as it was, not already truncated.
    SetAttr rest = sa;
    rest.size.reset();
    // A truncate through a handle open for writing sets the mtime itself
    // (meta does, with the size) and needs no write permission now (open
    // checked it): the kernel's mtime sent with it (writeback_cache) is not
    // asked for apart, which a non-owner without that permission may not.
    if (handle && sa.size && s->kernel_mtime(to_set, sa, true)) rest.mtime_ns.reset();
    if (rest.mode || rest.uid || rest.gid || rest.atime_ns || rest.mtime_ns) {
      auto r = s->client_.setattr(cred, ino, rest);
      if (!r && r.error().code() == Code::kNotPermitted && s->kernel_mtime(to_set, sa, handle != nullptr)) {
        rest.mtime_ns = SetAttr::kTimeNow;
        r = s->client_.setattr(cred, ino, rest);
      }
      s->changed();
      if (!r && r.error().code() == Code::kNotFound && s->kernel_times_write_back(to_set)) {
        s->reply_times_of_removed(req, ino, *attr);
        return;
      }
      if (!r && s->kernel_times_write_back(to_set) &&
          (r.error().code() == Code::kNotPermitted || r.error().code() == Code::kPermissionDenied)) {
        // A ctime change (rename, link, unlink, xattr) by a user who may not
        // set this file's times, written back at its next close: the times
        // stay meta's (which moved the ctime itself). Refused, the kernel
        // failed that close(2) with EIO. (A futimens(2) of the same shape by
        // such a user, on a mount without default_permissions, is answered
        // as done too: the two cannot be told apart.)
        r = s->client_.getattr(cred, ino);
      }
      if (!r) {
        s->drop_known(ino);  // it may have changed all the same (an outcome unknown)
        fuse_reply_err(req, inode_errno(r.error()));
        return;
      }
      updated = std::move(*r);
    }
    if (sa.size) {
      Result<Inode> r = [&]() -> Result<Inode> {
        SetAttr size_only;
        size_only.size = sa.size;
        if (!handle) return s->client_.setattr(cred, ino, size_only);
        // ftruncate(2) on a handle open for writing: through its File (and
        // write session), which needs no write permission now: it was checked at open.
        WEFT_RETURN_IF_ERROR(handle->file->truncate(*sa.size));
        return s->client_.getattr(cred, ino);
      }();
      s->changed();
      if (!r) {
        s->drop_known(ino);  // the mode or times above may have changed, or the size
        fuse_reply_err(req, inode_errno(r.error()));
        return;
      }
      if (!handle) {
        for (auto& f : s->files_of(ino)) (void)f->file->refresh_size();
      }
      updated = std::move(*r);
    }
    if (!updated) {  // ctime only, or nothing Weft keeps: the attributes as they are
      auto r = s->client_.getattr(cred, ino);
      if (!r) {
        fuse_reply_err(req, inode_errno(r.error()));
        return;
      }
      updated = std::move(*r);
    }
    s->remember(*updated, s->own_change(xattrs_before));  // this mount's own change: its result
    s->apply_local_size(*updated);
    struct stat st = s->stat_of(*updated);
    fuse_reply_attr(req, &st, s->options_.attr_timeout_s);
  }

  // With writeback_cache the kernel sends explicit mtimes of its own (always
  // with FUSE_SET_ATTR_CTIME): the mtime of its cached writes when it writes
  // them back, and "now" for a truncate or a touch. Meta lets only the owner
  // set an explicit time; for anyone else a time of the kernel's becomes
  // "now" (for which meta checks write permission), as a write or truncate
  // through the daemon would have made it. The kernel's are: with
  // default_permissions every explicit mtime a non-owner sends (the kernel
  // refused theirs already), the one sent with a size (truncate) or through
  // a writable handle (write-back), and one with atime "now" (a touch).
  bool kernel_mtime(int to_set, const SetAttr& sa, bool writable_handle) const {
    if (!(to_set & FUSE_SET_ATTR_CTIME) || !sa.mtime_ns || *sa.mtime_ns == SetAttr::kTimeNow) return false;
    if (sa.atime_ns && *sa.atime_ns != SetAttr::kTimeNow) return false;  // an explicit atime: the caller's
    return options_.default_permissions || sa.size || writable_handle || sa.atime_ns;
  }

  // With writeback_cache the kernel keeps the mtime and ctime of a regular
  // file it caches and writes them back with a SETATTR of exactly those two
  // (Linux fuse_flush_times, from write_inode) at every close(2) and fsync(2)
  // of the file, through a read-only descriptor too. An unlink or a rename
  // over the file through this mount dirties its ctime, and a file only
  // readers hold open is destroyed at meta right then (read-only opens hold no
  // session: docs/DESIGN.md), so meta has no inode left to set them on.
  // Answered with its ENOENT, the kernel failed the reader's close(2) with EIO
  // (and fsync(2) with ENOENT), where Linux closes an unlinked file without
  // error.
  bool kernel_times_write_back(int to_set) const {
    constexpr int kTimes = FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_CTIME;
    constexpr int kOthers = FUSE_SET_ATTR_MODE | FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID | FUSE_SET_ATTR_SIZE |
                            FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_ATIME_NOW | FUSE_SET_ATTR_MTIME_NOW;
    return options_.writeback_cache && (to_set & kTimes) == kTimes && (to_set & kOthers) == 0;
  }

  // Success for the times of a file meta no longer has (see
  // kernel_times_write_back): nobody can see them any more, as nobody can
  // see those of an unlinked inode on Linux. fuse_flush_times ignores the
  // attributes of the reply; a futimens(2) of the same shape (atime omitted)
  // applies them, so they are what this mount last knew of the file (else a
  // mode of 0), with no link and a timeout of 0: the kernel's next use asks
  // getattr, answered from a handle still open here (reply_attr_of_removed),
  // else ESTALE (inode_errno).
  void reply_times_of_removed(fuse_req_t req, Ino ino, const struct stat& asked) {
    WEFT_LOG_DEBUG("setattr of the times of inode {}: meta has no such inode (removed while open for reading "
                   "here); their write-back succeeds",
                   ino);
    Inode in = removed_inode(ino, Inode{});
    in.mtime_ns = ns_of(asked.st_mtim);
    in.ctime_ns = ns_of(asked.st_ctim);
    struct stat st = stat_of(in);
    fuse_reply_attr(req, &st, 0);
  }

  // What is left to tell of file `ino`, which meta no longer has: what this
  // mount last knew of it, else `otherwise`, with no link and the length the
  // handles open here know.
  Inode removed_inode(Ino ino, Inode otherwise) {
    Inode in = last_known(ino).value_or(std::move(otherwise));
    in.ino = ino;
    in.type = InodeType::kFile;
    in.nlink = 0;
    apply_local_size(in);
    return in;
  }

  // The attributes of a file meta no longer has that `open` (a handle here)
  // keeps: what this mount last knew of it, else what the File opened, with
  // no link. Nobody can change it any more (a writer anywhere would have
  // kept it at meta), so the kernel may keep them for the attribute timeout.
  // The length is the File's now: what it opened with may predate a truncate
  // since (an O_TRUNC open's own), which dropped what the mount knew.
  void reply_attr_of_removed(fuse_req_t req, const OpenFile& open) {
    Inode opened = open.file->opened();
    opened.size = open.file->size();
    Inode in = removed_inode(open.ino, opened);
    in.size = std::max(in.size, open.file->size());
    struct stat st = stat_of(in);
    fuse_reply_attr(req, &st, options_.attr_timeout_s);
  }

  static void op_readlink(fuse_req_t req, fuse_ino_t ino) {
    auto r = self(req)->client_.readlink(cred_of(req), ino);
    if (!r) {
      fuse_reply_err(req, inode_errno(r.error()));
      return;
    }
    fuse_reply_readlink(req, r->c_str());
  }

  static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, dev_t rdev) {
    auto* s = self(req);
    const uint64_t xattrs_before = s->xattr_change_count();
    if (auto special = special_type_of(mode)) {
      auto r = s->client_.mknod(cred_of(req), parent, name, *special, mode & 07777, rdev);
      s->changed();
      if (!r) {
        fuse_reply_err(req, errno_of(r.error()));
        return;
      }
      s->reply_entry(req, *r, s->own_change(xattrs_before));  // this mount's own change: its result
      return;
    }
    if (!S_ISREG(mode)) {
      fuse_reply_err(req, EINVAL);  // as mknod(2) for a file type it does not know
      return;
    }
    auto r = s->client_.create(cred_of(req), parent, name, mode & 07777, O_CREAT | O_EXCL | O_WRONLY);
    s->changed();
    if (!r) {
      fuse_reply_err(req, errno_of(r.error()));
      return;
    }
    (void)r->second->close();
    s->reply_entry(req, r->first, s->own_change(xattrs_before));  // this mount's own change: its result
  }

  static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode) {
    auto* s = self(req);
    const uint64_t xattrs_before = s->xattr_change_count();
    auto r = s->client_.mkdir(cred_of(req), parent, name, mode & 07777);
    s->changed();
    if (!r) {
      fuse_reply_err(req, errno_of(r.error()));
      return;
    }
    s->reply_entry(req, *r, s->own_change(xattrs_before));  // this mount's own change: its result
  }

  static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char* name) {
    auto r = self(req)->client_.unlink(cred_of(req), parent, name);
    self(req)->changed();
    fuse_reply_err(req, r ? 0 : errno_of(r.error()));
  }

  static void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char* name) {
    auto r = self(req)->client_.rmdir(cred_of(req), parent, name);
    self(req)->changed();
    fuse_reply_err(req, r ? 0 : errno_of(r.error()));
  }

  static void op_symlink(fuse_req_t req, const char* link, fuse_ino_t parent, const char* name) {
    auto* s = self(req);
    const uint64_t xattrs_before = s->xattr_change_count();
    auto r = s->client_.symlink(cred_of(req), parent, name, link);
    s->changed();
    if (!r) {
      fuse_reply_err(req, errno_of(r.error()));
      return;
    }
    s->reply_entry(req, *r, s->own_change(xattrs_before));  // this mount's own change: its result
  }

  static void op_rename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t newparent, const char* newname,
                        unsigned int flags) {
    RenameFlags rf = RenameFlags::kNone;
    if (flags == RENAME_NOREPLACE) {
      rf = RenameFlags::kNoReplace;
    } else if (flags == RENAME_EXCHANGE) {
      rf = RenameFlags::kExchange;
    } else if (flags != 0) {
      fuse_reply_err(req, EINVAL);  // RENAME_WHITEOUT and combinations
      return;
    }
    auto r = self(req)->client_.rename(cred_of(req), parent, name, newparent, newname, rf);
    self(req)->changed();
    fuse_reply_err(req, r ? 0 : errno_of(r.error()));
  }

  static void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char* newname) {
    auto* s = self(req);
    const uint64_t xattrs_before = s->xattr_change_count();
    auto r = s->client_.link(cred_of(req), ino, newparent, newname);
    s->changed();
    if (!r) {
      fuse_reply_err(req, errno_of(r.error()));
      return;
    }
    s->reply_entry(req, *r, s->own_change(xattrs_before));  // this mount's own change: its result
  }

  // exec(2) opens with __FMODE_EXEC, which the kernel passes on in the
  // flags: it needs x permission and not r (the kernel reads the program to
  // load it; the caller gets no descriptor), so a program of mode 0711 runs
  // for everyone. The kernel checks x itself with default_permissions,
  // without only that some x bit is set: checked here, on fresh attributes.
  // The handle is opened as root, as meta would ask for read permission.
  Result<std::shared_ptr<File>> open_for_exec(const Cred& cred, Ino ino) {
    WEFT_TRY(Inode n, client_.getattr(cred, ino));
    WEFT_RETURN_IF_ERROR(meta::check_access(n, cred, meta::kAccessExec));
    return client_.open_read_known(Cred::root(), n);
  }

  static void op_open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
    auto* s = self(req);
    int flags = s->open_flags(fi->flags, false);
    bool writable = (flags & O_ACCMODE) != O_RDONLY;
    Cred cred = cred_of(req);
    // The length the File starts with: from meta now, or as fetched earlier
    // (a short read counts its age from then, as the kernel does).
    auto size_known_at = std::chrono::steady_clock::now();
    auto r = [&]() -> Result<std::shared_ptr<File>> {
      if ((fi->flags & kFmodeExec) && !writable && !(flags & O_TRUNC)) return s->open_for_exec(cred, ino);
      std::optional<KnownInode> known;
      if (!writable && !(flags & O_TRUNC) && !s->has_other_writers(ino, nullptr)) known = s->fresh_known(ino);
      if (!known) return s->client_.open(cred, ino, flags);
      size_known_at = known->at;
      return s->client_.open_read_known(cred, known->inode);
    }();
    // O_TRUNC (any access mode: libweft truncates for O_RDONLY too, as
    // Linux) may have cut the file even if the open then failed: attributes
    // fetched before are stale (libweft told the inode's other Files here).
    if (flags & O_TRUNC) {
      s->changed();
      s->drop_known(ino);
    }
    if (!r) {
      fuse_reply_err(req, inode_errno(r.error()));
      return;
    }
    auto of = s->register_file(ino, std::move(*r), writable, size_known_at);
    s->set_open_reply(fi, of.get());
    if (fuse_reply_open(req, fi) != 0) s->close_unreplied(of);  // interrupted: the kernel will not release it
  }

  static void op_create(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, fuse_file_info* fi) {
    auto* s = self(req);
    int flags = s->open_flags(fi->flags, true);
    const auto size_known_at = std::chrono::steady_clock::now();
    auto r = s->client_.create(cred_of(req), parent, name, mode & 07777, flags);
    s->changed();
    if (!r) {
      // The kernel sends CREATE for a name it holds no inode for; a symlink
      // there now (made meanwhile, or elsewhere while a negative entry was
      // cached) is for the kernel to follow (O_EXCL: meta said EEXIST).
      // ESTALE makes it redo the open once with a fresh lookup, which finds
      // the symlink and follows it (or answers ELOOP for O_NOFOLLOW).
      const bool symlink_there = r.error().code() == Code::kLoop;
      fuse_reply_err(req, symlink_there ? ESTALE : errno_of(r.error()));
      return;
    }
    auto& [inode, file] = *r;
    // A file that existed (made by another client since the kernel's
    // negative entry) was truncated as by an open: as op_open.
    if (flags & O_TRUNC) s->drop_known(inode.ino);
    auto of = s->register_file(inode.ino, std::move(file), (flags & O_ACCMODE) != O_RDONLY, size_known_at);
    s->set_open_reply(fi, of.get());
    fuse_entry_param e = s->entry_of(inode);
    s->add_lookup(inode.ino);  // before the reply, as in reply_entry
    if (fuse_reply_create(req, &e, fi) != 0) {
      s->forget_ino(inode.ino, 1);
      s->close_unreplied(of);
    }
  }

  static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
    auto* s = self(req);
    OpenFile* of = file_of(fi);
    // File::pread itself first flushes the inode's other Files open here (and
    // takes their length): every write(2) that returned before this read
    // began is seen, whichever thread started its flush. Another handle's
    // failed write is that handle's, reported by its own next call.
    // pread_page_fill: a read of a write-only handle is the kernel filling
    // a page (writeback_cache); read(2) on one never gets here (EBADF).
    // A length it reports moves change_count() before the reply.
    auto& buf = read_buffer(size);
    auto r = of->file->pread_page_fill(std::span<std::byte>(buf.data(), size), static_cast<uint64_t>(off));
    if (!r) {
      fuse_reply_err(req, errno_of(r.error()));
      return;
    }
    size_t n = *r;
    // Short: another handle here may have grown the file since this one
    // opened, or another client (or a writer here since closed) since this
    // handle last asked meta. Left short, the kernel would take the old end
    // for the file's length.
    const auto stale_after = static_cast<int64_t>(s->options_.attr_timeout_s * 1e9);
    if (n < size && (s->has_other_writers(ino, of) || steady_ns() - of->size_known_ns.load() > stale_after)) {
      of->size_known_ns = steady_ns();
      auto grown = of->file->refresh_size();
      if (grown && *grown > static_cast<uint64_t>(off) + n) {
        auto more = of->file->pread_page_fill(std::span<std::byte>(buf.data() + n, size - n), static_cast<uint64_t>(off) + n);
        if (more) n += *more;
      }
    }
    fuse_reply_buf(req, reinterpret_cast<const char*>(buf.data()), n);
  }

  static void op_write(fuse_req_t req, fuse_ino_t /*ino*/, const char* buf, size_t size, off_t off,
                       fuse_file_info* fi) {
    WriteInProgress counted(*self(req));
    OpenFile* of = file_of(fi);
    auto r = of->file->pwrite(std::span<const std::byte>(reinterpret_cast<const std::byte*>(buf), size),
                              static_cast<uint64_t>(off));
    if (!r) {
      fuse_reply_err(req, errno_of(r.error()));
      return;
    }
    // O_SYNC / O_DSYNC: the open's flags, or RWF_SYNC / RWF_DSYNC of this
    // write (the kernel adds them to the request's flags). Through the page
    // cache the kernel sends an fsync after the write itself; with
    // FOPEN_DIRECT_IO it does not, so the write is durable before it returns here.
    if (of->direct_io && (fi->flags & O_DSYNC)) {
      if (auto synced = of->file->fsync(); !synced) {
        fuse_reply_err(req, errno_of(synced.error()));
        return;
      }
    }
    self(req)->data_changed();
    fuse_reply_write(req, *r);
  }

  // close(2) makes what went through its descriptor visible to other
  // clients (close to open). The kernel writes cached pages (writeback_cache,
  // shared mappings) back through the newest writable handle of the inode,
  // which may not be the one closing: every writable handle of the inode
  // here is flushed, not only this one.
  static void op_flush(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
    auto* s = self(req);
    OpenFile* of = file_of(fi);
    if (!of->writable) {
      fuse_reply_err(req, 0);
      return;
    }
    int err = s->each_writer(ino, of, [](File& f) { return f.flush(); }, /*consume=*/false);
    s->data_changed();  // they reported the length (and mtime) to meta
    fuse_reply_err(req, err);
  }

  static void op_release(fuse_req_t req, fuse_ino_t /*ino*/, fuse_file_info* fi) {
    auto* s = self(req);
    OpenFile* raw = file_of(fi);  // the registry owns it until unregistered
    // Closed while still registered: an fsync through another handle of the
    // inode meanwhile waits for this close's flush (sync_inode), rather than
    // missing what it still sends (pages written back at release: shared
    // mappings, writeback_cache).
    Result<void> r;
    {
      // Marked and counted under close_mu: an fsync through another handle
      // that finds this one released waits for its outcome to be counted
      // (each_writer); one that found it failing before counted it itself.
      std::lock_guard counting(raw->close_mu);
      raw->released = true;
      r = raw->file->close();
      // What it wrote failed: not a lost end of its session at meta after
      // data and length went through (nothing lost; the session stays open
      // at meta until this client's lease ends).
      if (auto flushed = raw->file->close_flushed(); !flushed && raw->writable)
        s->count_failure(*raw, writeback_errno(flushed.error()));
    }
    // A writable one's close reported the length: unregistering drops the
    // attributes fetched meanwhile.
    (void)s->unregister_file(raw);
    fuse_reply_err(req, r ? 0 : errno_of(r.error()));  // the kernel drops it; close(2) saw flush's result
  }

  // fsync(2) makes the inode's data durable whichever descriptor wrote it
  // (as Linux), so through a read-only one too: every handle open for
  // writing on it here syncs. The first failure is the answer.
  static void op_fsync(fuse_req_t req, fuse_ino_t ino, int /*datasync*/, fuse_file_info* fi) {
    auto* s = self(req);
    int err = s->sync_inode(ino, fi && fi->fh ? file_of(fi) : nullptr);
    s->data_changed();
    fuse_reply_err(req, err);
  }

  // fallocate(2): Weft writes a chunk when its data comes, so nothing can be
  // reserved. Mode 0 (posix_fallocate) makes the length at least
  // offset + length (the range past the old length reads as zeros);
  // FALLOC_FL_KEEP_SIZE changes nothing. Both first check that the cluster
  // has free what the range adds past the length (ENOSPC), as close as Weft
  // comes to the call's promise. Without this, glibc's posix_fallocate would write a byte into
  // every 4 KiB block of the range. Punching, zeroing, collapsing and
  // inserting ranges: EOPNOTSUPP. (The kernel checks the handle is writable.)
  static void op_fallocate(fuse_req_t req, fuse_ino_t /*ino*/, int mode, off_t offset, off_t length,
                           fuse_file_info* fi) {
    auto* s = self(req);
    if (mode & ~FALLOC_FL_KEEP_SIZE) {
      fuse_reply_err(req, EOPNOTSUPP);
      return;
    }
    OpenFile* of = file_of(fi);
    if (!of->writable) {
      fuse_reply_err(req, EBADF);
      return;
    }
    // What the range adds past the length this handle knows (the part
    // inside holds data or a hole already: Weft does not fill holes).
    const uint64_t end = static_cast<uint64_t>(offset) + static_cast<uint64_t>(length);
    const uint64_t known = of->file->size();
    const uint64_t grows = end > known ? end - std::max<uint64_t>(known, static_cast<uint64_t>(offset)) : 0;
    if (grows > 0) {
      auto space = s->client_.statfs(cred_of(req));
      if (!space) {
        fuse_reply_err(req, errno_of(space.error()));
        return;
      }
      uint64_t free_bytes = space->capacity_bytes > space->used_bytes ? space->capacity_bytes - space->used_bytes : 0;
      if (grows > free_bytes) {
        fuse_reply_err(req, ENOSPC);
        return;
      }
    }
    if (!(mode & FALLOC_FL_KEEP_SIZE)) {
      if (auto r = of->file->extend(static_cast<uint64_t>(offset) + static_cast<uint64_t>(length)); !r) {
        fuse_reply_err(req, errno_of(r.error()));
        return;
      }
      s->data_changed();
    }
    fuse_reply_err(req, 0);
  }

  static void op_opendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
    auto* s = self(req);
    // The stop path's open (sync_mount), only for syncfs and a close: no
    // listing, no permission to check (this process runs the mount).
    if (s->is_own_open(req, ino)) {
      auto* d = new OpenDir;
      d->ino = d->parent = ino;
      return s->hand_out_dir(req, fi, d);
    }
    auto r = s->client_.getattr(cred_of(req), ino);
    if (!r) {
      fuse_reply_err(req, inode_errno(r.error()));
      return;
    }
    if (!r->is_dir()) {
      fuse_reply_err(req, ENOTDIR);
      return;
    }
    // Listing needs read permission, refused at open as open(2) does (the
    // kernel checks it itself only with default_permissions).
    if (auto allowed = meta::check_access(*r, cred_of(req), meta::kAccessRead); !allowed) {
      fuse_reply_err(req, errno_of(allowed.error()));
      return;
    }
    auto* d = new OpenDir;
    d->ino = ino;
    d->parent = r->parent ? r->parent : ino;
    d->opened = *r;
    s->hand_out_dir(req, fi, d);
  }

  // A request of sync_mount's open of the root (FUSE names the calling
  // thread): answered without meta, which may be gone (a getattr would then
  // wait out the client's retry time, close to a minute, before the unmount).
  bool is_own_open(fuse_req_t req, fuse_ino_t ino) const {
    const pid_t own = own_open_tid_;
    return own != 0 && ino == FUSE_ROOT_ID && fuse_req_ctx(req)->pid == own;
  }

  // Answers OPENDIR with `d` as the kernel's handle (fi->fh).
  void hand_out_dir(fuse_req_t req, fuse_file_info* fi, OpenDir* d) {
    fi->fh = reinterpret_cast<uint64_t>(d);
    {
      std::lock_guard lk(dirs_mu_);
      open_dirs_.insert(d);
    }
    if (fuse_reply_open(req, fi) != 0) release_dir(d);
  }

  // Deletes an open directory's handle (RELEASEDIR, or a failed OPENDIR reply).
  void release_dir(OpenDir* d) {
    {
      std::lock_guard lk(dirs_mu_);
      open_dirs_.erase(d);
    }
    delete d;
  }

  void readdir_common(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi, bool plus) {
    OpenDir* d = dir_of(fi);
    Cred cred = cred_of(req);
    // Every reply is sent with d->mu released: once the kernel has it, the
    // directory may be closed and RELEASEDIR (which deletes d) run at once.
    std::unique_lock lk(d->mu);
    std::vector<char> buf(size);
    size_t used = 0;
    std::vector<Ino> counted_inos;  // lookups taken for entries in buf
    bool took_entry = false;        // of Weft's (not "." or "..")
    // Read permission was checked at OPENDIR, as open(2) does; a mode changed
    // since (or a descriptor passed to another user) does not stop the
    // listing: its pages are fetched as root. Search permission, which Linux
    // checks at every use, is judged (below) on the directory as it was at
    // the page's fetch.
    const bool checks_search = plus && !options_.default_permissions && cred.uid != 0;
    auto fetch = [&](std::string_view cookie) {
      if (checks_search) {
        if (auto now = client_.getattr(Cred::root(), ino)) d->opened = *now;  // else as it was
      }
      return client_.readdir(Cred::root(), ino, cookie, kReaddirPageEntries);
    };
    // Offset 0 again (rewinddir): a new listing, not the pages read before.
    if (off == 0) d->cursor = DirCursor();
    // readdirplus hands the kernel each entry's attributes, which it takes
    // over what it knows whatever timeouts come with them (Linux's
    // fuse_direntplus_link applies them even with 0): not those of a page
    // fetched before a change made through this mount (an append, an
    // unlink) since, nor of one older than the timeouts (another client's
    // append would shrink the kernel's size back). The rest of that page is
    // fetched again (as the kernel's next request arrives, not per change).
    if (plus && (d->page_changes != change_count() ||
                 std::chrono::steady_clock::now() - d->page_at >= page_ttl_))
      d->cursor.reload_page();
    // Attributes only for a caller that may search the directory: the kernel
    // links them as its entries, and without default_permissions it asks
    // nothing more for a name it holds, so stat or open of dir/name would
    // succeed where Linux says EACCES. (With default_permissions the kernel
    // checks search permission itself.) Others get bare entries.
    auto may_search = [&] {
      return !checks_search || meta::check_access(d->opened, cred, meta::kAccessExec).has_value();
    };
    int page_reloads = 0;  // for a change while the reply was being made (below)
    for (uint64_t o = static_cast<uint64_t>(off);; ++o) {
      std::string name;
      fuse_entry_param e{};
      bool counted = false;
      Inode de_attr;  // the page's attributes of a counted entry (de_attr_from_page)
      bool de_attr_from_page = false;
      if (o == 0 || o == 1) {
        name = o == 0 ? "." : "..";
        e.attr.st_ino = o == 0 ? d->ino : d->parent;
        e.attr.st_mode = S_IFDIR;
      } else {
        // One page per reply (DirCursor::holds): the kernel may ask next
        // from any entry of this reply its caller did not take.
        if (took_entry && !d->cursor.holds(o - 2)) break;
        const bool first_of_reply = !took_entry;
        took_entry = true;
        const size_t fetched = d->cursor.pages_fetched();
        const uint64_t reports = client_.length_reports();
        const uint64_t changes = change_count();
        const uint64_t xattr_changes = xattr_change_count();
        const auto fetch_at = std::chrono::steady_clock::now();
        auto r = d->cursor.at(o - 2, fetch);
        if (d->cursor.pages_fetched() != fetched) {
          d->page_changes = changes;
          d->page_xattr_changes = xattr_changes;
          d->page_reports = reports;
          d->page_at = fetch_at;
        }
        // tests: a change here while the reply is made from the page in hand
        if (plus && first_of_reply && WEFT_FAULT("fuse.readdirplus.hold"))
          std::this_thread::sleep_for(std::chrono::milliseconds(400));
        if (!r) {
          if (used == 0) {
            lk.unlock();
            fuse_reply_err(req, errno_of(r.error()));
            return;
          }
          break;
        }
        const DirEntry* de = *r;
        if (!de) break;
        name = de->name;
        if (plus && may_search()) {
          Inode attr = de->attr;
          std::chrono::duration<double> age = std::chrono::steady_clock::now() - d->page_at;
          const bool from_page = attr.ino != 0;
          if (!from_page) {  // no attributes in the page: ask
            auto l = client_.lookup(cred, ino, de->name);
            if (!l) {
              if (used == 0) {
                lk.unlock();
                fuse_reply_err(req, errno_of(l.error()));
                return;
              }
              break;
            }
            attr = *l;
            age = {};
          }
          e = entry_of(attr, age.count());
          // A length report here since the page's fetch (checked after
          // entry_of: a report moves the count before its writes stop
          // counting in the local size entry_of adds) leaves the page's
          // length older than this mount's writes: not for the kernel. Stop
          // before this entry (the kernel's next request reloads the page),
          // or, when it would be the reply's first, reload now and make it
          // again. Only reports: a write since is in that local size, and
          // every write would otherwise cut a listing to an entry per reply.
          if (from_page && client_.length_reports() != d->page_reports) {
            if (used > 0) break;
            if (page_reloads++ < 3) {
              d->cursor.reload_page();
              took_entry = false;
              --o;
              continue;
            }
            e = fuse_entry_param{};  // changes keep coming: a bare entry, linked by nobody
            e.attr.st_ino = de->ino;
            e.attr.st_mode = type_bits(de->type);
          } else {
            counted = true;
            de_attr_from_page = from_page;
            if (from_page) de_attr = attr;
          }
        } else {  // e.ino 0: the kernel links no entry for it (fuse_direntplus_link)
          e.attr.st_ino = de->ino;
          e.attr.st_mode = type_bits(de->type);
        }
      }
      size_t room = size - used;
      size_t need = plus ? fuse_add_direntry_plus(req, buf.data() + used, room, name.c_str(), &e, off_t(o + 1))
                         : fuse_add_direntry(req, buf.data() + used, room, name.c_str(), &e.attr, off_t(o + 1));
      if (need > room) break;
      used += need;
      if (counted) {
        add_lookup(e.ino);  // before the reply, as in reply_entry
        counted_inos.push_back(e.ino);
        // For the xattr answer only (see remember()); a page's attributes
        // carry the entry's presence as of the page's fetch.
        if (de_attr_from_page) remember(de_attr, Fetched{d->page_changes, d->page_at, d->page_xattr_changes}, true);
      }
    }
    lk.unlock();
    // A reply that never reached the kernel: it holds none of these counts.
    if (fuse_reply_buf(req, buf.data(), used) != 0)
      for (Ino ino : counted_inos) forget_ino(ino, 1);
    // tests: the kernel has the reply; the directory may be closed meanwhile
    if (WEFT_FAULT("fuse.readdir.after_reply")) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }

  static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
    self(req)->readdir_common(req, ino, size, off, fi, false);
  }

  static void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
    self(req)->readdir_common(req, ino, size, off, fi, true);
  }

  static void op_releasedir(fuse_req_t req, fuse_ino_t /*ino*/, fuse_file_info* fi) {
    OpenDir* d = dir_of(fi);
    // No READDIR of this handle may still be running (it would use d after the delete).
    WEFT_ASSERT_MSG(d->mu.try_lock(), "RELEASEDIR while a READDIR of the same handle still holds it");
    d->mu.unlock();
    self(req)->release_dir(d);
    fuse_reply_err(req, 0);
  }

  static void op_fsyncdir(fuse_req_t req, fuse_ino_t /*ino*/, int /*datasync*/, fuse_file_info* /*fi*/) {
    fuse_reply_err(req, 0);  // namespace changes are durable when acknowledged
  }

  static void op_statfs(fuse_req_t req, fuse_ino_t /*ino*/) {
    auto r = self(req)->client_.statfs(cred_of(req));
    if (!r) {
      fuse_reply_err(req, errno_of(r.error()));
      return;
    }
    constexpr uint64_t kBlock = 4096;
    struct statvfs st {};
    st.f_bsize = kMaxIoBytes;
    st.f_frsize = kBlock;
    st.f_blocks = r->capacity_bytes / kBlock;
    uint64_t free_bytes = r->capacity_bytes > r->used_bytes ? r->capacity_bytes - r->used_bytes : 0;
    st.f_bfree = free_bytes / kBlock;
    st.f_bavail = st.f_bfree;
    st.f_files = r->inodes_max ? r->inodes_max : UINT64_MAX / 2;
    st.f_ffree = st.f_files > r->inodes_used ? st.f_files - r->inodes_used : 0;
    st.f_favail = st.f_ffree;
    st.f_namemax = meta::kNameBytesMax;
    fuse_reply_statfs(req, &st);
  }

  static void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char* name, const char* value, size_t size, int flags) {
    if (std::strcmp(name, kCapabilityXattr) == 0) {
      fuse_reply_err(req, EOPNOTSUPP);  // see op_getxattr
      return;
    }
    if ((flags & XATTR_CREATE) && (flags & XATTR_REPLACE)) {
      // Both: never set (as ext4): ENODATA if absent, else EEXIST.
      auto old = self(req)->client_.getxattr(cred_of(req), ino, name);
      fuse_reply_err(req, old ? EEXIST : inode_errno(old.error()));
      return;
    }
    XattrFlags xf = XattrFlags::kAny;
    if (flags & XATTR_CREATE) {
      xf = XattrFlags::kCreate;
    } else if (flags & XATTR_REPLACE) {
      xf = XattrFlags::kReplace;
    }
    auto r = self(req)->client_.setxattr(cred_of(req), ino, name, std::string_view(value, size), xf);
    self(req)->xattrs_changed(ino);  // it may have xattrs now (also after a failure: the outcome may be unknown)
    self(req)->changed();
    fuse_reply_err(req, r ? 0 : inode_errno(r.error()));
  }

  static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char* name, size_t size) {
    if (std::strcmp(name, kCapabilityXattr) == 0) {
      // The kernel asks for it before every write to clear file
      // capabilities; Weft does not store them, so answer without a round trip.
      fuse_reply_err(req, ENODATA);
      return;
    }
    auto* s = self(req);
    const Cred cred = cred_of(req);
    if (auto none = s->known_without_xattrs(ino)) {  // see remember()
      auto allowed = meta::check_xattr_access(*none, cred, name, /*write=*/false);
      fuse_reply_err(req, allowed ? ENODATA : inode_errno(allowed.error()));
      return;
    }
    auto r = s->client_.getxattr(cred, ino, name);
    if (!r) {
      fuse_reply_err(req, inode_errno(r.error()));
      return;
    }
    if (size == 0) {
      fuse_reply_xattr(req, r->size());
    } else if (size < r->size()) {
      fuse_reply_err(req, ERANGE);
    } else {
      fuse_reply_buf(req, r->data(), r->size());
    }
  }

  static void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
    auto* s = self(req);
    if (s->known_without_xattrs(ino)) {  // see remember(); meta checks nothing more for a list
      if (size == 0) fuse_reply_xattr(req, 0);
      else fuse_reply_buf(req, nullptr, 0);
      return;
    }
    auto r = s->client_.listxattr(cred_of(req), ino);
    if (!r) {
      fuse_reply_err(req, inode_errno(r.error()));
      return;
    }
    std::string names;
    for (const auto& n : *r) {
      names += n;
      names.push_back('\0');
    }
    if (size == 0) {
      fuse_reply_xattr(req, names.size());
    } else if (size < names.size()) {
      fuse_reply_err(req, ERANGE);
    } else {
      fuse_reply_buf(req, names.data(), names.size());
    }
  }

  static void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char* name) {
    auto r = self(req)->client_.removexattr(cred_of(req), ino, name);
    self(req)->xattrs_changed(ino);
    self(req)->changed();
    fuse_reply_err(req, r ? 0 : inode_errno(r.error()));
  }

  // Used only without -o default_permissions (the kernel checks otherwise):
  // the classic owner/group/other check on Weft's attributes.
  static void op_access(fuse_req_t req, fuse_ino_t ino, int mask) {
    Cred cred = cred_of(req);
    auto r = self(req)->client_.getattr(cred, ino);
    if (!r) {
      fuse_reply_err(req, inode_errno(r.error()));
      return;
    }
    if (mask == F_OK) {
      fuse_reply_err(req, 0);
      return;
    }
    uint32_t mode = r->mode;
    if (cred.uid == 0) {
      // root: everything, except executing a file nobody may execute.
      bool ok = !(mask & X_OK) || r->is_dir() || (mode & 0111);
      fuse_reply_err(req, ok ? 0 : EACCES);
      return;
    }
    uint32_t bits;
    if (cred.uid == r->uid) {
      bits = (mode >> 6) & 7;
    } else if (cred.gid == r->gid || cred.in_group(r->gid)) {
      bits = (mode >> 3) & 7;
    } else {
      bits = mode & 7;
    }
    uint32_t want = ((mask & R_OK) ? 4 : 0) | ((mask & W_OK) ? 2 : 0) | ((mask & X_OK) ? 1 : 0);
    fuse_reply_err(req, (bits & want) == want ? 0 : EACCES);
  }

  static fuse_lowlevel_ops make_ops() {
    fuse_lowlevel_ops ops{};
    ops.init = op_init;
    ops.lookup = op_lookup;
    ops.forget = op_forget;
    ops.forget_multi = op_forget_multi;
    ops.getattr = op_getattr;
    ops.setattr = op_setattr;
    ops.readlink = op_readlink;
    ops.mknod = op_mknod;
    ops.mkdir = op_mkdir;
    ops.unlink = op_unlink;
    ops.rmdir = op_rmdir;
    ops.symlink = op_symlink;
    ops.rename = op_rename;
    ops.link = op_link;
    ops.open = op_open;
    ops.read = op_read;
    ops.write = op_write;
    ops.flush = op_flush;
    ops.release = op_release;
    ops.fsync = op_fsync;
    ops.opendir = op_opendir;
    ops.readdir = op_readdir;
    ops.readdirplus = op_readdirplus;
    ops.releasedir = op_releasedir;
    ops.fsyncdir = op_fsyncdir;
    ops.statfs = op_statfs;
    ops.fallocate = op_fallocate;
    ops.setxattr = op_setxattr;
    ops.getxattr = op_getxattr;
    ops.listxattr = op_listxattr;
    ops.removexattr = op_removexattr;
    ops.access = op_access;
    ops.create = op_create;
    return ops;
  }

  Client& client_;
  MountOptions options_;
  std::string mountpoint_;
  std::string mount_path_;  // absolute (a background daemon changes directory)
  fuse_session* session_ = nullptr;
  std::mutex mount_mu_;
  bool mounted_ = false;

  std::mutex lookups_mu_;
  std::unordered_map<Ino, uint64_t> lookups_;
  std::unordered_map<Ino, KnownInode> known_;  // see remember()
  DirAhead ahead_;

  std::mutex files_mu_;
  std::unordered_map<Ino, std::vector<std::shared_ptr<OpenFile>>> open_files_;
  // Write-back failures of an inode while a handle of it is open here, as
  // Linux's errseq_t of a mapping (each_writer): how many, and the errno of
  // the latest. GUARDED_BY(files_mu_).
  struct WritebackErrors {
    uint64_t count = 0;
    int err = 0;
    bool reported = false;  // the latest, to some descriptor
  };
  std::unordered_map<Ino, WritebackErrors> wb_errors_;
  // Directory handles the kernel has not released: freed at unmount (a
  // directory still open when the daemon stops gets no RELEASEDIR).
  std::mutex dirs_mu_;
  std::unordered_set<OpenDir*> open_dirs_;  // GUARDED_BY(dirs_mu_)
  // Changes made through this mount (changed(), data_changed()): a listing's
  // page fetched before the count moved may hold stale attributes
  // (change_count() adds libweft's length reports).
  std::atomic<uint64_t> changes_{0};
  std::atomic<uint64_t> xattr_changes_{0};  // see xattrs_changed()
  // WRITE requests begun and in progress (wait_for_written_back_pages).
  std::atomic<uint64_t> writes_seen_{0};
  std::atomic<int> writes_in_progress_{0};
  struct WriteInProgress {
    explicit WriteInProgress(Impl& s) : s(s) {
      s.writes_seen_.fetch_add(1);
      s.writes_in_progress_.fetch_add(1);
    }
    ~WriteInProgress() { s.writes_in_progress_.fetch_sub(1); }
    Impl& s;
  };
  // How long readdirplus serves the attributes of a fetched page: what the
  // kernel would trust them for.
  const std::chrono::duration<double> page_ttl_{std::min(options_.attr_timeout_s, options_.entry_timeout_s)};
};

FuseServer::FuseServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
FuseServer::~FuseServer() = default;

Result<std::unique_ptr<FuseServer>> FuseServer::mount(Client& client, const MountOptions& options,
                                                      const std::string& mountpoint) {
  WEFT_RETURN_IF_ERROR(check_mountpoint(mountpoint, options.nonempty));
  auto impl = std::make_unique<Impl>(client, options, mountpoint);
  WEFT_RETURN_IF_ERROR(impl->mount());
  return std::unique_ptr<FuseServer>(new FuseServer(std::move(impl)));
}

Result<int> FuseServer::run() { return impl_->run(); }
void FuseServer::unmount() { impl_->unmount(); }
const std::string& FuseServer::mountpoint() const { return impl_->mountpoint(); }

Result<void> check_mountpoint(const std::string& path, bool nonempty) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    int err = errno;
    if (err == ENOENT) return error(Code::kNotFound, "mount point {} does not exist", path);
    if (err == ENOTCONN) {
      return error(Code::kUnavailable,
                   "mount point {} is a dead FUSE mount (its daemon exited): run `weft umount --lazy {}` first", path,
                   path);
    }
    return error(code_from_errno(err), "mount point {}: {}", path, std::strerror(err));
  }
  if (!S_ISDIR(st.st_mode)) return error(Code::kNotDirectory, "mount point {} is not a directory", path);
  if (!nonempty) {
    std::error_code ec;
    std::filesystem::directory_iterator it(path, ec);
    if (ec) return error(Code::kPermissionDenied, "mount point {}: {}", path, ec.message());
    if (it != std::filesystem::directory_iterator()) {
      return error(Code::kNotEmpty, "mount point {} is not empty (add -o nonempty to mount over it)", path);
    }
  }
  return {};
}

void block_stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

}  // namespace weft::fuse
