#include "client/chunk_io.h"

#include <algorithm>
#include <map>
#include <optional>

#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>

#include "common/crc32c.h"
#include "common/logging.h"
#include "common/random.h"
#include "common/wire_status.h"
#include "proto/storage.pb.h"
#include "storage/service_methods.h"

namespace weft::client {

namespace pb = ::weft::proto::storage;
namespace methods = ::weft::storage::methods;

namespace {

using SteadyClock = std::chrono::steady_clock;

// Codes after which another attempt (maybe on a newer routing) can succeed.
bool worth_retrying(Code c) { return code_retryable(c) || c == Code::kIoError; }

// A round over a chain's replicas answers with the last replica's error,
// except that one worth retrying is not replaced by one that is not: a
// replica briefly down, then one the routing names wrongly, must leave the
// read to be tried again (on this routing or a fixed one), not fail it.
void keep_retryable(Status& last, Status next) {
  if (worth_retrying(last.code()) && !worth_retrying(next.code())) return;
  last = std::move(next);
}

// Refusals a head (or a member it forwarded to) answers before any member
// staged the update: the routing it was sent under, the head's place, the
// lease. Such a send applied nothing anywhere.
bool refused_before_staging(Code c) {
  return c == Code::kStaleRouting || c == Code::kNotChainHead || c == Code::kLeaseExpired;
}

// The error of an operation that stopped retrying. Once retry_time_ms_max
// is used up, a retryable code (EAGAIN, ESTALE, EHOSTDOWN, EBUSY...) would
// tell the caller to try again, and a File keeps its first error for good:
// it is kIoError (EIO) then, the last attempt's error in its message.
Status gave_up(const Status& last, bool deadline_passed, uint32_t retry_time_ms, std::string_view what) {
  if (!deadline_passed || !last.retryable()) return last.with_context(what);
  return Status(Code::kIoError, fmt::format("{}: no success within the retry time ({} ms); last error: {}", what,
                                            retry_time_ms, last.to_string()));
}

// A chain, target or node this client's routing does not know (one added
// since it was fetched) is kStaleRouting: retried on refreshed routing,
// never kNotFound, which would read as "no such chunk" (ENOENT).
Status unknown_is_stale(const mgmt::RoutingInfo& routing, Status s) {
  if (s.code() != Code::kNotFound) return s;
  return Status(Code::kStaleRouting, fmt::format("routing version {} of this client: {}", routing.version, s.message()));
}

Result<rpc::Endpoint> endpoint_of(const mgmt::RoutingInfo& routing, mgmt::TargetId target) {
  auto address = routing.target_address(target);
  if (!address) return error(unknown_is_stale(routing, address.error()));
  return routing_endpoint(*address);
}

// The chain's route now (see unknown_is_stale).
Result<mgmt::ChainRoute> route_of(const mgmt::RoutingInfo& routing, mgmt::ChainId id) {
  auto chain = routing.chain(id);
  if (!chain) return error(unknown_is_stale(routing, chain.error()));
  return mgmt::route_chain(**chain);
}

void set_chunk(pb::ChunkRef* ref, const ChunkAddress& c) {
  ref->set_inode(c.ino);
  ref->set_index(c.index);
}

// Spreads a file's reads over the replicas of a chain: the same chunk always
// starts at the same replica (its cache stays warm), different chunks differ.
size_t first_replica(const ChunkAddress& c, size_t n) {
  return static_cast<size_t>((c.ino * 0x9E3779B97F4A7C15ull + c.index) % n);
}

}  // namespace

ChunkIo::ChunkIo(rpc::IoPool& io, rpc::Client& rpc, RoutingCache& routing, ChunkIoOptions options)
    : io_(io),
      rpc_(rpc),
      routing_(routing),
      options_(options),
      client_id_(options.client_id != 0 ? options.client_id : random_id()) {}

Task<bool> ChunkIo::backoff(Retry& retry, SteadyClock::time_point deadline) {
  if (SteadyClock::now() >= deadline) co_return false;
  retries_.fetch_add(1);
  routing_.request_refresh();
  if (const mgmt::RoutingVersion now = routing_.version(); now != retry.routing) {
    retry.routing = now;
    retry.attempt = 0;
  }
  auto delay = std::chrono::milliseconds(std::min(500, 10 << std::min(retry.attempt++, 6)));
  const auto until = std::min<SteadyClock::time_point>(SteadyClock::now() + delay, deadline);
  // In slices, so that a routing change ends the wait (the poll thread
  // installs it; there is no awaitable signal of it on this executor).
  constexpr auto kSlice = std::chrono::milliseconds(10);
  asio::steady_timer timer(co_await asio::this_coro::executor);
  while (SteadyClock::now() < until && routing_.version() == retry.routing) {
    timer.expires_after(std::min<SteadyClock::duration>(kSlice, until - SteadyClock::now()));
    auto waited = co_await timer.async_wait(use_nothrow);
    (void)waited;
  }
  co_return true;
}

Task<Result<void>> ChunkIo::send_update(UpdateKind kind, rpc::Endpoint ep, mgmt::ChainVersion cv, ChunkAddress c,
                                        uint32_t offset, uint32_t length, std::span<const std::byte> src, uint32_t crc,
                                        uint64_t seq, uint32_t attempt) {
  rpc::CallOptions o;
  o.timeout_ms = options_.call_timeout_ms;
  if (kind == UpdateKind::kWrite) {
    pb::WriteRequest req;
    req.set_chain_id(c.chain);
    req.set_chain_version(cv);
    set_chunk(req.mutable_chunk(), c);
    req.set_offset(offset);
    req.set_length(static_cast<uint32_t>(src.size()));
    req.set_data_crc32c(crc);
    req.set_chunk_size(c.chunk_bytes);
    req.set_client_id(client_id_);
    req.set_sequence(seq);
    req.set_attempt(attempt);
    o.payload.push_back(src);
    auto w = co_await rpc_.call<pb::WriteReply>(ep, methods::kWrite, req, std::move(o));
    if (!w) co_return error(w.error());
    co_return check_update_reply(kind, *w, ep, c, offset, length, crc, attempt);
  }
  if (kind == UpdateKind::kTruncate) {
    pb::TruncateRequest req;
    req.set_chain_id(c.chain);
    req.set_chain_version(cv);
    set_chunk(req.mutable_chunk(), c);
    req.set_length(length);
    req.set_chunk_size(c.chunk_bytes);
    req.set_client_id(client_id_);
    req.set_sequence(seq);
    req.set_attempt(attempt);
    auto w = co_await rpc_.call<pb::WriteReply>(ep, methods::kTruncate, req, std::move(o));
    if (!w) co_return error(w.error());
    co_return check_update_reply(kind, *w, ep, c, offset, length, crc, attempt);
  }
  pb::RemoveRequest req;
  req.set_chain_id(c.chain);
  req.set_chain_version(cv);
  set_chunk(req.mutable_chunk(), c);
  req.set_client_id(client_id_);
  req.set_sequence(seq);
  req.set_attempt(attempt);
  auto w = co_await rpc_.call<pb::RemoveReply>(ep, methods::kRemove, req, std::move(o));
  if (!w) co_return error(w.error());
  co_return Result<void>{};
}

// What a head's success answers, from storage (chain_update.cc's
// write_reply of the engine's WriteResult, chunk_engine_update.cc): the
// chunk's version (from 1: 0 is "absent"), its length (within the chunk size
// the update was sent with) and the CRC32C of its whole content. A first send
// (attempt 0: no send before it may have been applied) is answered with the
// chunk as this update left it, under the chunk's lock: a write's chunk
// reaches at least its end, and one written from offset 0 that ends there is
// exactly the bytes sent; a truncate's chunk has its length (empty: CRC 0).
// A retry may be answered with a recorded outcome that a member whose chunk
// was replaced wholesale since holds as the replacement's, later updates of
// other writers in it (storage/dedup_table.h): only its version (>= 1) and
// the bound are checked then. Versions are not compared across updates: a
// removal starts them over, other writers move them on.
Result<void> ChunkIo::check_update_reply(UpdateKind kind, const pb::WriteReply& w, const rpc::Endpoint& ep,
                                         ChunkAddress c, uint32_t offset, uint32_t length, uint32_t crc,
                                         uint32_t attempt) {
  const bool write = kind == UpdateKind::kWrite;
  const uint64_t end = write ? uint64_t{offset} + length : length;
  const bool first = attempt == 0;
  // The whole content is known where it is the bytes written from offset 0
  // (`crc`), or nothing (a truncate's `crc` is 0, the CRC32C of no bytes).
  const bool content_known = first && w.chunk_length() == end && (write ? offset == 0 : end == 0);
  std::string_view broken;
  if (w.version() == 0)
    broken = "version 0";
  else if (c.chunk_bytes != 0 && w.chunk_length() > c.chunk_bytes)
    broken = "a length past the chunk size";
  else if (first && write && w.chunk_length() < end)
    broken = "a length short of the write's end";
  else if (first && !write && w.chunk_length() != end)
    broken = "a length other than the truncate's";
  else if (content_known && w.chunk_crc32c() != crc)
    broken = "a CRC other than of the bytes the chunk then holds";
  if (broken.empty()) return {};
  return error(Code::kProtocol, "{} answered the {} of chunk {}:{} (end {}, chunk size {}, attempt {}) with {}: "
               "version {}, length {}, CRC {:08x}", ep.to_string(), write ? "write" : "truncate", c.ino, c.index,
               end, c.chunk_bytes, attempt, broken, w.version(), w.chunk_length(), w.chunk_crc32c());
}

// The head of the chain now, and the chain version to send.
Result<std::pair<rpc::Endpoint, mgmt::ChainVersion>> ChunkIo::head_of(mgmt::ChainId chain_id) const {
  RoutingPtr routing = routing_.current();
  WEFT_TRY(mgmt::ChainRoute route, route_of(*routing, chain_id));
  WEFT_TRY(rpc::Endpoint ep, endpoint_of(*routing, route.head()));
  return std::pair<rpc::Endpoint, mgmt::ChainVersion>(ep, route.version);
}

template <class T>
Task<Result<T>> ChunkIo::retrying(Round<T> round, std::string what) {
  const auto deadline = SteadyClock::now() + std::chrono::milliseconds(options_.retry_time_ms_max);
  Status last(Code::kUnavailable, "no attempt made");
  bool timed_out = false;
  Retry retry{.routing = routing_.version()};
  while (true) {
    auto r = co_await round();
    if (r) co_return r;
    last = r.error();
    // kCorruption: the payload was damaged on its way to a member (each
    // checks it on arrival): sent again, as a read of a bad replica is tried
    // again. (A member whose own copy is bad answers kUnavailable.)
    if (!worth_retrying(last.code()) && last.code() != Code::kCorruption) break;
    bool again = co_await backoff(retry, deadline);
    if (!again) {
      timed_out = true;
      break;
    }
  }
  co_return error(gave_up(last, timed_out, options_.retry_time_ms_max, what));
}

template <class T>
Task<Result<T>> ChunkIo::at_head(mgmt::ChainId chain, HeadAttempt<T> attempt, std::string what) {
  Round<T> round = [this, chain, attempt = std::move(attempt)]() -> Task<Result<T>> {
    auto head = head_of(chain);
    if (!head) co_return error(head.error());
    co_return co_await attempt(head->first, head->second);
  };
  return retrying<T>(std::move(round), std::move(what));
}

Task<Result<void>> ChunkIo::update(UpdateKind kind, ChunkAddress c, uint32_t offset, uint32_t length,
                                   std::span<const std::byte> src) {
  const uint64_t seq = seq_.fetch_add(1) + 1;
  const uint32_t crc = kind == UpdateKind::kWrite ? crc32c(src) : 0;
  // `sent` counts the sends of `seq` that may have been applied: the head
  // refuses a retry it can no longer tell from a first arrival
  // (storage/dedup_table.h), so a send refused before anything was staged
  // leaves the next one a first send.
  auto attempt = [=, this, sent = uint32_t{0}](rpc::Endpoint ep, mgmt::ChainVersion cv) mutable -> Task<Result<void>> {
    auto r = co_await send_update(kind, ep, cv, c, offset, length, src, crc, seq, sent);
    if (r || !refused_before_staging(r.error().code())) ++sent;
    // A chunk the head does not have is already removed / truncated (only
    // the head's answer says so: not a routing lookup).
    if (!r && r.error().code() == Code::kNotFound && kind != UpdateKind::kWrite) co_return Result<void>{};
    co_return r;
  };
  return at_head<void>(c.chain, attempt, fmt::format("chunk {}:{} on chain {}", c.ino, c.index, c.chain));
}

Task<Result<uint64_t>> ChunkIo::remove_from(uint64_t ino, mgmt::ChainId chain, uint64_t first_index,
                                             const std::atomic<bool>* stop) {
  uint64_t removed = 0;
  for (uint64_t next = first_index;;) {
    if (next != first_index && stop && stop->load())
      co_return error(Code::kCancelled, "removal of chunks {}:{}.. on chain {} stopped", ino, next, chain);
    pb::RemoveRangeRequest req;
    req.set_chain_id(chain);
    req.set_inode(ino);
    req.set_first_index(next);
    // A coroutine: `ep` and the request live in its frame while the call runs.
    auto attempt = [req, this](rpc::Endpoint ep, mgmt::ChainVersion cv) -> Task<Result<pb::RemoveRangeReply>> {
      pb::RemoveRangeRequest at = req;
      at.set_chain_version(cv);
      rpc::CallOptions o;
      o.timeout_ms = options_.call_timeout_ms;
      co_return co_await rpc_.call<pb::RemoveRangeReply>(ep, methods::kRemoveRange, at, std::move(o));
    };
    // Each page has the whole retry time: pages that make progress go on.
    auto page = co_await at_head<pb::RemoveRangeReply>(
        chain, attempt, fmt::format("chunks {}:{}.. on chain {}", ino, next, chain));
    if (!page) co_return error(page.error());
    removed = page->removed() > UINT64_MAX - removed ? UINT64_MAX : removed + page->removed();
    if (!page->more()) co_return removed;
    // A page goes on past where it started: a cursor that stays would ask
    // again for ever, one that goes back would remove chunks before
    // first_index, which the caller keeps.
    if (page->next_index() <= next)
      co_return error(Code::kProtocol, "removal of chunks {}:{}.. on chain {}: the server continues at index {}",
                      ino, next, chain, page->next_index());
    next = page->next_index();
  }
}

Task<Result<void>> ChunkIo::write(ChunkAddress c, uint32_t offset, std::span<const std::byte> src) {
  return update(UpdateKind::kWrite, c, offset, static_cast<uint32_t>(src.size()), src);
}

Task<Result<void>> ChunkIo::truncate(ChunkAddress c, uint32_t length) {
  return update(UpdateKind::kTruncate, c, 0, length, {});
}

Task<Result<void>> ChunkIo::remove(ChunkAddress c) { return update(UpdateKind::kRemove, c, 0, 0, {}); }

pb::BatchReadRequest ChunkIo::read_request(mgmt::ChainVersion cv, ChunkAddress c, uint32_t offset, size_t length) {
  pb::BatchReadRequest req;
  auto* range = req.add_ranges();
  range->set_chain_id(c.chain);
  range->set_chain_version(cv);
  set_chunk(range->mutable_chunk(), c);
  range->set_offset(offset);
  range->set_length(static_cast<uint32_t>(length));
  return req;
}

// Whether a range's answer has the bytes the chunk holds in [offset, offset
// + asked): all of them, as its own chunk_length says, no fewer (the rest
// would read as a hole) and none past the chunk's end.
static bool holds_what_was_asked(const pb::RangeResult& rr, uint32_t offset, size_t asked) {
  const uint64_t held = rr.chunk_length() > offset ? rr.chunk_length() - offset : 0;
  return rr.length() == std::min<uint64_t>(asked, held);
}

// Checks one replica's answer and its CRC32C over the bytes in dst.
Result<uint32_t> ChunkIo::read_reply(const Result<pb::BatchReadReply>& reply, const rpc::RawResponse& raw,
                                     const rpc::Endpoint& ep, mgmt::TargetId target, ChunkAddress c,
                                     uint32_t offset, std::span<std::byte> dst) {
  if (!reply) return error(reply.error());
  if (reply->results_size() != 1)
    return error(Code::kProtocol, "batch read from {}: {} results for 1 range", ep.to_string(), reply->results_size());
  const pb::RangeResult& rr = reply->results(0);
  const Status status = status_from_wire(rr.code(), rr.message());
  if (status.code() == Code::kNotFound) return 0u;  // no such chunk: a hole
  if (!status.ok()) return error(status.with_context(fmt::format("target {} at {}", target, ep.to_string())));
  if (rr.length() != raw.payload_len || !holds_what_was_asked(rr, offset, dst.size()))
    return error(Code::kProtocol, "batch read from {}: {} bytes for a range of {} at {} of a chunk of {}",
                 ep.to_string(), rr.length(), dst.size(), offset, rr.chunk_length());
  if (!raw.payload_in_destination && rr.length() > 0) std::copy_n(raw.payload.data(), rr.length(), dst.data());
  if (crc32c(dst.first(rr.length())) != rr.crc32c())
    return error(Code::kCorruption, "target {} at {}: checksum mismatch on chunk {}:{}", target, ep.to_string(), c.ino,
                 c.index);
  return rr.length();
}

Task<Result<uint32_t>> ChunkIo::read_from(const mgmt::RoutingInfo& routing, mgmt::ChainVersion cv,
                                          mgmt::TargetId target, ChunkAddress c, uint32_t offset,
                                          std::span<std::byte> dst) {
  WEFT_CO_TRY(rpc::Endpoint ep, endpoint_of(routing, target));
  pb::BatchReadRequest req = read_request(cv, c, offset, dst.size());
  rpc::CallOptions o;
  o.timeout_ms = options_.call_timeout_ms;
  o.response_payload = dst;
  rpc::RawResponse raw;
  auto reply = co_await rpc_.call<pb::BatchReadReply>(ep, methods::kBatchRead, req, std::move(o), &raw);
  co_return read_reply(reply, raw, ep, target, c, offset, dst);
}

Result<uint32_t> ChunkIo::read_from_blocking(const mgmt::RoutingInfo& routing, const pb::BatchReadRequest& req,
                                             mgmt::TargetId target, ChunkAddress c, std::span<std::byte> dst,
                                             uint32_t timeout_ms) {
  WEFT_TRY(rpc::Endpoint ep, endpoint_of(routing, target));
  rpc::RawResponse raw;
  auto reply = rpc_.call_blocking<pb::BatchReadReply>(ep, methods::kBatchRead, req, dst, timeout_ms, &raw);
  return read_reply(reply, raw, ep, target, c, req.ranges(0).offset(), dst);
}

Result<uint32_t> ChunkIo::read_blocking(ChunkAddress c, uint32_t offset, std::span<std::byte> dst,
                                        ReadBounds bounds) {
  RoutingPtr routing = routing_.current();
  WEFT_TRY(mgmt::ChainRoute route, route_of(*routing, c.chain));
  if (route.readable.empty()) return error(Code::kUnavailable, "chain {} has no serving replica", c.chain);
  const size_t n = route.readable.size();
  const size_t tries = std::min(n, std::max<size_t>(bounds.replicas_max, 1));
  const uint32_t timeout_ms = bounds.timeout_ms > 0 ? bounds.timeout_ms : options_.call_timeout_ms;
  const size_t first = first_replica(c, n);
  const pb::BatchReadRequest req = read_request(route.version, c, offset, dst.size());
  Status last;
  for (size_t i = 0; i < tries; ++i) {
    mgmt::TargetId target = route.readable[(first + i) % n];
    auto r = read_from_blocking(*routing, req, target, c, dst, timeout_ms);
    if (r) return r;
    keep_retryable(last, r.error());
    if (i + 1 < tries) {
      replica_failovers_.fetch_add(1);
      WEFT_LOG_DEBUG("read chunk {}:{}: {}; trying the next replica", c.ino, c.index, last);
    }
  }
  return error(last.with_context(fmt::format("read chunk {}:{} on chain {}", c.ino, c.index, c.chain)));
}

Task<Result<uint32_t>> ChunkIo::read_round(const mgmt::RoutingInfo& routing, ChunkAddress c, uint32_t offset,
                                           std::span<std::byte> dst) {
  WEFT_CO_TRY(mgmt::ChainRoute route, route_of(routing, c.chain));
  if (route.readable.empty()) co_return error(Code::kUnavailable, "chain {} has no serving replica", c.chain);
  size_t n = route.readable.size();
  size_t first = first_replica(c, n);
  Status last;
  for (size_t i = 0; i < n; ++i) {
    mgmt::TargetId target = route.readable[(first + i) % n];
    auto r = co_await read_from(routing, route.version, target, c, offset, dst);
    if (r) co_return r;
    keep_retryable(last, r.error());
    if (i + 1 < n) {
      replica_failovers_.fetch_add(1);
      WEFT_LOG_DEBUG("read chunk {}:{}: {}; trying the next replica", c.ino, c.index, last);
    }
  }
  co_return error(last);
}

Task<Result<uint32_t>> ChunkIo::read_once(ChunkAddress c, uint32_t offset, std::span<std::byte> dst) {
  RoutingPtr routing = routing_.current();
  auto r = co_await read_round(*routing, c, offset, dst);
  if (!r) co_return error(r.error().with_context(fmt::format("read chunk {}:{} on chain {}", c.ino, c.index, c.chain)));
  co_return r;
}

Task<Result<uint32_t>> ChunkIo::read(ChunkAddress c, uint32_t offset, std::span<std::byte> dst) {
  const auto deadline = SteadyClock::now() + std::chrono::milliseconds(options_.retry_time_ms_max);
  Status last;
  bool timed_out = false;
  Retry retry{.routing = routing_.version()};
  while (true) {
    RoutingPtr routing = routing_.current();
    auto r = co_await read_round(*routing, c, offset, dst);
    if (r) co_return r;
    last = r.error();
    if (!worth_retrying(last.code()) && last.code() != Code::kCorruption) break;
    bool again = co_await backoff(retry, deadline);
    if (!again) {
      timed_out = true;
      break;
    }
  }
  co_return error(gave_up(last, timed_out, options_.retry_time_ms_max,
                          fmt::format("read chunk {}:{} on chain {}", c.ino, c.index, c.chain)));
}

Task<Result<std::optional<uint64_t>>> ChunkIo::data_end_at(rpc::Endpoint ep, mgmt::TargetId target,
                                                           mgmt::ChainVersion cv, uint64_t ino, mgmt::ChainId chain,
                                                           uint32_t chunk_bytes, uint64_t first_index,
                                                           uint64_t end_index) {
  std::optional<uint64_t> end;
  pb::ListChunksRequest req;
  req.set_target_id(target);
  req.set_chain_id(chain);
  req.set_chain_version(cv);  // listed only where a read would be served
  req.set_count_max(1024);
  req.mutable_start()->set_inode(ino);
  req.mutable_start()->set_index(first_index);
  req.mutable_end()->set_inode(ino);
  req.mutable_end()->set_index(end_index);
  for (;;) {
    rpc::CallOptions o;
    o.timeout_ms = options_.call_timeout_ms;
    auto page = co_await rpc_.call<pb::ListChunksReply>(ep, methods::kListChunks, req, std::move(o));
    if (!page) co_return error(page.error().with_context(fmt::format("list chunks of {} on target {}", ino, target)));
    const uint64_t from = req.start().index();
    uint64_t prev = from;  // entries come in id order, from `from` on
    for (int i = 0; i < page->chunks_size(); ++i) {
      const auto& c = page->chunks(i);
      // The end bound is the server's to keep (one that predates it ignores
      // it): the file's entries end at the first past it, or of another inode.
      if (c.chunk().inode() > ino || (c.chunk().inode() == ino && c.chunk().index() >= end_index)) co_return end;
      if (c.chunk().inode() < ino || c.chunk().index() < prev || (i > 0 && c.chunk().index() == prev))
        co_return error(Code::kProtocol, "list chunks of {} on target {}: chunk {}:{} out of order (from index {})",
                        ino, target, c.chunk().inode(), c.chunk().index(), from);
      if (c.length() > chunk_bytes)
        co_return error(Code::kProtocol, "list chunks of {} on target {}: chunk {}:{} of {} bytes, past the chunk "
                        "size {}", ino, target, c.chunk().inode(), c.chunk().index(), c.length(), chunk_bytes);
      prev = c.chunk().index();
      if (c.length() > 0) end = prev * chunk_bytes + c.length();
    }
    if (!page->more()) co_return end;
    if (page->chunks().empty())
      co_return error(Code::kProtocol, "list chunks of {} on target {}: an empty page with more to come", ino, target);
    if (prev + 1 >= end_index) co_return end;
    req.mutable_start()->set_index(prev + 1);  // past every entry seen: each page moves on
  }
}

Task<Result<std::optional<uint64_t>>> ChunkIo::data_end(uint64_t ino, mgmt::ChainId chain, uint32_t chunk_bytes,
                                                        uint64_t first_index, uint64_t end_index) {
  using T = std::optional<uint64_t>;
  // One round: each serving replica in turn; the last one's error (keep_retryable).
  Round<T> round = [=, this]() -> Task<Result<T>> {
    RoutingPtr routing = routing_.current();
    WEFT_CO_TRY(mgmt::ChainRoute route, route_of(*routing, chain));
    if (route.readable.empty()) co_return error(Code::kUnavailable, "chain {} has no serving replica", chain);
    Status last;
    for (mgmt::TargetId target : route.readable) {
      auto ep = endpoint_of(*routing, target);
      if (!ep) {
        keep_retryable(last, ep.error());
        replica_failovers_.fetch_add(1);
        continue;
      }
      // Not `ep ? co_await ... : ...`: g++ 12 destroys the result of a
      // co_await inside ?: twice (a double free at the first failed listing).
      auto r = co_await data_end_at(*ep, target, route.version, ino, chain, chunk_bytes, first_index, end_index);
      if (r) co_return r;
      keep_retryable(last, r.error());
      replica_failovers_.fetch_add(1);
    }
    co_return error(last);
  };
  return retrying<T>(std::move(round), fmt::format("list the chunks of {} on chain {}", ino, chain));
}

// A group is one BatchRead: within the server's limits (storage/service_methods.h).
// Its buffers take at most its bytes plus two blocks per range (the engine
// reads whole 4 KiB blocks); a larger range (up to a whole chunk) goes alone.
static_assert(ChunkIo::kGroupBytesMax + uint64_t{storage::kBatchReadRangesMax} * 2 * 4096 <=
              storage::kBatchReadBytesMax);
static_assert(ChunkIo::kGroupRangesMax == static_cast<size_t>(storage::kBatchReadRangesMax));

std::vector<std::vector<size_t>> ChunkIo::group_reads(std::span<GroupedRead> reads) {
  RoutingPtr routing = routing_.current();
  struct Group {
    std::vector<size_t> members;
    size_t bytes = 0;
  };
  std::map<std::string, std::vector<Group>> by_server;
  for (size_t i = 0; i < reads.size(); ++i) {
    GroupedRead& g = reads[i];
    auto route = route_of(*routing, g.chunk.chain);
    auto address = route && !route->readable.empty()
                       ? routing->target_address(route->readable[first_replica(g.chunk, route->readable.size())])
                       : Result<std::string>(std::unexpected(Status(Code::kUnavailable, "no route")));
    if (!address) {
      g.retry_alone = true;
      continue;
    }
    auto& groups = by_server[*address];
    if (groups.empty() || groups.back().bytes + g.dst.size() > kGroupBytesMax ||
        groups.back().members.size() >= kGroupRangesMax)
      groups.emplace_back();
    groups.back().members.push_back(i);
    groups.back().bytes += g.dst.size();
  }
  // Round-robin over the servers: a caller that starts them in order within
  // a budget (submit_reads) keeps every server busy, not one after another.
  std::vector<std::vector<size_t>> out;
  for (size_t round = 0, left = by_server.size(); left > 0; ++round) {
    left = 0;
    for (auto& entry : by_server) {
      if (round >= entry.second.size()) continue;
      out.push_back(std::move(entry.second[round].members));
      left += round + 1 < entry.second.size() ? 1 : 0;
    }
  }
  return out;
}

Task<Result<void>> ChunkIo::read_group(std::span<GroupedRead> reads, std::vector<size_t> members) {
  RoutingPtr routing = routing_.current();
  pb::BatchReadRequest req;
  std::optional<rpc::Endpoint> ep;
  for (size_t i : members) {
    GroupedRead& g = reads[i];
    auto route = route_of(*routing, g.chunk.chain);
    if (!route || route->readable.empty()) {
      g.retry_alone = true;
      continue;
    }
    if (!ep) {
      auto e = endpoint_of(*routing, route->readable[first_replica(g.chunk, route->readable.size())]);
      if (!e) {
        for (size_t k : members) reads[k].retry_alone = true;
        co_return Result<void>{};
      }
      ep = *e;
    }
    auto* range = req.add_ranges();
    range->set_chain_id(g.chunk.chain);
    range->set_chain_version(route->version);
    set_chunk(range->mutable_chunk(), g.chunk);
    range->set_offset(g.offset);
    range->set_length(static_cast<uint32_t>(g.dst.size()));
  }
  std::erase_if(members, [&](size_t i) { return reads[i].retry_alone; });
  if (members.empty()) co_return Result<void>{};
  rpc::CallOptions o;
  o.timeout_ms = options_.call_timeout_ms;
  rpc::RawResponse raw;
  auto reply = co_await rpc_.call<pb::BatchReadReply>(*ep, methods::kBatchRead, req, std::move(o), &raw);
  // A reply broken as a whole places no range's bytes for sure: every range
  // is read alone. The payload is the ranges' bytes in order, each result's
  // `length` of them (an error's 0): bytes cut short or past the last
  // range's, like a count of results other than the ranges', leave where
  // each range's bytes start in doubt.
  uint64_t framed = 0;
  if (reply)
    for (const pb::RangeResult& rr : reply->results()) framed += rr.length();
  if (!reply || reply->results_size() != static_cast<int>(members.size()) || framed != raw.payload_len) {
    for (size_t i : members) reads[i].retry_alone = true;
    co_return Result<void>{};
  }
  size_t pos = 0;
  for (size_t k = 0; k < members.size(); ++k) {
    GroupedRead& g = reads[members[k]];
    const pb::RangeResult& rr = reply->results(static_cast<int>(k));
    std::span<const std::byte> bytes(raw.payload.data() + pos, rr.length());
    pos += rr.length();
    Code code = code_from_wire(rr.code());
    if (code == Code::kNotFound) {
      g.result = 0u;
      continue;
    }
    // holds_what_was_asked: no more bytes than g.dst takes.
    if (code != Code::kOk || !holds_what_was_asked(rr, g.offset, g.dst.size()) || crc32c(bytes) != rr.crc32c()) {
      g.retry_alone = true;
      continue;
    }
    std::copy(bytes.begin(), bytes.end(), g.dst.begin());
    g.result = rr.length();
  }
  co_return Result<void>{};
}

}  // namespace weft::client
