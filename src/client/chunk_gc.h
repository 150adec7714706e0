// client/chunk_gc.h
// Removes the chunks of files that meta unlinked (the meta service queues a
// file once its last link and last writer are gone). Runs inside the meta
// server, with the client's chunk I/O: meta stays off the data path for
// everything else.
// Chunks [0, ceil(size / chunk)) are removed, `size` being the length meta
// knew; bytes a crashed writer sent without ever reporting the length beyond
// it are not found this way (a storage-side sweep is the remedy; not built).
// Threading: one thread of its own between start() and stop().
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <span>

#include "client/chunk_io.h"
#include "client/routing_cache.h"
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
};

class ChunkGc {
 public:
  // Owns its own I/O threads, RPC client and routing cache.
  ChunkGc(std::vector<rpc::Endpoint> mgmtd, std::string cluster_token, ChunkGcHooks hooks,
          std::chrono::milliseconds interval = std::chrono::milliseconds(1000));
  ~ChunkGc();
  ChunkGc(const ChunkGc&) = delete;
  ChunkGc& operator=(const ChunkGc&) = delete;

  void start();
  void stop();
  struct Pass {
    size_t taken = 0;     // files meta handed out
    size_t finished = 0;  // of those, files whose chunks are all gone (reported done)
  };
  // One pass over the next files of the queue. Files whose removals failed
  // stay queued (logged), they do not fail the pass. Passes go round the
  // queue: each starts after the files the last full one was handed, and a
  // short one (the end of the queue) or the 16th in a round that finished
  // something sends the next back to the front. So files that keep failing
  // are retried once per round and never stop the files behind them (however
  // many), nor do new files stop the old ones.
  Result<Pass> collect_once();
  uint64_t files_collected() const { return files_.load(); }
  uint64_t chunks_removed() const { return chunks_.load(); }

 private:
  // A pass on the thread; returns the wait before the next (none after a full batch).
  PeriodicThread::Wait tick();

  struct Parts;
  std::unique_ptr<Parts> parts_;
  ChunkGcHooks hooks_;
  const std::chrono::milliseconds interval_;
  std::atomic<uint64_t> files_{0};
  std::atomic<uint64_t> chunks_{0};
  bool routing_started_ = false;  // collect_once's thread only
  // Where the next pass starts: after this inode, or (nullopt) at the front.
  std::optional<meta::Ino> resume_after_;  // collect_once's thread only
  size_t passes_this_round_ = 0;           // collect_once's thread only: passes since the front that finished files
  std::optional<PeriodicThread> thread_;  // from start()
};

}  // namespace weft::client
