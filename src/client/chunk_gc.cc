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

// Files taken from meta per pass.
constexpr size_t kPendingBatch = 64;

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

Result<size_t> ChunkGc::collect_once() {
  if (!routing_started_) {
    WEFT_RETURN_IF_ERROR(parts_->routing.start());
    routing_started_ = true;
  }
  WEFT_TRY(auto items, hooks_.pending(kPendingBatch));
  size_t finished = 0;
  for (const meta::GcItem& item : items) {
    const meta::Layout& layout = item.inode.layout;
    uint64_t chunks = layout.chunk_bytes ? (item.inode.size + layout.chunk_bytes - 1) / layout.chunk_bytes : 0;
    if (chunks > 0) {
      auto stripe = stripe_chains(layout, *parts_->routing.current());
      if (!stripe) return error(stripe.error().with_context(fmt::format("gc of file {}", item.ino)));
      constexpr uint64_t kBatch = 128;
      for (uint64_t first = 0; first < chunks; first += kBatch) {
        std::vector<Task<Result<void>>> tasks;
        for (uint64_t i = first; i < std::min(chunks, first + kBatch); ++i)
          tasks.push_back(parts_->chunks.remove({item.ino, i, chain_of_chunk(*stripe, i), layout.chunk_bytes}));
        WEFT_RETURN_IF_ERROR(first_error(run_parallel(parts_->io, std::move(tasks))));
      }
    }
    WEFT_RETURN_IF_ERROR(hooks_.done(item.ino));
    chunks_.fetch_add(chunks);
    files_.fetch_add(1);
    ++finished;
  }
  return finished;
}

PeriodicThread::Wait ChunkGc::tick() {
  auto r = collect_once();
  if (!r) WEFT_LOG_WARN("chunk gc: {}", r.error());
  bool full_batch = r && *r >= kPendingBatch;  // more is queued: go on at once
  return full_batch ? PeriodicThread::Wait::zero() : PeriodicThread::Wait(interval_);
}

}  // namespace weft::client
