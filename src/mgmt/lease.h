// mgmt/lease.h
// Leases, and the timing rule that prevents split brain.
//
// A heartbeat is a lease request. Two clocks are involved and neither trusts
// the other's absolute time; only durations are compared.
//   Storage side: record s = own clock when SENDING heartbeat h. When the reply
//     to h arrives granting lease duration L, writes may be served until s + L
//     (own clock). Later grants only extend it; replies to older heartbeats
//     never move it backwards. No reply: the lease simply runs out.
//   mgmtd side: record r = own clock when RECEIVING a heartbeat. The node is
//     declared dead (its targets leave their chains) only once
//     now >= r_last + L + grace, r_last being the last heartbeat RECEIVED.
// Why this is safe: h was sent before it was received (s <= r in real time), so
// the storage server stops at s + L <= r + L < r + L + grace. A reply delayed
// or lost only shortens the storage side; a later heartbeat received by mgmtd
// only moves mgmtd's deadline later. `grace` absorbs clock-rate drift between
// the two machines (grace >= L * max drift, e.g. 1 s for L = 10 s is ample)
// and the scheduling delay of mgmtd's tick.
// After a mgmtd restart every known node gets a fresh r = restart time: mgmtd
// cannot know what it granted while down, and a full lease period covers it:
// the longer of the configured L and the longest L granted before the restart
// (persisted: lease_ms may have been lowered meanwhile; mgmt/cluster_state.h).
// A storage server that regains its lease after being declared dead must
// refetch routing (the reply carries the routing version) before serving
// writes again: its targets are then syncing, not serving.
//
// LeaseKeeper is the server side (storage and meta servers). Thread-safe (one
// mutex; short calls). can_serve_writes(), remaining() and valid_until() take
// no lock: a meta server asks on every request (valid_until_ns_ is written
// under the mutex).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>

#include "common/clock.h"

namespace weft::mgmt {

struct LeaseConfig {
  Duration lease = std::chrono::seconds(10);  // L: granted per heartbeat
  Duration grace = std::chrono::seconds(5);   // mgmtd waits L + grace after the last heartbeat
};

// Identifies one heartbeat: when it was sent, on the sender's clock.
struct HeartbeatTicket {
  uint64_t sequence = 0;
  TimePoint sent_at{};
};

class LeaseKeeper {
 public:
  explicit LeaseKeeper(const Clock& clock) : clock_(clock) {}

  // Call immediately BEFORE sending a heartbeat; pass the ticket to on_granted.
  HeartbeatTicket begin_heartbeat();
  // The reply to `ticket` granted `lease`: valid until ticket.sent_at + lease.
  void on_granted(const HeartbeatTicket& ticket, Duration lease);
  // The node must stop serving (re-registration, mgmtd rejected it).
  void revoke();

  bool can_serve_writes() const;
  // Times the lease ran out or was revoked after a grant (counted when it is
  // granted again after running out, and at each revoke): what a caller
  // polling can_serve_writes() between two such moments would miss.
  uint64_t gaps() const;
  // Time left on the lease, zero when expired.
  Duration remaining() const;
  TimePoint valid_until() const;

 private:
  const Clock& clock_;
  mutable std::mutex mu_;
  uint64_t next_sequence_ = 1;
  uint64_t revoked_before_ = 0;  // tickets with a lower sequence cannot grant
  // Nanoseconds since the clock's epoch (0: never granted); written under mu_.
  std::atomic<int64_t> valid_until_ns_{0};
  uint64_t gaps_ = 0;
};

}  // namespace weft::mgmt
