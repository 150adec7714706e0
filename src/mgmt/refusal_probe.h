// mgmt/refusal_probe.h
// Early failure detection. A storage server killed outright (SIGKILL, OOM,
// crash) leaves its host answering connection attempts with a reset: nothing
// listens on its port. Waiting for its lease (lease + grace, seconds) to run
// out stalls every write to its chains that long, although the first peer to
// reconnect knows at once. So peers (storage servers forwarding down a chain,
// clients) report refused connections to mgmtd (mgmt/refusal_reporter.h),
// and mgmtd checks the report itself: it connects to the node's registered
// address; refused on every attempt, the node is declared dead now
// (ClusterState::declare_refusing). Anything else (the connection is taken,
// the attempt times out, the network is unreachable: a partition, a paused
// process whose kernel still accepts) proves nothing and leaves the node to
// its lease. A report never declares anything by itself: mgmtd's own probe
// does, so a confused or hostile reporter cannot take a live server out.
// RefusalProbes keeps one probe at a time in all (they hold a thread of
// mgmtd's blocking pool, which heartbeats need) and at most one per node per
// `quiet` after it (a dead node's chains are reported by many peers at once).
// Only numeric addresses are probed (a name's resolution has no time bound).
// Threading: RefusalProbes is thread-safe; probe_refused blocks (run it on a
// blocking pool thread, never an I/O thread).
#pragma once

#include <chrono>
#include <map>
#include <mutex>

#include "common/clock.h"
#include "mgmt/routing.h"
#include "rpc/endpoint.h"

namespace weft::mgmt {

struct RefusalProbeOptions {
  bool enabled = true;  // [mgmtd] probe_refusals
  std::chrono::milliseconds connect_timeout{500};
  int attempts = 2;  // all refused: nothing listens (one reset could be a port being re-bound)
  std::chrono::milliseconds between{50};
  Duration quiet = std::chrono::seconds(1);  // after a probe of a node, reports of it are not probed again
};

// True when every one of options.attempts connection attempts to `ep` was
// refused (ECONNREFUSED); false as soon as one is taken, times out or fails
// otherwise.
bool probe_refused(const rpc::Endpoint& ep, const RefusalProbeOptions& options);

class RefusalProbes {
 public:
  explicit RefusalProbes(Duration quiet) : quiet_(quiet) {}
  // True when a probe of `node` may start at `now`: no probe under way (of
  // any node) and none of it ended within `quiet`. Pair with end().
  bool begin(NodeId node, TimePoint now);
  void end(NodeId node, TimePoint now);
  // A removed node: nothing of it is kept.
  void forget(NodeId node);
  // Nodes whose last probe ended within `quiet` (as of the last end()).
  size_t tracked() const;

 private:
  const Duration quiet_;
  mutable std::mutex mu_;
  bool running_ = false;  // GUARDED_BY(mu_)
  // When each node's last probe ended; only those within `quiet` matter, and
  // end() forgets the others (nodes come and go: the map must not grow with them).
  std::map<NodeId, TimePoint> ended_;  // GUARDED_BY(mu_)
};

}  // namespace weft::mgmt
