// Replica check: every replica_check_interval, the head of each chain whose
// members all serve lists the chain's chunks on itself and on every other
// member (paged, in id order) and hands each chunk whose records differ
// (version, length, CRC, or present on one side only) to reconciliation
// (reconcile.cc), which asks the members again, takes the chunk's lock and,
// if the head's record is still the one listed, writes the head's content
// through the chain. An update in progress while the lists were taken is
// told apart there: once it holds the lock, the head's record has changed.
//
// The safety net behind the notes a failed update leaves (reconcile.cc):
// those are kept in memory only, by the head that noted them, so a restart
// or a change of head loses them, and they are dropped past
// reconcile_queue_max (65,536) or given up after 20 failed tries; a
// difference of any other origin is found too. Chunks that a side records under another chain (or under no chain:
// written before chains were recorded) are left alone, as resync leaves them.
//
// A check compares at most replica_check_chunks_per_s records a second, and
// notes a differing chunk only once the reconcile queue has room: it keeps
// pace with reconciliation instead of overflowing the queue.
//
// g++ 12 reports a false -Wmismatched-new-delete on asio's awaitable frame
// operator delete for some coroutine bodies.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/steady_timer.hpp>

#include "common/logging.h"
#include "storage/chunk_listing.h"
#include "storage/storage_service.h"

namespace weft::storage {
namespace {

// Whether the chunk at the front of `here` (the head's listing) and/or
// `there` (another member's) differs; advances past it.
bool next_differs(Cursor& here, Cursor& there, mgmt::ChainId chain, ChunkId* id, uint64_t* head_version) {
  const Seen* l = here.peek();
  const Seen* r = there.peek();
  if (!r || (l && l->id < r->id)) {  // only at the head
    *id = l->id;
    *head_version = l->version;
    here.pos++;
    return l->chain == chain;
  }
  if (!l || r->id < l->id) {  // only on the member
    *id = r->id;
    *head_version = 0;
    there.pos++;
    return r->chain == chain;
  }
  *id = l->id;
  *head_version = l->version;
  here.pos++;
  there.pos++;
  return l->chain == chain && r->chain == chain && !l->same_content(*r);
}

}  // namespace

// At most `per_s` comparisons a second over a whole check: wait() before a
// page is loaded sleeps until the comparisons so far are due (in slices, so
// that stop() is not kept waiting).
struct StorageService::Pace {
  Pace(uint64_t per_s, const std::atomic<bool>& stopping) : per_s(per_s), stopping(stopping) {}

  void count() { done++; }
  Task<void> wait() {
    if (per_s == 0) co_return;
    auto due = start + std::chrono::microseconds(done * 1000000 / per_s);
    // Behind (the check waited for something else): no burst to catch up.
    if (auto now = std::chrono::steady_clock::now(); now > due + std::chrono::seconds(1)) {
      start += now - due;
      due = now;
    }
    asio::steady_timer timer(co_await asio::this_coro::executor);
    for (auto now = std::chrono::steady_clock::now(); !stopping && now < due; now = std::chrono::steady_clock::now()) {
      timer.expires_after(std::min<std::chrono::steady_clock::duration>(due - now, std::chrono::milliseconds(50)));
      co_await timer.async_wait(use_nothrow);
    }
  }

  const uint64_t per_s;
  const std::atomic<bool>& stopping;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  uint64_t done = 0;
};

// The head's chunks of `p`'s chain against member `member`'s: each that
// differs is noted in doubt, once the reconcile queue has room (the check
// keeps pace with reconciliation rather than overflow it). Counts what it
// compared and noted in `report`; `pace` spaces the comparisons.
Task<Result<void>> StorageService::check_member_replica(const Placement& p, mgmt::TargetId member,
                                                       ReplicaCheckReport& report, Pace& pace) {
  WEFT_CO_TRY(std::string address, p.routing->target_address(member));
  WEFT_CO_TRY(rpc::Endpoint ep, rpc::Endpoint::parse(address));
  const mgmt::ChainId chain = p.route.chain_id;
  const size_t batch = options_.resync_batch;
  Cursor here, there;
  while (!stopping_) {
    if (there.need_page()) {
      co_await pace.wait();
      auto r = co_await load_remote_page(client_, ep, member, chain, batch, there);
      if (!r) co_return error(r.error().with_context(fmt::format("list chunks of target {}", member)));
    }
    if (here.need_page()) {
      co_await pace.wait();
      WEFT_CO_RETURN_IF_ERROR(co_await load_local_page(pool_, p.target->engine(), chain, batch, here));
    }
    if (!here.peek() && !there.peek()) co_return Result<void>{};
    ChunkId id;
    uint64_t head_version = 0;
    report.compared++;
    pace.count();
    if (!next_differs(here, there, chain, &id, &head_version)) continue;
    report.differing++;
    WEFT_CO_RETURN_IF_ERROR(co_await note_found(p, id, head_version));
  }
  co_return error(Code::kCancelled, "stopping");
}

// Notes a chunk the check found differing once the reconcile queue has room
// (the check's share of it: failed updates, noted at once, keep a quarter),
// while this target still heads
// the chain at the check's version and holds its write fence; after
// kRoomWaitMax without room, this member's check ends (the next one lists
// the rest again).
Task<Result<void>> StorageService::note_found(const Placement& p, const ChunkId& id, uint64_t head_version) {
  constexpr auto kRoomWaitMax = std::chrono::seconds(60);
  const auto since = std::chrono::steady_clock::now();
  asio::steady_timer timer(co_await asio::this_coro::executor);
  for (;;) {
    switch (note_in_doubt(p, id, head_version, "found by the replica check", NoteOrigin::kReplicaCheck)) {
      case Noted::kNoted: co_return Result<void>{};
      case Noted::kStopping: co_return error(Code::kCancelled, "stopping");
      case Noted::kFull: break;
    }
    if (std::chrono::steady_clock::now() - since > kRoomWaitMax)
      co_return error(Code::kBusy, "the reconcile queue stayed full for {} s", kRoomWaitMax.count());
    timer.expires_after(std::chrono::milliseconds(20));
    co_await timer.async_wait(use_nothrow);
    auto still = locate(p.route.chain_id, p.route.version);
    if (!still || still->index != 0 || still->target != p.target || !check_write_fence())
      co_return error(Code::kStaleRouting, "target {} no longer heads chain {} at version {}", p.target->id(),
                      p.route.chain_id, p.route.version);
  }
}

Task<StorageService::ReplicaCheckReport> StorageService::check_replicas() {
  ReplicaCheckReport report;
  Pace pace(options_.replica_check_chunks_per_s, stopping_);
  RoutingSnapshot routing = routing_->current();
  for (const auto& [chain_id, chain] : routing->chains) {
    if (stopping_) break;
    auto route = mgmt::route_chain(chain);
    // A chain with a syncing member is being brought level by its resync.
    if (!route || route->write_path.size() < 2 || route->readable.size() != route->write_path.size()) continue;
    if (!target(route->head())) continue;
    auto p = locate(chain_id, route->version);
    if (!p || p->index != 0 || !check_write_fence()) continue;
    report.chains++;
    const uint64_t differing = report.differing;
    for (size_t i = 1; i < route->write_path.size(); ++i) {
      auto checked = co_await check_member_replica(*p, route->write_path[i], report, pace);
      if (checked) continue;
      report.failed++;
      WEFT_LOG_WARN("{}: replica check of chain {} on target {}: {}", options_.name, chain_id, route->write_path[i],
                    checked.error());
    }
    const uint64_t found = report.differing - differing;
    replica_check_differing_.inc(found);
    if (found > 0)
      WEFT_LOG_WARN("{}: replica check: {} chunks of chain {} differ between its members; reconciling them",
                    options_.name, found, chain_id);
  }
  replica_check_passes_.inc();
  co_return report;
}

void StorageService::start_replica_check() {
  if (options_.replica_check_interval.count() <= 0) return;
  replica_check_running_ = true;
  asio::co_spawn(io_.next(), replica_check_loop(), asio::detached);
}

// Sleeps in slices so that stop() cuts the wait short (the destructor waits for the loop).
Task<void> StorageService::replica_check_loop() {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  auto next = std::chrono::steady_clock::now() + options_.replica_check_interval;
  while (!stopping_) {
    auto now = std::chrono::steady_clock::now();
    if (now < next) {
      timer.expires_after(std::min<std::chrono::steady_clock::duration>(next - now, std::chrono::milliseconds(50)));
      co_await timer.async_wait(use_nothrow);
      continue;
    }
    (void)co_await check_replicas();
    next = std::chrono::steady_clock::now() + options_.replica_check_interval;
  }
  replica_check_running_ = false;
}

}  // namespace weft::storage
