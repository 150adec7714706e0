// Resync: a serving target brings its syncing successor up to date in one
// chain (protocol in storage_service.h). One resync per (chain, chain
// version, successor); a newer chain version starts a new one and the old one
// stops at its next chunk (its requests fail with kStaleRouting).
//   1. wait for the updates in progress on the source when it started (they
//      may belong to the chain version before the successor joined);
//   2. list the chain's chunks on both sides (paged, in id order) and merge:
//      what differs is copied, the successor's chunks of the chain the source
//      lacks are removed; at most resync_window differing chunks at a time
//      (listed, then copied as in 3, then listed on);
//   3. copy with a few copies in flight, each under the source's chunk lock;
//      skip a chunk whose update reached the successor through the chain at
//      this version since its window began (it is already equal); retry a
//      failed copy alone;
//   4. SyncDone.
// g++ 12 reports a false -Wmismatched-new-delete on asio's awaitable frame
// operator delete for some coroutine bodies (resync_once).
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

#include <algorithm>
#include <span>
#include <unordered_map>
#include <unordered_set>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/awaitable_operators.hpp>
#include <asio/steady_timer.hpp>

#include "common/crc32c.h"
#include "common/logging.h"
#include "proto/storage.pb.h"
#include "storage/chunk_listing.h"
#include "storage/engine_jobs.h"
#include "storage/service_methods.h"
#include "storage/storage_service.h"

namespace weft::storage {

using namespace asio::experimental::awaitable_operators;

namespace {

constexpr int kCopyAttemptsMax = 20;
constexpr int kCopyBackoffMsMax = 1000;

}  // namespace

// Which differing chunks an update delivered to the successor through the
// chain while the resync ran (set on the I/O threads of forwarded updates),
// so that their copies are skipped. Bounded by resync_window twice over:
// `window` holds the current window's ids (the chunks about to be copied),
// `later` at most resync_window ids past the window, delivered before their
// own window lists them (the listing pages in hand may predate the delivery,
// or the successor's listing may be done). A delivery past both is not kept:
// that chunk, if it still lists as differing, is copied (its current content
// again), never skipped wrongly.
struct StorageService::Delivered {
  explicit Delivered(size_t cap) : later_max(std::max<size_t>(cap, 1)) {}

  std::mutex mu;
  const size_t later_max;
  std::unordered_map<ChunkId, bool, ChunkIdHash> window;  // GUARDED_BY(mu): id -> delivered
  std::optional<ChunkId> window_last;                     // GUARDED_BY(mu): the window's highest id
  std::unordered_set<ChunkId, ChunkIdHash> later;         // GUARDED_BY(mu): delivered, past the window

  // `ids` ascending (the listing's order).
  void start_window(std::span<const ChunkId> ids) {
    std::lock_guard lock(mu);
    window.clear();
    for (const ChunkId& id : ids) window.emplace(id, later.contains(id));
    if (!ids.empty()) window_last = ids.back();
    std::erase_if(later, [&](const ChunkId& id) { return window_last && !(*window_last < id); });
  }
  void note(const ChunkId& id) {
    std::lock_guard lock(mu);
    if (auto it = window.find(id); it != window.end()) {
      it->second = true;
    } else if ((!window_last || *window_last < id) && later.size() < later_max) {
      later.insert(id);
    }
  }
  bool contains(const ChunkId& id) {
    std::lock_guard lock(mu);
    auto it = window.find(id);
    return it != window.end() && it->second;
  }
  size_t tracked() {
    std::lock_guard lock(mu);
    return window.size() + later.size();
  }
};

// One pass. Its copy workers run on the executor of resync_once (one thread).
struct StorageService::ResyncPass {
  mgmt::ChainId chain;
  mgmt::ChainVersion version;
  StorageTarget* source;
  Placement::Peer dest;
  std::shared_ptr<Delivered> delivered;
  // Both sides' listings, merged a window of differing chunks at a time.
  Cursor local, remote;
  std::vector<ChunkId> todo;  // this window's (at most resync_window)
  size_t next = 0;
  uint64_t differing = 0, copied = 0, removed = 0, skipped = 0, kept = 0, retries = 0;
  std::optional<Status> failure;
  std::optional<ChunkId> failed_chunk;  // the chunk whose copy set `failure`
};

std::chrono::milliseconds resync_pass_backoff(int failed_passes) {
  constexpr std::chrono::milliseconds kFirst{200};
  if (failed_passes <= 1) return kFirst;
  int doublings = std::min(failed_passes - 1, 20);  // 200 ms << 20 is far past the cap
  return std::min(kFirst * (int64_t{1} << doublings), kResyncPassBackoffMax);
}

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
      ResyncKey key{chain_id, chain.version, e[i + 1].target_id};
      {
        std::lock_guard lock(mu_);
        // Keys of this chain's older versions can never come back (versions
        // only grow): drop them, or the set grows with every restart forever.
        auto older = resyncs_.lower_bound(ResyncKey{chain_id, 0, 0});
        while (older != resyncs_.end() && std::get<0>(*older) == chain_id && std::get<1>(*older) < chain.version)
          older = resyncs_.erase(older);
        if (!resyncs_.insert(key).second) continue;
        delivered_[key] = std::make_shared<Delivered>(options_.resync_window);
      }
      resyncs_running_++;
      asio::co_spawn(io_.next(), resync(chain_id, chain.version, source, Placement::Peer{e[i + 1].target_id, *ep}),
                     asio::detached);
    }
  }
}

void StorageService::trim_sync_orders() {
  RoutingSnapshot routing = routing_->current();
  // Per target: the chains it syncs, at their version (one pass over the chains).
  std::unordered_map<mgmt::TargetId, StorageTarget::ChainVersions> syncing;
  StorageTarget::ChainVersions versions;  // every chain (SyncDones of a version the routing here lags stay)
  for (const auto& [chain_id, chain] : routing->chains) {
    versions[chain_id] = chain.version;
    for (const auto& e : chain.entries)
      if (e.state == mgmt::TargetState::kSyncing) syncing[e.target_id][chain_id] = chain.version;
  }
  for (auto& [id, t] : targets_) {
    t->sync_order().retain(syncing[id]);
    t->retain_synced(versions, syncing[id]);
  }
}

void StorageService::note_delivered(const Placement& p, const ChunkId& id) {
  if (resyncs_running_.load(std::memory_order_relaxed) == 0 || !p.successor) return;
  std::shared_ptr<Delivered> d;
  {
    std::lock_guard lock(mu_);
    auto it = delivered_.find(ResyncKey{p.route.chain_id, p.route.version, p.successor->id});
    if (it == delivered_.end()) return;
    d = it->second;
  }
  d->note(id);
}

size_t StorageService::resync_chunks_tracked() {
  std::vector<std::shared_ptr<Delivered>> all;
  {
    std::lock_guard lock(mu_);
    for (const auto& [key, d] : delivered_) all.push_back(d);
  }
  size_t n = 0;
  for (const auto& d : all) n += d->tracked();
  return n;
}

// Retries the pass until it succeeds, the chain moves on, or stop().
Task<void> StorageService::resync(mgmt::ChainId chain, mgmt::ChainVersion version, StorageTarget* source,
                                  Placement::Peer dest) {
  auto started = std::chrono::steady_clock::now();
  WEFT_LOG_INFO("{}: resync of target {} from {} in chain {} version {} starts", options_.name, dest.id, source->id(),
                chain, version);
  // Step 1: updates that hold a lock now may be of the previous chain version
  // (not forwarded to the successor); waiting for them keeps the listing honest.
  for (const ChunkId& id : source->locks().held_ids()) {
    ChunkLocks::Guard g = co_await source->locks().lock(id);
  }
  for (int failed_passes = 0; !stopping_;) {
    std::optional<ChunkId> failed_chunk;
    auto r = co_await resync_once(chain, version, source, dest, failed_chunk);
    if (r) {
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      WEFT_LOG_INFO("{}: resync of target {} in chain {} done in {:.1f} s: {} chunks copied, {} removed", options_.name,
                    dest.id, chain, s, r->first, r->second);
      break;
    }
    // kStaleRouting from the destination may only mean its routing is behind
    // ours (it learns the new chain version a moment later): superseded is
    // what our own routing says, else the pass runs again.
    bool moved_on = r.error().code() == Code::kStaleRouting &&
                    !check_still_syncing(chain, version, source, dest.id).has_value();
    if (moved_on || r.error().code() == Code::kCancelled) {
      WEFT_LOG_INFO("{}: resync of target {} in chain {} version {} superseded: {}", options_.name, dest.id, chain,
                    version, r.error());
      break;
    }
    // Whatever stops the pass stops the next one too (a chunk the source
    // cannot read: kCorruption, kIoError) until it is repaired or the chain
    // changes: never skipped (the successor would be declared synced without
    // it), retried after a pause that grows up to kResyncPassBackoffMax.
    resync_failures_.inc();
    auto pause = resync_pass_backoff(++failed_passes);
    if (failed_chunk) {
      WEFT_LOG_WARN("{}: resync of target {} from {} in chain {} version {}: pass {} stopped at chunk {}: {}; next "
                    "pass in {} ms (the target stays syncing until that chunk is copied)",
                    options_.name, dest.id, source->id(), chain, version, failed_passes, *failed_chunk, r.error(),
                    pause.count());
    } else {
      WEFT_LOG_WARN("{}: resync of target {} from {} in chain {} version {}: pass {} failed: {}; next pass in {} ms",
                    options_.name, dest.id, source->id(), chain, version, failed_passes, r.error(), pause.count());
    }
    co_await resync_pause(pause);
  }
  {
    std::lock_guard lock(mu_);
    delivered_.erase(ResyncKey{chain, version, dest.id});
  }
  resyncs_running_--;
}

// Sleeps in slices so that stop() (the destructor then waits for resyncs)
// and a routing change (the chain may have moved on, or healed) cut it short.
Task<void> StorageService::resync_pause(std::chrono::milliseconds delay) {
  const auto until = std::chrono::steady_clock::now() + delay;
  const uint64_t routing_version = routing_->version();
  asio::steady_timer timer(co_await asio::this_coro::executor);
  while (!stopping_ && routing_->version() == routing_version) {
    auto now = std::chrono::steady_clock::now();
    if (now >= until) break;
    timer.expires_after(std::min<std::chrono::steady_clock::duration>(until - now, std::chrono::milliseconds(50)));
    co_await timer.async_wait(use_nothrow);
  }
}

// One pass: list and compare, copy what differs, then SyncDone.
Task<Result<std::pair<uint64_t, uint64_t>>> StorageService::resync_once(mgmt::ChainId chain,
                                                                         mgmt::ChainVersion version,
                                                                         StorageTarget* source,
                                                                         const Placement::Peer& dest,
                                                                         std::optional<ChunkId>& failed_chunk) {
  ResyncPass pass{chain, version, source, dest, nullptr, {}};
  {
    std::lock_guard lock(mu_);
    auto it = delivered_.find(ResyncKey{chain, version, dest.id});
    pass.delivered = it != delivered_.end() ? it->second : std::make_shared<Delivered>(options_.resync_window);
  }
  for (bool listed_all = false; !listed_all;) {
    pass.todo.clear();
    pass.next = 0;
    auto listed = co_await resync_lists(pass);
    if (!listed) co_return error(listed.error());
    listed_all = *listed;
    pass.differing += pass.todo.size();
    pass.delivered->start_window(pass.todo);
    // Tests: hold the pass between a window's listing and its copies.
    while (WEFT_FAULT("storage.resync.window.hold") && !stopping_) {
      asio::steady_timer hold(co_await asio::this_coro::executor, std::chrono::milliseconds(10));
      co_await hold.async_wait(use_nothrow);
    }
    auto workers = (copy_worker(pass) && copy_worker(pass)) && (copy_worker(pass) && copy_worker(pass));
    co_await std::move(workers);
    failed_chunk = pass.failed_chunk;
    if (pass.failure) co_return error(*pass.failure);
    if (stopping_) co_return error(Code::kCancelled, "stopping");
  }
  if (pass.kept > 0)
    WEFT_LOG_INFO("{}: resync of target {} in chain {}: kept {} chunks of unknown chain that are newer there",
                  options_.name, dest.id, chain, pass.kept);
  WEFT_LOG_INFO("{}: resync of target {} in chain {}: {} differing chunks: {} copied, {} removed, {} already "
                "delivered by writes, {} copy retries",
                options_.name, dest.id, chain, pass.differing, pass.copied, pass.removed, pass.skipped,
                pass.retries);
  // The chain may have moved on while the copies ran (with nothing to copy,
  // nothing checked it): a SyncDone names the version it proves, and only if
  // it still holds here. (mgmtd checks the version again: routing moves on
  // while the SyncDone travels.)
  WEFT_CO_RETURN_IF_ERROR(check_still_syncing(pass));
  pb::SyncDoneRequest done;
  done.set_target_id(dest.id);
  done.set_chain_id(chain);
  done.set_chain_version(version);
  done.set_chunks_copied(pass.copied);
  done.set_chunks_removed(pass.removed);
  auto r = co_await client_.call<pb::SyncDoneReply>(dest.endpoint, methods::kSyncDone, done);
  if (!r) co_return error(r.error().with_context("sync done"));
  co_return std::pair{pass.copied, pass.removed};
}

// Before step 4: the chain is at the pass's version, with the source serving
// right before the destination, which is still syncing (kStaleRouting otherwise).
Result<void> StorageService::check_still_syncing(const ResyncPass& pass) const {
  return check_still_syncing(pass.chain, pass.version, pass.source, pass.dest.id);
}

Result<void> StorageService::check_still_syncing(mgmt::ChainId chain, mgmt::ChainVersion version,
                                                 const StorageTarget* source, mgmt::TargetId dest) const {
  WEFT_TRY(Placement p, locate(chain, version));
  if (p.target != source || !p.readable || !p.successor || p.successor->id != dest ||
      std::find(p.route.readable.begin(), p.route.readable.end(), dest) != p.route.readable.end())
    return error(Code::kStaleRouting, "target {} is no longer syncing after {} in chain {} version {}", dest,
                 source->id(), chain, version);
  return {};
}

// Step 2: merges both sides' listings of the chain into pass.todo, from where
// the last window stopped, until it holds resync_window chunks (true: the
// listings are done). A chunk of unknown chain on the successor is never
// removed and never replaced by an older version (it may be another chain's).
Task<Result<bool>> StorageService::resync_lists(ResyncPass& pass) {
  Cursor& local = pass.local;
  Cursor& remote = pass.remote;
  const size_t batch = options_.resync_batch;
  while (!stopping_ && pass.todo.size() < std::max<size_t>(options_.resync_window, 1)) {
    if (remote.need_page()) {
      auto r = co_await load_remote_page(client_, pass.dest.endpoint, pass.dest.id, pass.chain, batch, remote);
      if (!r) co_return error(r.error().with_context("list chunks of the syncing target"));
    }
    if (local.need_page()) WEFT_CO_RETURN_IF_ERROR(co_await load_local_page(pool_, pass.source->engine(), pass.chain,
                                                                            batch, local));
    const Seen* l = local.peek();
    const Seen* r = remote.peek();
    if (!l && !r) co_return true;
    if (!r || (l && l->id < r->id)) {  // only here
      pass.todo.push_back(l->id);
      local.pos++;
    } else if (!l || r->id < l->id) {  // only there
      if (r->chain == pass.chain) {
        pass.todo.push_back(r->id);
      } else {
        pass.kept++;
      }
      remote.pos++;
    } else {  // both
      if (r->chain == kChainUnknown && r->version > l->version && l->chain != pass.chain) {  // keep_on_sync
        pass.kept++;
      } else if (!l->same_content(*r)) {
        pass.todo.push_back(l->id);
      }
      local.pos++;
      remote.pos++;
    }
  }
  if (stopping_) co_return error(Code::kCancelled, "stopping");
  co_return false;
}

// Step 3: takes chunks off pass.todo until it is empty or a copy failed for good.
Task<void> StorageService::copy_worker(ResyncPass& pass) {
  while (!pass.failure && !stopping_ && pass.next < pass.todo.size()) {
    ChunkId id = pass.todo[pass.next++];
    auto r = co_await copy_chunk(pass, id);
    if (!r) {
      if (!pass.failure) {
        pass.failure = r.error();
        pass.failed_chunk = id;
      }
      break;
    }
    switch (*r) {
      case CopyOutcome::kCopied:
        pass.copied++;
        resync_copied_.inc();
        break;
      case CopyOutcome::kRemoved:
        pass.removed++;
        resync_removed_.inc();
        break;
      case CopyOutcome::kDelivered:
        pass.skipped++;
        resync_delivered_.inc();
        break;
    }
  }
}

// Retries one chunk's copy (bounded, with backoff); a chain change ends it.
Task<Result<StorageService::CopyOutcome>> StorageService::copy_chunk(ResyncPass& pass, ChunkId id) {
  for (int attempt = 1;; ++attempt) {
    auto r = co_await copy_chunk_once(pass, id);
    if (r) co_return *r;
    Code code = r.error().code();
    if (code == Code::kStaleRouting || code == Code::kCancelled || stopping_ || attempt >= kCopyAttemptsMax)
      co_return error(r.error().with_context(fmt::format("copy of chunk {} (attempt {})", id, attempt)));
    pass.retries++;
    WEFT_LOG_DEBUG("{}: resync copy of chunk {} to target {}: {}; retrying", options_.name, id, pass.dest.id,
                   r.error());
    auto wait_ms = std::min(kCopyBackoffMsMax, 20 << std::min(attempt, 6));
    asio::steady_timer timer(co_await asio::this_coro::executor, std::chrono::milliseconds(wait_ms));
    co_await timer.async_wait(use_nothrow);
  }
}

// Copies one chunk's current committed state (or its absence) under its
// lock, so it is ordered with forwarded updates.
Task<Result<StorageService::CopyOutcome>> StorageService::copy_chunk_once(ResyncPass& pass, ChunkId id) {
  ChunkLocks::Guard guard = co_await pass.source->locks().lock(id);
  WEFT_CO_TRY(Placement p, locate(pass.chain, pass.version));
  if (!p.successor || p.successor->id != pass.dest.id || p.target != pass.source)
    co_return error(Code::kStaleRouting, "target {} is no longer the successor of {}", pass.dest.id,
                    pass.source->id());
  if (pass.delivered->contains(id)) co_return CopyOutcome::kDelivered;
  ReadCommittedJob read{&pass.source->engine(), id};
  auto data = co_await pool_.run(read);
  if (!data && data.error().code() == Code::kCorruption) request_repair(pass.source->id(), id);  // repair.cc
  if (!data && data.error().code() != Code::kNotFound)
    co_return error(data.error().with_context(
        fmt::format("source target {} cannot read chunk {}", pass.source->id(), id)));
  ChainUpdate u;
  u.id = id;
  u.sync = true;
  u.held = pass.source->dedup().keys_of(id, kHeldKeysMax);  // also for a removal (replicate)
  WriteResult state;
  if (data) {
    auto info = pass.source->engine().stat(id);  // memory; the lock holds it still
    u.sync_recorded = info && info->chain_id == pass.chain;
    u.kind = pb::UPDATE_REPLACE;
    u.data = data->data();
    u.length = static_cast<uint32_t>(u.data.size());
    state = WriteResult{data->version, u.length, crc32c(u.data)};
  } else {
    u.kind = pb::UPDATE_REMOVE;
  }
  auto r = co_await forward_out(p, u, state, true);
  if (!r) co_return error(r.error());
  co_return data ? CopyOutcome::kCopied : CopyOutcome::kRemoved;
}

}  // namespace weft::storage
