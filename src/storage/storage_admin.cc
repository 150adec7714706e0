// Admin methods of the storage service: routing replacement, target status,
// and the SyncDone notification a syncing target receives.
#include "common/logging.h"
#include "proto/storage.pb.h"
#include "storage/storage_service.h"

namespace weft::storage {

Result<pb::SetRoutingReply> StorageService::set_routing(const pb::SetRoutingRequest& req) {
  auto* settable = dynamic_cast<StaticRoutingProvider*>(routing_.get());
  if (!settable) return error(Code::kNotSupported, "{} takes its routing from mgmtd", options_.name);
  WEFT_TRY(mgmt::RoutingInfo info, routing_from_proto(req.routing()));
  pb::SetRoutingReply reply;
  reply.set_version(settable->set(std::move(info)));
  WEFT_LOG_INFO("{}: routing version {} in force", options_.name, reply.version());
  return reply;
}

Result<pb::TargetStatusReply> StorageService::target_status(const pb::TargetStatusRequest& req) {
  pb::TargetStatusReply reply;
  reply.set_routing_version(routing_->version());
  for (auto& [id, t] : targets_) {
    if (req.target_id() != 0 && req.target_id() != id) continue;
    auto* out = reply.add_targets();
    out->set_target_id(id);
    out->set_used_bytes(t->engine().used_bytes());
    out->set_capacity_bytes(t->engine().capacity_bytes());
    out->set_free_bytes(t->engine().free_bytes());
    for (auto& [chain, version] : t->synced()) {
      auto* s = out->add_synced();
      s->set_chain_id(chain);
      s->set_synced_chain_version(version);
    }
    out->set_resyncs_running(resyncs_running_.load());
  }
  if (req.target_id() != 0 && reply.targets_size() == 0)
    return error(Code::kNotFound, "no target {} on {}", req.target_id(), options_.name);
  return reply;
}

Result<pb::SyncDoneReply> StorageService::sync_done(const pb::SyncDoneRequest& req) {
  StorageTarget* t = target(req.target_id());
  if (!t) return error(Code::kNotFound, "no target {} on {}", req.target_id(), options_.name);
  // A target that can take no update was not brought up to date.
  WEFT_RETURN_IF_ERROR(check_in_service(*t));
  // A SyncDone of a resync at an older chain version (delayed on the way) says
  // nothing about the round running now. (A newer one than this server's
  // routing knows is passed on: mgmtd checks it against the chain itself.)
  // A chain this server's routing does not know is refused (the sender's
  // resync tries again, by when the routing here has caught up): recorded,
  // such SyncDones would pile up without bound (any chain id may be sent).
  RoutingSnapshot routing = routing_->current();
  auto chain = routing->chain(req.chain_id());
  if (!chain)
    return error(Code::kStaleRouting, "sync done of target {} in chain {}: no such chain in routing version {}",
                 req.target_id(), req.chain_id(), routing->version);
  if ((*chain)->version > req.chain_version())
    return error(Code::kStaleRouting, "sync done of target {} in chain {} at version {}: the chain is at version {}",
                 req.target_id(), req.chain_id(), req.chain_version(), (*chain)->version);
  t->mark_synced(req.chain_id(), req.chain_version());
  WEFT_LOG_INFO("{}: target {} is up to date in chain {} version {} ({} chunks copied, {} removed)", options_.name,
                req.target_id(), req.chain_id(), req.chain_version(), req.chunks_copied(), req.chunks_removed());
  SyncListener listener;
  {
    std::lock_guard lock(mu_);
    listener = sync_listener_;
  }
  if (listener) listener(req.target_id(), req.chain_id(), req.chain_version());
  return pb::SyncDoneReply{};
}

}  // namespace weft::storage
