// mgmt/service.h
// The cluster manager's RPC service (`weft serve mgmtd`): Register,
// Heartbeat, CreateChainTable, ListChainTables and Status run as blocking
// handlers on ClusterState (RocksDB writes, one mutex); GetRouting is async
// so a long poll holds a timer, not a thread. Client leases (ClientHeartbeat,
// ListClients) live in a ClientTable (mgmt/client_table.h), in memory only.
// ReportRefusal probes a storage server that peers could not connect to and
// declares it dead when nothing listens there (mgmt/refusal_probe.h).
// A ticker thread calls ClusterState::tick() every `tick` to declare expired
// nodes dead and expires client leases.
// GetRouting serves a serialized snapshot cached per routing version: many
// clients refreshing after a change cost one copy of the state. Usage bytes
// and leases in that snapshot may lag (they change without a version bump);
// Status always reads fresh state.
// Threading: handlers run on the server's threads; start()/stop() from the
// owner's thread. The service must outlive the Server's I/O threads (a long
// poll may still be waiting on a timer when the server stops).
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "common/clock.h"
#include "common/config.h"
#include "common/metrics.h"
#include "common/status.h"
#include "mgmt/client_table.h"
#include "mgmt/cluster_state.h"
#include "mgmt/refusal_probe.h"
#include "proto/mgmt.pb.h"
#include "rpc/server.h"
#include "rpc/task.h"

namespace weft::mgmt {

struct MgmtServiceOptions {
  Duration tick = std::chrono::milliseconds(200);
  Duration routing_poll = std::chrono::milliseconds(20);  // long-poll check interval
  // Clients renew every lease/3; a crashed client's write sessions are closed
  // by meta about lease + grace after its last heartbeat.
  LeaseConfig client_lease{.lease = std::chrono::seconds(30), .grace = std::chrono::seconds(10)};
  RefusalProbeOptions refusal_probe;  // ReportRefusal: mgmt/refusal_probe.h
};

// The [mgmtd] section of `weft serve mgmtd --config FILE`:
//   data_dir = "./weft-data/mgmtd"  # RocksDB state lives in data_dir/state
//   lease_ms = 3000                 # lease granted per heartbeat
//   grace_ms = 1000                 # extra wait before declaring a node dead
//   tick_ms  = 200                  # how often expired leases are checked
//   client_lease_ms = 30000         # lease granted per client heartbeat
//   client_grace_ms = 10000         # extra wait before a client's lease is dropped
//   probe_refusals = true           # a storage server reported refusing connections is
//                                   # probed and, refused again, declared dead at once
struct MgmtdConfig {
  ClusterOptions cluster;
  MgmtServiceOptions service;
  std::string data_dir;

  static Result<MgmtdConfig> from(const Config& config);
};

class MgmtService {
 public:
  MgmtService(ClusterState& state, const Clock& clock, MgmtServiceOptions options,
              metrics::Registry& registry = metrics::Registry::global());
  ~MgmtService();
  MgmtService(const MgmtService&) = delete;
  MgmtService& operator=(const MgmtService&) = delete;

  // Call before the server listens.
  void register_methods(rpc::Server& server);
  // Starts the ticker thread.
  void start();
  // Stops the ticker and ends pending long polls (idempotent).
  void stop();

  const ClientTable& clients() const { return clients_; }
  const RefusalProbes& probes() const { return probes_; }

 private:
  struct Snapshot {
    RoutingVersion version = 0;
    uint64_t usage_generation = 0;
    proto::mgmt::Routing routing;
  };
  std::shared_ptr<const Snapshot> snapshot();
  Task<Result<proto::mgmt::GetRoutingReply>> get_routing(proto::mgmt::GetRoutingRequest req);
  // Blocking (a probe connects): mgmt/refusal_probe.h.
  Result<proto::mgmt::ReportRefusalReply> report_refusal(const proto::mgmt::ReportRefusalRequest& req);
  void tick_loop();

  ClusterState& state_;
  const Clock& clock_;
  const MgmtServiceOptions options_;
  ClientTable clients_;
  metrics::Counter& tick_errors_;
  metrics::Counter& long_polls_;
  metrics::Registry& registry_;
  RefusalProbes probes_;

  std::mutex snapshot_mu_;
  std::shared_ptr<const Snapshot> snapshot_;  // GUARDED_BY(snapshot_mu_)

  std::atomic<bool> stopping_{false};
  std::mutex tick_mu_;
  std::condition_variable tick_cv_;
  std::thread ticker_;
};

}  // namespace weft::mgmt
