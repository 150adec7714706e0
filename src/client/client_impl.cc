// The implementation of weft::Client (include/weft/client.h).
#include <fcntl.h>
#include <unistd.h>

#include <condition_variable>
#include <future>
#include <map>
#include <set>
#include <thread>
#include <tuple>

#include "client/batch_workers.h"
#include "client/client_lease.h"
#include "client/core.h"
#include "client/dir_ahead.h"
#include "client/early_read.h"
#include "client/file_impl.h"
#include "client/placement.h"
#include "client/read_holder.h"
#include "client/remove_tree.h"
#include "client/truncate.h"
#include "common/fault.h"
#include "common/logging.h"
#include "common/random.h"
#include "meta/permission.h"

namespace weft {

namespace client {
namespace {

constexpr int kSymlinkDepthMax = 40;

Cred process_cred() {
  Cred c;
  c.uid = ::geteuid();
  c.gid = ::getegid();
  int n = ::getgroups(0, nullptr);
  if (n > 0) {
    std::vector<gid_t> groups(static_cast<size_t>(n));
    n = ::getgroups(n, groups.data());
    for (int i = 0; i < n; ++i)
      if (groups[static_cast<size_t>(i)] != c.gid) c.groups.push_back(groups[static_cast<size_t>(i)]);
  }
  return c;
}

// Access mode 3 (O_ACCMODE, Linux's "ioctl only" open) needs read and write
// permission, as open(2) checks it, and O_TRUNC applies.
bool wants_write(int flags) { return (flags & O_ACCMODE) != O_RDONLY; }
bool wants_read(int flags) { return (flags & O_ACCMODE) != O_WRONLY; }

class ClientImpl final : public Client {
 public:
  ClientImpl(std::unique_ptr<Core> core, std::unique_ptr<ClientLease> lease)
      : core_(std::move(core)),
        ahead_(ahead_options(core_->options)),
        hints_(hint_options(core_->options)),
        lease_(std::move(lease)) {
    if (core_->options.hold_open_files) {
      holder_ = std::make_unique<ReadHolder>(
          [this](std::span<const Ino> inos, std::chrono::milliseconds timeout, uint64_t seq) {
            return core_->meta->hold_reads(core_->cred, inos, timeout, seq);
          },
          [this] { return read_only_open_inos(); });
      holder_->start();
    }
    core_->dirty->set_pressure([this] { send_all_dirty(); });
    core_->truncate_open = [this](const Cred& cred, Ino ino, uint64_t length, uint64_t session) {
      return truncate_open(cred, ino, length, session);
    };
    // On an I/O thread (a send's completion).
    core_->chunk_written = [this](Ino ino, uint64_t index, const FileImpl* writer) {
      auto files = open_files(ino);
      // The writer is held by its send's callback: never the last reference here.
      std::erase_if(files, [&](const auto& f) { return f.get() == writer; });
      while (WEFT_FAULT("client.chunk_written.hold")) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // tests
      for (auto& f : files) f->drop_read_ahead(index);
      release_off_io(std::move(files));
    };
    core_->flush_other_writers = [this](Ino ino, const FileImpl* reader) {
      uint64_t size = 0;
      for (auto& f : open_files(ino, &size)) {
        if (f.get() == reader) continue;
        f->flush_before_read();
        size = std::max(size, f->written_end());
      }
      return size;
    };
    core_->order_other_writers = [this](Ino ino, const FileImpl* writer, uint64_t offset, uint64_t length) {
      for (auto& f : open_files(ino))
        if (f.get() != writer) f->order_before_write(offset, length);
    };
    core_->local_size = [this](Ino ino) {
      uint64_t size = 0;
      for (auto& f : open_files(ino, &size)) size = std::max(size, f->written_end());
      return size;
    };
    core_->unreported_end = [this](Ino ino) {
      uint64_t end = 0;
      for (auto& f : open_files(ino)) end = std::max(end, f->unreported_end());
      return end;
    };
  }

  ~ClientImpl() override {
    write_batches_.reset();  // finishes the submitted write batches
    // Close what the caller left open (flushes its data), then stop the threads.
    std::vector<std::shared_ptr<FileImpl>> open;
    {
      std::lock_guard lock(files_mu_);
      for (auto& [ino, list] : files_)
        for (auto& w : list.files)
          if (auto f = w.lock()) open.push_back(std::move(f));
    }
    for (auto& f : open) (void)f->close();
    open.clear();
    {
      // Submitted read batches run on the I/O threads: let them finish first.
      std::unique_lock lock(reads_mu_);
      reads_cv_.wait(lock, [&] { return reads_running_ == 0; });
    }
    if (holder_) holder_->stop();
    core_->closer->stop();  // before the lease: what it drops, the lease's end closes
    lease_->stop();
    core_->refusals->stop();
    core_->releaser->stop();
    core_->routing->stop();
    core_->io->stop();
  }

  const Cred& default_cred() const override { return core_->cred; }
  Stats stats() const override {
    return Stats{.early_reads = early_reads_.load(), .early_reads_kept = early_reads_kept_.load()};
  }
  uint64_t length_reports() const override { return core_->length_reports.load(); }
  std::string cluster_description() const override {
    std::string addrs;
    for (const auto& ep : core_->cluster.mgmtd) addrs += (addrs.empty() ? "" : ",") + ep.to_string();
    return fmt::format("mgmtd {} (from {})", addrs, core_->cluster.source);
  }

  // ---- namespace ----
  Result<Inode> lookup(const Cred& cred, Ino parent, std::string_view name) override {
    return asked_with_local_size([&] { return core_->meta->lookup(cred, parent, name); });
  }
  Result<Inode> getattr(const Cred& cred, Ino ino) override {
    return asked_with_local_size([&] { return core_->meta->getattr(cred, ino); });
  }
  Result<Inode> setattr(const Cred& cred, Ino ino, const SetAttr& attr) override {
    // Writes buffered here stamp mtime when they are reported (at a flush):
    // before an explicit time is set, not over it later (cp -p, tar, rsync -t).
    if (attr.mtime_ns)
      for (auto& f : open_files(ino))
        if (f->writable()) (void)f->flush();  // a failure is the File's, reported by its next call
    if (attr.size) {
      WEFT_RETURN_IF_ERROR(truncate_open(cred, ino, *attr.size));
      SetAttr rest = attr;
      rest.size.reset();
      if (!rest.mode && !rest.uid && !rest.gid && !rest.atime_ns && !rest.mtime_ns) return getattr(cred, ino);
      WEFT_TRY(Inode updated, core_->meta->setattr(cred, ino, rest));
      return with_local_size(std::move(updated));
    }
    WEFT_TRY(Inode n, core_->meta->setattr(cred, ino, attr));
    return with_local_size(std::move(n));
  }
  Result<DirPage> readdir(const Cred& cred, Ino dir, std::string_view cookie, uint32_t limit) override {
    return core_->meta->readdir(cred, dir, cookie, limit);
  }
  Result<Inode> mkdir(const Cred& cred, Ino parent, std::string_view name, uint32_t mode) override {
    return core_->meta->mkdir(cred, parent, name, mode);
  }
  Result<Inode> symlink(const Cred& cred, Ino parent, std::string_view name, std::string_view target) override {
    return core_->meta->symlink(cred, parent, name, target);
  }
  Result<Inode> mknod(const Cred& cred, Ino parent, std::string_view name, InodeType type, uint32_t mode,
                      uint64_t rdev) override {
    return core_->meta->mknod(cred, parent, name, type, mode, rdev);
  }
  Result<std::string> readlink(const Cred& cred, Ino ino) override { return core_->meta->readlink(cred, ino); }
  Result<Inode> link(const Cred& cred, Ino ino, Ino new_parent, std::string_view new_name) override {
    return core_->meta->link(cred, ino, new_parent, new_name);
  }
  Result<void> unlink(const Cred& cred, Ino parent, std::string_view name) override {
    return unlink_at(cred, parent, name, std::nullopt);
  }
  Result<void> rmdir(const Cred& cred, Ino parent, std::string_view name) override {
    return moving_dirs([&] { return core_->meta->rmdir(cred, parent, name); });
  }
  Result<void> rename(const Cred& cred, Ino parent, std::string_view name, Ino new_parent, std::string_view new_name,
                      RenameFlags flags) override {
    return moving_dirs([&] { return core_->meta->rename(cred, parent, name, new_parent, new_name, flags); });
  }
  Result<StatFs> statfs(const Cred& cred) override {
    WEFT_TRY(StatFs s, core_->meta->statfs(cred));
    // Capacity is what the storage targets report to mgmtd (divided by the
    // replication of the first chain table: what files can actually hold),
    // fetched now: mgmtd updates usage without a new routing version.
    auto fresh = core_->routing->fetch_fresh();
    if (!fresh) WEFT_LOG_DEBUG("statfs: usage from the cached routing ({})", fresh.error());
    RoutingPtr routing = fresh ? *fresh : core_->routing->current();
    // Targets sharing a filesystem count its free space once (cluster_space).
    const mgmt::SpaceTotals space = mgmt::cluster_space(*routing);
    uint32_t replicas = 1;
    if (!routing->tables.empty()) replicas = std::max<uint32_t>(1, routing->tables.begin()->second.replicas);
    if (space.capacity_bytes > 0) {
      s.capacity_bytes = space.capacity_bytes / replicas;
      s.used_bytes = space.used_bytes / replicas;
    }
    return s;
  }
  Result<std::string> getxattr(const Cred& cred, Ino ino, std::string_view name) override {
    return core_->meta->getxattr(cred, ino, name);
  }
  Result<void> setxattr(const Cred& cred, Ino ino, std::string_view name, std::string_view value,
                        XattrFlags flags) override {
    return core_->meta->setxattr(cred, ino, name, value, flags);
  }
  Result<std::vector<std::string>> listxattr(const Cred& cred, Ino ino) override {
    return core_->meta->listxattr(cred, ino);
  }
  Result<void> removexattr(const Cred& cred, Ino ino, std::string_view name) override {
    return core_->meta->removexattr(cred, ino, name);
  }
  Result<Layout> get_layout(const Cred& cred, Ino dir) override { return core_->meta->get_layout(cred, dir); }
  Result<void> set_layout(const Cred& cred, Ino dir, const Layout& layout) override {
    return core_->meta->set_layout(cred, dir, layout);
  }

  // ---- files ----
  Result<std::shared_ptr<File>> open(const Cred& cred, Ino ino, int flags) override {
    bool write = wants_write(flags);
    WEFT_TRY(meta::Reply reply, core_->meta->open(cred, ino, meta::OpenFlags{wants_read(flags), write}));
    if (!reply.has_inode) {
      WEFT_TRY(reply.inode, core_->meta->getattr(cred, ino));
    }
    if (reply.inode.is_dir()) {
      if (reply.session_id) (void)core_->closer->close(cred, ino, reply.session_id, false);
      return error(Code::kIsDirectory, "inode {} is a directory", ino);
    }
    WEFT_TRY(auto file, make_file_or_close(cred, std::move(reply.inode), reply.session_id, {wants_read(flags), write}));
    if (flags & O_TRUNC) WEFT_RETURN_IF_ERROR(truncate_opened(cred, *file, write));
    if ((flags & O_APPEND) && write) file->set_append();
    return handed_out(std::move(file));
  }

  // O_TRUNC of an open: through the File's write session, or without one:
  // Linux truncates for O_RDONLY | O_TRUNC too (POSIX leaves it open), which
  // needs write permission as any truncate without a session does (meta
  // checks it, after the open checked read permission: a refusal of either
  // leaves the file as it was). The File, registered here, learns the length.
  Result<void> truncate_opened(const Cred& cred, FileImpl& file, bool write) {
    if (write) return file.truncate(0);
    return truncate_open(cred, file.ino(), 0);
  }

  Result<std::shared_ptr<File>> open_read_known(const Cred& cred, const Inode& inode) override {
    if (inode.is_dir()) return error(Code::kIsDirectory, "inode {} is a directory", inode.ino);
    if (!inode.is_file() && !inode.is_special())  // a special file: make_file's answer, as every open's
      return error(Code::kInvalidArgument, "inode {} is not a regular file", inode.ino);
    // The same rule meta applies to a read-only open (meta/permission.h).
    WEFT_RETURN_IF_ERROR(meta::check_access(inode, cred, meta::kAccessRead));
    WEFT_TRY(auto file, make_file(cred, inode, 0, meta::OpenFlags{}));
    return handed_out(std::move(file));
  }

  Result<std::pair<Inode, std::shared_ptr<File>>> create(const Cred& cred, Ino parent, std::string_view name,
                                                         uint32_t mode, int flags) override {
    return create_in(cred, parent, name, mode, flags, std::nullopt);
  }

  Result<std::pair<Inode, std::shared_ptr<File>>> create_in(const Cred& cred, Ino parent, std::string_view name,
                                                            uint32_t mode, int flags,
                                                            const std::optional<meta::ParentCheck>& expect_parent) {
    bool write = wants_write(flags);
    WEFT_TRY(meta::Reply reply,
             core_->meta->create(cred, parent, name, mode, (flags & O_EXCL) != 0,
                                 meta::OpenFlags{wants_read(flags), write}, expect_parent));
    if (!reply.has_inode) return error(Code::kProtocol, "create {}: meta answered without the inode", name);
    Inode inode = reply.inode;
    if (inode.is_dir()) return error(Code::kIsDirectory, "{} is a directory", name);
    WEFT_TRY(auto file, make_file_or_close(cred, std::move(reply.inode), reply.session_id, {wants_read(flags), write}));
    // A file made by this call holds no chunk; one that existed may, past
    // any length (a writer's not reported yet, a dead writer's): truncate(0)
    // removes them all, as open() with O_TRUNC does. (The length here counts
    // what Files open in this client wrote and did not report yet; a meta
    // from before `existed` never says so.)
    if ((flags & O_TRUNC) && (reply.existed || with_local_size(inode).size > 0)) {
      WEFT_RETURN_IF_ERROR(truncate_opened(cred, *file, write));
      inode.size = 0;
    }
    if ((flags & O_APPEND) && write) file->set_append();
    return std::pair<Inode, std::shared_ptr<File>>(std::move(inode), handed_out(std::move(file)));
  }

  // ---- paths ----
  // Errors name the path, as every path call's do.
  Result<Inode> resolve(const Cred& cred, std::string_view path, bool follow_last) override {
    auto r = resolve_unnamed(cred, path, follow_last);
    if (!r) return error(path_error(r.error(), path));
    return r;
  }

  // resolve() for callers that name the path in their own errors.
  Result<Inode> resolve_unnamed(const Cred& cred, std::string_view path, bool follow_last) {
    int depth = 0;
    bool cached = false;
    auto r = resolve_from(cred, kRootIno, path, follow_last, depth, nullptr, &cached);
    if (r || !cached) return r;
    // A directory on the way came from the cache (up to a second old), and
    // another client may have replaced it since (a checkpoint published by a
    // directory exchange): a name missing there is asked for afresh.
    Code c = r.error().code();
    if (c != Code::kNotFound && c != Code::kNotDirectory && c != Code::kStaleHandle) return r;
    depth = 0;
    return resolve_from(cred, kRootIno, path, follow_last, depth, nullptr, nullptr, /*fresh=*/true);
  }

  Result<std::shared_ptr<File>> open_path(const Cred& cred, std::string_view path, int flags, uint32_t mode) override {
    const bool dir_only = names_directory(path);
    if (flags & O_CREAT) WEFT_RETURN_IF_ERROR(not_root(path, (flags & O_EXCL) ? Code::kExists : Code::kIsDirectory));
    if ((flags & O_CREAT) && dir_only) return error(Code::kIsDirectory, "{}: names a directory (ends in '/')", path);
    if (flags & O_CREAT) return create_path(cred, path, flags, mode);
    const bool read_only = !wants_write(flags) && !(flags & O_TRUNC);
    if (auto parts = split_path(path); read_only && !dir_only && parts && !parts->empty()) {
      // The first-epoch case: parent from the directory cache, then lookup +
      // permission check in one round trip; symlinks take the general path.
      std::unique_ptr<EarlyRead> early;
      auto opened = open_read_at_path(cred, path, &early);
      if (!opened) return error(path_error(opened.error(), path));
      if (!opened->is_symlink()) {
        if (opened->is_dir()) return error(Code::kIsDirectory, "{} is a directory", path);
        const bool early_valid = early && EarlyRead::matches(early->listed(), *opened);
        WEFT_TRY(auto file, make_file(cred, std::move(*opened), 0, meta::OpenFlags{}));
        if (early_valid) keep_early_read(*file, *early);
        return handed_out(std::move(file));
      }
      if (flags & O_NOFOLLOW) return error(Code::kLoop, "{} is a symlink (O_NOFOLLOW)", path);
    }
    auto n = resolve_unnamed(cred, path, /*follow_last=*/(flags & O_NOFOLLOW) == 0);
    if (!n) return error(path_error(n.error(), path));
    auto f = open(cred, n->ino, flags);
    if (!f) return error(path_error(f.error(), path));
    return f;
  }

  // open_path with O_CREAT: creates the path's last name or opens the file
  // it names. A symlink there (meta answers kLoop for it) is followed as
  // open(2) follows it: an existing target is opened, a missing one created;
  // at most kSymlinkDepthMax links in a row, then kLoop. O_EXCL: kExists
  // (from meta, before it looks at the type); O_NOFOLLOW: kLoop stays.
  Result<std::shared_ptr<File>> create_path(const Cred& cred, std::string_view path, int flags, uint32_t mode) {
    std::string at(path);
    for (int followed = 0;; ++followed) {
      auto created = with_parent(cred, at, [&](const ParentDir& parent, const std::optional<meta::ParentCheck>& check) {
        return create_in(cred, parent.dir.ino, parent.name, mode, flags, check);
      });
      if (created) return created->second;
      if (created.error().code() != Code::kLoop || (flags & (O_EXCL | O_NOFOLLOW)))
        return error(path_error(created.error(), path));
      // The name is a symlink, or (resolve tells) the way to it has too many.
      auto link = resolve_unnamed(cred, at, /*follow_last=*/false);
      if (!link) return error(path_error(link.error(), path));
      if (followed == kSymlinkDepthMax)
        return error(Code::kLoop, "{}: too many levels of symbolic links", path);
      if (!link->is_symlink()) continue;  // replaced meanwhile: create there again
      auto target = core_->meta->readlink(cred, link->ino);
      if (!target) return error(path_error(target.error(), path));
      if (target->starts_with('/')) {
        at = std::move(*target);
        continue;
      }
      // Relative to the link's directory: the path up to its last name (".."
      // in the target is then the parent of where that path got).
      WEFT_TRY(auto parts, split_path(at));
      std::string dir;
      for (size_t i = 0; i + 1 < parts.size(); ++i) dir += "/" + parts[i];
      at = dir + "/" + *target;
    }
  }

  // mkdir -p: level by level from the root, each asked of meta, nothing
  // from the directory cache (a directory another client moved meanwhile is
  // never made under, nor the missing levels made there).
  Result<void> mkdirs(const Cred& cred, std::string_view path, uint32_t mode) override {
    WEFT_TRY(auto parts, split_path(path));
    Ino dir = kRootIno;
    std::string so_far;
    for (const auto& part : parts) {
      so_far += "/" + part;
      WEFT_TRY(dir, mkdirs_level(cred, dir, part, so_far, mode));
    }
    return {};
  }

  // One level of mkdirs: directory `name` in `dir` (`so_far`: its path),
  // made if missing. Looked up first: an existing level needs no write
  // permission on its parent (mkdir -p /usr/bin works for anyone). A symlink
  // there is followed, as mkdir -p follows it.
  Result<Ino> mkdirs_level(const Cred& cred, Ino dir, const std::string& name, const std::string& so_far,
                           uint32_t mode) {
    for (int tries = 0;; ++tries) {
      auto n = core_->meta->lookup(cred, dir, name);
      if (n && n->is_symlink()) {
        int depth = 0;
        n = resolve_from(cred, kRootIno, so_far, true, depth, nullptr, nullptr, /*fresh=*/true);
        if (!n) return error(path_error(n.error(), so_far));
      }
      if (n && n->is_dir()) return n->ino;
      if (n) return error(Code::kNotDirectory, "{} exists and is not a directory", so_far);
      if (n.error().code() != Code::kNotFound) return error(path_error(n.error(), so_far));
      auto made = core_->meta->mkdir(cred, dir, name, mode);
      if (made) return made->ino;
      // kExists: another client made it (or something else) since the lookup.
      if (made.error().code() != Code::kExists || tries == 3) return error(path_error(made.error(), so_far));
    }
  }

  Result<void> remove_path(const Cred& cred, std::string_view path) override {
    // Files first: one round trip (a lookup to learn the type would double it);
    // meta refuses to unlink a directory with kIsDirectory, and then it is rmdir.
    WEFT_RETURN_IF_ERROR(not_root_rmdir(path));
    const bool dir_only = names_directory(path);
    auto r = with_parent(cred, path, [&](const ParentDir& parent, const std::optional<meta::ParentCheck>& check) {
      auto rmdir = [&] { return moving_dirs([&] { return core_->meta->rmdir(cred, parent.dir.ino, parent.name, check); }); };
      if (dir_only && parent.name != "." && parent.name != "..") return rmdir();
      auto removed = unlink_at(cred, parent.dir.ino, parent.name, check);
      if (!removed && removed.error().code() == Code::kIsDirectory && parent.name != "." && parent.name != "..")
        removed = rmdir();
      return removed;
    });
    if (!r) return error(path_error(r.error(), path));
    return {};
  }

  Result<void> remove_tree(const Cred& cred, std::string_view path, const TreeErrorFn& on_error) override {
    auto checked = tree_top(cred, path);
    if (!checked) {
      if (on_error) on_error(checked.error());
      return std::unexpected(checked.error());
    }
    std::string shown(path);
    while (shown.size() > 1 && shown.back() == '/') shown.pop_back();
    return remove_tree_at(*this, cred, checked->dir.ino, checked->name, shown, on_error);
  }

  Result<void> unlink_path(const Cred& cred, std::string_view path) override {
    WEFT_RETURN_IF_ERROR(not_root(path, Code::kIsDirectory));
    const bool dir_only = names_directory(path);
    auto r = with_parent(cred, path, [&](const ParentDir& parent, const std::optional<meta::ParentCheck>& check)
                                         -> Result<void> {
      if (dir_only) WEFT_RETURN_IF_ERROR(must_be_dir(cred, parent.dir.ino, parent.name));  // unlink refuses one anyway
      return unlink_at(cred, parent.dir.ino, parent.name, check);
    });
    if (!r) return error(path_error(r.error(), path));
    return {};
  }

  Result<Inode> mkdir_path(const Cred& cred, std::string_view path, uint32_t mode) override {
    WEFT_RETURN_IF_ERROR(not_root(path, Code::kExists));
    auto r = with_parent(cred, path, [&](const ParentDir& parent, const std::optional<meta::ParentCheck>& check) {
      return core_->meta->mkdir(cred, parent.dir.ino, parent.name, mode, check);
    });
    if (!r) return error(path_error(r.error(), path));
    return r;
  }

  Result<Inode> symlink_path(const Cred& cred, std::string_view target, std::string_view path) override {
    WEFT_RETURN_IF_ERROR(not_root(path, Code::kExists));
    auto r = with_parent(cred, path, [&](const ParentDir& parent, const std::optional<meta::ParentCheck>& check) {
      return core_->meta->symlink(cred, parent.dir.ino, parent.name, target, check);
    });
    if (!r) return error(path_error(r.error(), path));
    return r;
  }

  Result<void> rmdir_path(const Cred& cred, std::string_view path) override {
    WEFT_RETURN_IF_ERROR(not_root_rmdir(path));
    auto r = with_parent(cred, path, [&](const ParentDir& parent, const std::optional<meta::ParentCheck>& check) {
      if (parent.name == "." || parent.name == "..")
        return Result<void>(error(Code::kInvalidArgument, "rmdir of '{}'", parent.name));
      return moving_dirs([&] { return core_->meta->rmdir(cred, parent.dir.ino, parent.name, check); });
    });
    if (!r) return error(path_error(r.error(), path));
    return {};
  }

  Result<void> rename_path(const Cred& cred, std::string_view from, std::string_view to,
                           RenameFlags flags) override {
    // Both parents asked of meta level by level: nothing moved by another
    // client meanwhile steers the rename (it takes no ParentCheck). As
    // Linux: both parents first, then the root's refusals.
    auto parent_of = [&](std::string_view path) -> Result<ParentDir> {
      if (path.empty()) return error(Code::kNotFound, "an empty path");
      if (is_root(path)) return ParentDir{};
      return resolve_parent(cred, path, ParentFrom::kFresh);
    };
    WEFT_TRY(auto src, parent_of(from));
    WEFT_TRY(auto dst, parent_of(to));
    WEFT_RETURN_IF_ERROR(not_root(from, Code::kBusy));
    WEFT_RETURN_IF_ERROR(not_root(to, (flags == RenameFlags::kNoReplace) ? Code::kExists : Code::kBusy));
    if (names_directory(from) || names_directory(to)) {
      if (auto d = must_be_dir(cred, src.dir.ino, src.name); !d)
        return error(d.error().with_context(fmt::format("rename {} -> {}", from, to)));
    }
    auto r = moving_dirs([&] { return core_->meta->rename(cred, src.dir.ino, src.name, dst.dir.ino, dst.name, flags); });
    if (!r) return error(r.error().with_context(fmt::format("rename {} -> {}", from, to)));
    return {};
  }

  Result<std::vector<DirEntry>> list_path(const Cred& cred, std::string_view path) override {
    auto dir = resolve_unnamed(cred, path, true);
    if (!dir) return error(path_error(dir.error(), path));
    if (!dir->is_dir()) return error(Code::kNotDirectory, "{} is not a directory", path);
    std::vector<DirEntry> out;
    std::string cookie;
    while (true) {
      auto page = core_->meta->readdir(cred, dir->ino, cookie, 1024);
      if (!page) return error(path_error(page.error(), path));
      for (auto& e : page->entries) out.push_back(std::move(e));
      if (page->eof) break;
      cookie = page->cookie;
    }
    return out;
  }

  // ---- batches ----
  std::vector<Result<size_t>> read_batch(const Cred& cred, std::span<const ReadOp> ops) override {
    return submit_reads(cred, std::vector<ReadOp>(ops.begin(), ops.end())).get();
  }
  std::future<std::vector<Result<size_t>>> submit_reads(const Cred& cred, std::vector<ReadOp> ops) override;
  std::future<std::vector<Result<size_t>>> submit_writes(std::vector<WriteOp> ops) override {
    auto done = std::make_shared<std::promise<std::vector<Result<size_t>>>>();
    auto future = done->get_future();
    // Batches that write a common file run one after another, in submission order.
    std::vector<uint64_t> inodes;
    for (const auto& op : ops)
      if (op.file) inodes.push_back(op.file->ino());
    const size_t n = ops.size();
    bool queued = write_batches_->submit([done, ops = std::move(ops)] {
      try {
        std::vector<Result<size_t>> out;
        for (const auto& op : ops) {
          if (!op.file) {
            out.push_back(error(Code::kBadHandle, "write op without a file"));
            continue;
          }
          out.push_back(op.file->pwrite(op.src, op.offset));
        }
        // Durable together: each distinct file is flushed once.
        std::map<File*, Result<void>> flushed;
        for (const auto& op : ops)
          if (op.file && !flushed.contains(op.file.get())) flushed.emplace(op.file.get(), op.file->flush());
        for (size_t i = 0; i < ops.size(); ++i) {
          if (!ops[i].file) continue;
          const auto& f = flushed.at(ops[i].file.get());
          if (out[i] && !f) out[i] = std::unexpected(f.error());
        }
        done->set_value(std::move(out));
      } catch (...) {
        done->set_exception(std::current_exception());  // as std::async did; not a terminate on the worker
      }
    }, std::move(inodes));
    if (!queued) {
      std::vector<Result<size_t>> refused;
      for (size_t i = 0; i < n; ++i)
        refused.push_back(error(Code::kOverloaded, "write batch not run: the system refused a worker thread"));
      done->set_value(std::move(refused));
    }
    return future;
  }

 private:
  // One submitted read batch, from its plan to the promised results.
  struct ReadJob {
    Cred cred;
    std::vector<Ino> inos;          // per op
    std::vector<uint64_t> offsets;  // per op
    std::vector<Result<size_t>> out;
    std::vector<GroupedRead> reads;                  // the ops split at chunk boundaries
    std::vector<size_t> owner;                       // per read: the index of its op
    std::promise<std::vector<Result<size_t>>> done;
  };
  // Fills job.out (sizes, or the error of an op's file) and job.reads;
  // blocks for the metadata of ops given without layout and size.
  void plan_reads(const Cred& cred, std::span<const ReadOp> ops, ReadJob& job);
  // The reads run on the I/O threads: one request per storage server, then
  // what those could not serve one range at a time through the full read
  // path (other replicas, routing refresh, retries); then finish_reads.
  void start_grouped_reads(std::shared_ptr<ReadJob> job);
  void start_single_reads(std::shared_ptr<ReadJob> job);
  // Fills the results in and fulfils the promise; the batch no longer runs.
  // A range that came back short inside the length is a hole, or its file
  // was removed meanwhile (read-only readers hold no session): meta is asked,
  // off the I/O thread, and the ops of a removed file fail with kStaleHandle
  // instead of reading as zeros.
  void finish_reads(std::shared_ptr<ReadJob> job);
  void fulfil_reads(ReadJob& job);

  static Status path_error(const Status& s, std::string_view path) {
    return Status(s.code(), fmt::format("{}: {}", path, s.message()));
  }

  static bool file_gone(const std::weak_ptr<FileImpl>& w) { return w.expired(); }

  // What the user gets of a File: it closes the File when dropped (FileHandle).
  static std::shared_ptr<File> handed_out(std::shared_ptr<FileImpl> file) {
    return std::make_shared<FileHandle>(std::move(file));
  }

  // make_file for an open meta just made: a File that cannot be made closes
  // the write session meta opened (else it stayed while the client lived).
  Result<std::shared_ptr<FileImpl>> make_file_or_close(const Cred& cred, Inode inode, uint64_t session,
                                                        meta::OpenFlags access) {
    const Ino ino = inode.ino;
    auto file = make_file(cred, std::move(inode), session, access);
    if (!file && session != 0) (void)core_->closer->close(cred, ino, session, false);
    return file;
  }

  Result<std::shared_ptr<FileImpl>> make_file(const Cred& cred, Inode inode, uint64_t session, meta::OpenFlags access) {
    // What meta's open refuses too; a listing (statahead) may offer one.
    if (inode.is_special()) return meta::special_not_openable(inode.ino);
    WEFT_TRY(auto stripe, file_stripe(*core_, inode.layout));
    Ino ino = inode.ino;
    auto file = std::make_shared<FileImpl>(*core_, cred, std::move(inode), session, access);
    file->set_stripe(std::move(stripe));
    std::lock_guard lock(files_mu_);
    OpenList& list = files_[ino];
    std::erase_if(list.files, file_gone);
    file->set_shared(shared_of_locked(list));  // before anyone else can see the File
    list.files.push_back(file);
    sweep_files_locked();
    return file;
  }

  // Drops the entries of files that are gone once the map has doubled since
  // the last sweep (amortized O(1) per open). A weak_ptr to a make_shared
  // object keeps the object's memory, and a first epoch opens millions of
  // distinct files that are never looked up again: without this every
  // FileImpl ever opened stayed allocated.
  void sweep_files_locked() {
    if (files_.size() < 2 * files_after_sweep_ + 64) return;
    for (auto it = files_.begin(); it != files_.end();)
      it = unused_locked(it->second) ? files_.erase(it) : std::next(it);
    files_after_sweep_ = files_.size();
  }

  // The Files of `ino` open here; `closed_end`, if given, gets
  // OpenInode::closed_end, read after the Files were found open or not (a
  // File left out as closed raised it before it was seen closed).
  std::vector<std::shared_ptr<FileImpl>> open_files(Ino ino, uint64_t* closed_end = nullptr) {
    std::vector<std::shared_ptr<FileImpl>> out;
    std::lock_guard lock(files_mu_);
    auto it = files_.find(ino);
    if (it == files_.end()) return out;
    for (auto& w : it->second.files)
      if (auto f = w.lock(); f && f->is_open()) out.push_back(std::move(f));
    if (closed_end != nullptr)
      if (auto shared = it->second.shared.lock()) *closed_end = shared->closed_end.load();
    if (out.empty() && it->second.pins == 0) files_.erase(it);
    return out;
  }

  // Drops `files` where a File's destructor may block (it closes the File):
  // off the I/O threads, through the Releaser, when called on one. The user
  // may have dropped a File meanwhile, leaving its last reference here.
  void release_off_io(std::vector<std::shared_ptr<FileImpl>> files) {
    if (files.empty() || rpc::IoPool::current_context() == nullptr) return;
    core_->releaser->release(std::make_shared<std::vector<std::shared_ptr<FileImpl>>>(std::move(files)));
  }

  // Every inode with a File open here for reading only (what ReadHolder
  // names to meta: a File open for writing holds a write session). Nothing
  // of a File is called under files_mu_, and the references taken here go
  // through the Releaser: the user may drop a File meanwhile, and its
  // destructor closes it (a writer's flush waits for sends whose completions
  // take files_mu_).
  std::vector<Ino> read_only_open_inos() {
    std::vector<std::shared_ptr<FileImpl>> files;
    {
      std::lock_guard lock(files_mu_);
      for (auto& [ino, list] : files_)
        for (auto& w : list.files)
          if (auto f = w.lock()) files.push_back(std::move(f));  // never the last reference dropped here
    }
    std::vector<Ino> out;
    for (const auto& f : files)
      if (!f->writable() && f->is_open()) out.push_back(f->ino());
    if (!files.empty()) core_->releaser->release(std::make_shared<decltype(files)>(std::move(files)));
    return out;
  }

  struct OpenList;  // below, with files_

  // An inode's shared state held by a truncate, made if no File of it holds
  // one. Its entry stays while pinned (open_files and the sweep keep it), so
  // a File made meanwhile shares it (make_file) and waits for its locks.
  class InodePin {
   public:
    InodePin(ClientImpl& owner, Ino ino) : owner_(owner), ino_(ino) {
      std::lock_guard lock(owner_.files_mu_);
      OpenList& list = owner_.files_[ino];
      shared_ = shared_of_locked(list);
      ++list.pins;
    }
    ~InodePin() {
      std::lock_guard lock(owner_.files_mu_);
      auto it = owner_.files_.find(ino_);
      if (it == owner_.files_.end()) return;
      --it->second.pins;
      // Unpinned with no File left (a truncate that failed, or of a file
      // not open here): not kept for a later open_files or sweep to find.
      if (unused_locked(it->second)) owner_.files_.erase(it);
    }
    InodePin(const InodePin&) = delete;
    InodePin& operator=(const InodePin&) = delete;
    OpenInode& operator*() const { return *shared_; }
    OpenInode* operator->() const { return shared_.get(); }

   private:
    ClientImpl& owner_;
    const Ino ino_;
    std::shared_ptr<OpenInode> shared_;
  };

  // Drops the list's gone Files; whether the entry is needed no more (no
  // File left, no pin).
  static bool unused_locked(OpenList& list) {
    std::erase_if(list.files, file_gone);
    return list.files.empty() && list.pins == 0;
  }

  static std::shared_ptr<OpenInode> shared_of_locked(OpenList& list) {
    auto shared = list.shared.lock();
    if (!shared) {
      shared = std::make_shared<OpenInode>();
      list.shared = shared;
    }
    return shared;
  }

  void send_all_dirty() {
    std::vector<std::shared_ptr<FileImpl>> all;
    {
      std::lock_guard lock(files_mu_);
      for (auto& [ino, list] : files_)
        for (auto& w : list.files)
          if (auto f = w.lock()) all.push_back(std::move(f));
    }
    for (auto& f : all) f->send_dirty();
  }

  // Sets the length of `ino`. Every File of it open here flushes first (their
  // buffered bytes must not land after the cut), the chunks past the new end
  // are removed up to the longest length anyone here knows (writes a File
  // sent but did not report yet included), and each File learns the length.
  Result<void> truncate_open(const Cred& cred, Ino ino, uint64_t length, uint64_t session = 0) {
    // No write of a File open here buffers until every File learned the length
    // (OpenInode::cut). Made if no File is open: one opened meanwhile shares it
    // and waits (meta does not cap this client's own reports for its truncate,
    // so a write and report of such a File during the cut would leave its
    // bytes past the new end, its fsync answered).
    InodePin shared(*this, ino);
    // After the pin: an early read that counted this change saw the pin too
    // (client/early_read.h; counted before, a read could miss both).
    core_->local_changes.fetch_add(1);
    std::unique_lock cut(shared->cut);
    auto files = open_files(ino);
    flush_writers_of(files);
    // No length report of a File here reaches meta from now until every File learned the cut (OpenInode::reports).
    std::unique_lock no_reports(shared->reports);
    WEFT_TRY(Inode n, core_->meta->getattr(cred, ino));
    uint64_t old_size = n.size;
    for (auto& f : files) old_size = std::max(old_size, f->size());
    WEFT_RETURN_IF_ERROR(truncate_file(*core_, cred, n, old_size, length, session));
    for (auto& f : files) f->truncated_to(length);
    // Files made during the cut (they waited on it; meta may have answered
    // their open with the old length): they learn it too.
    for (auto& f : open_files(ino))
      if (std::find(files.begin(), files.end(), f) == files.end()) f->truncated_to(length);
    shared->lower_closed_end(length);
    return {};
  }

  // Flushes the Files open here for writing, so that what follows (a read,
  // a truncate) is ordered after their writes. Their failures are theirs:
  // each File reports its own at its next call, and a File whose writes
  // failed has nothing on its way to order after.
  static void flush_writers_of(const std::vector<std::shared_ptr<FileImpl>>& files) {
    for (auto& f : files) f->flush_before_read();
  }

  // An answer `ask` gets from meta, with_local_size. A length report of this
  // client that completes between meta's answer and with_local_size is in
  // neither (its writes no longer unreported, the answer older): the length
  // would be the one from before those writes, which the mount hands the
  // kernel (an O_APPEND writer's next write then lands at that old end). So
  // an answer across which a report completed is asked for again, at most
  // kAttrAsksMax times in all (the last answer is taken as it is).
  static constexpr int kAttrAsksMax = 3;
  template <class Ask>
  Result<Inode> asked_with_local_size(Ask ask) {
    for (int asked = 1;; ++asked) {
      const uint64_t reports = core_->length_reports.load();
      WEFT_TRY(Inode n, ask());
      while (WEFT_FAULT("client.attr_answer.hold")) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // tests
      n = with_local_size(std::move(n));
      if (!n.is_file() || core_->length_reports.load() == reports || asked == kAttrAsksMax) return n;
    }
  }

  // A file open here may be longer than meta knows (unreported writes).
  // Only those count: what a File knew at its open may be older than `n`.
  Inode with_local_size(Inode n) {
    if (!n.is_file()) return n;
    n.size = std::max(n.size, core_->unreported_end(n.ino));
    return n;
  }

  // The directory a path's last name lives in, and that name, asked of meta
  // (kMeta) or from the directory cache (kCache: `cached` is then its key,
  // the entry up to a second old). A directory another client moved or
  // replaced within the cache's second never receives a mutation: create and
  // remove take a cached parent only with meta's check (with_parent), rename
  // asks meta for both parents; a read-only open may read from a cached one.
  // kFresh: every directory on the way asked of meta too.
  enum class ParentFrom { kMeta, kCache, kFresh };
  // An entry a path walk went through (resolve_from's `levels`).
  struct PathLevel {
    meta::EntryCheck entry;
    bool cached = false;       // from the directory cache
    bool via_symlink = false;  // a symlink to the directory (meta cannot check it as an entry of it)
  };
  // Keyed by the caller's uid too: a lookup is a permission check (search on the parent).
  using DirKey = std::tuple<uint32_t, Ino, std::string>;
  // A directory taken from the cache: its entry, and whether that entry is a
  // symlink to it (meta cannot check such an entry against the directory).
  struct CachedEntry {
    DirKey key;
    bool via_symlink = false;
  };
  struct ParentDir {
    Inode dir;
    std::string name;
    std::optional<CachedEntry> cached;
    std::vector<PathLevel> levels;  // the walk to `dir`
  };
  Result<ParentDir> resolve_parent(const Cred& cred, std::string_view path, ParentFrom from) {
    WEFT_TRY(auto parts, split_path(path));
    if (parts.empty()) return error(Code::kInvalidArgument, "{}: the root has no parent", path);
    ParentDir out;
    out.name = parts.back();
    std::string parent_path;
    for (size_t i = 0; i + 1 < parts.size(); ++i) parent_path += "/" + parts[i];
    int depth = 0;
    auto dir = resolve_from(cred, kRootIno, parent_path.empty() ? "/" : parent_path, true, depth,
                            from == ParentFrom::kCache ? &out.cached : nullptr, nullptr, from == ParentFrom::kFresh,
                            &out.levels);
    if (!dir) return error(path_error(dir.error(), parent_path.empty() ? "/" : parent_path));
    if (!dir->is_dir()) return error(Code::kNotDirectory, "{} is not a directory", parent_path);
    out.dir = std::move(*dir);
    return out;
  }

  // A mutation by path (op: (parent, check) -> Result): the way to the parent
  // from the directory cache, verified by meta inside the mutation
  // (meta::ParentCheck: the parent's entry and every level above it, what
  // asking meta for each first guaranteed, in one round trip). A way that is
  // not what the cache says any more is asked for afresh and the mutation
  // runs once more there.
  template <class Op>
  auto with_parent(const Cred& cred, std::string_view path, Op&& op)
      -> decltype(op(std::declval<const ParentDir&>(), std::nullopt)) {
    WEFT_TRY(ParentDir parent, resolve_parent(cred, path, ParentFrom::kCache));
    if (parent.cached && parent.cached->via_symlink) {
      WEFT_TRY(parent, resolve_parent(cred, path, ParentFrom::kFresh));
    }
    std::optional<meta::ParentCheck> check = check_of(parent);
    auto r = op(parent, check);
    if (r || r.error().code() != Code::kStaleHandle || !check) return r;
    forget_dirs();
    WEFT_TRY(parent, resolve_parent(cred, path, ParentFrom::kFresh));
    return op(parent, std::nullopt);
  }

  // What Linux answers when a path mutation names the root, which has no
  // parent to do it in (mkdir "/": EEXIST, unlink: EISDIR, rmdir and
  // rename: EBUSY), or an empty path (ENOENT); another path passes.
  static bool is_root(std::string_view path) {
    auto parts = split_path(path);
    return !path.empty() && parts && parts->empty();
  }
  static Result<void> not_root(std::string_view path, Code code) {
    if (path.empty()) return error(Code::kNotFound, "an empty path");
    if (!is_root(path)) return {};
    return error(code, "{}: the root", path);
  }
  // rmdir(2)'s answer for the root: by its last name as written, "/." is
  // EINVAL and "/.." ENOTEMPTY, as for any other "." and ".."; else EBUSY.
  static Result<void> not_root_rmdir(std::string_view path) {
    if (path.empty() || !is_root(path)) return not_root(path, Code::kBusy);
    std::string_view last = path;
    while (!last.empty() && last.back() == '/') last.remove_suffix(1);
    last = last.substr(last.rfind('/') == std::string_view::npos ? 0 : last.rfind('/') + 1);
    if (last == ".") return error(Code::kInvalidArgument, "{}: rmdir of '.'", path);
    if (last == "..") return error(Code::kNotEmpty, "{}: rmdir of '..'", path);
    return error(Code::kBusy, "{}: the root", path);
  }

  // remove_tree's top: its parent afresh, after the refusals.
  Result<ParentDir> tree_top(const Cred& cred, std::string_view path) {
    // As GNU rm: "a/.." would empty a's parent, "/" the whole cluster.
    auto parts = split_path(path);
    if (!parts) return error(path_error(parts.error(), path));
    if (parts->empty()) return error(Code::kInvalidArgument, "{}: refusing to remove the root", path);
    if (parts->back() == "." || parts->back() == "..")
      return error(Code::kInvalidArgument, "{}: refusing to remove '.' or '..'", path);
    auto parent = resolve_parent(cred, path, ParentFrom::kFresh);
    if (!parent) return error(path_error(parent.error(), path));
    if (names_directory(path)) {
      if (auto d = must_be_dir(cred, parent->dir.ino, parent->name); !d) return error(path_error(d.error(), path));
    }
    return parent;
  }

  // A path ending in '/' names a directory: the entry there must be one
  // (asked of meta; a symlink is not followed), else kNotDirectory.
  Result<void> must_be_dir(const Cred& cred, Ino dir, const std::string& name) {
    WEFT_TRY(Inode n, core_->meta->lookup(cred, dir, name));
    if (!n.is_dir()) return error(Code::kNotDirectory, "{} is not a directory", name);
    return {};
  }

  // What meta checks of a walk that took something from the cache (nothing
  // for one asked of meta throughout). The parent's own entry is left out
  // only when it is a symlink to it: with_parent asks meta for it then.
  static std::optional<meta::ParentCheck> check_of(const ParentDir& parent) {
    const auto& levels = parent.levels;
    if (levels.empty() || std::none_of(levels.begin(), levels.end(), [](const PathLevel& l) { return l.cached; }))
      return std::nullopt;
    const PathLevel& own = levels.back();
    if (own.via_symlink || own.entry.ino != parent.dir.ino) return std::nullopt;
    meta::ParentCheck check{own.entry.dir, own.entry.name, {}};
    for (size_t i = 0; i + 1 < levels.size(); ++i)
      if (!levels[i].via_symlink) check.above.push_back(levels[i].entry);
    return check;
  }

  // A read-only open of `path` (one round trip: lookup + permission check at
  // meta) in a parent from the directory cache. That parent may have been
  // removed and made again by another client within the cache's second: when
  // nothing is found, the parent is asked for afresh and, if it is another
  // directory now, the open runs again there. A name that is really missing
  // costs one lookup more, as without the cache. (A parent moved away and
  // replaced within the second is read from where it went: the staleness of a
  // FUSE mount's entry cache.)
  // `early` given: an early read of the file may start beside the open
  // (client/early_read.h); the caller checks it against the answer.
  Result<Inode> open_read_at_path(const Cred& cred, std::string_view path,
                                  std::unique_ptr<EarlyRead>* early = nullptr) {
    WEFT_TRY(ParentDir parent, resolve_parent(cred, path, ParentFrom::kCache));
    if (auto listed = statahead(cred, parent.dir.ino, parent.name)) {
      // Meta's rules for a read-only open (a directory: EACCES before EISDIR).
      // The size is the listing's, as meta's answer would be (not widened by
      // this client's unflushed writes, which a reader would find as holes).
      if (!listed->is_symlink()) WEFT_RETURN_IF_ERROR(meta::check_access(*listed, cred, meta::kAccessRead));
      return std::move(*listed);
    }
    if (early != nullptr) *early = start_early_read(cred, parent.dir.ino, parent.name);
    auto r = early != nullptr && *early ? open_beside(**early, cred, parent.dir.ino, parent.name)
                                        : core_->meta->open_read_at(cred, parent.dir.ino, parent.name);
    if (r || r.error().code() != Code::kNotFound || !parent.cached) return r;
    if (early != nullptr) early->reset();  // read from the stale parent's listing
    forget_dir(parent.cached->key);
    auto fresh = resolve_parent(cred, path, ParentFrom::kMeta);
    if (!fresh || fresh->dir.ino == parent.dir.ino) return r;  // the first answer stands
    return core_->meta->open_read_at(cred, fresh->dir.ino, fresh->name);
  }

  static DirAhead::Options ahead_options(const ClientOptions& o) {
    DirAhead::Options a;
    a.ttl_s = std::max(0.0, o.statahead_ttl_s);
    return a;
  }

  // Listings for early reads only: with statahead on, its own listings answer
  // the opens (no meta round trip to overlap). A listing is a hint checked
  // against meta's answer, so its age bounds only the reads it wastes.
  static DirAhead::Options hint_options(const ClientOptions& o) {
    DirAhead::Options a;
    a.ttl_s = o.early_read_bytes_max > 0 && o.statahead_ttl_s <= 0 ? kHintTtlS : 0;
    return a;
  }
  static constexpr double kHintTtlS = 10;

  // `name` in `dir` from a statahead listing (ClientOptions::statahead_ttl_s),
  // listing `dir` first when opens keep missing there; nullopt: ask meta.
  // Rules against this client's own mutations (any thread): a mutation sent
  // since the last look drops every listing (DirAhead::sync, before each
  // find), so a listing fetched across one is gone before it is used; and a
  // directory is listed only while no mutation is under way, since one in
  // flight may land after the fetch read the directory.
  std::optional<Inode> statahead(const Cred& cred, Ino dir, const std::string& name) {
    return listed_entry(ahead_, cred, dir, name);
  }

  // `name` in `dir` from `listings` (nullopt: none), listing `dir` first
  // when they say so; the rules above.
  std::optional<Inode> listed_entry(DirAhead& listings, const Cred& cred, Ino dir, const std::string& name) {
    if (!listings.enabled()) return std::nullopt;
    meta::MetaClient& meta = *core_->meta;
    listings.sync(meta.mutations_sent());
    auto now = DirAhead::Clock::now();
    auto hit = listings.find(dir, name, cred, now);
    if (!hit && meta.mutations_done() == meta.mutations_sent() && listings.note_miss(dir, now)) {
      listings.list(*this, cred, dir);
      listings.sync(meta.mutations_sent());
      hit = listings.find(dir, name, cred, DirAhead::Clock::now());
    }
    if (!hit) return std::nullopt;
    return std::move(hit->inode);
  }

  // An early read of `name` in `dir` if a listing (hints_) names a regular
  // file no File open here for writing (or a truncate) may be changing;
  // null otherwise. The change count is read before that look (early_read.h).
  std::unique_ptr<EarlyRead> start_early_read(const Cred& cred, Ino dir, const std::string& name) {
    const uint64_t changes = core_->local_changes.load();
    auto listed = listed_entry(hints_, cred, dir, name);
    if (!listed || listed->ino == 0 || !listed->is_file() || changing_here(listed->ino)) return nullptr;
    auto early = EarlyRead::prepare(*core_, *listed, changes);
    if (early) early_reads_.fetch_add(1, std::memory_order_relaxed);
    return early;
  }

  // Meta's answer to the open of `name` in `dir`, asked before this thread
  // reads `early`'s bytes and read after (both calls on this thread: asking
  // through the I/O threads cost a hand-off and a wake-up more per open,
  // which lost more than the overlap gained on 4 KiB files).
  Result<Inode> open_beside(EarlyRead& early, const Cred& cred, Ino dir, const std::string& name) {
    // Tests: meta is asked only after the read and the hold below, as if its
    // answer came late (a change elsewhere meanwhile is then in it).
    const bool late = WEFT_FAULT("client.early_read.open_late");
    std::optional<meta::MetaClient::PendingOpen> open;
    if (!late) open = core_->meta->start_open_read_at(cred, dir, name);
    early.read_here();
    while (WEFT_FAULT("client.early_read.hold")) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // tests
    if (late) open = core_->meta->start_open_read_at(cred, dir, name);
    return core_->meta->finish_open_read_at(*open);
  }

  // Whether a File open here for writing, or a truncate, holds `ino`.
  bool changing_here(Ino ino) {
    for (const auto& f : open_files(ino))
      if (f->writable()) return true;
    std::lock_guard lock(files_mu_);
    auto it = files_.find(ino);
    return it != files_.end() && it->second.pins > 0;
  }

  // `file`, just made from an answer that matched `early`'s listing, takes
  // its bytes for its first read, unless data changed through this client
  // since the read began. Checked after the File holds them: from then on
  // a write here drops them as it drops read-ahead (chunk_written).
  void keep_early_read(FileImpl& file, EarlyRead& early) {
    const auto& got = early.got();
    if (!got || *got == 0) return;  // the File reads for itself
    size_t charged = 0;
    Buffer data = early.take_buffer(&charged);
    file.adopt_early_read(std::move(data), *got, charged);
    if (core_->local_changes.load() != early.changes_at_start()) return file.drop_early_read();
    early_reads_kept_.fetch_add(1, std::memory_order_relaxed);
  }

  // `last_cached` given: the path names a directory the caller goes on
  // through (the parent of what it opens), so its last component may come
  // from the cache too; *last_cached is then set to that entry.
  // `used_cache` given: set when a directory on the way came from the cache.
  // `fresh`: no directory from the cache (each is remembered still).
  // `levels` given: the entries of `path` itself walked through to a
  // directory (not "." or "..", not those inside a symlink's target).
  Result<Inode> resolve_from(const Cred& cred, Ino start, std::string_view path, bool follow_last, int& depth,
                             std::optional<CachedEntry>* last_cached = nullptr, bool* used_cache = nullptr,
                             bool fresh = false, std::vector<PathLevel>* levels = nullptr) {
    WEFT_TRY(auto parts, split_path(path));
    Ino dir = path.starts_with('/') ? kRootIno : start;
    if (parts.empty()) return getattr(cred, dir);
    const uint64_t cache_gen = dir_cache_gen();  // what is looked up from here on is remembered only under it
    const bool dir_only = names_directory(path);  // "a/": a followed and must be a directory
    if (dir_only) follow_last = true;
    for (size_t i = 0; i < parts.size(); ++i) {
      bool last = i + 1 == parts.size();
      bool on_the_way = !last || last_cached != nullptr;
      // Directories on the way come from the short-lived cache (the entry
      // timeout of a FUSE mount, for the path API); a last component that is
      // the target itself is always asked for, so attributes and sizes are current.
      // "." and ".." are never cached: a directory's parent changes when it
      // is moved (and meta could not check such an entry for ParentCheck).
      // Nor is a name followed by "..": stepping out of a directory taken from
      // a stale entry would land in wherever it was moved to, a place the path
      // never named.
      const bool dots = parts[i] == "." || parts[i] == "..";
      const bool left_by_dotdot = !last && parts[i + 1] == "..";
      std::optional<CachedDir> cached;
      if (on_the_way && !dots && !left_by_dotdot && !fresh) cached = cached_dir(cred, dir, parts[i]);
      if (cached && used_cache) *used_cache = true;
      Inode next;
      bool via_symlink = cached && cached->via_symlink;
      if (cached) {
        next = std::move(cached->dir);
      } else {
        WEFT_TRY(next, core_->meta->lookup(cred, dir, parts[i]));
      }
      if (next.type == InodeType::kSymlink && (!last || follow_last)) {
        if (++depth > kSymlinkDepthMax) return error(Code::kLoop, "too many levels of symbolic links");
        WEFT_TRY(std::string target, core_->meta->readlink(cred, next.ino));
        WEFT_TRY(next, resolve_from(cred, dir, target, true, depth, nullptr, used_cache, fresh));
        via_symlink = true;
      }
      if (levels && !dots && next.is_dir())
        levels->push_back(PathLevel{meta::EntryCheck{dir, parts[i], next.ino}, cached.has_value(), via_symlink});
      if (!last) {
        if (!next.is_dir()) return error(Code::kNotDirectory, "{} is not a directory", parts[i]);
        if (!cached && !dots) remember_dir(cred, dir, parts[i], next, via_symlink, cache_gen);
        dir = next.ino;
        continue;
      }
      // A directory looked up afresh as the last component replaces what the
      // cache had (up to a second old): so a caller that checks a directory
      // (weft.torch.load: its inode before and after) and then works below it
      // by path reaches that one, not an older one another client replaced.
      if (!cached && !dots && next.is_dir()) remember_dir(cred, dir, parts[i], next, via_symlink, cache_gen);
      if (cached && last_cached) *last_cached = CachedEntry{DirKey{cred.uid, dir, parts[i]}, via_symlink};
      if (dir_only && !next.is_dir()) return error(Code::kNotDirectory, "{} is not a directory", parts[i]);
      return with_local_size(std::move(next));
    }
    return error(Code::kInternal, "unreachable");
  }

  // ---- directory lookup cache (path API only) ----
  struct CachedDir {
    std::chrono::steady_clock::time_point until;
    Inode dir;
    bool via_symlink = false;  // the entry is a symlink to dir
  };
  std::optional<CachedDir> cached_dir(const Cred& cred, Ino parent, const std::string& name) {
    std::lock_guard lock(dir_cache_mu_);
    auto it = dir_cache_.find(DirKey{cred.uid, parent, name});
    if (it == dir_cache_.end()) return std::nullopt;
    if (std::chrono::steady_clock::now() > it->second.until) {
      dir_cache_.erase(it);
      return std::nullopt;
    }
    return it->second;
  }
  // `gen`: dir_cache_gen() before the lookup began. A forget since (a rename
  // or rmdir here) may have made the answer stale: it is not kept.
  void remember_dir(const Cred& cred, Ino parent, const std::string& name, const Inode& dir, bool via_symlink,
                    uint64_t gen) {
    std::lock_guard lock(dir_cache_mu_);
    if (gen != dir_cache_gen_) return;
    if (dir_cache_.size() > 65536) dir_cache_.clear();
    dir_cache_[DirKey{cred.uid, parent, name}] = CachedDir{std::chrono::steady_clock::now() + kDirCacheTtl, dir, via_symlink};
  }
  void forget_dir(const DirKey& key) {
    std::lock_guard lock(dir_cache_mu_);
    dir_cache_.erase(key);
  }
  // A rename or rmdir here: directories move or go. The cache is dropped
  // before (nothing cached steers the call) and after (nothing a lookup
  // racing it remembered stays: remember_dir's generation).
  template <class Call>
  auto moving_dirs(Call&& call) -> decltype(call()) {
    forget_dirs();
    auto r = call();
    forget_dirs();
    return r;
  }
  // An unlink here: its name leaves the cache too (a symlink to a directory
  // is cached under its name).
  Result<void> unlink_at(const Cred& cred, Ino dir, std::string_view name,
                         const std::optional<meta::ParentCheck>& check) {
    auto r = core_->meta->unlink(cred, dir, name, check);
    forget_dir(DirKey{cred.uid, dir, std::string(name)});
    return r;
  }
  // Any namespace change made here: forget everything (renames and removals move directories).
  void forget_dirs() {
    std::lock_guard lock(dir_cache_mu_);
    dir_cache_.clear();
    ++dir_cache_gen_;
  }
  uint64_t dir_cache_gen() {
    std::lock_guard lock(dir_cache_mu_);
    return dir_cache_gen_;
  }
  static constexpr auto kDirCacheTtl = std::chrono::seconds(1);
  std::mutex dir_cache_mu_;
  std::map<DirKey, CachedDir> dir_cache_;  // GUARDED_BY(dir_cache_mu_)
  uint64_t dir_cache_gen_ = 0;             // GUARDED_BY(dir_cache_mu_): forget_dirs() calls

  std::unique_ptr<Core> core_;
  DirAhead ahead_;
  DirAhead hints_;  // early reads' listings (hint_options)
  std::atomic<uint64_t> early_reads_{0};
  std::atomic<uint64_t> early_reads_kept_{0};
  std::unique_ptr<ClientLease> lease_;
  std::unique_ptr<ReadHolder> holder_;  // with ClientOptions::hold_open_files
  std::mutex reads_mu_;
  std::condition_variable reads_cv_;
  size_t reads_running_ = 0;  // GUARDED_BY(reads_mu_): submitted read batches not finished
  // Write batches run here; reset first in the destructor (its jobs need core_).
  std::unique_ptr<BatchWorkers> write_batches_ = std::make_unique<BatchWorkers>(4);
  // finish_reads' questions to meta (rare: a short range); idle until the first.
  BatchWorkers read_checks_{1};
  std::mutex files_mu_;
  struct OpenList {
    std::weak_ptr<OpenInode> shared;  // the Files' OpenInode
    std::vector<std::weak_ptr<FileImpl>> files;
    int pins = 0;  // InodePins holding `shared`: the entry stays
  };
  std::map<Ino, OpenList> files_;  // GUARDED_BY(files_mu_)
  size_t files_after_sweep_ = 0;                                 // GUARDED_BY(files_mu_)
};

std::future<std::vector<Result<size_t>>> ClientImpl::submit_reads(const Cred& cred, std::vector<ReadOp> ops) {
  auto job = std::make_shared<ReadJob>();
  auto future = job->done.get_future();
  plan_reads(cred, ops, *job);
  {
    std::lock_guard lock(reads_mu_);
    ++reads_running_;
  }
  start_grouped_reads(std::move(job));
  return future;
}

void ClientImpl::plan_reads(const Cred& cred, std::span<const ReadOp> ops, ReadJob& job) {
  job.cred = cred;
  job.out.assign(ops.size(), Result<size_t>(0));
  job.inos.reserve(ops.size());
  job.offsets.reserve(ops.size());
  for (const ReadOp& op : ops) {
    job.inos.push_back(op.ino);
    job.offsets.push_back(op.offset);
  }
  // Layouts and sizes: once per inode. The read permission is checked, as a
  // read-only open checks it (open_read_known), when any op of the inode
  // brings attributes (the first such op's are used) or asks meta; only
  // ops that all bring a bare layout and length (the caller vouches) skip it.
  struct FileInfo {
    Result<Inode> inode = error(Code::kInternal, "unset");
    std::vector<mgmt::ChainId> stripe;
    const ReadOp* first = nullptr;
    const ReadOp* with_attrs = nullptr;
    bool asks_meta = false;
  };
  std::map<Ino, FileInfo> files;
  for (const ReadOp& op : ops) {
    FileInfo& info = files[op.ino];
    if (!info.first) info.first = &op;
    if (op.attrs && !info.with_attrs) info.with_attrs = &op;
    if (!op.attrs && !(op.layout && op.file_size)) info.asks_meta = true;
  }
  for (auto& [ino, info] : files) {
    // Read-your-writes: what Files open here buffered goes out first.
    flush_writers_of(open_files(ino));
    const bool check = info.with_attrs || info.asks_meta;
    if (info.with_attrs) {
      const Inode& given = *info.with_attrs->attrs;
      info.inode = given.ino == ino ? Result<Inode>(given)
                                    : error(Code::kInvalidArgument, "attributes of inode {} given for a read of inode {}",
                                            given.ino, ino);
    } else if (info.asks_meta) {
      info.inode = getattr(cred, ino);
    } else {
      Inode n;
      n.ino = ino;
      n.layout = *info.first->layout;
      n.size = *info.first->file_size;
      info.inode = n;
    }
    if (!info.inode) continue;
    if (!info.inode->is_file()) {
      info.inode = info.inode->is_dir() ? error(Code::kIsDirectory, "inode {} is a directory", ino)
                                        : error(Code::kInvalidArgument, "inode {} is not a regular file", ino);
      continue;
    }
    if (check) {
      if (auto allowed = meta::check_access(*info.inode, cred, meta::kAccessRead); !allowed) {
        info.inode = std::unexpected(allowed.error());
        continue;
      }
    }
    auto stripe = file_stripe(*core_, info.inode->layout);
    if (!stripe) info.inode = std::unexpected(stripe.error());
    else info.stripe = std::move(*stripe);
  }
  for (size_t i = 0; i < ops.size(); ++i) {
    const ReadOp& op = ops[i];
    const FileInfo& info = files.at(op.ino);
    if (!info.inode) {
      job.out[i] = std::unexpected(info.inode.error());
      continue;
    }
    uint64_t size = info.inode->size;
    size_t want = op.offset >= size ? 0 : static_cast<size_t>(std::min<uint64_t>(op.dst.size(), size - op.offset));
    job.out[i] = want;
    for (const ChunkSpan& s : split_range(op.offset, want, info.inode->layout.chunk_bytes)) {
      ChunkAddress a{op.ino, s.chunk_index, chain_of_chunk(info.stripe, s.chunk_index), info.inode->layout.chunk_bytes};
      // Not read until read_group or read() says what it read: a range a
      // group left untouched (it failed on its way) is read alone.
      job.reads.push_back(GroupedRead{a, s.offset, op.dst.subspan(s.buffer_offset, s.length),
                                      error(Code::kInternal, "not read"), false});
      job.owner.push_back(i);
    }
  }
}

// A group's reply is held whole (up to kGroupBytesMax) until copied out:
// groups run within inflight_bytes_max at a time, so a batch of many GiB
// holds about that much, not all of it. The bound is per batch (concurrent
// batches and File reads each have their own), in requested bytes (reply
// buffers come in power-of-two sizes).
void ClientImpl::start_grouped_reads(std::shared_ptr<ReadJob> job) {
  std::span<GroupedRead> all(job->reads);
  auto groups = std::make_shared<std::vector<std::vector<size_t>>>(core_->chunks->group_reads(all));
  std::vector<size_t> bytes;
  for (const auto& members : *groups) {
    size_t n = 0;
    for (size_t k : members) n += all[k].dst.size();
    bytes.push_back(n);
  }
  spawn_windowed(
      *core_->io, std::move(bytes), core_->options.inflight_bytes_max,
      [this, all, groups](size_t i) { return core_->chunks->read_group(all, std::move((*groups)[i])); },
      [this, job]() mutable { start_single_reads(std::move(job)); });
}

void ClientImpl::start_single_reads(std::shared_ptr<ReadJob> job) {
  std::vector<size_t> alone;
  std::vector<Task<Result<uint32_t>>> singles;
  for (size_t k = 0; k < job->reads.size(); ++k) {
    GroupedRead& r = job->reads[k];
    if (!r.retry_alone && r.result) continue;
    alone.push_back(k);
    singles.push_back(core_->chunks->read(r.chunk, r.offset, r.dst));
  }
  spawn_all(*core_->io, std::move(singles),
            [this, job, alone = std::move(alone)](std::vector<Result<uint32_t>> results) {
              for (size_t j = 0; j < alone.size(); ++j) job->reads[alone[j]].result = std::move(results[j]);
              finish_reads(std::move(job));
            });
}

void ClientImpl::finish_reads(std::shared_ptr<ReadJob> job) {
  std::set<Ino> short_files;
  for (size_t k = 0; k < job->reads.size(); ++k) {
    const GroupedRead& r = job->reads[k];
    if (r.result && *r.result < r.dst.size()) short_files.insert(job->inos[job->owner[k]]);
  }
  if (short_files.empty()) return fulfil_reads(*job);
  // A short range is a hole, or the file was cut or removed meanwhile (its
  // chunks gone): meta says which, as pread asks (FileImpl::check_not_removed).
  // Copies: the job and its short files outlive a refused submit.
  bool queued = read_checks_.submit([this, job, short_files] {
    std::map<Ino, Result<uint64_t>> now;  // the length now (with this client's unreported writes), or why not known
    for (Ino ino : short_files) {
      auto n = core_->meta->getattr(job->cred, ino);
      if (n) {
        now.emplace(ino, std::max(n->size, core_->unreported_end(ino)));
      } else if (n.error().code() == Code::kNotFound) {
        now.emplace(ino, error(Code::kStaleHandle, "file {} was removed while being read: its data is gone", ino));
      } else {  // not known: zeros there could be data lost, not a hole
        now.emplace(ino, error(n.error().with_context(fmt::format("file {}: a short read, and its length", ino))));
      }
    }
    for (size_t i = 0; i < job->out.size(); ++i) {
      auto it = now.find(job->inos[i]);
      if (!job->out[i] || it == now.end()) continue;
      if (!it->second) {
        job->out[i] = std::unexpected(it->second.error());
        continue;
      }
      // Cut to the length now: a truncate meanwhile (the caller's size, or ours, was older).
      const uint64_t end = *it->second;
      job->out[i] = job->offsets[i] >= end ? 0 : std::min<uint64_t>(*job->out[i], end - job->offsets[i]);
    }
    fulfil_reads(*job);
  });
  if (!queued) {
    // Without the length check a short read could hand back zeros for data
    // lost: those ops fail (the others' bytes are whole).
    for (size_t i = 0; i < job->out.size(); ++i)
      if (job->out[i] && short_files.contains(job->inos[i]))
        job->out[i] = error(Code::kOverloaded, "read of file {}: its length could not be checked (the system "
                                                "refused a worker thread)", job->inos[i]);
    fulfil_reads(*job);
  }
}

void ClientImpl::fulfil_reads(ReadJob& job) {
  for (size_t k = 0; k < job.reads.size(); ++k) {
    GroupedRead& r = job.reads[k];
    size_t i = job.owner[k];
    if (!job.out[i]) continue;
    if (!r.result) {
      job.out[i] = std::unexpected(r.result.error());
      continue;
    }
    uint32_t got = *r.result;
    if (got < r.dst.size()) std::memset(r.dst.data() + got, 0, r.dst.size() - got);  // a hole
  }
  job.done.set_value(std::move(job.out));
  std::lock_guard lock(reads_mu_);  // notify under the lock: the destructor may be waiting
  if (--reads_running_ == 0) reads_cv_.notify_all();
}

// The meta servers: from the client config, else those registered with mgmtd.
Result<std::vector<rpc::Endpoint>> meta_addresses(const ClusterConfig& cluster, const mgmt::RoutingInfo& routing) {
  if (!cluster.meta.empty()) return cluster.meta;
  std::vector<rpc::Endpoint> out;
  std::optional<Status> bad;
  for (const auto& [id, node] : routing.nodes) {
    if (node.kind != mgmt::NodeKind::kMeta) continue;
    auto ep = routing_endpoint(node.address);
    if (!ep) {  // the others may serve: one bad entry does not stop the client
      WEFT_LOG_WARN("meta node {} left out: {}", id, ep.error());
      bad = ep.error().with_context(fmt::format("meta node {}", id));
      continue;
    }
    if (node.state == mgmt::NodeState::kUp) out.insert(out.begin(), *ep);
    else out.push_back(*ep);
  }
  if (out.empty() && bad) return error(*bad);
  if (out.empty())
    return error(Code::kUnavailable, "no metadata server has registered with mgmtd (and {} lists none under 'meta')",
                 cluster.source);
  return out;
}

}  // namespace
}  // namespace client

Result<std::unique_ptr<Client>> Client::connect(const ClientOptions& options) {
  using namespace client;
  auto core = std::make_unique<Core>();
  // 0 would expire every call at once (the wire's "no timeout" is not the client's).
  if (options.call_timeout_ms == 0) return error(Code::kInvalidArgument, "ClientOptions::call_timeout_ms must be > 0");
  core->options = options;
  core->cred = options.cred ? *options.cred : process_cred();
  WEFT_TRY(core->cluster, load_cluster_config(ClusterConfigQuery::from_flags(options.config_path, options.cluster)));
  WEFT_RETURN_IF_ERROR(check_tcp_user_timeout(core->cluster, options.call_timeout_ms));
  if (options.io_threads > ClientOptions::kIoThreadsMax)
    return error(Code::kInvalidArgument, "ClientOptions::io_threads {} (at most {})", options.io_threads,
                 ClientOptions::kIoThreadsMax);
  try {
    core->io = std::make_unique<rpc::IoPool>(std::max<size_t>(1, options.io_threads), "weft-client");
  } catch (const std::system_error& e) {  // the system refused a thread (a process or memory limit)
    return error(Code::kOverloaded, "cannot start the client's {} I/O threads: {}", options.io_threads, e.what());
  }
  // One id for the lease, the connections' Hello, meta's request ids (write
  // sessions record it; meta takes the Hello's for a request without one) and storage's dedup.
  const uint64_t client_id = random_id();
  rpc::ClientOptions ro = rpc::ClientOptions::in_cluster(core->cluster.cluster_token, options.name);
  ro.call_timeout_ms = options.call_timeout_ms;
  ro.client_id = client_id;
  ro.tcp = core->cluster.tcp;
  ro.local_socket = core->cluster.local_socket;
  // A storage server that refuses connections is reported to mgmtd, which
  // declares it dead without waiting for its lease (mgmt/refusal_probe.h).
  core->refusals = std::make_shared<mgmt::RefusalReporter>();
  ro.refusals = core->refusals;
  core->rpc = std::make_unique<rpc::Client>(*core->io, ro);
  core->mgmt_rpc = std::make_unique<mgmt::MgmtRpc>(*core->io, *core->rpc, core->cluster.mgmtd);
  core->refusals->start(*core->mgmt_rpc);
  core->routing = std::make_unique<RoutingCache>(*core->io, *core->rpc, core->cluster.mgmtd);
  if (auto r = core->routing->start(); !r)
    return error(r.error().with_context("connect to the cluster at " + core->cluster.source));
  WEFT_TRY(auto meta_eps, meta_addresses(core->cluster, *core->routing->current()));
  auto lease = std::make_unique<ClientLease>(*core->io, *core->rpc, core->cluster.mgmtd, client_id,
                                             ClientLease::default_label(options.name));
  if (auto r = lease->start(); !r) WEFT_LOG_WARN("client lease at mgmtd: {} (retrying)", r.error());
  meta::MetaClientOptions mo;
  mo.client_id = client_id;
  mo.addresses = std::move(meta_eps);
  mo.call_timeout_ms = options.call_timeout_ms;
  mo.retry_time_ms_max = options.retry_time_ms_max;
  core->meta = std::make_unique<meta::MetaClient>(*core->io, *core->rpc, mo);
  core->closer = std::make_unique<SessionCloser>(
      [m = core->meta.get()](const Cred& cred, Ino ino, uint64_t session, bool abandon) {
        return m->close(cred, ino, session, abandon);
      });
  ChunkIoOptions co;
  co.client_id = client_id;
  co.call_timeout_ms = options.call_timeout_ms;
  co.retry_time_ms_max = options.retry_time_ms_max;
  core->chunks = std::make_unique<ChunkIo>(*core->io, *core->rpc, *core->routing, co);
  core->dirty = std::make_unique<ByteBudget>(options.write_buffer_bytes);
  core->inflight = std::make_unique<ByteBudget>(options.inflight_bytes_max);
  core->readahead = std::make_unique<ByteBudget>(options.inflight_bytes_max);
  core->early_reads = std::make_unique<ByteBudget>(std::min(options.inflight_bytes_max, kEarlyReadBytesTotal));
  return std::unique_ptr<Client>(new ClientImpl(std::move(core), std::move(lease)));
}

// Components of `path` with empty names dropped. "." and ".." are kept and
// looked up at meta (which answers ".." with the directory's parent), as
// POSIX resolves them: `a/link/..` is the parent of link's target, `a/x/..`
// and `a/x/.` need `a/x` to be a directory one may search, and `d/.` names
// "." in d (so removing it is refused, not a removal of d). Only dots at the
// start of an absolute path are dropped (the root is its own parent).
bool names_directory(std::string_view path) {
  return path.ends_with('/') && path.find_first_not_of('/') != std::string_view::npos;
}

Result<std::vector<std::string>> split_path(std::string_view path) {
  const bool absolute = path.starts_with('/');
  std::vector<std::string> out;
  size_t i = 0;
  while (i < path.size()) {
    while (i < path.size() && path[i] == '/') ++i;
    size_t j = path.find('/', i);
    if (j == std::string_view::npos) j = path.size();
    if (j > i) {
      std::string_view part = path.substr(i, j - i);
      if (part.size() > 255) return error(Code::kNameTooLong, "path component of {} bytes (max 255)", part.size());
      if (part.find('\0') != std::string_view::npos) return error(Code::kInvalidArgument, "path contains a NUL byte");
      bool skip = (part == "." || part == "..") && absolute && out.empty();
      if (!skip) out.emplace_back(part);
    }
    i = j;
  }
  return out;
}

}  // namespace weft
