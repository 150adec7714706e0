#include "storage/storage_target.h"

#include "common/logging.h"

namespace weft::storage {
namespace {

const char* op_name(Op o) {
  switch (o) {
    case Op::kRead: return "read";
    case Op::kWrite: return "write";
    case Op::kTruncate: return "truncate";
    case Op::kRemove: return "remove";
    case Op::kForward: return "forward";
    case Op::kSync: return "sync";
    case Op::kCount: break;
  }
  return "unknown";
}

}  // namespace

TargetMetrics::TargetMetrics(metrics::Registry& r, const std::string& server, const std::string& target)
    : payload_checksum_failures(r.counter("weft_storage_payload_checksum_failures_total",
                                          "Request payloads whose CRC32C mismatched on arrival",
                                          {{"server", server}, {"target", target}})),
      read_checksum_failures(r.counter("weft_storage_read_corruption_total", "Read ranges answered with kCorruption",
                                       {{"server", server}, {"target", target}})),
      dedup_hits(r.counter("weft_storage_dedup_hits_total", "Client retries answered from the dedup table",
                           {{"server", server}, {"target", target}})) {
  for (size_t i = 0; i < static_cast<size_t>(Op::kCount); ++i) {
    metrics::Labels l{{"server", server}, {"target", target}, {"op", op_name(static_cast<Op>(i))}};
    op[i].ops = &r.counter("weft_storage_requests_total", "Storage requests per target and operation", l);
    op[i].errors = &r.counter("weft_storage_request_errors_total", "Storage requests that failed", l);
    op[i].bytes = &r.counter("weft_storage_request_bytes_total", "Data bytes read or written by requests", l);
    op[i].latency_us = &r.histogram("weft_storage_request_latency_us", "Storage request latency", l);
  }
}

StorageTarget::StorageTarget(mgmt::TargetId id, std::unique_ptr<ChunkEngine> engine, metrics::Registry& registry,
                             const std::string& server_name, size_t dedup_entries_max)
    : id_(id),
      engine_(std::move(engine)),
      registry_(registry),
      dedup_(dedup_entries_max),
      metrics_(registry, server_name, std::to_string(id)) {
  metrics::Labels l{{"server", server_name}, {"target", std::to_string(id)}};
  ChunkEngine* e = engine_.get();
  registry.gauge_fn("weft_storage_target_free_bytes", "Free space of the target", l,
                    [e] { return static_cast<double>(e->free_bytes()); }, this);
  registry.gauge_fn("weft_storage_target_used_bytes", "Used space of the target", l,
                    [e] { return static_cast<double>(e->used_bytes()); }, this);
  registry.gauge_fn("weft_storage_target_capacity_bytes", "Capacity of the target", l,
                    [e] { return static_cast<double>(e->capacity_bytes()); }, this);
  ChunkLocks* locks = &locks_;
  registry.gauge_fn("weft_storage_target_chunks_locked", "Chunks with an update in progress (chain queue depth)", l,
                    [locks] { return static_cast<double>(locks->held()); }, this);
}

StorageTarget::~StorageTarget() { registry_.remove_callbacks(this); }

void StorageTarget::mark_synced(mgmt::ChainId chain, mgmt::ChainVersion version) {
  std::lock_guard lock(mu_);
  auto& v = synced_[chain];
  v = std::max(v, version);
}

void StorageTarget::retain_synced(const ChainVersions& chains, const ChainVersions& syncing_here) {
  std::lock_guard lock(mu_);
  std::erase_if(synced_, [&](const auto& entry) {
    const auto& [chain, version] = entry;
    auto it = chains.find(chain);
    if (it == chains.end()) return true;
    return !(it->second < version || (it->second == version && syncing_here.contains(chain)));
  });
}

std::map<mgmt::ChainId, mgmt::ChainVersion> StorageTarget::synced() const {
  std::lock_guard lock(mu_);
  return synced_;
}

std::optional<Status> StorageTarget::out_of_service() {
  if (!engine_->failed()) return std::nullopt;
  std::optional<Status> f = engine_->failure();
  if (f && !failure_logged_.exchange(true))
    WEFT_LOG_ERROR("target {} ({}) is out of service until its server restarts: {}", id_, engine_->dir(), *f);
  return f;
}

}  // namespace weft::storage
