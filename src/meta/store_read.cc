// MetaStore read operations. They run without a transaction and never write.
#include <limits>

#include <rocksdb/utilities/transaction_db.h>

#include "meta/meta_store.h"
#include "meta/ops.h"
#include "meta/permission.h"
#include "meta/txn.h"
#include "meta/wal_syncer.h"

namespace weft::meta {
namespace {

constexpr size_t kReaddirLimitMax = 4096;
size_t encoded_bytes_max(const DirEntry& e) {
  return e.name.size() + e.attr.symlink_target.size() + kDirEntryFixedBytesMax;
}

class SnapshotHolder {
 public:
  explicit SnapshotHolder(rocksdb::DB* db) : db_(db), snap_(db->GetSnapshot()) {}
  ~SnapshotHolder() { db_->ReleaseSnapshot(snap_); }
  const rocksdb::Snapshot* get() const { return snap_; }

 private:
  rocksdb::DB* db_;
  const rocksdb::Snapshot* snap_;
};

}  // namespace

bool MetaStore::answered_before(const Context& ctx) {
  if (!ctx.req.valid()) return false;
  std::string raw;
  return db_->Get(rocksdb::ReadOptions(), key::request(ctx.req.client_id, ctx.req.seq), &raw).ok();
}

Result<Inode> MetaStore::read_inode(Ino ino, const rocksdb::Snapshot* snapshot, bool with_stat) {
  rocksdb::ReadOptions ro;
  ro.snapshot = snapshot;
  std::string raw;
  auto s = db_->Get(ro, key::inode(ino), &raw);
  if (s.IsNotFound()) return error(Code::kNotFound, "no inode {}", ino);
  if (!s.ok()) return error(from_rocks(s, "read inode"));
  WEFT_TRY(Inode n, decode_inode(raw));
  if (n.ino != ino) return error(Code::kCorruption, "inode key {} holds inode {}", ino, n.ino);
  if (!n.is_dir() || !with_stat) return n;
  s = db_->Get(ro, key::dir_stat(ino), &raw);
  if (s.IsNotFound()) return n;
  if (!s.ok()) return error(from_rocks(s, "read dir stat"));
  WEFT_TRY(DirStat stat, decode_dir_stat(raw));
  return apply_dir_stat(std::move(n), stat);
}

// A stat storm is mostly lookups of files in a few directories: the parent is
// read for its permission bits only; its DirStat, a merge chain of up to
// max_successive_merges operands in a hot directory, is skipped.
// The three reads first go without a snapshot (taking and releasing one locks
// the DB mutex, which every lookup and commit then contends on). Unlocked
// reads may straddle a rename or unlink: a dentry read before it can name an
// inode that is gone or unlinked when read (or, for "..", a parent that was
// removed after its child moved away). Only then are they read again at
// one snapshot, so a lookup never answers from a mix of two states.
Result<Inode> MetaStore::lookup(const Context& ctx, Ino parent_ino, std::string_view name) {
  return observe(metrics_of(Op::kLookup), [&]() -> Result<Inode> {
    WEFT_RETURN_IF_ERROR(check_name(name));
    Result<Inode> r = lookup_at(ctx, parent_ino, name, nullptr);
    // ".." read after its directory was moved and its old parent removed: gone too.
    bool dots = name == "." || name == "..";
    bool torn = r ? r->nlink == 0
                  : r.error().code() == Code::kCorruption || (dots && r.error().code() == Code::kNotFound);
    if (!torn) return r;
    SnapshotHolder snap(db_);
    return lookup_at(ctx, parent_ino, name, snap.get());
  });
}

Result<Inode> MetaStore::lookup_at(const Context& ctx, Ino parent_ino, std::string_view name,
                                   const rocksdb::Snapshot* snapshot) {
  WEFT_TRY(Inode parent, read_inode(parent_ino, snapshot, /*with_stat=*/false));
  if (!parent.is_dir()) return error(Code::kNotDirectory, "inode {} is not a directory", parent_ino);
  WEFT_RETURN_IF_ERROR(check_access(parent, ctx.cred, kAccessExec));
  if (name == ".") return read_inode(parent_ino, snapshot);
  if (name == "..") return read_inode(parent.parent, snapshot);
  rocksdb::ReadOptions ro;
  ro.snapshot = snapshot;
  std::string raw;
  auto s = db_->Get(ro, key::dentry(parent_ino, name), &raw);
  if (s.IsNotFound()) return error(Code::kNotFound, "no '{}' in directory {}", name, parent_ino);
  if (!s.ok()) return error(from_rocks(s, "lookup"));
  WEFT_TRY(DentryValue d, decode_dentry(raw));
  auto child = read_inode(d.ino, snapshot);
  if (!child && child.error().code() == Code::kNotFound)
    return error(Code::kCorruption, "dentry '{}' in {} names missing inode {}", name, parent_ino, d.ino);
  return child;
}

Result<Inode> MetaStore::getattr(const Context&, Ino ino) {
  return observe(metrics_of(Op::kGetattr), [&] { return read_inode(ino); });
}

Result<std::string> MetaStore::readlink(const Context&, Ino ino) {
  return observe(metrics_of(Op::kReadlink), [&]() -> Result<std::string> {
    WEFT_TRY(Inode n, read_inode(ino));
    if (!n.is_symlink()) return error(Code::kInvalidArgument, "inode {} is not a symlink", ino);
    return n.symlink_target;
  });
}

Result<DirPage> MetaStore::readdir(const Context& ctx, Ino dir, std::string_view cookie, size_t limit) {
  return observe(metrics_of(Op::kReaddir), [&]() -> Result<DirPage> {
    if (limit == 0) return error(Code::kInvalidArgument, "readdir limit 0");
    if (!cookie.empty()) WEFT_RETURN_IF_ERROR(check_name(cookie));
    limit = std::min(limit, kReaddirLimitMax);
    SnapshotHolder snap(db_);
    WEFT_TRY(Inode d, read_inode(dir, snap.get()));
    if (!d.is_dir()) return error(Code::kNotDirectory, "inode {} is not a directory", dir);
    WEFT_RETURN_IF_ERROR(check_access(d, ctx.cred, kAccessRead));
    const bool searchable = check_access(d, ctx.cred, kAccessExec).has_value();
    const std::string prefix = key::dentry_prefix(dir);
    const std::string end = key::prefix_end(prefix);
    rocksdb::Slice end_slice(end);
    rocksdb::ReadOptions ro;
    ro.snapshot = snap.get();
    ro.iterate_upper_bound = &end_slice;
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro));
    const std::string start = key::dentry(dir, cookie);
    DirPage page;
    size_t page_bytes = 0;
    // The cookie is the last name returned: resume strictly after it, whether
    // or not it still exists. A page ends at `limit` entries or before the
    // entry that would take it past kListReplyBytesMax (never empty).
    for (it->Seek(start); it->Valid() && it->key().starts_with(prefix); it->Next()) {
      if (!cookie.empty() && it->key() == start) continue;
      if (page.entries.size() == limit) break;
      DirEntry e;
      e.name = it->key().ToString().substr(prefix.size());
      WEFT_TRY(DentryValue dv, decode_dentry(std::string_view(it->value().data(), it->value().size())));
      e.ino = dv.ino;
      e.type = dv.type;
      if (searchable) {
        WEFT_TRY(e.attr, read_inode(dv.ino, snap.get()));
      }
      const size_t bytes = encoded_bytes_max(e);
      if (!page.entries.empty() && page_bytes + bytes > kListReplyBytesMax) break;
      page_bytes += bytes;
      page.entries.push_back(std::move(e));
    }
    if (!it->status().ok()) return error(from_rocks(it->status(), "readdir"));
    page.eof = !it->Valid() || !it->key().starts_with(prefix);
    page.cookie = page.entries.empty() ? std::string(cookie) : page.entries.back().name;
    return page;
  });
}

Result<StatFs> MetaStore::statfs(const Context&) {
  return observe(metrics_of(Op::kStatfs), [&]() -> Result<StatFs> {
    StatFs st;
    std::string raw;
    auto s = db_->Get(rocksdb::ReadOptions(), key::kInodeCount, &raw);
    if (!s.ok() && !s.IsNotFound()) return error(from_rocks(s, "read inode count"));
    if (s.ok()) {
      WEFT_TRY(int64_t n, decode_i64(raw));
      st.inodes_used = static_cast<uint64_t>(std::max<int64_t>(0, n));
    }
    st.inodes_max = options_.inodes_max;
    {
      std::lock_guard lock(alloc_mu_);
      st.ids_issued_below = next_id_;
    }
    st.store_id = store_id_;
    return st;
  });
}

Result<Layout> MetaStore::get_layout(const Context&, Ino ino) {
  return observe(metrics_of(Op::kGetLayout), [&]() -> Result<Layout> {
    WEFT_TRY(Inode n, read_inode(ino));
    if (n.is_symlink()) return error(Code::kInvalidArgument, "inode {} is a symlink", ino);
    return n.layout;
  });
}

Result<std::vector<GcItem>> MetaStore::gc_pending(size_t limit, std::optional<Ino> after) {
  return observe(metrics_of(Op::kGcPending), [&]() -> Result<std::vector<GcItem>> {
    std::vector<GcItem> items;
    std::lock_guard scanning(gc_scan_mu_);  // GcFloor: one scan at a time
    GcFloor::Mark mark = gc_floor_.mark();  // before the iterator's snapshot
    if (mark.empty || limit == 0 || after == std::numeric_limits<Ino>::max()) return items;
    // No committed key lies below the floor: a cursor below it starts there.
    const Ino from = after ? std::max(mark.floor, *after + 1) : mark.floor;
    WEFT_TRY(items, scan_gc_queue(from, limit));
    // Only a scan from the floor found the first live key (or that there is
    // none); one from a cursor knows nothing about the keys below it.
    if (!after) gc_floor_.raise(items.empty() ? std::nullopt : std::optional<Ino>(items.front().ino));
    // A queued file is visible before its commit is durable (early lock
    // release; a close is even acknowledged before). Its chunks must not go
    // before the unlink that queued it is sure to survive a crash.
    if (!items.empty() && syncer_) WEFT_RETURN_IF_ERROR(syncer_->wait_durable());
    return items;
  });
}

Result<Inode> MetaStore::queued_for_gc(Ino ino) {
  std::string raw;
  auto s = db_->Get(rocksdb::ReadOptions(), key::gc(ino), &raw);
  if (s.IsNotFound()) return error(Code::kNotFound, "inode {} is not queued for chunk GC", ino);
  if (!s.ok()) return error(from_rocks(s, "read gc queue"));
  return decode_inode(raw);
}

Result<std::vector<GcItem>> MetaStore::scan_gc_queue(Ino from, size_t limit) {
  std::vector<GcItem> items;
  const std::string upper = key::prefix_end(std::string(1, key::kGcPrefix));
  rocksdb::Slice upper_slice(upper);
  rocksdb::ReadOptions ro;
  ro.iterate_upper_bound = &upper_slice;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro));
  for (it->Seek(key::gc(from)); it->Valid() && items.size() < limit; it->Next()) {
    WEFT_TRY(Inode n, decode_inode(std::string_view(it->value().data(), it->value().size())));
    WEFT_TRY(uint64_t ino, key::u64_at(std::string_view(it->key().data(), it->key().size()), 1));
    items.push_back({ino, std::move(n)});
  }
  if (!it->status().ok()) return error(from_rocks(it->status(), "gc_pending"));
  return items;
}

}  // namespace weft::meta
