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
    out.push_back({ino, sid});
  }
  if (!it->status().ok()) return error(Code::kIoError, "session reaper: scan: {}", it->status().ToString());
  return out;
}

}  // namespace

Result<ReapResult> reap_sessions(MetaStore& store, const std::function<bool(uint64_t)>& alive,
                                 int64_t opened_before_ns) {
  ReapResult result;
  WEFT_TRY(auto doomed, doomed_sessions(store, alive, opened_before_ns, result.scanned));
  for (const SessionRef& s : doomed) {
    auto r = store.close(Context{Cred::root(), {}}, s.ino, s.session_id);
    // One session that cannot be closed (its inode unreadable) must not keep
    // the sessions after it, and their files' chunks, forever.
    if (r) {
      ++result.closed;
    } else if (r.error().code() != Code::kBadHandle) {  // kBadHandle: closed meanwhile
      ++result.failed;
      WEFT_LOG_WARN("session reaper: session {} of inode {}: {}", s.session_id, s.ino, r.error());
    }
  }
  return result;
}

SessionReaper::SessionReaper(MetaStore& store, const Clock& clock, LiveClients live,
                             std::chrono::milliseconds interval, std::chrono::nanoseconds min_age)
    : store_(store),
      clock_(clock),
      live_(std::move(live)),
      min_age_(min_age),
      thread_(interval, [this, interval] {
        auto r = reap_once();
        if (!r) WEFT_LOG_WARN("session reaper: {}", r.error());
        return interval;
      }) {}

Result<ReapResult> SessionReaper::reap_once() {
  WEFT_TRY(auto live, live_());
  if (!live) return ReapResult{};  // mgmtd's list is not complete yet
  auto alive = [&](uint64_t id) { return live->contains(id); };
  WEFT_TRY(ReapResult r, reap_sessions(store_, alive, clock_.wall_ns() - min_age_.count()));
  if (r.closed > 0 || r.failed > 0)
    WEFT_LOG_INFO("session reaper: closed {} write sessions of clients without a lease ({} could not be closed)",
                  r.closed, r.failed);
  return r;
}

}  // namespace weft::meta
