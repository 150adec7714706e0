#include "client/chunk_gc.h"

#include <algorithm>

#include "client/core.h"
#include "client/placement.h"
#include "common/logging.h"

namespace weft::client {

struct ChunkGc::Parts {
  rpc::IoPool io{1, "chunk-gc"};
  rpc::Client rpc;
  RoutingCache routing;
  ChunkIo chunks;

  Parts(std::vector<rpc::Endpoint> mgmtd, const std::string& token)
      : rpc(io, options(token)), routing(io, rpc, std::move(mgmtd)), chunks(io, rpc, routing, chunk_options()) {}

  static rpc::ClientOptions options(const std::string& token) {
    return rpc::ClientOptions::in_cluster(token, "chunk-gc");
  }
  static ChunkIoOptions chunk_options() {
    ChunkIoOptions o;
    // A file that cannot be cleaned now is tried again later (a head that
    // stopped answering before mgmtd declares it down, or failing storage,
    // would otherwise hold the whole pass for long).
    o.retry_time_ms_max = 2000;
    o.call_timeout_ms = 3000;  // a hung head, too, holds a pass only this long
    return o;
  }
};

// Files taken from meta per pass, and chunk removals in flight at once.
constexpr size_t kPendingBatch = 64;
constexpr size_t kRemovesInFlight = 128;
// Passes before the next one starts at the queue's front again (see collect_once).
constexpr size_t kPassesPerRound = 16;

namespace {

// Whether the chain has a serving target now: a removal sent to a chain
// without one only waits out ChunkIo's retries.
Result<void> chain_served(const mgmt::RoutingInfo& routing, mgmt::ChainId id) {
  WEFT_TRY(const mgmt::ChainInfo* chain, routing.chain(id));
  WEFT_RETURN_IF_ERROR(mgmt::route_chain(*chain));
  return {};
}

}  // namespace

ChunkGc::ChunkGc(std::vector<rpc::Endpoint> mgmtd, std::string cluster_token, ChunkGcHooks hooks,
                 std::chrono::milliseconds interval)
    : parts_(std::make_unique<Parts>(std::move(mgmtd), cluster_token)), hooks_(std::move(hooks)), interval_(interval) {}

ChunkGc::~ChunkGc() {
  stop();
  parts_->routing.stop();
  parts_->io.stop();
}

void ChunkGc::start() { thread_.emplace(PeriodicThread::Wait::zero(), [this] { return tick(); }); }

void ChunkGc::stop() {
  if (thread_) thread_->stop();
}

// The chunks of every file of a pass are removed together, in waves of at
// most kRemovesInFlight (a pass of small files is one wave rather than a round
// trip per file; a wave is built when it is sent, so a pass of huge files
// holds no list of all their chunks). A file one of whose removals failed gets
// no more requests this pass and stays queued; the chunks on a chain with no
// serving target are not sent at all (the file fails at once and stays
// queued, its other chunks are removed); the files whose chunks are all gone
// are reported to meta in one commit.
Result<ChunkGc::Pass> ChunkGc::collect_once() {
  if (!routing_started_) {
    WEFT_RETURN_IF_ERROR(parts_->routing.start());
    routing_started_ = true;
  }
  WEFT_TRY(auto items, hooks_.pending(kPendingBatch, resume_after_));
  struct Plan {
    std::vector<mgmt::ChainId> stripe;
    std::vector<bool> served;  // by stripe position: the chain has a serving target
    uint64_t chunks = 0;
    bool failed = false;
    bool stop = false;  // no more removals this pass: one failed, or none can be sent
  };
  std::vector<Plan> plans(items.size());
  std::optional<Status> first_failure;
  auto fail = [&](size_t k, const Status& why) {
    plans[k].failed = true;
    if (!first_failure) first_failure = why.with_context(fmt::format("gc of file {}", items[k].ino));
  };
  auto routing = parts_->routing.current();
  for (size_t k = 0; k < items.size(); ++k) {
    Plan& plan = plans[k];
    const meta::Layout& layout = items[k].inode.layout;
    plan.chunks = meta::chunk_count(items[k].inode.size, layout.chunk_bytes);
    if (plan.chunks == 0) continue;
    auto stripe = stripe_chains(layout, *routing);
    if (!stripe) {
      fail(k, stripe.error());
      plan.stop = true;
      continue;
    }
    plan.stripe = std::move(*stripe);
    plan.served.assign(plan.stripe.size(), false);
    // Chunk i lives on stripe[i % stripe.size()]: the first `chunks` positions hold some.
    const uint64_t used = std::min<uint64_t>(plan.chunks, plan.stripe.size());
    for (uint64_t s = 0; s < used; ++s) {
      auto served = chain_served(*routing, plan.stripe[s]);
      plan.served[s] = served.has_value();
      if (!served) fail(k, served.error());
    }
    plan.stop = std::ranges::none_of(plan.served, [](bool b) { return b; });
  }
  size_t file = 0;     // where the next wave goes on: this file
  uint64_t chunk = 0;  // and this chunk of it
  for (;;) {
    std::vector<Task<Result<void>>> tasks;
    std::vector<size_t> owner;
    while (tasks.size() < kRemovesInFlight && file < items.size()) {
      const Plan& plan = plans[file];
      if (plan.stop || chunk >= plan.chunks) {
        ++file;
        chunk = 0;
        continue;
      }
      const uint64_t index = chunk++;
      if (!plan.served[index % plan.stripe.size()]) continue;
      const meta::GcItem& item = items[file];
      tasks.push_back(parts_->chunks.remove(
          {item.ino, index, chain_of_chunk(plan.stripe, index), item.inode.layout.chunk_bytes}));
      owner.push_back(file);
    }
    if (tasks.empty()) break;
    auto results = run_parallel(parts_->io, std::move(tasks));
    for (size_t j = 0; j < results.size(); ++j) {
      if (results[j]) continue;
      fail(owner[j], results[j].error());
      plans[owner[j]].stop = true;
    }
  }
  std::vector<meta::Ino> done;
  uint64_t chunks = 0;
  for (size_t k = 0; k < items.size(); ++k) {
    if (plans[k].failed) continue;
    done.push_back(items[k].ino);
    chunks += plans[k].chunks;
  }
  if (!done.empty()) WEFT_RETURN_IF_ERROR(hooks_.done(done));
  // A full pass may have more behind it; the files it could not finish lie
  // before the cursor now, so the next pass takes new ones rather than the
  // same failing head of the queue again (a pass whose done commit failed is
  // repeated as it was). A round ends at the queue's end, or after
  // kPassesPerRound passes that finished something: files are queued above
  // the cursor (inode numbers only grow), so under steady unlinks the cursor
  // would chase the tail and never come back to the files below it. Passes
  // that finished nothing do not count: more files failing for good at the
  // queue's front than that many passes take would otherwise end every round
  // before the files behind them.
  if (!done.empty()) ++passes_this_round_;
  bool go_on = items.size() >= kPendingBatch && passes_this_round_ < kPassesPerRound;
  resume_after_ = go_on ? std::optional<meta::Ino>(items.back().ino) : std::nullopt;
  if (!go_on) passes_this_round_ = 0;
  files_.fetch_add(done.size());
  chunks_.fetch_add(chunks);
  if (first_failure)
    WEFT_LOG_WARN("chunk gc: {} of {} files stay queued: {}", items.size() - done.size(), items.size(), *first_failure);
  return Pass{items.size(), done.size()};
}

PeriodicThread::Wait ChunkGc::tick() {
  auto r = collect_once();
  if (!r) WEFT_LOG_WARN("chunk gc: {}", r.error());
  // More is queued and the pass got somewhere: go on at once. A full pass
  // that finished nothing waits before going on past its files, which bounds
  // the work spent on a queue whose storage is unreachable.
  bool more = r && r->taken >= kPendingBatch && r->finished > 0;
  return more ? PeriodicThread::Wait::zero() : PeriodicThread::Wait(interval_);
}

}  // namespace weft::client
