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
// What the dead writer stored counts: before its session is closed, storage
// is asked for the file's data past its length (`StoredEnd`, the chunk
// listing of client::stored_end), and the session is closed with that
// length (MetaStore::close_with_length), as if the writer had closed it. So
// its writes are in the file, as a killed process's are on a local file
// system, and never show up later inside an extension or a hole that should
// read as zeros. A truncate by another client meanwhile marks the session
// (meta/types.h SessionCut): the listing answers the cut it saw at the scan,
// a newer one caps the close and keeps the session for the next pass. Not
// asked: unlinked files (their chunks all go to GC), sessions of clients
// from before cut answers (nothing would tell the listing from a truncate
// after it), or without a StoredEnd (no storage: a meta outside a cluster,
// the store's tests). A listing that fails keeps the session for the next
// pass.
// A session is owned by the client id of the write open (MetaStore::open:
// its request id's client, else its connection's); sessions recorded without
// one (only possible before write opens required one) are never closed.
// Threading: reap_sessions() is a blocking store call; SessionReaper runs it
// on its own thread every `interval`.
#pragma once

#include <chrono>
#include <functional>
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
  uint64_t lengthened = 0;  // of the closed, files whose writer left data past their length
  uint64_t cut = 0;         // kept: a truncate came while storage was listed (the next pass lists again)
  uint64_t failed = 0;      // could not be closed (logged; the next pass tries again)
};

// The end of the data storage holds of `inode` past `from` (its length), or
// `from` when it holds none there.
using StoredEnd = std::function<Result<uint64_t>(const Inode& inode, uint64_t from)>;

// Closes every session whose client `alive` rejects and that was opened
// before `opened_before_ns` (store clock, wall nanoseconds).
Result<ReapResult> reap_sessions(MetaStore& store, const std::function<bool(uint64_t client_id)>& alive,
                                 int64_t opened_before_ns, const StoredEnd& stored_end = {});

class SessionReaper {
 public:
  // The ids of the clients holding a lease; nullopt while the list is not
  // complete; an error when mgmtd cannot be asked (then nothing is closed).
  using LiveClients = std::function<Result<std::optional<std::unordered_set<uint64_t>>>()>;

  SessionReaper(MetaStore& store, const Clock& clock, LiveClients live, std::chrono::milliseconds interval,
                std::chrono::nanoseconds min_age, StoredEnd stored_end = {});
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
  PeriodicThread thread_;  // last: starts after the fields it uses
};

}  // namespace weft::meta
