// Repair of corrupt chunks (protocol in storage_service.h):
//   at the corrupt member (repair_worker, one per server at a time):
//     1. verify the chunk again (a later write may have replaced it);
//     2. ask the head of its chain (RepairChunk) and count the outcome;
//   at the head (repair_chunk), under the chunk's lock:
//     3. take a verified copy of the committed version: the head's own, else a
//        readable successor's with the head's version, length and CRC;
//     4. repair the head's copy if it was the corrupt one (or found corrupt);
//     5. send the copy to the corrupt member (Forward with `repair`), which
//        applies it only over that very version, length and CRC.
// Nothing is ever replaced by other content or an older version: without a
// verified copy the chunk stays as it is (reads keep answering kCorruption).
// g++ 12 reports a false -Wmismatched-new-delete on asio's awaitable frame
// operator delete for some coroutine bodies.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

#include <algorithm>

#include <fmt/ranges.h>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/steady_timer.hpp>

#include "common/crc32c.h"
#include "common/fault.h"
#include "common/logging.h"
#include "proto/storage.pb.h"
#include "storage/engine_jobs.h"
#include "storage/service_methods.h"
#include "storage/storage_service.h"

namespace weft::storage {
namespace {

struct VerifyJob {
  ChunkEngine* engine;
  ChunkId id;
  Result<void> operator()() const { return engine->verify(id); }
};

bool same_record(const ChunkInfo& want, uint64_t version, uint32_t length, std::span<const std::byte> data) {
  return version == want.version && length == want.length && data.size() == want.length &&
         crc32c(data) == want.chunk_crc;
}

}  // namespace

// A verified copy of a chunk's committed version, and whose it is.
// `head_corrupt`: the head's own copy failed its checksums (or was the one to
// repair), so the head needs the copy too.
struct StorageService::RepairCopy {
  ChunkInfo want;
  mgmt::TargetId source = 0;
  bool head_corrupt = false;
  ReadResult local;       // from the head's engine, or
  rpc::RawResponse remote;  // from a successor's BatchRead
  std::span<const std::byte> data;
};

void StorageService::count_repair(mgmt::TargetId t, std::string_view result) {
  registry_
      .counter("weft_storage_chunk_repairs_total", "Repairs of corrupt chunks from another replica, by outcome",
               {{"target", std::to_string(t)}, {"result", std::string(result)}})
      .inc();
}

void StorageService::request_repair(mgmt::TargetId t, const ChunkId& id) {
  const RepairKey key{t, id};
  const auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard lock(repairs_.mu);
    // Under the lock: the destructor waits for a worker it sees, and sees one started here.
    if (stopping_ || repairs_.queued.contains(key)) return;
    auto failed = repairs_.not_before.find(key);
    if (failed != repairs_.not_before.end()) {
      if (now < failed->second) return;
      repairs_.not_before.erase(failed);
    }
    if (repairs_.todo.size() >= options_.repair_queue_max) {
      count_repair(t, "dropped");
      return;
    }
    repairs_.queued.insert(key);
    repairs_.todo.push_back(key);
    if (repairs_.worker) return;
    repairs_.worker = true;
  }
  asio::co_spawn(io_.next(), repair_worker(), asio::detached);
}

size_t StorageService::repairs_queued() {
  std::lock_guard lock(repairs_.mu);
  return repairs_.queued.size();
}

// Takes repairs off the queue one at a time until it is empty or stop().
Task<void> StorageService::repair_worker() {
  for (;;) {
    RepairKey key;
    {
      std::lock_guard lock(repairs_.mu);
      if (repairs_.todo.empty() || stopping_) {
        repairs_.todo.clear();
        repairs_.queued.clear();
        repairs_.worker = false;
        co_return;
      }
      key = repairs_.todo.front();
      repairs_.todo.pop_front();
    }
    RepairOutcome outcome = co_await repair_one(key.first, key.second);
    std::lock_guard lock(repairs_.mu);
    repairs_.queued.erase(key);
    if (outcome == RepairOutcome::kNoGoodCopy || outcome == RepairOutcome::kFailed) {
      // Bounded: expired entries go first, then the oldest keys.
      const auto now = std::chrono::steady_clock::now();
      if (repairs_.not_before.size() >= options_.repair_queue_max)
        std::erase_if(repairs_.not_before, [&](const auto& e) { return e.second <= now; });
      if (repairs_.not_before.size() >= options_.repair_queue_max) repairs_.not_before.erase(repairs_.not_before.begin());
      repairs_.not_before[key] = now + options_.repair_retry_after;
    }
  }
}

// Steps 1-2 for target t's chunk `id`.
Task<StorageService::RepairOutcome> StorageService::repair_one(mgmt::TargetId t, ChunkId id) {
  StorageTarget* target = this->target(t);
  if (!target) co_return RepairOutcome::kNotNeeded;
  Scrubber* scrubber = this->scrubber(t);
  VerifyJob verify{&target->engine(), id};
  auto verified = co_await pool_.run(verify);
  if (verified || verified.error().code() == Code::kNotFound) {  // rewritten or removed meanwhile
    if (scrubber) scrubber->forget(id);
    co_return RepairOutcome::kNotNeeded;
  }
  Result<pb::RepairChunkReply> r = error(verified.error());  // an I/O error is not for a repair to mend
  if (verified.error().code() == Code::kCorruption) r = co_await ask_head_to_repair(*target, id);
  if (r) {
    if (scrubber) scrubber->forget(id);
    count_repair(t, "repaired");
    WEFT_LOG_INFO("{}: chunk {} of target {} repaired: version {} copied from target {}", options_.name, id, t,
                  r->version(), r->source_target());
    co_return RepairOutcome::kRepaired;
  }
  bool no_copy = r.error().code() == Code::kCorruption;
  count_repair(t, no_copy ? "no_good_copy" : "failed");
  if (auto held = repairs_.failure_log.admit())
    WEFT_LOG_ERROR("{}: chunk {} of target {} is corrupt and was not repaired ({}): {}; it is kept as it is (reads "
                   "of it there answer corruption){}",
                   options_.name, id, t, no_copy ? "no replica holds a verified copy" : "will be tried again",
                   r.error(), LogThrottle::held_back(*held));
  co_return no_copy ? RepairOutcome::kNoGoodCopy : RepairOutcome::kFailed;
}

// Step 2: RepairChunk to the head of the chunk's chain (a local call when the
// head is on this server).
Task<Result<pb::RepairChunkReply>> StorageService::ask_head_to_repair(StorageTarget& t, const ChunkId& id) {
  StatJob stat{&t.engine(), id};
  auto info = co_await pool_.run(stat);
  if (!info) co_return error(info.error());
  if (info->chain_id == kChainUnknown)
    co_return error(Code::kNotSupported, "chunk {} records no chain: its replicas are unknown", id);
  RoutingSnapshot routing = routing_->current();
  auto chain = routing->chain(info->chain_id);
  if (!chain) co_return error(Code::kStaleRouting, "chain {} is unknown at routing version {}", info->chain_id,
                              routing->version);
  WEFT_CO_TRY(mgmt::ChainRoute route, mgmt::route_chain(**chain));
  if (std::find(route.write_path.begin(), route.write_path.end(), t.id()) == route.write_path.end())
    co_return error(Code::kStaleRouting, "target {} is not on the write path of chain {}", t.id(), info->chain_id);
  pb::RepairChunkRequest req;
  req.set_chain_id(info->chain_id);
  req.set_chain_version(route.version);
  req.mutable_chunk()->set_inode(id.inode);
  req.mutable_chunk()->set_index(id.index);
  req.set_target_id(t.id());
  if (target(route.head())) co_return co_await repair_chunk(req);
  WEFT_CO_TRY(std::string address, routing->target_address(route.head()));
  WEFT_CO_TRY(rpc::Endpoint ep, rpc::Endpoint::parse(address));
  auto r = co_await client_.call<pb::RepairChunkReply>(ep, methods::kRepairChunk, req);
  if (!r) co_return error(r.error().with_context(fmt::format("repair by head target {}", route.head())));
  co_return std::move(*r);
}

// Steps 3-5 at the head, under the chunk's lock (like a client write).
Task<Result<pb::RepairChunkReply>> StorageService::repair_chunk(const pb::RepairChunkRequest& req) {
  WEFT_CO_RETURN_IF_ERROR(check_write_fence());
  const ChunkId id{req.chunk().inode(), req.chunk().index()};
  WEFT_CO_TRY(Placement first, locate(req.chain_id(), req.chain_version()));
  if (first.index != 0)
    co_return error(Code::kNotChainHead, "target {} is not the head of chain {}", first.target->id(), req.chain_id());
  ChunkLocks::Guard guard = co_await first.target->locks().lock(id);
  WEFT_CO_RETURN_IF_ERROR(check_write_fence());  // the lease and the routing may have changed meanwhile
  WEFT_CO_TRY(Placement p, locate(req.chain_id(), req.chain_version()));
  if (p.index != 0)
    co_return error(Code::kNotChainHead, "target {} is no longer the head of chain {}", p.target->id(), req.chain_id());
  const mgmt::TargetId head = p.target->id(), corrupt = req.target_id();
  const auto& path = p.route.write_path;
  if (std::find(path.begin(), path.end(), corrupt) == path.end())
    co_return error(Code::kStaleRouting, "target {} is not on the write path of chain {}", corrupt, req.chain_id());
  if (WEFT_FAULT("storage.repair.pause_locked")) {  // tests: a client write arrives meanwhile
    asio::steady_timer timer(co_await asio::this_coro::executor, std::chrono::milliseconds(300));
    co_await timer.async_wait(use_nothrow);
  }
  while (WEFT_FAULT("storage.repair.hold_locked") && !stopping_) {  // tests: a head that does not answer
    asio::steady_timer timer(co_await asio::this_coro::executor, std::chrono::milliseconds(20));
    co_await timer.async_wait(use_nothrow);
  }
  StatJob stat{&p.target->engine(), id};
  auto want = co_await pool_.run(stat);
  if (!want)
    co_return error(want.error().with_context(fmt::format("the head of chain {} (target {})", req.chain_id(), head)));
  WEFT_CO_TRY(RepairCopy copy, co_await verified_copy(p, id, *want, corrupt));
  if (copy.head_corrupt) {
    WEFT_CO_RETURN_IF_ERROR(co_await apply_repair(p, nullptr, copy, id));
    if (Scrubber* s = scrubber(head)) s->forget(id);
    if (corrupt != head) count_repair(head, "repaired");  // found on the way: no request of its own needed
  }
  if (corrupt != head) {
    WEFT_CO_TRY(std::string address, p.routing->target_address(corrupt));
    WEFT_CO_TRY(rpc::Endpoint ep, rpc::Endpoint::parse(address));
    Placement::Peer to{corrupt, std::move(ep)};
    WEFT_CO_RETURN_IF_ERROR(co_await apply_repair(p, &to, copy, id));
  }
  pb::RepairChunkReply reply;
  reply.set_version(copy.want.version);
  reply.set_source_target(copy.source);
  co_return reply;
}

// Step 3: the head's own copy unless it is the corrupt one, else the first
// readable successor's that matches the head's record. kCorruption when every
// replica asked holds a corrupt copy (or there is none to ask).
Task<Result<StorageService::RepairCopy>> StorageService::verified_copy(const Placement& p, const ChunkId& id,
                                                                        const ChunkInfo& want,
                                                                        mgmt::TargetId corrupt) {
  const mgmt::TargetId head = p.target->id();
  RepairCopy copy{want, head};
  std::vector<std::string> why;
  bool all_corrupt = true;
  if (corrupt != head) {
    ReadCommittedJob read{&p.target->engine(), id};
    auto local = co_await pool_.run(read);
    if (local && same_record(want, local->version, local->chunk_length, local->data())) {
      copy.local = std::move(*local);
      copy.data = copy.local.data();
      co_return std::move(copy);
    }
    if (local) co_return error(Code::kVersionMismatch, "chunk {} changed on the head while it was locked", id);
    if (local.error().code() != Code::kCorruption) co_return error(local.error());
    why.push_back(fmt::format("target {}: {}", head, local.error()));
  }
  for (mgmt::TargetId from : p.route.readable) {
    if (from == head || from == corrupt) continue;
    auto got = co_await fetch_copy(p, from, id, want);
    if (got) {
      got->head_corrupt = true;
      co_return std::move(*got);
    }
    all_corrupt &= got.error().code() == Code::kCorruption;
    why.push_back(fmt::format("target {}: {}", from, got.error()));
  }
  Code code = all_corrupt ? Code::kCorruption : Code::kUnavailable;
  co_return error(code, "no verified copy of chunk {} version {} in chain {}{}{}", id, want.version, p.route.chain_id,
                  why.empty() ? " (no other replica)" : ": ", fmt::join(why, "; "));
}

// One successor's committed copy (BatchRead: it verifies every block and the
// chunk CRC), accepted only with the head's version, length and CRC.
Task<Result<StorageService::RepairCopy>> StorageService::fetch_copy(const Placement& p, mgmt::TargetId from,
                                                                     const ChunkId& id, const ChunkInfo& want) {
  WEFT_CO_TRY(std::string address, p.routing->target_address(from));
  WEFT_CO_TRY(rpc::Endpoint ep, rpc::Endpoint::parse(address));
  pb::BatchReadRequest req;
  auto* range = req.add_ranges();
  range->set_chain_id(p.route.chain_id);
  range->set_chain_version(p.route.version);
  range->mutable_chunk()->set_inode(id.inode);
  range->mutable_chunk()->set_index(id.index);
  range->set_offset(0);
  range->set_length(want.length);
  RepairCopy copy{want, from};
  auto reply = co_await client_.call<pb::BatchReadReply>(ep, methods::kBatchRead, req, {}, &copy.remote);
  if (!reply) co_return error(reply.error());
  if (reply->results_size() != 1) co_return error(Code::kInternal, "a read of one range answered {}", reply->results_size());
  const pb::RangeResult& r = reply->results(0);
  if (r.code() != 0) co_return error(code_from_wire(r.code()), "{}", r.message());
  copy.data = copy.remote.payload.span().first(copy.remote.payload_len);
  if (!same_record(want, r.version(), r.chunk_length(), copy.data))
    co_return error(Code::kVersionMismatch, "its copy is version {} of {} bytes, the head's version {} of {} bytes (CRC "
                    "{:08x})", r.version(), r.chunk_length(), want.version, want.length, want.chunk_crc);
  co_return std::move(copy);
}

// Steps 4-5: the copy as a repair (REPLACE of the same version) on the head
// itself (`to` null) or sent to member `to`.
Task<Result<void>> StorageService::apply_repair(const Placement& p, const Placement::Peer* to,
                                                const RepairCopy& copy, const ChunkId& id) {
  ChainUpdate u;
  u.kind = pb::UPDATE_REPLACE;
  u.id = id;
  u.data = copy.data;
  u.length = static_cast<uint32_t>(copy.data.size());
  u.data_crc = copy.want.chunk_crc;  // same_record checked it
  u.repair = true;
  Placement at = p;
  at.successor.reset();
  Result<void> done;
  if (to) {
    at.successor = *to;
    done = co_await forward_out(at, u, WriteResult{copy.want.version, u.length, copy.want.chunk_crc}, false);
  } else {
    Expect expect{copy.want.length, copy.want.chunk_crc};
    auto r = co_await replicate(at, u, copy.want.version, &expect);
    if (!r) done = error(r.error().with_context(fmt::format("repair of the head's copy (target {})", p.target->id())));
  }
  co_return done;
}

}  // namespace weft::storage
