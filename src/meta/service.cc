#include "meta/service.h"

#include <filesystem>

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

using Handler = Result<Rep> (*)(MetaStore&, const Req&);

Result<Rep> do_lookup(MetaStore& s, const Req& q) {
  return map(s.lookup(context_from(q), q.ino(), q.name()), reply_with_inode);
}
Result<Rep> do_getattr(MetaStore& s, const Req& q) {
  return map(s.getattr(context_from(q), q.ino()), reply_with_inode);
}
Result<Rep> do_readlink(MetaStore& s, const Req& q) {
  return map(s.readlink(context_from(q), q.ino()), [](const std::string& v) {
    Rep r;
    r.set_value(v);
    return r;
  });
}
Result<Rep> do_readdir(MetaStore& s, const Req& q) {
  return map(s.readdir(context_from(q), q.ino(), q.value(), q.limit() == 0 ? 1024 : q.limit()),
             [](const DirPage& p) {
               Rep r;
               to_proto(p, &r);
               return r;
             });
}
Result<Rep> do_statfs(MetaStore& s, const Req& q) {
  return map(s.statfs(context_from(q)), [](const StatFs& st) {
    Rep r;
    to_proto(st, r.mutable_statfs());
    return r;
  });
}
Result<Rep> do_getxattr(MetaStore& s, const Req& q) {
  return map(s.getxattr(context_from(q), q.ino(), q.name()), [](const std::string& v) {
    Rep r;
    r.set_value(v);
    return r;
  });
}
Result<Rep> do_listxattr(MetaStore& s, const Req& q) {
  return map(s.listxattr(context_from(q), q.ino()), [](const std::vector<std::string>& names) {
    Rep r;
    for (const auto& n : names) r.add_names(n);
    return r;
  });
}
Result<Rep> do_get_layout(MetaStore& s, const Req& q) {
  return map(s.get_layout(context_from(q), q.ino()), [](const Layout& l) {
    Rep r;
    to_proto(l, r.mutable_layout());
    return r;
  });
}
Result<Rep> do_batch_stat(MetaStore& s, const Req& q) {
  if (q.inos_size() > 4096) return error(Code::kTooBig, "batch_stat of {} inodes (max 4096)", q.inos_size());
  Context ctx = context_from(q);
  Rep r;
  for (uint64_t ino : q.inos()) {
    auto a = s.getattr(ctx, ino);
    r.add_codes(a ? 0 : static_cast<uint32_t>(a.error().code()));
    to_proto(a ? *a : Inode{}, r.add_inodes());
  }
  return r;
}

Result<Rep> do_create(MetaStore& s, const Req& q) {
  return map(s.create(context_from(q), q.ino(), q.name(), q.mode(), q.exclusive(), q.open_write()), reply_with);
}
Result<Rep> do_mkdir(MetaStore& s, const Req& q) {
  return map(s.mkdir(context_from(q), q.ino(), q.name(), q.mode()), reply_with_inode);
}
Result<Rep> do_symlink(MetaStore& s, const Req& q) {
  return map(s.symlink(context_from(q), q.ino(), q.name(), q.value()), reply_with_inode);
}
Result<Rep> do_link(MetaStore& s, const Req& q) {
  return map(s.link(context_from(q), q.ino(), q.new_parent(), q.new_name()), reply_with_inode);
}
Result<Rep> do_unlink(MetaStore& s, const Req& q) { return empty_reply(s.unlink(context_from(q), q.ino(), q.name())); }
Result<Rep> do_rmdir(MetaStore& s, const Req& q) { return empty_reply(s.rmdir(context_from(q), q.ino(), q.name())); }
Result<Rep> do_rename(MetaStore& s, const Req& q) {
  WEFT_TRY(RenameFlags flags, rename_flags_from_wire(q.flags()));
  return empty_reply(s.rename(context_from(q), q.ino(), q.name(), q.new_parent(), q.new_name(), flags));
}
Result<Rep> do_setattr(MetaStore& s, const Req& q) {
  return map(s.setattr(context_from(q), q.ino(), from_proto(q.attr())), reply_with_inode);
}
Result<Rep> do_setxattr(MetaStore& s, const Req& q) {
  WEFT_TRY(XattrFlags flags, xattr_flags_from_wire(q.flags()));
  return empty_reply(s.setxattr(context_from(q), q.ino(), q.name(), q.value(), flags));
}
Result<Rep> do_removexattr(MetaStore& s, const Req& q) {
  return empty_reply(s.removexattr(context_from(q), q.ino(), q.name()));
}
Result<Rep> do_set_layout(MetaStore& s, const Req& q) {
  return empty_reply(s.set_layout(context_from(q), q.ino(), from_proto(q.layout())));
}
Result<Rep> do_open(MetaStore& s, const Req& q) {
  return map(s.open(context_from(q), q.ino(), OpenFlags{q.open_read(), q.open_write()}), reply_with);
}
Result<Rep> do_open_read(MetaStore& s, const Req& q) {
  if (q.open_write()) return error(Code::kInvalidArgument, "open_read with write access: use open");
  return map(s.open(context_from(q), q.ino(), OpenFlags{q.open_read(), false}), reply_with);
}
Result<Rep> do_close(MetaStore& s, const Req& q) {
  return empty_reply(s.close(context_from(q), q.ino(), q.session_id()));
}
Result<Rep> do_report_length(MetaStore& s, const Req& q) {
  return map(s.report_length(context_from(q), q.ino(), q.session_id(), q.length()), reply_with_inode);
}

struct MethodEntry {
  rpc::MethodId id;
  const char* name;
  Handler handler;
  bool mutation;
  // Point reads run inline on the I/O thread: a RocksDB Get from the block
  // cache costs microseconds, the hand-off to the blocking pool ~300 µs here.
  // Scans (readdir, statfs, batch_stat) and everything that may fsync stay on the pool.
  bool inline_read = false;
};

constexpr MethodEntry kMethods[] = {
    {method::kLookup, "meta.lookup", do_lookup, false, true},
    {method::kGetattr, "meta.getattr", do_getattr, false, true},
    {method::kReadlink, "meta.readlink", do_readlink, false, true},
    {method::kReaddir, "meta.readdir", do_readdir, false},
    {method::kStatfs, "meta.statfs", do_statfs, false},
    {method::kGetxattr, "meta.getxattr", do_getxattr, false, true},
    {method::kListxattr, "meta.listxattr", do_listxattr, false},
    {method::kGetLayout, "meta.get_layout", do_get_layout, false, true},
    {method::kBatchStat, "meta.batch_stat", do_batch_stat, false},
    {method::kCreate, "meta.create", do_create, true},
    {method::kMkdir, "meta.mkdir", do_mkdir, true},
    {method::kSymlink, "meta.symlink", do_symlink, true},
    {method::kLink, "meta.link", do_link, true},
    {method::kUnlink, "meta.unlink", do_unlink, true},
    {method::kRmdir, "meta.rmdir", do_rmdir, true},
    {method::kRename, "meta.rename", do_rename, true},
    {method::kSetattr, "meta.setattr", do_setattr, true},
    {method::kSetxattr, "meta.setxattr", do_setxattr, true},
    {method::kRemovexattr, "meta.removexattr", do_removexattr, true},
    {method::kSetLayout, "meta.set_layout", do_set_layout, true},
    {method::kOpen, "meta.open", do_open, true},
    {method::kClose, "meta.close", do_close, true},
    {method::kReportLength, "meta.report_length", do_report_length, true},
    {method::kOpenRead, "meta.open_read", do_open_read, false, true},
};

}  // namespace

Result<MetaServiceConfig> MetaServiceConfig::from(const Config& config) {
  WEFT_TRY(Config meta, config.table("meta"));
  MetaServiceConfig c;
  WEFT_TRY(c.data_dir, meta.get_string("data_dir"));
  WEFT_TRY(int64_t chains, meta.get_int_in("chain_count", 1, 1, 1 << 20));
  WEFT_TRY(int64_t table, meta.get_int_in("chain_table_id", 1, 1, UINT32_MAX));
  WEFT_TRY(int64_t window, meta.get_int_in("request_window", 1024, 16, 1 << 20));
  WEFT_TRY(c.sync, meta.get_bool("sync", true));
  WEFT_TRY(c.request_record_age_s, meta.get_int_in("request_record_age_s", 3600, 1, int64_t{1} << 32));
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
  return o;
}

namespace {

// The coroutine form of a point read (a named type, not a capturing lambda: see DESIGN.md on g++ 12).
struct InlineRead {
  Handler handler;
  MetaStore* store;
  Task<Result<Rep>> operator()(const Req& q, rpc::ServerCall&) const { co_return handler(*store, q); }
};

}  // namespace

void register_meta_service(rpc::Server& server, MetaStore& store) {
  for (const MethodEntry& m : kMethods) {
    Handler h = m.handler;
    MetaStore* s = &store;
    if (m.inline_read) {
      rpc::add_async_method<Req, Rep>(server, m.id, m.name, InlineRead{h, s});
    } else if (m.mutation) {
      rpc::add_blocking_method<Req, Rep>(server, m.id, m.name,
                                         [h, s](const Req& q, rpc::ServerCall&) { return answer_mutation(h(*s, q)); });
    } else {
      rpc::add_blocking_method<Req, Rep>(server, m.id, m.name, [h, s](const Req& q, rpc::ServerCall&) { return h(*s, q); });
    }
  }
}

RequestRecordExpirer::RequestRecordExpirer(MetaStore& store, std::chrono::nanoseconds age,
                                           std::chrono::milliseconds interval)
    : store_(store), age_(age), interval_(interval), thread_([this] { run(); }) {}

RequestRecordExpirer::~RequestRecordExpirer() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void RequestRecordExpirer::run() {
  std::unique_lock lock(mu_);
  while (!cv_.wait_for(lock, interval_, [this] { return stopping_; })) {
    lock.unlock();
    auto r = store_.expire_requests(age_.count());
    if (!r) WEFT_LOG_WARN("expiring retry records: {}", r.error());
    lock.lock();
  }
}

}  // namespace weft::meta
