// BatchRead: many ranges (possibly on several local targets) in one request.
// Every range is submitted at once to the io_uring of the I/O thread that
// runs the handler (storage/thread_ring.h; the engine's own ring where there
// is none), so the completions come back on this thread without a hop; the
// reply body holds one result per range and the payload the concatenated data.
#include <asio/associated_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/post.hpp>

#include "common/crc32c.h"
#include "proto/storage.pb.h"
#include "storage/chunk_meta.h"
#include "storage/service_methods.h"
#include "storage/storage_service.h"
#include "storage/thread_ring.h"

namespace weft::storage {
namespace {

// A whole chunk of the largest size is always one batch.
static_assert(kBatchReadBytesMax >= kMaxChunkBytesLimit);
// The largest reply body: a RangeResult's fields other than the message take
// at most 41 bytes with its tag and length (64 with room to spare).
static_assert(uint64_t{kBatchReadRangesMax} * (kRangeMessageBytesMax + 64) <= rpc::FrameLimits{}.body_max);

// `message` cut to kRangeMessageBytesMax at a UTF-8 character boundary (a
// proto3 string must stay valid UTF-8).
std::string range_message(std::string message) {
  if (message.size() <= kRangeMessageBytesMax) return message;
  size_t n = kRangeMessageBytesMax;
  while (n > 0 && (static_cast<unsigned char>(message[n]) & 0xC0) == 0x80) --n;
  message.resize(n);
  return message;
}

struct RangeRead {
  StorageTarget* target = nullptr;  // null: `result` already holds the error
  ChunkId id;
  uint32_t offset = 0;
  uint32_t length = 0;
  Result<ReadResult> result = error(Code::kInternal, "not read");
};

template <class Handler>
struct ReadAllState {
  explicit ReadAllState(size_t n, Handler h) : remaining(n), handler(std::move(h)) {}
  std::atomic<size_t> remaining;
  Handler handler;
  void done_one() {
    if (remaining.fetch_sub(1) != 1) return;
    auto ex = asio::get_associated_executor(handler);
    asio::post(ex, std::move(handler));
  }
};

// Initiation: submits every read; completes when the last one finished.
struct ReadAll {
  std::vector<RangeRead>* reads;
  ReadSubmitter* via;  // null: each engine's own ring

  template <class Handler>
  void operator()(Handler&& handler) const {
    using State = ReadAllState<std::decay_t<Handler>>;
    auto state = std::make_shared<State>(reads->size() + 1, std::move(handler));
    for (auto& r : *reads) {
      if (!r.target) {
        state->done_one();
        continue;
      }
      RangeRead* slot = &r;
      auto done = [state, slot](Result<ReadResult> res) {
        slot->result = std::move(res);
        state->done_one();
      };
      if (via)
        r.target->engine().read_async(r.id, r.offset, r.length, *via, std::move(done));
      else
        r.target->engine().read_async(r.id, r.offset, r.length, std::move(done));
    }
    state->done_one();
  }
};

// A share of the server's read_bytes_held_max and of its connection's part of
// it, given back when it goes (with the reply's keepalive, once the reply was
// written).
class ReadHold {
 public:
  explicit ReadHold(uint64_t bytes) : bytes_(bytes) {}
  ~ReadHold() {
    for (auto& c : taken_) c->fetch_sub(bytes_);
  }
  ReadHold(const ReadHold&) = delete;
  ReadHold& operator=(const ReadHold&) = delete;
  // Takes the share from `counter` unless that would pass `max`.
  bool take(const std::shared_ptr<std::atomic<uint64_t>>& counter, uint64_t max) {
    uint64_t now = counter->load();
    do {
      if (now + bytes_ > max) return false;
    } while (!counter->compare_exchange_weak(now, now + bytes_));
    taken_.push_back(counter);
    return true;
  }

 private:
  uint64_t bytes_;
  std::vector<std::shared_ptr<std::atomic<uint64_t>>> taken_;
};

// At most what the engine allocates for a range (its blocks, within the chunk).
uint64_t buffer_bytes(uint32_t offset, uint32_t length, uint32_t chunk_size_max) {
  if (length == 0 || offset >= chunk_size_max) return 0;
  uint64_t end = std::min<uint64_t>(uint64_t{offset} + length, chunk_size_max);
  return uint64_t{blocks_of(offset, end).count} * kBlockBytes;
}

// What a reply's payload points into: the reads' buffers, and their hold.
struct HeldReads {
  std::vector<RangeRead> reads;
  std::optional<ReadHold> hold;
};

}  // namespace

Task<Result<pb::BatchReadReply>> StorageService::batch_read(const pb::BatchReadRequest& req, rpc::ServerCall& call) {
  auto start = std::chrono::steady_clock::now();
  WEFT_CO_RETURN_IF_ERROR(check_read_fence());
  if (req.ranges_size() > kBatchReadRangesMax)
    co_return error(Code::kTooBig, "a batch read of {} ranges (at most {})", req.ranges_size(), kBatchReadRangesMax);
  auto held = std::make_shared<HeldReads>();
  held->reads.resize(req.ranges_size());
  std::vector<RangeRead>* reads = &held->reads;
  uint64_t want = 0;  // at most what the buffers take: a read ends at its chunk's end
  std::vector<std::pair<StorageTarget*, ChunkId>> updating;  // wait for these first (below)
  for (bool waited = false;; waited = true) {
    want = 0;
    for (int i = 0; i < req.ranges_size(); ++i) {
      const auto& range = req.ranges(i);
      RangeRead& r = (*reads)[i];
      r.id = ChunkId{range.chunk().inode(), range.chunk().index()};
      r.offset = range.offset();
      r.length = range.length();
      r.target = nullptr;
      auto p = locate(range.chain_id(), range.chain_version());
      if (!p) {
        r.result = error(p.error());
      } else if (!p->readable) {
        r.result = error(Code::kUnavailable, "target {} is not serving in chain {}", p->target->id(), range.chain_id());
      } else {
        r.target = p->target;
        want += buffer_bytes(r.offset, r.length, r.target->engine().chunk_size_max());
        if (!waited && p->target->id() != p->route.readable.back() && p->target->locks().is_held(r.id))
          updating.emplace_back(p->target, r.id);
      }
    }
    if (updating.empty()) break;
    // An update of the chunk is in progress here, and the members after
    // this one may have committed it already (the last serving one commits
    // first): answering with this member's committed version could give an
    // older version than a read elsewhere gave before. Once its lock was
    // free, this member holds every version committed anywhere until then,
    // and reads later never go back. (The last serving member never waits:
    // no serving member commits before it.) Then again: the routing may have
    // moved and the lease run out meanwhile.
    for (auto& [target, id] : updating) (void)co_await target->locks().lock(id);
    updating.clear();
    WEFT_CO_RETURN_IF_ERROR(check_read_fence());
  }
  // One connection holds at most a quarter: a peer that stops reading its
  // replies (stopped, hung) cannot take every other client's reads with it.
  // One batch is also at most what its reply's payload may carry.
  const uint64_t max = options_.read_bytes_held_max, per_connection = max / 4;
  const uint64_t batch_max = std::min(per_connection, kBatchReadBytesMax);
  if (want > batch_max)
    co_return error(Code::kTooBig, "a batch read of {} bytes (at most {}: one connection holds at most {}, one reply "
                    "carries at most {})", want, batch_max, per_connection, kBatchReadBytesMax);
  held->hold.emplace(want);
  if (call.connection_held && !held->hold->take(call.connection_held, per_connection))
    co_return error(Code::kOverloaded, "this connection's reads hold {} bytes on {} (at most {}): try again",
                    call.connection_held->load(), options_.name, per_connection);
  if (!held->hold->take(read_bytes_held_, max))
    co_return error(Code::kOverloaded, "reads hold {} bytes on {} (at most {}): try again", read_bytes_held_->load(),
                    options_.name, max);
  ReadAll read_all{reads, ThreadRing::for_this_thread()};
  co_await asio::async_initiate<decltype(asio::use_awaitable), void()>(std::move(read_all), asio::use_awaitable);
  pb::BatchReadReply reply;
  for (auto& r : *reads) {
    auto* out = reply.add_results();
    if (!r.result) {
      out->set_code(static_cast<uint32_t>(r.result.error().code()));
      out->set_message(range_message(r.result.error().message()));
      if (r.target && r.result.error().code() == Code::kCorruption) {
        r.target->metrics().read_checksum_failures.inc();
        request_repair(r.target->id(), r.id);  // repair.cc: this replica's copy, from another one
      }
      if (r.target) r.target->metrics().of(Op::kRead).errors->inc();
      continue;
    }
    auto data = r.result->data();
    out->set_length(static_cast<uint32_t>(data.size()));
    out->set_version(r.result->version);
    out->set_crc32c(r.result->data_crc ? *r.result->data_crc : crc32c(data));
    out->set_chunk_length(r.result->chunk_length);
    if (!data.empty()) call.response_payload.push_back(data);
    auto& m = r.target->metrics().of(Op::kRead);
    m.ops->inc();
    m.bytes->inc(data.size());
    m.latency_us->observe(static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start).count()));
  }
  call.response_keepalive = std::move(held);  // the hold goes when the reply was written
  co_return reply;
}

}  // namespace weft::storage
