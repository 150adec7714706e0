// MetaStore attribute operations: setattr (chmod, chown, truncate, utimes),
// extended attributes and directory layouts.

#include <rocksdb/utilities/transaction_db.h>

#include <algorithm>

#include "meta/meta_store.h"
#include "meta/ops.h"
#include "meta/permission.h"
#include "meta/txn.h"

namespace weft::meta {
namespace {

// Per inode: at most this many xattrs and this many bytes of names and values
// (ENOSPC beyond, as Linux when a filesystem's xattr space is full). They bound
// what setxattr's usage scan and an inode's removal go through, and the count
// keeps the names list within XATTR_LIST_MAX: listxattr always fits its reply.
constexpr size_t kXattrsPerInodeMax = 256;
constexpr size_t kXattrBytesPerInodeMax = size_t{1} << 20;
static_assert(kXattrsPerInodeMax * (kXattrNameBytesMax + 1) <= kXattrListBytesMax);

bool owner_or_root(const Inode& n, const Cred& c) { return c.uid == 0 || c.uid == n.uid; }

Result<void> check_chown(const Inode& n, const Cred& c, const SetAttr& a) {
  if (a.uid && *a.uid != n.uid && c.uid != 0) return error(Code::kNotPermitted, "only root may change the owner");
  if (a.gid && *a.gid != n.gid && c.uid != 0 && !(c.uid == n.uid && c.in_group(*a.gid)))
    return error(Code::kNotPermitted, "uid {} may not set group {}", c.uid, *a.gid);
  if (a.uid && *a.uid == n.uid && c.uid != 0 && c.uid != n.uid)
    return error(Code::kNotPermitted, "not the owner");
  if (a.gid && *a.gid == n.gid && c.uid != 0 && c.uid != n.uid)
    return error(Code::kNotPermitted, "not the owner");
  return {};
}

Result<void> check_times(const Inode& n, const Cred& c, const SetAttr& a) {
  bool explicit_time = (a.atime_ns && *a.atime_ns != SetAttr::kTimeNow) ||
                       (a.mtime_ns && *a.mtime_ns != SetAttr::kTimeNow);
  bool now_time = (a.atime_ns && *a.atime_ns == SetAttr::kTimeNow) ||
                  (a.mtime_ns && *a.mtime_ns == SetAttr::kTimeNow);
  if (explicit_time && !owner_or_root(n, c)) return error(Code::kNotPermitted, "only the owner may set times");
  // A writer may set either time to now alone too, though Linux refuses
  // utimensat({UTIME_NOW, UTIME_OMIT}) to a non-owner: through FUSE that call
  // looks like the kernel's own mtime update after a write (FATTR_MTIME_NOW
  // alone), which a writer must be allowed (FuseTest.AnotherUsersWriteDrops
  // SetuidAndSetgid, the writeback_cache fsync): tried and reverted.
  if (now_time && !owner_or_root(n, c)) WEFT_RETURN_IF_ERROR(check_access(n, c, kAccessWrite));
  return {};
}

struct XattrUsage {
  size_t count = 0;
  size_t bytes = 0;  // names and values
};

// REQUIRES: the inode locked exclusive (no other setxattr changes it meanwhile).
Result<XattrUsage> xattr_usage(Txn& txn, Ino ino) {
  const std::string prefix = key::xattr_prefix(ino);
  WEFT_TRY(auto keys, txn.scan_keys(prefix, SIZE_MAX));
  XattrUsage u;
  for (const auto& [k, value_bytes] : keys) {
    ++u.count;
    u.bytes += k.size() - prefix.size() + value_bytes;
  }
  return u;
}

// A new name must fit the count, and the bytes may not grow past their limit
// (an inode over it from before the limit may still shrink or keep its size).
Result<void> check_xattr_room(const XattrUsage& used, Ino ino, std::string_view name, size_t old_value_bytes,
                              bool exists, size_t value_bytes) {
  if (!exists && used.count + 1 > kXattrsPerInodeMax)
    return error(Code::kNoSpace, "inode {} has {} xattrs (max {})", ino, used.count, kXattrsPerInodeMax);
  const size_t old_bytes = exists ? name.size() + old_value_bytes : 0;
  const size_t bytes = used.bytes - old_bytes + name.size() + value_bytes;
  if (bytes > kXattrBytesPerInodeMax && bytes > used.bytes)
    return error(Code::kNoSpace, "xattrs of inode {} would take {} bytes (max {})", ino, bytes, kXattrBytesPerInodeMax);
  return {};
}

}  // namespace

Result<Inode> MetaStore::do_setattr(Txn& txn, const Context& ctx, Ino ino, const SetAttr& a) {
  WEFT_TRY(Inode n, txn.lock_existing(ino, true));
  const Cred& c = ctx.cred;
  int64_t now = now_ns();
  WEFT_RETURN_IF_ERROR(check_chown(n, c, a));
  WEFT_RETURN_IF_ERROR(check_times(n, c, a));
  if (a.mode) {
    const uint32_t want = *a.mode & kModePermMask;
    if (!owner_or_root(n, c)) {
      // The kernel drops setuid/setgid of a file written through a mount with
      // the writer's credentials (no FUSE_CAP_HANDLE_KILLPRIV): a change that
      // only drops them needs what the write needs, write access. Only for
      // regular files: nothing else is written that way, and a directory's
      // setgid (its group inherited by new entries) is its owner's to change.
      constexpr uint32_t kPrivs = kModeSetUid | kModeSetGid;
      const bool drops_privs_only = n.is_file() && want != n.mode && (want & ~kPrivs) == (n.mode & ~kPrivs) &&
                                    (want & ~n.mode) == 0;
      if (!drops_privs_only) return error(Code::kNotPermitted, "only the owner may chmod inode {}", ino);
      WEFT_TRY(bool through_session, holds_write_session(txn, ctx, ino, a.size_session));
      if (!through_session) WEFT_RETURN_IF_ERROR(check_access(n, c, kAccessWrite));
    }
    n.mode = want;
    if (c.uid != 0 && !c.in_group(a.gid.value_or(n.gid))) n.mode &= ~kModeSetGid;
  }
  if (a.size) {
    if (n.is_dir()) return error(Code::kIsDirectory, "truncate of directory {}", ino);
    if (!n.is_file()) return error(Code::kInvalidArgument, "truncate of non-file {}", ino);
    WEFT_TRY(bool through_session, holds_write_session(txn, ctx, ino, a.size_session));
    if (!through_session) WEFT_RETURN_IF_ERROR(check_access(n, c, kAccessWrite));
    if (a.expect_size && n.size != *a.expect_size)
      return error(Code::kStaleHandle, "inode {} is {} bytes long now, not {} as the truncate to {} read", ino, n.size,
                   *a.expect_size, *a.size);
    if (a.expect_ctime_ns && n.ctime_ns != *a.expect_ctime_ns)
      return error(Code::kStaleHandle, "inode {} changed since the truncate to {} read it (ctime {}, not {})", ino,
                   *a.size, n.ctime_ns, *a.expect_ctime_ns);
    if (*a.size > kFileBytesMax)
      return error(Code::kFileTooBig, "length {} of inode {} beyond the maximum file size {}", *a.size, ino,
                   kFileBytesMax);
    n.size = *a.size;
    n.mtime_ns = now;
    // The client removed the chunks past the new length first, also what
    // other writers wrote there and have not reported: their reports past it
    // must not bring that range back as zeros (types.h SessionCut).
    WEFT_RETURN_IF_ERROR(mark_sessions_cut(txn, ctx, ino, *a.size, /*abandoned_only=*/a.no_cut));
    if (c.uid != 0) n.mode = mode_without_privs(n.mode, c.in_group(n.gid));  // as Linux's truncate
  }
  const bool caller_in_group = c.uid == 0 || c.in_group(n.gid);  // the group before the change; root: CAP_FSETID
  if (a.uid) n.uid = *a.uid;
  if (a.gid) n.gid = *a.gid;
  // As Linux: any chown (even to the same ids, even by root) clears setuid,
  // and setgid when drops_setgid, of a non-directory.
  if ((a.uid || a.gid) && !n.is_dir()) {
    n.mode &= ~kModeSetUid;
    if (drops_setgid(n.mode, caller_in_group)) n.mode &= ~kModeSetGid;
  }
  if (a.atime_ns) n.atime_ns = *a.atime_ns == SetAttr::kTimeNow ? now : *a.atime_ns;
  if (a.mtime_ns) n.mtime_ns = *a.mtime_ns == SetAttr::kTimeNow ? now : *a.mtime_ns;
  touch_ctime(n, now);
  WEFT_RETURN_IF_ERROR(txn.put_inode(n));
  if (n.is_dir()) {  // times live in DirStat too (max-merged): reset them exactly
    WEFT_TRY(DirStat s, txn.dir_stat(ino));
    WEFT_RETURN_IF_ERROR(txn.put(key::dir_stat(ino), encode_dir_stat({n.mtime_ns, n.ctime_ns, s.nlink_delta})));
  }
  return n;
}

Result<Inode> MetaStore::setattr(const Context& ctx, Ino ino, const SetAttr& attr) {
  return to_inode(mutate(Op::kSetattr, ctx, [&](Txn& txn) -> Result<Reply> {
    WEFT_TRY(Inode n, do_setattr(txn, ctx, ino, attr));
    return reply_of(std::move(n));
  }));
}

Result<void> MetaStore::setxattr(const Context& ctx, Ino ino, std::string_view name, std::string_view value,
                                 XattrFlags flags) {
  return to_void(mutate(Op::kSetxattr, ctx, [&](Txn& txn) -> Result<Reply> {
           WEFT_RETURN_IF_ERROR(check_xattr_name(name));
           if (value.size() > kXattrValueBytesMax) return error(Code::kTooBig, "xattr value of {} bytes", value.size());
           WEFT_TRY(Inode n, txn.lock_existing(ino, true));
           WEFT_RETURN_IF_ERROR(check_xattr_access(n, ctx.cred, name, true));
           WEFT_TRY(auto old, txn.get_raw(key::xattr(ino, name)));
           if (old && flags == XattrFlags::kCreate) return error(Code::kExists, "xattr '{}' exists", name);
           if (!old && flags == XattrFlags::kReplace) return error(Code::kNoData, "no xattr '{}'", name);
           WEFT_TRY(XattrUsage used, xattr_usage(txn, ino));
           WEFT_RETURN_IF_ERROR(check_xattr_room(used, ino, name, old ? old->size() : 0, old.has_value(), value.size()));
           WEFT_RETURN_IF_ERROR(txn.put(key::xattr(ino, name), std::string(value)));
           n.xattrs = XattrPresence::kSome;
           touch_ctime(n, now_ns());
           WEFT_RETURN_IF_ERROR(txn.put_inode(n));
           return Reply{};
  }));
}

Result<void> MetaStore::removexattr(const Context& ctx, Ino ino, std::string_view name) {
  return to_void(mutate(Op::kRemovexattr, ctx, [&](Txn& txn) -> Result<Reply> {
           WEFT_TRY(Inode n, txn.lock_existing(ino, true));
           WEFT_RETURN_IF_ERROR(check_xattr_access(n, ctx.cred, name, true));
           WEFT_TRY(auto old, txn.get_raw(key::xattr(ino, name)));
           if (!old) return error(Code::kNoData, "no xattr '{}'", name);
           WEFT_RETURN_IF_ERROR(txn.del(key::xattr(ino, name)));
           // The inode is locked exclusive: no setxattr adds one meanwhile.
           // (The transaction's iterator sees its own delete; the name is
           // skipped all the same.)
           const std::string removed = key::xattr(ino, name);
           WEFT_TRY(auto left, txn.scan_keys(key::xattr_prefix(ino), 2));
           const bool others = std::any_of(left.begin(), left.end(), [&](const auto& k) { return k.first != removed; });
           n.xattrs = others ? XattrPresence::kSome : XattrPresence::kNone;
           touch_ctime(n, now_ns());
           WEFT_RETURN_IF_ERROR(txn.put_inode(n));
           return Reply{};
  }));
}

Result<void> MetaStore::set_layout(const Context& ctx, Ino dir, const Layout& layout) {
  // Asked before the transaction: no row lock waits on a round trip to mgmtd.
  // The default table and the directory's own need no asking (a stripe
  // change works while mgmtd is away), nor does a retry of a request meta
  // already answered: it gets that answer (mutate), whatever mgmtd says now.
  // A refusal here records nothing, but the request's number is used: its
  // client's retry window moves on all the same (forget_window_tail).
  auto table_known = [&]() -> Result<void> {
    WEFT_RETURN_IF_ERROR(validate_layout(layout));
    auto now = read_inode(dir, nullptr, /*with_stat=*/false);
    if (now && now->layout.chain_table_id == layout.chain_table_id) return {};
    auto known = chain_table_check_(layout.chain_table_id);
    if (known || known.error().code() == Code::kInvalidArgument) return known;
    // Not a failure of this meta server: no failover to another one.
    return error(Code::kBusy, "cannot check that chain table {} exists: {}", layout.chain_table_id,
                 known.error().message());
  };
  if (chain_table_check_ && layout.chain_table_id != options_.chain_table_id && !answered_before(ctx)) {
    if (auto known = table_known(); !known) {
      forget_window_tail(ctx);
      return known;
    }
  }
  return to_void(mutate(Op::kSetLayout, ctx, [&](Txn& txn) -> Result<Reply> {
           WEFT_RETURN_IF_ERROR(validate_layout(layout));
           WEFT_TRY(Inode n, txn.lock_existing(dir, true));
           if (!n.is_dir()) return error(Code::kNotDirectory, "inode {} is not a directory", dir);
           if (!owner_or_root(n, ctx.cred)) return error(Code::kNotPermitted, "only the owner may set a layout");
           const uint32_t table = layout.chain_table_id;
           if (!chain_table_check_ && ctx.cred.uid != 0 && table != options_.chain_table_id &&
               table != n.layout.chain_table_id)
             return error(Code::kNotPermitted,
                          "only root may put directory {} on chain table {}: this meta server has no routing to "
                          "check that it exists (others may use table {} or the directory's {})",
                          dir, table, options_.chain_table_id, n.layout.chain_table_id);
           n.layout = layout;
           n.layout.first_chain = 0;
           n.layout.shuffle_seed = 0;
           WEFT_RETURN_IF_ERROR(txn.put_inode(n));
           return Reply{};
  }));
}

}  // namespace weft::meta

namespace weft::meta {

Result<std::string> MetaStore::getxattr(const Context& ctx, Ino ino, std::string_view name) {
  return observe(metrics_of(Op::kGetxattr), [&]() -> Result<std::string> {
    WEFT_TRY(Inode n, read_inode(ino));
    WEFT_RETURN_IF_ERROR(check_xattr_access(n, ctx.cred, name, false));
    std::string value;
    auto s = db()->Get(rocksdb::ReadOptions(), key::xattr(ino, name), &value);
    if (s.IsNotFound()) return error(Code::kNoData, "no xattr '{}' on inode {}", name, ino);
    if (!s.ok()) return error(from_rocks(s, "getxattr"));
    return value;
  });
}

Result<std::vector<std::string>> MetaStore::listxattr(const Context& ctx, Ino ino) {
  return observe(metrics_of(Op::kListxattr), [&]() -> Result<std::vector<std::string>> {
    WEFT_RETURN_IF_ERROR(read_inode(ino));
    std::string prefix = key::xattr_prefix(ino);
    std::vector<std::string> names;
    size_t list_bytes = 0;
    std::unique_ptr<rocksdb::Iterator> it(db()->NewIterator(rocksdb::ReadOptions()));
    for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
      std::string name = it->key().ToString().substr(prefix.size());
      if (name.starts_with("trusted.") && ctx.cred.uid != 0) continue;  // hidden, as Linux does
      // Only an inode given more xattrs than kXattrsPerInodeMax (before that
      // limit) gets here; Linux answers E2BIG for such a list too.
      list_bytes += name.size() + 1;
      if (list_bytes > kXattrListBytesMax)
        return error(Code::kTooBig, "the xattr names of inode {} pass {} bytes", ino, kXattrListBytesMax);
      names.push_back(std::move(name));
    }
    if (!it->status().ok()) return error(from_rocks(it->status(), "listxattr"));
    return names;
  });
}

}  // namespace weft::meta
