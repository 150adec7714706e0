// storage/storage_server.h
// Assembles a storage server from its config: opens every target's chunk
// engine, sets up the routing (static, from [routing] or SetRouting) and the
// StorageService. Used by `weft serve storage` and by in-process tests.
//
// [server]   ... see rpc/service_runtime.h
// [storage]
// disk_threads = 8            # engine calls run here
// forward_timeout_ms = 10000  # per chain hop; below [server] tcp_user_timeout_ms unless that is 0
// read_held_mib = 1024        # MiB reads may hold until their replies are written (512..; a connection a quarter)
// stray_chunk_grace_s = 3600  # chunks of chains a target left go after this long (storage/stray_sweep.h)
// orphan_grace_s = 3600       # with [cluster]: chunks of files meta no longer has go after this long
//                             # (storage/orphan_sweep.h); -1: never; else at least 10
// orphan_sweep_inodes_per_s = 10000  # inodes the orphan sweep asks meta about per second; 0: no limit
// scrub_mib_per_s = 64        # every target's chunks re-verified at most this fast (storage/scrubber.h); 0: never
// scrub_interval_s = 86400    # pause between two scrub passes of a target (the first starts at once)
// replica_check_interval_s = 3600  # chains this server heads: members' chunk records compared, differences
//                             # reconciled (storage/replica_check.cc); 0: never
// replica_check_chunks_per_s = 100000  # chunk records a replica check compares per second; 0: no limit
// resync_window = 65536       # differing chunks a resync lists before copying them (its memory bound)
// [[targets]]
// id = 101                    # cluster-wide target id
// path = "/data/ssd0/weft"    # the target's directory
// capacity = "0"              # bytes (integer); 0: the filesystem's free space
// chunk_size_max = 1048576    # optional, power of two
// [routing]                   # optional; see storage/routing_provider.h
// [cluster]                   # optional: join a cluster run by mgmtd (storage/mgmt_link.h)
// mgmtd = ["127.0.0.1:7000"]  # then target ids are assigned by mgmtd (omit `id`),
// advertise = "host:port"     # [routing] must be absent, and [server] listen needs a fixed port;
//                             # advertise defaults to the listen address
//
// Threading: open() from one thread; the service is thread-safe.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/config.h"
#include "rpc/service_runtime.h"
#include "storage/storage_service.h"

namespace weft::storage {

struct TargetConfig {
  mgmt::TargetId id = 0;
  std::string path;
  uint64_t capacity_bytes = 0;
  uint64_t reserve_bytes = uint64_t{256} << 20;  // EngineOptions::reserve_bytes
  uint32_t chunk_size_max = 0;  // 0: the engine's default
};

struct StorageConfig {
  std::vector<TargetConfig> targets;
  std::optional<mgmt::RoutingInfo> routing;
  size_t disk_threads = 8;
  uint32_t forward_timeout_ms = 10000;
  uint64_t read_bytes_held_max = uint64_t{1} << 30;  // [storage] read_held_mib
  size_t dedup_entries_max = 65536;                  // [storage] dedup_entries, per target
  std::chrono::seconds stray_chunk_grace{std::chrono::hours(1)};
  std::optional<std::chrono::seconds> orphan_grace = std::chrono::hours(1);  // nullopt: no orphan sweep
  uint64_t orphan_sweep_inodes_per_s = 10000;                                // 0: no limit
  uint64_t scrub_bytes_per_sec = uint64_t{64} << 20;                         // [storage] scrub_mib_per_s; 0: off
  std::chrono::milliseconds scrub_interval{std::chrono::hours(24)};          // [storage] scrub_interval_s
  std::chrono::milliseconds replica_check_interval{std::chrono::hours(1)};   // [storage] replica_check_interval_s
  size_t resync_window = 65536;                                              // [storage] resync_window
  uint64_t replica_check_chunks_per_s = 100000;  // [storage] replica_check_chunks_per_s; 0: no limit
  size_t reconcile_queue_max = 65536;            // no config key (tests set it)
  std::vector<std::string> mgmtd;  // [cluster] mgmtd; empty: standalone (static routing)
  std::string advertise;           // [cluster] advertise; empty: the listen address

  // `server`: the same file's [server] section, which some keys must agree with.
  static Result<StorageConfig> from(const Config& config, const rpc::ServiceConfig& server);
};

// Opens every target and builds the service (not yet registered on a server).
// Name, cluster token and tcp liveness come from `server`: the service's
// connections to other storage servers are made as ServiceConfig::client_options.
Result<std::unique_ptr<StorageService>> open_storage_service(rpc::IoPool& io, const StorageConfig& config,
                                                             const rpc::ServiceConfig& server,
                                                             metrics::Registry& registry = metrics::Registry::global(),
                                                             std::function<bool()> write_fence = nullptr,
                                                             std::shared_ptr<rpc::RefusalListener> refusals = nullptr);

}  // namespace weft::storage
