#include "meta/session_reaper.h"

#include <memory>
#include <vector>

#include <rocksdb/db.h>

#include "common/logging.h"
#include "meta/codec.h"

namespace weft::meta {
namespace {

struct SessionRef {
  Ino ino = 0;
  uint64_t session_id = 0;
  SessionValue value;  // as the scan read it
};

// Sessions to close: a scan of the session keys, outside any transaction
// (close() re-checks each one under its own lock).
Result<std::vector<SessionRef>> doomed_sessions(MetaStore& store, const std::function<bool(uint64_t)>& alive,
                                                int64_t opened_before_ns, uint64_t& scanned) {
  std::vector<SessionRef> out;
  std::unique_ptr<rocksdb::Iterator> it(store.db()->NewIterator(rocksdb::ReadOptions()));
  const std::string prefix(1, key::kSessionPrefix);
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
    ++scanned;
    std::string_view k(it->key().data(), it->key().size());
    auto v = decode_session(std::string_view(it->value().data(), it->value().size()));
    if (!v) {
      WEFT_LOG_WARN("session reaper: undecodable session record skipped: {}", v.error());
      continue;
    }
    if (v->client_id == 0 || v->opened_ns >= opened_before_ns || alive(v->client_id)) continue;
    WEFT_TRY(uint64_t ino, key::u64_at(k, 1));
    WEFT_TRY(uint64_t sid, key::u64_at(k, 9));
    out.push_back({ino, sid, *v});
  }
  if (!it->status().ok()) return error(Code::kIoError, "session reaper: scan: {}", it->status().ToString());
  return out;
}

enum class Reaped { kClosed, kLengthened, kCut };

// Closes one dead writer's session, with the length of what it stored when
// that is past the file's length (see the header).
Result<Reaped> reap_one(MetaStore& store, const SessionRef& s, const StoredEnd& stored_end) {
  const Context root{Cred::root(), {}};
  if (stored_end && s.value.answers_cuts) {
    auto n = store.getattr(root, s.ino);
    if (n && n->is_file() && n->nlink > 0) {
      WEFT_TRY(uint64_t end, stored_end(*n, n->size));
      if (end > n->size) {
        // The cut generation the scan saw: a truncate since then caps this.
        WEFT_TRY(LengthReply r, store.close_with_length(root, s.ino, s.session_id, end, s.value.cut_gen));
        return r.cut.gen != 0 ? Reaped::kCut : Reaped::kLengthened;
      }
    }
    // Otherwise plain close (which answers for an inode that cannot be read).
  }
  WEFT_RETURN_IF_ERROR(store.close(root, s.ino, s.session_id));
  return Reaped::kClosed;
}

}  // namespace

Result<ReapResult> reap_sessions(MetaStore& store, const std::function<bool(uint64_t)>& alive,
                                 int64_t opened_before_ns, const StoredEnd& stored_end) {
  ReapResult result;
  WEFT_TRY(auto doomed, doomed_sessions(store, alive, opened_before_ns, result.scanned));
  for (const SessionRef& s : doomed) {
    auto r = reap_one(store, s, stored_end);
    // One session that cannot be closed (its inode unreadable, its file's
    // storage unreachable) must not keep the sessions after it, and their
    // files' chunks, forever.
    if (r) {
      if (*r == Reaped::kCut) {
        ++result.cut;
        continue;
      }
      ++result.closed;
      if (*r == Reaped::kLengthened) ++result.lengthened;
    } else if (r.error().code() != Code::kBadHandle) {  // kBadHandle: closed meanwhile
      ++result.failed;
      WEFT_LOG_WARN("session reaper: session {} of inode {}: {}", s.session_id, s.ino, r.error());
    }
  }
  return result;
}

SessionReaper::SessionReaper(MetaStore& store, const Clock& clock, LiveClients live,
                             std::chrono::milliseconds interval, std::chrono::nanoseconds min_age,
                             StoredEnd stored_end)
    : store_(store),
      clock_(clock),
      live_(std::move(live)),
      min_age_(min_age),
      stored_end_(std::move(stored_end)),
      thread_(interval, [this, interval] {
        auto r = reap_once();
        if (!r) WEFT_LOG_WARN("session reaper: {}", r.error());
        return interval;
      }) {}

Result<ReapResult> SessionReaper::reap_once() {
  WEFT_TRY(auto live, live_());
  if (!live) return ReapResult{};  // mgmtd's list is not complete yet
  auto alive = [&](uint64_t id) { return live->contains(id); };
  WEFT_TRY(ReapResult r, reap_sessions(store_, alive, clock_.wall_ns() - min_age_.count(), stored_end_));
  if (r.closed > 0 || r.failed > 0 || r.cut > 0)
    WEFT_LOG_INFO(
        "session reaper: closed {} write sessions of clients without a lease ({} with the length of data their "
        "writer left past it; {} kept for a truncate meanwhile, {} could not be closed)",
        r.closed, r.lengthened, r.cut, r.failed);
  return r;
}

}  // namespace weft::meta
