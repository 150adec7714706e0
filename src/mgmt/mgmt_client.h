// mgmt/mgmt_client.h
// What storage servers, meta servers and clients run to take part in a
// cluster: registration with mgmtd, a heartbeat loop that feeds a
// LeaseKeeper (mgmt/lease.h) and reports target usage and sync-done, and a
// routing cache.
//   - register: kind, address, incarnation, targets; the reply assigns the
//     node and target ids and is also a lease grant.
//   - heartbeat every lease/3 (or as configured). "Unknown node" (mgmtd
//     restarted without state, or another incarnation registered in between)
//     revokes the lease and re-registers at once. "Replaced by a newer
//     incarnation" revokes the lease and FENCES this client: it stops for good
//     (a zombie process must not serve). So does a re-registration that gives
//     the node's targets other ids than its first (mgmtd forgot the node).
//   - routing: the latest RoutingInfo snapshot, swapped atomically; refreshed
//     by a long poll, when a heartbeat reply shows a newer routing version and by refresh()
//     (callers do this when a peer answers kStaleRouting). A snapshot never
//     goes back to an older version, except right after re-registration
//     (a mgmtd that lost its state starts counting again).
//   - a meta node's store (registration.meta_store: its id, and the mark
//     `meta_ids_mark` reads at each registration and heartbeat) goes with
//     every register and heartbeat; mgmtd refuses another store or a lower
//     mark (kNotPermitted: a fence, mgmt/cluster_state.h "Meta's store"),
//     also a running meta's heartbeat once another store replaced its own.
//     registration.accept_store_change goes with the first registration only.
//   - fenced: logged once with the reason (fence_reason()); the fence
//     listener is told (a meta server then refuses every request).
//   - the highest routing version ever installed goes with every register and
//     heartbeat (and is recorded in the file `mgmt-routing-version` of each of
//     options.state_dirs, so it survives restarts): mgmtd refuses both
//     (kVersionMismatch) while that is above its own version, i.e. its state
//     is older than the cluster's (mgmt/cluster_state.h, "Behind"). Such a
//     refusal is not final: the loop logs it and keeps retrying; the lease is
//     not renewed meanwhile.
// Threading: every public method is thread-safe; the loop runs on its own
// thread between start() and stop(). Calls block: never call from an I/O
// thread of the MgmtRpc's pool.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "mgmt/cluster_state.h"
#include "mgmt/lease.h"
#include "mgmt/mgmt_rpc.h"
#include "mgmt/routing.h"

namespace weft::mgmt {

struct MgmtClientOptions {
  RegisterRequest registration;          // kind, address, incarnation (> 0), targets
  Duration heartbeat_interval{};         // 0: a third of the granted lease
  Duration retry_interval = std::chrono::milliseconds(200);  // after a failed register/heartbeat
  // Where the highest installed routing version is recorded (kRoutingVersionFile;
  // a storage server's target directories, a meta server's data_dir) and read
  // back at construction. Empty: remembered in memory only.
  std::vector<std::string> state_dirs;
  // Meta nodes: their store's issued-id mark now (read for every register and
  // heartbeat). Null: the mark in registration.meta_store is sent as it is.
  std::function<uint64_t()> meta_ids_mark;
};

inline constexpr const char* kRoutingVersionFile = "mgmt-routing-version";

// The largest routing version recorded in any of `dirs` (0: none; an unreadable
// record is ignored, logged).
RoutingVersion read_routing_version(const std::vector<std::string>& dirs);

// A fresh incarnation number: wall-clock nanoseconds. Grows across restarts
// only while the clock does not step back: a process that keeps state on disk
// uses next_incarnation().
uint64_t new_incarnation();

// The incarnation file next_incarnation() keeps in each of its directories.
inline constexpr const char* kIncarnationFile = "mgmt-incarnation";

// A fresh incarnation for a process whose state lives in `dirs` (a storage
// server's target directories, a meta server's data_dir): the larger of the
// wall clock (ns) and one more than the largest recorded in any of them, then
// recorded in each (created if missing; the file replaced atomically and
// synced). It stays above the last one after the clock stepped back, where
// wall-clock time alone would stay below the incarnation mgmtd has registered
// for the address, which it refuses as a zombie's (kNotPermitted) until the
// clock catches up. An unreadable record is ignored (logged); a failed write
// is an error. Not for two processes on the same directories at once.
Result<uint64_t> next_incarnation(const std::vector<std::string>& dirs,
                                  const Clock& clock = SystemClock::instance());

class MgmtClient {
 public:
  using UsageSource = std::function<std::vector<TargetUsage>()>;
  using RoutingListener = std::function<void(std::shared_ptr<const RoutingInfo>)>;

  // `clock` times the lease: BootClock, so a suspend of this machine counts (common/clock.h).
  MgmtClient(MgmtRpc& rpc, MgmtClientOptions options, const Clock& clock = BootClock::instance());
  ~MgmtClient();
  MgmtClient(const MgmtClient&) = delete;
  MgmtClient& operator=(const MgmtClient&) = delete;

  // Registers (again) and fetches routing.
  Result<void> register_now();
  // One heartbeat (registers first if needed); re-registers when mgmtd says the node is unknown.
  Result<void> heartbeat_now();
  // Fetches routing unless the cached version is current; waits up to wait_ms for a change.
  Result<std::shared_ptr<const RoutingInfo>> refresh(uint32_t wait_ms = 0, rpc::CancelToken cancel = nullptr);

  // The heartbeat loop (registers first) and the routing long poll (a
  // change arrives within one round trip of mgmtd publishing it, not at the
  // next heartbeat: a storage server whose successor died keeps failing
  // writes until it has the chain without it). stop() is idempotent and prompt.
  void start();
  void stop();

  // Latest routing snapshot; null before the first fetch.
  std::shared_ptr<const RoutingInfo> routing() const;
  NodeId node_id() const;
  std::vector<TargetId> target_ids() const;  // in the order of options.registration.targets
  const LeaseKeeper& lease() const { return lease_; }
  bool fenced() const { return fenced_.load(); }
  // Why mgmtd fenced this client ("" while not fenced).
  std::string fence_reason() const;
  // Called once, on the thread that saw the refusal, when this client gets
  // fenced (not if it already was when set). Set before start().
  void set_fence_listener(std::function<void(const Status&)> listener);
  uint64_t heartbeats_ok() const { return heartbeats_ok_.load(); }
  uint64_t registrations() const { return registrations_.load(); }
  // The highest routing version installed (or recorded in state_dirs).
  RoutingVersion installed_routing_version() const;
  // Meta nodes: what the last registration mgmtd accepted said of the store
  // (RegisterReply: checked, the mark mgmtd had recorded before it, and how
  // long an accepted store change waits before serving).
  struct MetaStoreCheck {
    bool checked = false;
    uint64_t recorded_mark = 0;
    Duration serve_after{};
  };
  MetaStoreCheck meta_store_check() const;

  // Called before each heartbeat, on the heartbeat thread.
  void set_usage_source(UsageSource source);
  // Called with every newly installed routing snapshot, on the thread that fetched it
  // (e.g. to feed a storage server's RoutingProvider). Set before start().
  void set_routing_listener(RoutingListener listener);
  // Sent with the next heartbeat (again after a failed one). `version`: the
  // chain version the resync ran at (mgmtd ignores the report unless the chain
  // is still at it).
  void report_sync_done(ChainId chain, TargetId target, ChainVersion version);

 private:
  void run();
  void poll_routing();
  Duration interval() const;
  // Returns true if `routing` replaced the cached snapshot.
  bool install(std::shared_ptr<const RoutingInfo> routing, bool force);
  Result<void> on_heartbeat_error(const Status& s, std::vector<SyncDoneReport> unsent);
  // Raises installed_max_ and records it in options_.state_dirs.
  void note_installed(RoutingVersion version);
  // Logs a refusal by an mgmtd that is behind (at most every 10 s).
  void log_refusal(const Status& s);
  // Fences this client for good: revokes the lease, records and logs `why`,
  // tells the listener (the first time only).
  void fence(const Status& why);

  MgmtRpc& rpc_;
  const MgmtClientOptions options_;
  LeaseKeeper lease_;

  mutable std::mutex mu_;
  NodeId node_id_ = kInvalidNode;        // GUARDED_BY(mu_): kInvalidNode until (re-)registered
  NodeId last_node_id_ = kInvalidNode;   // GUARDED_BY(mu_): of the last registration
  std::vector<TargetId> target_ids_;     // GUARDED_BY(mu_)
  Duration granted_{};                   // GUARDED_BY(mu_)
  bool accept_any_version_ = false;      // GUARDED_BY(mu_): set by re-registration
  // GUARDED_BY(mu_): registration.accept_store_change until a registration succeeded
  bool accept_store_change_ = false;
  MetaStoreCheck meta_store_check_;      // GUARDED_BY(mu_)
  std::vector<SyncDoneReport> sync_done_;  // GUARDED_BY(mu_)
  UsageSource usage_;                    // GUARDED_BY(mu_)
  RoutingListener listener_;             // GUARDED_BY(mu_)
  std::shared_ptr<const RoutingInfo> routing_;  // GUARDED_BY(mu_)
  RoutingVersion installed_max_ = 0;     // GUARDED_BY(mu_)
  // Held from a routing's install to the listener's return: hand-overs go in
  // version order, and a heartbeat waits for one in progress before it
  // takes a version as had (routing first, lease second).
  std::mutex deliver_mu_;
  RoutingVersion delivered_ = 0;         // GUARDED_BY(deliver_mu_): the listener's version (0: none yet)
  std::mutex record_mu_;                 // serializes writes of the record
  RoutingVersion recorded_ = 0;          // GUARDED_BY(record_mu_)
  std::atomic<int64_t> refusal_logged_ns_{0};

  std::atomic<bool> fenced_{false};
  std::string fence_reason_;                           // GUARDED_BY(mu_)
  std::function<void(const Status&)> fence_listener_;  // GUARDED_BY(mu_)
  std::atomic<uint64_t> heartbeats_ok_{0};
  std::atomic<uint64_t> registrations_{0};

  std::mutex loop_mu_;
  std::condition_variable loop_cv_;
  bool stopping_ = false;  // GUARDED_BY(loop_mu_)
  std::shared_ptr<rpc::CancelSource> poll_cancel_;  // GUARDED_BY(loop_mu_): the long poll under way
  std::thread loop_;
  std::thread poll_;
};

}  // namespace weft::mgmt
