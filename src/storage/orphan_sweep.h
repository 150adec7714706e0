// storage/orphan_sweep.h
// Removes the chunks of files meta no longer has. Meta's chunk GC removes a
// deleted file's chunks up to the length meta knew, so bytes a writer sent
// but never reported (a client killed before it closed: a training job
// stopped in the middle of a checkpoint) stayed on storage forever, and a
// file whose known length was 0 never even reached the GC. Each pass lists
// the inodes a target holds chunks of and asks meta about them, a batch at a
// time. An inode is an orphan when meta does not have it AND its id is below
// meta's issued-id mark (a file created while we ask is never judged). An
// orphan's chunks go when it has been one for `grace` (this process's clock:
// a restart starts over), so a mistaken answer has to repeat across passes
// first. Chunks with an update pending are left for a later pass.
// Which meta answers: meta's store has a random id made with it. Each target
// remembers (file kStateFile in its directory, written before anything is
// removed) the store id it first heard and the highest mark; a different
// store id (a meta started on an empty store, or another meta's), a mark
// below the remembered one (a store restored from an older copy), or answers
// from two stores in one question stop the sweep of that target, with an
// error in the log, until an operator removes the file. mgmtd's word comes
// first (MetaMark::cluster_store_id, from the routing; mgmt/cluster_state.h,
// "Meta's store"): answers from a store other than the one mgmtd records for
// the cluster judge nothing (a fenced meta, a first contact with the wrong
// store), and a different store id that IS the one mgmtd records, with ids
// raised past the remembered mark by at least half kStoreChangeIdMargin, is an
// accepted store change (`weft serve meta --accept-store-change` gives the
// store a new id and raises its ids): the target's sweep starts over with it
// (the file is rewritten, the orphans seen so far forgotten), logged, no
// operator needed. A store mgmtd records without that raise (the first one a
// state-less mgmtd hears) stops the sweep like any other store.
// The mark in the file is rewritten at most once per pass, so after a restart
// it may lag by one pass.
// Load: at most `inodes_per_s` inodes asked per second; removal of one
// orphan's chunks checks the stop and the lease fence per page.
// Memory: 16 bytes per orphan inode being timed (twice that during a pass),
// at most `tracked_max` of them over all targets: after an accepted store
// change every inode on a server may be an orphan at once (millions). A new
// orphan is timed only while the ones timed already (this pass's, and the
// last pass's not yet met again) leave room; the others wait for a later
// pass, once the first ones went (an inode whose chunks all went is not
// kept). New orphans are logged one line per question to meta, not one per
// inode.
// Threading: one thread, started by start(), joined by stop(); run_once() is
// thread-safe (one pass at a time).
// Ownership: borrows the engines; the oracle is owned.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/log_throttle.h"
#include "common/metrics.h"
#include "common/periodic.h"
#include "storage/chunk_engine.h"

namespace weft::storage {

// What meta says of itself (meta::StatFs).
struct MetaMark {
  uint64_t ids_issued_below = 0;  // every id meta handed out is below this; 0: not told
  uint64_t store_id = 0;          // 0: not told
  // Not meta's word but mgmtd's: the cluster's meta store as mgmtd recorded
  // it (RoutingInfo::meta_store_id); 0: not known (an mgmtd older than it).
  uint64_t cluster_store_id = 0;
};

// What the sweep asks meta.
class InodeOracle {
 public:
  virtual ~InodeOracle() = default;
  // Per inode, in order: whether meta has it. An error: no answer now.
  virtual Result<std::vector<bool>> exist(const std::vector<uint64_t>& inos) = 0;
  virtual Result<MetaMark> mark() = 0;
};

struct OrphanSweepOptions {
  std::string name = "storage";
  std::chrono::milliseconds grace{std::chrono::hours(1)};
  std::chrono::milliseconds interval{std::chrono::minutes(10)};
  std::function<bool()> write_fence;  // false: remove nothing now
  size_t batch = 1024;                // inodes per question to meta
  size_t list_page = 4096;            // chunks per listing of a target
  // At most this many inodes asked about per second over a pass (0: no
  // limit): every replica of every file is asked about each pass, and meta
  // serves its clients meanwhile.
  size_t inodes_per_s = 10000;
  size_t tracked_max = 1000000;  // orphan inodes timed at once (see Memory above)
};

class OrphanSweep {
 public:
  struct Target {
    uint64_t id = 0;
    ChunkEngine* engine = nullptr;
  };

  OrphanSweep(OrphanSweepOptions options, std::unique_ptr<InodeOracle> oracle, std::vector<Target> targets,
              metrics::Registry& registry);
  ~OrphanSweep();
  OrphanSweep(const OrphanSweep&) = delete;
  OrphanSweep& operator=(const OrphanSweep&) = delete;

  void start();
  void stop();
  // One pass over every target; returns the chunks removed.
  uint64_t run_once();
  // Orphan inodes being timed now (observability, tests).
  size_t orphans_timed();

  // `[storage] orphan_grace_s`: checks every quarter of it, 1 s to 10 min apart.
  static OrphanSweepOptions from_grace(std::chrono::seconds grace);

 private:
  using TimePoint = std::chrono::steady_clock::time_point;
  struct Orphan {
    uint64_t ino;
    TimePoint first;  // first seen orphaned (this process's clock)
  };
  // The orphans timed, by target, each target's in ascending inode order (a
  // pass lists a target's inodes in that order). `count`: all targets'.
  struct Orphans {
    std::map<uint64_t, std::vector<Orphan>> by_target;
    size_t count = 0;
    // When `ino` of target t was first seen orphaned, if it is timed here.
    std::optional<TimePoint> first(uint64_t t, uint64_t ino) const;
    void forget(uint64_t t);
  };
  // Asks meta about `inos` (ascending, distinct) of target t; removes what is due.
  uint64_t judge(const Target& t, const std::vector<uint64_t>& inos, TimePoint now, Orphans& seen);
  // Removes the chunks of `ino`; `all_gone`: none is left (as far as listed).
  uint64_t remove_inode(const Target& t, uint64_t ino, bool& all_gone);
  bool stopping() const;
  // Whether nothing may be removed now (stopping, or the lease fence down).
  bool must_not_remove() const;
  // Waits (until stopping) so that asking `count` more inodes keeps the pass
  // within inodes_per_s.
  void pace(size_t count);
  // Whether `m` comes from the store target t remembers (remembering it, and
  // a higher mark, first); false stops the sweep of t. A store change mgmtd
  // accepted starts t's sweep over (forgetting t's orphans in since_ and `seen`).
  bool same_store(const Target& t, const MetaMark& m, Orphans& seen);

 public:
  static constexpr const char* kStateFile = "orphan-sweep.state";  // "<store id> <highest mark>\n"

 private:
  std::map<uint64_t, MetaMark> remembered_;  // GUARDED_BY(run_mu_): by target (loaded from kStateFile)
  // GUARDED_BY(run_mu_): targets whose kStateFile this pass wrote. The mark
  // grows with every create: written once per pass (and whenever the store
  // is new), not once per question.
  std::set<uint64_t> persisted_this_pass_;
  std::chrono::steady_clock::time_point pass_start_;  // GUARDED_BY(run_mu_)
  uint64_t asked_this_pass_ = 0;                      // GUARDED_BY(run_mu_)

  const OrphanSweepOptions options_;
  const std::unique_ptr<InodeOracle> oracle_;
  const std::vector<Target> targets_;
  std::map<uint64_t, metrics::Counter*> removed_;  // weft_storage_orphan_chunks_removed_total
  LogThrottle log_{std::chrono::minutes(1)};

  std::mutex run_mu_;  // one pass at a time
  Orphans since_;                // GUARDED_BY(run_mu_): the last pass's orphans, first seen when
  uint64_t untracked_this_pass_ = 0;  // GUARDED_BY(run_mu_): orphans past tracked_max, left for later passes
  size_t met_this_pass_ = 0;          // GUARDED_BY(run_mu_): orphans of since_ met again this pass

  RepeatingPass passes_;  // last: stopped before the rest goes
};

}  // namespace weft::storage
