// storage/storage_target.h
// One target as the storage service sees it: its chunk engine, per-chunk
// chain locks, the retry dedup table, request metrics and resync state.
// Threading: thread-safe (each member is).
#pragma once

#include <atomic>
#include <map>
#include <unordered_map>
#include <memory>
#include <mutex>
#include <string>

#include "common/metrics.h"
#include "mgmt/routing.h"
#include "storage/chunk_engine.h"
#include "storage/chunk_locks.h"
#include "storage/dedup_table.h"
#include "storage/sync_order.h"

namespace weft::storage {

enum class Op : uint8_t { kRead, kWrite, kTruncate, kRemove, kForward, kSync, kCount };

struct TargetMetrics {
  TargetMetrics(metrics::Registry& r, const std::string& server, const std::string& target);
  struct PerOp {
    metrics::Counter* ops = nullptr;
    metrics::Counter* errors = nullptr;
    metrics::Counter* bytes = nullptr;
    metrics::Histogram* latency_us = nullptr;
  };
  PerOp op[static_cast<size_t>(Op::kCount)];
  metrics::Counter& payload_checksum_failures;  // request payloads whose CRC32C mismatched on arrival
  metrics::Counter& read_checksum_failures;     // reads answered with kCorruption
  metrics::Counter& dedup_hits;
  PerOp& of(Op o) { return op[static_cast<size_t>(o)]; }
};

class StorageTarget {
 public:
  StorageTarget(mgmt::TargetId id, std::unique_ptr<ChunkEngine> engine, metrics::Registry& registry,
                const std::string& server_name, size_t dedup_entries_max = 65536);
  ~StorageTarget();

  mgmt::TargetId id() const { return id_; }
  ChunkEngine& engine() { return *engine_; }
  ChunkLocks& locks() { return locks_; }
  DedupTable& dedup() { return dedup_; }
  SyncOrder& sync_order() { return sync_order_; }
  TargetMetrics& metrics() { return metrics_; }

  // Why the target is out of service, if it is: its engine refuses every
  // update until reopened (ChunkEngine::failure()). The service then refuses
  // the target's requests (kUnavailable) and the mgmtd link reports it failed,
  // so its chains drop it. Logged once, the first time it is seen.
  std::optional<Status> out_of_service();
  bool failed() const { return engine_->failed(); }  // cheap

  // This target was brought up to date in `chain` at `version` (by its
  // predecessor): told to mgmtd (synced()) until retain_synced drops it.
  void mark_synced(mgmt::ChainId chain, mgmt::ChainVersion version);
  std::map<mgmt::ChainId, mgmt::ChainVersion> synced() const;
  using ChainVersions = std::unordered_map<mgmt::ChainId, mgmt::ChainVersion>;
  // At a routing change (`chains`: every chain of the routing at its version;
  // `syncing_here`: those where this target syncs): keeps the SyncDones
  // mgmtd may still need, of a chain at that version with this target
  // syncing, or at a version the routing here does not know yet (it lags the
  // sender's); drops the others (mgmtd moved on, or the chain is gone), so
  // the record stays within the routing's chains.
  void retain_synced(const ChainVersions& chains, const ChainVersions& syncing_here);

 private:
  const mgmt::TargetId id_;
  std::unique_ptr<ChunkEngine> engine_;
  metrics::Registry& registry_;
  ChunkLocks locks_;
  DedupTable dedup_;
  SyncOrder sync_order_;
  TargetMetrics metrics_;
  mutable std::mutex mu_;
  std::map<mgmt::ChainId, mgmt::ChainVersion> synced_;  // GUARDED_BY(mu_)
  std::atomic<bool> failure_logged_{false};
};

}  // namespace weft::storage
