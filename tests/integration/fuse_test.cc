// `weft mount` end to end: a local cluster (`weft up`) in a temporary
// directory, mounted once for the suite with allow_other and
// default_permissions, and exercised only through the mount with plain POSIX
// calls. TearDownTestSuite always unmounts (lazily as a last resort) and runs
// `weft down`, even when a test failed.
#include <dirent.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <grp.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <linux/fs.h>
#include <stdio.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "process.h"
#include "rpc/test_util.h"
#include "weft/client.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using testing::Process;
using testing::TempDir;
using testing::eventually;
using testing::env_u64;

struct Run {
  int code = -1;  // exit code; -1: did not finish or died
  std::string log;
};

Run run_weft(std::vector<std::string> args, const std::string& log, std::chrono::seconds timeout = 60s) {
  args.insert(args.begin(), testing::weft_binary());
  Process p(args, log);
  auto status = p.wait_exit(timeout);
  Run r;
  r.log = p.log();
  if (status && WIFEXITED(*status)) r.code = WEXITSTATUS(*status);
  return r;
}

bool is_mounted(const std::string& path) {
  std::ifstream in("/proc/self/mounts");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ss(line);
    std::string dev, mp;
    ss >> dev >> mp;
    if (mp == path) return true;
  }
  return false;
}

// stat(path) in a child so that a hung mount cannot hang the test: the
// errno (0 on success), or -1 if it did not return within `timeout`.
int stat_with_timeout(const std::string& path, std::chrono::milliseconds timeout) {
  pid_t pid = ::fork();
  if (pid == 0) {
    struct stat st;
    ::_exit(::stat(path.c_str(), &st) == 0 ? 0 : (errno & 0x7f));
  }
  auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    if (::waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    std::this_thread::sleep_for(5ms);
  }
  ::kill(pid, SIGKILL);  // a process stuck in a FUSE request dies on SIGKILL
  ::waitpid(pid, &status, 0);
  return -1;
}

pid_t read_pid(const std::string& pid_file) {
  auto text = testing::wait_for_file(pid_file, 1s);
  return text ? static_cast<pid_t>(std::stol(*text)) : -1;
}

bool wait_pid_gone(pid_t pid, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
    // A zombie (reparented, not yet reaped) counts as gone.
    std::ifstream st("/proc/" + std::to_string(pid) + "/stat");
    std::string s((std::istreambuf_iterator<char>(st)), std::istreambuf_iterator<char>());
    auto close_paren = s.rfind(')');
    if (close_paren != std::string::npos && close_paren + 2 < s.size() && s[close_paren + 2] == 'Z') return true;
    std::this_thread::sleep_for(20ms);
  }
  return false;
}

void unmount_hard(const std::string& mp) {
  if (!is_mounted(mp)) return;
  run_weft({"umount", mp}, mp + ".umount.log", 20s);
  if (is_mounted(mp)) run_weft({"umount", "--lazy", mp}, mp + ".umount.log", 20s);
  if (is_mounted(mp)) std::system(("fusermount3 -uz '" + mp + "' >/dev/null 2>&1").c_str());
}

std::string read_all(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return "<open failed: " + std::string(std::strerror(errno)) + ">";
  std::string out;
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

bool write_all(const std::string& path, const std::string& data, mode_t mode = 0644) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, mode);
  if (fd < 0) return false;
  bool ok = ::write(fd, data.data(), data.size()) == static_cast<ssize_t>(data.size());
  return ::close(fd) == 0 && ok;
}

bool append_all(const std::string& path, const std::string& data) {
  int fd = ::open(path.c_str(), O_WRONLY | O_APPEND);
  if (fd < 0) return false;
  bool ok = ::write(fd, data.data(), data.size()) == static_cast<ssize_t>(data.size());
  return ::close(fd) == 0 && ok;
}

// Deterministic content: byte i of a stream seeded with `seed`.
void fill_pattern(char* dst, size_t n, uint64_t seed, uint64_t offset) {
  for (size_t i = 0; i < n; ++i) {
    uint64_t x = (offset + i) * 0x9E3779B97F4A7C15ull ^ seed;
    x ^= x >> 29;
    dst[i] = static_cast<char>(x * 0xBF58476D1CE4E5B9ull >> 56);
  }
}

// WEFT_FUSE_TEST_OPTIONS adds mount options (e.g. writeback_cache or
// direct_io) to run the whole suite in another cache mode.
std::string mount_options() {
  std::string o = "allow_other,default_permissions";
  if (const char* extra = std::getenv("WEFT_FUSE_TEST_OPTIONS"); extra && *extra) o += std::string(",") + extra;
  return o;
}

// With writeback_cache the kernel keeps its own size and mtime of a regular
// file it has cached (fuse_get_cache_mask: what meta answers is ignored) and
// takes writes into its page cache before the daemon sees them. Tests of what
// that changes say what the mode does instead (docs/fuse.md).
bool writeback_cache_mode() { return mount_options().find("writeback_cache") != std::string::npos; }

// A second mount of the suite's cluster, served by a foreground daemon with
// its own options (and environment, e.g. WEFT_FAULTS). The destructor always
// unmounts it and waits for the daemon, whatever the test did. `user`: the
// mount is that user's (the daemon's real uid and gid, which the kernel
// takes for the mount's owner; it runs as root otherwise): without
// allow_other, only that user's processes may use it.
class ExtraMount {
 public:
  ExtraMount(const std::string& mp, const std::string& config, const std::string& options, const std::string& log,
             std::vector<std::string> env = {}, uid_t user = 0)
      : mp_(mp) {
    ::mkdir(mp.c_str(), 0755);
    std::vector<std::string> argv;
    if (user != 0) {
      const std::string id = std::to_string(user);
      argv = {"/usr/bin/setpriv", "--ruid=" + id, "--rgid=" + id, "--clear-groups"};
    }
    argv.insert(argv.end(), {testing::weft_binary(), "mount", mp, "--config", config});
    if (!options.empty()) argv.insert(argv.end(), {"-o", options});
    daemon_ = std::make_unique<Process>(std::move(argv), log, std::move(env));
    auto deadline = std::chrono::steady_clock::now() + 30s;
    while (!is_mounted(mp) && daemon_->running() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(20ms);
  }
  ~ExtraMount() {
    unmount_hard(mp_);
    if (!daemon_->wait_exit(20s)) daemon_->signal(SIGKILL);
  }
  bool mounted() const { return is_mounted(mp_); }
  std::string log() const { return daemon_->log(); }
  Process& daemon() { return *daemon_; }

 private:
  std::string mp_;
  std::unique_ptr<Process> daemon_;
};

class FuseTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // A machine without FUSE (no /dev/fuse, or no permission) cannot run these: say so.
    if (int fd = ::open("/dev/fuse", O_RDWR); fd < 0) {
      no_fuse_ = std::string("/dev/fuse: ") + std::strerror(errno);
      return;
    } else {
      ::close(fd);
    }
    dir_ = new TempDir;
    ::chmod(dir_->path().c_str(), 0755);  // the unprivileged child of the permission test walks through it
    data_ = dir_->file("data");
    mnt_ = dir_->file("mnt");
    ::mkdir(mnt_.c_str(), 0755);
    auto up =
        run_weft({"up", "--data-dir", data_, "--storage-servers", "2", "--targets-per-server", "2", "--replicas", "2"},
                 dir_->file("up.log"), 120s);
    if (up.code != 0) {
      setup_error_ = "weft up failed (" + std::to_string(up.code) + "):\n" + up.log;
      return;
    }
    cluster_up_ = true;
    auto m = run_weft({"mount", mnt_, "--config", data_ + "/client.toml", "--background", "--pid-file",
                       dir_->file("mount.pid"), "--log-file", dir_->file("mount-daemon.log"), "-o", mount_options()},
                      dir_->file("mount.log"), 60s);
    if (m.code != 0) {
      setup_error_ = "weft mount failed (" + std::to_string(m.code) + "):\n" + m.log;
      return;
    }
    mount_pid_ = read_pid(dir_->file("mount.pid"));
    mounted_ = true;
  }

  static void TearDownTestSuite() {
    if (dir_ == nullptr) return;
    unmount_hard(mnt_);
    if (mount_pid_ > 0 && !wait_pid_gone(mount_pid_, 10s)) ::kill(mount_pid_, SIGKILL);
    if (cluster_up_) run_weft({"down", "--data-dir", data_}, dir_->file("down.log"), 60s);
    if (::testing::UnitTest::GetInstance()->current_test_suite()->failed_test_count() > 0 ||
        std::getenv("WEFT_KEEP_LOGS")) {
      std::fprintf(stderr, "--- mount daemon log ---\n%s\n",
                   read_all(dir_->file("mount-daemon.log")).substr(0, 20000).c_str());
    }
    delete dir_;
    dir_ = nullptr;
  }

  void SetUp() override {
    if (!no_fuse_.empty()) GTEST_SKIP() << "FUSE is not available here: " << no_fuse_;
    if (!mounted_) GTEST_FAIL() << setup_error_;
    // One directory per test, in the mount.
    auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    base_ = mnt_ + "/" + info->name();
    ASSERT_EQ(::mkdir(base_.c_str(), 0755), 0) << base_ << ": " << std::strerror(errno);
  }

  std::string p(const std::string& name) const { return base_ + "/" + name; }
  // A second mount at dir_/`name` with `-o options` (unmounted when it goes);
  // null (and a failure) if it does not come up within 30 s.
  std::unique_ptr<ExtraMount> extra_mount(const std::string& name, const std::string& options) {
    auto m = std::make_unique<ExtraMount>(dir_->file(name), data_ + "/client.toml", options, dir_->file(name + ".log"));
    if (!m->mounted()) {
      ADD_FAILURE() << "mount " << name << " -o " << options << " did not come up:\n" << m->log();
      return nullptr;
    }
    return m;
  }
  // The file `name` of this test's directory as a native client of the
  // cluster reads it (another client than this mount): its bytes, or why not.
  Result<std::string> read_natively(const std::string& name) {
    ClientOptions o;
    o.config_path = data_ + "/client.toml";
    WEFT_TRY(auto native, Client::connect(o));
    WEFT_TRY(auto file, native->open_path(native->default_cred(), "/" + base_.substr(mnt_.size() + 1) + "/" + name,
                                          O_RDONLY));
    std::string out(file->size() + 1, '\0');
    WEFT_TRY(size_t n, file->pread(std::as_writable_bytes(std::span(out)), 0));
    out.resize(n);
    return out;
  }
  // A counter of the cluster's meta server, from its /metrics page
  // (`series` as printed there, labels included); -1 if not found.
  static double meta_metric(const std::string& series) {
    std::ifstream ports(data_ + "/run/meta.ports");
    uint16_t rpc_port = 0, metrics_port = 0;
    if (!(ports >> rpc_port >> metrics_port) || metrics_port == 0) return -1;
    const std::string text = rpc::testing::scrape_metrics(metrics_port);
    size_t at = text.find("\n" + series + " ");
    return at == std::string::npos ? -1 : std::stod(text.substr(at + series.size() + 2));
  }
  // This test's directory as seen through the extra mount `name`.
  std::string base_in(const std::string& name) const { return dir_->file(name) + "/" + base_.substr(mnt_.size() + 1); }
  // Files <prefix>0000 .. <prefix><n-1> in the test's directory, holding
  // `content` (empty by default).
  void create_entries(int n, const char* prefix = "entry-", const std::string& content = "") {
    for (int i = 0; i < n; ++i) {
      char name[32];
      std::snprintf(name, sizeof name, "%s%04d", prefix, i);
      ASSERT_TRUE(write_all(p(name), content)) << name << ": " << std::strerror(errno);
    }
  }

  // Another mount of the cluster at dir_/mnt-NAME with `options`: unmounted,
  // and its daemon stopped, however the test ends.
  struct SecondMount {
    std::string mp;
    pid_t pid = -1;
    std::string error;  // why it did not mount ("" once mounted)
    SecondMount() = default;
    SecondMount(const SecondMount&) = delete;
    SecondMount& operator=(const SecondMount&) = delete;
    ~SecondMount() {
      unmount_hard(mp);
      if (pid > 0 && !wait_pid_gone(pid, 10s)) ::kill(pid, SIGKILL);
    }
  };
  static void mount_again(SecondMount& m, const std::string& name, const std::string& options) {
    m.mp = dir_->file("mnt-" + name);
    if (::mkdir(m.mp.c_str(), 0755) != 0) {
      m.error = m.mp + ": " + std::strerror(errno);
      return;
    }
    const std::string pid_file = dir_->file("mount-" + name + ".pid");
    auto r = run_weft({"mount", m.mp, "--config", data_ + "/client.toml", "--background", "--pid-file", pid_file,
                       "--log-file", dir_->file("mount-" + name + "-daemon.log"), "-o", options},
                      dir_->file("mount-" + name + ".log"), 60s);
    if (r.code != 0) m.error = "weft mount failed (" + std::to_string(r.code) + "):\n" + r.log;
    m.pid = read_pid(pid_file);
  }

  static inline TempDir* dir_ = nullptr;
  static inline std::string no_fuse_;
  static inline std::string data_, mnt_, setup_error_;
  static inline bool cluster_up_ = false, mounted_ = false;
  static inline pid_t mount_pid_ = -1;
  std::string base_;
};

TEST_F(FuseTest, CreateWriteReadStat) {
  auto before = std::chrono::system_clock::now() - 5s;
  int fd = ::open(p("a").c_str(), O_CREAT | O_EXCL | O_WRONLY, 0640);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  ASSERT_EQ(::write(fd, "hello weft", 10), 10);
  struct stat st {};
  ASSERT_EQ(::fstat(fd, &st), 0);
  EXPECT_EQ(st.st_size, 10);
  ASSERT_EQ(::close(fd), 0);

  ASSERT_EQ(::stat(p("a").c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  EXPECT_EQ(st.st_size, 10);
  EXPECT_EQ(st.st_nlink, 1u);
  EXPECT_EQ(st.st_uid, 0u);
  EXPECT_EQ(st.st_gid, 0u);
  EXPECT_GE(st.st_mtime, std::chrono::system_clock::to_time_t(before));
  EXPECT_LE(st.st_mtime, std::chrono::system_clock::to_time_t(std::chrono::system_clock::now() + 5s));
  EXPECT_EQ(read_all(p("a")), "hello weft");

  // O_EXCL on an existing name; O_TRUNC empties.
  EXPECT_LT(::open(p("a").c_str(), O_CREAT | O_EXCL | O_WRONLY, 0640), 0);
  EXPECT_EQ(errno, EEXIST);
  fd = ::open(p("a").c_str(), O_WRONLY | O_TRUNC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, "xy", 2), 2);
  ASSERT_EQ(::close(fd), 0);
  EXPECT_EQ(read_all(p("a")), "xy");

  // Append.
  fd = ::open(p("a").c_str(), O_WRONLY | O_APPEND);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, "z", 1), 1);
  ASSERT_EQ(::close(fd), 0);
  EXPECT_EQ(read_all(p("a")), "xyz");

  // utimens, chmod.
  timespec times[2] = {{1000, 5}, {2000, 7}};
  ASSERT_EQ(::utimensat(AT_FDCWD, p("a").c_str(), times, 0), 0) << std::strerror(errno);
  ASSERT_EQ(::chmod(p("a").c_str(), 0600), 0);
  ASSERT_EQ(::stat(p("a").c_str(), &st), 0);
  EXPECT_EQ(st.st_atim.tv_sec, 1000);
  EXPECT_EQ(st.st_mtim.tv_sec, 2000);
  EXPECT_EQ(st.st_mtim.tv_nsec, 7);
  EXPECT_EQ(st.st_mode & 07777, 0600u);

  // mknod of a regular file makes an empty file (special files: SpecialFiles).
  EXPECT_EQ(::mknod(p("node").c_str(), S_IFREG | 0644, 0), 0) << std::strerror(errno);
  ASSERT_EQ(::stat(p("node").c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_size, 0);
}

TEST_F(FuseTest, MkdirRmdirUnlink) {
  ASSERT_EQ(::mkdir(p("d").c_str(), 0750), 0);
  struct stat st {};
  ASSERT_EQ(::stat(p("d").c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0750u);
  EXPECT_EQ(::mkdir(p("d").c_str(), 0750), -1);
  EXPECT_EQ(errno, EEXIST);
  ASSERT_TRUE(write_all(p("d/f"), "x"));
  EXPECT_EQ(::rmdir(p("d").c_str()), -1);
  EXPECT_EQ(errno, ENOTEMPTY);
  EXPECT_EQ(::rmdir(p("d/f").c_str()), -1);
  EXPECT_EQ(errno, ENOTDIR);
  EXPECT_EQ(::unlink(p("d").c_str()), -1);
  EXPECT_EQ(errno, EISDIR);
  ASSERT_EQ(::unlink(p("d/f").c_str()), 0);
  EXPECT_EQ(::unlink(p("d/f").c_str()), -1);
  EXPECT_EQ(errno, ENOENT);
  ASSERT_EQ(::rmdir(p("d").c_str()), 0);
  EXPECT_EQ(::stat(p("d").c_str(), &st), -1);
  EXPECT_EQ(errno, ENOENT);
  EXPECT_EQ(::unlink(p("missing").c_str()), -1);
  EXPECT_EQ(errno, ENOENT);
  EXPECT_EQ(::open(p("missing/x").c_str(), O_RDONLY), -1);
  EXPECT_EQ(errno, ENOENT);
}

TEST_F(FuseTest, Rename) {
  ASSERT_TRUE(write_all(p("a"), "A"));
  ASSERT_TRUE(write_all(p("b"), "B"));
  ASSERT_TRUE(write_all(p("c"), "C"));
  ASSERT_EQ(::rename(p("a").c_str(), p("a2").c_str()), 0);
  struct stat st {};
  EXPECT_EQ(::stat(p("a").c_str(), &st), -1);
  EXPECT_EQ(errno, ENOENT);
  EXPECT_EQ(read_all(p("a2")), "A");
  // Overwrite.
  ASSERT_EQ(::rename(p("a2").c_str(), p("b").c_str()), 0);
  EXPECT_EQ(read_all(p("b")), "A");
  EXPECT_EQ(::stat(p("a2").c_str(), &st), -1);
  // NOREPLACE.
  EXPECT_EQ(::renameat2(AT_FDCWD, p("b").c_str(), AT_FDCWD, p("c").c_str(), RENAME_NOREPLACE), -1);
  EXPECT_EQ(errno, EEXIST);
  EXPECT_EQ(read_all(p("c")), "C");
  ASSERT_EQ(::renameat2(AT_FDCWD, p("b").c_str(), AT_FDCWD, p("n").c_str(), RENAME_NOREPLACE), 0)
      << std::strerror(errno);
  EXPECT_EQ(read_all(p("n")), "A");
  // EXCHANGE.
  ASSERT_EQ(::renameat2(AT_FDCWD, p("n").c_str(), AT_FDCWD, p("c").c_str(), RENAME_EXCHANGE), 0)
      << std::strerror(errno);
  EXPECT_EQ(read_all(p("n")), "C");
  EXPECT_EQ(read_all(p("c")), "A");
  // Across directories, and a directory.
  ASSERT_EQ(::mkdir(p("d1").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(p("d2").c_str(), 0755), 0);
  ASSERT_EQ(::rename(p("c").c_str(), p("d1/c").c_str()), 0);
  ASSERT_EQ(::rename(p("d1").c_str(), p("d2/d1").c_str()), 0);
  EXPECT_EQ(read_all(p("d2/d1/c")), "A");
  // A directory onto a non-empty one.
  ASSERT_EQ(::mkdir(p("d3").c_str(), 0755), 0);
  EXPECT_EQ(::rename(p("d3").c_str(), p("d2").c_str()), -1);
  EXPECT_EQ(errno, ENOTEMPTY);
}

TEST_F(FuseTest, SymlinkReadlink) {
  ASSERT_TRUE(write_all(p("target"), "through the link"));
  ASSERT_EQ(::symlink("target", p("l").c_str()), 0);
  ASSERT_EQ(::symlink("/nowhere/at/all", p("dangling").c_str()), 0);
  char buf[256] = {};
  ASSERT_EQ(::readlink(p("l").c_str(), buf, sizeof buf), 6);
  EXPECT_EQ(std::string(buf, 6), "target");
  ssize_t n = ::readlink(p("dangling").c_str(), buf, sizeof buf);
  ASSERT_EQ(n, 15);
  EXPECT_EQ(std::string(buf, 15), "/nowhere/at/all");
  struct stat st {};
  ASSERT_EQ(::lstat(p("l").c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  EXPECT_EQ(st.st_size, 6);
  EXPECT_EQ(read_all(p("l")), "through the link");
  EXPECT_EQ(::stat(p("dangling").c_str(), &st), -1);
  EXPECT_EQ(errno, ENOENT);
  EXPECT_EQ(::readlink(p("target").c_str(), buf, sizeof buf), -1);
  EXPECT_EQ(errno, EINVAL);
}

// FIFOs, Unix sockets and device nodes: Weft keeps their entries and
// attributes; the kernel serves their opens (a FIFO made in the mount carries
// bytes between two opens of it, a socket bound there takes connections).
TEST_F(FuseTest, SpecialFiles) {
  ASSERT_EQ(::mkfifo(p("fifo").c_str(), 0640), 0) << std::strerror(errno);
  struct stat st {};
  ASSERT_EQ(::lstat(p("fifo").c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode)) << std::oct << st.st_mode;
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  EXPECT_EQ(::mkfifo(p("fifo").c_str(), 0640), -1);
  EXPECT_EQ(errno, EEXIST);
  {
    int r = ::open(p("fifo").c_str(), O_RDONLY | O_NONBLOCK);  // a reader first: the writer's open does not wait
    ASSERT_GE(r, 0) << std::strerror(errno);
    int w = ::open(p("fifo").c_str(), O_WRONLY);
    ASSERT_GE(w, 0) << std::strerror(errno);
    ASSERT_EQ(::write(w, "through the pipe", 16), 16);
    pollfd pfd{r, POLLIN, 0};
    ASSERT_EQ(::poll(&pfd, 1, 10000), 1);
    char buf[32] = {};
    EXPECT_EQ(::read(r, buf, sizeof buf), 16);
    EXPECT_EQ(std::string(buf), "through the pipe");
    ::close(w);
    ::close(r);
  }

  // bind() makes the socket's inode through mknod; connect() finds it by path.
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  ASSERT_LT(p("sock").size(), sizeof addr.sun_path) << "mount path too long for a Unix socket path";
  std::strcpy(addr.sun_path, p("sock").c_str());
  int server = ::socket(AF_UNIX, SOCK_STREAM, 0), client = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(server, 0);
  ASSERT_GE(client, 0);
  ASSERT_EQ(::bind(server, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0) << std::strerror(errno);
  ASSERT_EQ(::listen(server, 1), 0);
  ASSERT_EQ(::connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0) << std::strerror(errno);
  int accepted = ::accept(server, nullptr, nullptr);
  ASSERT_GE(accepted, 0);
  ASSERT_EQ(::send(client, "hi", 2, 0), 2);
  char two[2] = {};
  EXPECT_EQ(::recv(accepted, two, 2, MSG_WAITALL), 2);
  EXPECT_EQ(std::string(two, 2), "hi");
  for (int fd : {accepted, client, server}) ::close(fd);
  ASSERT_EQ(::lstat(p("sock").c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode)) << std::oct << st.st_mode;

  std::set<std::string> expected = {"fifo", "sock"};
  if (::geteuid() == 0) {  // CAP_MKNOD: the kernel refuses device nodes to anyone else before Weft sees them
    ASSERT_EQ(::mknod(p("null").c_str(), S_IFCHR | 0666, makedev(1, 3)), 0) << std::strerror(errno);
    ASSERT_EQ(::mknod(p("disk").c_str(), S_IFBLK | 0600, makedev(259, 70000)), 0) << std::strerror(errno);
    ASSERT_EQ(::lstat(p("null").c_str(), &st), 0);
    EXPECT_TRUE(S_ISCHR(st.st_mode));
    EXPECT_EQ(st.st_rdev, makedev(1, 3));
    ASSERT_EQ(::lstat(p("disk").c_str(), &st), 0);
    EXPECT_TRUE(S_ISBLK(st.st_mode));
    EXPECT_EQ(st.st_rdev, makedev(259, 70000));
    expected.insert({"null", "disk"});
  }
  // Listed with their types (d_type from the entries, not a stat per name).
  std::map<std::string, unsigned char> types;
  DIR* d = ::opendir(base_.c_str());
  ASSERT_NE(d, nullptr);
  while (dirent* e = ::readdir(d)) types[e->d_name] = e->d_type;
  ::closedir(d);
  EXPECT_EQ(types["fifo"], DT_FIFO);
  EXPECT_EQ(types["sock"], DT_SOCK);
  if (expected.contains("null")) {
    EXPECT_EQ(types["null"], DT_CHR);
    EXPECT_EQ(types["disk"], DT_BLK);
  }
  // Renamed, linked, chmod-ed and removed like any file.
  ASSERT_EQ(::chmod(p("fifo").c_str(), 0600), 0);
  ASSERT_EQ(::link(p("fifo").c_str(), p("fifo2").c_str()), 0) << std::strerror(errno);
  ASSERT_EQ(::lstat(p("fifo").c_str(), &st), 0);
  EXPECT_EQ(st.st_nlink, 2u);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  ASSERT_EQ(::rename(p("fifo2").c_str(), p("moved").c_str()), 0);
  ASSERT_EQ(::unlink(p("moved").c_str()), 0);
  for (const auto& name : expected) EXPECT_EQ(::unlink(p(name).c_str()), 0) << name << ": " << std::strerror(errno);
  EXPECT_EQ(::rmdir(base_.c_str()), 0) << std::strerror(errno);
}

TEST_F(FuseTest, HardLinks) {
  ASSERT_TRUE(write_all(p("a"), "shared"));
  ASSERT_EQ(::link(p("a").c_str(), p("b").c_str()), 0) << std::strerror(errno);
  struct stat sa {
  }, sb{};
  ASSERT_EQ(::stat(p("a").c_str(), &sa), 0);
  ASSERT_EQ(::stat(p("b").c_str(), &sb), 0);
  EXPECT_EQ(sa.st_ino, sb.st_ino);
  EXPECT_EQ(sa.st_nlink, 2u);
  EXPECT_EQ(sb.st_nlink, 2u);
  ASSERT_EQ(::unlink(p("a").c_str()), 0);
  ASSERT_EQ(::stat(p("b").c_str(), &sb), 0);
  EXPECT_EQ(sb.st_nlink, 1u);
  EXPECT_EQ(read_all(p("b")), "shared");
  ASSERT_EQ(::mkdir(p("d").c_str(), 0755), 0);
  EXPECT_EQ(::link(p("d").c_str(), p("d2").c_str()), -1);
  EXPECT_EQ(errno, EPERM);
}

// Read-only opens reuse attributes fetched less than attr_timeout (1 s here)
// ago instead of asking meta: a file rewritten by another client is seen
// once that time has passed, never later.
TEST_F(FuseTest, AnotherClientsRewriteIsSeenAfterTheAttributeTimeout) {
  if (writeback_cache_mode()) GTEST_SKIP() << "writeback_cache: the kernel keeps its size of a cached file (docs/fuse.md)";
  std::string f = p("shared");
  ASSERT_TRUE(write_all(f, "first version"));
  EXPECT_EQ(read_all(f), "first version");
  std::string local = dir_->file("rewrite.txt");
  std::string longer = "second version, longer than the first";
  {
    std::FILE* out = std::fopen(local.c_str(), "w");
    ASSERT_NE(out, nullptr);
    std::fwrite(longer.data(), 1, longer.size(), out);
    std::fclose(out);
  }
  std::string remote = "/" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "/shared";
  auto put = run_weft({"put", local, remote, "--config", data_ + "/client.toml"}, dir_->file("put.log"));
  ASSERT_EQ(put.code, 0) << put.log;
  std::this_thread::sleep_for(1500ms);
  EXPECT_EQ(read_all(f), longer);
  struct stat st {};
  ASSERT_EQ(::stat(f.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, static_cast<off_t>(longer.size()));
}

// The kernel opens an inode it looked up before: another client may have
// unlinked it since (meta destroyed it). open(O_CREAT) must create the name
// afresh, an open for writing must say ENOENT (the mount answers ESTALE, and
// the kernel walks the path again). (A read-only open within attr_timeout
// is served from the attributes the mount holds: docs/fuse.md.)
TEST_F(FuseTest, OpenOfANameAnotherClientJustRemovedCreatesItOrSaysEnoent) {
  for (const char* name : {"gone-then-created", "gone"}) {
    ASSERT_TRUE(write_all(p(name), "old"));
    struct stat st {};
    ASSERT_EQ(::stat(p(name).c_str(), &st), 0);  // the kernel now holds the name (entry_timeout)
    std::string remote = "/" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "/" + name;
    auto rm = run_weft({"rm", remote, "--config", data_ + "/client.toml"}, dir_->file("rm.log"));
    ASSERT_EQ(rm.code, 0) << rm.log;
  }
  int fd = ::open(p("gone-then-created").c_str(), O_CREAT | O_RDWR, 0644);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  ASSERT_EQ(::write(fd, "new", 3), 3);
  ASSERT_EQ(::close(fd), 0);
  EXPECT_EQ(read_all(p("gone-then-created")), "new");
  errno = 0;
  EXPECT_LT(::open(p("gone").c_str(), O_WRONLY), 0);
  EXPECT_EQ(errno, ENOENT) << std::strerror(errno);
}

// Times past 2262 do not fit int64 nanoseconds: clamped, not wrapped (a
// file dated 2603 came back dated 2019).
TEST_F(FuseTest, TimesPastWhatNanosecondsHoldAreClampedNotWrapped) {
  ASSERT_TRUE(write_all(p("future"), "x"));
  timespec times[2] = {{20000000000, 0}, {20000000000, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, p("future").c_str(), times, 0), 0) << std::strerror(errno);
  struct stat st {};
  ASSERT_EQ(::stat(p("future").c_str(), &st), 0);
  EXPECT_GT(st.st_mtim.tv_sec, 9000000000) << "the latest time kept, past 2255";
  timespec past[2] = {{-20000000000, 0}, {-20000000000, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, p("future").c_str(), past, 0), 0) << std::strerror(errno);
  ASSERT_EQ(::stat(p("future").c_str(), &st), 0);
  EXPECT_LT(st.st_mtim.tv_sec, -9000000000) << "the earliest time kept, before 1685";
}

// Statahead (fuse/dir_ahead.h): lookups in a directory that keep missing
// are answered from one listing. Whatever answered them, the names and
// sizes must be right, a file another client creates is found at once (no
// negative answers from a listing), a change through this mount shows at
// once, and another client's removal or rewrite shows after the timeouts.
TEST_F(FuseTest, StatAheadAnswersAreRightAndChangesShow) {
  constexpr int kFiles = 40;
  for (int i = 0; i < kFiles; ++i) ASSERT_TRUE(write_all(p("f" + std::to_string(i)), std::string(i, 'x')));
  std::this_thread::sleep_for(1200ms);  // past entry_timeout: the kernel asks again
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < kFiles; ++i) {
      struct stat st {};
      ASSERT_EQ(::stat(p("f" + std::to_string(i)).c_str(), &st), 0) << i << ": " << std::strerror(errno);
      EXPECT_EQ(st.st_size, i) << "f" << i;
      EXPECT_TRUE(S_ISREG(st.st_mode));
    }
  }
  const std::string remote_dir = "/" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name());
  std::string local = dir_->file("statahead-late.txt");
  {
    std::FILE* out = std::fopen(local.c_str(), "w");
    ASSERT_NE(out, nullptr);
    std::fputs("created by another client", out);
    std::fclose(out);
  }
  // Another client: a new file, a removal, a rewrite of f5 with 25 bytes.
  auto put = run_weft({"put", local, remote_dir + "/late", "--config", data_ + "/client.toml"}, dir_->file("sa1.log"));
  ASSERT_EQ(put.code, 0) << put.log;
  auto rm = run_weft({"rm", remote_dir + "/f3", "--config", data_ + "/client.toml"}, dir_->file("sa2.log"));
  ASSERT_EQ(rm.code, 0) << rm.log;
  auto rewrite = run_weft({"put", local, remote_dir + "/f5", "--config", data_ + "/client.toml"}, dir_->file("sa3.log"));
  ASSERT_EQ(rewrite.code, 0) << rewrite.log;
  EXPECT_EQ(read_all(p("late")), "created by another client");
  // Through this mount: seen at once.
  ASSERT_EQ(::rename(p("f1").c_str(), p("g1").c_str()), 0);
  struct stat st {};
  EXPECT_EQ(::stat(p("f1").c_str(), &st), -1);
  ASSERT_EQ(::stat(p("g1").c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 1);
  // Other clients' changes: after the timeouts.
  std::this_thread::sleep_for(1500ms);
  EXPECT_EQ(::stat(p("f3").c_str(), &st), -1);
  EXPECT_EQ(errno, ENOENT);
  ASSERT_EQ(::stat(p("f5").c_str(), &st), 0);
  if (!writeback_cache_mode()) {  // there the kernel keeps its size of f5 while it caches the inode
    EXPECT_EQ(st.st_size, 25);
    EXPECT_EQ(read_all(p("f5")), "created by another client");
  }
  for (int i = 6; i < kFiles; ++i) {
    ASSERT_EQ(::stat(p("f" + std::to_string(i)).c_str(), &st), 0) << i;
    EXPECT_EQ(st.st_size, i);
  }
}

// A statahead listing fetched while a file is open for writing here holds
// the length from before that writer's fsync: a lookup answered from it
// would set the kernel's size back, and an O_APPEND write would then land
// inside the data. Lookups of a file with a writer here go to meta.
TEST_F(FuseTest, StatAheadDoesNotAnswerForAFileBeingWrittenHere) {
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(write_all(p("f" + std::to_string(i)), "x"));
  ASSERT_TRUE(write_all(p("log"), std::string(100, 'a')));
  std::this_thread::sleep_for(1200ms);  // past entry_timeout
  int fd = ::open(p("log").c_str(), O_WRONLY | O_APPEND);  // the kernel's entry for log: 1 s from now
  ASSERT_GE(fd, 0) << std::strerror(errno);
  std::this_thread::sleep_for(600ms);
  struct stat st {};
  for (int i = 0; i < 4; ++i) ASSERT_EQ(::stat(p("f" + std::to_string(i)).c_str(), &st), 0);  // misses: a listing
  ASSERT_EQ(::write(fd, std::string(1000, 'b').data(), 1000), 1000);
  ASSERT_EQ(::fsync(fd), 0) << std::strerror(errno);
  std::this_thread::sleep_for(600ms);  // log's entry expired; the listing (1 s) has not
  ASSERT_EQ(::stat(p("log").c_str(), &st), 0) << std::strerror(errno);
  EXPECT_EQ(st.st_size, 1100) << "the lookup took the length from before the fsync";
  ASSERT_EQ(::write(fd, "c", 1), 1);
  ASSERT_EQ(::close(fd), 0) << std::strerror(errno);
  EXPECT_TRUE(read_all(p("log")) == std::string(100, 'a') + std::string(1000, 'b') + "c")
      << "the append landed inside the data";
}

TEST_F(FuseTest, TruncateGrowShrink) {
  ASSERT_TRUE(write_all(p("f"), std::string(10000, 'x')));
  ASSERT_EQ(::truncate(p("f").c_str(), 3 << 20), 0) << std::strerror(errno);  // past a chunk boundary
  std::string s = read_all(p("f"));
  ASSERT_EQ(s.size(), size_t(3 << 20));
  EXPECT_EQ(s.substr(0, 10000), std::string(10000, 'x'));
  EXPECT_EQ(s.find_first_not_of('\0', 10000), std::string::npos);
  ASSERT_EQ(::truncate(p("f").c_str(), 3000), 0);
  struct stat st {};
  ASSERT_EQ(::stat(p("f").c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 3000);
  EXPECT_EQ(read_all(p("f")), std::string(3000, 'x'));
  // Shrink then grow: the cut bytes come back as zeros.
  ASSERT_EQ(::truncate(p("f").c_str(), 5000), 0);
  EXPECT_EQ(read_all(p("f")), std::string(3000, 'x') + std::string(2000, '\0'));
  // ftruncate on a handle with buffered writes.
  int fd = ::open(p("f").c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pwrite(fd, "abcdef", 6, 100), 6);
  ASSERT_EQ(::ftruncate(fd, 103), 0);
  ASSERT_EQ(::close(fd), 0);
  EXPECT_EQ(read_all(p("f")), std::string(100, 'x') + "abc");
}

// Lengths past the maximum file size (meta::kFileBytesMax, 16 TiB) are EFBIG
// through the mount, and the file is left as it was.
TEST_F(FuseTest, LengthsPastTheMaximumAreEfbig) {
  const off_t max = off_t{1} << 44;
  ASSERT_TRUE(write_all(p("f"), "abc"));
  errno = 0;
  EXPECT_EQ(::truncate(p("f").c_str(), max + 1), -1);
  EXPECT_EQ(errno, EFBIG);
  int fd = ::open(p("f").c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  errno = 0;
  if (!writeback_cache_mode()) {
    EXPECT_EQ(::pwrite(fd, "x", 1, max), -1);  // write-through: the daemon answers
    EXPECT_EQ(errno, EFBIG);
    ASSERT_EQ(::close(fd), 0);
  } else {
    // The page cache takes the write; its write-back fails, and fsync says so.
    // The kernel keeps the length that write gave the inode while it caches
    // it (docs/fuse.md), so the file is checked through another client.
    EXPECT_EQ(::pwrite(fd, "x", 1, max), 1);
    EXPECT_EQ(::fsync(fd), -1);
    EXPECT_EQ(errno, EFBIG);
    ::close(fd);
    const std::string remote = "/" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "/f";
    auto get = run_weft({"get", remote, dir_->file("efbig.out"), "--config", data_ + "/client.toml"}, dir_->file("efbig.log"));
    ASSERT_EQ(get.code, 0) << get.log;
    std::ifstream in(dir_->file("efbig.out"));
    EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "abc");
    return;
  }
  EXPECT_EQ(read_all(p("f")), "abc");
}

// A write of part of a page through a descriptor opened write-only keeps
// the rest of the page: with writeback_cache the kernel first fills the page
// by reading through that very handle (File::pread_page_fill), which a
// native write-only File refuses to pread. The file comes from another
// client, so the mount has none of its pages cached. read(2) on the
// descriptor itself stays EBADF.
TEST_F(FuseTest, APartPageWriteThroughAWriteOnlyDescriptorKeepsTheRestOfThePage) {
  std::string local = dir_->file("page.txt");
  const std::string before(10000, 'a');
  {
    std::ofstream out(local);
    out << before;
  }
  const std::string remote = "/" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "/f";
  auto put = run_weft({"put", local, remote, "--config", data_ + "/client.toml"}, dir_->file("page-put.log"));
  ASSERT_EQ(put.code, 0) << put.log;
  int fd = ::open(p("f").c_str(), O_WRONLY);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  ASSERT_EQ(::pwrite(fd, "xyz", 3, 5000), 3) << std::strerror(errno);
  char c;
  errno = 0;
  EXPECT_EQ(::pread(fd, &c, 1, 0), -1);
  EXPECT_EQ(errno, EBADF);
  ASSERT_EQ(::fsync(fd), 0) << std::strerror(errno);
  ASSERT_EQ(::close(fd), 0);
  std::string after = before;
  after.replace(5000, 3, "xyz");
  EXPECT_EQ(read_all(p("f")), after);
  auto get = run_weft({"get", remote, dir_->file("page.out"), "--config", data_ + "/client.toml"}, dir_->file("page-get.log"));
  ASSERT_EQ(get.code, 0) << get.log;
  EXPECT_EQ(read_all(dir_->file("page.out")), after);
}

TEST_F(FuseTest, ReaddirListsEveryEntryOnce) {
  constexpr int kFiles = 300;
  std::set<std::string> expected;
  for (int i = 0; i < kFiles; ++i) {
    std::string name = "file-" + std::to_string(i) + std::string(static_cast<size_t>(i % 40), 'n');
    expected.insert(name);
    int fd = ::open(p(name).c_str(), O_CREAT | O_WRONLY, 0644);
    ASSERT_GE(fd, 0) << name << ": " << std::strerror(errno);
    ::close(fd);
  }
  ASSERT_EQ(::mkdir(p("sub").c_str(), 0755), 0);
  for (int pass = 0; pass < 2; ++pass) {
    DIR* d = ::opendir(base_.c_str());
    ASSERT_NE(d, nullptr);
    std::map<std::string, int> seen;
    long middle = -1;
    std::string middle_name;
    int count = 0;
    while (dirent* e = ::readdir(d)) {
      ++seen[e->d_name];
      if (std::string(e->d_name) == "sub") {
        EXPECT_EQ(e->d_type, DT_DIR);
      } else if (e->d_name[0] != '.') {
        EXPECT_EQ(e->d_type, DT_REG) << e->d_name;
      }
      if (++count == 150) {
        middle = ::telldir(d);
      } else if (count == 151) {
        middle_name = e->d_name;
      }
    }
    EXPECT_EQ(seen.size(), size_t(kFiles + 3));
    for (auto& [name, n] : seen) EXPECT_EQ(n, 1) << name;
    for (auto& name : expected) EXPECT_EQ(seen.count(name), 1u) << name;
    EXPECT_EQ(seen.count("."), 1u);
    EXPECT_EQ(seen.count(".."), 1u);
    // Seek back into the middle.
    ASSERT_GE(middle, 0);
    ::seekdir(d, middle);
    dirent* e = ::readdir(d);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->d_name, middle_name);
    ::closedir(d);
  }
  struct stat st {};
  ASSERT_EQ(::stat(p("file-7nnnnnnn").c_str(), &st), 0);
}

// rm -r's pattern (and Python's os.scandir + unlink): every entry is
// removed as soon as readdir returned it, so the mount changes between the
// kernel's readdirplus requests (about 4 KiB each). Every entry must still
// be listed once, and the directory end up empty.
TEST_F(FuseTest, UnlinkingEveryEntryAsItIsListedEmptiesTheDirectory) {
  constexpr int kFiles = 1000;
  ASSERT_NO_FATAL_FAILURE(create_entries(kFiles));
  auto list_and_unlink = [&](bool unlink) {
    DIR* d = ::opendir(base_.c_str());
    EXPECT_NE(d, nullptr);
    int listed = 0;
    while (d != nullptr) {
      dirent* e = ::readdir(d);
      if (e == nullptr) break;
      if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
      ++listed;
      if (unlink) {
        EXPECT_EQ(::unlinkat(::dirfd(d), e->d_name, 0), 0) << e->d_name << ": " << std::strerror(errno);
      }
    }
    if (d != nullptr) ::closedir(d);
    return listed;
  };
  EXPECT_EQ(list_and_unlink(true), kFiles);
  EXPECT_EQ(list_and_unlink(false), 0) << "entries left behind";
}

// getdents64 into a buffer of `bytes`: the names, in order.
std::vector<std::string> getdents(int fd, size_t bytes) {
  std::vector<char> buf(bytes);
  std::vector<std::string> out;
  long n = ::syscall(SYS_getdents64, fd, buf.data(), buf.size());
  for (long off = 0; off < n;) {
    // struct linux_dirent64: u64 d_ino, s64 d_off, u16 d_reclen, u8 d_type, char d_name[].
    uint16_t reclen;
    std::memcpy(&reclen, buf.data() + off + 16, sizeof reclen);
    out.emplace_back(buf.data() + off + 19);
    off += reclen;
  }
  return out;
}

// The same with a small getdents buffer (a few entries per call, as musl's
// readdir or a pending signal makes it), each entry removed by another
// client (so this mount sees no change of its own): the kernel asks again
// from the first entry the caller did not take, inside its last reply. A
// reply that ran past the daemon's page of entries (512) made that request
// seek back to the page before, counted from its start after the unlinks:
// ~500 entries were skipped and rmdir failed with ENOTEMPTY.
TEST_F(FuseTest, EntriesRemovedElsewhereWhileListedWithASmallBufferAreEachListedOnce) {
  constexpr int kFiles = 1100;
  ASSERT_NO_FATAL_FAILURE(create_entries(kFiles));
  ClientOptions o;
  o.config_path = data_ + "/client.toml";
  auto native = Client::connect(o);
  ASSERT_TRUE(native.has_value()) << native.error();
  const Cred cred = (*native)->default_cred();
  const std::string remote = "/" + base_.substr(mnt_.size() + 1) + "/";
  int fd = ::open(base_.c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  std::map<std::string, int> seen;
  for (auto batch = getdents(fd, 400); !batch.empty(); batch = getdents(fd, 400)) {
    for (const auto& name : batch) {
      if (name == "." || name == "..") continue;
      ++seen[name];
      auto removed = (*native)->remove_path(cred, remote + name);
      EXPECT_TRUE(removed) << name << ": " << removed.error();
    }
  }
  ::close(fd);
  EXPECT_EQ(seen.size(), size_t(kFiles));
  for (auto& [name, n] : seen) EXPECT_EQ(n, 1) << name;
  DIR* d = ::opendir(base_.c_str());
  ASSERT_NE(d, nullptr);
  int left = 0;
  while (dirent* e = ::readdir(d)) left += e->d_name[0] != '.';
  ::closedir(d);
  EXPECT_EQ(left, 0) << "entries left behind";
}

TEST_F(FuseTest, Xattrs) {
  ASSERT_TRUE(write_all(p("f"), "x"));
  std::string f = p("f");
  ASSERT_EQ(::setxattr(f.c_str(), "user.color", "blue", 4, 0), 0) << std::strerror(errno);
  EXPECT_EQ(::getxattr(f.c_str(), "user.color", nullptr, 0), 4);
  char buf[64];
  EXPECT_EQ(::getxattr(f.c_str(), "user.color", buf, 2), -1);
  EXPECT_EQ(errno, ERANGE);
  ASSERT_EQ(::getxattr(f.c_str(), "user.color", buf, sizeof buf), 4);
  EXPECT_EQ(std::string(buf, 4), "blue");
  EXPECT_EQ(::setxattr(f.c_str(), "user.color", "red", 3, XATTR_CREATE), -1);
  EXPECT_EQ(errno, EEXIST);
  EXPECT_EQ(::setxattr(f.c_str(), "user.size", "1", 1, XATTR_REPLACE), -1);
  EXPECT_EQ(errno, ENODATA);
  ASSERT_EQ(::setxattr(f.c_str(), "user.color", "red", 3, XATTR_REPLACE), 0);
  ASSERT_EQ(::setxattr(f.c_str(), "user.size", "", 0, 0), 0);
  ssize_t n = ::listxattr(f.c_str(), nullptr, 0);
  ASSERT_GT(n, 0);
  std::string names(static_cast<size_t>(n), '\0');
  EXPECT_EQ(::listxattr(f.c_str(), names.data(), 1), -1);
  EXPECT_EQ(errno, ERANGE);
  ASSERT_EQ(::listxattr(f.c_str(), names.data(), names.size()), n);
  std::set<std::string> got;
  for (size_t i = 0; i < names.size();) {
    std::string name(names.c_str() + i);
    got.insert(name);
    i += name.size() + 1;
  }
  EXPECT_EQ(got, (std::set<std::string>{"user.color", "user.size"}));
  ASSERT_EQ(::getxattr(f.c_str(), "user.color", buf, sizeof buf), 3);
  EXPECT_EQ(std::string(buf, 3), "red");
  ASSERT_EQ(::removexattr(f.c_str(), "user.color"), 0);
  EXPECT_EQ(::getxattr(f.c_str(), "user.color", buf, sizeof buf), -1);
  EXPECT_EQ(errno, ENODATA);
  EXPECT_EQ(::removexattr(f.c_str(), "user.color"), -1);
  EXPECT_EQ(errno, ENODATA);
  // XATTR_CREATE | XATTR_REPLACE: never succeeds (ext4: ENODATA if absent, EEXIST if present).
  EXPECT_EQ(::setxattr(f.c_str(), "user.both", "1", 1, XATTR_CREATE | XATTR_REPLACE), -1);
  EXPECT_EQ(errno, ENODATA);
  EXPECT_EQ(::getxattr(f.c_str(), "user.both", buf, sizeof buf), -1) << "created";
  EXPECT_EQ(::setxattr(f.c_str(), "user.size", "2", 1, XATTR_CREATE | XATTR_REPLACE), -1);
  EXPECT_EQ(errno, EEXIST);
  EXPECT_EQ(::getxattr(f.c_str(), "user.size", buf, sizeof buf), 0) << "replaced";
  // On a directory too.
  ASSERT_EQ(::setxattr(base_.c_str(), "user.dir", "1", 1, 0), 0);
  EXPECT_EQ(::getxattr(base_.c_str(), "user.dir", buf, sizeof buf), 1);
}

// `ls -l` asks every entry for security.selinux: a mount that holds an
// inode's attributes fresh (from a lookup, a getattr or a readdirplus page)
// with meta's record that it has no xattrs answers getxattr (ENODATA) and
// listxattr (empty) itself, by meta's rules, without a round trip; an xattr
// set or removed through the mount is seen at once, and an inode with
// xattrs is asked about as before. (Another client's set shows after
// attr_timeout, as its other changes do.)
TEST_F(FuseTest, GetxattrOfInodesWithoutXattrsNeedsNoMetaCall) {
  constexpr int kFiles = 50;
  ASSERT_NO_FATAL_FAILURE(create_entries(kFiles, "f"));
  ASSERT_EQ(::mkdir(p("sub").c_str(), 0755), 0);
  auto m = extra_mount("mnt-xattr", "attr_timeout=60,entry_timeout=60");
  ASSERT_TRUE(m);
  const std::string base = base_in("mnt-xattr");
  const std::string gets = "weft_meta_ops_total{op=\"getxattr\"}";
  const std::string lists = "weft_meta_ops_total{op=\"listxattr\"}";
  ASSERT_GE(meta_metric(gets), 0) << "no meta /metrics";
  // Listed with attributes (readdirplus), then each entry looked at as ls -l does.
  DIR* d = ::opendir(base.c_str());
  ASSERT_NE(d, nullptr) << std::strerror(errno);
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d))
    if (e->d_name[0] != '.') names.push_back(e->d_name);
  ::closedir(d);
  ASSERT_EQ(names.size(), size_t{kFiles + 1});
  const double gets_before = meta_metric(gets), lists_before = meta_metric(lists);
  char buf[64];
  for (const std::string& n : names) {
    const std::string f = base + "/" + n;
    struct stat st {};
    ASSERT_EQ(::lstat(f.c_str(), &st), 0) << f;
    EXPECT_EQ(::lgetxattr(f.c_str(), "security.selinux", buf, sizeof buf), -1) << f;
    EXPECT_EQ(errno, ENODATA) << f;
    EXPECT_EQ(::getxattr(f.c_str(), "user.color", buf, sizeof buf), -1) << f;
    EXPECT_EQ(errno, ENODATA) << f;
    EXPECT_EQ(::getxattr(f.c_str(), "bogus.ns", buf, sizeof buf), -1) << f;
    EXPECT_EQ(errno, EOPNOTSUPP) << f << ": as meta answers";
    EXPECT_EQ(::listxattr(f.c_str(), buf, sizeof buf), 0) << f;
    EXPECT_EQ(::listxattr(f.c_str(), nullptr, 0), 0) << f;
  }
  EXPECT_EQ(meta_metric(gets), gets_before) << "getxattr went to meta";
  EXPECT_EQ(meta_metric(lists), lists_before) << "listxattr went to meta";

  // Set and removed through this mount: seen at once.
  const std::string f0 = base + "/" + names.front();
  ASSERT_EQ(::setxattr(f0.c_str(), "user.color", "blue", 4, 0), 0) << std::strerror(errno);
  ASSERT_EQ(::getxattr(f0.c_str(), "user.color", buf, sizeof buf), 4);
  EXPECT_EQ(std::string(buf, 4), "blue");
  EXPECT_EQ(::listxattr(f0.c_str(), buf, sizeof buf), 11);
  EXPECT_GT(meta_metric(gets), gets_before) << "an inode with xattrs is asked about";
  ASSERT_EQ(::removexattr(f0.c_str(), "user.color"), 0);
  EXPECT_EQ(::getxattr(f0.c_str(), "user.color", buf, sizeof buf), -1);
  EXPECT_EQ(errno, ENODATA);
  EXPECT_EQ(::listxattr(f0.c_str(), buf, sizeof buf), 0);
}

// Runs `fn` as uid/gid 4321 in a forked child; returns its exit code.
template <class Fn>
int as_other_user(Fn fn) {
  pid_t pid = ::fork();
  if (pid == 0) {
    if (::setgroups(0, nullptr) != 0 || ::setresgid(4321, 4321, 4321) != 0 || ::setresuid(4321, 4321, 4321) != 0) {
      ::_exit(100);
    }
    ::_exit(fn());
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 101;
}

// exec(2) needs x permission, not r: a program only its owner may read
// (0711) runs for every user (the kernel reads it to load it), who still
// cannot open it for reading.
TEST_F(FuseTest, AnExecuteOnlyProgramRunsForOtherUsers) {
  const std::string prog = p("true");
  ASSERT_TRUE(write_all(prog, read_all("/bin/true"), 0711));
  ASSERT_EQ(::chmod(prog.c_str(), 0711), 0);
  EXPECT_EQ(as_other_user([&] {
              ::execl(prog.c_str(), prog.c_str(), nullptr);
              return 10 + errno;
            }),
            0)
      << "10 + errno of execl";
  EXPECT_EQ(as_other_user([&] {
              int fd = ::open(prog.c_str(), O_RDONLY);
              return fd < 0 && errno == EACCES ? 0 : 1;
            }),
            0);
  ASSERT_EQ(::chmod(prog.c_str(), 0700), 0);
  EXPECT_EQ(as_other_user([&] {
              ::execl(prog.c_str(), prog.c_str(), nullptr);
              return errno == EACCES ? 0 : 10 + errno;
            }),
            0);
}

// Read permission on a directory is checked when it is opened, as Linux
// does: a descriptor opened before a chmod that takes it away still lists
// (every page; pages are fetched as the listing goes).
TEST_F(FuseTest, AnOpenDirectoryListsAfterItsModeChanged) {
  const std::string d = p("mine");
  ASSERT_EQ(::mkdir(d.c_str(), 0755), 0);
  for (int i = 0; i < 600; ++i) ASSERT_TRUE(write_all(d + "/f" + std::to_string(i), ""));  // over one page (512)
  ASSERT_EQ(::chown(d.c_str(), 4321, 4321), 0);
  EXPECT_EQ(as_other_user([&] {
              int fd = ::open(d.c_str(), O_RDONLY | O_DIRECTORY);
              if (fd < 0) return 1;
              if (::fchmod(fd, 0) != 0) return 2;
              DIR* dir = ::fdopendir(fd);
              if (!dir) return 3;
              int names = 0;
              errno = 0;
              while (::readdir(dir) != nullptr) ++names;
              if (errno != 0) return 10 + errno;
              ::closedir(dir);
              return names == 602 ? 0 : 4;
            }),
            0)
      << "10 + errno of readdir";
}

// A truncate past the maximum length by a user who is not root, of a
// setuid file (a truncate that succeeds drops setuid): refused (EFBIG), it
// changes nothing, mode included, as on ext4.
TEST_F(FuseTest, ARefusedTruncateOfASetuidFileLeavesItsMode) {
  const std::string f = p("suid-big");
  ASSERT_TRUE(write_all(f, "abc", 0755));
  ASSERT_EQ(::chown(f.c_str(), 4321, 4321), 0);
  ASSERT_EQ(::chmod(f.c_str(), 04755), 0);
  EXPECT_EQ(as_other_user([&] {
              if (::truncate(f.c_str(), (off_t{1} << 44) + 1) == 0) return 1;
              return errno == EFBIG ? 0 : 10 + errno;
            }),
            0);
  struct stat st {};
  ASSERT_EQ(::stat(f.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 04755u) << std::oct << (st.st_mode & 07777);
  EXPECT_EQ(st.st_size, 3);
}

// A write by another user to a setuid file it may write drops setuid and
// setgid (the kernel asks with a setattr under the writer's credentials) and
// succeeds; it failed with EPERM when only the owner could change the mode.
TEST_F(FuseTest, AnotherUsersWriteDropsSetuidAndSetgid) {
  std::string f = p("suid");
  ASSERT_TRUE(write_all(f, "x", 0644));
  ASSERT_EQ(::chmod(f.c_str(), 06777), 0);
  int rc = as_other_user([&] {
    int fd = ::open(f.c_str(), O_WRONLY);
    if (fd < 0) return 1;
    if (::pwrite(fd, "y", 1, 1) != 1) return 2;
    return ::close(fd) == 0 ? 0 : 3;
  });
  EXPECT_EQ(rc, 0);
  struct stat st {};
  ASSERT_EQ(::stat(f.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0777u);
  EXPECT_EQ(read_all(f), "xy");
}

// ftruncate(2) needs the descriptor open for writing, not write permission
// now: another user's ftruncate after the owner took that permission away
// succeeds, in every cache mode. With writeback_cache the kernel sends the
// truncate's mtime with it, which meta refused to a non-owner without write
// permission (EACCES).
TEST_F(FuseTest, AnotherUsersFtruncateThroughADescriptorOpenForWritingNeedsNoPermissionNow) {
  std::string f = p("shrink");
  ASSERT_TRUE(write_all(f, "0123456789", 0666));
  ASSERT_EQ(::chmod(f.c_str(), 0666), 0);
  int opened[2], go[2];
  ASSERT_EQ(::pipe(opened), 0);
  ASSERT_EQ(::pipe(go), 0);
  pid_t pid = ::fork();
  if (pid == 0) {
    if (::setgroups(0, nullptr) != 0 || ::setresgid(4321, 4321, 4321) != 0 || ::setresuid(4321, 4321, 4321) != 0)
      ::_exit(100);
    int fd = ::open(f.c_str(), O_WRONLY);
    if (fd < 0) ::_exit(1);
    char c = 'o';
    if (::write(opened[1], &c, 1) != 1 || ::read(go[0], &c, 1) != 1) ::_exit(2);
    if (::ftruncate(fd, 4) != 0) ::_exit(10 + errno);
    ::_exit(::close(fd) == 0 ? 0 : 3);
  }
  ASSERT_GT(pid, 0);
  char c = 0;
  ASSERT_EQ(::read(opened[0], &c, 1), 1);
  EXPECT_EQ(::chmod(f.c_str(), 0644), 0);  // the other user may not write it any more
  ASSERT_EQ(::write(go[1], &c, 1), 1);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  for (int fd : {opened[0], opened[1], go[0], go[1]}) ::close(fd);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "(10 + errno: " << std::strerror(WEXITSTATUS(status) - 10) << ")";
  EXPECT_EQ(read_all(f), "0123");
}

// The file tools never leave a half copy under the final name and never
// empty what they were to replace when they fail; rm refuses ".", ".." and
// the root; a bad mkdir mode is a usage error, not a crash.
TEST_F(FuseTest, FileToolsFailWithoutHarm) {
  const std::string remote = "/" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name());
  const std::string cfg = data_ + "/client.toml";
  auto weft = [&](std::vector<std::string> args) {
    args.push_back("--config");
    args.push_back(cfg);
    return run_weft(args, dir_->file("tools.log"));
  };
  auto local_dir = dir_->file("tools-local");
  std::filesystem::create_directories(local_dir);
  auto write_local = [](const std::string& path, const std::string& text) {
    std::FILE* out = std::fopen(path.c_str(), "w");
    std::fputs(text.c_str(), out);
    std::fclose(out);
  };
  auto read_local = [](const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  auto names = [](const std::string& dir) {
    std::set<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(dir)) out.insert(e.path().filename().string());
    return out;
  };
  // get of a missing file leaves the local one as it was.
  write_local(local_dir + "/keep", "precious");
  EXPECT_NE(weft({"get", remote + "/missing", local_dir + "/keep"}).code, 0);
  EXPECT_EQ(read_local(local_dir + "/keep"), "precious");
  // put of something that is not a regular file leaves the remote one.
  ASSERT_TRUE(write_all(p("remote"), "old"));
  EXPECT_NE(weft({"put", local_dir, remote + "/remote"}).code, 0);
  EXPECT_EQ(read_all(p("remote")), "old");
  EXPECT_NE(weft({"put", local_dir + "/keep", remote + "/nodir/"}).code, 0);
  // Successful copies replace, and leave no temporary behind.
  auto put = weft({"put", local_dir + "/keep", remote + "/remote"});
  ASSERT_EQ(put.code, 0) << put.log;
  std::this_thread::sleep_for(1200ms);  // a new inode under the name: seen after entry_timeout
  EXPECT_EQ(read_all(p("remote")), "precious");
  auto get = weft({"get", remote + "/remote", local_dir + "/copy"});
  ASSERT_EQ(get.code, 0) << get.log;
  EXPECT_EQ(read_local(local_dir + "/copy"), "precious");
  EXPECT_EQ(names(base_), (std::set<std::string>{"remote"}));
  EXPECT_EQ(names(local_dir), (std::set<std::string>{"copy", "keep"}));
  // A local file replaced keeps its permission bits; what is not a regular
  // file is written where it is (never replaced).
  ASSERT_EQ(::chmod((local_dir + "/copy").c_str(), 0600), 0);
  ASSERT_EQ(weft({"get", remote + "/remote", local_dir + "/copy"}).code, 0);
  struct stat copied {};
  ASSERT_EQ(::stat((local_dir + "/copy").c_str(), &copied), 0);
  EXPECT_EQ(copied.st_mode & 07777, 0600u);
  ASSERT_EQ(weft({"get", remote + "/remote", "/dev/null"}).code, 0);
  ASSERT_EQ(::stat("/dev/null", &copied), 0);
  EXPECT_TRUE(S_ISCHR(copied.st_mode));
  // rm refuses ".", ".." and the root, and removes nothing.
  ASSERT_EQ(::mkdir(p("d").c_str(), 0755), 0);
  ASSERT_TRUE(write_all(p("d/f"), "x"));
  for (const std::string& bad : {remote + "/d/.", remote + "/d/..", remote + "/d/../", std::string("/")})
    EXPECT_NE(weft({"rm", "-r", bad}).code, 0) << bad;
  EXPECT_EQ(read_all(p("d/f")), "x");
  EXPECT_EQ(names(base_), (std::set<std::string>{"d", "remote"}));
  // mv into a directory keeps the name, as mv(1).
  auto mv = weft({"mv", remote + "/remote", remote + "/d"});
  ASSERT_EQ(mv.code, 0) << mv.log;
  EXPECT_EQ(read_all(p("d/remote")), "precious");
  EXPECT_NE(weft({"mv", remote + "/d/f", remote + "/nodir/"}).code, 0);
  EXPECT_EQ(names(base_), (std::set<std::string>{"d"}));
  // A directory moved to "NEW/", which does not exist, becomes NEW (mv(1)).
  auto mv_dir = weft({"mv", remote + "/d", remote + "/e/"});
  ASSERT_EQ(mv_dir.code, 0) << mv_dir.log;
  EXPECT_EQ(read_all(p("e/remote")), "precious");
  ASSERT_EQ(weft({"mv", remote + "/e", remote + "/d"}).code, 0);
  // A mode that is not octal: exit code 2, not an abort.
  EXPECT_EQ(weft({"mkdir", "-m", "rwx", remote + "/m"}).code, 2);
  EXPECT_EQ(weft({"mkdir", "-m", "0o755", remote + "/m"}).code, 2);
  auto mk = weft({"mkdir", "-m", "750", remote + "/m"});
  ASSERT_EQ(mk.code, 0) << mk.log;
  struct stat st {};
  ASSERT_EQ(::stat(p("m").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0750u);
}

// rm -r removes a tree, a symlink in it as a link (what it points to
// stays), and two at once both succeed: an entry the other removed first is
// what was wanted (one stopped at it, exit 1, leaving the rest).
TEST_F(FuseTest, RmRecursiveRemovesTheTreeNotWhatItsLinksNameAndSharesTheWork) {
  const std::string remote = "/" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name());
  const std::string cfg = data_ + "/client.toml";
  ASSERT_EQ(::mkdir(p("outside").c_str(), 0755), 0);
  ASSERT_TRUE(write_all(p("outside/kept"), "x"));
  auto make_tree = [&](const std::string& top) {
    ASSERT_EQ(::mkdir(p(top).c_str(), 0755), 0);
    for (int d = 0; d < 4; ++d) {
      std::string dir = top + "/d" + std::to_string(d);
      ASSERT_EQ(::mkdir(p(dir).c_str(), 0755), 0);
      ASSERT_EQ(::mkdir(p(dir + "/empty").c_str(), 0755), 0);
      for (int f = 0; f < 60; ++f) ASSERT_TRUE(write_all(p(dir + "/f" + std::to_string(f)), "y"));
    }
    ASSERT_EQ(::symlink(p("outside").c_str(), p(top + "/link").c_str()), 0);
  };
  ASSERT_NO_FATAL_FAILURE(make_tree("t1"));
  auto rm = run_weft({"rm", "-r", remote + "/t1/", "--config", cfg}, dir_->file("rm1.log"));
  EXPECT_EQ(rm.code, 0) << rm.log;
  ASSERT_NO_FATAL_FAILURE(make_tree("t2"));
  Process a({testing::weft_binary(), "rm", "-r", remote + "/t2", "--config", cfg}, dir_->file("rm2a.log"));
  Process b({testing::weft_binary(), "rm", "-r", remote + "/t2", "--config", cfg}, dir_->file("rm2b.log"));
  for (Process* r : {&a, &b}) {
    auto status = r->wait_exit(60s);
    ASSERT_TRUE(status.has_value());
    // Exit 1 only when it found nothing at all to remove (the other was done).
    if (!(WIFEXITED(*status) && WEXITSTATUS(*status) == 0)) {
      EXPECT_NE(r->log().find(remote + "/t2: "), std::string::npos) << r->log();
    }
  }
  std::this_thread::sleep_for(1200ms);  // this mount's entries of the removed names time out
  std::set<std::string> left;
  for (const auto& e : std::filesystem::directory_iterator(base_)) left.insert(e.path().filename().string());
  EXPECT_EQ(left, (std::set<std::string>{"outside"}));
  EXPECT_EQ(read_all(p("outside/kept")), "x");
}

// The file tools' errors name the path as the user gave it (not an inode
// number alone, nor a temporary); layout set refuses a 0 and an empty set.
TEST_F(FuseTest, FileToolsNameThePathInTheirErrors) {
  const std::string remote = "/" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name());
  const std::string cfg = data_ + "/client.toml";
  auto weft = [&](std::vector<std::string> args) {
    args.push_back("--config");
    args.push_back(cfg);
    return run_weft(args, dir_->file("tools-errors.log"));
  };
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"ls", remote + "/missing"}, {"stat", remote + "/missing"}, {"rm", remote + "/missing"},
           {"layout", "get", remote + "/missing"}, {"ls", remote + "/missing/deeper"}}) {
    auto r = weft(args);
    EXPECT_EQ(r.code, 1) << args[0];
    EXPECT_NE(r.log.find(remote + "/missing"), std::string::npos) << args[0] << ": " << r.log;
  }
  ASSERT_TRUE(write_all(p("f"), "data"));
  const std::string local = dir_->file("tools-errors-local");
  auto get = weft({"get", remote + "/f", local + "/no-dir/f"});
  EXPECT_EQ(get.code, 1);
  EXPECT_NE(get.log.find(local + "/no-dir/f: cannot create it"), std::string::npos) << get.log;

  EXPECT_NE(weft({"layout", "set", remote, "--stripe", "0"}).code, 0);
  EXPECT_NE(weft({"layout", "set", remote, "--chunk-size", "0"}).code, 0);
  EXPECT_EQ(weft({"layout", "set", remote}).code, 2);
  auto set = weft({"layout", "set", remote, "--stripe", "2"});
  ASSERT_EQ(set.code, 0) << set.log;
  auto shown = weft({"layout", "get", remote});
  ASSERT_EQ(shown.code, 0) << shown.log;
  EXPECT_NE(shown.log.find("stripe_count = 2"), std::string::npos) << shown.log;
}

// put and get write through a symlink to the file it names, as cp does: the
// link stays a link. A process's open file reached through /proc/self/fd/N
// (what /dev/stdout is) is written into, never renamed over.
TEST_F(FuseTest, FileToolsWriteThroughSymlinks) {
  const std::string remote = "/" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name());
  auto weft = [&](std::vector<std::string> args, const std::string& log = "links.log") {
    args.push_back("--config");
    args.push_back(data_ + "/client.toml");
    return run_weft(args, dir_->file(log));
  };
  auto local = dir_->file("links-local");
  std::filesystem::create_directories(local);
  auto write_local = [](const std::string& path, const std::string& text) {
    std::ofstream(path) << text;
  };
  auto read_local = [](const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  auto is_link = [](const std::string& path) {
    struct stat st {};
    return ::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode);
  };
  write_local(local + "/src", "new");
  ASSERT_TRUE(write_all(p("real"), "old"));
  ASSERT_EQ(::symlink("real", p("link").c_str()), 0);
  auto put = weft({"put", local + "/src", remote + "/link"});
  ASSERT_EQ(put.code, 0) << put.log;
  std::this_thread::sleep_for(1200ms);  // a new inode under the name: seen after entry_timeout
  EXPECT_TRUE(is_link(p("link")));
  EXPECT_EQ(read_all(p("real")), "new");

  write_local(local + "/real", "old");
  ASSERT_EQ(::symlink("real", (local + "/link").c_str()), 0);
  auto get = weft({"get", remote + "/real", local + "/link"});
  ASSERT_EQ(get.code, 0) << get.log;
  EXPECT_TRUE(is_link(local + "/link"));
  EXPECT_EQ(read_local(local + "/real"), "new");

  // The process's stdout is its log file: get writes into it.
  ASSERT_EQ(::symlink("/proc/self/fd/1", (local + "/stdout").c_str()), 0);
  auto to_stdout = weft({"get", remote + "/real", local + "/stdout"}, "links-stdout.log");
  ASSERT_EQ(to_stdout.code, 0) << to_stdout.log;
  EXPECT_EQ(to_stdout.log, "new");
  EXPECT_TRUE(is_link(local + "/stdout"));
  std::set<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(local)) names.insert(e.path().filename().string());
  EXPECT_EQ(names, (std::set<std::string>{"link", "real", "src", "stdout"}));
}

// get fsyncs the copy before renaming it over the final name, and the
// directory after: a crash never leaves the final name on a short file.
TEST_F(FuseTest, GetSyncsTheCopyBeforeRenamingIt) {
  if (::access("/usr/bin/strace", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/strace";
  const std::string remote = "/" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name());
  ASSERT_TRUE(write_all(p("f"), "data"));
  const std::string trace = dir_->file("get.strace");
  const std::string copy = dir_->file("synced-copy");
  // LeakSanitizer cannot run under ptrace (an asan build's weft would exit 1 at its end).
  Process get({"/usr/bin/strace", "-f", "-qq", "-E", "ASAN_OPTIONS=detect_leaks=0", "-e", "trace=fsync,rename", "-o",
               trace, testing::weft_binary(),
               "get", remote + "/f", copy, "--config", data_ + "/client.toml"},
              dir_->file("get-strace.log"));
  auto status = get.wait_exit(60s);
  ASSERT_TRUE(status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << get.log();
  std::ifstream in(trace);
  std::vector<std::string> calls;  // "fsync" / "rename", in order
  for (std::string line; std::getline(in, line);) {
    if (line.find(" fsync(") != std::string::npos) calls.push_back("fsync");
    if (line.find(" rename(") != std::string::npos && line.find(copy + "\"") != std::string::npos)
      calls.push_back("rename");
  }
  EXPECT_EQ(calls, (std::vector<std::string>{"fsync", "rename", "fsync"}));
}

// put and get copy files whose names are 255 bytes long (their temporary's
// name is cut to fit).
TEST_F(FuseTest, FileToolsCopyNamesOfTheLongestLength) {
  const std::string remote = "/" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name());
  const std::string name(255, 'n');
  const std::string local = dir_->file("long-local");
  std::filesystem::create_directories(local);
  std::ofstream(local + "/" + name) << "long";
  const std::string cfg = data_ + "/client.toml";
  auto put = run_weft({"put", local + "/" + name, remote + "/" + name, "--config", cfg}, dir_->file("long.log"));
  ASSERT_EQ(put.code, 0) << put.log;
  EXPECT_EQ(read_all(p(name)), "long");
  std::filesystem::remove(local + "/" + name);
  auto get = run_weft({"get", remote + "/" + name, local + "/" + name, "--config", cfg}, dir_->file("long.log"));
  ASSERT_EQ(get.code, 0) << get.log;
  std::ifstream in(local + "/" + name);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "long");
}

// put from a pipe makes a file of the default mode (0666 less the umask),
// not of the pipe's (0600).
TEST_F(FuseTest, PutFromAPipeMakesAFileOfTheDefaultMode) {
  const std::string remote = "/" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name());
  const std::string fifo = dir_->file("put-fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  std::thread writer([&] {
    int w = ::open(fifo.c_str(), O_WRONLY);  // waits for put's open
    if (w < 0) return;
    (void)!::write(w, "piped", 5);
    ::close(w);
  });
  auto put = run_weft({"put", fifo, remote + "/f", "--config", data_ + "/client.toml"}, dir_->file("pipe.log"));
  writer.join();
  ASSERT_EQ(put.code, 0) << put.log;
  const mode_t umask = ::umask(022);
  ::umask(umask);
  struct stat st {};
  ASSERT_EQ(::stat(p("f").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0666u & ~umask);
  EXPECT_EQ(read_all(p("f")), "piped");
}

// put from a pipe on a terminal (size unknown) shows bytes and rate on one
// line: no bar, no ETA, one line end (it printed a line per read at "100%").
TEST_F(FuseTest, PutFromAPipeShowsOneProgressLine) {
  if (::access("/usr/bin/script", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/script (a terminal for stderr)";
  const std::string remote = "/" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name());
  const std::string cmd = "head -c 20000000 /dev/zero | " + testing::weft_binary() + " put /dev/stdin " + remote +
                          "/f --config " + data_ + "/client.toml";
  Process put({"/usr/bin/script", "-qec", cmd, "/dev/null"}, dir_->file("tty.log"));
  auto status = put.wait_exit(60s);
  ASSERT_TRUE(status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << put.log();
  const std::string out = put.log();
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  EXPECT_EQ(out.find("ETA"), std::string::npos) << out;
  EXPECT_NE(out.find("put " + remote + "/f"), std::string::npos) << out;
}

// rewinddir starts a new listing: entries made and removed since show.
TEST_F(FuseTest, RewinddirListsTheDirectoryAsItIsNow) {
  ASSERT_TRUE(write_all(p("a"), "1", 0644));
  ASSERT_TRUE(write_all(p("b"), "2", 0644));
  DIR* d = ::opendir(base_.c_str());
  ASSERT_NE(d, nullptr);
  auto names = [&] {
    std::set<std::string> out;
    while (dirent* e = ::readdir(d))
      if (e->d_name[0] != '.') out.insert(e->d_name);
    return out;
  };
  EXPECT_EQ(names(), (std::set<std::string>{"a", "b"}));
  ASSERT_TRUE(write_all(p("c"), "3", 0644));
  ASSERT_EQ(::unlink(p("a").c_str()), 0);
  ::rewinddir(d);
  EXPECT_EQ(names(), (std::set<std::string>{"b", "c"}));
  ::closedir(d);
}

// A read handle sees what another descriptor of this mount wrote as soon as
// that one closed (a closed writer was no longer counted by the reader's
// File: the read came back short, and in page-cache mode the kernel then
// took the file for that short and put the next append over the middle).
TEST_F(FuseTest, AReadHandleSeesAWriteAsSoonAsItsWriterClosed) {
  std::string f = p("log");
  ASSERT_TRUE(write_all(f, "a", 0644));
  int r = ::open(f.c_str(), O_RDONLY);
  ASSERT_GE(r, 0);
  char buf[64];
  ASSERT_EQ(::pread(r, buf, sizeof buf, 0), 1);
  int w = ::open(f.c_str(), O_WRONLY | O_APPEND);
  ASSERT_GE(w, 0);
  ASSERT_EQ(::write(w, "bcdef", 5), 5);
  ASSERT_EQ(::close(w), 0);
  ssize_t n = ::pread(r, buf, sizeof buf, 0);
  EXPECT_EQ(std::string(buf, static_cast<size_t>(std::max<ssize_t>(n, 0))), "abcdef");
  w = ::open(f.c_str(), O_WRONLY | O_APPEND);
  ASSERT_GE(w, 0);
  ASSERT_EQ(::write(w, "XY", 2), 2);
  ASSERT_EQ(::close(w), 0);
  ::close(r);
  EXPECT_EQ(read_all(f), "abcdefXY");
}

// close(2) makes a descriptor's writes visible to other clients (close to
// open) whichever handle of the inode carried them: with writeback_cache the
// kernel writes cached pages back through the newest writable handle (here
// not the one closed), then its times through that handle too; that setattr
// flushes the handle (op_setattr) before the close's FLUSH is answered.
TEST_F(FuseTest, ACloseMakesItsWritesVisibleElsewhereWhicheverHandleCarriedThem) {
  const std::string f = p("shared");
  int a = ::open(f.c_str(), O_CREAT | O_WRONLY, 0644);
  ASSERT_GE(a, 0) << std::strerror(errno);
  const std::string data(5000, 'q');  // less than a chunk: nothing is sent before a flush
  ASSERT_EQ(::write(a, data.data(), data.size()), static_cast<ssize_t>(data.size()));
  int b = ::open(f.c_str(), O_RDWR);
  ASSERT_GE(b, 0) << std::strerror(errno);
  ASSERT_EQ(::close(a), 0) << std::strerror(errno);
  auto got = read_natively("shared");
  ASSERT_TRUE(got.has_value()) << got.error();
  EXPECT_EQ(got->size(), data.size()) << "another client does not see what was written before close(2)";
  EXPECT_EQ(::close(b), 0);
}

// The same with a shared mapping, whose dirty pages the kernel may write
// back through the inode's newest writable handle (b) at the FLUSH of the
// descriptor closed (a; so with writeback_cache, where no setattr of times
// flushed b first): that FLUSH flushes every writable handle of the inode,
// so another client sees the bytes once close(2) returned.
TEST_F(FuseTest, ACloseMakesWritesThroughASharedMappingVisibleElsewhere) {
  if (mount_options().find("direct_io") != std::string::npos) GTEST_SKIP() << "direct_io: no shared mappings";
  const std::string f = p("mapped");
  int a = ::open(f.c_str(), O_CREAT | O_RDWR, 0644);
  ASSERT_GE(a, 0) << std::strerror(errno);
  const size_t size = 5000;  // less than a chunk: nothing is sent before a flush
  ASSERT_EQ(::ftruncate(a, size), 0);
  void* m = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, a, 0);
  ASSERT_NE(m, MAP_FAILED) << std::strerror(errno);
  std::memset(m, 'm', size);
  int b = ::open(f.c_str(), O_RDWR);  // the newest writable handle
  ASSERT_GE(b, 0) << std::strerror(errno);
  ASSERT_EQ(::close(a), 0) << std::strerror(errno);
  auto got = read_natively("mapped");
  ASSERT_TRUE(got.has_value()) << got.error();
  EXPECT_EQ(*got, std::string(size, 'm')) << "another client does not see what was written through the mapping before close(2)";
  ::munmap(m, size);
  EXPECT_EQ(::close(b), 0);
}

// A rename (or link, unlink, xattr change) of a file by a user who does not
// own it is a ctime change the writeback_cache kernel writes back with that
// user's credentials at the file's next close: a write-back of times meta
// does not let them set. Refused, the kernel failed that close(2) with EIO
// where Linux closes without error; the times stay meta's instead.
TEST_F(FuseTest, ARenameByAnotherUserDoesNotFailTheFilesNextClose) {
  ASSERT_EQ(::mkdir(p("shared").c_str(), 0777), 0);
  ASSERT_EQ(::chmod(p("shared").c_str(), 0777), 0);
  const std::string f = p("shared/f"), g = p("shared/g");
  ASSERT_TRUE(write_all(f, "owned by root", 0644));
  EXPECT_EQ(as_other_user([&] {
              if (::rename(f.c_str(), g.c_str()) != 0) return 1;
              int fd = ::open(g.c_str(), O_RDONLY);
              if (fd < 0) return 2;
              char buf[4];
              if (::read(fd, buf, sizeof buf) != 4) return 3;
              return ::close(fd) == 0 ? 0 : 10 + errno;
            }),
            0);
  EXPECT_EQ(read_all(g), "owned by root");
}

// opendir needs read permission on the directory, as open(2) of one does.
// (This suite mounts with default_permissions, so the kernel refuses it
// first; the daemon's own check serves mounts without that option.)
TEST_F(FuseTest, OpendirWithoutReadPermissionIsRefused) {
  ASSERT_EQ(::mkdir(p("priv").c_str(), 0700), 0);
  ASSERT_EQ(::mkdir(p("pub").c_str(), 0755), 0);
  EXPECT_EQ(as_other_user([&] {
              DIR* d = ::opendir(p("priv").c_str());
              if (d != nullptr) return 1;
              if (errno != EACCES) return 2;
              DIR* ok = ::opendir(p("pub").c_str());
              if (ok == nullptr) return 3;
              ::closedir(ok);
              return 0;
            }),
            0);
}

// ftruncate(2) of a file open for writing needs no write permission now:
// it was checked at open (cp --sparse, tar: create 0444, write, ftruncate).
TEST_F(FuseTest, FtruncateOfAHandleOpenForWritingIgnoresTheModeNow) {
  ASSERT_EQ(::mkdir(p("theirs2").c_str(), 0755), 0);
  ASSERT_EQ(::chown(p("theirs2").c_str(), 4321, 4321), 0) << std::strerror(errno);
  std::string f = p("theirs2/ro");
  EXPECT_EQ(as_other_user([&] {
              int fd = ::open(f.c_str(), O_CREAT | O_RDWR | O_EXCL, 0444);
              if (fd < 0) return 1;
              if (::write(fd, "hello world", 11) != 11) return 2;
              if (::ftruncate(fd, 5) != 0) return 10 + errno;
              if (::ftruncate(fd, 100) != 0) return 20 + errno;
              if (::close(fd) != 0) return 3;
              if (::truncate(f.c_str(), 1) == 0 || errno != EACCES) return 4;  // by path: the mode counts
              return 0;
            }),
            0);
  std::string back = read_all(f);
  ASSERT_EQ(back.size(), 100u);
  EXPECT_EQ(back.substr(0, 5), "hello");
  EXPECT_EQ(back.substr(5), std::string(95, '\0'));
}

TEST_F(FuseTest, PermissionsAsAnotherUser) {
  std::string f = p("secret");
  ASSERT_TRUE(write_all(f, "data", 0644));
  // Readable by others at 0644: the child can read it (the mount allows other users).
  EXPECT_EQ(as_other_user([&] {
              int fd = ::open(f.c_str(), O_RDONLY);
              if (fd < 0) return 10 + (errno == EACCES ? 1 : 2);
              ::close(fd);
              return ::access(f.c_str(), R_OK) == 0 ? 0 : 13;
            }),
            0);
  ASSERT_EQ(::chmod(f.c_str(), 0600), 0);
  EXPECT_EQ(as_other_user([&] {
              if (::open(f.c_str(), O_RDONLY) >= 0) return 20;
              if (errno != EACCES) return 21;
              if (::access(f.c_str(), R_OK) == 0) return 22;
              if (errno != EACCES) return 23;
              if (::open(f.c_str(), O_WRONLY) >= 0 || errno != EACCES) return 24;
              return 0;
            }),
            0);
  // No write permission in the directory (0755, owner root): create fails.
  EXPECT_EQ(as_other_user([&] {
              int fd = ::open(p("new").c_str(), O_CREAT | O_WRONLY, 0644);
              if (fd >= 0) return 30;
              return errno == EACCES ? 0 : 31;
            }),
            0);
  // A directory the other user owns: it may create there, and chmod its own file.
  ASSERT_EQ(::mkdir(p("theirs").c_str(), 0755), 0);
  ASSERT_EQ(::chown(p("theirs").c_str(), 4321, 4321), 0) << std::strerror(errno);
  EXPECT_EQ(as_other_user([&] {
              std::string g = p("theirs/mine");
              int fd = ::open(g.c_str(), O_CREAT | O_WRONLY, 0644);
              if (fd < 0) return 40;
              ::close(fd);
              struct stat st;
              if (::stat(g.c_str(), &st) != 0 || st.st_uid != 4321 || st.st_gid != 4321) return 41;
              if (::chmod(g.c_str(), 0600) != 0) return 42;
              if (::chown(g.c_str(), 0, 0) == 0 || errno != EPERM) return 43;
              return 0;
            }),
            0);
}

// Reads, writes, truncates, fsyncs, reopens (some with O_TRUNC) and appends
// through a third descriptor, in a random order, through two descriptors of
// one file in the mount (two handles: each flushes the other before it reads,
// and a close reports the length), checked against a local file after every
// operation. WEFT_TEST_SEED and WEFT_TEST_OPS pick another
// sequence or a longer one (a soak); a failure names the seed.
TEST_F(FuseTest, RandomOperationsMatchReference) {
  const uint64_t seed = env_u64("WEFT_TEST_SEED", 12345);
  const int ops_max = static_cast<int>(env_u64("WEFT_TEST_OPS", 400));
  SCOPED_TRACE("WEFT_TEST_SEED=" + std::to_string(seed));
  std::string local = dir_->file("reference");
  std::string remote = p("random");
  int lfd = ::open(local.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
  int rfds[2] = {::open(remote.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644), -1};
  ASSERT_GE(lfd, 0);
  ASSERT_GE(rfds[0], 0);
  rfds[1] = ::open(remote.c_str(), O_RDWR);
  ASSERT_GE(rfds[1], 0);
  std::mt19937_64 rng(seed);
  constexpr uint64_t kSpan = 5u << 20;  // a few chunks
  std::vector<char> buf(512 << 10), lbuf(512 << 10), rbuf(512 << 10);
  int ops = 0;
  for (; ops < ops_max && !HasFailure(); ++ops) {
    int op = static_cast<int>(rng() % 100);
    int& rfd = rfds[rng() % 2];
    uint64_t off = rng() % kSpan;
    size_t len = 1 + rng() % (rng() % 4 == 0 ? buf.size() : 8192);
    if (op < 42) {
      fill_pattern(buf.data(), len, rng(), off);
      ASSERT_EQ(::pwrite(lfd, buf.data(), len, static_cast<off_t>(off)), static_cast<ssize_t>(len));
      ASSERT_EQ(::pwrite(rfd, buf.data(), len, static_cast<off_t>(off)), static_cast<ssize_t>(len))
          << "op " << ops << ": " << std::strerror(errno);
    } else if (op < 75) {
      ssize_t ln = ::pread(lfd, lbuf.data(), len, static_cast<off_t>(off));
      ssize_t rn = ::pread(rfd, rbuf.data(), len, static_cast<off_t>(off));
      ASSERT_EQ(rn, ln) << "op " << ops << " pread " << len << " at " << off;
      ASSERT_TRUE(std::equal(lbuf.begin(), lbuf.begin() + ln, rbuf.begin()))
          << "op " << ops << " pread " << len << " at " << off;
    } else if (op < 85) {
      off_t size = static_cast<off_t>(rng() % kSpan);
      ASSERT_EQ(::ftruncate(lfd, size), 0);
      ASSERT_EQ(::ftruncate(rfd, size), 0) << "op " << ops << ": " << std::strerror(errno);
    } else if (op < 90) {
      ASSERT_EQ(::close(rfd), 0) << "op " << ops << ": " << std::strerror(errno);
      rfd = ::open(remote.c_str(), O_RDWR);
      ASSERT_GE(rfd, 0);
    } else if (op < 92) {  // reopened with O_TRUNC: the other descriptor stays open
      ASSERT_EQ(::close(rfd), 0) << "op " << ops << ": " << std::strerror(errno);
      rfd = ::open(remote.c_str(), O_RDWR | O_TRUNC);
      ASSERT_GE(rfd, 0) << "op " << ops << ": " << std::strerror(errno);
      ASSERT_EQ(::ftruncate(lfd, 0), 0);
    } else if (op < 95) {  // an append through a third descriptor
      fill_pattern(buf.data(), len, rng(), off);
      int la = ::open(local.c_str(), O_WRONLY | O_APPEND), ra = ::open(remote.c_str(), O_WRONLY | O_APPEND);
      ASSERT_GE(la, 0);
      ASSERT_GE(ra, 0) << "op " << ops << ": " << std::strerror(errno);
      ASSERT_EQ(::write(la, buf.data(), len), static_cast<ssize_t>(len));
      ASSERT_EQ(::write(ra, buf.data(), len), static_cast<ssize_t>(len)) << "op " << ops << ": " << std::strerror(errno);
      ::close(la);
      ASSERT_EQ(::close(ra), 0) << "op " << ops << ": " << std::strerror(errno);
    } else {
      ASSERT_EQ(::fsync(rfd), 0) << "op " << ops;
    }
    struct stat ls {
    }, rs{};
    ASSERT_EQ(::fstat(lfd, &ls), 0);
    ASSERT_EQ(::fstat(rfd, &rs), 0);
    ASSERT_EQ(rs.st_size, ls.st_size) << "op " << ops;
  }
  for (int fd : rfds) ASSERT_EQ(::close(fd), 0);
  ::close(lfd);
  std::string l = read_all(local), r = read_all(remote);
  ASSERT_EQ(r.size(), l.size());
  EXPECT_TRUE(r == l) << "content differs after " << ops << " operations";
}

// What a tree holds, for comparing two: each entry's path (relative), type,
// and for files their size and link count, for symlinks their target, for
// directories their link count.
std::map<std::string, std::string> tree_of(const std::string& root) {
  std::map<std::string, std::string> out;
  std::vector<std::string> dirs{""};
  while (!dirs.empty()) {
    std::string rel = dirs.back();
    dirs.pop_back();
    DIR* d = ::opendir((root + rel).c_str());
    if (d == nullptr) {
      out[rel] = "<opendir failed: " + std::string(std::strerror(errno)) + ">";
      continue;
    }
    while (dirent* e = ::readdir(d)) {
      std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      std::string child = rel + "/" + name;
      struct stat st {};
      if (::lstat((root + child).c_str(), &st) != 0) {
        out[child] = "<lstat failed>";
        continue;
      }
      if (S_ISDIR(st.st_mode)) {
        out[child] = "dir nlink " + std::to_string(st.st_nlink);
        dirs.push_back(child);
      } else if (S_ISLNK(st.st_mode)) {
        char target[256] = {};
        ssize_t n = ::readlink((root + child).c_str(), target, sizeof target - 1);
        out[child] = "symlink " + std::string(target, n > 0 ? static_cast<size_t>(n) : 0);
      } else {
        out[child] = "file size " + std::to_string(st.st_size) + " nlink " + std::to_string(st.st_nlink);
      }
    }
    ::closedir(d);
  }
  return out;
}

// Random namespace operations (mkdir, rmdir, create, unlink, rename with and
// without RENAME_NOREPLACE/RENAME_EXCHANGE, link, symlink, stat) on a few
// colliding paths, the same ones in the same order in a local directory and
// through the mount: each call must succeed or fail alike, with the same
// errno, and the two trees must list alike. WEFT_TEST_SEED/WEFT_TEST_OPS as
// for RandomOperationsMatchReference.
TEST_F(FuseTest, RandomNamespaceOperationsMatchReference) {
  const uint64_t seed = env_u64("WEFT_TEST_SEED", 12345);
  const int ops_max = static_cast<int>(env_u64("WEFT_TEST_OPS", 400));
  SCOPED_TRACE("WEFT_TEST_SEED=" + std::to_string(seed));
  const std::string local = dir_->file("ns-reference"), remote = p("ns");
  ASSERT_EQ(::mkdir(local.c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(remote.c_str(), 0755), 0);
  std::mt19937_64 rng(seed);
  const char* names[] = {"a", "b", "c"};
  auto path = [&] {  // 1 to 3 components: collisions are the point
    std::string out;
    for (size_t depth = 1 + rng() % 3; depth > 0; --depth) out += std::string("/") + names[rng() % 3];
    return out;
  };
  // 0, or the errno of a failed call.
  auto outcome = [](int rc) { return rc == 0 ? 0 : errno; };
  for (int ops = 0; ops < ops_max && !HasFailure(); ++ops) {
    const int op = static_cast<int>(rng() % 100);
    const std::string a = path(), b = path();
    std::string what;
    int lr = 0, rr = 0;
    if (op < 15) {
      what = "mkdir " + a;
      lr = outcome(::mkdir((local + a).c_str(), 0755));
      rr = outcome(::mkdir((remote + a).c_str(), 0755));
    } else if (op < 25) {
      what = "rmdir " + a;
      lr = outcome(::rmdir((local + a).c_str()));
      rr = outcome(::rmdir((remote + a).c_str()));
    } else if (op < 42) {
      const size_t len = rng() % 100;
      what = "create " + a + " with " + std::to_string(len) + " bytes";
      auto create = [&](const std::string& full) {
        int fd = ::open(full.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644);
        if (fd < 0) return errno;
        std::string data(len, 'x');
        int err = ::write(fd, data.data(), len) == static_cast<ssize_t>(len) ? 0 : errno;
        if (::close(fd) != 0 && err == 0) err = errno;
        return err;
      };
      lr = create(local + a);
      rr = create(remote + a);
    } else if (op < 55) {
      what = "unlink " + a;
      lr = outcome(::unlink((local + a).c_str()));
      rr = outcome(::unlink((remote + a).c_str()));
    } else if (op < 75) {
      const unsigned flags = op < 67 ? 0u : op < 71 ? unsigned{RENAME_NOREPLACE} : unsigned{RENAME_EXCHANGE};
      what = "rename " + a + " " + b + " flags " + std::to_string(flags);
      lr = outcome(::renameat2(AT_FDCWD, (local + a).c_str(), AT_FDCWD, (local + b).c_str(), flags));
      rr = outcome(::renameat2(AT_FDCWD, (remote + a).c_str(), AT_FDCWD, (remote + b).c_str(), flags));
    } else if (op < 83) {
      what = "link " + a + " " + b;
      lr = outcome(::link((local + a).c_str(), (local + b).c_str()));
      rr = outcome(::link((remote + a).c_str(), (remote + b).c_str()));
    } else if (op < 90) {
      const std::string target = b.substr(1);  // relative: the same in both trees
      what = "symlink " + target + " at " + a;
      lr = outcome(::symlink(target.c_str(), (local + a).c_str()));
      rr = outcome(::symlink(target.c_str(), (remote + a).c_str()));
    } else {
      what = "stat " + a;
      struct stat ls {}, rs{};
      lr = outcome(::stat((local + a).c_str(), &ls));
      rr = outcome(::stat((remote + a).c_str(), &rs));
      if (lr == 0 && rr == 0) {
        EXPECT_EQ(rs.st_mode & S_IFMT, ls.st_mode & S_IFMT) << "op " << ops << ": " << what;
        if (S_ISREG(ls.st_mode)) {
          EXPECT_EQ(rs.st_size, ls.st_size) << "op " << ops << ": " << what;
          EXPECT_EQ(rs.st_nlink, ls.st_nlink) << "op " << ops << ": " << what;
        }
      }
    }
    ASSERT_EQ(rr, lr) << "op " << ops << ": " << what << ": local " << std::strerror(lr) << ", mount "
                      << std::strerror(rr);
    if (ops % 20 == 19) {
      ASSERT_EQ(tree_of(remote), tree_of(local)) << "after op " << ops << ": " << what;
    }
  }
  EXPECT_EQ(tree_of(remote), tree_of(local));
}

TEST_F(FuseTest, ProcessesWriteDisjointRangesOfOneFile) {
  constexpr int kProcs = 4, kRangesPerProc = 3;
  constexpr size_t kMiB = 1 << 20;
  std::string f = p("shared");
  int fd = ::open(f.c_str(), O_CREAT | O_WRONLY, 0644);
  ASSERT_GE(fd, 0);
  ::close(fd);
  std::vector<pid_t> kids;
  for (int w = 0; w < kProcs; ++w) {
    pid_t pid = ::fork();
    if (pid == 0) {
      int wfd = ::open(f.c_str(), O_WRONLY);
      if (wfd < 0) ::_exit(1);
      std::vector<char> b(kMiB);
      for (int k = 0; k < kRangesPerProc; ++k) {
        int range = k * kProcs + w;  // interleaved ranges
        fill_pattern(b.data(), kMiB, 77, range * kMiB);
        if (::pwrite(wfd, b.data(), kMiB, static_cast<off_t>(range * kMiB)) != static_cast<ssize_t>(kMiB)) {
          ::_exit(2);
        }
      }
      ::_exit(::close(wfd) == 0 ? 0 : 3);
    }
    kids.push_back(pid);
  }
  for (pid_t k : kids) {
    int status = 0;
    ::waitpid(k, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "writer status " << status;
  }
  std::string all = read_all(f);
  ASSERT_EQ(all.size(), kProcs * kRangesPerProc * kMiB);
  std::vector<char> want(all.size());
  fill_pattern(want.data(), want.size(), 77, 0);
  for (size_t r = 0; r < kProcs * kRangesPerProc; ++r) {
    EXPECT_EQ(std::memcmp(all.data() + r * kMiB, want.data() + r * kMiB, kMiB), 0) << "range " << r;
  }
}

TEST_F(FuseTest, LargeFileRoundTrip) {
  constexpr size_t kBlock = 1 << 20, kBlocks = 64;
  std::string f = p("large");
  int fd = ::open(f.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  std::vector<char> b(kBlock), r(kBlock);
  auto start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < kBlocks; ++i) {
    fill_pattern(b.data(), kBlock, 99, i * kBlock);
    ASSERT_EQ(::write(fd, b.data(), kBlock), static_cast<ssize_t>(kBlock)) << "block " << i;
  }
  ASSERT_EQ(::close(fd), 0);
  auto written = std::chrono::steady_clock::now();
  struct stat st {};
  ASSERT_EQ(::stat(f.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, static_cast<off_t>(kBlock * kBlocks));
  fd = ::open(f.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  for (size_t i = 0; i < kBlocks; ++i) {
    fill_pattern(b.data(), kBlock, 99, i * kBlock);
    size_t got = 0;
    while (got < kBlock) {
      ssize_t n = ::read(fd, r.data() + got, kBlock - got);
      ASSERT_GT(n, 0) << "block " << i;
      got += static_cast<size_t>(n);
    }
    ASSERT_EQ(std::memcmp(b.data(), r.data(), kBlock), 0) << "block " << i;
  }
  char extra;
  EXPECT_EQ(::read(fd, &extra, 1), 0);
  ::close(fd);
  auto read_done = std::chrono::steady_clock::now();
  auto mibps = [](std::chrono::steady_clock::duration d) {
    return 64.0 / std::max(1e-6, std::chrono::duration<double>(d).count());
  };
  std::fprintf(stderr, "64 MiB through FUSE: write %.0f MiB/s, read %.0f MiB/s\n", mibps(written - start),
               mibps(read_done - written));
}

TEST_F(FuseTest, Statfs) {
  struct statvfs st {};
  ASSERT_EQ(::statvfs(mnt_.c_str(), &st), 0) << std::strerror(errno);
  EXPECT_EQ(st.f_namemax, 255u);
  EXPECT_GT(st.f_blocks, 0u);
  EXPECT_LE(st.f_bfree, st.f_blocks);

  // The cluster's four targets share the filesystem of data_: its free space
  // counts once (halved by the replication), not once per target (which
  // showed twice the disk). Usage comes with heartbeats: the first ones may
  // not have told the filesystem yet.
  const auto deadline = std::chrono::steady_clock::now() + 15s;
  uint64_t mount_free = 0, disk_free = 0;
  do {
    ASSERT_EQ(::statvfs(mnt_.c_str(), &st), 0) << std::strerror(errno);
    mount_free = uint64_t{st.f_bavail} * st.f_frsize;
    struct statvfs disk {};
    ASSERT_EQ(::statvfs(data_.c_str(), &disk), 0) << std::strerror(errno);
    disk_free = uint64_t{disk.f_bavail} * disk.f_frsize;
    // Slack for what other tests write meanwhile (the targets' readings are
    // seconds old): a count per target would show the whole disk, or more.
    if (mount_free <= disk_free / 2 + disk_free / 10 + (uint64_t{512} << 20)) break;
    std::this_thread::sleep_for(200ms);
  } while (std::chrono::steady_clock::now() < deadline);
  EXPECT_LE(mount_free, disk_free / 2 + disk_free / 10 + (uint64_t{512} << 20))
      << "free space of one disk counted per target";
  EXPECT_GT(mount_free, 0u);
}

// The daemon raises the mount's kernel read-ahead (FUSE starts at 128 KiB),
// so sequential reads reach it as 1 MiB requests.
TEST_F(FuseTest, ReadAheadIsRaised) {
  if (::geteuid() != 0) GTEST_SKIP() << "only root may set a mount's read-ahead";
  struct stat st {};
  ASSERT_EQ(::stat(mnt_.c_str(), &st), 0);
  std::string path = "/sys/class/bdi/" + std::to_string(major(st.st_dev)) + ":" + std::to_string(minor(st.st_dev)) +
                     "/read_ahead_kb";
  std::string value = read_all(path);
  EXPECT_EQ(value, "4096\n") << path;
}

TEST_F(FuseTest, MountErrorsAreOneReadableLine) {
  auto missing =
      run_weft({"mount", dir_->file("no-such-dir"), "--config", data_ + "/client.toml"}, dir_->file("err1.log"), 30s);
  EXPECT_NE(missing.code, 0);
  EXPECT_NE(missing.log.find("does not exist"), std::string::npos) << missing.log;
  std::string full = dir_->file("full");
  ::mkdir(full.c_str(), 0755);
  testing::write_file(full + "/x", "x");
  auto nonempty =
      run_weft({"mount", full, "--config", data_ + "/client.toml", "--background"}, dir_->file("err2.log"), 30s);
  EXPECT_NE(nonempty.code, 0);
  EXPECT_NE(nonempty.log.find("not empty"), std::string::npos) << nonempty.log;
  std::string empty = dir_->file("empty");
  ::mkdir(empty.c_str(), 0755);
  auto no_cluster =
      run_weft({"mount", empty, "--config", dir_->file("no-such.toml"), "--background"}, dir_->file("err3.log"), 30s);
  EXPECT_NE(no_cluster.code, 0);
  EXPECT_NE(no_cluster.log.find("no-such.toml"), std::string::npos) << no_cluster.log;
  EXPECT_FALSE(is_mounted(empty));
  auto bad_option = run_weft({"mount", empty, "--config", data_ + "/client.toml", "-o", "attr_timeout=soon"},
                             dir_->file("err4.log"), 30s);
  EXPECT_NE(bad_option.code, 0);
  EXPECT_NE(bad_option.log.find("attr_timeout"), std::string::npos) << bad_option.log;
}

// Foreground: serves until SIGTERM, then unmounts and exits 0; a plain
// `weft umount` also ends a foreground daemon with 0.
// A daemon that mounted but never serves is stopped by `weft mount
// --background` after --ready-timeout; no mount is left behind.
TEST_F(FuseTest, BackgroundMountStopsADaemonThatNeverServes) {
  std::string mp = dir_->file("stuck");
  ASSERT_EQ(::mkdir(mp.c_str(), 0755), 0);
  Process p({testing::weft_binary(), "mount", mp, "--config", data_ + "/client.toml", "--background",
             "--ready-timeout", "2"},
            dir_->file("stuck.log"), {"WEFT_FAULTS=mount.stall_before_ready"});
  auto status = p.wait_exit(60s);
  bool left_mounted = is_mounted(mp);
  if (left_mounted) unmount_hard(mp);
  ASSERT_TRUE(status.has_value()) << "weft mount --background did not return";
  ASSERT_TRUE(WIFEXITED(*status));
  EXPECT_NE(WEXITSTATUS(*status), 0);
  EXPECT_NE(p.log().find("was not serving"), std::string::npos) << p.log();
  EXPECT_FALSE(left_mounted);
  EXPECT_EQ(stat_with_timeout(mp, 5000ms), 0);
}

// A directory another client replaced (removed and made again under the
// same name) while this mount still caches its name (entry_timeout): the
// request for the old inode's attributes, a change of them or its listing
// is answered ESTALE, so the kernel looks the name up again and stat(2),
// chmod(2) and opendir(3) find the new directory (with ENOENT they failed on
// a path that exists).
TEST_F(FuseTest, ADirectoryAnotherClientReplacedIsFoundThroughACachedName) {
  auto daemon = extra_mount("mnt-cached", "entry_timeout=60,attr_timeout=0");
  ASSERT_TRUE(daemon);
  const std::string cached = base_in("mnt-cached") + "/out";
  struct stat st {};
  auto replace = [&](const std::string& file) {
    // Through the suite's own mount: another client of the cluster.
    ASSERT_EQ(::system(("rm -rf '" + p("out") + "'").c_str()), 0);
    ASSERT_EQ(::mkdir(p("out").c_str(), 0755), 0);
    ASSERT_TRUE(write_all(p("out/" + file), "new"));
  };
  ASSERT_EQ(::mkdir(cached.c_str(), 0755), 0);
  ASSERT_TRUE(write_all(cached + "/old", "old"));
  ASSERT_EQ(::stat(cached.c_str(), &st), 0);  // the name is cached from here
  const ino_t before = st.st_ino;

  replace("a");
  ASSERT_EQ(::stat(cached.c_str(), &st), 0) << std::strerror(errno);
  EXPECT_NE(st.st_ino, before);
  struct stat fresh {};
  ASSERT_EQ(::stat(p("out").c_str(), &fresh), 0);
  EXPECT_EQ(st.st_ino, fresh.st_ino);

  replace("c");
  ASSERT_EQ(::chmod(cached.c_str(), 0700), 0) << std::strerror(errno);  // setattr of the old inode: ESTALE, again
  ASSERT_EQ(::stat(p("out").c_str(), &fresh), 0);
  EXPECT_EQ(fresh.st_mode & 07777, 0700u) << "the new directory's mode";

  replace("b");
  DIR* d = ::opendir(cached.c_str());
  ASSERT_NE(d, nullptr) << std::strerror(errno);
  std::set<std::string> names;
  while (dirent* e = ::readdir(d)) names.insert(e->d_name);
  ::closedir(d);
  EXPECT_TRUE(names.contains("b") && !names.contains("a") && !names.contains("old")) << names.size();

  daemon->daemon().signal(SIGTERM);
  EXPECT_TRUE(daemon->daemon().wait_exit(30s).has_value());
}

// With writeback_cache: the kernel writes back the mtime of its cached
// writes as an explicit time, which a writer who is not the owner may not set
// (fsync and close failed with EPERM); and what a process wrote to a file it
// still holds open may sit in the kernel's page cache only: a stop signal has
// the kernel write it back (served by the still running daemon) before the
// mount goes.
TEST_F(FuseTest, AStopSignalWritesBackWhatTheKernelCachedWithWritebackCache) {
  const std::string mp4 = dir_->file("mnt4");
  auto mounted = extra_mount("mnt4", "writeback_cache,allow_other,default_permissions");
  ASSERT_TRUE(mounted);
  Process& daemon = mounted->daemon();
  std::string dir4 = base_in("mnt4");
  ASSERT_TRUE(write_all(dir4 + "/shared", "", 0666));  // root's, writable by all
  ASSERT_EQ(::chmod((dir4 + "/shared").c_str(), 0666), 0);
  EXPECT_EQ(as_other_user([&] {
              int fd = ::open((dir4 + "/shared").c_str(), O_WRONLY);
              if (fd < 0) return 1;
              if (::write(fd, "from another user", 17) != 17) return 2;
              if (::fsync(fd) != 0) return 10 + errno;
              if (::close(fd) != 0) return 30 + errno;
              return 0;
            }),
            0);
  EXPECT_EQ(read_all(p("shared")), "from another user");
  std::string data(3'000'000, '\0');
  fill_pattern(data.data(), data.size(), 11, 0);
  std::string f = dir4 + "/wb";
  int fd = ::open(f.c_str(), O_CREAT | O_WRONLY, 0644);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  ASSERT_EQ(::write(fd, data.data(), data.size()), static_cast<ssize_t>(data.size()));
  daemon.signal(SIGTERM);  // the file is still open, nothing synced
  auto status = daemon.wait_exit(30s);
  ASSERT_TRUE(status.has_value()) << "the daemon did not exit";
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << "status " << *status << "\n" << daemon.log();
  ::close(fd);  // (the mount is gone: its error does not matter)
  EXPECT_FALSE(is_mounted(mp4));
  std::string back = read_all(p("wb"));  // through the suite's own mount
  EXPECT_EQ(back.size(), data.size());
  EXPECT_TRUE(back == data);
}

// After a stop signal the daemon closes the files the kernel left open,
// which flushes what they buffered and reports their lengths: a second
// signal meanwhile (a second Ctrl-C, a SIGHUP as the terminal closes) must
// not kill it halfway, losing writes write(2) already returned for. Its
// length report is held ~1 s here (client.report_length.hold).
TEST_F(FuseTest, ASecondStopSignalDoesNotInterruptTheFinalFlush) {
  if (writeback_cache_mode()) GTEST_SKIP() << "the kernel's cache is written back before the loop ends";
  std::string mp = dir_->file("mnt-twice");
  ASSERT_EQ(::mkdir(mp.c_str(), 0755), 0);
  Process daemon({testing::weft_binary(), "mount", mp, "--config", data_ + "/client.toml"},
                 dir_->file("mount-twice.log"), {"WEFT_FAULTS=client.report_length.hold=1:1000"});
  auto deadline = std::chrono::steady_clock::now() + 30s;
  while (!is_mounted(mp) && daemon.running() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(20ms);
  ASSERT_TRUE(is_mounted(mp)) << daemon.log();
  std::string data(3'000'000, '\0');
  fill_pattern(data.data(), data.size(), 12, 0);
  int fd = ::open((mp + "/" + base_.substr(mnt_.size() + 1) + "/twice").c_str(), O_CREAT | O_WRONLY, 0644);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  ASSERT_EQ(::write(fd, data.data(), data.size()), static_cast<ssize_t>(data.size()));
  daemon.signal(SIGTERM);  // the file is still open: its last bytes and its length are the daemon's
  std::this_thread::sleep_for(500ms);
  daemon.signal(SIGTERM);
  auto status = daemon.wait_exit(30s);
  ASSERT_TRUE(status.has_value()) << "the daemon did not exit";
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << "status " << *status << "\n" << daemon.log();
  ::close(fd);  // (the mount is gone: its error does not matter)
  std::string back = read_all(p("twice"));  // through the suite's own mount
  EXPECT_EQ(back.size(), data.size());
  EXPECT_TRUE(back == data);
}

// A process's writes through a shared writable mapping sit in the kernel's
// page cache until it writes them back, in every cache mode: a stop signal
// has the kernel write them back (served by the still running daemon)
// before the mount goes. Without writeback_cache the daemon skipped that,
// and the pages were lost.
TEST_F(FuseTest, AStopSignalWritesBackASharedMappingsDirtyPages) {
  std::string mp = dir_->file("mnt-mmap");
  ASSERT_EQ(::mkdir(mp.c_str(), 0755), 0);
  Process daemon({testing::weft_binary(), "mount", mp, "--config", data_ + "/client.toml"},
                 dir_->file("mount-mmap.log"));
  auto deadline = std::chrono::steady_clock::now() + 30s;
  while (!is_mounted(mp) && daemon.running() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(20ms);
  ASSERT_TRUE(is_mounted(mp)) << daemon.log();
  constexpr size_t kBytes = 3 << 20;
  std::string data(kBytes, '\0');
  fill_pattern(data.data(), data.size(), 13, 0);
  int fd = ::open((mp + "/" + base_.substr(mnt_.size() + 1) + "/mapped").c_str(), O_CREAT | O_RDWR, 0644);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  ASSERT_EQ(::ftruncate(fd, kBytes), 0) << std::strerror(errno);
  void* m = ::mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_NE(m, MAP_FAILED) << std::strerror(errno);
  std::memcpy(m, data.data(), kBytes);  // no msync: the pages are dirty in the kernel
  daemon.signal(SIGTERM);
  auto status = daemon.wait_exit(30s);
  ASSERT_TRUE(status.has_value()) << "the daemon did not exit";
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << "status " << *status << "\n" << daemon.log();
  ::munmap(m, kBytes);  // (the mount is gone: a write-back now has nowhere to go)
  ::close(fd);
  std::string back = read_all(p("mapped"));  // through the suite's own mount
  ASSERT_EQ(back.size(), data.size());
  auto diff = std::mismatch(back.begin(), back.end(), data.begin());
  std::string what;
  for (size_t off = 0; off < kBytes; off += 4096) {
    bool same = std::memcmp(back.data() + off, data.data() + off, 4096) == 0;
    bool zero = back.find_first_not_of('\0', off) >= off + 4096;
    what += same ? '=' : zero ? '0' : 'x';
  }
  EXPECT_TRUE(diff.first == back.end()) << "differs from byte " << (diff.first - back.begin()) << "\n"
                                        << what << "\n" << daemon.log();
}

// With writeback_cache the kernel keeps a regular file's mtime and ctime
// itself and writes them back (a SETATTR of both, Linux fuse_flush_times)
// whenever a descriptor of the file is closed or fsynced, a read-only one
// too; an unlink or a rename over the file through this mount dirties its
// ctime. A file that only readers hold open is destroyed at meta when it is
// removed (read-only opens hold no session: docs/DESIGN.md), so meta answered
// that SETATTR ENOENT, and the kernel failed the reader's fsync(2) and
// close(2) with EIO: under a load of readers and renames, EIO with nothing in
// the daemon's log. Linux's close of an unlinked file succeeds; so does this.
TEST_F(FuseTest, AReaderClosesAFileRemovedUnderItWithoutErrorWithWritebackCache) {
  std::string mp5 = dir_->file("mnt5");
  ASSERT_EQ(::mkdir(mp5.c_str(), 0755), 0);
  Process daemon({testing::weft_binary(), "mount", mp5, "--config", data_ + "/client.toml", "-o",
                  "writeback_cache,allow_other,default_permissions"},
                 dir_->file("mount5.log"));
  auto deadline = std::chrono::steady_clock::now() + 30s;
  while (!is_mounted(mp5) && daemon.running() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(20ms);
  ASSERT_TRUE(is_mounted(mp5)) << daemon.log();
  const std::string dir5 = mp5 + "/" + base_.substr(mnt_.size() + 1);
  // close(2) failed with EIO, fsync(2) with ENOENT (and a close after it then passed).
  for (std::string how : {"unlink, close", "rename over, close", "unlink, fsync, close"}) {
    SCOPED_TRACE(how);
    const std::string doomed = dir5 + "/doomed", other = dir5 + "/other";
    ASSERT_TRUE(write_all(doomed, "read, then removed"));
    int fd = ::open(doomed.c_str(), O_RDONLY);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    char buf[4];
    EXPECT_EQ(::read(fd, buf, sizeof buf), 4);
    if (how.starts_with("unlink")) {
      ASSERT_EQ(::unlink(doomed.c_str()), 0) << std::strerror(errno);
    } else {
      ASSERT_TRUE(write_all(other, "the new file"));
      ASSERT_EQ(::rename(other.c_str(), doomed.c_str()), 0) << std::strerror(errno);
    }
    if (how.find("fsync") != std::string::npos) {
      EXPECT_EQ(::fsync(fd), 0) << std::strerror(errno);
    }
    EXPECT_EQ(::close(fd), 0) << std::strerror(errno);
  }
  EXPECT_EQ(read_all(dir5 + "/doomed"), "<open failed: No such file or directory>");
  auto u = run_weft({"umount", mp5}, dir_->file("umount5.log"), 30s);
  EXPECT_EQ(u.code, 0) << u.log;
  auto status = daemon.wait_exit(30s);
  EXPECT_TRUE(status.has_value()) << "the daemon did not exit";
  unmount_hard(mp5);
}

// A file replaced (renamed over) while a process has it open for reading
// reads on, whole, until that process closes it, as on a local filesystem:
// the mount names its open files to meta, whose chunk GC leaves them alone
// (meta/read_holds.h). The file comes from `weft put` (another client:
// nothing of it is in this mount's page cache, and the pages are dropped
// again before the read). It is read once the GC has taken a control file
// removed after it (a native batch read of the control file fails then):
// the GC looked at the replaced file in that pass or the one before. Also
// fstat(2) of it goes on working, with no link left. One mode only: the
// same read path.
TEST_F(FuseTest, AFileReplacedWhileOpenReadsOnUntilItIsClosed) {
  if (!mount_options().ends_with("default_permissions")) GTEST_SKIP() << "run in the default mode only";
  std::string content(3u << 20, '\0');
  std::mt19937_64 rng(77);
  for (char& c : content) c = static_cast<char>(rng());
  const std::string local = dir_->file("replaced.bin");
  {
    std::ofstream out(local, std::ios::binary);
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
  }
  // The control file first: a lower inode, which a GC pass looks at first.
  ASSERT_TRUE(write_all(p("control"), "control"));
  const std::string remote = "/" + base_.substr(mnt_.size() + 1);
  auto put = run_weft({"put", local, remote + "/doomed", "--config", data_ + "/client.toml"},
                      dir_->file("replaced-put.log"));
  ASSERT_EQ(put.code, 0) << put.log;
  ClientOptions o;
  o.config_path = data_ + "/client.toml";
  auto native = Client::connect(o);
  ASSERT_TRUE(native.has_value()) << native.error();
  const Cred cred = (*native)->default_cred();
  auto control = (*native)->resolve(cred, remote + "/control");
  ASSERT_TRUE(control.has_value()) << control.error();

  int fd = ::open(p("doomed").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  char head[4096];
  ASSERT_EQ(::pread(fd, head, sizeof head, 0), static_cast<ssize_t>(sizeof head)) << std::strerror(errno);
  ASSERT_TRUE(write_all(p("new"), "the file that replaced it"));
  ASSERT_EQ(::rename(p("new").c_str(), p("doomed").c_str()), 0) << std::strerror(errno);
  ASSERT_EQ(::unlink(p("control").c_str()), 0) << std::strerror(errno);
  std::vector<std::byte> buf(7);
  ReadOp op;
  op.ino = control->ino;
  op.dst = buf;
  op.layout = control->layout;
  op.file_size = 7;
  ASSERT_TRUE(eventually([&] { return !(*native)->read_batch(cred, std::span<const ReadOp>(&op, 1))[0]; }, 30s))
      << "the GC never took the control file";
  std::this_thread::sleep_for(2500ms);  // passes from the queue's front (1 s apart once they finish nothing)
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  std::string got(content.size(), '\0');
  size_t n = 0;
  while (n < got.size()) {
    ssize_t r = ::pread(fd, got.data() + n, got.size() - n, static_cast<off_t>(n));
    ASSERT_GT(r, 0) << "at byte " << n << ": " << (r < 0 ? std::strerror(errno) : "end of file");
    n += static_cast<size_t>(r);
  }
  EXPECT_TRUE(got == content) << "the replaced file's data changed under its reader";
  struct stat st {};
  EXPECT_EQ(::fstat(fd, &st), 0) << std::strerror(errno);
  EXPECT_EQ(st.st_size, static_cast<off_t>(content.size()));
  EXPECT_EQ(::close(fd), 0) << std::strerror(errno);
  EXPECT_EQ(read_all(p("doomed")), "the file that replaced it");
}

TEST_F(FuseTest, ForegroundMountStopsCleanly) {
  std::string mp3 = dir_->file("mnt3");
  ASSERT_EQ(::mkdir(mp3.c_str(), 0755), 0);
  for (int round = 0; round < 2; ++round) {
    Process daemon({testing::weft_binary(), "mount", mp3, "--config", data_ + "/client.toml"},
                   dir_->file("mount3.log"));
    auto deadline = std::chrono::steady_clock::now() + 30s;
    while (!is_mounted(mp3) && daemon.running() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(20ms);
    }
    ASSERT_TRUE(is_mounted(mp3)) << daemon.log();
    struct stat st {};
    ASSERT_EQ(::stat((mp3 + "/" + base_.substr(mnt_.size() + 1)).c_str(), &st), 0);
    EXPECT_TRUE(S_ISDIR(st.st_mode));
    if (round == 0) {
      daemon.signal(SIGTERM);
    } else {
      auto u = run_weft({"umount", mp3}, dir_->file("umount3.log"), 30s);
      EXPECT_EQ(u.code, 0) << u.log;
    }
    auto status = daemon.wait_exit(30s);
    ASSERT_TRUE(status.has_value()) << "the daemon did not exit";
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << "status " << *status << "\n" << daemon.log();
    EXPECT_FALSE(is_mounted(mp3));
  }
}

// Threads of process `pid` whose name is `name`.
int threads_named(pid_t pid, const std::string& name) {
  int n = 0;
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
    std::ifstream in(task.path() / "comm");
    std::string comm;
    if (std::getline(in, comm) && comm == name) ++n;
  }
  return n;
}

// Whether every thread of `pid` is stopped (state T): a SIGSTOP takes effect
// when each thread next handles it, which on a loaded machine can be after
// the sender went on.
bool all_threads_stopped(pid_t pid) {
  std::error_code ec;
  int threads = 0;
  for (const auto& task : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
    std::ifstream in(task.path() / "stat");
    std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    auto close = stat.rfind(')');
    if (close == std::string::npos || close + 2 >= stat.size() || stat[close + 2] != 'T') return false;
    ++threads;
  }
  return !ec && threads > 0;
}

// With max_threads above libfuse's default of 10 workers, that many
// requests are served at once: with meta paused, 24 lookups wait in the
// daemon together, each on a worker of its own (named "weft-fuse"), and
// every one is answered once meta runs again.
TEST_F(FuseTest, MaxThreadsServesMoreThanTenRequestsAtOnce) {
  constexpr int kWaiters = 24;
  for (int i = 0; i < kWaiters; ++i) ASSERT_EQ(::mkdir(p("d" + std::to_string(i)).c_str(), 0755), 0);
  SecondMount wide;
  // Entries kept a minute: the 24 lookups are of 24 names (of one name, the
  // kernel would send one lookup and hold the others back).
  mount_again(wide, "max-threads", mount_options() + ",max_threads=32,entry_timeout=60");
  ASSERT_EQ(wide.error, "");
  ASSERT_GT(wide.pid, 0);
  const std::string there = wide.mp + "/" + base_.substr(mnt_.size() + 1);
  for (int i = 0; i < kWaiters; ++i) {
    struct stat st {};
    ASSERT_EQ(::stat((there + "/d" + std::to_string(i)).c_str(), &st), 0) << std::strerror(errno);
  }
  pid_t meta = read_pid(data_ + "/run/meta.pid");
  ASSERT_GT(meta, 0);
  struct Waiters {
    pid_t meta;
    std::vector<pid_t> children;
    std::vector<int> codes;  // per child: its errno, or -1 (did not finish)
    void resume_and_reap() {
      ::kill(meta, SIGCONT);
      auto deadline = std::chrono::steady_clock::now() + 60s;
      codes.assign(children.size(), -1);
      for (size_t i = 0; i < children.size(); ++i) {
        int status = 0;
        while (children[i] > 0 && ::waitpid(children[i], &status, WNOHANG) == 0 &&
               std::chrono::steady_clock::now() < deadline) {
          std::this_thread::sleep_for(10ms);
        }
        if (children[i] > 0 && ::waitpid(children[i], &status, WNOHANG) == 0) {
          ::kill(children[i], SIGKILL);
          ::waitpid(children[i], &status, 0);
        } else if (children[i] > 0 && WIFEXITED(status)) {
          codes[i] = WEXITSTATUS(status);
        }
        children[i] = -1;
      }
    }
    ~Waiters() { resume_and_reap(); }
  } waiters{meta, {}, {}};
  ASSERT_EQ(::kill(meta, SIGSTOP), 0);
  // Not before meta really stopped: under load it answered the first few
  // lookups, whose workers were then free for the next ones, and fewer than
  // 24 were ever busy at once (seen 1 run in 10 beside python_tests).
  ASSERT_TRUE(eventually([&] { return all_threads_stopped(meta); }, 10s)) << "meta did not stop";
  for (int i = 0; i < kWaiters; ++i) {
    std::string missing = there + "/d" + std::to_string(i) + "/missing";
    pid_t child = ::fork();
    if (child == 0) {
      struct stat st;
      ::_exit(::stat(missing.c_str(), &st) == 0 ? 0 : (errno & 0x7f));
    }
    waiters.children.push_back(child);
  }
  // Capped at 10 workers, never more than 10 would carry the name.
  bool together = eventually([&] { return threads_named(wide.pid, "weft-fuse") >= kWaiters; }, 10s);
  int seen = threads_named(wide.pid, "weft-fuse");
  // Where each child waits, for a failure to say which request never
  // reached a worker (the kernel's stack of each: root reads it).
  std::string where;
  if (!together) {
    auto read_all_of = [](const std::string& path) {
      std::ifstream in(path);
      return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    };
    for (size_t i = 0; i < waiters.children.size(); ++i) {
      const pid_t child = waiters.children[i];
      int status = 0;
      if (::waitpid(child, &status, WNOHANG) == child) {  // done before meta ran again: how?
        where += fmt::format("child {}: exited, status {:#x}\n", child, status);
        waiters.children[i] = -1;
        continue;
      }
      std::string stat = read_all_of("/proc/" + std::to_string(child) + "/stat");
      where += fmt::format("child {}: {}\n{}", child, stat.substr(stat.rfind(')') + 1, 3),
                           read_all_of("/proc/" + std::to_string(child) + "/stack"));
    }
    std::error_code ec;
    for (const auto& task : std::filesystem::directory_iterator("/proc/" + std::to_string(wide.pid) + "/task", ec)) {
      std::string comm = read_all_of((task.path() / "comm").string());
      std::string stack = read_all_of((task.path() / "stack").string());
      where += fmt::format("daemon thread {} {}{}", task.path().filename().string(), comm,
                           stack.substr(0, std::min<size_t>(stack.size(), 300)));
    }
  }
  waiters.resume_and_reap();
  EXPECT_TRUE(together) << seen << " workers while " << kWaiters << " lookups waited for meta\n" << where;
  for (int code : waiters.codes) EXPECT_EQ(code, ENOENT);
}

// Reads through the mount go on while a storage server is SIGKILLed (the
// other replica answers) and after `weft up` restarted it; a write made while
// it is down waits for mgmtd to take it out of its chains, then lands.
TEST_F(FuseTest, ReadsSurviveAStorageServerKilledAndRestarted) {
  std::string data(8 << 20, '\0');
  fill_pattern(data.data(), data.size(), 7, 0);
  ASSERT_TRUE(write_all(p("survivor"), data));
  pid_t victim = read_pid(data_ + "/run/storage-1.pid");
  ASSERT_GT(victim, 0);
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  ASSERT_TRUE(wait_pid_gone(victim, 10s));
  // Drop the kernel's cached pages so the reads really go to the cluster.
  int fd = ::open(p("survivor").c_str(), O_RDONLY | O_DIRECT);
  if (fd < 0) fd = ::open(p("survivor").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
  EXPECT_EQ(read_all(p("survivor")), data) << "read with one storage server dead";
  std::string later(3 << 20, '\0');
  fill_pattern(later.data(), later.size(), 8, 0);
  ASSERT_TRUE(write_all(p("written-while-down"), later));
  auto up = run_weft({"up", "--data-dir", data_}, dir_->file("up-again.log"), 120s);
  ASSERT_EQ(up.code, 0) << up.log;
  EXPECT_EQ(read_all(p("survivor")), data) << "read after the restart";
  EXPECT_EQ(read_all(p("written-while-down")), later);
}

// The current test's directory as another client names it.
std::string remote_dir() { return "/" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()); }

// Reads to EOF through `fd` in reads of `chunk` bytes.
std::string read_fd(int fd, size_t chunk) {
  std::string out, buf(chunk, '\0');
  for (;;) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n <= 0) break;
    out.append(buf.data(), static_cast<size_t>(n));
  }
  return out;
}

// Every read that starts after write(2) returned sees those bytes, whether
// the writer's descriptor is still open and whatever other reads of the
// kernel (it splits one read(2) into several requests, served in parallel)
// flush the writer meanwhile.
TEST_F(FuseTest, AReadThroughAnotherDescriptorSeesWhatWasWrittenBefore) {
  for (int round = 0; round < 5; ++round) {
    std::string f = p("race" + std::to_string(round));
    std::string data((4 << 20) + 12345, '\0');
    fill_pattern(data.data(), data.size(), 300 + round, 0);
    int w = ::open(f.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ASSERT_GE(w, 0) << std::strerror(errno);
    ASSERT_EQ(::write(w, data.data(), data.size()), static_cast<ssize_t>(data.size()));
    int r = ::open(f.c_str(), O_RDONLY);
    ASSERT_GE(r, 0) << std::strerror(errno);
    std::string got = read_fd(r, 8 << 20);
    ::close(r);
    EXPECT_EQ(got.size(), data.size()) << "round " << round;
    EXPECT_TRUE(got == data) << "round " << round << ": the bytes differ";
    ASSERT_EQ(::close(w), 0);
  }
}

// A listing in progress gives the kernel no attributes (readdirplus) older
// than a change made through this mount: a file appended to, or a name
// removed, after the listing began showed its old size, or existed again,
// until the attribute timeout.
TEST_F(FuseTest, AListingInProgressGivesNoAttributesOlderThanAChangeHere) {
  constexpr int kFiles = 200;
  ASSERT_NO_FATAL_FAILURE(create_entries(kFiles, "f", "x"));
  std::vector<std::string> order;  // the listing's order
  {
    int fd = ::open(base_.c_str(), O_RDONLY | O_DIRECTORY);
    ASSERT_GE(fd, 0);
    for (auto batch = getdents(fd, 1 << 16); !batch.empty(); batch = getdents(fd, 1 << 16))
      for (auto& n : batch)
        if (n != "." && n != "..") order.push_back(n);
    ::close(fd);
  }
  ASSERT_EQ(order.size(), size_t(kFiles));
  std::this_thread::sleep_for(1200ms);  // past the timeouts: the kernel takes what the next listing gives
  int fd = ::open(base_.c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_GE(fd, 0);
  auto first = getdents(fd, 4096);  // one page of the kernel's: a part of the listing
  size_t listed = 0;
  for (auto& n : first) listed += n != "." && n != "..";
  ASSERT_GT(listed, 0u);
  ASSERT_LT(listed + 2, order.size());
  const std::string grown = order[listed], removed = order[listed + 1];
  int a = ::open(p(grown).c_str(), O_WRONLY | O_APPEND);
  ASSERT_GE(a, 0);
  ASSERT_EQ(::write(a, std::string(1000, 'y').data(), 1000), 1000);
  ASSERT_EQ(::close(a), 0);
  ASSERT_EQ(::unlink(p(removed).c_str()), 0);
  struct stat st {};
  ASSERT_EQ(::stat(p(grown).c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 1001);
  auto second = getdents(fd, 4096);  // the part with both names
  ASSERT_FALSE(second.empty());
  ::close(fd);
  ASSERT_EQ(::stat(p(grown).c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 1001) << "the size from before the append";
  EXPECT_EQ(read_all(p(grown)).size(), 1001u);
  EXPECT_EQ(::stat(p(removed).c_str(), &st), -1) << removed << " exists again";
  EXPECT_EQ(errno, ENOENT);
}

// A read-only open from attributes a lookup fetched trusts their length as
// long as the kernel does, counted from that fetch, not from the open: a
// read past it once they are older asks meta and finds another client's
// append (a short reply would cut the kernel's size back to the old length
// for up to another attr_timeout).
TEST_F(FuseTest, AnOpenFromFetchedAttributesTrustsTheirLengthFromTheFetch) {
  ASSERT_TRUE(write_all(p("f"), "0123456789"));
  ExtraMount m(dir_->file("mnt-age"), data_ + "/client.toml", "attr_timeout=2,entry_timeout=2",
               dir_->file("mount-age.log"));
  ASSERT_TRUE(m.mounted()) << m.log();
  const std::string f = dir_->file("mnt-age") + remote_dir() + "/f";
  // The daemon fetches the attributes between these two times. (On a slow
  // machine the test may prove less: an open 2 s after the fetch asks meta.)
  const auto before = std::chrono::steady_clock::now();
  struct stat st {};
  ASSERT_EQ(::stat(f.c_str(), &st), 0);  // looked up there: remembered
  const auto fetched = std::chrono::steady_clock::now();
  ASSERT_EQ(st.st_size, 10);
  ASSERT_TRUE(append_all(p("f"), "abcde"));  // through the suite's mount: another client
  std::this_thread::sleep_until(before + 1s);
  int fd = ::open(f.c_str(), O_RDONLY);  // from the attributes fetched 1 s ago
  ASSERT_GE(fd, 0) << std::strerror(errno);
  std::this_thread::sleep_until(fetched + 2500ms);  // past the kernel's 2 s, ~1.5 s after the open
  EXPECT_EQ(read_fd(fd, 100), "0123456789abcde");
  ::close(fd);
}

// A read through another descriptor makes libweft report the writer's length
// to meta (it flushes the inode's writers first): a listing page fetched
// before that read, with meta's older length, must not give the kernel that
// length afterwards (it would cut the file in the kernel's view, and the
// writer's next O_APPEND write would land over acknowledged bytes). On a
// mount with long timeouts, so that no page is fetched again for its age.
TEST_F(FuseTest, AListingPageFromBeforeAReadHereGivesNoLengthOlderThanTheWriters) {
  constexpr int kFiles = 200;
  ASSERT_NO_FATAL_FAILURE(create_entries(kFiles, "f", "x"));
  ExtraMount m(dir_->file("mnt-long"), data_ + "/client.toml", "attr_timeout=60,entry_timeout=60",
               dir_->file("mount-long.log"));
  ASSERT_TRUE(m.mounted()) << m.log();
  const std::string dir = dir_->file("mnt-long") + remote_dir();
  const std::string grown = dir + "/f0199";  // the listing's last name (names in order)
  struct Fds {
    int a = -1, d = -1;
    ~Fds() { ::close(a), ::close(d); }
  } fds;
  fds.a = ::open(grown.c_str(), O_RDWR | O_APPEND);
  ASSERT_GE(fds.a, 0) << std::strerror(errno);
  ASSERT_EQ(::write(fds.a, std::string(1000, 'y').data(), 1000), 1000);  // buffered in libweft, not reported
  fds.d = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_GE(fds.d, 0);
  auto first = getdents(fds.d, 4096);  // fetches the listing page: meta's length of f0199 is 1
  ASSERT_FALSE(first.empty());
  ASSERT_EQ(std::count(first.begin(), first.end(), "f0199"), 0);
  {
    // Read through another descriptor, past the kernel's page cache.
    int r = ::open(grown.c_str(), O_RDONLY | O_DIRECT);
    ASSERT_GE(r, 0) << std::strerror(errno);
    alignas(4096) static char buf[4096];
    EXPECT_EQ(::pread(r, buf, sizeof buf, 0), 1001);
    ::close(r);
  }
  // The rest of the listing, each part after a lookup in the directory
  // (READDIRPLUS_AUTO asks a part with attributes only after one).
  std::string last = first.back();
  bool named = false;
  for (bool more = true; more;) {
    struct stat looked {};
    ASSERT_EQ(::stat((dir + "/" + last).c_str(), &looked), 0) << last;
    auto part = getdents(fds.d, 4096);
    more = !part.empty();
    if (more) last = part.back();
    named = named || std::count(part.begin(), part.end(), "f0199") > 0;
  }
  EXPECT_TRUE(named);
  struct stat st {};
  ASSERT_EQ(::fstat(fds.a, &st), 0);
  EXPECT_EQ(st.st_size, 1001) << "the listing gave the length from before the write";
  ASSERT_EQ(::write(fds.a, "z", 1), 1);
  ASSERT_EQ(::close(fds.a), 0);
  fds.a = -1;
  EXPECT_EQ(read_all(grown), "x" + std::string(1000, 'y') + "z");
}

// The same while the reply is being made: a listing request checks its page
// (fetched after the write, so it adds the writer's unreported bytes) and is
// held (fault) while the writer's fsync reports the length (an fsync, not a
// read: the kernel drops a listing's attributes asked for before a short
// read of that file updated its size);
// the entries made after it must not give the kernel the page's length
// (meta's, from before the report) without those bytes.
TEST_F(FuseTest, AListingReplyMadeAcrossALengthReportGivesNoLengthOlderThanTheWriters) {
  constexpr int kFiles = 200;
  ASSERT_NO_FATAL_FAILURE(create_entries(kFiles, "f", "x"));
  ExtraMount m(dir_->file("mnt-hold"), data_ + "/client.toml", "attr_timeout=60,entry_timeout=60",
               dir_->file("mount-hold.log"), {"WEFT_FAULTS=fuse.readdirplus.hold"});
  ASSERT_TRUE(m.mounted()) << m.log();
  const std::string dir = dir_->file("mnt-hold") + remote_dir();
  struct Fds {
    int a = -1, d = -1;
    ~Fds() { ::close(a), ::close(d); }
  } fds;
  fds.d = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_GE(fds.d, 0);
  auto first = getdents(fds.d, 4096);  // fetches the page
  size_t listed = 0;
  for (auto& n : first) listed += n != "." && n != "..";
  ASSERT_GT(listed, 0u);
  ASSERT_LT(listed, size_t(kFiles));
  char name[32];
  std::snprintf(name, sizeof name, "f%04zu", listed);  // the next part's first name (names in order)
  const std::string grown = dir + "/" + name;
  fds.a = ::open(grown.c_str(), O_RDWR | O_APPEND);
  ASSERT_GE(fds.a, 0) << std::strerror(errno);
  ASSERT_EQ(::write(fds.a, std::string(1000, 'y').data(), 1000), 1000);  // buffered in libweft, not reported
  struct stat looked {};
  ASSERT_EQ(::stat((dir + "/" + first.back()).c_str(), &looked), 0);  // READDIRPLUS_AUTO: attributes next
  std::vector<std::string> part;
  std::thread lister([&] { part = getdents(fds.d, 4096); });  // held 400 ms in the daemon
  std::this_thread::sleep_for(150ms);
  EXPECT_EQ(::fsync(fds.a), 0) << std::strerror(errno);  // reports 1001
  lister.join();
  EXPECT_EQ(std::count(part.begin(), part.end(), std::string(name)), 1) << "not in the held part";
  struct stat st {};
  ASSERT_EQ(::fstat(fds.a, &st), 0);
  EXPECT_EQ(st.st_size, 1001) << "the listing gave the length from before the report";
  ASSERT_EQ(::write(fds.a, "z", 1), 1);
  ASSERT_EQ(::close(fds.a), 0);
  fds.a = -1;
  EXPECT_EQ(read_all(grown), "x" + std::string(1000, 'y') + "z");
}

// Another client truncates a file this mount holds open, for reading and
// for writing (every write reported): past the attribute timeout the mount
// shows the new length, and a reader here gets the new bytes only, not the
// old length's worth of zeros.
TEST_F(FuseTest, AnotherClientsTruncateShowsWhileTheFileIsOpenHere) {
  if (writeback_cache_mode()) GTEST_SKIP() << "writeback_cache: the kernel keeps its size of a cached file (docs/fuse.md)";
  ASSERT_TRUE(write_all(p("cut"), std::string(1 << 20, 'o')));
  int r = ::open(p("cut").c_str(), O_RDONLY);
  int w = ::open(p("cut").c_str(), O_WRONLY);
  ASSERT_GE(r, 0) << std::strerror(errno);
  ASSERT_GE(w, 0) << std::strerror(errno);
  struct Close {
    int a, b;
    ~Close() { ::close(a), ::close(b); }
  } close_both{r, w};
  ASSERT_EQ(::pwrite(w, "written here", 12, 0), 12) << std::strerror(errno);
  ASSERT_EQ(::fsync(w), 0) << std::strerror(errno);

  ClientOptions o;
  o.config_path = data_ + "/client.toml";
  auto native = Client::connect(o);
  ASSERT_TRUE(native.has_value()) << native.error();
  const std::string remote = "/" + base_.substr(mnt_.size() + 1) + "/cut";
  auto t = (*native)->open_path((*native)->default_cred(), remote, O_WRONLY | O_TRUNC, 0644);
  ASSERT_TRUE(t.has_value()) << t.error();
  const std::string fresh = "ten bytes!";
  ASSERT_TRUE((*t)->pwrite(std::as_bytes(std::span(fresh)), 0).has_value());
  ASSERT_TRUE((*t)->close().has_value());

  std::this_thread::sleep_for(1500ms);  // past attr_timeout (1 s)
  struct stat st {};
  ASSERT_EQ(::stat(p("cut").c_str(), &st), 0) << std::strerror(errno);
  EXPECT_EQ(st.st_size, static_cast<off_t>(fresh.size())) << "the handles open here kept the old length";
  const std::string content = read_all(p("cut"));
  EXPECT_EQ(content.size(), fresh.size()) << "a reader here got the old length's worth";
  EXPECT_TRUE(content.starts_with(fresh));
}

// readdirplus gives the kernel attributes it applies whatever timeouts come
// with them: a listing read slowly must give none older than the timeouts.
// Another client (a second mount of the cluster) appends to a file in the
// part of the page the listing has not reached yet; past the attribute
// timeout, the rest of the listing must not take the kernel's size of it
// back (statx with AT_STATX_DONT_SYNC: the size the kernel holds).
TEST_F(FuseTest, ASlowListingGivesNoAttributesOlderThanTheTimeouts) {
  if (writeback_cache_mode()) GTEST_SKIP() << "writeback_cache: the kernel keeps its size of a cached file (docs/fuse.md)";
  SecondMount other;
  mount_again(other, "slow-listing", mount_options());
  ASSERT_EQ(other.error, "");
  const std::string& mnt2 = other.mp;
  const std::string there = mnt2 + remote_dir();
  constexpr int kFiles = 200;  // one page of Weft's (512), many of the kernel's
  for (int i = 0; i < kFiles; ++i) {
    char name[16];
    std::snprintf(name, sizeof name, "f%04d", i);
    ASSERT_TRUE(write_all(p(name), "x"));
  }
  int fd = ::open(base_.c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_GE(fd, 0);
  auto first = getdents(fd, 4096);  // fetches the whole page, hands out a part
  ASSERT_FALSE(first.empty());
  const std::string last = first.back();
  ASSERT_EQ(last[0], 'f');
  char grown[16];
  std::snprintf(grown, sizeof grown, "f%04d", std::stoi(last.substr(1)) + 3);  // in the next part
  int a = ::open((there + "/" + grown).c_str(), O_WRONLY | O_APPEND);
  ASSERT_GE(a, 0) << there << "/" << grown << ": " << std::strerror(errno);
  ASSERT_EQ(::write(a, std::string(9999, 'y').data(), 9999), 9999);
  ASSERT_EQ(::close(a), 0);
  // A name this mount's kernel has never seen: its lookup makes the kernel
  // use readdirplus for the directory's next request (readdirplus_auto).
  ASSERT_TRUE(write_all(there + "/probe", "p"));
  std::this_thread::sleep_for(1500ms);  // past attr_timeout and entry_timeout (1 s)
  struct stat st {};
  ASSERT_EQ(::stat(p("probe").c_str(), &st), 0);
  int g = ::open(p(grown).c_str(), O_RDONLY);  // the kernel asks meta: 10000 bytes
  ASSERT_GE(g, 0);
  ASSERT_EQ(::fstat(g, &st), 0);
  EXPECT_EQ(st.st_size, 10000);
  auto second = getdents(fd, 4096);  // the part with `grown`
  ::close(fd);
  EXPECT_NE(std::find(second.begin(), second.end(), std::string(grown)), second.end());
  struct statx sx {};
  ASSERT_EQ(::statx(g, "", AT_EMPTY_PATH | AT_STATX_DONT_SYNC, STATX_SIZE, &sx), 0);
  EXPECT_EQ(sx.stx_size, 10000u) << "the kernel took the size of a page fetched before the append";
  ASSERT_EQ(::stat(p(grown).c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 10000);
  ::close(g);
}

// What the named file holds as another client (weft get) sees it now.
std::string remote_content(const std::string& remote, const std::string& local, const std::string& config) {
  auto get = run_weft({"get", remote, local, "--config", config}, local + ".log");
  if (get.code != 0) return "<weft get failed: " + get.log + ">";
  std::ifstream in(local);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// fallocate(2) through the mount: mode 0 (posix_fallocate) makes the length
// at least offset + length, the new range reads as zeros, and another client
// sees the length while the descriptor is still open; it never shortens;
// KEEP_SIZE changes nothing; more than the cluster has free is ENOSPC;
// punching a hole is EOPNOTSUPP (the bytes stay); a read-only descriptor
// gets EBADF.
TEST_F(FuseTest, FallocateExtendsTheLengthAndRefusesWhatItCannotDo) {
  const std::string cfg = data_ + "/client.toml";
  int fd = ::open(p("f").c_str(), O_CREAT | O_RDWR, 0644);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  ASSERT_EQ(::write(fd, "head", 4), 4);
  constexpr off_t kLength = 1 << 20;
  ASSERT_EQ(::fallocate(fd, 0, 4096, kLength - 4096), 0) << std::strerror(errno);
  struct stat st {};
  ASSERT_EQ(::fstat(fd, &st), 0);
  EXPECT_EQ(st.st_size, kLength);
  std::string expected(kLength, '\0');
  expected.replace(0, 4, "head");
  std::string remote = remote_content(remote_dir() + "/f", dir_->file("fallocate.out"), cfg);
  EXPECT_EQ(remote.size(), static_cast<size_t>(kLength)) << "the length reached meta";
  if (writeback_cache_mode()) {  // "head" may still be in the kernel's page cache
    ASSERT_EQ(::fsync(fd), 0);
    remote = remote_content(remote_dir() + "/f", dir_->file("fallocate.out"), cfg);
  }
  EXPECT_EQ(remote, expected);

  EXPECT_EQ(::fallocate(fd, 0, 0, 100), 0) << "inside the length: nothing to do";
  EXPECT_EQ(::fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, 4 * kLength), 0) << std::strerror(errno);
  ASSERT_EQ(::fstat(fd, &st), 0);
  EXPECT_EQ(st.st_size, kLength);

  struct statvfs vfs {};
  ASSERT_EQ(::statvfs(mnt_.c_str(), &vfs), 0);
  const off_t beyond = static_cast<off_t>(vfs.f_bavail * vfs.f_frsize) + (off_t{1} << 30);
  errno = 0;
  EXPECT_EQ(::fallocate(fd, 0, 0, beyond), -1);
  EXPECT_EQ(errno, ENOSPC);
  errno = 0;
  EXPECT_EQ(::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 4096), -1);
  EXPECT_EQ(errno, EOPNOTSUPP);
  ASSERT_EQ(::fstat(fd, &st), 0);
  EXPECT_EQ(st.st_size, kLength);
  ASSERT_EQ(::close(fd), 0);
  EXPECT_EQ(read_all(p("f")), expected);

  int ro = ::open(p("f").c_str(), O_RDONLY);
  ASSERT_GE(ro, 0);
  errno = 0;
  EXPECT_EQ(::fallocate(ro, 0, 0, 2 * kLength), -1);
  EXPECT_EQ(errno, EBADF);
  ::close(ro);
}

// O_SYNC, O_DSYNC and RWF_SYNC/RWF_DSYNC writes are durable when write(2)
// returns: another client sees them while the descriptor is still open.
// (direct_io mounts ignored them: the kernel leaves that to the daemon there.)
TEST_F(FuseTest, SynchronousWritesAreDurableWhenTheyReturn) {
  const std::string cfg = data_ + "/client.toml";
  for (int flag : {O_SYNC, O_DSYNC}) {
    std::string name = flag == O_SYNC ? "osync" : "odsync";
    int fd = ::open(p(name).c_str(), O_WRONLY | O_CREAT | O_TRUNC | flag, 0644);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    ASSERT_EQ(::write(fd, "synchronous write", 17), 17);
    EXPECT_EQ(remote_content(remote_dir() + "/" + name, dir_->file(name + ".out"), cfg), "synchronous write") << name;
    ASSERT_EQ(::close(fd), 0);
  }
  for (int flag : {RWF_SYNC, RWF_DSYNC}) {
    std::string name = flag == RWF_SYNC ? "rwfsync" : "rwfdsync";
    int fd = ::open(p(name).c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    char text[] = "synchronous pwritev2";
    iovec iov{text, 20};
    ASSERT_EQ(::pwritev2(fd, &iov, 1, 0, flag), 20) << std::strerror(errno);
    EXPECT_EQ(remote_content(remote_dir() + "/" + name, dir_->file(name + ".out"), cfg), "synchronous pwritev2")
        << name;
    ASSERT_EQ(::close(fd), 0);
  }
}

// fsync(2) makes the inode's data durable whichever descriptor wrote it (as
// Linux): through a descriptor that did not write, even a read-only one.
TEST_F(FuseTest, FsyncOfAnyDescriptorMakesTheInodesWritesDurable) {
  const std::string cfg = data_ + "/client.toml";
  for (int mode : {O_RDWR, O_RDONLY}) {
    std::string name = mode == O_RDWR ? "rw" : "ro";
    int a = ::open(p(name).c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ASSERT_GE(a, 0);
    int b = ::open(p(name).c_str(), mode);
    ASSERT_GE(b, 0);
    ASSERT_EQ(::write(a, "written through A", 17), 17);
    ASSERT_EQ(::fsync(b), 0) << std::strerror(errno);
    EXPECT_EQ(remote_content(remote_dir() + "/" + name, dir_->file(name + ".out"), cfg), "written through A") << name;
    ASSERT_EQ(::close(a), 0);
    ASSERT_EQ(::close(b), 0);
  }
}

// A user who may write a file but does not own it may truncate it and set
// its times to now (with writeback_cache the kernel sends those as explicit
// times, which only the owner may set: EPERM, with the truncate already
// made); explicit times stay the owner's.
TEST_F(FuseTest, AWriterWhoIsNotTheOwnerMayTruncateAndTouch) {
  std::string f = p("shared");
  ASSERT_TRUE(write_all(f, "0123456789", 0666));
  ASSERT_EQ(::chmod(f.c_str(), 0666), 0);
  ASSERT_EQ(::chmod(base_.c_str(), 0777), 0);
  EXPECT_EQ(as_other_user([&] {
              if (::truncate(f.c_str(), 4) != 0) return 10 + errno;
              if (::utimensat(AT_FDCWD, f.c_str(), nullptr, 0) != 0) return 40 + errno;
              timespec times[2] = {{1000, 0}, {2000, 0}};
              if (::utimensat(AT_FDCWD, f.c_str(), times, 0) == 0 || errno != EPERM) return 70;
              int fd = ::open(f.c_str(), O_WRONLY);
              if (fd < 0) return 71;
              if (::ftruncate(fd, 2) != 0) return 80 + errno;
              return ::close(fd) == 0 ? 0 : 72;
            }),
            0);
  EXPECT_EQ(read_all(f), "01");
  struct stat st {};
  ASSERT_EQ(::stat(f.c_str(), &st), 0);
  EXPECT_GT(st.st_mtime, 2000);
}

// open(O_RDONLY | O_TRUNC) truncates, as Linux does (and needs write
// permission: EACCES without, the file left as it was).
TEST_F(FuseTest, ReadOnlyOpenWithOTruncTruncates) {
  std::string f = p("f");
  ASSERT_TRUE(write_all(f, "0123456789", 0644));
  ASSERT_EQ(::chmod(base_.c_str(), 0777), 0);
  int fd = ::open(f.c_str(), O_RDONLY | O_TRUNC);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  struct stat st {};
  ASSERT_EQ(::fstat(fd, &st), 0);
  EXPECT_EQ(st.st_size, 0);
  char c;
  EXPECT_EQ(::read(fd, &c, 1), 0);
  ::close(fd);
  EXPECT_EQ(read_all(f), "");
  ASSERT_TRUE(write_all(f, "0123456789"));
  EXPECT_EQ(as_other_user([&] {
              int fd = ::open(f.c_str(), O_RDONLY | O_TRUNC);
              if (fd >= 0) return 1;
              return errno == EACCES ? 0 : 10 + errno;
            }),
            0);
  EXPECT_EQ(read_all(f), "0123456789");
}

// The kernel sends CREATE, not OPEN, for a name it holds as missing (a
// negative entry, here kept 60 s) though another client made the file
// since: O_TRUNC truncates it there too, with any access mode.
TEST_F(FuseTest, ACreateOfAFileMadeElsewhereSinceTruncatesIt) {
  auto m = extra_mount("mnt-neg", "negative_timeout=60");
  ASSERT_TRUE(m);
  const std::string there = dir_->file("mnt-neg") + remote_dir();
  for (int access : {O_RDONLY, O_RDWR}) {
    const std::string name = access == O_RDONLY ? "ro" : "rw";
    struct stat st {};
    ASSERT_EQ(::stat((there + "/" + name).c_str(), &st), -1);
    ASSERT_EQ(errno, ENOENT);
    ASSERT_TRUE(write_all(p(name), "0123456789"));
    int fd = ::open((there + "/" + name).c_str(), O_CREAT | access | O_TRUNC, 0644);
    ASSERT_GE(fd, 0) << name << ": " << std::strerror(errno);
    ASSERT_EQ(::fstat(fd, &st), 0);
    EXPECT_EQ(st.st_size, 0) << name;
    char c;
    EXPECT_EQ(::read(fd, &c, 1), 0) << name;
    ::close(fd);
    auto held = read_natively(name);  // the suite's mount may keep its cached pages (writeback_cache)
    ASSERT_TRUE(held.has_value()) << held.error();
    EXPECT_EQ(*held, "") << name;
  }
}

// On a mount without default_permissions (one user's alone), a listing with
// attributes (readdirplus) of a directory its caller may read but not search
// links no entries in the kernel: stat of a name there says EACCES, as Linux
// (it said 0: the kernel asks nothing more for a name it holds). Search
// permission is judged at each page's fetch: also when it was taken away
// after the directory was opened.
TEST_F(FuseTest, AListingOfADirectoryTheCallerMayNotSearchLinksNoEntries) {
  for (const char* name : {"nosearch", "searchable-at-open"}) {
    ASSERT_EQ(::mkdir(p(name).c_str(), 0755), 0);
    ASSERT_TRUE(write_all(p(name) + "/f", "z"));
    ASSERT_EQ(::chown(p(name).c_str(), 4321, 4321), 0);
  }
  ASSERT_EQ(::chmod(p("nosearch").c_str(), 0600), 0);  // its owner may read it, not search it
  ASSERT_EQ(::chmod(p("searchable-at-open").c_str(), 0700), 0);
  ExtraMount m(dir_->file("mnt-user"), data_ + "/client.toml", "", dir_->file("mount-user.log"), {}, 4321);
  ASSERT_TRUE(m.mounted()) << m.log();
  for (const char* name : {"nosearch", "searchable-at-open"}) {
    const std::string dir = dir_->file("mnt-user") + remote_dir() + "/" + name;
    EXPECT_EQ(as_other_user([&] {
                DIR* d = ::opendir(dir.c_str());
                if (d == nullptr) return 10 + errno;
                if (::chmod(dir.c_str(), 0600) != 0) return 3;  // its owner takes search permission away
                int named = 0;
                while (dirent* e = ::readdir(d)) named += std::string(e->d_name) == "f";
                ::closedir(d);
                if (named != 1) return 1;
                struct stat st {};
                if (::stat((dir + "/f").c_str(), &st) == 0) return 2;
                return errno == EACCES ? 0 : 100 + errno;
              }),
              0)
        << name << ": 1: not listed; 2: stat through the directory succeeded; 3: chmod; 10 + errno: opendir; "
        << "100 + errno: stat";
  }
}

// fstat of a file removed while open here gives the length its handles know
// now: after an O_TRUNC open, 0 (it gave the length from before the
// truncate, which the File's opening attributes still held).
TEST_F(FuseTest, AFileRemovedWhileOpenKeepsTheLengthOfItsTruncate) {
  ASSERT_TRUE(write_all(p("f"), "0123456789"));
  int fd = ::open(p("f").c_str(), O_RDONLY | O_TRUNC);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  ASSERT_EQ(::unlink(p("f").c_str()), 0) << std::strerror(errno);
  struct stat st {};
  ASSERT_EQ(::fstat(fd, &st), 0) << std::strerror(errno);
  EXPECT_EQ(st.st_size, 0);
  EXPECT_EQ(st.st_nlink, 0u);
  ::close(fd);
}

// A write-only open needs write permission only, with writeback_cache too
// (where the kernel fills partial pages with reads through the handle).
TEST_F(FuseTest, AWriteOnlyOpenNeedsNoReadPermission) {
  std::string f = p("dropbox");
  ASSERT_TRUE(write_all(f, "0123456789abcdef", 0602));
  ASSERT_EQ(::chmod(f.c_str(), 0602), 0);
  EXPECT_EQ(as_other_user([&] {
              int fd = ::open(f.c_str(), O_WRONLY);
              if (fd < 0) return 10 + errno;
              if (::pwrite(fd, "XY", 2, 4) != 2) return 2;
              char c;
              if (::read(fd, &c, 1) != -1 || errno != EBADF) return 3;
              return ::close(fd) == 0 ? 0 : 4;
            }),
            0);
  EXPECT_EQ(read_all(f), "0123XY6789abcdef");
}

// allow_other serves other users: the kernel then checks permissions
// (default_permissions is implied). Without it, a user ran a file whose x
// bit is only its owner's, and stat-ed through a directory it may not
// search once its owner had looked the name up.
TEST_F(FuseTest, AllowOtherImpliesDefaultPermissions) {
  ASSERT_TRUE(write_all(p("script"), "#!/bin/sh\nexit 7\n", 0744));
  ASSERT_EQ(::chmod(p("script").c_str(), 0744), 0);
  ASSERT_EQ(::mkdir(p("nosearch").c_str(), 0744), 0);
  ASSERT_EQ(::chmod(p("nosearch").c_str(), 0744), 0);
  ASSERT_TRUE(write_all(p("nosearch/f"), "z", 0644));
  ExtraMount m(dir_->file("mnt-other"), data_ + "/client.toml", "allow_other", dir_->file("mount-other.log"));
  ASSERT_TRUE(m.mounted()) << m.log();
  const std::string dir = dir_->file("mnt-other") + remote_dir();
  std::string script = dir + "/script";
  ASSERT_EQ(::access(script.c_str(), X_OK), 0);  // root
  struct stat st {};
  ASSERT_EQ(::stat((dir + "/nosearch/f").c_str(), &st), 0);  // root looks the name up: a cached dentry
  EXPECT_EQ(as_other_user([&] {
              ::execl(script.c_str(), script.c_str(), nullptr);
              return errno == EACCES ? 0 : 10 + errno;
            }),
            0);
  EXPECT_EQ(as_other_user([&] {
              struct stat st {};
              if (::stat((dir + "/nosearch/f").c_str(), &st) == 0) return 1;
              return errno == EACCES ? 0 : 10 + errno;
            }),
            0);
  // Read permission without search permission lists the names (readdirplus
  // included), as on Linux.
  EXPECT_EQ(as_other_user([&] {
              DIR* d = ::opendir((dir + "/nosearch").c_str());
              if (!d) return 10 + errno;
              bool found = false;
              errno = 0;
              while (dirent* e = ::readdir(d)) found |= std::string(e->d_name) == "f";
              int err = errno;
              ::closedir(d);
              return err != 0 ? 10 + err : found ? 0 : 1;
            }),
            0)
      << "10 + errno";
}

// One handle's failed write (sticky in its File) is that handle's: reads
// through other handles of the file go on. They failed with its error.
TEST_F(FuseTest, AnotherHandlesFailedWriteDoesNotFailReads) {
  ASSERT_TRUE(write_all(p("f"), "0123456789"));
  // The mount's first chunk write fails.
  ExtraMount m(dir_->file("mnt-fault"), data_ + "/client.toml", "", dir_->file("mount-fault.log"),
               {"WEFT_FAULTS=client.write.fail=1:1"});
  ASSERT_TRUE(m.mounted()) << m.log();
  const std::string f = dir_->file("mnt-fault") + remote_dir() + "/f";
  int w = ::open(f.c_str(), O_WRONLY);
  ASSERT_GE(w, 0) << std::strerror(errno);
  ASSERT_EQ(::pwrite(w, "ab", 2, 20), 2);
  int r = ::open(f.c_str(), O_RDONLY);
  ASSERT_GE(r, 0) << std::strerror(errno);
  char buf[64];
  for (int i = 0; i < 3; ++i) {
    ssize_t n = ::pread(r, buf, sizeof buf, 0);
    ASSERT_GE(n, 10) << "read " << i << ": " << std::strerror(errno);
    EXPECT_EQ(std::string(buf, 10), "0123456789");
  }
  int w2 = ::open(f.c_str(), O_WRONLY);  // open before the failure is reported
  ASSERT_GE(w2, 0) << std::strerror(errno);
  EXPECT_EQ(::fsync(w), -1) << "the writer's own failure is reported to it";
  // Through another descriptor: once (as Linux reports a writeback error
  // once per descriptor), not at every fsync while the failed one is open.
  EXPECT_EQ(::fsync(w2), -1) << "another handle's failure, the first time";
  EXPECT_EQ(::fsync(w2), 0) << std::strerror(errno);
  // One opened after the failure was reported does not hear of it (Linux's errseq).
  int w3 = ::open(f.c_str(), O_WRONLY);
  ASSERT_GE(w3, 0) << std::strerror(errno);
  EXPECT_EQ(::fsync(w3), 0) << std::strerror(errno);
  ::close(w3);
  // (With writeback_cache the kernel writes cached pages back through a
  // handle of its choosing, maybe the failed one: docs/fuse.md.)
  if (!writeback_cache_mode()) {
    ASSERT_EQ(::pwrite(w2, "cd", 2, 30), 2);
    EXPECT_EQ(::fsync(w2), 0) << "its own writes are durable: " << std::strerror(errno);
  }
  EXPECT_EQ(::fsync(w), -1) << "the failed handle's own failure stays";
  ::close(w2);
  ::close(w);
  ::close(r);
}

// A failed length report is no failure for good: the next flush reports
// again. Each fsync through another descriptor that finds it failing again
// says so (it used to say it once per pair of handles, then 0 while the
// length meta holds still left the bytes out).
TEST_F(FuseTest, AnFsyncReportsEveryFailedLengthReportOfAnotherHandle) {
  ExtraMount m(dir_->file("mnt-report"), data_ + "/client.toml", "", dir_->file("mount-report.log"),
               {"WEFT_FAULTS=client.report_length.lost=1:2"});
  ASSERT_TRUE(m.mounted()) << m.log();
  const std::string f = dir_->file("mnt-report") + remote_dir() + "/lost-report";
  int w = ::open(f.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(w, 0) << std::strerror(errno);
  int w2 = ::open(f.c_str(), O_WRONLY);
  ASSERT_GE(w2, 0) << std::strerror(errno);
  ASSERT_EQ(::pwrite(w, "abcdef", 6, 0), 6);
  EXPECT_EQ(::fsync(w2), -1) << "the first lost report";
  EXPECT_EQ(errno, EIO) << std::strerror(errno);
  EXPECT_EQ(::fsync(w2), -1) << "the second, lost again: the length is still not meta's";
  EXPECT_EQ(::fsync(w2), 0) << "the third goes through: " << std::strerror(errno);
  EXPECT_EQ(::close(w2), 0) << std::strerror(errno);
  EXPECT_EQ(::close(w), 0) << "a report that went through in the end is no failure: " << std::strerror(errno);
  struct stat st{};
  ASSERT_EQ(::stat(p("lost-report").c_str(), &st), 0) << std::strerror(errno);
  EXPECT_EQ(st.st_size, 6);
}

// A handle's write-back failure reaches the other descriptors of the file
// after that handle was closed too (as Linux keeps a mapping's write-back
// error for every descriptor): close(2) of the failed one says so, the
// close of a duplicate of another descriptor tells it without using it up,
// and that descriptor's next fsync tells it once. (Whether the failed
// handle's RELEASE has run before that fsync is the kernel's timing: the
// answer is the same either way; the code before this test failed it when
// the release came first.)
TEST_F(FuseTest, AClosedHandlesFailureIsReportedToTheOtherDescriptorsOnce) {
  ASSERT_TRUE(write_all(p("closed-fail"), "0123456789"));
  ExtraMount m(dir_->file("mnt-cf"), data_ + "/client.toml", "", dir_->file("mount-cf.log"),
               {"WEFT_FAULTS=client.write.fail=1:1"});
  ASSERT_TRUE(m.mounted()) << m.log();
  const std::string f = dir_->file("mnt-cf") + remote_dir() + "/closed-fail";
  int w = ::open(f.c_str(), O_WRONLY);
  ASSERT_GE(w, 0) << std::strerror(errno);
  int w2 = ::open(f.c_str(), O_WRONLY);
  ASSERT_GE(w2, 0) << std::strerror(errno);
  ASSERT_EQ(::pwrite(w, "ab", 2, 20), 2);
  EXPECT_EQ(::close(w), -1) << "the failed write's own descriptor";
  int dup = ::dup(w2);
  ASSERT_GE(dup, 0) << std::strerror(errno);
  EXPECT_EQ(::close(dup), -1) << "close(2) of a duplicate: FLUSH tells it";
  EXPECT_EQ(::fsync(w2), -1) << "another descriptor, after the failed one was closed";
  EXPECT_EQ(::fsync(w2), 0) << std::strerror(errno);
  EXPECT_EQ(::close(w2), 0) << std::strerror(errno);
}

// A close whose data and length went through but whose end of the session
// at meta was lost (meta's session reaper ends it) lost nothing: it is no
// write-back failure for the file's other descriptors (their fsync said EIO).
TEST_F(FuseTest, ALostEndOfSessionAtCloseIsNoFailureForOtherDescriptors) {
  ExtraMount m(dir_->file("mnt-cl"), data_ + "/client.toml", "", dir_->file("mount-cl.log"),
               {"WEFT_FAULTS=client.close.lost=1:1"});
  ASSERT_TRUE(m.mounted()) << m.log();
  const std::string f = dir_->file("mnt-cl") + remote_dir() + "/f";
  int w = ::open(f.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(w, 0) << std::strerror(errno);
  int w2 = ::open(f.c_str(), O_WRONLY);
  ASSERT_GE(w2, 0) << std::strerror(errno);
  ASSERT_EQ(::pwrite(w, "abcdef", 6, 0), 6);
  ASSERT_EQ(::fsync(w), 0) << std::strerror(errno);  // so that the close has only the session to end
  ::close(w);  // its RELEASE (the lost end of session) follows, on the kernel's time: fsync before and after it
  for (auto until = std::chrono::steady_clock::now() + 1500ms; std::chrono::steady_clock::now() < until;) {
    ASSERT_EQ(::fsync(w2), 0) << std::strerror(errno);
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_EQ(::close(w2), 0) << std::strerror(errno);
  EXPECT_EQ(read_all(p("f")), "abcdef");
}

// A READDIR's reply lets the kernel finish getdents: the process may close
// the directory and RELEASEDIR (which frees the handle) run on another
// worker at once. The READDIR held the handle's mutex past its reply and
// unlocked freed memory (heap corruption: the mount daemon died in malloc).
// The fault point widens the window after the reply; RELEASEDIR asserts no
// READDIR still holds the handle.
TEST_F(FuseTest, ADirectoryClosedRightAfterAListingReplyIsNotUsedAfterItsRelease) {
  ASSERT_EQ(::mkdir(p("rd").c_str(), 0755), 0);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(write_all(p("rd/e" + std::to_string(i)), "x"));
  ExtraMount m(dir_->file("mnt-rd"), data_ + "/client.toml", "", dir_->file("mount-rd.log"),
               {"WEFT_FAULTS=fuse.readdir.after_reply"});
  ASSERT_TRUE(m.mounted()) << m.log();
  const std::string d = dir_->file("mnt-rd") + remote_dir() + "/rd";
  for (int i = 0; i < 50; ++i) {
    DIR* dir = ::opendir(d.c_str());
    ASSERT_NE(dir, nullptr) << "listing " << i << ": " << std::strerror(errno) << "\n" << m.log();
    int entries = 0;
    while (::readdir(dir) != nullptr) ++entries;
    ::closedir(dir);
    EXPECT_EQ(entries, 5) << "listing " << i;  // ".", ".." and three files
  }
}

// mmap: MAP_PRIVATE works in every mode; MAP_SHARED (read-only too) fails
// with ENODEV on direct_io mounts (libfuse 3.14 cannot ask for
// FUSE_DIRECT_IO_ALLOW_MMAP; docs/fuse.md).
TEST_F(FuseTest, MmapOfAFile) {
  ASSERT_TRUE(write_all(p("f"), "mapped bytes"));
  int fd = ::open(p("f").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  void* priv = ::mmap(nullptr, 12, PROT_READ, MAP_PRIVATE, fd, 0);
  ASSERT_NE(priv, MAP_FAILED) << std::strerror(errno);
  EXPECT_EQ(std::string(static_cast<const char*>(priv), 12), "mapped bytes");
  ::munmap(priv, 12);
  void* shared = ::mmap(nullptr, 12, PROT_READ, MAP_SHARED, fd, 0);
  if (mount_options().find("direct_io") != std::string::npos) {
    EXPECT_EQ(shared, MAP_FAILED);
    EXPECT_EQ(errno, ENODEV);
  } else {
    ASSERT_NE(shared, MAP_FAILED) << std::strerror(errno);
    EXPECT_EQ(std::string(static_cast<const char*>(shared), 12), "mapped bytes");
    ::munmap(shared, 12);
  }
  ::close(fd);
}

// The kernel sends CREATE for a name it holds no inode for. When that name is
// a symlink by now (made through another mount while this one kept a negative
// entry, or in a race), the open follows it as open(2) does: the daemon
// answers ESTALE, and the kernel redoes the open with a fresh lookup.
TEST_F(FuseTest, CreateOfANameThatIsASymlinkByNowFollowsIt) {
  SecondMount other;
  mount_again(other, "negative", "negative_timeout=600");
  ASSERT_EQ(other.error, "");
  const std::string& mp2 = other.mp;
  const std::string there = mp2 + "/" + base_.substr(mnt_.size() + 1);
  struct stat st;
  EXPECT_EQ(::lstat((there + "/latest").c_str(), &st), -1);  // negative entries, kept 600 s
  EXPECT_EQ(::lstat((there + "/fresh").c_str(), &st), -1);
  EXPECT_EQ(::lstat((there + "/excl").c_str(), &st), -1);
  ASSERT_TRUE(write_all(p("ckpt-1"), "old contents"));
  ASSERT_EQ(::symlink("ckpt-1", p("latest").c_str()), 0);
  ASSERT_EQ(::symlink("ckpt-2", p("fresh").c_str()), 0);  // dangling
  ASSERT_EQ(::symlink("ckpt-3", p("excl").c_str()), 0);
  int fd = ::open((there + "/latest").c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
  EXPECT_GE(fd, 0) << "existing target: " << std::strerror(errno);
  if (fd >= 0) {
    EXPECT_EQ(::write(fd, "new", 3), 3);
    EXPECT_EQ(::close(fd), 0);
  }
  EXPECT_EQ(read_all(there + "/ckpt-1"), "new");  // here: with writeback_cache the first mount keeps what it cached
  fd = ::open((there + "/fresh").c_str(), O_CREAT | O_WRONLY, 0644);
  EXPECT_GE(fd, 0) << "dangling link: " << std::strerror(errno);
  if (fd >= 0) {
    EXPECT_EQ(::close(fd), 0);
  }
  ASSERT_EQ(::lstat(p("ckpt-2").c_str(), &st), 0) << "the dangling link's target is created";
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(::open((there + "/excl").c_str(), O_CREAT | O_WRONLY | O_EXCL, 0644), -1);
  EXPECT_EQ(errno, EEXIST);
  EXPECT_EQ(::lstat(p("ckpt-3").c_str(), &st), -1);
  EXPECT_TRUE(S_ISLNK(::lstat(p("excl").c_str(), &st) == 0 ? st.st_mode : 0));
}

// Last (gtest runs in declaration order): a second mount whose daemon is
// SIGKILLed; `weft umount --lazy` must leave a usable directory behind.
// `weft umount` run by root detaches a Weft mount only: another file system
// mounted there (here a tmpfs) is left alone, --lazy or not.
TEST(Umount, AsRootItLeavesAMountOfAnotherKindAlone) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to mount a tmpfs";
  testing::TempDir dir;
  const std::string mp = dir.file("tmpfs");
  ASSERT_EQ(::mkdir(mp.c_str(), 0755), 0);
  if (::mount("none", mp.c_str(), "tmpfs", 0, "size=1m") != 0)
    GTEST_SKIP() << "cannot mount a tmpfs here: " << std::strerror(errno);
  struct Unmount {
    std::string path;
    ~Unmount() { ::umount2(path.c_str(), MNT_DETACH); }
  } cleanup{mp};
  for (bool lazy : {false, true}) {
    std::vector<std::string> args{"umount", mp};
    if (lazy) args.push_back("--lazy");
    auto u = run_weft(args, dir.file(lazy ? "umount-lazy.log" : "umount.log"), 30s);
    EXPECT_NE(u.code, 0) << u.log;
    EXPECT_NE(u.log.find("not a Weft mount"), std::string::npos) << u.log;
    EXPECT_TRUE(is_mounted(mp)) << "weft umount detached a tmpfs";
  }
}

TEST_F(FuseTest, KilledDaemonThenLazyUmount) {
  std::string mp2 = dir_->file("mnt2");
  ASSERT_EQ(::mkdir(mp2.c_str(), 0755), 0);
  std::string pid_file = dir_->file("mount2.pid");
  auto m = run_weft({"mount", mp2, "--config", data_ + "/client.toml", "--background", "--pid-file", pid_file},
                    dir_->file("mount2.log"), 60s);
  ASSERT_EQ(m.code, 0) << m.log;
  pid_t pid = read_pid(pid_file);
  ASSERT_GT(pid, 0);
  // The same file system: what the first mount wrote is visible here.
  ASSERT_TRUE(write_all(p("seen-by-both"), "both"));
  EXPECT_EQ(read_all(mp2 + "/" + base_.substr(mnt_.size() + 1) + "/seen-by-both"), "both");
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  EXPECT_TRUE(wait_pid_gone(pid, 10s));
  int err = stat_with_timeout(mp2, 5s);
  // The kernel answers ENOTCONN, or ECONNABORTED while it is still tearing the connection down.
  EXPECT_TRUE(err == ENOTCONN || err == ECONNABORTED) << "stat on a mount whose daemon died: " << std::strerror(err);
  auto u = run_weft({"umount", "--lazy", mp2}, dir_->file("umount2.log"), 30s);
  EXPECT_EQ(u.code, 0) << u.log;
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(stat_with_timeout(mp2, 5s), 0);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
  EXPECT_FALSE(is_mounted(mp2));
  unmount_hard(mp2);
}

}  // namespace
}  // namespace weft
