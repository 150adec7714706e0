// client/routing_cache.h
// The client's copy of the cluster routing (chains, their targets, the
// servers' addresses). start() fetches it once; a thread then long-polls
// mgmtd (GetRouting with the known version) so a change arrives within one
// round trip of mgmtd publishing it. Data-path code that meets a stale or
// failed chain calls request_refresh() (does not block) and waits for
// version() to move (or simply retries after a backoff).
// Invariant: once start() succeeded, current() is never null (a mgmtd with
// nothing registered yet still hands out its empty snapshot, version 0).
// Threading: thread-safe. The poll thread never runs on an I/O thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "common/status.h"
#include "mgmt/mgmt_rpc.h"
#include "mgmt/routing.h"
#include "rpc/cancel.h"
#include "rpc/client.h"
#include "rpc/endpoint.h"
#include "rpc/io_pool.h"

namespace weft::client {

using RoutingPtr = std::shared_ptr<const mgmt::RoutingInfo>;

// A node's address as the routing names it, as an endpoint to connect to:
// kProtocol (mgmtd's fault, not the caller's) at once for one mgmtd would
// never have registered (mgmt::check_address: "[::1", "a:b:c:1", port 0...),
// which a connect would only fail after the whole retry time. A fixed
// routing arrives through the cache's long poll like any other.
Result<rpc::Endpoint> routing_endpoint(const std::string& address);

class RoutingCache {
 public:
  RoutingCache(rpc::IoPool& io, rpc::Client& rpc, std::vector<rpc::Endpoint> mgmtd);
  ~RoutingCache();
  RoutingCache(const RoutingCache&) = delete;
  RoutingCache& operator=(const RoutingCache&) = delete;

  // First fetch (fails when no mgmtd answers), then starts the poll thread.
  Result<void> start();
  void stop();

  RoutingPtr current() const;
  mgmt::RoutingVersion version() const { return version_.load(); }
  // Makes the poll thread fetch at once (it may be mid long-poll: that poll is cut short).
  void request_refresh();
  // Fetches the whole snapshot from mgmtd now, whatever the version: usage and
  // capacity of targets change in place there (heartbeats) without a new
  // version, so statfs asks for them fresh. Installs it unless older.
  Result<RoutingPtr> fetch_fresh();
  uint64_t fetches() const { return fetches_.load(); }
  // Snapshots refused for being older than the one held (mgmtd behind us).
  uint64_t older_refused() const { return older_refused_.load(); }

 private:
  // One GetRouting against the mgmtd addresses in order (known version, long
  // poll of wait_ms); installs a newer snapshot; returns the one held afterwards.
  Result<RoutingPtr> get_routing(mgmt::RoutingVersion known, uint32_t wait_ms, const rpc::CancelToken& cancel);
  // Installs `info` unless it is older than what is held; returns what is held.
  RoutingPtr install(mgmt::RoutingInfo info);
  void run();

  mgmt::MgmtRpc rpc_;  // failover over the mgmtd addresses

  mutable std::mutex mu_;
  RoutingPtr current_;                    // GUARDED_BY(mu_)
  std::atomic<mgmt::RoutingVersion> version_{0};
  std::atomic<uint64_t> fetches_{0};
  std::atomic<uint64_t> older_refused_{0};

  std::mutex loop_mu_;
  std::condition_variable loop_cv_;
  bool stopping_ = false;        // GUARDED_BY(loop_mu_)
  bool refresh_wanted_ = false;  // GUARDED_BY(loop_mu_)
  std::shared_ptr<rpc::CancelSource> poll_cancel_;  // GUARDED_BY(loop_mu_)
  bool poll_long_ = false;  // GUARDED_BY(loop_mu_): the call in flight is a long poll (a request cuts only that)
  std::chrono::steady_clock::time_point last_behind_warning_{};  // poll thread only
  std::thread thread_;
};

}  // namespace weft::client
