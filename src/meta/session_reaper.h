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
  uint64_t scanned = 0;  // sessions looked at
  uint64_t closed = 0;
  uint64_t failed = 0;  // could not be closed (logged; the next pass tries again)
};

// Closes every session whose client `alive` rejects and that was opened
// before `opened_before_ns` (store clock, wall nanoseconds).
Result<ReapResult> reap_sessions(MetaStore& store, const std::function<bool(uint64_t client_id)>& alive,
                                 int64_t opened_before_ns);

class SessionReaper {
 public:
  // The ids of the clients holding a lease; nullopt while the list is not
  // complete; an error when mgmtd cannot be asked (then nothing is closed).
  using LiveClients = std::function<Result<std::optional<std::unordered_set<uint64_t>>>()>;

  SessionReaper(MetaStore& store, const Clock& clock, LiveClients live, std::chrono::milliseconds interval,
                std::chrono::nanoseconds min_age);
  SessionReaper(const SessionReaper&) = delete;
  SessionReaper& operator=(const SessionReaper&) = delete;

  // One pass (what the thread does every interval).
  Result<ReapResult> reap_once();

 private:
  MetaStore& store_;
  const Clock& clock_;
  const LiveClients live_;
  const std::chrono::nanoseconds min_age_;
  PeriodicThread thread_;  // last: starts after the fields it uses
};

}  // namespace weft::meta
