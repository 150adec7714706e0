// storage/mgmt_link.h
// A storage server's membership in a cluster run by mgmtd: registration (which
// assigns the target ids: stable per server address + target path), the
// heartbeat loop whose lease fences writes, routing pushed into the service's
// StaticRoutingProvider, refused connections to peers reported to mgmtd
// (refusals()), target usage in every heartbeat (with whether the
// target is out of service: its engine refuses every update, so mgmtd takes
// it out of its chains), and sync-done reports when a predecessor finished
// resyncing one of our targets.
// Lifecycle: connect() registers (retrying while mgmtd is unreachable, up to
// `register_timeout`), then the caller opens the targets with the assigned ids,
// builds the StorageService and calls attach(), which starts the heartbeats.
// Threading: thread-safe; the heartbeat loop runs on its own thread.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "mgmt/routing.h"
#include "rpc/client.h"
#include "rpc/endpoint.h"
#include "rpc/io_pool.h"

namespace weft::storage {

class StorageService;
class StaticRoutingProvider;

struct MgmtLinkOptions {
  std::vector<rpc::Endpoint> mgmtd;
  rpc::ClientOptions rpc;  // of the connections to mgmtd (rpc::ServiceConfig::client_options)
  std::string address;  // host:port this server is reached at (its identity in the cluster)
  struct Target {
    std::string name;  // the target directory (connect() records the incarnation there: mgmt::next_incarnation)
    uint64_t capacity_bytes = 0;
    uint64_t data_id = 0;  // ChunkEngine::ensure_data_id of the directory
  };
  std::vector<Target> targets;
  std::chrono::milliseconds register_timeout{30000};
};

class MgmtLink {
 public:
  static Result<std::unique_ptr<MgmtLink>> connect(rpc::IoPool& io, MgmtLinkOptions options);
  ~MgmtLink();
  MgmtLink(const MgmtLink&) = delete;
  MgmtLink& operator=(const MgmtLink&) = delete;

  // In the order of options.targets.
  std::vector<mgmt::TargetId> target_ids() const;
  // Reports connections refused by other storage servers to mgmtd (set it in
  // the chain connections' rpc::ClientOptions::refusals; mgmt/refusal_probe.h).
  std::shared_ptr<rpc::RefusalListener> refusals() const;
  // Wires routing, usage and sync-done to `service` and starts the heartbeats.
  // `service` must outlive this link's stop().
  void attach(StorageService& service, StaticRoutingProvider& routing);
  void stop();
  // False once the lease ran out (or before the first grant): no writes then.
  bool can_serve_writes() const;

 private:
  struct Impl;
  explicit MgmtLink(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace weft::storage
