// storage/scrubber.h
// Background re-verification of every committed chunk of one engine (block
// CRCs and whole-chunk CRC) at a bounded rate, so silent corruption is found
// before a reader or a resync needs the data. Corrupt chunks are counted
// (weft_storage_scrub_corrupt_chunks_total), logged (at most one line per 10
// s, naming how many were held back), handed to `on_corrupt`, and kept in
// corrupt_chunks() until the next pass that no longer finds them or forget()
// (a repair replaced it). The chunk itself is kept as it is (a missing chunk
// would read as a hole): reads of it answer kCorruption and clients read
// another replica. The storage service runs one per target ([storage]
// scrub_mib_per_s, scrub_interval_s) and repairs what on_corrupt names from
// another replica of its chain (storage/repair.cc).
// Threading: start()/stop() from one owner thread; run_pass(), forget() and
// corrupt_chunks() are thread-safe (passes run one at a time: a second
// run_pass() waits for the running one). on_corrupt runs on the thread of the
// pass and may call forget().
// Ownership: borrows the engine, which must outlive the scrubber.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "common/log_throttle.h"
#include "common/metrics.h"
#include "common/status.h"
#include "storage/chunk_engine.h"

namespace weft::storage {

struct ScrubOptions {
  uint64_t bytes_per_sec = 64u << 20;                         // read bandwidth bound
  std::chrono::milliseconds pass_interval{std::chrono::hours(24)};  // pause between passes
  std::function<void(const ChunkId&, const Status&)> on_corrupt;
};

struct ScrubReport {
  uint64_t chunks = 0;
  uint64_t bytes = 0;
  std::vector<ChunkId> corrupt;
  // Chunks the disk did not give back (an I/O error, a short slab): counted
  // (weft_storage_scrub_unreadable_chunks_total) and logged, not handed to
  // on_corrupt (a repair mends checksum failures, not the device).
  std::vector<ChunkId> unreadable;
  bool interrupted = false;
};

// How long into a pass `bytes` may have been read at `bytes_per_sec` (0
// counts as 1).
std::chrono::steady_clock::duration scrub_pace(uint64_t bytes, uint64_t bytes_per_sec);

class Scrubber {
 public:
  Scrubber(ChunkEngine& engine, ScrubOptions options, metrics::Registry& registry = metrics::Registry::global());
  ~Scrubber();
  Scrubber(const Scrubber&) = delete;
  Scrubber& operator=(const Scrubber&) = delete;

  // Runs passes in a background thread until stop().
  void start();
  void stop();
  // One full pass in the calling thread (rate-limited; ends early on stop()).
  ScrubReport run_pass();
  std::vector<ChunkId> corrupt_chunks() const;
  // `id` is no longer corrupt (repaired): dropped from corrupt_chunks(), also
  // when the pass that found it is still running.
  void forget(const ChunkId& id);
  uint64_t passes() const;

 private:
  // Sleeps until `bytes` fit the rate since `start`; false if stopped.
  bool pace(std::chrono::steady_clock::time_point start, uint64_t bytes);

  ChunkEngine& engine_;
  ScrubOptions options_;
  metrics::Counter& bytes_scrubbed_;
  metrics::Counter& corrupt_found_;
  metrics::Counter& unreadable_found_;
  metrics::Counter& passes_done_;
  LogThrottle corrupt_log_{std::chrono::seconds(10)};
  LogThrottle unreadable_log_{std::chrono::seconds(10)};

  std::mutex pass_mu_;  // held by run_pass()
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;            // GUARDED_BY(mu_)
  std::vector<ChunkId> corrupt_;     // GUARDED_BY(mu_)
  std::vector<ChunkId> found_;       // GUARDED_BY(mu_): this pass's finds not forgotten since
  uint64_t passes_ = 0;              // GUARDED_BY(mu_)
  std::thread thread_;
};

}  // namespace weft::storage
