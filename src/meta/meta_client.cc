// g++ 12 reports a false -Wmismatched-new-delete on asio's awaitable frame
// operator delete for some coroutine bodies (call_async), depending on what
// else the file inlines (as in storage/resync.cc).
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

#include "meta/meta_client.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <thread>

#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>

#include "common/logging.h"
#include "common/random.h"
#include "meta/layout.h"
#include "meta/permission.h"
#include "meta/proto_convert.h"
#include "meta/service_methods.h"

namespace weft::meta {
namespace {

using Req = pb::MetaRequest;
using Rep = pb::MetaReply;

// Transport failures: the server may be gone, try the next address.
bool is_transport_failure(Code c) {
  return c == Code::kTimeout || c == Code::kDisconnected || c == Code::kUnavailable;
}

Result<Inode> inode_of(Result<Rep> r) {
  if (!r) return std::unexpected(std::move(r).error());
  return from_proto(r->inode());
}

// An inode answered for `asked`: its own attributes, not another's.
Result<Inode> inode_of(Result<Rep> r, Ino asked) {
  WEFT_TRY(Inode in, inode_of(std::move(r)));
  if (in.ino != asked) return error(Code::kProtocol, "meta answered inode {} for inode {}", in.ino, asked);
  return in;
}

// A new inode answered for a request that makes one of `type`.
Result<Inode> made_of(Result<Rep> r, InodeType type) {
  WEFT_TRY(Inode in, inode_of(std::move(r)));
  if (in.type != type)
    return error(Code::kProtocol, "meta made inode {} of type {}, asked for type {}", in.ino,
                 static_cast<uint32_t>(in.type), static_cast<uint32_t>(type));
  return in;
}

// What any meta's readdir answers (MetaStore::readdir): at most `limit`
// entries, of valid names other than "." and "..", in strictly increasing
// byte order after the cookie; a page that is not the last has entries and
// its cookie is its last name. A broken or hostile meta would otherwise keep
// its callers listing for ever (a cookie that stays or goes back) or hand
// them names no directory holds.
Result<void> check_dir_page(const DirPage& page, std::string_view asked, uint32_t limit) {
  if (limit != 0 && page.entries.size() > limit)
    return error(Code::kProtocol, "readdir answered {} entries for a limit of {}", page.entries.size(), limit);
  std::string_view prev = asked;
  for (const DirEntry& e : page.entries) {
    if (!check_name(e.name) || e.name == "." || e.name == "..")
      return error(Code::kProtocol, "readdir answered an entry of {} bytes that is no name", e.name.size());
    if (e.name <= prev) return error(Code::kProtocol, "readdir answered entries out of order (after the cookie)");
    if (e.ino == 0 || (e.attr.ino != 0 && e.attr.ino != e.ino))
      return error(Code::kProtocol, "readdir answered entry inode {} with attributes of inode {}", e.ino, e.attr.ino);
    prev = e.name;
  }
  if (!page.eof && (page.entries.empty() || page.cookie != page.entries.back().name))
    return error(Code::kProtocol, "readdir answered a page that is not the last without moving on");
  return {};
}

// A length report's answer: the file reported on, and a cut (the shortest
// truncate the writer has not acknowledged) no longer than any file.
Result<LengthReply> length_reply_of(Result<Rep> r, Ino asked) {
  if (!r) return std::unexpected(std::move(r).error());
  const SessionCut cut{r->cut_gen(), r->cut_length()};
  WEFT_TRY(Inode inode, inode_of(std::move(r), asked));
  if (!inode.is_file()) return error(Code::kProtocol, "a length report on {} answered a non-file", asked);
  if (cut.length > kFileBytesMax)
    return error(Code::kProtocol, "a length report on {} answered a cut at {}", asked, cut.length);
  return LengthReply{std::move(inode), cut};
}

Result<void> void_of(Result<Rep> r) {
  if (!r) return std::unexpected(std::move(r).error());
  return {};
}

// An open's or create's answer: the inode opened (`asked`, when named by
// number), and a write session when one was asked for (0 is none: its
// writes could be neither reported nor closed).
Result<Reply> open_reply_of(Result<Rep> r, std::optional<Ino> asked, bool write) {
  if (!r) return std::unexpected(std::move(r).error());
  WEFT_TRY(Reply reply, reply_from(*r));
  if (!reply.has_inode) return error(Code::kProtocol, "an open answered no inode");
  if (asked && reply.inode.ino != *asked)
    return error(Code::kProtocol, "an open of inode {} answered inode {}", *asked, reply.inode.ino);
  if (write && reply.session_id == 0) return error(Code::kProtocol, "an open for writing answered no session");
  return reply;
}

// A create's answer: as an open's, of a file (meta creates or opens nothing else by name).
Result<Reply> create_reply_of(Result<Rep> r, bool write) {
  WEFT_TRY(Reply reply, open_reply_of(std::move(r), std::nullopt, write));
  if (!reply.inode.is_file()) return error(Code::kProtocol, "a create answered inode {}, not a file", reply.inode.ino);
  return reply;
}

Result<std::string> value_of(Result<Rep> r) {
  if (!r) return std::unexpected(std::move(r).error());
  return std::move(*r->mutable_value());
}

// A value meta holds at most `max` bytes of, never empty (a symlink target).
Result<std::string> bounded_value_of(Result<Rep> r, size_t max, std::string_view what) {
  WEFT_TRY(std::string v, value_of(std::move(r)));
  if (v.empty() || v.size() > max || v.find('\0') != std::string::npos)
    return error(Code::kProtocol, "meta answered a {} of {} bytes", what, v.size());
  return v;
}

Req named(Ino ino, std::string_view name, const std::optional<ParentCheck>& expect_parent = std::nullopt) {
  Req q;
  q.set_ino(ino);
  q.set_name(std::string(name));
  if (expect_parent) {
    q.mutable_expect_parent()->set_dir(expect_parent->dir);
    q.mutable_expect_parent()->set_name(expect_parent->name);
    for (const EntryCheck& a : expect_parent->above) {
      auto* e = q.mutable_expect_parent()->add_above();
      e->set_dir(a.dir);
      e->set_name(a.name);
      e->set_ino(a.ino);
    }
  }
  return q;
}

Req of_ino(Ino ino) {
  Req q;
  q.set_ino(ino);
  return q;
}

}  // namespace

MetaClient::MetaClient(rpc::IoPool& io, rpc::Client& rpc, MetaClientOptions options)
    : io_(io),
      rpc_(rpc),
      options_(std::move(options)),
      client_id_(options_.client_id != 0 ? options_.client_id : random_id()) {}

// One call's retry and failover policy, shared by the coroutine and the
// blocking form: which address to try, and after a failure whether to try
// again and after how long. Starts at the address that answered last.
class MetaClient::Attempts {
 public:
  explicit Attempts(MetaClient& c)
      : c_(c),
        deadline_(std::chrono::steady_clock::now() + std::chrono::milliseconds(c.options_.retry_time_ms_max)),
        addr_(c.current_.load() % c.options_.addresses.size()),
        backoff_ms_(c.options_.backoff_min_ms) {}

  const rpc::Endpoint& address() const { return c_.options_.addresses[addr_]; }
  void succeeded() { c_.current_.store(addr_); }

  // nullopt: the failure is final (not retryable, out of attempts or time);
  // else how long to wait before the next attempt (on the next address after
  // a transport failure).
  std::optional<std::chrono::milliseconds> after_failure(const Status& s) {
    if (!s.retryable() || ++attempt_ > c_.options_.attempts_max || std::chrono::steady_clock::now() >= deadline_)
      return std::nullopt;
    c_.retries_.fetch_add(1);
    if (is_transport_failure(s.code()) && c_.options_.addresses.size() > 1) {
      addr_ = (addr_ + 1) % c_.options_.addresses.size();
      c_.failovers_.fetch_add(1);
    }
    std::chrono::milliseconds wait(backoff_ms_);
    backoff_ms_ = std::min(backoff_ms_ * 2, c_.options_.backoff_max_ms);
    return wait;
  }

 private:
  MetaClient& c_;
  const std::chrono::steady_clock::time_point deadline_;
  size_t addr_;
  uint32_t backoff_ms_;
  int attempt_ = 1;
};

std::optional<uint64_t> MetaClient::try_take_seq() {
  std::lock_guard lock(seq_mu_);
  uint64_t seq = seq_.load() + 1;
  if (!unfinished_.empty() && seq - *unfinished_.begin() >= options_.request_window) return std::nullopt;
  seq_.store(seq);
  unfinished_.insert(seq);
  return seq;
}

void MetaClient::finish_seq(uint64_t seq) {
  {
    std::lock_guard lock(seq_mu_);
    unfinished_.erase(seq);
  }
  // Counted with its sequence number: a mutation refused before it took
  // one (no address, a synchronous call on an I/O thread of this client) is
  // neither sent nor done.
  done_.fetch_add(1);
  seq_cv_.notify_all();
}

// Ends a mutation's sequence number however the call returns.
struct MetaClient::SeqDone {
  MetaClient* c = nullptr;
  uint64_t seq = 0;
  ~SeqDone() {
    if (seq != 0) c->finish_seq(seq);
  }
};

Result<void> MetaClient::prepare(Req& req, bool mutation) {
  if (options_.addresses.empty()) return error(Code::kConfig, "meta client has no server addresses");
  if (!mutation) return {};
  std::optional<uint64_t> seq;
  while (!(seq = try_take_seq())) {  // the window is full: wait for its oldest mutation
    std::unique_lock lock(seq_mu_);
    seq_cv_.wait_for(lock, std::chrono::milliseconds(10));
  }
  to_proto(RequestId{client_id_, *seq}, req.mutable_req());
  return {};
}

Task<Result<Rep>> MetaClient::call_async(rpc::MethodId method, Req req, bool mutation) {
  if (options_.addresses.empty()) co_return error(Code::kConfig, "meta client has no server addresses");
  SeqDone seq_done{this, 0};
  if (mutation) {
    // On an I/O thread: no blocking wait for the window, a timer instead.
    std::optional<uint64_t> seq;
    while (!(seq = try_take_seq())) {
      asio::steady_timer timer(co_await asio::this_coro::executor, std::chrono::milliseconds(1));
      co_await timer.async_wait(use_nothrow);
    }
    seq_done.seq = *seq;
    to_proto(RequestId{client_id_, *seq}, req.mutable_req());
  }
  Attempts attempts(*this);
  for (;;) {
    rpc::CallOptions call_options;
    call_options.timeout_ms = options_.call_timeout_ms;
    auto r = co_await rpc_.call<Rep>(attempts.address(), method, req, std::move(call_options));
    if (r) {
      attempts.succeeded();
      co_return r;
    }
    auto wait = attempts.after_failure(r.error());
    if (!wait) co_return r;
    asio::steady_timer timer(co_await asio::this_coro::executor, *wait);
    co_await timer.async_wait(use_nothrow);
  }
}

Result<Rep> MetaClient::call(rpc::MethodId method, Req req, bool mutation) {
  if (rpc::IoPool::current_context() == nullptr) return call_here(method, std::move(req), mutation);
  // Waiting here for a context of `io_` could wait for this very thread (a
  // deadlock; always so with one thread). A caller's bug: refused, loudly.
  if (io_.in_pool_thread()) {
    WEFT_LOG_ERROR("meta client: synchronous call (method {}) on one of its own I/O threads refused", method.method);
    return error(Code::kInternal, "synchronous meta call on an I/O thread of the meta client");
  }
  // On a thread of another pool (a server's): wait for one of ours.
  size_t i = std::hash<std::thread::id>{}(std::this_thread::get_id()) % io_.size();
  return block_on(io_.at(i).get_executor(), call_async(method, std::move(req), mutation));
}

// call_async on the calling thread over its own connection
// (rpc::Client::call_blocking): a lookup or a create then costs one send and
// one blocking receive here instead of two hand-offs through an I/O thread,
// which on 2 cores cost more than the round trip.
Result<Rep> MetaClient::call_here(rpc::MethodId method, Req req, bool mutation, const Status* failed_first) {
  WEFT_RETURN_IF_ERROR(prepare(req, mutation));
  SeqDone seq_done{this, mutation ? req.req().seq() : 0};
  Attempts attempts(*this);
  if (failed_first != nullptr) {
    auto wait = attempts.after_failure(*failed_first);
    if (!wait) return std::unexpected(*failed_first);
    std::this_thread::sleep_for(*wait);
  }
  for (;;) {
    auto r = rpc_.call_blocking<Rep>(attempts.address(), method, req, {}, options_.call_timeout_ms);
    if (r) {
      attempts.succeeded();
      return r;
    }
    auto wait = attempts.after_failure(r.error());
    if (!wait) return r;
    std::this_thread::sleep_for(*wait);
  }
}

Result<Rep> MetaClient::read(rpc::MethodId method, const Cred& cred, Req req) {
  to_proto(cred, req.mutable_cred());
  return call(method, std::move(req), false);
}

Result<Rep> MetaClient::mutate(rpc::MethodId method, const Cred& cred, Req req) {
  to_proto(cred, req.mutable_cred());
  return call(method, std::move(req), true);
}

Result<Inode> MetaClient::lookup(const Cred& cred, Ino parent, std::string_view name) {
  return inode_of(read(method::kLookup, cred, named(parent, name)));
}

Result<Inode> MetaClient::getattr(const Cred& cred, Ino ino) {
  return inode_of(read(method::kGetattr, cred, of_ino(ino)), ino);
}

Result<std::string> MetaClient::readlink(const Cred& cred, Ino ino) {
  return bounded_value_of(read(method::kReadlink, cred, of_ino(ino)), kSymlinkBytesMax, "symlink target");
}

Result<DirPage> MetaClient::readdir(const Cred& cred, Ino dir, std::string_view cookie, uint32_t limit) {
  Req q = of_ino(dir);
  q.set_value(std::string(cookie));
  q.set_limit(limit);
  WEFT_TRY(Rep r, read(method::kReaddir, cred, std::move(q)));
  WEFT_TRY(DirPage page, dir_page_from(r));
  WEFT_RETURN_IF_ERROR(check_dir_page(page, cookie, limit));
  return page;
}

Result<StatFs> MetaClient::statfs(const Cred& cred) {
  WEFT_TRY(Rep r, read(method::kStatfs, cred, Req{}));
  return from_proto(r.statfs());
}

Result<std::string> MetaClient::getxattr(const Cred& cred, Ino ino, std::string_view name) {
  WEFT_TRY(std::string v, value_of(read(method::kGetxattr, cred, named(ino, name))));
  if (v.size() > kXattrValueBytesMax) return error(Code::kProtocol, "meta answered an xattr value of {} bytes", v.size());
  return v;
}

// Names as setxattr takes them (a NUL would split one in listxattr(2)'s
// list), within XATTR_LIST_MAX together.
Result<std::vector<std::string>> MetaClient::listxattr(const Cred& cred, Ino ino) {
  WEFT_TRY(Rep r, read(method::kListxattr, cred, of_ino(ino)));
  size_t list_bytes = 0;
  for (const std::string& name : r.names()) {
    list_bytes += name.size() + 1;
    if (name.empty() || name.size() > kXattrNameBytesMax || name.find('\0') != std::string::npos)
      return error(Code::kProtocol, "listxattr answered a name of {} bytes", name.size());
  }
  if (list_bytes > kXattrListBytesMax) return error(Code::kProtocol, "listxattr answered {} bytes of names", list_bytes);
  return std::vector<std::string>(r.names().begin(), r.names().end());
}

Result<Layout> MetaClient::get_layout(const Cred& cred, Ino dir) {
  WEFT_TRY(Rep r, read(method::kGetLayout, cred, of_ino(dir)));
  Layout layout = from_proto(r.layout());
  if (auto valid = validate_layout(layout); !valid)
    return error(Code::kProtocol, "get_layout of {}: {}", dir, valid.error().message());
  return layout;
}

Result<std::vector<Result<Inode>>> MetaClient::batch_stat(const Cred& cred, const std::vector<Ino>& inos,
                                                          bool with_queued) {
  std::vector<Result<Inode>> out;
  out.reserve(inos.size());
  // Meta answers a prefix when the whole would make too big a reply: ask again for the rest.
  while (out.size() < inos.size()) {
    Req q;
    q.set_with_queued(with_queued);
    for (size_t i = out.size(); i < inos.size(); ++i) q.add_inos(inos[i]);
    WEFT_TRY(Rep r, read(method::kBatchStat, cred, std::move(q)));
    const size_t asked = inos.size() - out.size();
    if (r.inodes_size() == 0 || static_cast<size_t>(r.inodes_size()) > asked || r.codes_size() != r.inodes_size())
      return error(Code::kProtocol, "batch_stat answered {} of {} inodes", r.inodes_size(), asked);
    for (int i = 0; i < r.inodes_size(); ++i) {
      const Ino ino = inos[out.size()];
      if (r.codes(i) != 0) {
        out.push_back(error(code_from_wire(r.codes(i)), "batch_stat of inode {}", ino));
      } else {
        auto in = from_proto(r.inodes(i));
        if (in && in->ino != ino)
          in = error(Code::kProtocol, "batch_stat answered inode {} for inode {}", in->ino, ino);
        out.push_back(std::move(in));
      }
    }
  }
  return out;
}

Result<std::chrono::milliseconds> MetaClient::hold_reads(const Cred& cred, std::span<const Ino> inos,
                                                         std::chrono::milliseconds timeout, uint64_t seq) {
  if (options_.addresses.empty()) return error(Code::kConfig, "meta client has no server addresses");
  Req q;
  to_proto(cred, q.mutable_cred());
  q.mutable_inos()->Reserve(static_cast<int>(inos.size()));
  for (Ino ino : inos) q.add_inos(ino);
  q.set_hold_seq(seq);
  const size_t at = current_.load() % options_.addresses.size();
  const auto timeout_ms = static_cast<uint32_t>(std::clamp<int64_t>(timeout.count(), 1, options_.call_timeout_ms));
  auto r = rpc_.call_blocking<Rep>(options_.addresses[at], method::kHoldReads, q, {}, timeout_ms);
  if (!r) {
    size_t expected = at;
    if (is_transport_failure(r.error().code()))
      current_.compare_exchange_strong(expected, (at + 1) % options_.addresses.size());
    return std::unexpected(r.error());
  }
  return std::chrono::milliseconds(r->renew_ms());
}

Result<Reply> MetaClient::create(const Cred& cred, Ino parent, std::string_view name, uint32_t mode, bool exclusive,
                                 OpenFlags open, const std::optional<ParentCheck>& expect_parent) {
  Req q = named(parent, name, expect_parent);
  q.set_mode(mode);
  q.set_exclusive(exclusive);
  q.set_open_read(open.read || !open.write);
  q.set_open_write(open.write);
  q.set_answers_cuts(open.answers_cuts);
  return create_reply_of(mutate(method::kCreate, cred, std::move(q)), open.write);
}

Result<Reply> MetaClient::create(const Cred& cred, Ino parent, std::string_view name, uint32_t mode, bool exclusive,
                                 bool open_for_write, const std::optional<ParentCheck>& expect_parent) {
  return create(cred, parent, name, mode, exclusive, OpenFlags{!open_for_write, open_for_write}, expect_parent);
}

Result<Inode> MetaClient::mkdir(const Cred& cred, Ino parent, std::string_view name, uint32_t mode,
                                const std::optional<ParentCheck>& expect_parent) {
  Req q = named(parent, name, expect_parent);
  q.set_mode(mode);
  return made_of(mutate(method::kMkdir, cred, std::move(q)), InodeType::kDirectory);
}

Result<Inode> MetaClient::symlink(const Cred& cred, Ino parent, std::string_view name, std::string_view target,
                                  const std::optional<ParentCheck>& expect_parent) {
  Req q = named(parent, name, expect_parent);
  q.set_value(std::string(target));
  return made_of(mutate(method::kSymlink, cred, std::move(q)), InodeType::kSymlink);
}

Result<Inode> MetaClient::mknod(const Cred& cred, Ino parent, std::string_view name, InodeType type, uint32_t mode,
                                uint64_t rdev) {
  Req q = named(parent, name);
  q.set_mode(mode);
  q.set_node_type(static_cast<uint32_t>(type));
  q.set_rdev(rdev);
  return made_of(mutate(method::kMknod, cred, std::move(q)), type);
}

Result<Inode> MetaClient::link(const Cred& cred, Ino ino, Ino new_parent, std::string_view new_name) {
  Req q = of_ino(ino);
  q.set_new_parent(new_parent);
  q.set_new_name(std::string(new_name));
  return inode_of(mutate(method::kLink, cred, std::move(q)), ino);
}

Result<void> MetaClient::unlink(const Cred& cred, Ino parent, std::string_view name,
                               const std::optional<ParentCheck>& expect_parent) {
  return void_of(mutate(method::kUnlink, cred, named(parent, name, expect_parent)));
}

Result<void> MetaClient::rmdir(const Cred& cred, Ino parent, std::string_view name,
                              const std::optional<ParentCheck>& expect_parent) {
  return void_of(mutate(method::kRmdir, cred, named(parent, name, expect_parent)));
}

Result<void> MetaClient::rename(const Cred& cred, Ino src_parent, std::string_view src_name, Ino dst_parent,
                                std::string_view dst_name, RenameFlags flags) {
  Req q = named(src_parent, src_name);
  q.set_new_parent(dst_parent);
  q.set_new_name(std::string(dst_name));
  q.set_flags(static_cast<uint32_t>(flags));
  return void_of(mutate(method::kRename, cred, std::move(q)));
}

Result<Inode> MetaClient::setattr(const Cred& cred, Ino ino, const SetAttr& attr) {
  Req q = of_ino(ino);
  to_proto(attr, q.mutable_attr());
  return inode_of(mutate(method::kSetattr, cred, std::move(q)), ino);
}

Result<void> MetaClient::setxattr(const Cred& cred, Ino ino, std::string_view name, std::string_view value,
                                  XattrFlags flags) {
  Req q = named(ino, name);
  q.set_value(std::string(value));
  q.set_flags(static_cast<uint32_t>(flags));
  return void_of(mutate(method::kSetxattr, cred, std::move(q)));
}

Result<void> MetaClient::removexattr(const Cred& cred, Ino ino, std::string_view name) {
  return void_of(mutate(method::kRemovexattr, cred, named(ino, name)));
}

Result<void> MetaClient::set_layout(const Cred& cred, Ino dir, const Layout& layout) {
  Req q = of_ino(dir);
  to_proto(layout, q.mutable_layout());
  return void_of(mutate(method::kSetLayout, cred, std::move(q)));
}

Result<Reply> MetaClient::open(const Cred& cred, Ino ino, OpenFlags flags) {
  Req q = of_ino(ino);
  q.set_open_read(flags.read);
  q.set_open_write(flags.write);
  q.set_answers_cuts(flags.answers_cuts);
  // Read-only opens write nothing: no request id, served inline by the server.
  if (!flags.write) return open_reply_of(read(method::kOpenRead, cred, std::move(q)), ino, false);
  return open_reply_of(mutate(method::kOpen, cred, std::move(q)), ino, true);
}

Result<Inode> MetaClient::open_read_at(const Cred& cred, Ino parent, std::string_view name) {
  Req q = named(parent, name);
  q.set_open_read(true);
  return inode_of(read(method::kOpenReadAt, cred, std::move(q)));
}

MetaClient::PendingOpen MetaClient::start_open_read_at(const Cred& cred, Ino parent, std::string_view name) {
  PendingOpen open;
  open.req_ = named(parent, name);
  open.req_.set_open_read(true);
  to_proto(cred, open.req_.mutable_cred());
  // No first attempt here: finish calls open_read_at as it is (or says why not).
  if (options_.addresses.empty() || rpc::IoPool::current_context() != nullptr) return open;
  open.addr_ = current_.load() % options_.addresses.size();
  auto call =
      rpc_.start_blocking(options_.addresses[open.addr_], method::kOpenReadAt, open.req_, options_.call_timeout_ms);
  if (call) open.call_ = std::move(*call);
  return open;
}

Result<Inode> MetaClient::finish_open_read_at(PendingOpen& open) {
  if (open.call_) {
    Result<Rep> r = rpc_.finish_blocking<Rep>(*open.call_);
    open.call_.reset();
    if (r) current_.store(open.addr_);
    if (r || !r.error().retryable()) return inode_of(std::move(r));
    // Retried as open_read_at's loop would after its first attempt.
    const Status failed = r.error();
    return inode_of(call_here(method::kOpenReadAt, std::move(open.req_), false, &failed));
  }
  return inode_of(call(method::kOpenReadAt, std::move(open.req_), false));
}

Result<void> MetaClient::close(const Cred& cred, Ino ino, uint64_t session_id, bool abandon) {
  Req q = of_ino(ino);
  q.set_session_id(session_id);
  q.set_abandon(abandon);
  return void_of(mutate(method::kClose, cred, std::move(q)));
}

Result<LengthReply> MetaClient::report_length(const Cred& cred, Ino ino, uint64_t session_id, uint64_t length,
                                              uint64_t ack_cut) {
  Req q = of_ino(ino);
  q.set_session_id(session_id);
  q.set_length(length);
  q.set_ack_cut(ack_cut);
  return length_reply_of(mutate(method::kReportLength, cred, std::move(q)), ino);
}

Result<LengthReply> MetaClient::close_with_length(const Cred& cred, Ino ino, uint64_t session_id, uint64_t length,
                                                  uint64_t ack_cut) {
  Req q = of_ino(ino);
  q.set_session_id(session_id);
  q.set_length(length);
  q.set_ack_cut(ack_cut);
  return length_reply_of(mutate(method::kCloseWithLength, cred, std::move(q)), ino);
}

}  // namespace weft::meta
