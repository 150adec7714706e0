#include "client/chunk_gc.h"

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
    o.retry_time_ms_max = 10000;  // a file that cannot be cleaned now is tried again next pass
    return o;
  }
};

// Files taken from meta per pass, and chunk removals in flight at once.
constexpr size_t kPendingBatch = 64;
constexpr size_t kRemovesInFlight = 128;

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

// The chunks of every file of a pass are removed together, at most
// kRemovesInFlight at a time (a pass of small files is one wave of requests
// rather than a round trip per file), and the files whose chunks are all gone
// are reported to meta in one commit.
Result<size_t> ChunkGc::collect_once() {
  if (!routing_started_) {
    WEFT_RETURN_IF_ERROR(parts_->routing.start());
    routing_started_ = true;
  }
  WEFT_TRY(auto items, hooks_.pending(kPendingBatch));
  struct Removal {
    size_t item;
    ChunkAddress chunk;
  };
  std::vector<Removal> removals;
  std::vector<bool> failed(items.size(), false);
  std::optional<Status> first_failure;
  auto fail = [&](size_t item, const Status& why) {
    failed[item] = true;
    if (!first_failure) first_failure = why.with_context(fmt::format("gc of file {}", items[item].ino));
  };
  auto routing = parts_->routing.current();
  for (size_t k = 0; k < items.size(); ++k) {
    const meta::Layout& layout = items[k].inode.layout;
    uint64_t chunks = layout.chunk_bytes ? (items[k].inode.size + layout.chunk_bytes - 1) / layout.chunk_bytes : 0;
    if (chunks == 0) continue;
    auto stripe = stripe_chains(layout, *routing);
    if (!stripe) {
      fail(k, stripe.error());
      continue;
    }
    for (uint64_t i = 0; i < chunks; ++i)
      removals.push_back({k, {items[k].ino, i, chain_of_chunk(*stripe, i), layout.chunk_bytes}});
  }
  for (size_t first = 0; first < removals.size(); first += kRemovesInFlight) {
    size_t last = std::min(removals.size(), first + kRemovesInFlight);
    std::vector<Task<Result<void>>> tasks;
    for (size_t r = first; r < last; ++r) tasks.push_back(parts_->chunks.remove(removals[r].chunk));
    auto results = run_parallel(parts_->io, std::move(tasks));
    for (size_t r = first; r < last; ++r) {
      if (results[r - first]) {
        chunks_.fetch_add(1);
      } else {
        fail(removals[r].item, results[r - first].error());
      }
    }
  }
  std::vector<meta::Ino> done;
  for (size_t k = 0; k < items.size(); ++k)
    if (!failed[k]) done.push_back(items[k].ino);
  if (!done.empty()) WEFT_RETURN_IF_ERROR(hooks_.done(done));
  files_.fetch_add(done.size());
  if (first_failure) return std::unexpected(*first_failure);
  return done.size();
}

PeriodicThread::Wait ChunkGc::tick() {
  auto r = collect_once();
  if (!r) WEFT_LOG_WARN("chunk gc: {}", r.error());
  bool full_batch = r && *r >= kPendingBatch;  // more is queued: go on at once
  return full_batch ? PeriodicThread::Wait::zero() : PeriodicThread::Wait(interval_);
}

}  // namespace weft::client
