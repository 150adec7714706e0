// Construction, method registration, placement and the per-target
// inspection methods of the storage service.
#include "storage/storage_service.h"

#include <algorithm>
#include <thread>

#include "common/crc32c.h"
#include "common/logging.h"
#include "proto/storage.pb.h"
#include "storage/engine_jobs.h"
#include "rpc/service.h"
#include "storage/service_methods.h"

namespace weft::storage {
namespace {

rpc::ClientOptions client_options(const StorageServiceOptions& o) {
  rpc::ClientOptions c = o.chain_client;
  c.call_timeout_ms = o.forward_timeout_ms;
  c.connections_per_endpoint = std::max<size_t>(c.connections_per_endpoint, kForwardLanes);
  return c;
}

void to_proto(const ChunkInfo& info, pb::ChunkMeta* out) {
  out->mutable_chunk()->set_inode(info.id.inode);
  out->mutable_chunk()->set_index(info.id.index);
  out->set_version(info.version);
  out->set_length(info.length);
  out->set_chunk_crc32c(info.chunk_crc);
  out->set_pending_version(info.pending_version);
  out->set_chain_id(info.chain_id);
}

metrics::Counter& resync_chunks_counter(metrics::Registry& registry, const std::string& server,
                                        const std::string& outcome) {
  return registry.counter("weft_storage_resync_chunks_total",
                          "Differing chunks resyncs handled, by outcome: copied, removed (not on the source), "
                          "delivered (an update reached the successor first: no copy)",
                          {{"server", server}, {"outcome", outcome}});
}

}  // namespace

StorageService::StorageService(rpc::IoPool& io, StorageServiceOptions options, std::shared_ptr<RoutingProvider> routing,
                               std::vector<std::unique_ptr<StorageTarget>> targets, metrics::Registry& registry)
    : io_(io),
      options_(std::move(options)),
      routing_(std::move(routing)),
      registry_(registry),
      pool_(options_.disk_threads, options_.disk_queue_max),
      client_(io, client_options(options_)),
      resync_failures_(registry_.counter("weft_storage_resync_failures_total",
                                         "Resync passes that failed (retried after a growing pause)",
                                         {{"server", options_.name}})),
      resync_copied_(resync_chunks_counter(registry_, options_.name, "copied")),
      resync_removed_(resync_chunks_counter(registry_, options_.name, "removed")),
      resync_delivered_(resync_chunks_counter(registry_, options_.name, "delivered")),
      replica_check_passes_(registry_.counter("weft_storage_replica_check_passes_total",
                                              "Replica checks of the chains this server heads",
                                              {{"server", options_.name}})),
      replica_check_differing_(registry_.counter(
          "weft_storage_replica_check_differing_chunks_total",
          "Chunk records a replica check found different between a chain's head and another member (reconciled)",
          {{"server", options_.name}})) {
  for (auto& t : targets) targets_[t->id()] = std::move(t);
  DiskPool* pool = &pool_;
  registry_.gauge_fn("weft_storage_disk_queue_depth", "Engine jobs queued or running on the disk pool",
                     {{"server", options_.name}}, [pool] { return static_cast<double>(pool->depth()); }, this);
  registry_.gauge_fn("weft_storage_read_bytes_held", "Bytes chunk reads hold until their replies are written",
                     {{"server", options_.name}},
                     [held = read_bytes_held_] { return static_cast<double>(held->load()); }, this);
  registry_.gauge_fn("weft_storage_resyncs_running", "Resyncs this server drives as predecessor",
                     {{"server", options_.name}}, [this] { return static_cast<double>(resyncs_running_.load()); },
                     this);
  routing_->on_change([this] {
    trim_sync_orders();
    start_resyncs();
  });
  StraySweepOptions so = StraySweep::from_grace(options_.stray_chunk_grace);
  so.name = options_.name;
  so.write_fence = options_.write_fence;
  std::vector<StraySweep::Target> sweep_targets;
  for (auto& [id, t] : targets_) sweep_targets.push_back({id, &t->engine()});
  stray_ = std::make_unique<StraySweep>(std::move(so), *routing_, std::move(sweep_targets), registry_);
  if (options_.stray_sweep) stray_->start();
  if (options_.scrub_bytes_per_sec > 0)
    for (auto& [id, t] : targets_) {
      ScrubOptions scrub;
      scrub.bytes_per_sec = options_.scrub_bytes_per_sec;
      scrub.pass_interval = options_.scrub_interval;
      scrub.on_corrupt = [this, id](const ChunkId& chunk, const Status&) { request_repair(id, chunk); };
      auto scrubber = std::make_unique<Scrubber>(t->engine(), std::move(scrub), registry_);
      scrubber->start();
      scrubbers_[id] = std::move(scrubber);
    }
  start_replica_check();
}

StorageService::~StorageService() {
  stop();
  // The background coroutines (repairs, reconciles, resyncs, the replica
  // check) use this object's members until they end: their calls to peers are
  // cut now (one stuck on a peer that does not answer would wait its whole
  // timeout), and they are waited for, however long that takes.
  client_.shut_down();
  for (int i = 1; background_busy(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (i % 2000 == 0) WEFT_LOG_WARN("{}: still waiting for repairs, resyncs or checks to end", options_.name);
  }
  registry_.remove_callbacks(this);
  pool_.stop();
}

bool StorageService::background_busy() {
  std::scoped_lock lock(repairs_.mu, reconciles_.mu);
  return resyncs_running_.load() > 0 || repairs_.worker || reconciles_.worker || replica_check_running_.load();
}

void StorageService::stop() {
  stopping_ = true;
  stray_->stop();
  for (auto& [id, scrubber] : scrubbers_) scrubber->stop();
  // The background coroutines end at their next step; the destructor waits
  // for them (a wait here would not help one stuck on a peer).
}

StorageTarget* StorageService::target(mgmt::TargetId id) {
  auto it = targets_.find(id);
  return it == targets_.end() ? nullptr : it->second.get();
}

Scrubber* StorageService::scrubber(mgmt::TargetId id) {
  auto it = scrubbers_.find(id);
  return it == scrubbers_.end() ? nullptr : it->second.get();
}

void StorageService::set_sync_listener(SyncListener listener) {
  std::lock_guard lock(mu_);
  sync_listener_ = std::move(listener);
}

Result<Placement> StorageService::locate(mgmt::ChainId chain_id, mgmt::ChainVersion version) const {
  Placement p;
  p.routing = routing_->current();
  auto chain = p.routing->chain(chain_id);
  if (!chain)
    return error(Code::kStaleRouting, "chain {} unknown at routing version {}", chain_id, p.routing->version);
  if ((*chain)->version != version)
    return error(Code::kStaleRouting, "chain {} is at version {}, request has {}", chain_id, (*chain)->version, version);
  WEFT_TRY(p.route, mgmt::route_chain(**chain));
  for (size_t i = 0; i < p.route.write_path.size() && !p.target; ++i) {
    auto it = targets_.find(p.route.write_path[i]);
    if (it == targets_.end()) continue;
    p.target = it->second.get();
    p.index = i;
  }
  if (!p.target)
    return error(Code::kStaleRouting, "no target of {} on the write path of chain {} version {}", options_.name, chain_id,
                 version);
  WEFT_RETURN_IF_ERROR(check_in_service(*p.target));
  if (stray_->sweeping(p.target->id(), chain_id))
    return error(Code::kStaleRouting, "target {} is still removing its old chunks of chain {}, which it just rejoined",
                 p.target->id(), chain_id);
  for (auto t : p.route.readable) p.readable |= t == p.target->id();
  if (p.index + 1 < p.route.write_path.size()) {
    mgmt::TargetId next = p.route.write_path[p.index + 1];
    WEFT_TRY(std::string address, p.routing->target_address(next));
    WEFT_TRY(rpc::Endpoint ep, rpc::Endpoint::parse(address));
    p.successor = Placement::Peer{next, std::move(ep)};
  }
  return p;
}

// A chain's chunks at a target are listed only while the routing here has
// the target in the chain and no stray sweep runs on them (stray_sweep.h):
// a resync must not list chunks that are about to go.
Result<void> StorageService::check_member(const StorageTarget& t, mgmt::ChainId chain_id) const {
  RoutingSnapshot routing = routing_->current();
  auto chain = routing->chain(chain_id);
  bool member = chain && std::any_of((*chain)->entries.begin(), (*chain)->entries.end(),
                                     [&](const mgmt::ChainEntry& e) { return e.target_id == t.id(); });
  if (!member)
    return error(Code::kStaleRouting, "target {} is not in chain {} at routing version {}", t.id(), chain_id,
                 routing->version);
  if (stray_->sweeping(t.id(), chain_id))
    return error(Code::kStaleRouting, "target {} is still removing its old chunks of chain {}, which it just rejoined",
                 t.id(), chain_id);
  return {};
}

// A target whose engine refuses every update (a sticky commit or slab sync
// failure) takes no requests: its chains cannot take writes through it, and
// the mgmtd link reports it failed so that they drop it (mgmt_link.cc).
// Retryable: the client tries another replica or waits for the new chain.
Result<void> StorageService::check_in_service(StorageTarget& t) const {
  if (!t.failed()) return {};
  auto why = t.out_of_service();
  return error(Code::kUnavailable, "target {} on {} is out of service until its server restarts: {}", t.id(),
               options_.name, why ? why->to_string() : std::string("engine failed"));
}

Result<void> StorageService::check_write_fence() const {
  if (options_.write_fence && !options_.write_fence())
    return error(Code::kLeaseExpired, "{}: lease from mgmtd expired: not accepting writes", options_.name);
  return {};
}

// The same lease for reads: once it ran out, mgmtd may (after lease + grace)
// have moved this server's chains on without it, and a new chain version may
// have taken writes this replica never saw. A client whose routing is as old
// as ours would read data older than an acknowledged write; refused, it tries
// another replica and refreshes its routing (kLeaseExpired is retryable).
Result<void> StorageService::check_read_fence() const {
  if (options_.write_fence && !options_.write_fence())
    return error(Code::kLeaseExpired, "{}: lease from mgmtd expired: not serving reads (its chains may have moved on)",
                 options_.name);
  return {};
}

Result<void> StorageService::check_payload(const rpc::ServerCall& call, uint32_t length, uint32_t crc,
                                           StorageTarget& t) const {
  if (call.payload.size() != length)
    return error(Code::kInvalidArgument, "payload has {} bytes, request says {}", call.payload.size(), length);
  if (uint32_t got = crc32c(call.payload.span()); got != crc) {
    t.metrics().payload_checksum_failures.inc();
    return error(Code::kCorruption, "payload CRC32C {:08x} on arrival, sender computed {:08x}", got, crc);
  }
  return {};
}

namespace {

struct ListJob {
  ChunkEngine* engine;
  uint32_t chain_id;  // kChainUnknown: every chunk
  std::optional<ChunkId> start;
  size_t count_max;
  std::optional<ChunkId> end;
  Result<std::vector<ChunkInfo>> operator()() const {
    return chain_id == kChainUnknown ? engine->list(start, count_max, end)
                                     : engine->list_chain(chain_id, start, count_max, end);
  }
};

}  // namespace

Task<Result<pb::GetChunkMetaReply>> StorageService::get_chunk_meta(const pb::GetChunkMetaRequest& req) {
  WEFT_CO_RETURN_IF_ERROR(check_read_fence());
  StorageTarget* t = target(req.target_id());
  if (!t) co_return error(Code::kNotFound, "no target {} on {}", req.target_id(), options_.name);
  WEFT_CO_RETURN_IF_ERROR(check_in_service(*t));
  StatJob job{&t->engine(), ChunkId{req.chunk().inode(), req.chunk().index()}};
  auto info = co_await pool_.run(job);
  if (!info) co_return error(info.error());
  pb::GetChunkMetaReply reply;
  to_proto(*info, reply.mutable_meta());
  co_return reply;
}

Task<Result<pb::ListChunksReply>> StorageService::list_chunks(const pb::ListChunksRequest& req) {
  StorageTarget* t = target(req.target_id());
  if (!t) co_return error(Code::kNotFound, "no target {} on {}", req.target_id(), options_.name);
  WEFT_CO_RETURN_IF_ERROR(check_in_service(*t));
  if (req.chain_id() != kChainUnknown) WEFT_CO_RETURN_IF_ERROR(check_member(*t, req.chain_id()));
  if (req.chain_id() != kChainUnknown && req.chain_version() != 0) {
    // As batch_read: a client trusts what it lists as what it would read.
    WEFT_CO_RETURN_IF_ERROR(check_read_fence());
    WEFT_CO_TRY(Placement p, locate(req.chain_id(), req.chain_version()));
    if (!p.readable || p.target != t)
      co_return error(Code::kUnavailable, "target {} is not serving in chain {}", t->id(), req.chain_id());
  }
  size_t count_max = req.count_max() == 0 ? 1024 : std::min<size_t>(req.count_max(), 65536);
  ListJob job{&t->engine(), req.chain_id(), std::nullopt, count_max + 1};
  if (req.has_start()) job.start = ChunkId{req.start().inode(), req.start().index()};
  if (req.has_end()) job.end = ChunkId{req.end().inode(), req.end().index()};
  auto list = co_await pool_.run(job);
  if (!list) co_return error(list.error());
  pb::ListChunksReply reply;
  reply.set_more(list->size() > count_max);
  if (list->size() > count_max) list->pop_back();
  for (const auto& info : *list) to_proto(info, reply.add_chunks());
  co_return reply;
}

void StorageService::register_methods(rpc::Server& server) {
  using rpc::ServerCall;
  rpc::add_async_method<pb::BatchReadRequest, pb::BatchReadReply>(
      server, methods::kBatchRead, "storage.batch_read",
      [this](const pb::BatchReadRequest& r, ServerCall& c) { return batch_read(r, c); });
  rpc::add_async_method<pb::WriteRequest, pb::WriteReply>(
      server, methods::kWrite, "storage.write",
      [this](const pb::WriteRequest& r, ServerCall& c) { return write(r, c); });
  rpc::add_async_method<pb::TruncateRequest, pb::WriteReply>(
      server, methods::kTruncate, "storage.truncate",
      [this](const pb::TruncateRequest& r, ServerCall& c) { return truncate(r, c); });
  rpc::add_async_method<pb::RemoveRequest, pb::RemoveReply>(
      server, methods::kRemove, "storage.remove",
      [this](const pb::RemoveRequest& r, ServerCall& c) { return remove(r, c); });
  rpc::add_async_method<pb::RemoveRangeRequest, pb::RemoveRangeReply>(
      server, methods::kRemoveRange, "storage.remove_range",
      [this](const pb::RemoveRangeRequest& r, ServerCall&) { return remove_range(r); });
  rpc::add_async_method<pb::GetChunkMetaRequest, pb::GetChunkMetaReply>(
      server, methods::kGetChunkMeta, "storage.get_chunk_meta",
      [this](const pb::GetChunkMetaRequest& r, ServerCall&) { return get_chunk_meta(r); });
  rpc::add_async_method<pb::ListChunksRequest, pb::ListChunksReply>(
      server, methods::kListChunks, "storage.list_chunks",
      [this](const pb::ListChunksRequest& r, ServerCall&) { return list_chunks(r); });
  rpc::add_async_method<pb::ForwardRequest, pb::ForwardReply>(
      server, methods::kForward, "storage.forward",
      [this](const pb::ForwardRequest& r, ServerCall& c) { return forward_in(r, c); });
  rpc::add_blocking_method<pb::SyncDoneRequest, pb::SyncDoneReply>(
      server, methods::kSyncDone, "storage.sync_done",
      [this](const pb::SyncDoneRequest& r, ServerCall&) { return sync_done(r); });
  rpc::add_async_method<pb::RepairChunkRequest, pb::RepairChunkReply>(
      server, methods::kRepairChunk, "storage.repair_chunk",
      [this](const pb::RepairChunkRequest& r, ServerCall&) { return repair_chunk(r); });
  rpc::add_blocking_method<pb::SetRoutingRequest, pb::SetRoutingReply>(
      server, methods::kSetRouting, "storage.set_routing",
      [this](const pb::SetRoutingRequest& r, ServerCall&) { return set_routing(r); });
  rpc::add_blocking_method<pb::TargetStatusRequest, pb::TargetStatusReply>(
      server, methods::kTargetStatus, "storage.target_status",
      [this](const pb::TargetStatusRequest& r, ServerCall&) { return target_status(r); });
}

}  // namespace weft::storage
