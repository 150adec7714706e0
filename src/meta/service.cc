#include "meta/service.h"

#include <algorithm>
#include <filesystem>
#include <memory>

#include <asio/associated_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/post.hpp>

#include "common/fault.h"
#include "common/logging.h"
#include "meta/proto_convert.h"
#include "meta/service_methods.h"
#include "rpc/service.h"

namespace weft::meta {
namespace {

using Req = pb::MetaRequest;
using Rep = pb::MetaReply;

Rep reply_with(const Reply& r) {
  Rep out;
  to_proto(r, &out);
  return out;
}

Rep reply_with_inode(const Inode& i) { return reply_with(reply_of(i)); }

Rep reply_with_length(const LengthReply& r) {
  Reply out = reply_of(r.inode);
  out.cut = r.cut;
  return reply_with(out);
}

// A mutation's reply, or kTimeout if the lost-reply fault point is armed.
Result<Rep> answer_mutation(Result<Rep> r) {
  if (r && WEFT_FAULT("meta.service.drop_reply")) return error(Code::kTimeout, "injected: reply lost");
  return r;
}

template <class T, class F>
Result<Rep> map(Result<T> r, F f) {
  if (!r) return std::unexpected(std::move(r).error());
  return f(*r);
}

Result<Rep> empty_reply(Result<void> r) {
  if (!r) return std::unexpected(std::move(r).error());
  return Rep{};
}

using Handler = Result<Rep> (*)(MetaStore&, const Req&, const Context&);

Result<Rep> do_lookup(MetaStore& s, const Req& q, const Context& ctx) {
  return map(s.lookup(ctx, q.ino(), q.name()), reply_with_inode);
}
Result<Rep> do_getattr(MetaStore& s, const Req& q, const Context& ctx) {
  return map(s.getattr(ctx, q.ino()), reply_with_inode);
}
Result<Rep> do_readlink(MetaStore& s, const Req& q, const Context& ctx) {
  return map(s.readlink(ctx, q.ino()), [](const std::string& v) {
    Rep r;
    r.set_value(v);
    return r;
  });
}
Result<Rep> do_readdir(MetaStore& s, const Req& q, const Context& ctx) {
  return map(s.readdir(ctx, q.ino(), q.value(), q.limit() == 0 ? 1024 : q.limit()),
             [](const DirPage& p) {
               Rep r;
               to_proto(p, &r);
               return r;
             });
}
Result<Rep> do_statfs(MetaStore& s, const Req&, const Context& ctx) {
  return map(s.statfs(ctx), [](const StatFs& st) {
    Rep r;
    to_proto(st, r.mutable_statfs());
    return r;
  });
}
Result<Rep> do_getxattr(MetaStore& s, const Req& q, const Context& ctx) {
  return map(s.getxattr(ctx, q.ino(), q.name()), [](const std::string& v) {
    Rep r;
    r.set_value(v);
    return r;
  });
}
Result<Rep> do_listxattr(MetaStore& s, const Req& q, const Context& ctx) {
  return map(s.listxattr(ctx, q.ino()), [](const std::vector<std::string>& names) {
    Rep r;
    for (const auto& n : names) r.add_names(n);
    return r;
  });
}
Result<Rep> do_get_layout(MetaStore& s, const Req& q, const Context& ctx) {
  return map(s.get_layout(ctx, q.ino()), [](const Layout& l) {
    Rep r;
    to_proto(l, r.mutable_layout());
    return r;
  });
}

constexpr int kBatchStatInodesMax = 4096;

// Answers a prefix of the inodes asked for: it stops before the one that would
// take the reply past kListReplyBytesMax (symlink targets of up to 4 KiB make
// 4096 inodes ~17 MB); the caller asks again for the rest.
Result<Rep> do_batch_stat(MetaStore& s, const Req& q, const Context& ctx) {
  if (q.inos_size() > kBatchStatInodesMax)
    return error(Code::kTooBig, "batch_stat of {} inodes (max {})", q.inos_size(), kBatchStatInodesMax);
  Rep r;
  size_t bytes = 0;
  for (uint64_t ino : q.inos()) {
    auto a = s.getattr(ctx, ino);
    // Root only (storage's orphan sweep): what is left of removed files is nobody else's business.
    if (!a && a.error().code() == Code::kNotFound && q.with_queued() && ctx.cred.uid == 0) a = s.queued_for_gc(ino);
    pb::Inode one;
    to_proto(a ? *a : Inode{}, &one);
    const size_t one_bytes = one.ByteSizeLong() + 16;  // with its tag, length and code
    if (r.inodes_size() > 0 && bytes + one_bytes > kListReplyBytesMax) break;
    bytes += one_bytes;
    r.add_codes(a ? 0 : static_cast<uint32_t>(a.error().code()));
    *r.add_inodes() = std::move(one);
  }
  return r;
}

Result<Rep> do_hold_reads(MetaStore& s, const Req& q, const Context& ctx) {
  const std::span<const Ino> inos(q.inos().data(), static_cast<size_t>(q.inos().size()));
  WEFT_RETURN_IF_ERROR(s.read_holds().renew(ctx.connection_client_id, inos, q.hold_seq()));
  Rep r;
  r.set_renew_ms(static_cast<uint32_t>(s.read_holds().renew_interval().count()));
  return r;
}

// The request's ParentCheck, if it carries one.
std::optional<ParentCheck> expect_parent(const Req& q) {
  if (!q.has_expect_parent()) return std::nullopt;
  const auto& e = q.expect_parent();
  ParentCheck c{e.dir(), e.name(), {}};
  for (const auto& a : e.above()) c.above.push_back(EntryCheck{a.dir(), a.name(), a.ino()});
  return c;
}

Result<Rep> do_create(MetaStore& s, const Req& q, const Context& ctx) {
  // A create without open_read (a client from before it was sent for create)
  // is for reading, or for writing only: what such a client checked.
  return map(s.create(ctx, q.ino(), q.name(), q.mode(), q.exclusive(), OpenFlags{q.open_read(), q.open_write(), q.answers_cuts()},
                      expect_parent(q)),
             reply_with);
}
Result<Rep> do_mkdir(MetaStore& s, const Req& q, const Context& ctx) {
  return map(s.mkdir(ctx, q.ino(), q.name(), q.mode(), expect_parent(q)), reply_with_inode);
}
Result<Rep> do_symlink(MetaStore& s, const Req& q, const Context& ctx) {
  return map(s.symlink(ctx, q.ino(), q.name(), q.value(), expect_parent(q)), reply_with_inode);
}
Result<Rep> do_mknod(MetaStore& s, const Req& q, const Context& ctx) {
  if (q.node_type() > kInodeTypeMax) return error(Code::kInvalidArgument, "mknod of inode type {}", q.node_type());
  return map(s.mknod(ctx, q.ino(), q.name(), static_cast<InodeType>(q.node_type()), q.mode(), q.rdev()),
             reply_with_inode);
}
Result<Rep> do_link(MetaStore& s, const Req& q, const Context& ctx) {
  return map(s.link(ctx, q.ino(), q.new_parent(), q.new_name()), reply_with_inode);
}
Result<Rep> do_unlink(MetaStore& s, const Req& q, const Context& ctx) {
  return empty_reply(s.unlink(ctx, q.ino(), q.name(), expect_parent(q)));
}
Result<Rep> do_rmdir(MetaStore& s, const Req& q, const Context& ctx) {
  return empty_reply(s.rmdir(ctx, q.ino(), q.name(), expect_parent(q)));
}
Result<Rep> do_rename(MetaStore& s, const Req& q, const Context& ctx) {
  WEFT_TRY(RenameFlags flags, rename_flags_from_wire(q.flags()));
  return empty_reply(s.rename(ctx, q.ino(), q.name(), q.new_parent(), q.new_name(), flags));
}
Result<Rep> do_setattr(MetaStore& s, const Req& q, const Context& ctx) {
  return map(s.setattr(ctx, q.ino(), from_proto(q.attr())), reply_with_inode);
}
Result<Rep> do_setxattr(MetaStore& s, const Req& q, const Context& ctx) {
  WEFT_TRY(XattrFlags flags, xattr_flags_from_wire(q.flags()));
  return empty_reply(s.setxattr(ctx, q.ino(), q.name(), q.value(), flags));
}
Result<Rep> do_removexattr(MetaStore& s, const Req& q, const Context& ctx) {
  return empty_reply(s.removexattr(ctx, q.ino(), q.name()));
}
Result<Rep> do_set_layout(MetaStore& s, const Req& q, const Context& ctx) {
  return empty_reply(s.set_layout(ctx, q.ino(), from_proto(q.layout())));
}
Result<Rep> do_open(MetaStore& s, const Req& q, const Context& ctx) {
  return map(s.open(ctx, q.ino(), OpenFlags{q.open_read(), q.open_write(), q.answers_cuts()}), reply_with);
}
Result<Rep> do_open_read(MetaStore& s, const Req& q, const Context& ctx) {
  if (q.open_write()) return error(Code::kInvalidArgument, "open_read with write access: use open");
  return map(s.open(ctx, q.ino(), OpenFlags{q.open_read(), false}), reply_with);
}
Result<Rep> do_open_read_at(MetaStore& s, const Req& q, const Context& ctx) {
  if (q.open_write()) return error(Code::kInvalidArgument, "open_read_at with write access: use open");
  return map(s.open_read_at(ctx, q.ino(), q.name()), reply_with);
}
Result<Rep> do_close(MetaStore& s, const Req& q, const Context& ctx) {
  if (q.abandon()) return empty_reply(s.abandon_session(ctx, q.ino(), q.session_id()));
  return empty_reply(s.close(ctx, q.ino(), q.session_id()));
}
Result<Rep> do_close_with_length(MetaStore& s, const Req& q, const Context& ctx) {
  return map(s.close_with_length(ctx, q.ino(), q.session_id(), q.length(), q.ack_cut()), reply_with_length);
}
Result<Rep> do_report_length(MetaStore& s, const Req& q, const Context& ctx) {
  return map(s.report_length(ctx, q.ino(), q.session_id(), q.length(), q.ack_cut()), reply_with_length);
}

// Where a method runs. Point reads and cheap mutations run inline on the I/O
// thread: a RocksDB Get from the block cache costs microseconds, the hand-off
// to the blocking pool and back ~300 µs here. An inline mutation commits
// without waiting for its fsync (DeferSync) and its coroutine resumes when the
// group sync that covers it is done, so a create costs no thread hop besides
// the syncer's. What may scan many keys (rmdir's emptiness check over
// tombstones, rename's ancestor walk, readdir, statfs, batch_stat) stays on
// the pool. Inline mutations may still wait briefly for a row lock held by a
// pool transaction (or back off ~50 µs after a lock conflict); that never
// deadlocks: pool and syncer threads never wait for I/O threads.
// Close is the one mutation acknowledged before its WAL sync (kInlineUnsynced),
// so an empty create (create-with-session + close) costs one fsync wait, not
// two: it only drops a write session (lengths are reported, durably, before
// it), and any later synced commit makes it durable too (WAL order). A close
// lost in a crash brings its session back, and the session reaper drops it
// only once the client's lease is gone: as long as the client lives, the
// session keeps the file from being destroyed when its last link goes. So a
// close of a file with no links left waits for its sync after all
// (DeferSync::must_wait, MetaStore::close): lost, it would keep the file's
// chunks at once. A linked file's lost close matters only if the file is
// unlinked later in that client's life (its chunks are then kept until the
// client goes).
enum class Run { kPool, kInline, kInlineUnsynced };

struct MethodEntry {
  rpc::MethodId id;
  const char* name;
  Handler handler;
  bool mutation;
  Run run;
};

constexpr MethodEntry kMethods[] = {
    {method::kLookup, "meta.lookup", do_lookup, false, Run::kInline},
    {method::kGetattr, "meta.getattr", do_getattr, false, Run::kInline},
    {method::kReadlink, "meta.readlink", do_readlink, false, Run::kInline},
    {method::kReaddir, "meta.readdir", do_readdir, false, Run::kPool},
    {method::kStatfs, "meta.statfs", do_statfs, false, Run::kPool},
    {method::kGetxattr, "meta.getxattr", do_getxattr, false, Run::kInline},
    {method::kListxattr, "meta.listxattr", do_listxattr, false, Run::kPool},
    {method::kGetLayout, "meta.get_layout", do_get_layout, false, Run::kInline},
    {method::kBatchStat, "meta.batch_stat", do_batch_stat, false, Run::kPool},
    {method::kHoldReads, "meta.hold_reads", do_hold_reads, false, Run::kInline},
    {method::kCreate, "meta.create", do_create, true, Run::kInline},
    {method::kMkdir, "meta.mkdir", do_mkdir, true, Run::kInline},
    {method::kSymlink, "meta.symlink", do_symlink, true, Run::kInline},
    {method::kMknod, "meta.mknod", do_mknod, true, Run::kInline},
    {method::kLink, "meta.link", do_link, true, Run::kInline},
    {method::kUnlink, "meta.unlink", do_unlink, true, Run::kInline},
    {method::kRmdir, "meta.rmdir", do_rmdir, true, Run::kPool},
    {method::kRename, "meta.rename", do_rename, true, Run::kPool},
    {method::kSetattr, "meta.setattr", do_setattr, true, Run::kInline},
    {method::kSetxattr, "meta.setxattr", do_setxattr, true, Run::kInline},
    {method::kRemovexattr, "meta.removexattr", do_removexattr, true, Run::kInline},
    {method::kSetLayout, "meta.set_layout", do_set_layout, true, Run::kPool},
    {method::kOpen, "meta.open", do_open, true, Run::kInline},
    {method::kClose, "meta.close", do_close, true, Run::kInlineUnsynced},
    {method::kReportLength, "meta.report_length", do_report_length, true, Run::kInline},
    {method::kCloseWithLength, "meta.close_with_length", do_close_with_length, true, Run::kInline},
    {method::kOpenRead, "meta.open_read", do_open_read, false, Run::kInline},
    {method::kOpenReadAt, "meta.open_read_at", do_open_read_at, false, Run::kInline},
};

}  // namespace

Result<MetaServiceConfig> MetaServiceConfig::from(const Config& config) {
  WEFT_TRY(Config meta, config.table("meta"));
  MetaServiceConfig c;
  WEFT_TRY(c.data_dir, meta.get_string("data_dir"));
  if (c.data_dir.empty()) return error(Code::kConfig, "{}: key 'meta.data_dir' must not be empty", config.source());
  WEFT_TRY(int64_t chains, meta.get_int_in("chain_count", 1, 1, 1 << 20));
  WEFT_TRY(int64_t table, meta.get_int_in("chain_table_id", 1, 1, UINT32_MAX));
  // At least the clients' MetaClientOptions::request_window (1024).
  WEFT_TRY(int64_t window, meta.get_int_in("request_window", 1024, 1024, 1 << 20));
  WEFT_TRY(c.sync, meta.get_bool("sync", true));
  WEFT_TRY(c.special_files, meta.get_bool("special_files", true));
  // At least 10 minutes: a client's newest record is usually the request
  // whose reply was lost, and its retry (clients retry for up to a minute)
  // must still find it.
  WEFT_TRY(c.request_record_age_s, meta.get_int_in("request_record_age_s", 3600, 600, int64_t{1} << 32));
  WEFT_TRY(int64_t reserve_mib, meta.get_int_in("reserve_mib", 256, 0, int64_t{1} << 30));
  WEFT_TRY(c.read_hold_ms, meta.get_int_in("read_hold_ms", 5000, 0, 3'600'000));
  // Clients renew every hold/4 and wait for an answer as long, and may open
  // a file from attributes up to 1 s old (the mount's attr_timeout): all of
  // that must fit in the hold (read_holds.h), with room for a slow renewal.
  if (c.read_hold_ms > 0 && c.read_hold_ms < 4000)
    return error(Code::kConfig, "{}: [meta] read_hold_ms = {}: 0 (off) or at least 4000", config.source(),
                 c.read_hold_ms);
  c.reserve_bytes = static_cast<uint64_t>(reserve_mib) << 20;
  c.chain_count = static_cast<uint32_t>(chains);
  c.chain_table_id = static_cast<uint32_t>(table);
  c.request_window = static_cast<uint64_t>(window);
  return c;
}

StoreOptions MetaServiceConfig::store_options() const {
  StoreOptions o;
  o.path = (std::filesystem::path(data_dir) / "store").string();
  o.chain_count = chain_count;
  o.chain_table_id = chain_table_id;
  o.request_window = request_window;
  o.sync = sync;
  o.special_files = special_files;
  o.reserve_bytes = reserve_bytes;
  o.read_hold = std::chrono::milliseconds(read_hold_ms);
  return o;
}

namespace {

// The request's credentials and id, and the client id of the connection it came on.
Context context_of(const Req& q, const rpc::ServerCall& call) {
  Context ctx = context_from(q);
  ctx.connection_client_id = call.client_id;
  return ctx;
}

using Check = std::shared_ptr<const ServeCheck>;

// The check before a method (none: always fine).
Result<void> may_serve(const Check& check) { return *check ? (*check)() : Result<void>(); }

// The coroutine form of a point read (a named type, not a capturing lambda: see DESIGN.md on g++ 12).
struct InlineRead {
  Handler handler;
  MetaStore* store;
  Check check;
  Task<Result<Rep>> operator()(const Req& q, rpc::ServerCall& call) const {
    if (auto ok = may_serve(check); !ok) co_return std::unexpected(ok.error());
    co_return handler(*store, q, context_of(q, call));
  }
};

// An awaitable that completes on the awaiting coroutine's executor once the
// WAL is synced past every commit that returned before it started.
auto wal_synced(MetaStore* store) {
  return asio::async_initiate<const asio::use_awaitable_t<>&, void(Result<void>)>(
      [store](auto handler) {
        auto ex = asio::get_associated_executor(handler);
        store->when_durable([h = std::move(handler), ex](Result<void> r) mutable {
          asio::post(ex, [h = std::move(h), r = std::move(r)]() mutable { std::move(h)(std::move(r)); });
        });
      },
      asio::use_awaitable);
}

struct Deferred {
  Result<Rep> reply;
  bool sync_pending;
  bool must_wait;  // even where the method is acknowledged before its sync
};

// Runs a mutation to its (unsynced) commit on this thread.
Deferred run_deferred(Handler handler, MetaStore& store, const Req& q, const rpc::ServerCall& call) {
  DeferSync defer;
  Result<Rep> r = handler(store, q, context_of(q, call));
  return Deferred{std::move(r), defer.sync_pending(), defer.must_wait()};
}

// A mutation run inline on the I/O thread; the reply waits for the group sync.
struct InlineMutation {
  Handler handler;
  MetaStore* store;
  bool wait_sync;
  Check check;
  Task<Result<Rep>> operator()(const Req& q, rpc::ServerCall& call) const {
    if (auto ok = may_serve(check); !ok) co_return std::unexpected(ok.error());
    Deferred d = run_deferred(handler, *store, q, call);
    if (d.sync_pending && (wait_sync || d.must_wait)) {
      auto synced = wal_synced(store);
      Result<void> durable = co_await std::move(synced);
      if (!durable) co_return std::unexpected(durable.error());
    }
    // Again before the acknowledgement: a server that lost the right to serve
    // while the WAL synced must not acknowledge (the client retries the same
    // request id, on its next meta address too).
    if (auto ok = may_serve(check); !ok) co_return std::unexpected(ok.error());
    co_return answer_mutation(std::move(d.reply));
  }
};

}  // namespace

void register_meta_service(rpc::Server& server, MetaStore& store, ServeCheck serve_check) {
  // Without the syncer a durable commit fsyncs in place: keep it off the I/O threads.
  const bool inline_mutations = !store.options().sync || store.options().group_sync;
  const Check check = std::make_shared<const ServeCheck>(std::move(serve_check));
  for (const MethodEntry& m : kMethods) {
    Handler h = m.handler;
    MetaStore* s = &store;
    if (m.run != Run::kPool && m.mutation && inline_mutations) {
      rpc::add_async_method<Req, Rep>(server, m.id, m.name, InlineMutation{h, s, m.run == Run::kInline, check});
    } else if (m.run == Run::kInline && !m.mutation) {
      rpc::add_async_method<Req, Rep>(server, m.id, m.name, InlineRead{h, s, check});
    } else if (m.mutation) {
      rpc::add_blocking_method<Req, Rep>(server, m.id, m.name, [h, s, check](const Req& q, rpc::ServerCall& call) -> Result<Rep> {
        WEFT_RETURN_IF_ERROR(may_serve(check));
        Result<Rep> r = h(*s, q, context_of(q, call));
        WEFT_RETURN_IF_ERROR(may_serve(check));  // as InlineMutation: not acknowledged once refused
        return answer_mutation(std::move(r));
      });
    } else {
      rpc::add_blocking_method<Req, Rep>(server, m.id, m.name,
                                         [h, s, check](const Req& q, rpc::ServerCall& call) -> Result<Rep> {
                                           WEFT_RETURN_IF_ERROR(may_serve(check));
                                           return h(*s, q, context_of(q, call));
                                         });
    }
  }
}

RequestRecordExpirer::RequestRecordExpirer(MetaStore& store, std::chrono::nanoseconds age,
                                           std::chrono::milliseconds interval, std::chrono::milliseconds catch_up)
    : store_(store), age_(age), catch_up_(catch_up),
      thread_(interval, [this, interval] { return tick(interval); }) {}

std::chrono::milliseconds RequestRecordExpirer::tick(std::chrono::milliseconds interval) {
  auto r = store_.expire_requests(age_.count());
  if (!r) {
    // A passing failure (a lock timeout behind a retry) must not stall a catch-up for a whole interval.
    WEFT_LOG_WARN("expiring retry records: {}", r.error());
  } else {
    mid_pass_ = !r->pass_done;
  }
  return mid_pass_ ? std::min(interval, catch_up_) : interval;
}

}  // namespace weft::meta
