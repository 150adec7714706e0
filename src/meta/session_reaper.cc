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

enum class Reaped { kClosed, kLengthened, kChanged };

// Closes one dead writer's session, with the length of what it stored when
// that is past the file's length (see the header).
Result<Reaped> reap_one(MetaStore& store, const SessionRef& s, const StoredEnd& stored_end) {
  const Context root{Cred::root(), {}};
  if (stored_end) {
    auto n = store.getattr(root, s.ino);
    if (!n && n.error().code() != Code::kNotFound) return std::unexpected(n.error());
    if (n && n->is_file() && n->nlink > 0) {
      WEFT_TRY(uint64_t end, stored_end(*n, n->size));
      if (end > n->size) {
        WEFT_TRY(bool closed, store.close_dead_session(s.ino, s.session_id, end, n->ctime_ns));
        return closed ? Reaped::kLengthened : Reaped::kChanged;
      }
    }
    // Nothing past the length, the file unlinked or gone: a plain close.
  }
  WEFT_RETURN_IF_ERROR(store.close(root, s.ino, s.session_id));
  return Reaped::kClosed;
}

constexpr int64_t kBackoffFirstNs = 1'000'000'000;
constexpr int64_t kBackoffMaxNs = 300'000'000'000;

}  // namespace

Result<ReapResult> reap_sessions(MetaStore& store, const std::function<bool(uint64_t)>& alive,
                                 int64_t opened_before_ns, const StoredEnd& stored_end, ReapState* state) {
  ReapResult result;
  WEFT_TRY(auto doomed, doomed_sessions(store, alive, opened_before_ns, result.scanned));
  ReapState scratch;
  ReapState& st = state ? *state : scratch;
  std::map<std::pair<Ino, uint64_t>, ReapState::Wait> waits;  // the next pass's
  for (const SessionRef& s : doomed) {
    const auto key = std::make_pair(s.ino, s.session_id);
    auto wait = st.waits.find(key);
    if (st.stop.load() || (wait != st.waits.end() && wait->second.next_ns > st.now_ns)) {
      if (wait != st.waits.end()) waits.insert(*wait);
      ++result.waiting;
      continue;
    }
    auto r = reap_one(store, s, stored_end);
    // One session that cannot be closed (its inode unreadable, its file's
    // storage unreachable) must not keep the sessions after it, and their
    // files' chunks, forever.
    if (r) {
      if (*r == Reaped::kChanged) {
        ++result.changed;
        continue;
      }
      ++result.closed;
      if (*r == Reaped::kLengthened) ++result.lengthened;
    } else if (r.error().code() != Code::kBadHandle) {  // kBadHandle: closed meanwhile
      ++result.failed;
      const int64_t delay = wait == st.waits.end() ? kBackoffFirstNs
                                                   : std::min(wait->second.delay_ns * 2, kBackoffMaxNs);
      waits[key] = ReapState::Wait{st.now_ns + delay, delay};
      WEFT_LOG_WARN("session reaper: session {} of inode {} (tried again in {} s): {}", s.session_id, s.ino,
                    delay / 1'000'000'000, r.error());
    }
  }
  st.waits = std::move(waits);
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

SessionReaper::~SessionReaper() {
  state_.stop = true;  // a pass running ends before its next session
  thread_.stop();
}

Result<ReapResult> SessionReaper::reap_once() {
  WEFT_TRY(auto live, live_());
  if (!live) return ReapResult{};  // mgmtd's list is not complete yet
  auto alive = [&](uint64_t id) { return live->contains(id); };
  state_.now_ns = clock_.wall_ns();
  WEFT_TRY(ReapResult r, reap_sessions(store_, alive, state_.now_ns - min_age_.count(), stored_end_, &state_));
  if (r.closed > 0 || r.failed > 0)
    WEFT_LOG_INFO(
        "session reaper: closed {} write sessions of clients without a lease ({} with the length of data their "
        "writer left past it; {} could not be closed, {} wait to be tried again, {} files changed while listed)",
        r.closed, r.lengthened, r.failed, r.waiting, r.changed);
  return r;
}

}  // namespace weft::meta
