// storage/routing_provider.h
// Where a storage server gets its routing (chains, their versions and target
// states, target addresses). RoutingProvider is the interface the service
// reads; StaticRoutingProvider holds a snapshot set from the config file or
// the SetRouting admin RPC (and later by the mgmtd client).
// Threading: thread-safe; snapshots are immutable and shared.
// Invariant: the version in force never decreases.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "common/config.h"
#include "common/status.h"
#include "mgmt/routing.h"

namespace weft::proto::storage {
class Routing;
}

namespace weft::storage {

using RoutingSnapshot = std::shared_ptr<const mgmt::RoutingInfo>;

class RoutingProvider {
 public:
  virtual ~RoutingProvider() = default;
  virtual RoutingSnapshot current() const = 0;
  mgmt::RoutingVersion version() const { return current()->version; }
  // Called (on the setter's thread) after every change.
  virtual void on_change(std::function<void()> listener) = 0;
};

class StaticRoutingProvider final : public RoutingProvider {
 public:
  StaticRoutingProvider();
  RoutingSnapshot current() const override;
  void on_change(std::function<void()> listener) override;
  // Replaces the routing unless `info` is older than the current one; returns the version in force.
  mgmt::RoutingVersion set(mgmt::RoutingInfo info);

 private:
  mutable std::mutex mu_;
  RoutingSnapshot current_;                        // GUARDED_BY(mu_)
  std::vector<std::function<void()>> listeners_;  // GUARDED_BY(mu_)
};

// Wire form <-> RoutingInfo. Each distinct address becomes one node.
Result<mgmt::RoutingInfo> routing_from_proto(const proto::storage::Routing& p);
void routing_to_proto(const mgmt::RoutingInfo& info, proto::storage::Routing* out);

// The optional [routing] section of a storage config:
//   [routing]
//   version = 1
//   [[routing.targets]]   id = 101, address = "127.0.0.1:7001"
//   [[routing.chains]]    id = 1, version = 1, targets = ["101", "201", "301:syncing"]
Result<mgmt::RoutingInfo> routing_from_config(const Config& routing);

}  // namespace weft::storage
