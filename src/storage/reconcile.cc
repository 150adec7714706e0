// Reconciliation of chunks a failed update may have left different on the
// members of their chain (see storage_service.h, "Reconcile").
//
// A head that aborts an update after forwarding it cannot know whether the
// members after it committed: a Forward's reply can be lost with the
// connection, a member can commit and then lose its own successor's answer
// (a tail ahead of a middle that aborted), a commit can fail here after the
// successors committed. Such a chunk is noted in doubt. Once every member has
// decided (the forward timeout after the failure: no member commits past its
// predecessor's deadline, ChainUpdate::commit_by) the head compares its
// committed record with every other member's. If one differs, it takes the
// chunk's lock and, its own record unchanged since the failure, sends its
// own content through the chain as an UPDATE_REPLACE
// (or a removal, when it has no chunk): the failed update disappears
// everywhere, as the client was told. An update of the chunk that went
// through meanwhile converged the chain already (a member that differed
// answered kVersionMismatch and received the whole chunk): nothing to do.
//
// g++ 12 reports a false -Wmismatched-new-delete on asio's awaitable frame
// operator delete for some coroutine bodies.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

#include <algorithm>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/steady_timer.hpp>

#include "common/logging.h"
#include "proto/storage.pb.h"
#include "storage/engine_jobs.h"
#include "storage/service_methods.h"
#include "storage/storage_service.h"

namespace weft::storage {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kAttemptsMax = 20;                   // then the chunk is given up (and logged)
constexpr auto kRetryAfter = std::chrono::seconds(1);
constexpr auto kPollMax = std::chrono::milliseconds(200);  // how soon the worker notices stop()

constexpr uint32_t kAskTimeoutMs = 2000;  // for a member's record (GetChunkMeta)

// A member's committed record of the chunk, or nullopt when it has none.
struct Record {
  uint64_t version = 0;
  uint32_t length = 0;
  uint32_t crc = 0;
  bool operator==(const Record&) const = default;
};

std::optional<Record> record_of(const Result<ChunkInfo>& info) {
  if (!info) return std::nullopt;
  return Record{info->version, info->length, info->chunk_crc};
}

// Whether a member after p's (the head) has another record of `id` than
// `mine`. Asked without the chunk's lock: a member that does not answer
// must not hold up the chunk's writes.
Task<Result<bool>> members_differ(rpc::Client& client, const Placement& p, const ChunkId& id,
                                  const std::optional<Record>& mine, uint32_t timeout_ms) {
  for (size_t i = p.index + 1; i < p.route.write_path.size(); ++i) {
    const mgmt::TargetId member = p.route.write_path[i];
    WEFT_CO_TRY(std::string address, p.routing->target_address(member));
    WEFT_CO_TRY(rpc::Endpoint ep, rpc::Endpoint::parse(address));
    pb::GetChunkMetaRequest req;
    req.set_target_id(member);
    req.mutable_chunk()->set_inode(id.inode);
    req.mutable_chunk()->set_index(id.index);
    rpc::CallOptions o;
    o.timeout_ms = timeout_ms;
    auto r = co_await client.call<pb::GetChunkMetaReply>(ep, methods::kGetChunkMeta, req, std::move(o));
    std::optional<Record> theirs;
    if (r) {
      const auto& m = r->meta();
      theirs = Record{m.version(), m.length(), m.chunk_crc32c()};
    } else if (r.error().code() != Code::kNotFound) {
      co_return error(r.error().with_context(fmt::format("record of chunk {} on target {}", id, member)));
    }
    if (theirs != mine) co_return true;
  }
  co_return false;
}

}  // namespace

void StorageService::count_reconcile(mgmt::TargetId t, std::string_view result) {
  registry_
      .counter("weft_storage_reconciles_total",
               "Chunks a failed update may have left different on their replicas, by what reconciling found",
               {{"target", std::to_string(t)}, {"result", std::string(result)}})
      .inc();
}

StorageService::Noted StorageService::note_in_doubt(const Placement& p, const ChunkId& id, uint64_t committed_version,
                                                   std::string_view why, NoteOrigin origin) {
  const ReconcileKey key{p.route.chain_id, id};
  {
    std::lock_guard lock(reconciles_.mu);
    if (stopping_) return Noted::kStopping;
    const bool check = origin == NoteOrigin::kReplicaCheck;
    if (check) {
      // A waiting entry of this head at a version no older than the check's
      // listing stands (the check's would be older: reconciling it would
      // find the head changed and count it converged); else the note replaces it.
      auto waiting = reconciles_.todo.find(key);
      if (waiting != reconciles_.todo.end() && waiting->second.target == p.target->id() &&
          waiting->second.committed_version >= committed_version)
        return Noted::kNoted;
    }
    const size_t max = std::max<size_t>(options_.reconcile_queue_max, 1);
    // The check's share: all but a quarter (at least one slot) of the queue.
    const size_t room = !check ? max : max > 1 ? max - std::max<size_t>(max / 4, 1) : 1;
    if (reconciles_.todo.size() >= room && !reconciles_.todo.contains(key)) {
      if (check) return Noted::kFull;
      count_reconcile(p.target->id(), "dropped");
      if (auto held = reconciles_.log.admit())
        WEFT_LOG_ERROR("{}: chunk {} of chain {} may differ on its replicas ({}), and {} chunks wait to be "
                       "reconciled already: it is not (the next replica check finds it again){}",
                       options_.name, id, p.route.chain_id, why, options_.reconcile_queue_max,
                       LogThrottle::held_back(*held));
      return Noted::kFull;
    }
    // Every member has decided once the forward timeout has passed since now
    // (the Forward went out before): none commits past its sender's deadline.
    reconciles_.schedule(key, InDoubt{p.target->id(), committed_version,
                                      Clock::now() + std::chrono::milliseconds(options_.forward_timeout_ms), 0});
    if (reconciles_.worker) return Noted::kNoted;
    reconciles_.worker = true;
  }
  asio::co_spawn(io_.next(), reconcile_worker(), asio::detached);
  return Noted::kNoted;
}

size_t StorageService::reconciles_waiting() {
  std::lock_guard lock(reconciles_.mu);
  return reconciles_.todo.size();
}

// Takes the chunks whose time has come, one at a time, until none is left or stop().
Task<void> StorageService::reconcile_worker() {
  for (;;) {
    ReconcileKey key;
    InDoubt d;
    Clock::time_point wake;
    {
      std::lock_guard lock(reconciles_.mu);
      if (reconciles_.todo.empty() || stopping_) {
        reconciles_.todo.clear();
        reconciles_.due.clear();
        reconciles_.worker = false;
        co_return;
      }
      const auto [not_before, first] = *reconciles_.due.begin();
      const auto now = Clock::now();
      if (not_before <= now) {
        key = first;
        d = reconciles_.todo.at(first);
        reconciles_.todo.erase(first);
        reconciles_.due.erase(reconciles_.due.begin());
      } else {
        wake = std::min(not_before, now + kPollMax);
      }
    }
    if (d.target == 0) {
      asio::steady_timer timer(co_await asio::this_coro::executor, wake);
      co_await timer.async_wait(use_nothrow);
      continue;
    }
    ReconcileOutcome outcome = co_await reconcile_one(key.first, key.second, d);
    if (outcome != ReconcileOutcome::kRetry) continue;
    std::lock_guard lock(reconciles_.mu);
    if (++d.attempts >= kAttemptsMax) {
      count_reconcile(d.target, "given_up");
      if (auto held = reconciles_.log.admit())
        WEFT_LOG_ERROR("{}: chunk {} of chain {} may still differ on its replicas after a failed update: "
                       "reconciling failed {} times; the next write of the chunk converges them{}",
                       options_.name, key.second, key.first, kAttemptsMax, LogThrottle::held_back(*held));
      continue;
    }
    d.not_before = Clock::now() + kRetryAfter;
    if (!reconciles_.todo.contains(key)) reconciles_.schedule(key, d);  // noted again meanwhile: that entry is as good
  }
}

// At the head. The members are asked without the chunk's lock (one that
// does not answer must not hold up the chunk's writes); the rewrite is made
// under it, if the head's own record is still the one noted.
Task<StorageService::ReconcileOutcome> StorageService::reconcile_one(mgmt::ChainId chain, ChunkId id, InDoubt d) {
  if (!check_write_fence()) co_return ReconcileOutcome::kRetry;
  RoutingSnapshot routing = routing_->current();
  auto route = routing->chain(chain);
  if (!route) co_return ReconcileOutcome::kRetry;
  auto first = locate(chain, (*route)->version);
  if (!first) co_return ReconcileOutcome::kRetry;
  if (first->index != 0 || first->target->id() != d.target) {
    // The chain has another head now, which does not know of this chunk.
    count_reconcile(d.target, "not_head");
    WEFT_LOG_WARN("{}: chunk {} of chain {} may differ on its replicas after a failed update, but target {} is no "
                  "longer the chain's head to reconcile it; the next write of the chunk converges them",
                  options_.name, id, chain, d.target);
    co_return ReconcileOutcome::kDone;
  }
  ChunkEngine* engine = &first->target->engine();
  // The members' records first, without the chunk's lock.
  auto before = co_await pool_.run(StatJob{engine, id});
  if (!before && before.error().code() != Code::kNotFound) co_return ReconcileOutcome::kRetry;
  if ((before ? before->version : 0) != d.committed_version) {
    count_reconcile(d.target, "converged");  // an update went through since: the chain converged
    co_return ReconcileOutcome::kDone;
  }
  const uint32_t ask_ms = std::min(kAskTimeoutMs, options_.forward_timeout_ms);
  auto differ = co_await members_differ(client_, *first, id, record_of(before), ask_ms);
  if (!differ) {
    WEFT_LOG_DEBUG("{}: reconciling chunk {} of chain {}: {}; tried again", options_.name, id, chain, differ.error());
    co_return ReconcileOutcome::kRetry;
  }
  if (!*differ) {
    count_reconcile(d.target, "consistent");
    co_return ReconcileOutcome::kDone;
  }
  ChunkLocks::Guard guard = co_await first->target->locks().lock(id);
  if (!check_write_fence()) co_return ReconcileOutcome::kRetry;  // the lease and the routing may have
  auto p = locate(chain, (*route)->version);                     // changed while waiting
  if (!p || p->index != 0) co_return ReconcileOutcome::kRetry;
  auto info = co_await pool_.run(StatJob{engine, id});
  if (!info && info.error().code() != Code::kNotFound) co_return ReconcileOutcome::kRetry;
  if ((info ? info->version : 0) != d.committed_version) {
    count_reconcile(d.target, "converged");
    co_return ReconcileOutcome::kDone;
  }
  const std::optional<Record> mine = record_of(info);
  // This member's content, as the whole chunk, through the chain.
  ChainUpdate u;
  ReadResult content;
  // The head's records describe its content (or the removal that left it
  // without the chunk): it keeps them, and members keep the same ones.
  u.held = p->target->dedup().keys_of(id, kHeldKeysMax);
  u.own_content = true;
  if (mine) {
    auto read = co_await pool_.run(ReadCommittedJob{engine, id});
    if (!read) co_return ReconcileOutcome::kRetry;
    content = std::move(*read);
    u.kind = pb::UPDATE_REPLACE;
    u.data = content.data();
    u.length = static_cast<uint32_t>(u.data.size());
  } else {
    u.kind = pb::UPDATE_REMOVE;
    u.forget_dedup = true;
  }
  u.id = id;
  auto r = co_await replicate(*p, u, 0, nullptr);
  if (!r) {
    WEFT_LOG_WARN("{}: reconciling chunk {} of chain {}: {}; tried again", options_.name, id, chain, r.error());
    co_return ReconcileOutcome::kRetry;
  }
  count_reconcile(d.target, "rewritten");
  WEFT_LOG_INFO("{}: chunk {} of chain {} differed on its replicas after a failed update: its head's content was "
                "written through the chain again",
                options_.name, id, chain);
  co_return ReconcileOutcome::kDone;
}

}  // namespace weft::storage
