// MetaStore write sessions, file length reports and the chunk GC queue.
#include <rocksdb/utilities/transaction_db.h>

#include <algorithm>

#include "common/assert.h"
#include "meta/meta_store.h"
#include "meta/ops.h"
#include "meta/permission.h"
#include "meta/txn.h"

namespace weft::meta {
namespace {

Result<void> check_openable(const Inode& n, const Cred& c, OpenFlags flags) {
  if (n.is_dir() && flags.write) return error(Code::kIsDirectory, "inode {} is a directory", n.ino);
  if (n.is_symlink()) return error(Code::kLoop, "inode {} is a symlink", n.ino);
  if (n.is_special()) return special_not_openable(n.ino);
  uint32_t mask = (flags.read ? uint32_t{kAccessRead} : 0u) | (flags.write ? uint32_t{kAccessWrite} : 0u);
  return check_access(n, c, mask);
}

// Only the client that opened a write session reports lengths through it or
// closes it; root too (the session reaper, drop_sessions_of). Session ids are
// sequential: another client's close would end the owner's session under it
// (its next length report fails, and acknowledged writes past the recorded
// length stay invisible) and, for an unlinked file, destroy the inode while
// its writer writes.
Result<void> check_session_caller(const Context& ctx, std::string_view raw, Ino ino, uint64_t session_id) {
  if (ctx.cred.uid == 0) return {};  // before decoding: root closes even a damaged record
  WEFT_TRY(SessionValue s, decode_session(raw));
  if (s.client_id == ctx.caller_id()) return {};
  return error(Code::kBadHandle, "session {} of inode {} belongs to another client", session_id, ino);
}

}  // namespace

Result<bool> MetaStore::holds_write_session(Txn& txn, const Context& ctx, Ino ino, uint64_t session_id) {
  if (session_id == 0) return false;
  WEFT_TRY(auto s, txn.get_raw(key::session(ino, session_id)));  // read-only opens have none: a session writes
  if (!s) return false;
  return check_session_caller(ctx, *s, ino, session_id).has_value();
}

Result<Reply> MetaStore::open(const Context& ctx, Ino ino, OpenFlags flags) {
  if (!flags.write) {  // read-only: nothing is written
    return observe(metrics_of(Op::kOpen), [&]() -> Result<Reply> {
      WEFT_TRY(Inode n, read_inode(ino));
      WEFT_RETURN_IF_ERROR(check_openable(n, ctx.cred, flags));
      return reply_of(std::move(n));
    });
  }
  return mutate(Op::kOpen, ctx, [&](Txn& txn) -> Result<Reply> {
    WEFT_TRY(Inode n, txn.lock_existing(ino, false));
    if (n.nlink == 0) return error(Code::kNotFound, "inode {} was unlinked", ino);
    WEFT_RETURN_IF_ERROR(check_openable(n, ctx.cred, flags));
    // Setuid and setgid stay until a write: report_length drops them.
    WEFT_TRY(uint64_t sid, begin_session(txn, ctx, ino, flags.answers_cuts));
    return reply_of(std::move(n), sid);
  });
}

Result<Reply> MetaStore::open_read_at(const Context& ctx, Ino parent, std::string_view name) {
  WEFT_TRY(Inode n, lookup(ctx, parent, name));
  if (n.is_symlink()) return reply_of(std::move(n));
  // The inode lookup just read is the one opened: no second read.
  return observe(metrics_of(Op::kOpen), [&]() -> Result<Reply> {
    WEFT_RETURN_IF_ERROR(check_openable(n, ctx.cred, OpenFlags{true, false}));
    return reply_of(std::move(n));
  });
}

Result<void> MetaStore::close(const Context& ctx, Ino ino, uint64_t session_id) {
  WEFT_RETURN_IF_ERROR(close_session(ctx, ino, session_id));
  // After the commit (or its replay: a retried close whose first reply was
  // lost waits too): an unlinked file's close is acknowledged once durable.
  if (DeferSync* d = DeferSync::current()) {
    auto n = read_inode(ino, nullptr, /*with_stat=*/false);
    if (!n || n->nlink == 0) d->set_must_wait();
  }
  return {};
}

Result<void> MetaStore::close_dead(Ino ino, uint64_t session_id) {
  const Context root{Cred::root(), {}};
  WEFT_RETURN_IF_ERROR(close_session(root, ino, session_id, /*writer_gone=*/true));
  if (DeferSync* d = DeferSync::current()) d->set_must_wait();  // as close(): an unlinked file may go with it
  return {};
}

Result<void> MetaStore::close_session(const Context& ctx, Ino ino, uint64_t session_id, bool writer_gone) {
  return to_void(mutate(Op::kClose, ctx, [&](Txn& txn) -> Result<Reply> {
    WEFT_TRY(auto n, txn.lock_inode(ino, true));
    if (!n) return error(Code::kBadHandle, "no inode {} for session {}", ino, session_id);
    WEFT_RETURN_IF_ERROR(end_session(txn, ctx, *n, session_id, writer_gone));
    return Reply{};
  }));
}

Result<void> MetaStore::abandon_session(const Context& ctx, Ino ino, uint64_t session_id) {
  if (!options_.sessions_reaped) return close(ctx, ino, session_id);  // nobody would close it
  WEFT_RETURN_IF_ERROR(to_void(mutate(Op::kClose, ctx, [&](Txn& txn) -> Result<Reply> {
    // The inode first, as every change of its sessions (take_report reads
    // them under the inode's lock alone).
    WEFT_TRY(auto n, txn.lock_inode(ino, true));
    if (!n) return error(Code::kBadHandle, "no inode {} for session {}", ino, session_id);
    WEFT_TRY(auto raw, txn.lock_raw(key::session(ino, session_id), true));
    if (!raw) return error(Code::kBadHandle, "no session {} on inode {}", session_id, ino);
    WEFT_RETURN_IF_ERROR(check_session_caller(ctx, *raw, ino, session_id));
    WEFT_TRY(SessionValue s, decode_session(*raw));
    s.abandoned = true;
    // Its age starts again: a write the client gave up on may still land on
    // storage; the reaper waits its min_age before it lists.
    s.opened_ns = now_ns();
    WEFT_RETURN_IF_ERROR(txn.put(key::session(ino, session_id), encode_session(s)));
    return Reply{};
  })));
  // Acknowledged once durable, as a close of an unlinked file (close()):
  // lost in a crash, the session would stay as the client left it.
  if (DeferSync* d = DeferSync::current()) d->set_must_wait();
  return {};
}

Result<SessionCut> MetaStore::take_report(Txn& txn, const Context& ctx, Inode& n, uint64_t session_id,
                                          uint64_t length, uint64_t ack_cut) {
  const Ino ino = n.ino;
  WEFT_TRY(auto raw, txn.get_raw(key::session(ino, session_id)));  // stable: `n` is locked, as by every truncate
  if (!raw) return error(Code::kBadHandle, "no session {} on inode {}", session_id, ino);
  WEFT_RETURN_IF_ERROR(check_session_caller(ctx, *raw, ino, session_id));
  auto decoded = decode_session(*raw);
  if (!decoded && ctx.cred.uid != 0) return std::unexpected(decoded.error());
  SessionValue s = decoded.value_or(SessionValue{});  // root reports even through a damaged record, uncapped
  SessionCut capped;
  if (s.cut_pending()) {
    if (ack_cut == s.cut_gen) {
      s.acked_gen = s.cut_gen;  // the writer looked at storage after the newest cut
      WEFT_RETURN_IF_ERROR(txn.put(key::session(ino, session_id), encode_session(s)));
    } else if (length > s.cut_length) {
      // Not past the cut: the bytes past it that this writer wrote before
      // the truncate are gone, and those written after are for it to find.
      capped = SessionCut{s.cut_gen, s.cut_length};
      length = s.cut_length;
    }
  }
  WEFT_RETURN_IF_ERROR(apply_length(ctx, n, length));
  WEFT_RETURN_IF_ERROR(txn.put_inode(n));
  return capped;
}

Result<void> MetaStore::mark_sessions_cut(Txn& txn, const Context& ctx, Ino ino, uint64_t length,
                                          bool abandoned_only) {
  const std::string prefix = key::session_prefix(ino);
  std::string start = prefix;
  for (;;) {
    WEFT_TRY(auto keys, txn.scan_keys(prefix, 256, start));
    for (const auto& [k, size] : keys) {
      WEFT_TRY(auto raw, txn.lock_raw(k, true));
      if (!raw) continue;  // closed meanwhile
      auto decoded = decode_session(*raw);
      if (!decoded) continue;  // damaged: no report goes through it anyway (take_report)
      SessionValue s = *decoded;
      // The truncating client orders its own reports after its truncates
      // (client/core.h OpenInode::reports): its sessions need no mark. A
      // client from before cuts would never answer one. An abandoned session
      // is always marked: every write through it came before this length was
      // set, so the session reaper counts none past it (close_dead_session).
      if (!s.abandoned &&
          (abandoned_only || !s.answers_cuts || (s.client_id == ctx.caller_id() && ctx.caller_id() != 0)))
        continue;
      s.cut_length = s.cut_pending() ? std::min(s.cut_length, length) : length;
      ++s.cut_gen;
      WEFT_RETURN_IF_ERROR(txn.put(k, encode_session(s)));
    }
    if (keys.size() < 256) return {};
    start = keys.back().first + '\0';
  }
}

Result<LengthReply> MetaStore::report_length(const Context& ctx, Ino ino, uint64_t session_id, uint64_t length,
                                             uint64_t ack_cut) {
  return to_length_reply(mutate(Op::kReportLength, ctx, [&](Txn& txn) -> Result<Reply> {
    WEFT_TRY(Inode n, txn.lock_existing(ino, true));
    WEFT_TRY(SessionCut cut, take_report(txn, ctx, n, session_id, length, ack_cut));
    Reply r = reply_of(std::move(n));
    r.cut = cut;
    return r;
  }));
}

Result<LengthReply> MetaStore::close_with_length(const Context& ctx, Ino ino, uint64_t session_id, uint64_t length,
                                                 uint64_t ack_cut) {
  return to_length_reply(mutate(Op::kCloseWithLength, ctx, [&](Txn& txn) -> Result<Reply> {
    WEFT_TRY(auto n, txn.lock_inode(ino, true));
    if (!n) return error(Code::kBadHandle, "no inode {} for session {}", ino, session_id);
    // The length first: a file whose last link and writer go with this
    // close is queued for GC with it (every chunk it reaches). end_session
    // checks the session and its caller; a refusal rolls all of it back.
    WEFT_TRY(SessionCut cut, take_report(txn, ctx, *n, session_id, length, ack_cut));
    // Capped: the session stays for the writer's answer.
    if (cut.gen == 0) WEFT_RETURN_IF_ERROR(end_session(txn, ctx, *n, session_id));
    Reply r = reply_of(std::move(*n));
    r.cut = cut;
    return r;
  }));
}

Result<bool> MetaStore::close_dead_session(Ino ino, uint64_t session_id, uint64_t length, int64_t expect_ctime_ns) {
  const Context root{Cred::root(), {}};
  bool closed = false;
  auto r = mutate(Op::kCloseWithLength, root, [&](Txn& txn) -> Result<Reply> {
    closed = false;  // the body runs again after a lock conflict
    WEFT_TRY(auto n, txn.lock_inode(ino, true));
    if (!n) return error(Code::kBadHandle, "no inode {} for session {}", ino, session_id);
    if (n->ctime_ns != expect_ctime_ns) return Reply{};
    WEFT_TRY(auto raw, txn.get_raw(key::session(ino, session_id)));
    if (!raw) return error(Code::kBadHandle, "no session {} on inode {}", session_id, ino);
    // The newest cut is answered: it was marked before the inode was read.
    // An abandoned session's writes all came before it: none counts past
    // the shortest length set since.
    auto s = decode_session(*raw);
    if (s && s->abandoned && s->cut_pending()) length = std::min(length, s->cut_length);
    WEFT_TRY(SessionCut cut, take_report(txn, root, *n, session_id, length, s ? s->cut_gen : 0));
    WEFT_ASSERT(cut.gen == 0);
    WEFT_RETURN_IF_ERROR(end_session(txn, root, *n, session_id));
    closed = true;
    return reply_of(std::move(*n));
  });
  if (!r) return std::unexpected(r.error());
  return closed;
}

// Deletes the session; the last writer of an unlinked file takes the inode
// with it (its chunks queued for GC). `n` is the session's inode, locked.
Result<void> MetaStore::end_session(Txn& txn, const Context& ctx, Inode& n, uint64_t session_id,
                                    bool writer_gone) {
  const Ino ino = n.ino;
  WEFT_TRY(auto s, txn.lock_raw(key::session(ino, session_id), true));
  if (!s) return error(Code::kBadHandle, "no session {} on inode {}", session_id, ino);
  WEFT_RETURN_IF_ERROR(check_session_caller(ctx, *s, ino, session_id));
  WEFT_RETURN_IF_ERROR(txn.del(key::session(ino, session_id)));
  if (n.nlink > 0) return {};
  WEFT_TRY(bool others, txn.has_prefix(key::session_prefix(ino)));
  if (others) return {};
  // The last writer of an unlinked file closed: queue its chunks for GC.
  // The queued ctime is when (read_holds.h: readers keep it that long).
  WEFT_RETURN_IF_ERROR(destroy_inode(txn, n));
  n.ctime_ns = now_ns();
  if (writer_gone) {
    // A length of one chunk per stripe slot: the GC removes by range on each
    // of the stripe's chains (what a dead writer stored past its reports too).
    Inode queued = n;
    const uint64_t reach = uint64_t{std::max<uint32_t>(n.layout.stripe_count, 1)} * n.layout.chunk_bytes;
    queued.size = std::max(queued.size, reach);
    return txn.queue_chunk_gc(queued);
  }
  return txn.queue_chunk_gc(n);
}

// A length report after writes through a session (a client reports only
// then, or just before it truncates): they changed the data, so mtime moves
// even when the length does not (an overwrite inside the file), and a writer
// other than root drops setuid and setgid, as a Linux write does (not the
// open before it: an open that writes nothing leaves mode and ctime alone).
Result<void> MetaStore::apply_length(const Context& ctx, Inode& n, uint64_t length) const {
  if (!n.is_file()) return error(Code::kInvalidArgument, "inode {} is not a file", n.ino);
  if (length > kFileBytesMax)
    return error(Code::kFileTooBig, "length {} of inode {} beyond the maximum file size {}", length, n.ino,
                 kFileBytesMax);
  n.size = std::max(n.size, length);
  touch_ctime(n, now_ns());
  n.mtime_ns = n.ctime_ns;
  if (ctx.cred.uid != 0) n.mode = mode_without_privs(n.mode, ctx.cred.in_group(n.gid));
  return {};
}

Result<uint64_t> MetaStore::drop_sessions_of(uint64_t client_id) {
  std::vector<std::pair<Ino, uint64_t>> mine;
  {
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
    const std::string prefix(1, key::kSessionPrefix);
    for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
      std::string_view k(it->key().data(), it->key().size());
      auto v = decode_session(std::string_view(it->value().data(), it->value().size()));
      if (!v || v->client_id != client_id) continue;
      WEFT_TRY(uint64_t ino, key::u64_at(k, 1));
      WEFT_TRY(uint64_t sid, key::u64_at(k, 9));
      mine.emplace_back(ino, sid);
    }
    if (!it->status().ok()) return error(from_rocks(it->status(), "scan sessions"));
  }
  uint64_t closed = 0;
  for (auto [ino, sid] : mine) {
    auto r = close(Context{}, ino, sid);
    if (r) ++closed;
    else if (r.error().code() != Code::kBadHandle) return std::unexpected(r.error());
  }
  return closed;
}

Result<size_t> MetaStore::gc_done(const Context& ctx, std::span<const Ino> inos) {
  size_t done = 0;
  auto r = mutate(Op::kGcDone, ctx, [&](Txn& txn) -> Result<Reply> {
    if (ctx.cred.uid != 0) return error(Code::kNotPermitted, "gc_done needs root");
    done = 0;  // the body runs again after a lock conflict
    for (Ino ino : inos) {
      WEFT_TRY(auto g, txn.lock_raw(key::gc(ino), true));
      if (!g) continue;
      WEFT_RETURN_IF_ERROR(txn.del(key::gc(ino)));
      ++done;
    }
    return Reply{};
  });
  if (!r) return std::unexpected(r.error());
  return done;
}

Result<void> MetaStore::gc_done(const Context& ctx, Ino ino) {
  return to_void(mutate(Op::kGcDone, ctx, [&](Txn& txn) -> Result<Reply> {
    if (ctx.cred.uid != 0) return error(Code::kNotPermitted, "gc_done needs root");
    WEFT_TRY(auto g, txn.lock_raw(key::gc(ino), true));
    if (!g) return error(Code::kNotFound, "inode {} is not queued for GC", ino);
    WEFT_RETURN_IF_ERROR(txn.del(key::gc(ino)));
    return Reply{};
  }));
}

}  // namespace weft::meta
