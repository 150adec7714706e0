#include "meta/session_reaper.h"

#include <algorithm>
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
    // An abandoned session is its writer's request: no lease to wait for
    // (its age counts from the abandon).
    if (v->client_id == 0 || v->opened_ns >= opened_before_ns || (!v->abandoned && alive(v->client_id))) continue;
    WEFT_TRY(uint64_t ino, key::u64_at(k, 1));
    WEFT_TRY(uint64_t sid, key::u64_at(k, 9));
    out.push_back({ino, sid});
  }
  if (!it->status().ok()) return error(Code::kIoError, "session reaper: scan: {}", it->status().ToString());
  return out;
}

enum class Reaped { kClosed, kLengthened, kChanged, kDeferred };

// A file that changed while storage was listed is listed again at once this
// often (a listing takes milliseconds; a file whose writers report that
// fast is left for the next pass).
constexpr int kListRounds = 3;

// Closes one dead writer's session, with the length of what it stored when
// that is past the file's length (see the header). Without `may_list`, a
// session that needs a listing is left for a later pass (kDeferred).
Result<Reaped> reap_one(MetaStore& store, const SessionRef& s, const StoredEnd& stored_end, bool may_list) {
  const Context root{Cred::root(), {}};
  for (int round = 0; stored_end && round < kListRounds; ++round) {
    auto n = store.getattr(root, s.ino);
    if (!n && n.error().code() != Code::kNotFound) return std::unexpected(n.error());
    if (!n || !n->is_file() || n->nlink == 0) break;  // gone, or unlinked: all its chunks go to GC
    if (!may_list) return Reaped::kDeferred;
    WEFT_TRY(uint64_t end, stored_end(*n, n->size));
    if (end <= n->size) break;  // nothing past the length
    WEFT_TRY(bool closed, store.close_dead_session(s.ino, s.session_id, end, n->ctime_ns));
    if (closed) return Reaped::kLengthened;
    if (round + 1 == kListRounds) return Reaped::kChanged;
  }
  WEFT_RETURN_IF_ERROR(store.close_dead(s.ino, s.session_id));
  return Reaped::kClosed;
}

constexpr Duration kBackoffFirst = std::chrono::seconds(1);
constexpr Duration kBackoffMax = std::chrono::minutes(5);
// Listings that may fail in one pass before the rest wait for the next: a
// failing one costs the storage client's retry time (seconds), and many
// files on one chain without a serving target would make a pass last that
// many times as long.
constexpr uint64_t kListFailuresPerPass = 4;

}  // namespace

Result<ReapResult> reap_sessions(MetaStore& store, const std::function<bool(uint64_t)>& alive,
                                 int64_t opened_before_ns, const StoredEnd& stored_end, ReapState* state) {
  ReapResult result;
  WEFT_TRY(auto doomed, doomed_sessions(store, alive, opened_before_ns, result.scanned));
  ReapState scratch;
  ReapState& st = state ? *state : scratch;
  const TimePoint start = st.clock->now();
  // Sessions that never failed first, then those whose back-off is over,
  // the longest waiting first: failing ones never hold up the others.
  auto wait_of = [&](const SessionRef& s) -> const ReapState::Wait* {
    auto w = st.waits.find({s.ino, s.session_id});
    return w == st.waits.end() ? nullptr : &w->second;
  };
  std::stable_sort(doomed.begin(), doomed.end(), [&](const SessionRef& a, const SessionRef& b) {
    const ReapState::Wait *wa = wait_of(a), *wb = wait_of(b);
    if (!wa || !wb) return !wa && wb;
    return wa->next < wb->next;
  });
  std::map<std::pair<Ino, uint64_t>, ReapState::Wait> waits;  // the next pass's
  uint64_t list_failures = 0;
  for (const SessionRef& s : doomed) {
    const auto key = std::make_pair(s.ino, s.session_id);
    const ReapState::Wait* wait = wait_of(s);
    if (st.stop.load() || (wait && wait->next > start)) {
      if (wait) waits[key] = *wait;
      ++result.waiting;
      continue;
    }
    auto r = reap_one(store, s, stored_end, list_failures < kListFailuresPerPass);
    // One session that cannot be closed (its inode unreadable, its file's
    // storage unreachable) must not keep the sessions after it, and their
    // files' chunks, forever.
    if (r && (*r == Reaped::kChanged || *r == Reaped::kDeferred)) {
      if (wait) waits[key] = *wait;  // its back-off stays as it was
      ++(*r == Reaped::kChanged ? result.changed : result.waiting);
    } else if (r) {
      ++result.closed;
      if (*r == Reaped::kLengthened) ++result.lengthened;
    } else if (r.error().code() != Code::kBadHandle) {  // kBadHandle: closed meanwhile
      ++result.failed;
      ++list_failures;  // (or an unreadable inode: counted alike)
      const Duration delay = wait ? std::min(wait->delay * 2, kBackoffMax) : kBackoffFirst;
      waits[key] = ReapState::Wait{st.clock->now() + delay, delay};
      WEFT_LOG_WARN("session reaper: session {} of inode {} (tried again in {} s): {}", s.session_id, s.ino,
                    std::chrono::duration_cast<std::chrono::seconds>(delay).count(), r.error());
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
      state_{.clock = &clock},
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
  WEFT_TRY(ReapResult r, reap_sessions(store_, alive, clock_.wall_ns() - min_age_.count(), stored_end_, &state_));
  if (r.closed > 0 || r.failed > 0)
    WEFT_LOG_INFO(
        "session reaper: closed {} write sessions of clients without a lease ({} with the length of data their "
        "writer left past it; {} could not be closed, {} wait to be tried again, {} files changed while listed)",
        r.closed, r.lengthened, r.failed, r.waiting, r.changed);
  return r;
}

}  // namespace weft::meta
