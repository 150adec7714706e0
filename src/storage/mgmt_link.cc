#include "storage/mgmt_link.h"

#include <thread>

#include "common/logging.h"
#include "mgmt/mgmt_client.h"
#include "mgmt/mgmt_rpc.h"
#include "mgmt/refusal_reporter.h"
#include "rpc/client.h"
#include "storage/routing_provider.h"
#include "storage/storage_service.h"

namespace weft::storage {

struct MgmtLink::Impl {
  Impl(rpc::IoPool& io, const MgmtLinkOptions& o, uint64_t incarnation)
      : rpc_client(io, o.rpc), rpc(io, rpc_client, o.mgmtd), client(rpc, registration(o, incarnation)) {}

  static mgmt::MgmtClientOptions registration(const MgmtLinkOptions& o, uint64_t incarnation) {
    mgmt::MgmtClientOptions mo;
    mo.registration.kind = mgmt::NodeKind::kStorage;
    mo.registration.address = o.address;
    mo.registration.incarnation = incarnation;
    for (const auto& t : o.targets) {
      mo.registration.targets.push_back({.name = t.name, .capacity_bytes = t.capacity_bytes, .used_bytes = 0,
                                         .data_id = t.data_id});
      mo.state_dirs.push_back(t.name);  // next to mgmt-incarnation
    }
    return mo;
  }

  rpc::Client rpc_client;
  mgmt::MgmtRpc rpc;
  mgmt::MgmtClient client;
  // After rpc: stopped (destroyed) before it.
  std::shared_ptr<mgmt::RefusalReporter> refusals = std::make_shared<mgmt::RefusalReporter>();
};

MgmtLink::MgmtLink(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
MgmtLink::~MgmtLink() { stop(); }

Result<std::unique_ptr<MgmtLink>> MgmtLink::connect(rpc::IoPool& io, MgmtLinkOptions options) {
  WEFT_RETURN_IF_ERROR(mgmt::check_address(options.address));
  // Recorded in every target directory: above the last one even after the
  // wall clock stepped back (mgmt/mgmt_client.h).
  std::vector<std::string> dirs;
  for (const auto& t : options.targets) dirs.push_back(t.name);
  auto incarnation = mgmt::next_incarnation(dirs);
  if (!incarnation) return error(incarnation.error().with_context("storage server " + options.address));
  auto impl = std::make_unique<Impl>(io, options, *incarnation);
  auto deadline = std::chrono::steady_clock::now() + options.register_timeout;
  for (int attempt = 0;; ++attempt) {
    auto r = impl->client.register_now();
    if (r) break;
    // Only an unreachable mgmtd, or one behind the cluster (its operator
    // restores its state or accepts it), is worth waiting for; other refusals are final.
    bool transient = (mgmt::MgmtRpc::is_transport_error(r.error().code()) ||
                      r.error().code() == Code::kVersionMismatch) &&
                     !impl->client.fenced();
    if (!transient || std::chrono::steady_clock::now() >= deadline)
      return error(r.error().with_context("storage server " + options.address + ": joining the cluster"));
    if (attempt == 0) WEFT_LOG_WARN("storage {}: mgmtd not reachable or refusing ({}); retrying", options.address, r.error());
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  impl->refusals->start(impl->rpc);
  return std::unique_ptr<MgmtLink>(new MgmtLink(std::move(impl)));
}

std::shared_ptr<rpc::RefusalListener> MgmtLink::refusals() const { return impl_->refusals; }

std::vector<mgmt::TargetId> MgmtLink::target_ids() const { return impl_->client.target_ids(); }

void MgmtLink::attach(StorageService& service, StaticRoutingProvider& routing) {
  auto& client = impl_->client;
  client.set_routing_listener([&routing](std::shared_ptr<const mgmt::RoutingInfo> info) { routing.set(*info); });
  if (auto current = client.routing()) routing.set(*current);
  std::vector<mgmt::TargetId> ids = client.target_ids();
  client.set_usage_source([&service, ids] {
    std::vector<mgmt::TargetUsage> usage;
    for (mgmt::TargetId id : ids) {
      StorageTarget* t = service.target(id);
      if (t == nullptr) continue;
      // A target whose engine refuses every update is reported failed:
      // mgmtd takes it out of its chains until this server restarts.
      const ChunkEngine& e = t->engine();
      usage.push_back({id, e.used_bytes(), e.capacity_bytes(), t->out_of_service().has_value(), e.fs_id(),
                       e.fs_free_bytes()});
    }
    return usage;
  });
  service.set_sync_listener([&client](mgmt::TargetId target, mgmt::ChainId chain, mgmt::ChainVersion version) {
    client.report_sync_done(chain, target, version);
  });
  client.start();
}

void MgmtLink::stop() {
  if (!impl_) return;
  impl_->refusals->stop();
  impl_->client.stop();
}

bool MgmtLink::can_serve_writes() const { return impl_->client.lease().can_serve_writes() && !impl_->client.fenced(); }

}  // namespace weft::storage
