// meta/session_reaper.h
// Closes the write sessions of clients that no longer hold a lease at mgmtd
// (mgmt/client_table.h). A crashed client would otherwise keep its sessions
// forever and, with them, the chunks of every file unlinked while it had the
// file open for writing (the last close queues them for GC).
// A session is closed only when
//   1. its client id is absent from a COMPLETE list of live clients (mgmtd has
//      tracked clients for a full lease + grace; a freshly restarted mgmtd's
//      list proves nothing), and
//   2. it was opened more than `min_age` ago on the store's clock: a client
//      that just connected may open a file before its first heartbeat lands.
// What the dead writer stored counts: before its session of a linked file is
// closed, storage is asked for the file's data past its length (`StoredEnd`,
// the chunk listing of client::stored_end), and the session is closed with
// the end found (MetaStore::close_dead_session), as the writer's own close
// would have: its writes are in the file, as a killed process's are on a
// local file system. The close happens only if the inode did not change
// since it was read for the listing (a truncate meanwhile, even by the dead
// client itself if it still runs cut off from mgmtd, may have removed what
// was listed): otherwise the session waits for the next pass. Not asked:
// unlinked files (all their chunks go to GC), or without a StoredEnd (no
// storage: a meta outside a cluster, the store's tests).
// A session whose listing (or close) failed is not tried again before a
// back-off has passed (1 s, doubling up to 5 min from its failure, in
// memory); a pass tries sessions that never failed first, and after 4
// failed listings leaves the other sessions that need one for later passes.
// So a chain without a serving target costs a pass a few storage retry
// times, and logs a line per session at the back-off's pace. A file that
// changed while listed is listed again up to 3 times, then left for the
// next pass.
// A session is owned by the client id of the write open (MetaStore::open:
// its request id's client, else its connection's); sessions recorded without
// one (only possible before write opens required one) are never closed.
// Threading: reap_sessions() is a blocking store call; SessionReaper runs it
// on its own thread every `interval`.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <unordered_set>

#include "common/clock.h"
#include "common/periodic.h"
#include "common/status.h"
#include "meta/meta_store.h"

namespace weft::meta {

struct ReapResult {
  uint64_t scanned = 0;     // sessions looked at
  uint64_t closed = 0;
  // of the closed, those closed with the end a listing found past the length
  // (for an abandoned session capped at a length set since, which may leave it as it was)
  uint64_t lengthened = 0;
  uint64_t changed = 0;     // kept: the file changed while storage was listed (the next pass lists again)
  uint64_t failed = 0;      // could not be closed (logged; tried again after a back-off)
  uint64_t waiting = 0;     // not tried: in back-off after a failure
};

// The end of the data storage holds of `inode` past `from` (its length), or
// `from` when it holds none there.
using StoredEnd = std::function<Result<uint64_t>(const Inode& inode, uint64_t from)>;

// What reap_sessions keeps from one pass to the next (SessionReaper's).
struct ReapState {
  const Clock* clock = &SystemClock::instance();  // its now() (monotonic) times the back-off
  std::atomic<bool> stop{false};                  // a pass ends before its next session
  struct Wait {
    TimePoint next{};
    Duration delay{};
  };
  // Sessions (inode, session id) whose last try failed. Invariant: only
  // sessions the last pass found doomed (the others are dropped).
  std::map<std::pair<Ino, uint64_t>, Wait> waits;
};

// Closes every session whose client `alive` rejects and that was opened
// before `opened_before_ns` (store clock, wall nanoseconds).
Result<ReapResult> reap_sessions(MetaStore& store, const std::function<bool(uint64_t client_id)>& alive,
                                 int64_t opened_before_ns, const StoredEnd& stored_end = {},
                                 ReapState* state = nullptr);

class SessionReaper {
 public:
  // The ids of the clients holding a lease; nullopt while the list is not
  // complete; an error when mgmtd cannot be asked (then nothing is closed).
  using LiveClients = std::function<Result<std::optional<std::unordered_set<uint64_t>>>()>;

  SessionReaper(MetaStore& store, const Clock& clock, LiveClients live, std::chrono::milliseconds interval,
                std::chrono::nanoseconds min_age, StoredEnd stored_end = {});
  ~SessionReaper();
  SessionReaper(const SessionReaper&) = delete;
  SessionReaper& operator=(const SessionReaper&) = delete;

  // One pass (what the thread does every interval).
  Result<ReapResult> reap_once();

 private:
  MetaStore& store_;
  const Clock& clock_;
  const LiveClients live_;
  const std::chrono::nanoseconds min_age_;
  const StoredEnd stored_end_;
  ReapState state_;  // the thread's (stop: any thread; clock set at construction)
  PeriodicThread thread_;  // last: starts after the fields it uses
};

}  // namespace weft::meta
