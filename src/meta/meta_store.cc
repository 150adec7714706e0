#include "meta/meta_store.h"

#include <chrono>
#include <thread>

#include <rocksdb/options.h>
#include <rocksdb/utilities/transaction_db.h>

#include "common/assert.h"
#include "common/fault.h"
#include "common/random.h"
#include "meta/ops.h"
#include "meta/rocks_options.h"
#include "meta/txn.h"
#include "meta/wal_syncer.h"

namespace weft::meta {
namespace {
thread_local DeferSync* tls_defer_sync = nullptr;
}  // namespace

DeferSync::DeferSync() : outer_(tls_defer_sync) { tls_defer_sync = this; }
DeferSync::~DeferSync() {
  WEFT_ASSERT(tls_defer_sync == this);  // scopes nest and stay on their thread
  tls_defer_sync = outer_;
}
DeferSync* DeferSync::current() { return tls_defer_sync; }

MetaStore::MetaStore(StoreOptions options) : options_(std::move(options)) {
  if (!options_.clock) options_.clock = &SystemClock::instance();
  read_holds_ = std::make_unique<ReadHolds>(*options_.clock, options_.read_hold);
  if (!options_.registry) options_.registry = &metrics::Registry::global();
  auto& reg = *options_.registry;
  for (size_t i = 0; i < kOpCount; ++i) {
    metrics::Labels l{{"op", std::string(op_name(static_cast<Op>(i)))}};
    metrics_.push_back(std::make_unique<OpMetrics>(OpMetrics{
        &reg.counter("weft_meta_ops_total", "Metadata operations", l),
        &reg.counter("weft_meta_op_errors_total", "Metadata operations that failed", l),
        &reg.histogram("weft_meta_op_latency_us", "Metadata operation latency", l)}));
  }
  commit_retries_ = &reg.counter("weft_meta_commit_retries_total", "Transactions retried after a lock conflict");
  request_replays_ = &reg.counter("weft_meta_request_replays_total", "Retried requests answered from the record");
}

MetaStore::~MetaStore() {
  syncer_.reset();  // joins its thread before the DB goes
  delete db_;
}

rocksdb::DB* MetaStore::db() { return db_; }

OpMetrics& MetaStore::metrics_of(Op op) { return *metrics_[static_cast<size_t>(op)]; }

Layout MetaStore::default_layout() const {
  Layout l;
  l.stripe_count = std::max<uint32_t>(1, std::min<uint32_t>(16, options_.chain_count));
  l.chain_table_id = options_.chain_table_id;
  return l;
}

Result<std::unique_ptr<MetaStore>> MetaStore::open(StoreOptions options) {
  if (options.path.empty()) return error(Code::kInvalidArgument, "meta store path is empty");
  if (options.ino_batch == 0 || options.request_window == 0)
    return error(Code::kInvalidArgument, "ino_batch and request_window must be positive");
  std::unique_ptr<MetaStore> store(new MetaStore(std::move(options)));
  WEFT_RETURN_IF_ERROR(store->init());
  return store;
}

Result<void> MetaStore::init() {
  rocksdb::Options opts = store_rocks_options();
  rocksdb::TransactionDBOptions topts;
  topts.num_stripes = 64;
  topts.default_lock_timeout = options_.lock_timeout_ms;
  try {
    auto s = rocksdb::TransactionDB::Open(opts, topts, options_.path, &db_);
    if (!s.ok()) return error(from_rocks(s, "open meta store " + options_.path));
    std::string raw;
    s = db_->Get(rocksdb::ReadOptions(), key::kNextIno, &raw);
    if (s.ok()) {
      WEFT_TRY(uint64_t v, key::u64_at(raw, 0));
      next_id_ = id_limit_ = v;
    } else if (s.IsNotFound()) {
      next_id_ = id_limit_ = kRootIno + 1;
    } else {
      return error(from_rocks(s, "read inode high-water mark"));
    }
    // The store's identity, made once (also for a store from before it existed).
    s = db_->Get(rocksdb::ReadOptions(), key::kStoreId, &raw);
    if (s.ok()) {
      WEFT_TRY(store_id_, key::u64_at(raw, 0));
    } else if (s.IsNotFound()) {
      store_id_ = random_id() | 1;  // never 0 ("not told")
      rocksdb::WriteOptions wo;
      // Synced even with [meta] sync = false: lost in a power cut, the store
      // would make another id at restart and mgmtd would refuse it as
      // another store.
      wo.sync = true;
      s = db_->Put(wo, key::kStoreId, key::inode(store_id_).substr(1));  // big-endian u64
      if (!s.ok()) return error(from_rocks(s, "write the store id"));
    } else {
      return error(from_rocks(s, "read the store id"));
    }
  } catch (const std::exception& e) {
    return error(Code::kInternal, "rocksdb threw: {}", e.what());
  }
  space_ = std::make_unique<FreeSpaceGuard>(options_.path, options_.reserve_bytes);
  if (options_.sync && options_.group_sync)
    syncer_ = std::make_unique<WalSyncer>(db_, *options_.registry, options_.group_linger);
  return create_root();
}

Result<void> MetaStore::create_root() {
  std::string raw;
  auto s = db_->Get(rocksdb::ReadOptions(), key::inode(kRootIno), &raw);
  if (s.ok()) return {};
  if (!s.IsNotFound()) return error(from_rocks(s, "read root inode"));
  Inode root;
  root.ino = kRootIno;
  root.type = InodeType::kDirectory;
  root.mode = 0755;
  root.nlink = 2;
  root.parent = kRootIno;
  root.atime_ns = root.mtime_ns = root.ctime_ns = now_ns();
  root.layout = default_layout();
  root.xattrs = XattrPresence::kNone;
  rocksdb::WriteOptions wo;
  wo.sync = options_.sync;
  Txn txn(std::unique_ptr<rocksdb::Transaction>(db_->BeginTransaction(wo)));
  WEFT_RETURN_IF_ERROR(txn.put(key::inode(kRootIno), encode_inode(root)));
  WEFT_RETURN_IF_ERROR(txn.put(key::dir_stat(kRootIno), encode_dir_stat({root.mtime_ns, root.ctime_ns, 0})));
  WEFT_RETURN_IF_ERROR(txn.merge_untracked(std::string(key::kInodeCount), encode_i64(1)));
  return txn.commit();
}

Result<uint64_t> MetaStore::alloc_id() {
  std::lock_guard lock(alloc_mu_);
  if (next_id_ == id_limit_) {
    uint64_t limit = id_limit_ + options_.ino_batch;
    std::string v = key::inode(limit).substr(1);  // big-endian u64
    rocksdb::WriteOptions wo;
    // Synced always (once per ino_batch ids), even with group sync, where
    // every commit using an id of the new range sits later in the WAL, and
    // with sync = false: statfs reports next_id_ as the issued-id mark and
    // storage's orphan sweeps take a mark that goes backwards after a crash
    // for another store; and ids issued before a power loss must never be
    // issued again (storage may hold chunks of those inodes).
    wo.sync = true;
    auto s = db_->Put(wo, key::kNextIno, v);
    if (!s.ok()) return error(from_rocks(s, "persist inode high-water mark"));
    id_limit_ = limit;
  }
  return next_id_++;
}

uint64_t MetaStore::ids_reserved_below() {
  std::lock_guard lock(alloc_mu_);
  return id_limit_;
}

Result<void> MetaStore::raise_next_id(uint64_t floor) {
  std::lock_guard lock(alloc_mu_);
  if (floor <= next_id_) return {};
  const uint64_t limit = std::max(id_limit_, floor);
  rocksdb::WriteOptions wo;
  wo.sync = true;  // the promise is durability before serving, even in unsynced test setups
  auto s = db_->Put(wo, key::kNextIno, key::inode(limit).substr(1));  // big-endian u64, as alloc_id
  if (!s.ok()) return error(from_rocks(s, "persist the raised inode high-water mark"));
  next_id_ = floor;
  id_limit_ = limit;
  return {};
}

Result<void> MetaStore::renew_store_id() {
  uint64_t id = store_id_;
  while (id == store_id_) id = random_id() | 1;  // never 0 ("not told"), never the old one
  rocksdb::WriteOptions wo;
  wo.sync = true;  // as at creation: lost, the store would come back as the one it replaced
  auto s = db_->Put(wo, key::kStoreId, key::inode(id).substr(1));  // big-endian u64
  if (!s.ok()) return error(from_rocks(s, "write the new store id"));
  store_id_ = id;
  return {};
}

Result<Reply> MetaStore::mutate(Op op, const Context& ctx, const Body& body) {
  OpMetrics& m = metrics_of(op);
  m.ops->inc();
  metrics::ScopedLatency latency(*m.latency_us);
  for (int attempt_no = 0; attempt_no <= options_.commit_retries_max; ++attempt_no) {
    if (attempt_no > 0) {
      commit_retries_->inc();
      uint64_t backoff_us = 50 * static_cast<uint64_t>(std::min(attempt_no, 10)) +
                            thread_random().uniform(100 * static_cast<uint64_t>(attempt_no));
      std::this_thread::sleep_for(std::chrono::microseconds(backoff_us));
    }
    auto r = attempt(op, ctx, body);
    if (!r) continue;  // lock conflict: run the whole operation again
    if (!*r) m.errors->inc();
    return std::move(*r);
  }
  m.errors->inc();
  return error(Code::kBusy, "{}: gave up after {} lock conflicts", op_name(op), options_.commit_retries_max);
}

// Mutations that only take data away or rewrite a record in place: admitted
// by the free-space guard down to a quarter of its reserve. (A length report
// or truncate refused here would hide data storage already accepted.)
static FreeSpaceGuard::Kind space_kind(Op op) {
  switch (op) {
    case Op::kReportLength:
    case Op::kSetattr:
    case Op::kUnlink:
    case Op::kRmdir:
    case Op::kRename:
    case Op::kRemovexattr:
    case Op::kClose:
    case Op::kCloseWithLength:
    case Op::kGcDone:
      return FreeSpaceGuard::Kind::kRelease;
    default:
      return FreeSpaceGuard::Kind::kGrow;
  }
}

std::optional<Result<Reply>> MetaStore::attempt(Op op, const Context& ctx, const Body& body) {
  rocksdb::WriteOptions wo;
  wo.sync = options_.sync && !syncer_;
  rocksdb::TransactionOptions to;
  to.lock_timeout = options_.lock_timeout_ms;
  to.deadlock_detect = true;
  Txn txn(std::unique_ptr<rocksdb::Transaction>(db_->BeginTransaction(wo, to)));
  if (ctx.req.valid()) {
    auto rec = txn.lock_raw(key::request(ctx.req.client_id, ctx.req.seq), true);
    if (!rec && txn.conflict()) return std::nullopt;
    if (!rec) return Result<Reply>(std::unexpected(rec.error()));
    if (*rec) {
      request_replays_->inc();
      auto stored = decode_request(**rec);
      if (!stored) return Result<Reply>(std::unexpected(stored.error()));
      if (stored->op != 0 && stored->op != static_cast<uint8_t>(op) + 1)
        return Result<Reply>(error(Code::kInvalidArgument,
                                   "request {}:{} is a {}, but its id was used by a {}: a client reused a request id",
                                   ctx.req.client_id, ctx.req.seq, op_name(op),
                                   op_name(static_cast<Op>(stored->op - 1))));
      // The original commit may not be synced yet (early lock release).
      auto durable = await_sync();
      if (!durable) return Result<Reply>(std::unexpected(durable.error()));
      if (stored->code != Code::kOk) return Result<Reply>(error(stored->code, stored->message));
      return Result<Reply>(std::move(stored->reply));
    }
  }
  // After the retry record: a retried request that succeeded is answered as
  // it was, however full the disk is now.
  if (auto admitted = space_->admit(space_kind(op)); !admitted) {
    forget_window_tail(txn, ctx);
    return Result<Reply>(std::unexpected(admitted.error()));
  }
  txn.set_save_point();
  Result<Reply> r = body(txn);
  if (!r && txn.conflict()) return std::nullopt;
  if (!r && !ctx.req.valid()) return r;  // nothing to commit; destruction rolls back
  if (!r) {
    auto rb = txn.rollback_to_save_point();
    if (!rb) return Result<Reply>(std::unexpected(rb.error()));
  }
  if (ctx.req.valid()) {
    auto rec = record_request(txn, op, ctx, r);
    if (!rec && txn.conflict()) return std::nullopt;
    if (!rec) return Result<Reply>(std::unexpected(rec.error()));
  }
  if (WEFT_FAULT("meta.txn.conflict")) return std::nullopt;  // as if a lock timed out
  // Widens race windows in tests: locks are held while we sleep.
  if (WEFT_FAULT("meta.commit.delay")) std::this_thread::sleep_for(std::chrono::microseconds(500));
  if (WEFT_FAULT("meta.commit.fail")) return Result<Reply>(error(Code::kIoError, "injected commit failure"));
  auto c = txn.commit();
  if (!c && txn.conflict()) return std::nullopt;
  if (!c) return Result<Reply>(std::unexpected(c.error()));
  if (auto queued = txn.gc_queued()) gc_floor_.lower(*queued);
  auto durable = await_sync();
  if (!durable) return Result<Reply>(std::unexpected(durable.error()));
  return r;
}

Result<void> MetaStore::await_sync() {
  if (!syncer_) return {};  // commits are synced by themselves, or not at all
  if (DeferSync* d = DeferSync::current()) {
    d->set_sync_pending();
    return {};
  }
  return syncer_->wait_durable();
}

void MetaStore::when_durable(std::move_only_function<void(Result<void>)> done) {
  if (!syncer_) return done(Result<void>());
  syncer_->when_durable(std::move(done));
}

// A request refused before its record (the disk full): the client used its
// number all the same, and records go by the window (recording N deletes
// N - window), so N - window is deleted here, or it would stay until the
// client goes idle (expire_requests). A tombstone, written only where the
// free-space guard admits removals; no group sync is waited for (nothing
// acknowledges it), though without a syncer a synced store writes it synced.
void MetaStore::forget_window_tail(Txn& txn, const Context& ctx) {
  if (!ctx.req.valid() || ctx.req.seq < options_.request_window) return;
  if (!space_->admit(FreeSpaceGuard::Kind::kRelease)) return;
  if (!txn.del_untracked(key::request(ctx.req.client_id, ctx.req.seq - options_.request_window))) return;
  (void)txn.commit();
}

void MetaStore::forget_window_tail(const Context& ctx) {
  if (!ctx.req.valid()) return;
  rocksdb::WriteOptions wo;
  wo.sync = options_.sync && !syncer_;  // as attempt()'s transactions
  Txn txn(std::unique_ptr<rocksdb::Transaction>(db_->BeginTransaction(wo)));
  forget_window_tail(txn, ctx);
}

static_assert(kOpCount < 255, "RequestRecord::op stores 1 + an Op in a byte");

Result<void> MetaStore::record_request(Txn& txn, Op op, const Context& ctx, const Result<Reply>& r) {
  RequestRecord rec;
  rec.time_ns = now_ns();
  rec.op = static_cast<uint8_t>(static_cast<uint8_t>(op) + 1);
  if (r) {
    rec.reply = *r;
  } else {
    rec.code = r.error().code();
    rec.message = r.error().message();
  }
  WEFT_RETURN_IF_ERROR(txn.put(key::request(ctx.req.client_id, ctx.req.seq), encode_request(rec)));
  if (ctx.req.seq >= options_.request_window)
    WEFT_RETURN_IF_ERROR(txn.del_untracked(key::request(ctx.req.client_id, ctx.req.seq - options_.request_window)));
  return {};
}

}  // namespace weft::meta
