#include "benchsuite/access.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "weft/client.h"

namespace weft::bench {
namespace {

constexpr long kFuseSuperMagic = 0x65735546;

std::string join(const std::string& root, const std::string& rel) {
  if (rel.empty()) return root;
  if (root.empty() || root == "/") return "/" + rel;
  return root + "/" + rel;
}

// ---- POSIX ----

class PosixHandle final : public Handle {
 public:
  PosixHandle(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  ~PosixHandle() override {
    if (fd_ >= 0) ::close(fd_);
  }
  Result<size_t> pread(std::span<std::byte> dst, uint64_t offset) override {
    size_t done = 0;
    while (done < dst.size()) {
      ssize_t n = ::pread(fd_, dst.data() + done, dst.size() - done, static_cast<off_t>(offset + done));
      if (n < 0) {
        if (errno == EINTR) continue;
        return errno_error(errno, "read " + path_);
      }
      if (n == 0) break;
      done += static_cast<size_t>(n);
    }
    return done;
  }
  Result<void> pwrite(std::span<const std::byte> src, uint64_t offset) override {
    size_t done = 0;
    while (done < src.size()) {
      ssize_t n = ::pwrite(fd_, src.data() + done, src.size() - done, static_cast<off_t>(offset + done));
      if (n < 0) {
        if (errno == EINTR) continue;
        return errno_error(errno, "write " + path_);
      }
      done += static_cast<size_t>(n);
    }
    return {};
  }
  Result<void> fsync() override {
    if (::fsync(fd_) != 0) return errno_error(errno, "fsync " + path_);
    return {};
  }
  void drop_cache() override {
    if (fd_ >= 0) (void)::posix_fadvise(fd_, 0, 0, POSIX_FADV_DONTNEED);
  }
  Result<void> close() override {
    int fd = fd_;
    fd_ = -1;
    if (fd >= 0 && ::close(fd) != 0) return errno_error(errno, "close " + path_);
    return {};
  }

 private:
  int fd_;
  std::string path_;
};

class PosixAccess final : public Access {
 public:
  PosixAccess(std::string root, std::string kind) : root_(std::move(root)), kind_(std::move(kind)) {}
  std::string kind() const override { return kind_; }
  std::string target() const override { return root_; }

  Result<std::unique_ptr<Handle>> open(const std::string& rel, int flags) override {
    std::string p = join(root_, rel);
    int fd = ::open(p.c_str(), flags | O_CLOEXEC, 0644);
    if (fd < 0) return errno_error(errno, "open " + p);
    return std::make_unique<PosixHandle>(fd, p);
  }
  Result<void> mkdirs(const std::string& rel) override {
    std::error_code ec;
    std::filesystem::create_directories(join(root_, rel), ec);
    if (ec) return error(code_from_errno(ec.value()), "mkdir {}: {}", join(root_, rel), ec.message());
    return {};
  }
  Result<uint64_t> stat(const std::string& rel) override {
    struct ::stat st{};
    std::string p = join(root_, rel);
    if (::stat(p.c_str(), &st) != 0) return errno_error(errno, "stat " + p);
    return static_cast<uint64_t>(st.st_size);
  }
  Result<void> remove(const std::string& rel) override {
    std::string p = join(root_, rel);
    if (::unlink(p.c_str()) == 0) return {};
    if (errno == EISDIR || errno == EPERM) {
      if (::rmdir(p.c_str()) == 0) return {};
    }
    return errno_error(errno, "remove " + p);
  }
  Result<void> remove_tree(const std::string& rel) override {
    std::error_code ec;
    std::filesystem::remove_all(join(root_, rel), ec);
    if (ec) return error(code_from_errno(ec.value()), "remove {}: {}", join(root_, rel), ec.message());
    return {};
  }
  Result<std::unique_ptr<Access>> session() override { return std::make_unique<PosixAccess>(root_, kind_); }
  std::string make_cold() override { return drop_page_cache(); }

 private:
  std::string root_;
  std::string kind_;
};

// ---- native (libweft) ----

class NativeHandle final : public Handle {
 public:
  explicit NativeHandle(std::shared_ptr<File> f) : f_(std::move(f)) {}
  ~NativeHandle() override {
    if (f_) (void)f_->close();
  }
  Result<size_t> pread(std::span<std::byte> dst, uint64_t offset) override { return f_->pread(dst, offset); }
  Result<void> pwrite(std::span<const std::byte> src, uint64_t offset) override {
    size_t done = 0;
    while (done < src.size()) {
      auto n = f_->pwrite(src.subspan(done), offset + done);
      if (!n) return std::unexpected(n.error());
      if (*n == 0) return error(Code::kIoError, "pwrite wrote nothing");
      done += *n;
    }
    return {};
  }
  Result<void> fsync() override { return f_->fsync(); }
  Result<void> close() override {
    auto f = std::move(f_);
    return f ? f->close() : Result<void>{};
  }

 private:
  std::shared_ptr<File> f_;
};

class NativeAccess final : public Access {
 public:
  NativeAccess(std::string target, ClientOptions options, std::string root, std::unique_ptr<Client> client)
      : target_(std::move(target)), options_(std::move(options)), root_(std::move(root)), client_(std::move(client)) {}

  static Result<std::unique_ptr<NativeAccess>> connect(const std::string& target, const ClientOptions& o,
                                                       const std::string& root) {
    auto c = Client::connect(o);
    if (!c) return std::unexpected(c.error());
    return std::make_unique<NativeAccess>(target, o, root, std::move(*c));
  }

  std::string kind() const override { return "native"; }
  std::string target() const override { return target_; }

  Result<std::unique_ptr<Handle>> open(const std::string& rel, int flags) override {
    std::string p = join(root_, rel);
    auto f = client_->open_path(client_->default_cred(), p, flags, 0644);
    if (!f) return error(f.error().code(), "open {}: {}", p, f.error().message());
    return std::make_unique<NativeHandle>(std::move(*f));
  }
  Result<void> mkdirs(const std::string& rel) override {
    return client_->mkdirs(client_->default_cred(), join(root_, rel), 0755);
  }
  Result<uint64_t> stat(const std::string& rel) override {
    auto n = client_->resolve(client_->default_cred(), join(root_, rel), true);
    if (!n) return std::unexpected(n.error());
    return n->size;
  }
  Result<void> remove(const std::string& rel) override {
    return client_->remove_path(client_->default_cred(), join(root_, rel));
  }
  Result<void> remove_tree(const std::string& rel) override { return remove_tree_abs(join(root_, rel)); }
  Result<std::unique_ptr<Access>> session() override {
    ClientOptions o = options_;
    o.io_threads = 1;
    auto a = connect(target_, o, root_);
    if (!a) return std::unexpected(a.error());
    return std::unique_ptr<Access>(std::move(*a));
  }
  std::string make_cold() override {
    auto c = Client::connect(options_);
    std::string what;
    if (c) {
      client_ = std::move(*c);
      what = "fresh native client";
    } else {
      what = "fresh native client FAILED (" + c.error().message() + "); kept the old one";
    }
    if (options_.statahead_ttl_s > 0) what += fmt::format(" (statahead {:g} s)", options_.statahead_ttl_s);
    if (options_.early_read_bytes_max == 0) what += " (early reads off)";
    return what + "; " + drop_page_cache();
  }

 private:
  Result<void> remove_tree_abs(const std::string& p) {
    auto n = client_->resolve(client_->default_cred(), p, false);
    if (!n) {
      if (n.error().code() == Code::kNotFound) return {};
      return std::unexpected(n.error());
    }
    if (n->is_dir()) {
      auto list = client_->list_path(client_->default_cred(), p);
      if (!list) return std::unexpected(list.error());
      for (const auto& e : *list) {
        if (e.name == "." || e.name == "..") continue;
        WEFT_RETURN_IF_ERROR(remove_tree_abs(p + "/" + e.name));
      }
    }
    if (p == "/" ) return {};
    auto r = client_->remove_path(client_->default_cred(), p);
    if (!r && r.error().code() != Code::kNotFound) return r;
    return {};
  }

  std::string target_;
  ClientOptions options_;
  std::string root_;
  std::unique_ptr<Client> client_;
};

}  // namespace

std::string drop_page_cache() {
  ::sync();
  std::ofstream f("/proc/sys/vm/drop_caches");
  if (!f) return fmt::format("page cache NOT dropped (cannot open /proc/sys/vm/drop_caches: {}; reads may be warm)",
                             std::strerror(errno));
  f << "3\n";
  f.flush();
  if (!f) return "page cache NOT dropped (writing /proc/sys/vm/drop_caches failed; reads may be warm)";
  return "page cache dropped (sync; echo 3 > /proc/sys/vm/drop_caches)";
}

Result<std::unique_ptr<Access>> open_access(const std::string& target, const std::string& config,
                                            double statahead_s, std::optional<size_t> early_read_bytes) {
  constexpr std::string_view kScheme = "weft://";
  if (target.starts_with(kScheme)) {
    std::string rest = target.substr(kScheme.size());
    auto slash = rest.find('/');
    std::string addr = slash == std::string::npos ? rest : rest.substr(0, slash);
    std::string root = slash == std::string::npos ? "/" : rest.substr(slash);
    while (root.size() > 1 && root.back() == '/') root.pop_back();
    ClientOptions o;
    o.config_path = config;
    o.cluster = addr;
    o.name = "weft-bench";
    o.statahead_ttl_s = statahead_s;
    if (early_read_bytes) o.early_read_bytes_max = *early_read_bytes;
    auto a = NativeAccess::connect(target, o, root);
    if (!a) return std::unexpected(a.error());
    if (root != "/") {
      if (auto r = (*a)->mkdirs(""); !r) return error(r.error().code(), "mkdir {}: {}", target, r.error().message());
    }
    return std::unique_ptr<Access>(std::move(*a));
  }
  if (target.empty()) return error(Code::kInvalidArgument, "empty target");
  std::string root = target;
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  std::error_code ec;
  std::filesystem::create_directories(root, ec);
  if (ec) return error(Code::kInvalidArgument, "cannot create {}: {}", root, ec.message());
  struct ::statfs sf{};
  std::string kind = "directory";
  if (::statfs(root.c_str(), &sf) == 0 && static_cast<long>(sf.f_type) == kFuseSuperMagic) kind = "mount";
  return std::unique_ptr<Access>(std::make_unique<PosixAccess>(root, kind));
}

}  // namespace weft::bench
