#include "storage/storage_server.h"

#include <filesystem>

namespace weft::storage {
namespace {

Result<TargetConfig> target_from(const Config& t, size_t index, bool ids_assigned) {
  TargetConfig tc;
  if (ids_assigned && t.has("id"))
    return error(Code::kConfig, "{}: target ids are assigned by mgmtd when [cluster] is set: remove 'id'", t.source());
  if (!ids_assigned && !t.has("id"))
    return error(Code::kConfig, "{}: a target needs 'id' (or join a cluster with [cluster] mgmtd)", t.source());
  WEFT_TRY(int64_t id, t.get_int_in("id", 0, ids_assigned ? 0 : 1, INT64_MAX));
  tc.id = static_cast<mgmt::TargetId>(id);
  WEFT_TRY(tc.path, t.get_string("path"));
  if (tc.path.empty()) return error(Code::kConfig, "{}: key 'targets[{}].path' must not be empty", t.source(), index);
  WEFT_TRY(int64_t capacity, t.get_int_in("capacity", 0, 0, INT64_MAX));
  tc.capacity_bytes = static_cast<uint64_t>(capacity);
  WEFT_TRY(int64_t reserve_mib, t.get_int_in("reserve_mib", 256, 0, int64_t{1} << 30));
  tc.reserve_bytes = static_cast<uint64_t>(reserve_mib) << 20;
  WEFT_TRY(int64_t chunk_max, t.get_int_in("chunk_size_max", 0, 0, 64 << 20));
  // Checked here too (ChunkEngine::open refuses it), so that the message names the file and the key.
  if (chunk_max != 0 && (chunk_max < 4096 || (chunk_max & (chunk_max - 1)) != 0))
    return error(Code::kConfig, "{}: key 'targets[{}].chunk_size_max' ({}) must be a power of two in [4096, 67108864]",
                 t.source(), index, chunk_max);
  tc.chunk_size_max = static_cast<uint32_t>(chunk_max);
  return tc;
}

}  // namespace

Result<StorageConfig> StorageConfig::from(const Config& config, const rpc::ServiceConfig& server) {
  StorageConfig sc;
  if (config.has("cluster")) {
    WEFT_TRY(Config c, config.table("cluster"));
    WEFT_TRY(sc.mgmtd, c.get_strings("mgmtd"));
    if (sc.mgmtd.empty()) return error(Code::kConfig, "{}: [cluster] mgmtd is empty", config.source());
    if (c.has("advertise")) {
      WEFT_TRY(sc.advertise, c.get_string("advertise"));
    }
    if (config.has("routing"))
      return error(Code::kConfig, "{}: [routing] and [cluster] exclude each other: mgmtd provides the routing",
                   config.source());
  }
  WEFT_TRY(auto targets, config.tables("targets"));
  if (targets.empty()) return error(Code::kConfig, "{}: no [[targets]]", config.source());
  for (size_t i = 0; i < targets.size(); ++i) {
    WEFT_TRY(TargetConfig tc, target_from(targets[i], i, !sc.mgmtd.empty()));
    for (const auto& other : sc.targets)
      if (other.path == tc.path) return error(Code::kConfig, "{}: target path {} appears twice", config.source(), tc.path);
    for (const auto& other : sc.targets)
      if (tc.id != 0 && other.id == tc.id) return error(Code::kConfig, "{}: target id {} appears twice", config.source(), tc.id);
    sc.targets.push_back(std::move(tc));
  }
  if (config.has("storage")) {
    WEFT_TRY(Config s, config.table("storage"));
    WEFT_TRY(int64_t threads, s.get_int_in("disk_threads", 8, 1, 256));
    sc.disk_threads = static_cast<size_t>(threads);
    WEFT_TRY(int64_t timeout, s.get_int_in("forward_timeout_ms", 10000, 100, 600000));
    sc.forward_timeout_ms = static_cast<uint32_t>(timeout);
    WEFT_TRY(int64_t held_mib, s.get_int_in("read_held_mib", 1024, 512, 1 << 20));
    sc.read_bytes_held_max = static_cast<uint64_t>(held_mib) << 20;
    WEFT_TRY(int64_t dedup, s.get_int_in("dedup_entries", 65536, 16, int64_t{1} << 24));
    sc.dedup_entries_max = static_cast<size_t>(dedup);
    WEFT_TRY(int64_t grace, s.get_int_in("stray_chunk_grace_s", 3600, 0, int64_t{365} * 24 * 3600));
    sc.stray_chunk_grace = std::chrono::seconds(grace);
    // At least 10 s: meta shows an unlink a moment before it is durable.
    WEFT_TRY(int64_t orphan, s.get_int_in("orphan_grace_s", 3600, -1, int64_t{365} * 24 * 3600));
    if (orphan >= 0 && orphan < 10)
      return error(Code::kConfig, "{}: key 'storage.orphan_grace_s' ({}) must be -1 (off) or at least 10",
                   config.source(), orphan);
    if (orphan < 0) sc.orphan_grace.reset();
    else sc.orphan_grace = std::chrono::seconds(orphan);
    WEFT_TRY(int64_t orphan_rate, s.get_int_in("orphan_sweep_inodes_per_s", 10000, 0, int64_t{1} << 30));
    sc.orphan_sweep_inodes_per_s = static_cast<uint64_t>(orphan_rate);
    WEFT_TRY(int64_t scrub_mib, s.get_int_in("scrub_mib_per_s", 64, 0, 1 << 20));
    sc.scrub_bytes_per_sec = static_cast<uint64_t>(scrub_mib) << 20;
    WEFT_TRY(int64_t scrub_interval, s.get_int_in("scrub_interval_s", 86400, 1, int64_t{365} * 24 * 3600));
    sc.scrub_interval = std::chrono::seconds(scrub_interval);
    WEFT_TRY(int64_t check_interval,
             s.get_int_in("replica_check_interval_s", 3600, 0, int64_t{365} * 24 * 3600));
    sc.replica_check_interval = std::chrono::seconds(check_interval);
    WEFT_TRY(int64_t check_rate, s.get_int_in("replica_check_chunks_per_s", 100000, 0, int64_t{1} << 32));
    sc.replica_check_chunks_per_s = static_cast<uint64_t>(check_rate);
    WEFT_TRY(int64_t window, s.get_int_in("resync_window", 65536, 1, int64_t{1} << 24));
    sc.resync_window = static_cast<size_t>(window);
  }
  // Forwards go over connections with the server's user timeout (open_storage_service).
  if (server.tcp.user_timeout_ms != 0 && sc.forward_timeout_ms >= server.tcp.user_timeout_ms)
    return error(Code::kConfig,
                 "{}: key 'storage.forward_timeout_ms' ({}) must be below 'server.tcp_user_timeout_ms' ({}), or the "
                 "kernel cuts a successor slow to take a forward before the forward times out",
                 config.source(), sc.forward_timeout_ms, server.tcp.user_timeout_ms);
  if (config.has("routing")) {
    WEFT_TRY(Config r, config.table("routing"));
    WEFT_TRY(sc.routing, routing_from_config(r));
  }
  return sc;
}

Result<std::unique_ptr<StorageService>> open_storage_service(rpc::IoPool& io, const StorageConfig& config,
                                                             const rpc::ServiceConfig& server,
                                                             metrics::Registry& registry,
                                                             std::function<bool()> write_fence,
                                                             std::shared_ptr<rpc::RefusalListener> refusals) {
  std::vector<std::unique_ptr<StorageTarget>> targets;
  for (const auto& tc : config.targets) {
    std::error_code ec;
    std::filesystem::create_directories(tc.path, ec);
    if (ec) return error(Code::kIoError, "create target directory {}: {}", tc.path, ec.message());
    EngineOptions eo;
    eo.target_id = std::to_string(tc.id);
    eo.capacity_bytes = tc.capacity_bytes;
    eo.reserve_bytes = tc.reserve_bytes;
    if (tc.chunk_size_max) eo.chunk_size_max = tc.chunk_size_max;
    auto engine = ChunkEngine::open(tc.path, eo, registry);
    if (!engine) return error(engine.error().with_context(fmt::format("open target {} at {}", tc.id, tc.path)));
    targets.push_back(
        std::make_unique<StorageTarget>(tc.id, std::move(*engine), registry, server.name, config.dedup_entries_max));
  }
  auto routing = std::make_shared<StaticRoutingProvider>();
  if (config.routing) routing->set(*config.routing);
  StorageServiceOptions so;
  so.name = server.name;
  so.chain_client = server.client_options(server.name + "-chain");
  so.chain_client.refusals = std::move(refusals);
  so.disk_threads = config.disk_threads;
  so.forward_timeout_ms = config.forward_timeout_ms;
  so.read_bytes_held_max = config.read_bytes_held_max;
  so.stray_chunk_grace = config.stray_chunk_grace;
  so.scrub_bytes_per_sec = config.scrub_bytes_per_sec;
  so.scrub_interval = config.scrub_interval;
  so.replica_check_interval = config.replica_check_interval;
  so.replica_check_chunks_per_s = config.replica_check_chunks_per_s;
  so.reconcile_queue_max = config.reconcile_queue_max;
  so.resync_window = config.resync_window;
  so.write_fence = std::move(write_fence);
  auto service = std::make_unique<StorageService>(io, so, routing, std::move(targets), registry);
  return service;
}

}  // namespace weft::storage
