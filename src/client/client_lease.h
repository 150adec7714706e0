// client/client_lease.h
// Keeps this client's lease at mgmtd (mgmt/client_table.h): one heartbeat at
// start(), then a thread renews every lease/3 (every second after a failure).
// The client id sent is the one the client also uses as its request-id
// namespace at meta, which records it in every write session: when the lease
// runs out (the process died or lost mgmtd for longer than lease + grace),
// meta closes those sessions, so the files they kept alive can be collected.
// A client that regains mgmtd simply renews; sessions meta closed meanwhile
// answer kBadHandle (as a lost NFS lease does).
// Threading: thread-safe; start()/stop() from the owner's thread.
#pragma once

#include <atomic>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/log_throttle.h"
#include "common/periodic.h"
#include "common/status.h"
#include "mgmt/mgmt_rpc.h"

namespace weft::client {

class ClientLease {
 public:
  ClientLease(rpc::IoPool& io, rpc::Client& rpc, std::vector<rpc::Endpoint> mgmtd, uint64_t client_id,
              std::string label);
  ~ClientLease();
  ClientLease(const ClientLease&) = delete;
  ClientLease& operator=(const ClientLease&) = delete;

  // First heartbeat, then the renewal thread. A failed first heartbeat is
  // returned (for the log) but the thread still starts and keeps trying.
  Result<void> start();
  void stop();

  uint64_t client_id() const { return client_id_; }
  uint64_t heartbeats_ok() const { return heartbeats_ok_.load(); }

  // "host:pid:name", what `weft status` shows for this client.
  static std::string default_label(std::string_view name);

 private:
  // One heartbeat; returns the lease granted.
  Result<Duration> heartbeat();
  // A renewal on the thread; returns the wait before the next one.
  Duration renew();

  mgmt::MgmtRpc rpc_;
  const uint64_t client_id_;
  const std::string label_;
  std::atomic<uint64_t> heartbeats_ok_{0};
  uint64_t failures_in_a_row_ = 0;  // on the renewal thread only
  LogThrottle failure_log_{std::chrono::minutes(1)};

  std::optional<PeriodicThread> thread_;  // from start()
};

}  // namespace weft::client
