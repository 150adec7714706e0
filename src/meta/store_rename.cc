// MetaStore::rename: POSIX rename(2) with RENAME_NOREPLACE and RENAME_EXCHANGE.
//  1. lock both parents shared (lower ino first) and check w+x on them;
//  2. lock both dentries (lower key first), then the inodes they name;
//  3. refuse moving a directory into its own subtree (walk dst parent's
//     ancestors, each locked shared so none can move meanwhile);
//  4. rewrite the dentries, drop the replaced inode's link, fix parent
//     pointers of moved directories and the parents' subdirectory counts.
#include <chrono>
#include <map>
#include <thread>
#include <unordered_set>

#include "common/fault.h"
#include "meta/meta_store.h"
#include "meta/ops.h"
#include "meta/permission.h"
#include "meta/txn.h"

namespace weft::meta {
namespace {

// Ancestors walked before the walk also watches for a cycle (which only
// damage can make); a path is seldom deeper, but nothing limits depth.
constexpr int kDepthUnwatched = 4096;

Result<void> check_rename_names(std::string_view sn, std::string_view dn) {
  WEFT_RETURN_IF_ERROR(check_name(sn));
  WEFT_RETURN_IF_ERROR(check_name(dn));
  if (is_dot_or_dotdot(sn) || is_dot_or_dotdot(dn)) return error(Code::kInvalidArgument, "rename of '.' or '..'");
  return {};
}

}  // namespace

Result<void> MetaStore::check_not_ancestor(Txn& txn, Ino moved, Ino dst_parent) {
  Ino cur = dst_parent;
  std::unordered_set<Ino> seen;
  for (uint64_t depth = 0;; ++depth) {
    if (cur == moved) return error(Code::kInvalidArgument, "cannot move directory {} into its own subtree", moved);
    if (cur == kRootIno) return {};
    if (depth >= kDepthUnwatched && !seen.insert(cur).second)
      return error(Code::kCorruption, "directory {} is in a cycle of parents", cur);
    WEFT_TRY(Inode dir, txn.lock_existing(cur, false));
    cur = dir.parent;
  }
}

Result<void> MetaStore::rename(const Context& ctx, Ino sp, std::string_view sn, Ino dp, std::string_view dn,
                               RenameFlags flags) {
  return to_void(mutate(Op::kRename, ctx, [&](Txn& txn) -> Result<Reply> {
           WEFT_RETURN_IF_ERROR(do_rename(txn, ctx, sp, sn, dp, dn, flags));
           return Reply{};
  }));
}

Result<void> MetaStore::do_rename(Txn& txn, const Context& ctx, Ino sp, std::string_view sn, Ino dp,
                                  std::string_view dn, RenameFlags flags) {
  WEFT_RETURN_IF_ERROR(check_rename_names(sn, dn));
  bool exchange = flags == RenameFlags::kExchange;
  bool noreplace = flags == RenameFlags::kNoReplace;
  if (static_cast<uint32_t>(flags) > 2) return error(Code::kInvalidArgument, "bad rename flags");
  // 1. parents
  WEFT_TRY(Inode sdir, lock_dir_searchable(txn, ctx, std::min(sp, dp), true));
  Inode ddir = sdir;
  if (sp != dp) {
    WEFT_TRY(ddir, lock_dir_searchable(txn, ctx, std::max(sp, dp), true));
  }
  if (sdir.ino != sp) std::swap(sdir, ddir);
  // 2. dentries and inodes
  bool src_first = key::dentry(sp, sn) <= key::dentry(dp, dn);
  WEFT_TRY(auto d1, txn.lock_dentry(src_first ? sp : dp, src_first ? sn : dn));
  WEFT_TRY(auto d2, txn.lock_dentry(src_first ? dp : sp, src_first ? dn : sn));
  auto sd = src_first ? d1 : d2;
  auto dd = src_first ? d2 : d1;
  if (!sd) return error(Code::kNotFound, "no '{}' in directory {}", sn, sp);
  if (exchange && !dd) return error(Code::kNotFound, "no '{}' in directory {}", dn, dp);
  if (dd && noreplace) return error(Code::kExists, "'{}' exists in {}", dn, dp);
  if (dd && dd->ino == sd->ino) return {};  // same inode (itself or a hard link): nothing to do
  // The source's directory as the target (rename("a/x", "a")) or the source
  // as the target's directory (rename("a", "a/y")): step 3's answers, known
  // from the entries alone, given before the inode locks below, which would
  // upgrade the shared lock this transaction holds on that directory (two
  // such renames at once deadlocked, and were aborted and retried).
  if (dd && dd->ino == sp)
    return exchange ? error(Code::kInvalidArgument, "'{}' is an ancestor of '{}'", dn, sn)
                    : error(Code::kNotEmpty, "'{}' is an ancestor of '{}'", dn, sn);
  if (sd->ino == dp) return error(Code::kInvalidArgument, "cannot move '{}' into itself", sn);
  // The two inodes in inode order: by their names' order, two renames whose
  // names are hard links of each other's inodes took them in opposite
  // orders (a deadlock, broken by aborting one, over and over).
  auto lock_inode = [&](Ino ino) {
    auto n = txn.lock_existing(ino, true);
    if (WEFT_FAULT("meta.rename.between_inode_locks")) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return n;
  };
  std::optional<Inode> dst;
  if (dd && dd->ino < sd->ino) {
    WEFT_TRY(dst, lock_inode(dd->ino));
  }
  WEFT_TRY(Inode src, lock_inode(sd->ino));
  if (dd && !dst) {
    WEFT_TRY(dst, lock_inode(dd->ino));
  }
  // 3. cycles (EINVAL): as Linux, after the lookups and before any permission.
  if (sp != dp && src.is_dir()) WEFT_RETURN_IF_ERROR(check_not_ancestor(txn, src.ino, dp));
  if (sp != dp && exchange && dst->is_dir()) WEFT_RETURN_IF_ERROR(check_not_ancestor(txn, dst->ino, sp));
  // A target that is an ancestor of the source (rename("a/x", "a")): Linux
  // says ENOTEMPTY (EINVAL above for an exchange), whatever the types.
  if (sp != dp && !exchange && dst && dst->is_dir()) {
    auto outside = check_not_ancestor(txn, dst->ino, sp);
    if (!outside && outside.error().code() == Code::kInvalidArgument)
      return error(Code::kNotEmpty, "'{}' is an ancestor of '{}'", dn, sn);
    WEFT_RETURN_IF_ERROR(outside);
  }
  // Linux's order (vfs_rename): may_delete the source (parent writable,
  // sticky), may_create or may_delete the target (the same, then ENOTDIR /
  // EISDIR for a type that cannot be replaced), then write access to a
  // directory that changes parent (its ".." is rewritten).
  WEFT_RETURN_IF_ERROR(check_dir_writable(sdir, ctx));
  WEFT_RETURN_IF_ERROR(check_remove(sdir, src, ctx.cred));
  if (sp != dp) WEFT_RETURN_IF_ERROR(check_dir_writable(ddir, ctx));
  if (dst) {
    WEFT_RETURN_IF_ERROR(check_remove(ddir, *dst, ctx.cred));
    if (!exchange && src.is_dir() && !dst->is_dir()) return error(Code::kNotDirectory, "'{}' is not a directory", dn);
    if (!exchange && !src.is_dir() && dst->is_dir()) return error(Code::kIsDirectory, "'{}' is a directory", dn);
  }
  if (sp != dp && src.is_dir()) WEFT_RETURN_IF_ERROR(check_access(src, ctx.cred, kAccessWrite));
  if (sp != dp && exchange && dst->is_dir()) WEFT_RETURN_IF_ERROR(check_access(*dst, ctx.cred, kAccessWrite));
  // A directory that gains a subdirectory (not one for another) must have
  // room for its "..": the target's parent, or with an exchange of a file
  // for a directory, the source's.
  if (sp != dp) {
    const bool dst_dir = dst && dst->is_dir();
    if (src.is_dir() && !dst_dir && ddir.nlink >= kLinkCountMax)
      return error(Code::kTooManyLinks, "directory {} is full", dp);
    if (exchange && !src.is_dir() && dst_dir && sdir.nlink >= kLinkCountMax)
      return error(Code::kTooManyLinks, "directory {} is full", sp);
  }
  // 4. rewrite
  std::map<Ino, int64_t> nlink_delta{{sp, 0}, {dp, 0}};
  int64_t now = now_ns();
  auto move = [&](Inode& node, Ino from, Ino to, std::string_view name) -> Result<void> {
    WEFT_RETURN_IF_ERROR(txn.put(key::dentry(to, name), encode_dentry({node.ino, node.type})));
    touch_ctime(node, now);
    if (node.is_dir() && from != to) {
      node.parent = to;
      nlink_delta[from]--;
      nlink_delta[to]++;
    }
    return txn.put_inode(node);
  };
  if (exchange) {
    WEFT_RETURN_IF_ERROR(move(src, sp, dp, dn));
    WEFT_RETURN_IF_ERROR(move(*dst, dp, sp, sn));
  } else {
    if (dst) {
      if (dst->is_dir()) {
        WEFT_TRY(bool busy, txn.has_prefix(key::dentry_prefix(dst->ino)));
        if (busy) return error(Code::kNotEmpty, "directory '{}' is not empty", dn);
        WEFT_RETURN_IF_ERROR(destroy_inode(txn, *dst));
        nlink_delta[dp]--;
      } else {
        WEFT_RETURN_IF_ERROR(drop_link(txn, *dst));
      }
    }
    WEFT_RETURN_IF_ERROR(txn.del(key::dentry(sp, sn)));
    WEFT_RETURN_IF_ERROR(move(src, sp, dp, dn));
  }
  for (auto& [dir, delta] : nlink_delta) WEFT_RETURN_IF_ERROR(touch_dir(txn, dir, delta));
  return {};
}

}  // namespace weft::meta
