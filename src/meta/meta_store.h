// meta/meta_store.h
// The POSIX namespace of Weft on a RocksDB TransactionDB: inodes, directory
// entries, layouts, xattrs, write sessions, file lengths and the chunk GC
// queue, with POSIX permission checks against caller credentials.
//
// Threading: every method is thread-safe and synchronous; the RPC server calls
// cheap ones inline on its I/O threads (with DeferSync, so they never sleep on
// an fsync) and the rest from a bounded thread pool. Mutations run as pessimistic transactions
// that lock the rows they depend on (GetForUpdate) and commit with a synced
// WAL; there is no global lock, so concurrent commits share WAL syncs (RocksDB
// group commit; by default through WalSyncer, which also releases row locks
// before the fsync). Lock timeouts and deadlocks retry the whole operation up to
// StoreOptions::commit_retries_max times, then fail with kBusy.
//
// Locking protocol (what makes concurrent operations correct):
//   - a directory's inode is locked SHARED by every operation that adds or
//     removes entries in it (create, mkdir, unlink, rename, ...) and
//     EXCLUSIVE by operations that change or remove the directory itself
//     (setattr, rmdir, rename of the directory). An emptiness check therefore
//     sees every entry committed before it and none can appear after it.
//   - a name is locked through its dentry key (exclusive).
//   - a file's inode is locked exclusive by whatever changes it (nlink, size,
//     sessions, attrs).
//   - directory mtime/ctime and subdirectory count live in DirStat (T<ino>),
//     merged without a lock so creates in one directory do not serialize.
//     A directory within 1024 links of kLinkCountMax is locked exclusive by
//     mkdir and rename instead, so its last links are counted in order.
//
// Retries: a mutation with a valid RequestId stores its outcome (success or
// error) in the same transaction under R<client><seq>; the same id again
// returns that outcome without re-executing. Bound: per client the records of
// the last StoreOptions::request_window sequence numbers are kept (recording
// seq deletes seq - window), and expire_requests(age) drops all records of
// a client whose newest record is older than age (a client that went away);
// a client still active keeps its window. Clients number their mutations
// consecutively, so a client's newest record is its highest seq.
//
// Names: "." and ".." are never stored. lookup resolves them; mkdir/
// symlink/link and exclusive create of them -> kExists (EEXIST, as Linux), a
// create without O_EXCL -> kIsDirectory (EISDIR); rmdir "." -> EINVAL,
// rmdir ".." -> ENOTEMPTY; unlink of either -> EISDIR; rename of either ->
// EINVAL (Linux says EBUSY for some cases; we have no EBUSY semantics).
// readdir does not return "." and "..": clients synthesize them.
//
// Invariants (checked by fsck.h): every dentry points to an existing inode of
// its type; file nlink = number of dentries; directory nlink = 2 + number of
// subdirectories; every inode is reachable from the root unless it is a file
// with nlink 0 kept alive by a write session; GC-queued inodes have no I key.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/free_space.h"
#include "common/metrics.h"
#include "common/status.h"
#include "meta/gc_floor.h"
#include "meta/read_holds.h"
#include "meta/layout.h"  // validate_layout
#include "meta/types.h"

namespace rocksdb {
class TransactionDB;
class DB;
class Snapshot;
}  // namespace rocksdb

namespace weft::meta {

class Txn;
class WalSyncer;
enum class Op : uint8_t;  // meta/ops.h
struct OpMetrics;         // meta/ops.h

// Whether chain table `id` exists in the cluster's routing: {} if it does,
// kInvalidArgument if not, another error (kUnavailable, ...) when the routing
// cannot be had. May block: MetaStore calls it only from set_layout, outside
// any transaction.
using ChainTableCheck = std::function<Result<void>(uint32_t id)>;

struct StoreOptions {
  std::string path;                  // RocksDB directory (created if missing)
  uint32_t chain_count = 1;          // chains in the table: stripe default min(16, chains)
  uint32_t chain_table_id = 1;
  uint64_t ino_batch = 4096;         // inode ids reserved per persisted high-water step
  uint64_t request_window = 1024;    // retry records kept per client
  int commit_retries_max = 20;
  int64_t lock_timeout_ms = 1000;
  bool sync = true;                  // acknowledge commits only once the WAL is fsynced
  bool group_sync = true;            // with sync: one WalSyncer fsync covers many commits
                                     // (wal_syncer.h); false: RocksDB sync=true writes
  bool group_linger = true;          // the syncer waits briefly for a group to gather
  // mknod of FIFOs, sockets and devices; false: EPERM, as before they existed
  // (while clients too old to decode their inodes remain: docs/DEPLOY.md).
  bool special_files = true;
  uint64_t inodes_max = uint64_t{1} << 40;
  // Bytes of the store's filesystem kept free: below it mutations that add
  // data fail with kNoSpace (ENOSPC), removals below a quarter of it
  // (common/free_space.h). 0: no guard.
  uint64_t reserve_bytes = uint64_t{256} << 20;
  // How long meta keeps the data of a file whose last link went for readers
  // that may still have it open (meta/read_holds.h); 0: not at all.
  std::chrono::milliseconds read_hold{0};
  // A session reaper closes abandoned write sessions (meta in a cluster);
  // false: abandon_session closes the session as close() does.
  bool sessions_reaped = true;
  Clock* clock = nullptr;                  // default SystemClock
  metrics::Registry* registry = nullptr;   // default Registry::global()
  // Tests only: expire_requests calls it when it found a client idle, before
  // it deletes that client's records (where a racing writer can come back).
  std::function<void(uint64_t client_id)> before_expiring_client;
};

// Bounds on the work of one expire_requests call.
struct ExpireLimits {
  uint64_t steps_max = 16384;       // clients looked at + records deleted
  size_t batch_deletes_max = 1024;  // deletes per WriteBatch (~30 KiB of keys)
  // A pass that removed at least this many records compacts the retry
  // records' key range at its end (see store_expire.cc).
  uint64_t compact_after_removed = 4096;
};

// What one expire_requests call did.
struct ExpireProgress {
  uint64_t clients = 0;    // clients looked at
  uint64_t removed = 0;    // retry records deleted
  bool pass_done = false;  // it went past the last client: the next call starts a new pass
};

// While a DeferSync is alive, mutations the calling thread runs return right
// after their commit instead of blocking until the WAL sync covers it; then
// sync_pending() says whether the caller must wait for MetaStore::when_durable
// before it acknowledges. Scoped to one thread: never keep one across a co_await.
class DeferSync {
 public:
  DeferSync();
  ~DeferSync();
  DeferSync(const DeferSync&) = delete;
  DeferSync& operator=(const DeferSync&) = delete;

  bool sync_pending() const { return sync_pending_; }
  // Set by a mutation that must not be acknowledged before its sync even by
  // a caller that acknowledges others early (the service's close): see
  // MetaStore::close.
  bool must_wait() const { return must_wait_; }
  // The DeferSync of this thread, or null.
  static DeferSync* current();
  void set_sync_pending() { sync_pending_ = true; }
  void set_must_wait() { must_wait_ = true; }

 private:
  DeferSync* outer_;
  bool sync_pending_ = false;
  bool must_wait_ = false;
};

class MetaStore {
 public:
  static Result<std::unique_ptr<MetaStore>> open(StoreOptions options);
  ~MetaStore();
  MetaStore(const MetaStore&) = delete;
  MetaStore& operator=(const MetaStore&) = delete;

  // --- reads (no request id needed) ---
  Result<Inode> lookup(const Context& ctx, Ino parent, std::string_view name);
  Result<Inode> getattr(const Context& ctx, Ino ino);
  Result<std::string> readlink(const Context& ctx, Ino ino);
  // Entries after `cookie` ("" = from the start), with attrs: at most `limit`
  // (and 4096), and no more than fit in about kListReplyBytesMax encoded
  // (at least one). Only `eof` says the directory ended.
  Result<DirPage> readdir(const Context& ctx, Ino dir, std::string_view cookie, size_t limit);
  // Inode counts only: bytes are the storage targets' (the client adds what
  // they report to mgmtd, client_impl.cc).
  Result<StatFs> statfs(const Context& ctx);
  Result<std::string> getxattr(const Context& ctx, Ino ino, std::string_view name);
  Result<std::vector<std::string>> listxattr(const Context& ctx, Ino ino);
  Result<Layout> get_layout(const Context& ctx, Ino dir);
  // Up to `limit` files queued for chunk GC, in inode order: the first ones,
  // or (`after` set) the first ones with a greater inode, so a worker can go
  // round the queue past files it cannot finish yet. Items are handed out only
  // once the commits that queued them are durable.
  Result<std::vector<GcItem>> gc_pending(size_t limit, std::optional<Ino> after = std::nullopt);
  // The inode as queued for chunk GC (its chunks wait there), else kNotFound.
  Result<Inode> queued_for_gc(Ino ino);

  // The store's identity (random, made with it) and its persisted id
  // high-water mark: every inode and session id it handed out, before a crash
  // too, is below the mark. A meta in a cluster reports both to mgmtd, which
  // refuses another store or a lower mark (mgmt/cluster_state.h, "Meta's store").
  uint64_t store_id() const { return store_id_; }
  uint64_t ids_reserved_below();
  // Raises the next id handed out to at least `floor` (never lowers it),
  // synced before it returns whatever StoreOptions::sync says: after an
  // operator accepted a store change (`weft serve meta --accept-store-change`),
  // no id an earlier store handed out may be issued again, restarts included.
  Result<void> raise_next_id(uint64_t floor);
  // Gives the store a new random id, synced (whatever StoreOptions::sync
  // says): `weft serve meta --accept-store-change` makes every accepted change
  // a store of its own, so a meta still serving a copy of the store it
  // replaced is another store to mgmtd (refused, fenced), and storage's
  // orphan sweeps see the change (storage/orphan_sweep.h). Call before the
  // store is served.
  Result<void> renew_store_id();

  // --- mutations ---
  // exclusive: kExists if the name exists; otherwise an existing file is
  // opened as open() would, with open(2)'s checks for `open` (read for
  // O_RDONLY and O_RDWR, write for O_WRONLY and O_RDWR; a create not for
  // writing opens for reading, whatever open.read says). open.write also
  // records a write session (reply.session_id). An existing symlink of that
  // name: kLoop (the caller resolves it and creates at its target).
  // expect_parent (create, unlink, rmdir): see ParentCheck.
  Result<Reply> create(const Context& ctx, Ino parent, std::string_view name, uint32_t mode,
                       bool exclusive, OpenFlags open, const std::optional<ParentCheck>& expect_parent = std::nullopt);
  // The same, for O_WRONLY (open_for_write) or O_RDONLY.
  Result<Reply> create(const Context& ctx, Ino parent, std::string_view name, uint32_t mode,
                       bool exclusive, bool open_for_write, const std::optional<ParentCheck>& expect_parent = std::nullopt);
  Result<Inode> mkdir(const Context& ctx, Ino parent, std::string_view name, uint32_t mode,
                      const std::optional<ParentCheck>& expect_parent = std::nullopt);
  Result<Inode> symlink(const Context& ctx, Ino parent, std::string_view name, std::string_view target,
                        const std::optional<ParentCheck>& expect_parent = std::nullopt);
  // A FIFO, socket or character/block device (`type`, is_special_type);
  // devices only for root (kNotPermitted, as Linux without CAP_MKNOD), and
  // `rdev` is kept for devices only. Regular files come from create.
  Result<Inode> mknod(const Context& ctx, Ino parent, std::string_view name, InodeType type, uint32_t mode,
                      uint64_t rdev);
  Result<Inode> link(const Context& ctx, Ino ino, Ino new_parent, std::string_view new_name);
  Result<void> unlink(const Context& ctx, Ino parent, std::string_view name,
                      const std::optional<ParentCheck>& expect_parent = std::nullopt);
  Result<void> rmdir(const Context& ctx, Ino parent, std::string_view name,
                     const std::optional<ParentCheck>& expect_parent = std::nullopt);
  Result<void> rename(const Context& ctx, Ino src_parent, std::string_view src_name, Ino dst_parent,
                      std::string_view dst_name, RenameFlags flags = RenameFlags::kNone);
  // A size beyond kFileBytesMax: kFileTooBig (EFBIG).
  Result<Inode> setattr(const Context& ctx, Ino ino, const SetAttr& attr);
  Result<void> setxattr(const Context& ctx, Ino ino, std::string_view name, std::string_view value,
                        XattrFlags flags);
  Result<void> removexattr(const Context& ctx, Ino ino, std::string_view name);
  // The layout's chain table must exist (see set_chain_table_check): files
  // under a directory on a table that does not exist can be neither written
  // nor collected. kInvalidArgument when it does not.
  Result<void> set_layout(const Context& ctx, Ino dir, const Layout& layout);

  // Read-only opens check permissions and write nothing. Write opens record a
  // session (reply.session_id != 0) that close() removes, owned by
  // ctx.caller_id() (kInvalidArgument without one; create's open_for_write too).
  Result<Reply> open(const Context& ctx, Ino ino, OpenFlags flags);
  // Read-only open of `name` in `parent` (the first-epoch open: one round
  // trip, nothing written); a symlink comes back unopened for the caller to
  // follow.
  Result<Reply> open_read_at(const Context& ctx, Ino parent, std::string_view name);
  // close and report_length: only the session's owner (the caller_id() that
  // opened it) or root; kBadHandle for anyone else.
  // A close of a file with no links left (or gone with this close) sets its
  // thread's DeferSync::must_wait: lost in a crash, its session would come
  // back and keep the file and its chunks as long as the client lives (the
  // session reaper drops only sessions of clients without a lease). See
  // service.cc (Run::kInlineUnsynced) for the other closes.
  Result<void> close(const Context& ctx, Ino ino, uint64_t session_id);
  // The session reaper's close of a dead writer's session (as root): as
  // close(), except that an unlinked file it takes with it is queued for GC
  // as reaching every chain of its stripe whatever its length. The writer
  // may have stored chunks past the length it reported (or reported none):
  // the GC then removes by range on every chain (client/chunk_gc.h), not
  // only the chunks of the known length.
  Result<void> close_dead(Ino ino, uint64_t session_id);
  // A writer reports the highest offset written after writing; the length
  // only grows, and mtime and ctime become now. A caller other than root
  // drops the file's setuid (and group-executable setgid), as a write does.
  // `session_id` must be an open write session of `ino` (kBadHandle otherwise);
  // a length beyond kFileBytesMax: kFileTooBig.
  // When another client truncated the file since the session last answered
  // for it (types.h SessionCut) and `length` is past the truncate's length,
  // the report counts only up to that length and the reply names the cut:
  // the writer reports again, with `ack_cut` = the cut's gen, the end of
  // what storage still holds of its writes. A report acknowledging the
  // newest cut is taken whole (and clears it).
  Result<LengthReply> report_length(const Context& ctx, Ino ino, uint64_t session_id, uint64_t length,
                                    uint64_t ack_cut = 0);
  // report_length and close in one commit (a writer's last report): one
  // round trip and one commit instead of two. Its errors are report_length's
  // and close's; on any of them nothing changed (the session stays open).
  // A report capped for a cut leaves the session open too (the writer
  // answers the cut and closes again).
  Result<LengthReply> close_with_length(const Context& ctx, Ino ino, uint64_t session_id, uint64_t length,
                                        uint64_t ack_cut = 0);
  // The writer gives up closing its session itself: its last length report
  // failed (storage or meta unreachable for the retry time, or the answer
  // to another client's truncate could not be listed). Instead of a close
  // that would leave what it wrote past the length outside the file, the
  // session is marked abandoned and the session reaper closes it, whatever
  // the client's lease, with the length of what storage holds (as for a dead
  // writer, close_dead_session), once min_age passed since the abandon (a
  // write the client gave up on may still land). Every write through it
  // came before: a length set since, even an extension and even by its own
  // client, marks it, and no byte past that counts. Caller as close's;
  // kBadHandle when gone. Without a reaper (StoreOptions::sessions_reaped
  // false) it is close().
  Result<void> abandon_session(const Context& ctx, Ino ino, uint64_t session_id);
  // The session reaper's close of a dead writer's session (root): with
  // `length` (what storage holds of the file past its length, listed after
  // the file was read with ctime `expect_ctime_ns`), as the writer's own
  // close_with_length. Only if the inode's ctime is still that: any change
  // since (a truncate, by another client or the dead one's own, another
  // writer's report) may be one the listing missed, and the answer is false
  // with nothing changed (the reaper lists again at its next pass). So every
  // truncate marked on the session came before the listing, which answers it.
  // kBadHandle when the session or the inode is gone.
  Result<bool> close_dead_session(Ino ino, uint64_t session_id, uint64_t length, int64_t expect_ctime_ns);
  // Closes every write session a client opened (the server calls this when
  // the client's lease expires); unlinked files it kept alive go to GC.
  // Returns how many sessions were closed.
  Result<uint64_t> drop_sessions_of(uint64_t client_id);
  // The GC worker removed the chunks of `ino` (root credentials only);
  // kNotFound if it was not queued.
  Result<void> gc_done(const Context& ctx, Ino ino);
  // The same for many files in one commit; returns how many were queued
  // (the others are skipped: done before).
  Result<size_t> gc_done(const Context& ctx, std::span<const Ino> inos);
  // Drops every retry record of each client whose newest record is older
  // than age_ns; clients still active keep theirs (bounded by the window).
  // Looks at clients, not records: one seek per client, and reads and deletes
  // the records only of clients that went away. One call does at most
  // limits.steps_max steps, then the next call resumes where it stopped (a
  // cursor in memory; after the last client it starts over, as after a
  // restart). Calls are serialized.
  Result<ExpireProgress> expire_requests(int64_t age_ns, const ExpireLimits& limits = {});

  // Calls done once the WAL is synced past every commit that returned before
  // this call (at once when commits are synced by themselves). done runs on
  // the syncer's thread and must not block. See DeferSync.
  void when_durable(std::move_only_function<void(Result<void>)> done);

  // How set_layout learns which chain tables exist (the server asks mgmtd).
  // Without one (a meta server outside a cluster) it cannot tell: only root
  // may then name a table other than options().chain_table_id or the
  // directory's current one. REQUIRES: before the store serves requests.
  void set_chain_table_check(ChainTableCheck check) { chain_table_check_ = std::move(check); }

  rocksdb::DB* db();
  const StoreOptions& options() const { return options_; }
  // The inodes clients have open, which the chunk GC keeps (read_holds.h).
  ReadHolds& read_holds() { return *read_holds_; }
  Layout default_layout() const;

 private:
  using Body = std::function<Result<Reply>(Txn&)>;

  explicit MetaStore(StoreOptions options);
  Result<void> init();
  Result<void> create_root();
  Result<uint64_t> alloc_id();
  int64_t now_ns() const { return options_.clock->wall_ns(); }
  OpMetrics& metrics_of(Op op);

  // Runs `body` in a transaction with request de-duplication and bounded retries.
  Result<Reply> mutate(Op op, const Context& ctx, const Body& body);
  std::optional<Result<Reply>> attempt(Op op, const Context& ctx, const Body& body);
  void forget_window_tail(Txn& txn, const Context& ctx);
  // The same for a request refused before mutate() (set_layout's checks).
  void forget_window_tail(const Context& ctx);
  Result<void> record_request(Txn& txn, Op op, const Context& ctx, const Result<Reply>& r);
  // After a commit (or a replayed record): waits for its WAL sync, or leaves
  // that to the caller's DeferSync.
  Result<void> await_sync();

  // Shared pieces of operations (store_*.cc).
  // For an operation `op` that adds entry `name` to directory `parent`: the
  // directory locked for entries, or kExists when `name` is "." or ".." or is
  // taken (its dentry stays locked), then EACCES without w+x on it.
  Result<Inode> lock_free_name(Txn& txn, const Context& ctx, Ino parent, std::string_view name, std::string_view op);
  // Locks `dir` shared to change its entries, checks it is a directory the
  // caller may search. Write permission comes after the name's lookup
  // (check_dir_writable), as in Linux: ENOENT and EEXIST before EACCES.
  // need_nlink: merge its DirStat in (only mkdir/rename need the link count;
  // skipping it keeps creates cheap).
  Result<Inode> lock_dir_searchable(Txn& txn, const Context& ctx, Ino dir, bool need_nlink = false);
  static Result<void> check_dir_writable(const Inode& dir, const Context& ctx);
  // REQUIRES: before the operation's own locks. kStaleHandle unless
  // `expect` (when set) still names `parent`; see ParentCheck.
  Result<void> check_parent(Txn& txn, const Context& ctx, const std::optional<ParentCheck>& expect, Ino parent);
  // One entry of a ParentCheck; `lock`: shared locks on it and its directory.
  Result<void> check_entry(Txn& txn, const Context& ctx, const EntryCheck& e, bool lock);
  // Compacts the key range of the retry records (after a large expiry).
  Result<void> compact_requests();
  // symlink_target: symlinks only; rdev: devices only.
  Result<Inode> new_inode(Txn& txn, const Context& ctx, const Inode& parent, InodeType type, uint32_t mode,
                          std::string_view symlink_target = {}, uint64_t rdev = 0);
  Result<void> add_entry(Txn& txn, const Inode& parent, std::string_view name, const Inode& child);
  Result<void> touch_dir(Txn& txn, Ino dir, int64_t nlink_delta);
  Result<void> drop_link(Txn& txn, Inode victim);
  Result<void> destroy_inode(Txn& txn, const Inode& inode);
  Result<uint64_t> begin_session(Txn& txn, const Context& ctx, Ino ino, bool answers_cuts);
  // Unlocked read, optionally at a snapshot. with_stat: merge a directory's
  // DirStat in (nlink, mtime, ctime); a permission check needs only the base.
  Result<Inode> read_inode(Ino ino, const rocksdb::Snapshot* snapshot = nullptr, bool with_stat = true);
  // Whether meta keeps a retry record of ctx's request (it was answered;
  // mutate() answers a retry from it). False for a request without an id.
  bool answered_before(const Context& ctx);
  // Up to `limit` items of the GC queue from inode `from` on.
  // REQUIRES: gc_scan_mu_ held (GcFloor: the scan's mark was taken before).
  Result<std::vector<GcItem>> scan_gc_queue(Ino from, size_t limit);
  // lookup's reads, at `snapshot` or (null) each at the latest state.
  Result<Inode> lookup_at(const Context& ctx, Ino parent_ino, std::string_view name,
                          const rocksdb::Snapshot* snapshot);
  Result<void> close_session(const Context& ctx, Ino ino, uint64_t session_id, bool writer_gone = false);
  // Inside a mutation: ends write session `session_id` of `n` (locked) after
  // checking its caller; the last writer of an unlinked file destroys it.
  // `writer_gone`: see close_dead.
  Result<void> end_session(Txn& txn, const Context& ctx, Inode& n, uint64_t session_id, bool writer_gone = false);
  // A writer's length report applied to `n` (not written).
  Result<void> apply_length(const Context& ctx, Inode& n, uint64_t length) const;
  // report_length's body on `n` (locked) through session `session_id`: the
  // cut the report was capped for (gen 0: taken whole). Writes the inode
  // and, when the report acknowledged a cut, the session.
  Result<SessionCut> take_report(Txn& txn, const Context& ctx, Inode& n, uint64_t session_id, uint64_t length,
                                 uint64_t ack_cut);
  // A truncate of `n` to `length`: every write session of other clients
  // records it (types.h SessionCut).
  // `abandoned_only`: an extension, which removed nothing (SetAttr::no_cut).
  Result<void> mark_sessions_cut(Txn& txn, const Context& ctx, Ino ino, uint64_t length, bool abandoned_only);
  Result<Reply> do_create(Txn& txn, const Context& ctx, Ino parent, std::string_view name, uint32_t mode,
                          bool exclusive, OpenFlags open);
  Result<void> do_rename(Txn& txn, const Context& ctx, Ino sp, std::string_view sn, Ino dp,
                         std::string_view dn, RenameFlags flags);
  Result<void> check_not_ancestor(Txn& txn, Ino moved, Ino dst_parent);
  Result<Inode> do_setattr(Txn& txn, const Context& ctx, Ino ino, const SetAttr& attr);
  // Whether `session_id` (0: none) is a write session on `ino` of the
  // caller's client (store_session.cc).
  Result<bool> holds_write_session(Txn& txn, const Context& ctx, Ino ino, uint64_t session_id);

  StoreOptions options_;
  ChainTableCheck chain_table_check_;  // set before serving, read-only afterwards
  rocksdb::TransactionDB* db_ = nullptr;
  std::unique_ptr<WalSyncer> syncer_;  // set when sync && group_sync
  std::unique_ptr<FreeSpaceGuard> space_;  // admits everything when reserve_bytes is 0
  std::unique_ptr<ReadHolds> read_holds_;
  GcFloor gc_floor_;  // where gc_pending's scan starts (past the done items' tombstones)
  std::mutex gc_scan_mu_;  // serializes gc_pending's scans (GcFloor's rule)
  std::mutex alloc_mu_;
  uint64_t next_id_ = 0;   // guarded by alloc_mu_
  uint64_t id_limit_ = 0;  // guarded by alloc_mu_: persisted high-water mark
  uint64_t store_id_ = 0;  // set at open (key::kStoreId)
  std::mutex expire_mu_;  // serializes expire_requests
  // The highest client id the next expire_requests call looks at (clients are
  // visited in descending order); nullopt: the top. Guarded by expire_mu_.
  std::optional<uint64_t> expire_cursor_;
  uint64_t expire_removed_this_pass_ = 0;  // guarded by expire_mu_
  std::vector<std::unique_ptr<OpMetrics>> metrics_;
  metrics::Counter* commit_retries_ = nullptr;
  metrics::Counter* request_replays_ = nullptr;
};

}  // namespace weft::meta
