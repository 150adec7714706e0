// client/chunk_io.h
// Chunk operations against the storage servers, as coroutines on the
// client's I/O threads: each finds the chain's current route in the routing
// cache, talks to the right replica, and rides out failures.
//   - Updates (write, truncate, remove) go to the chain head with the chain
//     version and a (client id, sequence) pair fixed for all attempts, so the
//     head applies a retried update once. A success whose version, length
//     or CRC no head could answer for the update is kProtocol, not retried
//     (as a listing or range removal no server sends). Retryable errors (stale routing, not
//     head, lease expired, unreachable, timeouts...) refresh the routing and
//     retry with backoff until `retry_time_ms_max`; an update or read()
//     still failing with a retryable code then fails with kIoError (EIO), the
//     last error in its message (a retryable code would have the caller try
//     again what was just tried for that long). A chain the routing does
//     not know (it lags a new chain table) is such a stale routing; only the
//     head's kNotFound means a chunk to truncate or remove is already gone.
//   - Reads go to a serving replica chosen by chunk (spreading load), checked
//     with the CRC32C the server computed of the bytes it sent; an error or a
//     mismatch moves on to the next replica of the chain, then to a routing
//     refresh and another round. A chunk that does not exist reads as a hole.
//   - read_once() is one such round (read-ahead: the reader falls back to
//     read() of its own range when a guess fails).
//   - read_blocking() is read()'s first round on the calling thread (for
//     threads outside the I/O pool): same replica order, fail-over and CRC
//     check, over that thread's own blocking connections (rpc::Client::
//     call_blocking). No backoff or routing refresh: when the round fails,
//     the caller goes on with read().
//   - group_reads()/read_group() read many small ranges with one BatchRead
//     request per storage server (the first-epoch case), at most
//     kGroupBytesMax and kGroupRangesMax ranges per request (a BatchRead
//     past the server's limits would be refused whole, every range then read
//     alone); the reply is copied out of the RPC payload
//     (ranges of one request land in unrelated caller buffers). A reply
//     broken as a whole (results for other ranges than asked, a payload
//     other than their bytes) has every range read alone, as does a range
//     whose own answer is broken.
// Threading: thread-safe; the coroutines run on any I/O thread of `io`.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <span>
#include <vector>

#include "common/status.h"
#include "client/routing_cache.h"
#include "mgmt/routing.h"
#include "rpc/client.h"
#include "rpc/io_pool.h"
#include "rpc/task.h"

namespace weft::proto::storage {
class BatchReadRequest;
class BatchReadReply;
class WriteReply;
}  // namespace weft::proto::storage

namespace weft::client {

struct ChunkAddress {
  uint64_t ino = 0;
  uint64_t index = 0;
  mgmt::ChainId chain = 0;
  uint32_t chunk_bytes = 0;
};

struct ChunkIoOptions {
  uint32_t call_timeout_ms = 10000;
  uint32_t retry_time_ms_max = 60000;
  uint64_t client_id = 0;  // dedup namespace of updates (random when 0)
};

// One range of read_grouped(): reads into dst (dst.size() bytes at `offset`).
struct GroupedRead {
  ChunkAddress chunk;
  uint32_t offset = 0;
  std::span<std::byte> dst;
  Result<uint32_t> result = 0;  // out: bytes the chunk holds in the range
  bool retry_alone = false;     // out: the grouped request could not serve it; use read()
};

// Bounds of ChunkIo::read_blocking: `timeout_ms` per replica (0:
// ClientOptions::call_timeout_ms), at most `replicas_max` replicas tried.
struct ReadBounds {
  uint32_t timeout_ms = 0;
  size_t replicas_max = SIZE_MAX;
};

class ChunkIo {
 public:
  ChunkIo(rpc::IoPool& io, rpc::Client& rpc, RoutingCache& routing, ChunkIoOptions options);

  // Bytes of the range the chunk holds (< dst.size() past the chunk's end; 0 for a missing chunk).
  Task<Result<uint32_t>> read(ChunkAddress c, uint32_t offset, std::span<std::byte> dst);
  // One round of read() over the replicas, no backoff: for read-ahead, a
  // guess that must not hold the reader behind it for read()'s retry time.
  Task<Result<uint32_t>> read_once(ChunkAddress c, uint32_t offset, std::span<std::byte> dst);
  // The end (index * chunk_bytes + length) of the last non-empty chunk of
  // `ino` with an index in [first_index, end_index) on `chain`, as a serving
  // replica lists them (storage ListChunks, page after page: it costs the
  // chunks there are, not the range); nullopt when there is none. With
  // read()'s fail-over and retries.
  Task<Result<std::optional<uint64_t>>> data_end(uint64_t ino, mgmt::ChainId chain, uint32_t chunk_bytes,
                                                 uint64_t first_index, uint64_t end_index);
  // One round of read() on the calling thread. REQUIRES: not on an I/O thread.
  // A guess made for a caller (an early read) may bound it (ReadBounds).
  Result<uint32_t> read_blocking(ChunkAddress c, uint32_t offset, std::span<std::byte> dst,
                                 ReadBounds bounds = {});
  Task<Result<void>> write(ChunkAddress c, uint32_t offset, std::span<const std::byte> src);
  Task<Result<void>> truncate(ChunkAddress c, uint32_t length);
  Task<Result<void>> remove(ChunkAddress c);
  // Removes every chunk of `ino` on `chain` whose index is >= first_index
  // (storage RemoveRange, page after page, each retried as an update is):
  // costs the chunks that exist, not the range. Returns how many went.
  // kUnknownMethod: the head predates RemoveRange (remove chunk by chunk).
  // `stop` (if given) is read between pages: set, the call ends with
  // kCancelled (what the pages before removed stays removed).
  Task<Result<uint64_t>> remove_from(uint64_t ino, mgmt::ChainId chain, uint64_t first_index,
                                     const std::atomic<bool>* stop = nullptr);
  static constexpr size_t kGroupBytesMax = 16u << 20;
  static constexpr size_t kGroupRangesMax = 4096;  // storage::kBatchReadRangesMax
  // Indexes of `reads` grouped by the server of their first-choice replica
  // (at most kGroupBytesMax and kGroupRangesMax per group), the servers'
  // groups taken in turn. Ranges whose chain has no route now
  // are marked retry_alone and left out.
  std::vector<std::vector<size_t>> group_reads(std::span<GroupedRead> reads);
  // One BatchRead for `members`; fills their result, or marks them retry_alone.
  Task<Result<void>> read_group(std::span<GroupedRead> reads, std::vector<size_t> members);

  uint64_t retries() const { return retries_.load(); }
  uint64_t replica_failovers() const { return replica_failovers_.load(); }
  rpc::IoPool& io() { return io_; }

 private:
  enum class UpdateKind { kWrite, kTruncate, kRemove };
  // One attempt of a call to the chain's head (its endpoint, the chain version).
  template <class T>
  using HeadAttempt = std::function<Task<Result<T>>(rpc::Endpoint, mgmt::ChainVersion)>;
  // Calls `attempt` at the head until it succeeds, fails for good or the
  // retry time is used up (see the header comment); `what` names it in errors.
  template <class T>
  Task<Result<T>> at_head(mgmt::ChainId chain, HeadAttempt<T> attempt, std::string what);
  // One attempt of a call that retries (at_head's at the head; data_end's
  // over the serving replicas).
  template <class T>
  using Round = std::function<Task<Result<T>>()>;
  // Runs `round` until it succeeds, fails for good or the retry time is used
  // up (see the header comment); `what` names it in errors.
  template <class T>
  Task<Result<T>> retrying(Round<T> round, std::string what);
  Task<Result<void>> update(UpdateKind kind, ChunkAddress c, uint32_t offset, uint32_t length,
                            std::span<const std::byte> src);
  Task<Result<void>> send_update(UpdateKind kind, rpc::Endpoint ep, mgmt::ChainVersion cv, ChunkAddress c,
                                 uint32_t offset, uint32_t length, std::span<const std::byte> src, uint32_t crc,
                                 uint64_t seq, uint32_t attempt);
  // Whether a Write or Truncate success (`w`) can answer the update sent
  // (send_update's arguments); kProtocol if not (see the definition).
  static Result<void> check_update_reply(UpdateKind kind, const proto::storage::WriteReply& w,
                                         const rpc::Endpoint& ep, ChunkAddress c, uint32_t offset, uint32_t length,
                                         uint32_t crc, uint32_t attempt);
  Result<std::pair<rpc::Endpoint, mgmt::ChainVersion>> head_of(mgmt::ChainId chain) const;
  // data_end() at one replica.
  Task<Result<std::optional<uint64_t>>> data_end_at(rpc::Endpoint ep, mgmt::TargetId target, mgmt::ChainVersion cv,
                                                    uint64_t ino, mgmt::ChainId chain, uint32_t chunk_bytes,
                                                    uint64_t first_index, uint64_t end_index);
  // One round over the readable replicas; the error of the last replica tried.
  Task<Result<uint32_t>> read_round(const mgmt::RoutingInfo& routing, ChunkAddress c, uint32_t offset,
                                    std::span<std::byte> dst);
  static proto::storage::BatchReadRequest read_request(mgmt::ChainVersion cv, ChunkAddress c, uint32_t offset,
                                                       size_t length);
  static Result<uint32_t> read_reply(const Result<proto::storage::BatchReadReply>& reply, const rpc::RawResponse& raw,
                                     const rpc::Endpoint& ep, mgmt::TargetId target, ChunkAddress c,
                                     uint32_t offset, std::span<std::byte> dst);
  Result<uint32_t> read_from_blocking(const mgmt::RoutingInfo& routing, const proto::storage::BatchReadRequest& req,
                                      mgmt::TargetId target, ChunkAddress c, std::span<std::byte> dst,
                                      uint32_t timeout_ms);
  Task<Result<uint32_t>> read_from(const mgmt::RoutingInfo& routing, mgmt::ChainVersion cv, mgmt::TargetId target,
                                   ChunkAddress c, uint32_t offset, std::span<std::byte> dst);
  // Where a retry loop is: attempts since the routing version it last saw.
  struct Retry {
    int attempt = 0;
    mgmt::RoutingVersion routing = 0;
  };
  // Waits after a failed attempt; false when the retry time is used up. The
  // wait grows with the attempts (10 ms doubling to 500 ms) and starts over
  // whenever the routing changed: what the retries wait for is usually
  // exactly that (a dead server's chains moved on; a head that still has the
  // old routing refuses the new version for a moment). A change during the
  // wait ends it.
  Task<bool> backoff(Retry& retry, std::chrono::steady_clock::time_point deadline);

  rpc::IoPool& io_;
  rpc::Client& rpc_;
  RoutingCache& routing_;
  const ChunkIoOptions options_;
  const uint64_t client_id_;
  std::atomic<uint64_t> seq_{0};
  std::atomic<uint64_t> retries_{0};
  std::atomic<uint64_t> replica_failovers_{0};
};

}  // namespace weft::client
