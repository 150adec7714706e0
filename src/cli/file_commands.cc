// File tools over libweft: `weft ls|stat|mkdir|rm|mv|put|get|cat|layout`.
// Paths are absolute paths inside the cluster ("/data/a.bin"). Every command
// finds the cluster like the other client commands (--config, $WEFT_CONFIG,
// ./weft-data/client.toml; --cluster ADDR). Large put/get show a progress bar
// when stderr is a terminal.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>

#include "cli/commands.h"
#include "common/random.h"
#include "weft/client.h"

namespace weft::cli {
namespace {

struct FileFlags {
  std::string config;
  std::string cluster;
};

void add_flags(CLI::App* cmd, FileFlags& f) {
  cmd->add_option("--config", f.config, "client config (default: $WEFT_CONFIG, else ./weft-data/client.toml)");
  cmd->add_option("--cluster", f.cluster, "mgmtd host:port (overrides the config's mgmtd list)");
}

std::unique_ptr<Client> connect(const FileFlags& f) {
  ClientOptions o;
  o.config_path = f.config;
  o.cluster = f.cluster;
  auto c = Client::connect(o);
  if (!c) {
    fail(c.error().message());
    return nullptr;
  }
  return std::move(*c);
}

std::string human(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.1f} {}", v, units[u]);
}

// ls -l's first letter and stat's word for a type.
char type_char(InodeType t) {
  switch (t) {
    case InodeType::kDirectory: return 'd';
    case InodeType::kSymlink: return 'l';
    case InodeType::kFifo: return 'p';
    case InodeType::kSocket: return 's';
    case InodeType::kCharDevice: return 'c';
    case InodeType::kBlockDevice: return 'b';
    case InodeType::kFile: break;
  }
  return '-';
}

// "major, minor" of a device number (glibc's dev_t encoding, as stat returns it).
std::string device_string(uint64_t rdev) {
  return fmt::format("{}, {}", major(static_cast<dev_t>(rdev)), minor(static_cast<dev_t>(rdev)));
}

const char* type_name(InodeType t) {
  switch (t) {
    case InodeType::kDirectory: return "directory";
    case InodeType::kSymlink: return "symlink";
    case InodeType::kFifo: return "fifo";
    case InodeType::kSocket: return "socket";
    case InodeType::kCharDevice: return "character device";
    case InodeType::kBlockDevice: return "block device";
    case InodeType::kFile: break;
  }
  return "file";
}

std::string mode_string(const Inode& n) {
  std::string s(1, type_char(n.type));
  const char* rwx = "rwxrwxrwx";
  for (int i = 0; i < 9; ++i) s += (n.mode & (0400 >> i)) ? rwx[i] : '-';
  return s;
}

std::string time_string(int64_t ns) {
  std::time_t t = static_cast<std::time_t>(ns / 1000000000);
  std::tm tm{};
  ::localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

// A progress line on a terminal, redrawn at most every 200 ms; nothing
// otherwise. total 0: unknown (a pipe), shown as bytes and rate only.
class Progress {
 public:
  Progress(std::string what, uint64_t total) : what_(std::move(what)), total_(total), tty_(::isatty(2) == 1) {}
  void update(uint64_t done) {
    if (!tty_) return;
    auto now = std::chrono::steady_clock::now();
    if (now - last_ < std::chrono::milliseconds(200)) return;
    last_ = now;
    draw(done, now);
  }
  // The final state and the line's end, once the copy is complete.
  void finish(uint64_t done) {
    if (!tty_) return;
    draw(done, std::chrono::steady_clock::now());
    std::fprintf(stderr, "\n");
  }

 private:
  void draw(uint64_t done, std::chrono::steady_clock::time_point now) {
    double secs = std::chrono::duration<double>(now - start_).count();
    double rate = secs > 0 ? static_cast<double>(done) / secs : 0;
    if (total_ == 0) {
      std::fprintf(stderr, "\r%s %s %s/s   ", what_.c_str(), human(done).c_str(),
                   human(static_cast<uint64_t>(rate)).c_str());
      return;
    }
    done = std::min(done, total_);  // a file that grew while copied
    double frac = static_cast<double>(done) / static_cast<double>(total_);
    int bar = static_cast<int>(frac * 30);
    double eta = rate > 0 ? static_cast<double>(total_ - done) / rate : 0;
    std::fprintf(stderr, "\r%s [%-30s] %5.1f%% %s/s ETA %.0fs   ", what_.c_str(), std::string(bar, '#').c_str(),
                 frac * 100, human(static_cast<uint64_t>(rate)).c_str(), eta);
  }

  std::string what_;
  uint64_t total_;
  bool tty_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_{};
};

constexpr size_t kCopyBlock = 8u << 20;

void cmd_ls(const FileFlags& f, const std::string& path, bool long_format) {
  auto c = connect(f);
  if (!c) return;
  auto n = c->resolve(c->default_cred(), path, true);
  if (!n) return fail(n.error().message());
  std::vector<DirEntry> entries;
  if (n->is_dir()) {
    auto list = c->list_path(c->default_cred(), path);
    if (!list) return fail(list.error().message());
    entries = std::move(*list);
  } else {
    entries.push_back(DirEntry{path, n->ino, n->type, *n});
  }
  std::sort(entries.begin(), entries.end(), [](const DirEntry& a, const DirEntry& b) { return a.name < b.name; });
  for (const auto& e : entries) {
    if (!long_format) {
      std::printf("%s%s\n", e.name.c_str(), e.type == InodeType::kDirectory ? "/" : "");
      continue;
    }
    const Inode& a = e.attr;
    if (a.ino == 0) {  // a directory the caller may read but not search: its name and type only, as ls does
      fail(fmt::format("cannot access '{}/{}': permission denied (no search permission on the directory)", path,
                       e.name));
      std::printf("%c????????? %3s %5s %5s %12s %19s %s\n", type_char(e.type), "?", "?", "?", "?", "?",
                  e.name.c_str());
      continue;
    }
    // A device shows its number where a file shows its size, as ls does.
    std::string size = meta::is_device_type(a.type) ? device_string(a.rdev) : std::to_string(a.size);
    std::printf("%s %3u %5u %5u %12s %s %s\n", mode_string(a).c_str(), a.nlink, a.uid, a.gid, size.c_str(),
                time_string(a.mtime_ns).c_str(), e.name.c_str());
  }
}

void cmd_stat(const FileFlags& f, const std::string& path) {
  auto c = connect(f);
  if (!c) return;
  auto n = c->resolve(c->default_cred(), path, false);
  if (!n) return fail(n.error().message());
  std::printf("  path: %s\n  inode: %llu\n  type: %s\n  size: %llu (%s)\n  mode: %04o (%s)\n  uid/gid: %u/%u\n"
              "  links: %u\n  mtime: %s\n  ctime: %s\n",
              path.c_str(), static_cast<unsigned long long>(n->ino),
              type_name(n->type),
              static_cast<unsigned long long>(n->size), human(n->size).c_str(), n->mode, mode_string(*n).c_str(),
              n->uid, n->gid, n->nlink, time_string(n->mtime_ns).c_str(), time_string(n->ctime_ns).c_str());
  if (meta::is_device_type(n->type)) std::printf("  device: %s\n", device_string(n->rdev).c_str());
  if (n->is_symlink()) std::printf("  target: %s\n", n->symlink_target.c_str());
  if (n->is_special() || n->is_symlink()) return;  // no data, so no layout
  const Layout& l = n->layout;
  std::printf("  layout: chunk %s, stripe %u, chain table %u\n", human(l.chunk_bytes).c_str(), l.stripe_count,
              l.chain_table_id);
}

void cmd_mkdir(const FileFlags& f, const std::string& path, bool parents, uint32_t mode) {
  auto c = connect(f);
  if (!c) return;
  if (parents) {
    if (auto r = c->mkdirs(c->default_cred(), path, mode); !r) fail(r.error().message());
    return;
  }
  auto parts = split_path(path);
  if (!parts) return fail(parts.error().message());
  if (parts->empty()) return fail(path + ": exists");
  if (auto r = c->mkdir_path(c->default_cred(), path, mode); !r) fail(r.error().message());
}

// As GNU rm: a path ending in "." or ".." and the root are never removed
// (`rm -r /data/..` would empty the root, entry by entry). remove_tree
// checks the same for -r.
Result<void> check_removable(Client& c, const std::string& path) {
  std::string_view p = path;
  while (p.size() > 1 && p.back() == '/') p.remove_suffix(1);
  std::string_view last = p.substr(p.find_last_of('/') + 1);
  if (last == "." || last == "..") return error(Code::kInvalidArgument, "{}: refusing to remove '.' or '..'", path);
  WEFT_TRY(Inode n, c.resolve(c.default_cred(), path, false));
  if (n.ino == kRootIno) return error(Code::kInvalidArgument, "{}: refusing to remove the root", path);
  return {};
}

// rm -r prints every error and goes on (remove_tree), as rm does.
void cmd_rm(const FileFlags& f, const std::vector<std::string>& paths, bool recursive) {
  auto c = connect(f);
  if (!c) return;
  for (const auto& p : paths) {
    if (recursive) {
      (void)c->remove_tree(c->default_cred(), p, [](const Status& s) { fail(s.message()); });
      continue;
    }
    auto r = check_removable(*c, p);
    if (r) r = c->remove_path(c->default_cred(), p);
    if (!r) fail(r.error().message());
  }
}

// As mv(1): a destination that is a directory receives the source under its
// own name. One ending in '/' that does not exist names the directory a
// directory source becomes; for anything else it is an error (ENOTDIR).
void cmd_mv(const FileFlags& f, const std::string& from, const std::string& to) {
  auto c = connect(f);
  if (!c) return;
  std::string target = to;
  auto n = c->resolve(c->default_cred(), to, true);
  if (n && n->is_dir()) {
    std::string_view src = from;
    while (src.size() > 1 && src.back() == '/') src.remove_suffix(1);
    target = to + (to.ends_with('/') ? "" : "/") + std::string(src.substr(src.find_last_of('/') + 1));
  } else if (to.ends_with('/')) {
    auto src = c->resolve(c->default_cred(), from, false);
    if (!src) return fail(src.error().message());
    if (n || !src->is_dir()) return fail(fmt::format("{}: not a directory", to));
    while (target.size() > 1 && target.back() == '/') target.pop_back();
  }
  if (auto r = c->rename_path(c->default_cred(), from, target); !r) fail(r.error().message());
}

// A stop signal (Ctrl-C, SIGTERM, SIGHUP) while put or get copies ends the
// copy with an error instead of the process, so the temporary is removed and
// the destination stays as it was; then the process dies of the signal as it
// would have. A second signal meanwhile kills at once. A signal the process
// ignores (nohup's SIGHUP, SIGINT of a background job) stays ignored.
std::atomic<int> g_stop_signal{0};

void on_stop_signal(int sig) {
  if (g_stop_signal.exchange(sig) == 0) return;
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

class StopSignals {
 public:
  StopSignals() {
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;  // no SA_RESTART: a blocked read returns EINTR and the loop looks
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < kSignals.size(); ++i) {
      ::sigaction(kSignals[i], nullptr, &old_[i]);
      caught_[i] = old_[i].sa_handler != SIG_IGN;
      if (caught_[i]) ::sigaction(kSignals[i], &sa, nullptr);
    }
  }
  ~StopSignals() {
    for (size_t i = 0; i < kSignals.size(); ++i)
      if (caught_[i]) ::sigaction(kSignals[i], &old_[i], nullptr);
    if (int sig = g_stop_signal.load()) {
      std::fflush(nullptr);
      ::raise(sig);  // the old (default) action now
    }
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  static Result<void> check() {
    if (int sig = g_stop_signal.load()) return error(Code::kCancelled, fmt::format("stopped by {}", ::strsignal(sig)));
    return {};
  }

 private:
  static constexpr std::array<int, 3> kSignals = {SIGINT, SIGTERM, SIGHUP};
  std::array<struct sigaction, 3> old_{};
  std::array<bool, 3> caught_{};
};

// A hidden name beside `path` for a copy in progress: put and get rename the
// copy over `path` only once it is complete, so a failed or killed copy
// never leaves a truncated file under the final name (nor empties the old one).
// The name is cut so that the temporary's stays within 255 bytes.
std::string temp_name_beside(const std::string& path) {
  constexpr size_t kNameMax = 255, kAdded = 27;  // ".", ".weft-tmp-" and 16 hex digits
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "" : path.substr(0, slash + 1);
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  return fmt::format("{}.{}.weft-tmp-{:016x}", dir, base.substr(0, kNameMax - kAdded), random_id());
}

std::string parent_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

constexpr int kMaxSymlinkHops = 40;  // as the kernel's (and open_path's) ELOOP

// Where put writes remote `path`: symlinks at the last name followed to the
// name they lead to (a temporary beside it is renamed onto it, as cp writes
// through a link: the link stays one). The inode found there, if any.
Result<std::pair<std::string, std::optional<Inode>>> remote_final_path(Client& c, std::string path) {
  for (int hop = 0; hop <= kMaxSymlinkHops; ++hop) {
    auto n = c.resolve(c.default_cred(), path, false);
    if (!n && n.error().code() == Code::kNotFound) return std::pair{path, std::optional<Inode>{}};
    if (!n) return std::unexpected(n.error());  // resolve names the path
    if (!n->is_symlink()) return std::pair{path, std::optional<Inode>{*n}};
    WEFT_TRY(std::string link, c.readlink(c.default_cred(), n->ino));
    path = link.starts_with('/') ? link : parent_of(path) + "/" + link;
  }
  return error(Code::kLoop, "{}: too many levels of symbolic links", path);
}

// Where get writes local `path`: symlinks followed to the file they name
// (a temporary beside it, renamed onto it); `direct`: written straight into
// it, for what is not a regular file (/dev/null, a FIFO) and for a process's
// open file reached through /proc/PID/fd/N (/dev/stdout), which a rename
// would not reach. `fd`: N when that is this process's own descriptor.
struct LocalTarget {
  std::string path;
  bool exists = false;
  bool direct = false;
  int fd = -1;
  struct stat st {};
};

// The descriptor N of "/proc/PID/fd/N" when PID is this process; else -1.
int own_fd(const std::string& real_dir, const std::string& name) {
  if (real_dir != fmt::format("/proc/{}/fd", ::getpid())) return -1;
  if (name.empty() || name.size() > 9 || name.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::stoi(name);
}

Result<LocalTarget> local_final_path(std::string path) {
  for (int hop = 0; hop <= kMaxSymlinkHops; ++hop) {
    LocalTarget t{.path = path};
    if (::lstat(path.c_str(), &t.st) != 0) {
      if (errno == ENOENT) return t;
      return error(Code::kIoError, "{}: {}", path, std::strerror(errno));
    }
    t.exists = true;
    if (!S_ISLNK(t.st.st_mode)) {
      t.direct = !S_ISREG(t.st.st_mode);
      return t;
    }
    std::string dir = parent_of(path);
    std::unique_ptr<char, decltype(&std::free)> real(::realpath(dir.c_str(), nullptr), &std::free);
    if (!real) return error(Code::kIoError, "{}: {}", dir, std::strerror(errno));
    std::string real_dir = real.get();
    if (real_dir.starts_with("/proc/")) {
      if (::stat(path.c_str(), &t.st) != 0) return error(Code::kIoError, "{}: {}", path, std::strerror(errno));
      t.direct = true;
      t.fd = own_fd(real_dir, path.substr(path.find_last_of('/') + 1));
      return t;
    }
    std::array<char, 4096> buf{};
    ssize_t n = ::readlink(path.c_str(), buf.data(), buf.size());
    if (n < 0) return error(Code::kIoError, "{}: {}", path, std::strerror(errno));
    std::string link(buf.data(), static_cast<size_t>(n));
    path = link.starts_with('/') ? link : real_dir + "/" + link;
  }
  return error(Code::kLoop, "{}: too many levels of symbolic links", path);
}

// Copies local file `fd` (`size` bytes) into `file`.
Result<void> copy_in(int fd, const std::string& local, File& file, const std::string& target, uint64_t size) {
  Progress progress("put " + target, size);
  std::vector<std::byte> buf(kCopyBlock);
  uint64_t off = 0;
  while (true) {
    WEFT_RETURN_IF_ERROR(StopSignals::check());
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return error(Code::kIoError, "{}: {}", local, std::strerror(errno));
    if (n == 0) break;
    // pwrite may write less (a write crossing the maximum file size is cut
    // short): what is left goes again and then fails with the reason.
    for (size_t done = 0; done < static_cast<size_t>(n);) {
      auto w = file.pwrite(std::span(buf).subspan(done, static_cast<size_t>(n) - done), off);
      if (!w) return error(w.error().code(), "{}: {}", target, w.error().message());
      if (*w == 0) return error(Code::kIoError, "{}: no byte written", target);
      done += *w;
      off += *w;
    }
    progress.update(off);
  }
  progress.finish(off);
  if (auto r = file.close(); !r) return error(r.error().code(), "{}: {}", target, r.error().message());
  return {};
}

// The umask, read before any thread starts (umask(2) only reads it by setting it).
mode_t current_umask() {
  const mode_t m = ::umask(022);
  ::umask(m);
  return m;
}

void cmd_put(const FileFlags& f, const std::string& local, const std::string& remote) {
  const mode_t umask = current_umask();
  const bool from_stdin = local == "-";
  int fd = from_stdin ? ::dup(0) : ::open(local.c_str(), O_RDONLY);
  if (fd < 0) return fail(fmt::format("{}: {}", from_stdin ? "stdin" : local, std::strerror(errno)));
  struct stat st {};
  // A file, or a stream (a pipe, a terminal: `... | weft put /dev/stdin /x`).
  const bool stat_ok = ::fstat(fd, &st) == 0;
  if (!stat_ok || !(S_ISREG(st.st_mode) || S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode))) {
    std::string why = !stat_ok ? std::strerror(errno) : S_ISDIR(st.st_mode) ? "is a directory" : "not a file or a stream";
    ::close(fd);
    return fail(fmt::format("{}: {}", local, why));
  }
  auto c = connect(f);
  if (!c) {
    ::close(fd);
    return;
  }
  std::string target = remote;
  auto n = c->resolve(c->default_cred(), remote, true);
  if (n && n->is_dir()) {
    if (from_stdin) {
      ::close(fd);
      return fail(remote + ": a directory; name the file to write stdin to");
    }
    target = remote + (remote.ends_with('/') ? "" : "/") + std::filesystem::path(local).filename().string();
  } else if (remote.ends_with('/')) {
    ::close(fd);
    return fail(n ? remote + ": not a directory" : n.error().message());
  }
  auto dest = remote_final_path(*c, target);
  if (dest && dest->second && !dest->second->is_file())
    dest = error(Code::kInvalidArgument, "{}: not a regular file", dest->first);
  if (!dest) {
    ::close(fd);
    return fail(dest.error().message());
  }
  const auto& [final_path, old] = *dest;
  const std::string tmp = temp_name_beside(final_path);
  StopSignals stop;  // before the temporary exists: a stop signal removes it
  // A file it replaces keeps its permission bits (owner and links do not
  // follow: the destination is a new file). A new one has a regular source's,
  // else (a pipe's 0600, a terminal's 0620) the default of a new file.
  const uint32_t new_mode = S_ISREG(st.st_mode) ? st.st_mode & 0777 : 0666 & ~umask;
  const uint32_t mode = old ? old->mode & 07777 : new_mode;
  auto file = c->open_path(c->default_cred(), tmp, O_CREAT | O_EXCL | O_WRONLY, mode);
  if (!file) {
    ::close(fd);
    return fail(target + ": " + file.error().message());
  }
  Result<void> r = copy_in(fd, local, **file, target, S_ISREG(st.st_mode) ? static_cast<uint64_t>(st.st_size) : 0);
  ::close(fd);
  if (r) r = StopSignals::check();  // a signal during the close's flush: the destination stays
  if (r) r = c->rename_path(c->default_cred(), tmp, final_path);
  if (!r) {
    (void)(*file)->close();
    if (auto removed = c->remove_path(c->default_cred(), tmp); !removed && removed.error().code() != Code::kNotFound)
      return fail(fmt::format("{} (the partial copy {} is left: {})", r.error().message(), tmp,
                              removed.error().message()));
    return fail(r.error().message());
  }
}

// Streams `file` to `fd`; reads of the next block overlap the local write.
Result<void> copy_out(File& file, const std::string& remote, int fd, bool show_progress) {
  uint64_t size = file.size();
  Progress progress("get " + remote, size);
  std::vector<std::byte> buf(kCopyBlock);
  uint64_t off = 0;
  while (true) {
    WEFT_RETURN_IF_ERROR(StopSignals::check());
    auto n = file.pread(buf, off);
    if (!n) return error(n.error().code(), "{}: {}", remote, n.error().message());
    if (*n == 0) break;
    size_t done = 0;
    while (done < *n) {
      ssize_t w = ::write(fd, buf.data() + done, *n - done);
      if (w < 0 && errno == EINTR) {
        WEFT_RETURN_IF_ERROR(StopSignals::check());
        continue;
      }
      if (w < 0) return error(Code::kIoError, "write: {}", std::strerror(errno));
      done += static_cast<size_t>(w);
    }
    off += *n;
    if (show_progress) progress.update(off);
  }
  if (show_progress) progress.finish(off);
  (void)file.close();
  return {};
}

Result<void> fsync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return error(Code::kIoError, "{}: {}", dir, std::strerror(errno));
  const bool ok = ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok) return error(Code::kIoError, "{}: fsync: {}", dir, std::strerror(err));
  return {};
}

// get into what a rename must not replace (see LocalTarget): this process's
// own descriptor keeps its offset and O_APPEND (`weft get /x /dev/stdout >> log`).
Result<void> copy_out_direct(File& file, const std::string& remote, const LocalTarget& t) {
  int flags = O_WRONLY | (S_ISREG(t.st.st_mode) ? O_TRUNC : 0);
  int out = t.fd >= 0 ? ::dup(t.fd) : ::open(t.path.c_str(), flags);
  if (out < 0) return error(Code::kIoError, "{}: {}", t.path, std::strerror(errno));
  Result<void> r = copy_out(file, remote, out, false);
  if (::close(out) != 0 && r) r = error(Code::kIoError, "{}: {}", t.path, std::strerror(errno));
  return r;
}

void cmd_get(const FileFlags& f, const std::string& remote, const std::string& local) {
  auto c = connect(f);
  if (!c) return;
  // The remote first: a get that cannot read it leaves the local file alone.
  auto file = c->open_path(c->default_cred(), remote, O_RDONLY);
  if (!file) return fail(file.error().message());
  std::string target = local;
  struct stat st {};
  if (local == "-") {  // stdout, written as it is (its offset, O_APPEND)
    LocalTarget out{.path = "stdout", .exists = true, .direct = true, .fd = 1};
    if (::fstat(1, &out.st) != 0) return fail(fmt::format("stdout: {}", std::strerror(errno)));
    if (auto r = copy_out_direct(**file, remote, out); !r) fail(r.error().message());
    return;
  }
  if (::stat(local.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    target = local + "/" + std::filesystem::path(remote).filename().string();
  auto dest = local_final_path(target);
  if (!dest) return fail(dest.error().message());
  if (dest->direct) {
    if (auto r = copy_out_direct(**file, remote, *dest); !r) fail(r.error().message());
    return;
  }
  const std::string tmp = temp_name_beside(dest->path);
  StopSignals stop;  // before the temporary exists: a stop signal removes it
  // A file it replaces keeps its permission bits.
  const mode_t mode = dest->st.st_mode & 07777;
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL, dest->exists ? mode : 0644);
  if (fd < 0) {  // named by the destination (symlinks followed), not by our temporary beside it
    return fail(fmt::format("{}: cannot create it: {} (writing {})", dest->path, std::strerror(errno),
                            tmp.substr(tmp.find_last_of('/') + 1)));
  }
  if (dest->exists) (void)::fchmod(fd, mode);  // not cut by the umask
  Result<void> r = copy_out(**file, remote, fd, true);
  // Durable before the rename: else a crash could leave the final name on an empty or short file.
  if (r && ::fsync(fd) != 0) r = error(Code::kIoError, "{}: fsync: {}", tmp, std::strerror(errno));
  if (::close(fd) != 0 && r) r = error(Code::kIoError, "{}: {}", tmp, std::strerror(errno));
  if (r) r = StopSignals::check();  // a signal during the fsync: the destination stays
  if (r && ::rename(tmp.c_str(), dest->path.c_str()) != 0)
    r = error(Code::kIoError, "{}: {}", dest->path, std::strerror(errno));
  if (!r) {
    ::unlink(tmp.c_str());
    return fail(r.error().message());
  }
  if (auto d = fsync_dir(parent_of(dest->path)); !d) fail(d.error().message());  // the rename itself
}

void cmd_cat(const FileFlags& f, const std::vector<std::string>& paths) {
  auto c = connect(f);
  if (!c) return;
  for (const auto& p : paths) {
    auto file = c->open_path(c->default_cred(), p, O_RDONLY);
    Result<void> r = file ? copy_out(**file, p, 1, false) : Result<void>(std::unexpected(file.error()));
    if (!r) fail(r.error().message());
  }
}

// Octal permission bits as chmod takes them: 1 to 4 octal digits.
std::optional<uint32_t> parse_mode(const std::string& text) {
  if (text.empty() || text.size() > 4 || text.find_first_not_of("01234567") != std::string::npos)
    return std::nullopt;
  return static_cast<uint32_t>(std::stoul(text, nullptr, 8));
}

void cmd_layout_get(const FileFlags& f, const std::string& path) {
  auto c = connect(f);
  if (!c) return;
  auto n = c->resolve(c->default_cred(), path, true);
  if (!n) return fail(n.error().message());
  Layout l = n->layout;
  if (n->is_dir()) {
    auto got = c->get_layout(c->default_cred(), n->ino);
    if (!got) return fail(got.error().message());
    l = *got;
  }
  std::printf("chunk_size = %u\nstripe_count = %u\nchain_table = %u\n", l.chunk_bytes, l.stripe_count,
              l.chain_table_id);
  if (!n->is_dir()) std::printf("first_chain = %u\nshuffle_seed = %llu\n", l.first_chain,
                                static_cast<unsigned long long>(l.shuffle_seed));
}

void cmd_layout_set(const FileFlags& f, const std::string& path, uint32_t chunk, uint32_t stripe, uint32_t table) {
  auto c = connect(f);
  if (!c) return;
  auto n = c->resolve(c->default_cred(), path, true);
  if (!n) return fail(n.error().message());
  if (!n->is_dir()) return fail(path + ": layouts are set on directories (new files inherit them)");
  auto l = c->get_layout(c->default_cred(), n->ino);
  if (!l) return fail(l.error().message());
  if (chunk) l->chunk_bytes = chunk;
  if (stripe) l->stripe_count = stripe;
  if (table) l->chain_table_id = table;
  if (auto r = c->set_layout(c->default_cred(), n->ino, *l); !r) return fail(path + ": " + r.error().message());
}

}  // namespace

void add_file_commands(CLI::App& app) {
  static FileFlags flags;
  static std::string path, path2;
  static std::vector<std::string> paths;
  static bool long_format = false, parents = false, recursive = false;
  static std::string mode_text = "755";
  static uint32_t chunk = 0, stripe = 0, table = 0;

  auto* ls = app.add_subcommand("ls", "List a directory of the cluster");
  add_flags(ls, flags);
  ls->add_flag("-l", long_format, "long format");
  ls->add_option("path", path, "path in the cluster")->default_val("/");
  ls->callback([] { cmd_ls(flags, path, long_format); });

  auto* stat = app.add_subcommand("stat", "Show a file's attributes and layout");
  add_flags(stat, flags);
  stat->add_option("path", path)->required();
  stat->callback([] { cmd_stat(flags, path); });

  auto* mkdir = app.add_subcommand("mkdir", "Create a directory");
  add_flags(mkdir, flags);
  mkdir->add_flag("-p,--parents", parents, "create missing parents; no error if it exists");
  mkdir->add_option("-m,--mode", mode_text, "permission bits, octal")->default_val("755");
  mkdir->add_option("path", path)->required();
  mkdir->callback([] {
    auto mode = parse_mode(mode_text);
    if (!mode) return fail(fmt::format("mkdir: invalid mode '{}' (octal permission bits, e.g. 755)", mode_text), 2);
    cmd_mkdir(flags, path, parents, *mode);
  });

  auto* rm = app.add_subcommand("rm", "Remove files or (empty, or with -r any) directories");
  add_flags(rm, flags);
  rm->add_flag("-r,--recursive", recursive, "remove directories and their contents");
  rm->add_option("paths", paths)->required();
  rm->callback([] { cmd_rm(flags, paths, recursive); });

  auto* mv = app.add_subcommand("mv", "Rename or move");
  add_flags(mv, flags);
  mv->add_option("from", path)->required();
  mv->add_option("to", path2)->required();
  mv->callback([] { cmd_mv(flags, path, path2); });

  auto* put = app.add_subcommand("put", "Copy a local file into the cluster");
  add_flags(put, flags);
  put->add_option("local", path, "a local file; - for stdin")->required();
  put->add_option("remote", path2)->required();
  put->callback([] { cmd_put(flags, path, path2); });

  auto* get = app.add_subcommand("get", "Copy a file of the cluster to a local file");
  add_flags(get, flags);
  get->add_option("remote", path)->required();
  get->add_option("local", path2, "a local file or directory; - for stdout")->required();
  get->callback([] { cmd_get(flags, path, path2); });

  auto* cat = app.add_subcommand("cat", "Write files of the cluster to stdout");
  add_flags(cat, flags);
  cat->add_option("paths", paths)->required();
  cat->callback([] { cmd_cat(flags, paths); });

  auto* layout = app.add_subcommand("layout", "Show or set a directory's layout (chunk size, stripe, chain table)");
  layout->require_subcommand(1);
  auto* lget = layout->add_subcommand("get", "Show the layout of a file or directory");
  add_flags(lget, flags);
  lget->add_option("path", path)->required();
  lget->callback([] { cmd_layout_get(flags, path); });
  auto* lset = layout->add_subcommand("set", "Set the layout new files in a directory inherit");
  add_flags(lset, flags);
  lset->add_option("path", path)->required();
  // 0 is "not given" below: given, it is refused as the value it is.
  const CLI::Range positive(1u, std::numeric_limits<uint32_t>::max());
  lset->add_option("--chunk-size", chunk, "bytes, a power of two in [64 KiB, 64 MiB]")->check(positive);
  lset->add_option("--stripe", stripe, "chains a file is spread over")->check(positive);
  lset->add_option("--chain-table", table, "chain table id")->check(positive);
  lset->callback([] {
    if (!chunk && !stripe && !table) return fail("layout set: nothing to set (--chunk-size, --stripe, --chain-table)", 2);
    cmd_layout_set(flags, path, chunk, stripe, table);
  });
}

}  // namespace weft::cli
