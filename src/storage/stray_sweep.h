// storage/stray_sweep.h
// Removes the chunks a target holds for chains it is no longer in. A target
// leaves a chain only when `weft admin target replace` puts a spare in its
// place (or its node is removed and it comes back under new ids): its old
// chunks then sit on its disk unused, counted in its usage, forever. Each
// check lists the chains a target's chunks name (ChunkEngine::chains); a
// chain of the routing in force that does not hold the target is stray from
// then on, and after `grace` (measured by this process, so a restart starts
// it over) its chunks are removed. Chunks of unknown chain, and of chains
// the routing does not know, are never touched.
//
// Race with rejoining: a replace may put the target back into that chain
// while its chunks go (its new predecessor then lists them and skips copying
// what matches: removing them afterwards would lose data). Invariant: a
// chunk is removed only while (target, chain) is marked as being swept and a
// routing snapshot read after the mark was set shows the target outside the
// chain; every request that acts on a chain's chunks at a target (updates,
// forwards, reads, ListChunks of that chain) first sees the target in the
// chain in the routing, then asks sweeping(), and is refused (kStaleRouting,
// retried by its sender) while the mark is set. Routing versions only grow,
// so whichever of the two reads the routing second sees the target in the
// chain: either the sweep stops, or the request waits for it to end.
// A server whose lease lapsed (write fence down) removes nothing.
//
// Threading: one thread per sweep, started by start(), joined by stop();
// run_once() and sweeping() are thread-safe; sweeping() costs one atomic
// load while nothing is swept.
// Ownership: borrows the engines and the routing provider; they must outlive it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/log_throttle.h"
#include "common/metrics.h"
#include "common/periodic.h"
#include "storage/chunk_engine.h"
#include "storage/routing_provider.h"

namespace weft::storage {

struct StraySweepOptions {
  std::string name = "storage";                 // the server, for logs
  std::chrono::milliseconds grace{std::chrono::hours(1)};  // stray this long before its chunks go
  std::chrono::milliseconds interval{std::chrono::minutes(1)};  // between checks
  std::function<bool()> write_fence;            // false: remove nothing now
};

class StraySweep {
 public:
  struct Target {
    mgmt::TargetId id = 0;
    ChunkEngine* engine = nullptr;
  };

  StraySweep(StraySweepOptions options, RoutingProvider& routing, std::vector<Target> targets,
             metrics::Registry& registry);
  ~StraySweep();
  StraySweep(const StraySweep&) = delete;
  StraySweep& operator=(const StraySweep&) = delete;

  void start();
  void stop();
  // One check of every target in the calling thread; returns the chunks removed.
  uint64_t run_once();
  // True while the chunks of `chain` at `target` are being removed.
  bool sweeping(mgmt::TargetId target, mgmt::ChainId chain) const;

  // The grace and interval of a `[storage] stray_chunk_grace_s` value: checks
  // come every quarter of the grace, between 1 s and 1 min apart.
  static StraySweepOptions from_grace(std::chrono::seconds grace);

 private:
  using Key = std::pair<mgmt::TargetId, mgmt::ChainId>;
  // Whether the routing in force has `chain` without `target` (false if the
  // chain is unknown there).
  bool stray(mgmt::TargetId target, mgmt::ChainId chain) const;
  uint64_t sweep_chain(const Target& t, mgmt::ChainId chain);

  const StraySweepOptions options_;
  RoutingProvider& routing_;
  const std::vector<Target> targets_;
  std::map<mgmt::TargetId, metrics::Counter*> removed_;  // weft_storage_stray_chunks_removed_total
  LogThrottle error_log_{std::chrono::minutes(1)};
  std::mutex run_mu_;  // one run_once at a time (the thread's and a test's)
  std::map<Key, std::chrono::steady_clock::time_point> since_;  // GUARDED_BY(run_mu_): first seen stray

  mutable std::mutex mu_;
  std::set<Key> sweeping_;            // GUARDED_BY(mu_)
  std::atomic<size_t> sweeping_count_{0};  // sweeping_.size(), read without mu_
  RepeatingPass passes_;  // last: stopped before the rest goes
};

}  // namespace weft::storage
