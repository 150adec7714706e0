// Resync: a serving target copies what differs to its syncing successor
// (see storage_service.h). One resync per (chain, chain version, successor);
// a newer chain version starts a new one and the old one stops at its next
// chunk (its requests fail with kStaleRouting).
// g++ 12 reports a false -Wmismatched-new-delete on asio's awaitable frame
// operator delete for some coroutine bodies (resync_once).
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/steady_timer.hpp>

#include "common/crc32c.h"
#include "common/logging.h"
#include "proto/storage.pb.h"
#include "storage/service_methods.h"
#include "storage/storage_service.h"

namespace weft::storage {
namespace {

struct ListJob {
  ChunkEngine* engine;
  std::optional<ChunkId> start;
  size_t count_max;
  Result<std::vector<ChunkInfo>> operator()() const { return engine->list(start, count_max); }
};

struct ReadWholeJob {
  ChunkEngine* engine;
  ChunkId id;
  Result<ReadResult> operator()() const { return engine->read(id, 0, engine->chunk_size_max()); }
};

struct Seen {
  uint64_t version = 0;
  uint32_t crc = 0;
  uint32_t length = 0;
  bool operator==(const Seen&) const = default;
};

ChunkId next_id(const ChunkId& id) {
  return id.index == UINT64_MAX ? ChunkId{id.inode + 1, 0} : ChunkId{id.inode, id.index + 1};
}

}  // namespace

void StorageService::start_resyncs() {
  if (stopping_) return;
  RoutingSnapshot routing = routing_->current();
  for (const auto& [chain_id, chain] : routing->chains) {
    const auto& e = chain.entries;
    for (size_t i = 0; i + 1 < e.size(); ++i) {
      if (e[i].state != mgmt::TargetState::kServing || e[i + 1].state != mgmt::TargetState::kSyncing) continue;
      StorageTarget* source = target(e[i].target_id);
      if (!source) continue;
      auto address = routing->target_address(e[i + 1].target_id);
      if (!address) continue;
      auto ep = rpc::Endpoint::parse(*address);
      if (!ep) continue;
      {
        std::lock_guard lock(mu_);
        if (!resyncs_.insert({chain_id, chain.version, e[i + 1].target_id}).second) continue;
      }
      resyncs_running_++;
      asio::co_spawn(io_.next(), resync(chain_id, chain.version, source, Placement::Peer{e[i + 1].target_id, *ep}),
                     asio::detached);
    }
  }
}

// Retries the whole pass until it succeeds, the chain moves on, or stop().
Task<void> StorageService::resync(mgmt::ChainId chain, mgmt::ChainVersion version, StorageTarget* source,
                                  Placement::Peer dest) {
  WEFT_LOG_INFO("{}: resync of target {} from {} in chain {} version {} starts", options_.name, dest.id, source->id(),
                chain, version);
  while (!stopping_) {
    auto r = co_await resync_once(chain, version, source, dest);
    if (r) {
      WEFT_LOG_INFO("{}: resync of target {} in chain {} done: {} chunks copied, {} removed", options_.name, dest.id,
                    chain, r->first, r->second);
      break;
    }
    if (r.error().code() == Code::kStaleRouting) {
      WEFT_LOG_INFO("{}: resync of target {} in chain {} version {} superseded: {}", options_.name, dest.id, chain,
                    version, r.error());
      break;
    }
    WEFT_LOG_WARN("{}: resync of target {} in chain {}: {}; retrying", options_.name, dest.id, chain, r.error());
    asio::steady_timer timer(co_await asio::this_coro::executor, std::chrono::milliseconds(200));
    co_await timer.async_wait(use_nothrow);
  }
  resyncs_running_--;
}

// One pass: list both sides, copy what differs, then SyncDone.
Task<Result<std::pair<uint64_t, uint64_t>>> StorageService::resync_once(mgmt::ChainId chain,
                                                                         mgmt::ChainVersion version,
                                                                         StorageTarget* source,
                                                                         const Placement::Peer& dest) {
  std::map<ChunkId, Seen> remote;
  std::optional<ChunkId> start;
  for (bool more = true; more && !stopping_;) {
    pb::ListChunksRequest req;
    req.set_target_id(dest.id);
    req.set_count_max(static_cast<uint32_t>(options_.resync_batch));
    if (start) {
      req.mutable_start()->set_inode(start->inode);
      req.mutable_start()->set_index(start->index);
    }
    auto r = co_await client_.call<pb::ListChunksReply>(dest.endpoint, methods::kListChunks, req);
    if (!r) co_return error(r.error().with_context("list chunks of the syncing target"));
    for (const auto& c : r->chunks()) {
      ChunkId id{c.chunk().inode(), c.chunk().index()};
      remote[id] = Seen{c.version(), c.chunk_crc32c(), c.length()};
      start = next_id(id);
    }
    more = r->more() && r->chunks_size() > 0;
  }
  std::map<ChunkId, Seen> local;
  ListJob list{&source->engine(), std::nullopt, options_.resync_batch};
  for (bool more = true; more && !stopping_;) {
    auto r = co_await pool_.run(list);
    if (!r) co_return error(r.error());
    for (const auto& c : *r) {
      local[c.id] = Seen{c.version, c.chunk_crc, c.length};
      list.start = next_id(c.id);
    }
    more = r->size() == list.count_max;
  }
  // A target keeps one chunk namespace for all its chains and a chunk's chain is
  // not recorded. So this source's list holds chunks of its other chains too
  // (copied along: stale copies nobody reads through this chain), and the
  // successor's holds chunks of ITS other chains, which this source may lack or
  // hold only as such a stale copy from an earlier resync. When the successor is
  // in another chain: never remove a chunk this source lacks, and never replace
  // a chunk with an older version (that would lose data another chain serves).
  bool dest_elsewhere = false;
  {
    RoutingSnapshot routing = routing_->current();
    for (const auto& [id, c] : routing->chains)
      for (const auto& e : c.entries) dest_elsewhere |= id != chain && e.target_id == dest.id;
  }
  size_t kept = 0;
  std::vector<ChunkId> differing;
  for (const auto& [id, seen] : local) {
    auto it = remote.find(id);
    if (it != remote.end() && it->second == seen) continue;
    if (dest_elsewhere && it != remote.end() && it->second.version > seen.version) {
      ++kept;
      continue;
    }
    differing.push_back(id);
  }
  for (const auto& [id, seen] : remote) {
    if (local.contains(id)) continue;
    if (dest_elsewhere) {
      ++kept;
      continue;
    }
    differing.push_back(id);
  }
  if (kept > 0)
    WEFT_LOG_INFO("{}: resync of target {} in chain {}: kept {} chunks this source lacks or holds "
                  "older (the target is in other chains too)",
                  options_.name, dest.id, chain, kept);
  uint64_t copied = 0, removed = 0;
  for (const ChunkId& id : differing) {
    if (stopping_) co_return error(Code::kCancelled, "stopping");
    auto r = co_await copy_chunk(chain, version, source, dest, id);
    if (!r) co_return error(r.error());
    (*r ? copied : removed)++;
  }
  pb::SyncDoneRequest done;
  done.set_target_id(dest.id);
  done.set_chain_id(chain);
  done.set_chain_version(version);
  done.set_chunks_copied(copied);
  done.set_chunks_removed(removed);
  auto r = co_await client_.call<pb::SyncDoneReply>(dest.endpoint, methods::kSyncDone, done);
  if (!r) co_return error(r.error().with_context("sync done"));
  co_return std::pair{copied, removed};
}

// Copies one chunk's current committed state (or its absence) under its
// lock, so it is ordered with forwarded updates. True: copied; false: removed.
Task<Result<bool>> StorageService::copy_chunk(mgmt::ChainId chain, mgmt::ChainVersion version, StorageTarget* source,
                                              const Placement::Peer& dest, ChunkId id) {
  ChunkLocks::Guard guard = co_await source->locks().lock(id);
  WEFT_CO_TRY(Placement p, locate(chain, version));
  if (!p.successor || p.successor->id != dest.id || p.target != source)
    co_return error(Code::kStaleRouting, "target {} is no longer the successor of {}", dest.id, source->id());
  ReadWholeJob read{&source->engine(), id};
  auto data = co_await pool_.run(read);
  if (!data && data.error().code() != Code::kNotFound) co_return error(data.error());
  ChainUpdate u;
  u.id = id;
  WriteResult state;
  if (data) {
    u.kind = pb::UPDATE_REPLACE;
    u.data = data->data();
    u.length = static_cast<uint32_t>(u.data.size());
    state = WriteResult{data->version, u.length, crc32c(u.data)};
  } else {
    u.kind = pb::UPDATE_REMOVE;
  }
  auto r = co_await forward_out(p, u, state, true);
  if (!r) co_return error(r.error());
  co_return data.has_value();
}

}  // namespace weft::storage
