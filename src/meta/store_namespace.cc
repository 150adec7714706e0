// Entry operations of MetaStore: create, mkdir, symlink, link, unlink, rmdir,
// and the helpers they share with rename and sessions.
#include "common/random.h"
#include "meta/meta_store.h"
#include "meta/ops.h"
#include "meta/permission.h"
#include "meta/txn.h"

namespace weft::meta {

namespace {

// Concurrent operations that can each add a subdirectory to one directory
// under its shared lock: far more than the server runs at once.
constexpr uint32_t kLinkRaceMargin = 1024;

// Whether `dir` (read without a lock) is so close to kLinkCountMax that the
// operations adding its last links must be ordered.
Result<bool> near_link_limit(Txn& txn, Ino dir) {
  WEFT_TRY(auto raw, txn.get_raw(key::inode(dir)));
  if (!raw) return false;
  WEFT_TRY(Inode inode, decode_inode(*raw));
  WEFT_TRY(inode, txn.with_dir_stat(std::move(inode)));
  return inode.nlink + kLinkRaceMargin >= kLinkCountMax;
}

}  // namespace

// need_nlink: the caller may add a subdirectory and checks the count against
// kLinkCountMax. The count is merged without a lock (DirStat), so callers
// under the shared lock could each see room for the last link: near the limit
// the directory is locked exclusively instead, which orders them.
Result<Inode> MetaStore::lock_dir_searchable(Txn& txn, const Context& ctx, Ino dir, bool need_nlink) {
  bool exclusive = false;
  if (need_nlink) {
    WEFT_TRY(exclusive, near_link_limit(txn, dir));
  }
  WEFT_TRY(Inode parent, txn.lock_existing(dir, exclusive, need_nlink));
  if (!parent.is_dir()) return error(Code::kNotDirectory, "inode {} is not a directory", dir);
  WEFT_RETURN_IF_ERROR(check_access(parent, ctx.cred, kAccessExec));
  return parent;
}

Result<void> MetaStore::check_dir_writable(const Inode& dir, const Context& ctx) {
  return check_access(dir, ctx.cred, kAccessWrite | kAccessExec);
}

Result<Inode> MetaStore::lock_free_name(Txn& txn, const Context& ctx, Ino parent_ino, std::string_view name,
                                        std::string_view op) {
  if (is_dot_or_dotdot(name)) return error(Code::kExists, "{} '{}'", op, name);
  WEFT_TRY(Inode parent, lock_dir_searchable(txn, ctx, parent_ino));
  WEFT_TRY(auto existing, txn.lock_dentry(parent_ino, name));
  if (existing) return error(Code::kExists, "'{}' exists in {}", name, parent_ino);
  WEFT_RETURN_IF_ERROR(check_dir_writable(parent, ctx));
  return parent;
}

Result<void> MetaStore::check_parent(Txn& txn, const Context& ctx, const std::optional<ParentCheck>& expect,
                                     Ino parent) {
  if (!expect) return {};
  // Root first, as a walk takes them (each directory before its entry). The
  // levels above are read, not locked (a lock each cost ~10% of a create by
  // path): a rename of one of them racing this commit is ordered with it
  // either way, as with a fresh walk; what is caught is the cache's staleness.
  for (const EntryCheck& e : expect->above) WEFT_RETURN_IF_ERROR(check_entry(txn, ctx, e, /*lock=*/false));
  return check_entry(txn, ctx, EntryCheck{expect->dir, expect->name, parent}, /*lock=*/true);
}

Result<void> MetaStore::check_entry(Txn& txn, const Context& ctx, const EntryCheck& e, bool lock) {
  // A name like any other (it also ends up in the kStaleHandle message, and so
  // in the request's retry record).
  WEFT_RETURN_IF_ERROR(check_name(e.name));
  // Search permission first (as a lookup: nothing is told about the entries of
  // a directory the caller may not search), the directory's inode before its
  // entry (rename's lock order). Locked shared: a rename or removal of the
  // entry waits for this commit.
  WEFT_TRY(auto dir, lock ? txn.lock_inode(e.dir, /*exclusive=*/false, /*with_stat=*/false) : txn.get_inode(e.dir));
  if (dir) WEFT_RETURN_IF_ERROR(check_access(*dir, ctx.cred, kAccessExec));
  WEFT_TRY(auto raw, lock ? txn.lock_raw(key::dentry(e.dir, e.name), /*exclusive=*/false)
                          : txn.get_raw(key::dentry(e.dir, e.name)));
  std::optional<DentryValue> d;
  if (raw) {
    WEFT_TRY(d, decode_dentry(*raw));
  }
  if (!dir || !d || d->ino != e.ino)
    return error(Code::kStaleHandle, "'{}' in directory {} is no longer directory {}", e.name, e.dir, e.ino);
  return {};
}

Result<Inode> MetaStore::new_inode(Txn& txn, const Context& ctx, const Inode& parent, InodeType type,
                                   uint32_t mode, std::string_view symlink_target, uint64_t rdev) {
  WEFT_TRY(uint64_t ino, alloc_id());
  Inode n;
  n.ino = ino;
  n.type = type;
  // As Linux's vfs_mkdir: a directory takes no setuid or setgid from the
  // requested mode; setgid comes from a setgid parent only (below).
  n.mode = mode & (type == InodeType::kDirectory ? kModeMkdirMask : kModePermMask);
  n.uid = ctx.cred.uid;
  n.gid = ctx.cred.gid;
  if (parent.mode & kModeSetGid) {  // BSD group semantics of setgid directories
    n.gid = parent.gid;
    if (type == InodeType::kDirectory) n.mode |= kModeSetGid;
  }
  // Linux's mode_strip_sgid: a group-executable setgid non-directory in a
  // group its creator is not in loses setgid.
  constexpr uint32_t kSetGidExec = kModeSetGid | 0010;
  if (type != InodeType::kDirectory && (n.mode & kSetGidExec) == kSetGidExec && ctx.cred.uid != 0 &&
      !ctx.cred.in_group(n.gid))
    n.mode &= ~kModeSetGid;
  n.atime_ns = n.mtime_ns = n.ctime_ns = now_ns();
  n.nlink = type == InodeType::kDirectory ? 2 : 1;
  n.xattrs = XattrPresence::kNone;
  n.layout = parent.layout;
  if (type == InodeType::kDirectory) {
    n.parent = parent.ino;
    n.layout.first_chain = 0;
    n.layout.shuffle_seed = 0;
    WEFT_RETURN_IF_ERROR(txn.put_untracked(key::dir_stat(ino), encode_dir_stat({n.mtime_ns, n.ctime_ns, 0})));
  } else if (type == InodeType::kFile) {
    n.layout.first_chain = static_cast<uint32_t>(thread_random().uniform(std::max<uint32_t>(1, options_.chain_count)));
    n.layout.shuffle_seed = thread_random().next_u64();
  } else if (type == InodeType::kSymlink) {
    n.symlink_target = std::string(symlink_target);
    n.size = symlink_target.size();
  }
  if (is_device_type(type)) n.rdev = rdev;  // a FIFO's or socket's is meaningless (Linux ignores it too)
  WEFT_RETURN_IF_ERROR(txn.put_untracked(key::inode(ino), encode_inode(n)));
  WEFT_RETURN_IF_ERROR(txn.merge_untracked(std::string(key::kInodeCount), encode_i64(1)));
  return n;
}

Result<void> MetaStore::add_entry(Txn& txn, const Inode& parent, std::string_view name, const Inode& child) {
  WEFT_RETURN_IF_ERROR(txn.put(key::dentry(parent.ino, name), encode_dentry({child.ino, child.type})));
  return touch_dir(txn, parent.ino, child.is_dir() ? 1 : 0);
}

Result<void> MetaStore::touch_dir(Txn& txn, Ino dir, int64_t nlink_delta) {
  int64_t now = now_ns();
  return txn.merge_untracked(key::dir_stat(dir), encode_dir_stat({now, now, nlink_delta}));
}

Result<void> MetaStore::destroy_inode(Txn& txn, const Inode& inode) {
  WEFT_RETURN_IF_ERROR(txn.del(key::inode(inode.ino)));
  if (inode.is_dir()) WEFT_RETURN_IF_ERROR(txn.del(key::dir_stat(inode.ino)));
  // Keys only: the values (up to 1 MiB per inode, store_attr.cc) are never copied.
  WEFT_TRY(auto xattrs, txn.scan_keys(key::xattr_prefix(inode.ino), SIZE_MAX));
  for (auto& [k, value_bytes] : xattrs) WEFT_RETURN_IF_ERROR(txn.del(k));
  return txn.merge_untracked(std::string(key::kInodeCount), encode_i64(-1));
}

// REQUIRES: victim (a file or symlink) locked exclusive and its dentry removed.
Result<void> MetaStore::drop_link(Txn& txn, Inode victim) {
  if (victim.nlink == 0) return error(Code::kCorruption, "inode {} already has no links", victim.ino);
  victim.nlink--;
  touch_ctime(victim, now_ns());
  if (victim.nlink > 0) return txn.put_inode(victim);
  if (victim.is_file()) {
    WEFT_TRY(bool open, txn.has_prefix(key::session_prefix(victim.ino)));
    if (open) return txn.put_inode(victim);  // queued at last close
  }
  WEFT_RETURN_IF_ERROR(destroy_inode(txn, victim));
  if (victim.is_file()) return txn.queue_chunk_gc(victim);
  return {};
}

Result<uint64_t> MetaStore::begin_session(Txn& txn, const Context& ctx, Ino ino, bool answers_cuts) {
  // A session without an owner could never be reaped: no lease is ever missing for it.
  const uint64_t owner = ctx.caller_id();
  if (owner == 0) return error(Code::kInvalidArgument, "a write open of inode {} without a client id", ino);
  WEFT_TRY(uint64_t sid, alloc_id());
  WEFT_RETURN_IF_ERROR(txn.put_untracked(key::session(ino, sid), encode_session({owner, now_ns(), answers_cuts})));
  return sid;
}

Result<Reply> MetaStore::do_create(Txn& txn, const Context& ctx, Ino parent_ino, std::string_view name,
                                   uint32_t mode, bool exclusive, OpenFlags open) {
  WEFT_RETURN_IF_ERROR(check_name(name));
  if (is_dot_or_dotdot(name))
    return error(exclusive ? Code::kExists : Code::kIsDirectory, "create '{}': is a directory", name);
  WEFT_TRY(Inode parent, txn.lock_existing(parent_ino, false, /*with_stat=*/false));
  if (!parent.is_dir()) return error(Code::kNotDirectory, "inode {} is not a directory", parent_ino);
  WEFT_RETURN_IF_ERROR(check_access(parent, ctx.cred, kAccessExec));
  WEFT_TRY(auto existing, txn.lock_dentry(parent_ino, name));
  Reply reply;
  if (existing) {
    if (exclusive) return error(Code::kExists, "'{}' exists in {}", name, parent_ino);
    if (existing->type == InodeType::kDirectory) return error(Code::kIsDirectory, "'{}' is a directory", name);
    if (existing->type == InodeType::kSymlink)
      return error(Code::kLoop, "'{}' is a symlink: resolve it before create", name);
    if (is_special_type(existing->type)) return special_not_openable(existing->ino);
    WEFT_TRY(Inode file, txn.lock_existing(existing->ino, false));
    // What open(2) of an existing file checks: read for O_RDONLY and O_RDWR,
    // write for O_WRONLY and O_RDWR. (Setuid and setgid stay until a write:
    // report_length.)
    const uint32_t want = (open.read ? uint32_t{kAccessRead} : 0u) | (open.write ? uint32_t{kAccessWrite} : 0u);
    WEFT_RETURN_IF_ERROR(check_access(file, ctx.cred, want));
    if (open.write) {
      WEFT_TRY(reply.session_id, begin_session(txn, ctx, file.ino, open.answers_cuts));
    }
    reply = reply_of(std::move(file), reply.session_id);
    reply.existed = true;
    return reply;
  }
  WEFT_RETURN_IF_ERROR(check_access(parent, ctx.cred, kAccessWrite | kAccessExec));
  WEFT_TRY(Inode file, new_inode(txn, ctx, parent, InodeType::kFile, mode));
  WEFT_RETURN_IF_ERROR(add_entry(txn, parent, name, file));
  if (open.write) {
    WEFT_TRY(reply.session_id, begin_session(txn, ctx, file.ino, open.answers_cuts));
  }
  reply = reply_of(std::move(file), reply.session_id);
  return reply;
}

Result<Reply> MetaStore::create(const Context& ctx, Ino parent, std::string_view name, uint32_t mode,
                                bool exclusive, OpenFlags open, const std::optional<ParentCheck>& expect_parent) {
  // A create opens for reading at least when not for writing.
  if (!open.write) open.read = true;
  return mutate(Op::kCreate, ctx, [&](Txn& txn) -> Result<Reply> {
    WEFT_RETURN_IF_ERROR(check_parent(txn, ctx, expect_parent, parent));
    return do_create(txn, ctx, parent, name, mode, exclusive, open);
  });
}

Result<Reply> MetaStore::create(const Context& ctx, Ino parent, std::string_view name, uint32_t mode,
                                bool exclusive, bool open_for_write, const std::optional<ParentCheck>& expect_parent) {
  return create(ctx, parent, name, mode, exclusive, OpenFlags{!open_for_write, open_for_write}, expect_parent);
}

Result<Inode> MetaStore::mkdir(const Context& ctx, Ino parent_ino, std::string_view name, uint32_t mode,
                               const std::optional<ParentCheck>& expect_parent) {
  return to_inode(mutate(Op::kMkdir, ctx, [&](Txn& txn) -> Result<Reply> {
    WEFT_RETURN_IF_ERROR(check_parent(txn, ctx, expect_parent, parent_ino));
    WEFT_RETURN_IF_ERROR(check_name(name));
    if (is_dot_or_dotdot(name)) return error(Code::kExists, "mkdir '{}'", name);
    WEFT_TRY(Inode parent, lock_dir_searchable(txn, ctx, parent_ino, /*need_nlink=*/true));
    WEFT_TRY(auto existing, txn.lock_dentry(parent_ino, name));
    if (existing) return error(Code::kExists, "'{}' exists in {}", name, parent_ino);
    WEFT_RETURN_IF_ERROR(check_dir_writable(parent, ctx));
    if (parent.nlink >= kLinkCountMax) return error(Code::kTooManyLinks, "directory {} is full", parent_ino);
    WEFT_TRY(Inode dir, new_inode(txn, ctx, parent, InodeType::kDirectory, mode));
    WEFT_RETURN_IF_ERROR(add_entry(txn, parent, name, dir));
    return reply_of(std::move(dir));
  }));
}

Result<Inode> MetaStore::symlink(const Context& ctx, Ino parent_ino, std::string_view name,
                                 std::string_view target, const std::optional<ParentCheck>& expect_parent) {
  return to_inode(mutate(Op::kSymlink, ctx, [&](Txn& txn) -> Result<Reply> {
    WEFT_RETURN_IF_ERROR(check_parent(txn, ctx, expect_parent, parent_ino));
    WEFT_RETURN_IF_ERROR(check_name(name));
    if (target.empty()) return error(Code::kNotFound, "empty symlink target");
    if (target.size() > kSymlinkBytesMax) return error(Code::kNameTooLong, "symlink target too long");
    // readlink through the kernel would end it at the NUL: not a target a path can name.
    if (target.find('\0') != std::string_view::npos) return error(Code::kInvalidArgument, "symlink target contains NUL");
    WEFT_TRY(Inode parent, lock_free_name(txn, ctx, parent_ino, name, "symlink"));
    WEFT_TRY(Inode link, new_inode(txn, ctx, parent, InodeType::kSymlink, 0777, target));
    WEFT_RETURN_IF_ERROR(add_entry(txn, parent, name, link));
    return reply_of(std::move(link));
  }));
}

Result<Inode> MetaStore::mknod(const Context& ctx, Ino parent_ino, std::string_view name, InodeType type,
                               uint32_t mode, uint64_t rdev) {
  return to_inode(mutate(Op::kMknod, ctx, [&](Txn& txn) -> Result<Reply> {
    WEFT_RETURN_IF_ERROR(check_name(name));
    // Regular files come from create (they have a layout and sessions), directories from
    // mkdir (mknod(2) of a directory is EPERM).
    if (type == InodeType::kDirectory) return error(Code::kNotPermitted, "mknod of a directory: use mkdir");
    if (!is_special_type(type)) return error(Code::kInvalidArgument, "mknod of inode type {}", static_cast<int>(type));
    if (!options_.special_files)
      return error(Code::kNotPermitted, "special files are off on this meta server ([meta] special_files)");
    WEFT_TRY(Inode parent, lock_free_name(txn, ctx, parent_ino, name, "mknod"));
    // As Linux without CAP_MKNOD (after its EEXIST and EACCES): anyone may make
    // a FIFO or a socket, only root a device.
    if (is_device_type(type) && ctx.cred.uid != 0) return error(Code::kNotPermitted, "mknod of a device needs root");
    WEFT_TRY(Inode node, new_inode(txn, ctx, parent, type, mode, {}, rdev));
    WEFT_RETURN_IF_ERROR(add_entry(txn, parent, name, node));
    return reply_of(std::move(node));
  }));
}

Result<Inode> MetaStore::link(const Context& ctx, Ino ino, Ino parent_ino, std::string_view name) {
  return to_inode(mutate(Op::kLink, ctx, [&](Txn& txn) -> Result<Reply> {
    WEFT_RETURN_IF_ERROR(check_name(name));
    WEFT_TRY(Inode parent, lock_free_name(txn, ctx, parent_ino, name, "link"));
    // A directory is refused before its inode is locked exclusively: as the
    // parent (link(a, a, "x")) that lock would upgrade the shared one just
    // taken, and link(a, b, "x") beside link(b, a, "y") would each wait for
    // the other's. An inode's type never changes: the unlocked read decides.
    WEFT_TRY(auto peek, txn.get_inode(ino));
    if (peek && peek->is_dir()) return error(Code::kNotPermitted, "hard link to directory {}", ino);
    WEFT_TRY(Inode target, txn.lock_existing(ino, true));
    if (target.is_dir()) return error(Code::kNotPermitted, "hard link to directory {}", ino);
    if (target.nlink == 0) return error(Code::kNotFound, "inode {} was unlinked", ino);
    if (target.nlink >= kLinkCountMax) return error(Code::kTooManyLinks, "inode {} has too many links", ino);
    target.nlink++;
    touch_ctime(target, now_ns());
    WEFT_RETURN_IF_ERROR(txn.put_inode(target));
    WEFT_RETURN_IF_ERROR(add_entry(txn, parent, name, target));
    return reply_of(std::move(target));
  }));
}

Result<void> MetaStore::unlink(const Context& ctx, Ino parent_ino, std::string_view name,
                              const std::optional<ParentCheck>& expect_parent) {
  WEFT_RETURN_IF_ERROR(mutate(Op::kUnlink, ctx, [&](Txn& txn) -> Result<Reply> {
    WEFT_RETURN_IF_ERROR(check_parent(txn, ctx, expect_parent, parent_ino));
    WEFT_RETURN_IF_ERROR(check_name(name));
    if (is_dot_or_dotdot(name)) return error(Code::kIsDirectory, "unlink '{}'", name);
    WEFT_TRY(Inode parent, lock_dir_searchable(txn, ctx, parent_ino));
    WEFT_TRY(auto d, txn.lock_dentry(parent_ino, name));
    if (!d) return error(Code::kNotFound, "no '{}' in directory {}", name, parent_ino);
    WEFT_RETURN_IF_ERROR(check_dir_writable(parent, ctx));
    WEFT_TRY(Inode victim, txn.lock_existing(d->ino, true));
    WEFT_RETURN_IF_ERROR(check_remove(parent, victim, ctx.cred));
    if (victim.is_dir()) return error(Code::kIsDirectory, "unlink of directory '{}'", name);
    WEFT_RETURN_IF_ERROR(txn.del(key::dentry(parent_ino, name)));
    WEFT_RETURN_IF_ERROR(touch_dir(txn, parent_ino, 0));
    WEFT_RETURN_IF_ERROR(drop_link(txn, std::move(victim)));
    return Reply{};
  }));
  return {};
}

Result<void> MetaStore::rmdir(const Context& ctx, Ino parent_ino, std::string_view name,
                             const std::optional<ParentCheck>& expect_parent) {
  WEFT_RETURN_IF_ERROR(mutate(Op::kRmdir, ctx, [&](Txn& txn) -> Result<Reply> {
    WEFT_RETURN_IF_ERROR(check_parent(txn, ctx, expect_parent, parent_ino));
    WEFT_RETURN_IF_ERROR(check_name(name));
    if (name == ".") return error(Code::kInvalidArgument, "rmdir '.'");
    if (name == "..") return error(Code::kNotEmpty, "rmdir '..'");
    WEFT_TRY(Inode parent, lock_dir_searchable(txn, ctx, parent_ino));
    WEFT_TRY(auto d, txn.lock_dentry(parent_ino, name));
    if (!d) return error(Code::kNotFound, "no '{}' in directory {}", name, parent_ino);
    WEFT_RETURN_IF_ERROR(check_dir_writable(parent, ctx));
    WEFT_TRY(Inode victim, txn.lock_existing(d->ino, true));
    WEFT_RETURN_IF_ERROR(check_remove(parent, victim, ctx.cred));
    if (!victim.is_dir()) return error(Code::kNotDirectory, "rmdir of non-directory '{}'", name);
    WEFT_TRY(bool busy, txn.has_prefix(key::dentry_prefix(victim.ino)));
    if (busy) return error(Code::kNotEmpty, "directory '{}' is not empty", name);
    WEFT_RETURN_IF_ERROR(txn.del(key::dentry(parent_ino, name)));
    WEFT_RETURN_IF_ERROR(touch_dir(txn, parent_ino, -1));
    WEFT_RETURN_IF_ERROR(destroy_inode(txn, victim));
    return Reply{};
  }));
  return {};
}

}  // namespace weft::meta
