// mgmt/client_table.h
// Leases of clients (mounts, file tools, library and Python users).
// Unlike servers, clients are neither persisted nor part of the routing info:
// a client coming or going must not bump the routing version that every
// server and client long-polls on.
// A client names itself with a random 64-bit id — the id it also uses as its
// request-id namespace with meta (write sessions record it) and storage — so a
// heartbeat is its registration too and is idempotent: a restarted mgmtd that
// lost the table learns the client again at its next heartbeat.
// A client whose last heartbeat is older than lease + grace expires and
// leaves the table. Meta closes the write sessions of clients that are not
// in the table; because a restarted mgmtd starts empty, list() says whether
// the table has existed for a full lease + grace (complete): before that the
// absence of a client proves nothing. The lease there is the longer of the
// configured one and `held_lease`, the longest granted before the restart
// (clients renew at a third of the lease they were granted last).
// Threading: thread-safe (one mutex, short calls). Bounded by kClientsMax.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/metrics.h"
#include "common/status.h"
#include "mgmt/lease.h"

namespace weft::mgmt {

inline constexpr size_t kClientsMax = 100'000;
inline constexpr size_t kClientLabelBytesMax = 256;

struct ClientInfo {
  uint64_t id = 0;
  std::string label;  // "host:pid:program", for people
  TimePoint first_seen{};
  TimePoint last_heartbeat{};
  TimePoint lease_expiry{};
};

// One page of the table.
struct ClientList {
  std::vector<ClientInfo> clients;  // ordered by id
  bool complete = false;            // the table is at least lease + grace old
  bool more = false;                // clients with greater ids than the last here follow
};

class ClientTable {
 public:
  ClientTable(LeaseConfig lease, const Clock& clock, metrics::Registry& registry = metrics::Registry::global(),
              Duration held_lease = Duration::zero());

  // Registers or renews client `id`; returns the lease granted (from when
  // the client sent the heartbeat, as for servers: mgmt/lease.h).
  Result<Duration> heartbeat(uint64_t id, std::string_view label);
  // Drops clients whose last heartbeat is older than lease + grace; returns
  // how many went. Call about once per `period`: a call more than two periods
  // after the previous one (mgmtd stalled: its pool blocked, the process
  // paused) first excuses the gap less one period from every client's
  // heartbeat age, as ClusterState::tick does for servers (heartbeats that
  // queued behind the stall must not make live clients lose their sessions).
  // period 0: nothing is excused.
  size_t expire(Duration period = Duration::zero());
  // Clients with an id greater than `after`, in id order, at most `limit`.
  ClientList list(uint64_t after = 0, size_t limit = SIZE_MAX) const;
  size_t size() const;
  const LeaseConfig& lease() const { return lease_; }

 private:
  const LeaseConfig lease_;
  const Clock& clock_;
  const TimePoint complete_at_;  // started + max(lease, held_lease) + grace
  metrics::Gauge& live_;
  metrics::Counter& expired_;
  metrics::Counter& rejected_;
  mutable std::mutex mu_;
  std::map<uint64_t, ClientInfo> clients_;  // GUARDED_BY(mu_); ordered: list() pages by id
  TimePoint last_expire_;                   // GUARDED_BY(mu_)
};

}  // namespace weft::mgmt
