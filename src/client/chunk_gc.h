// client/chunk_gc.h
// Removes the chunks of files that meta unlinked (the meta service queues a
// file once its last link and last writer are gone). Runs inside the meta
// server, with the client's chunk I/O: meta stays off the data path for
// everything else.
// Every chunk of the file is removed, however far past the length meta knew
// (a crashed writer's too): one storage RemoveRange per chain of its stripe,
// costing the chunks that exist (client/remove_chunks.h); a chain whose head
// predates RemoveRange gets a removal per index of [0, ceil(size / chunk)).
// stop() ends a pass at its next wave of calls (its files stay queued).
// A file whose chunks could not all be removed stays queued and waits before
// its next try (back-off, held in memory: a restarted meta tries every file
// again at once).
// Threading: one thread of its own between start() and stop().
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>

#include "client/storage_client.h"
#include "common/clock.h"
#include "common/log_throttle.h"
#include "common/periodic.h"
#include "common/status.h"
#include "meta/types.h"

namespace weft::client {

struct ChunkGcHooks {
  // Up to `limit` queued files in inode order: the first ones, or those after
  // inode `after` (MetaStore::gc_pending).
  std::function<Result<std::vector<meta::GcItem>>(size_t limit, std::optional<meta::Ino> after)> pending;
  // The chunks of these files are gone (one call per pass).
  std::function<Result<void>(std::span<const meta::Ino>)> done;
  // Whether a queued file's chunks may go now (unset: always). A file it
  // refuses is passed over like one in back-off, and asked about again at
  // the next pass that reaches it (meta: a reader may still have it open,
  // meta/read_holds.h).
  std::function<bool(const meta::GcItem&)> may_collect;
  // Whether a pass may run now (unset: always). A pass it refuses asks
  // nothing, removes nothing and keeps every file's back-off (meta: not
  // without a lease from mgmtd). An empty `pending` answer, by contrast,
  // says no file is queued there.
  std::function<bool()> may_run;
};

struct ChunkGcOptions {
  // Between passes, unless the last one finished files and more are queued.
  std::chrono::milliseconds interval{1000};
  // A file that failed is not tried again before backoff_first (> 0) has passed,
  // twice as long after each further failure in a row, at most backoff_max
  // (so a file that cannot be cleaned for long costs a try every 5 minutes).
  std::chrono::milliseconds backoff_first{1000};
  std::chrono::milliseconds backoff_max{std::chrono::minutes(5)};
};

class ChunkGc {
 public:
  // Owns its storage access (client/storage_client.h; RPC client made with
  // `rpc_options`): storage() lends it to other background work of the meta
  // server. `clock` times the back-off and the warnings only.
  ChunkGc(std::vector<rpc::Endpoint> mgmtd, rpc::ClientOptions rpc_options, ChunkGcHooks hooks,
          ChunkGcOptions options = {}, const Clock& clock = SystemClock::instance());
  ~ChunkGc();
  ChunkGc(const ChunkGc&) = delete;
  ChunkGc& operator=(const ChunkGc&) = delete;

  void start();
  void stop();
  struct Pass {
    size_t taken = 0;        // files meta handed out that the pass looked at
    size_t waiting = 0;      // of those, files in back-off or that may not go yet: not tried
    size_t finished = 0;     // of those, files whose chunks are all gone (reported done)
    bool queue_end = false;  // no file is queued after the last one taken
    size_t held = 0;         // of the waiting, files hooks.may_collect kept
  };
  // One pass over the next files of the queue. Files whose removals failed
  // stay queued, they do not fail the pass (logged when a file starts to
  // fail, else at most once a minute); no removal is sent to a
  // chain with no serving target (its files fail at once). A file that failed
  // waits in back-off (ChunkGcOptions; a new routing version ends the wait of
  // files that failed for want of a route): passes look past it, taking more
  // from meta (up to 1,024 files looked at) until they have 64 to try.
  // Passes go round the queue: each starts after the last file the previous
  // one looked at, and one that reached the end of the queue or the 16th in
  // a round that finished something sends the next back to the front. So
  // files that keep failing are retried at most once per round and never
  // stop the files behind them (however many), nor do new files stop the old
  // ones.
  Result<Pass> collect_once();
  StorageClient& storage() { return *storage_; }
  uint64_t files_collected() const { return files_.load(); }
  // Chunks the storage servers removed (RemoveRange's count; the per-index fallback's are not counted).
  uint64_t chunks_removed() const { return chunks_.load(); }
  // Files whose last try failed, waiting for their next (a gauge, as of the last pass).
  uint64_t files_in_backoff() const { return backoff_files_.load(); }

 private:
  struct Batch;
  struct Call;
  struct Outcome;
  // A file's wait after a failure. `no_route`: its last try failed for want
  // of a serving target (or of the chain or table) in the routing.
  struct Backoff {
    TimePoint next_try;
    Duration delay{};
    bool no_route = false;
  };

  // A pass on the thread; returns the wait before the next (none when it
  // finished files and more are queued).
  PeriodicThread::Wait tick();
  // The next files to try, looking past those in back-off.
  Result<Batch> take_batch(TimePoint now);
  // Drops the back-off of files meta no longer hands out: `got` is every
  // file queued after `after` up to its last one (to the end when `to_end`).
  void forget_unqueued(std::optional<meta::Ino> after, const std::vector<meta::GcItem>& got, bool to_end);
  // Removes the chunks of `items`; what became of each.
  std::vector<Outcome> remove_chunks(const std::vector<meta::GcItem>& items, const mgmt::RoutingInfo& routing);
  // Updates the back-off of the files tried; true when one failed that was not in back-off.
  bool note_outcomes(const std::vector<meta::GcItem>& items, const std::vector<Outcome>& outcomes, TimePoint now);

  std::unique_ptr<StorageClient> storage_;
  ChunkGcHooks hooks_;
  const ChunkGcOptions options_;
  const Clock& clock_;
  std::atomic<uint64_t> files_{0};
  std::atomic<uint64_t> chunks_{0};
  std::atomic<uint64_t> backoff_files_{0};
  std::atomic<bool> stopping_{false};  // stop() was called: passes end at their next wave
  // Files whose last try failed, by inode; collect_once's thread only.
  // Invariants: an entry is a file that meta handed out when a pass last
  // looked at its inode (passes drop the entries of the inode ranges they
  // are handed that lack them), whose last try failed (a success erases it);
  // at most kBackoffFilesMax entries (chunk_gc.cc).
  std::map<meta::Ino, Backoff> backoff_;
  mgmt::RoutingVersion backoff_routing_version_ = 0;  // collect_once's thread only: the last version seen
  std::optional<TimePoint> last_warning_;             // collect_once's thread only: of files that stay queued
  LogThrottle pass_errors_{std::chrono::minutes(1)};  // tick's warnings of passes that failed
  // Where the next pass starts: after this inode, or (nullopt) at the front.
  std::optional<meta::Ino> resume_after_;  // collect_once's thread only
  size_t passes_this_round_ = 0;           // collect_once's thread only: passes since the front that finished files
  std::optional<PeriodicThread> thread_;  // from start()
};

}  // namespace weft::client
