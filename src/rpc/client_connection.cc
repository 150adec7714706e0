#include "rpc/client_connection.h"

#include <sys/socket.h>
#include <unistd.h>

#include <asio/connect.hpp>
#include <asio/experimental/awaitable_operators.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read.hpp>
#include <asio/write.hpp>

#include "common/logging.h"
#include "common/wire_status.h"
#include "proto/rpc.pb.h"
#include "rpc/local_socket.h"

namespace weft::rpc {

using namespace asio::experimental::awaitable_operators;
using SteadyClock = std::chrono::steady_clock;

ClientConnection::ClientConnection(asio::io_context& io, Endpoint ep, std::shared_ptr<const ClientOptions> options,
                                   std::shared_ptr<ChannelBackoff> backoff)
    : FrameStream(Socket(io), options->limits),
      ep_(std::move(ep)),
      owned_options_(std::move(options)),
      options_(*owned_options_),
      backoff_(std::move(backoff)),
      sweep_timer_(io) {
  set_read_stall_timeout(std::chrono::milliseconds(options_.read_stall_timeout_ms));
  set_write_stall_timeout(std::chrono::milliseconds(options_.write_stall_timeout_ms));
}

void ClientConnection::connect() {
  auto self = std::static_pointer_cast<ClientConnection>(shared_from_this());
  asio::co_spawn(executor(), [self] { return self->run_connect(); }, closing_on_throw(self, "connect"));
}

void ClientConnection::connect_failed(Status why) {
  {
    std::lock_guard lock(backoff_->mu);
    backoff_->backoff_ms = backoff_->backoff_ms == 0 ? options_.backoff_min_ms
                                                     : std::min(backoff_->backoff_ms * 2, options_.backoff_max_ms);
    backoff_->retry_at = SteadyClock::now() + std::chrono::milliseconds(backoff_->backoff_ms);
    backoff_->last_error = why;
  }
  close(std::move(why));
}

Task<void> ClientConnection::run_connect() {
  auto self = shared_from_this();
  asio::ip::tcp::resolver resolver(executor());
  auto rec_results_result = co_await resolver.async_resolve(ep_.host, std::to_string(ep_.port), use_nothrow);
  auto& [rec, results] = rec_results_result;
  if (rec) {
    connect_failed(Status(Code::kUnavailable, fmt::format("cannot resolve {}: {}", ep_.to_string(), rec.message())));
    co_return;
  }
  if (closed()) co_return;  // closed while resolving: nothing to connect for
  std::string peer;  // a Unix socket's peer is named by the address it stands for
  if (connect_local_first(results)) {
    peer = fmt::format("{} (local socket)", ep_.to_string());
  } else {
    // Into socket_ itself, so that close() meanwhile cancels the connect.
    std::vector<asio::generic::stream_protocol::endpoint> addresses;
    for (const auto& entry : results) addresses.emplace_back(entry.endpoint());
    asio::steady_timer timer(executor(), std::chrono::milliseconds(options_.connect_timeout_ms));
    auto outcome = co_await (asio::async_connect(socket_, addresses, use_nothrow) || timer.async_wait(use_nothrow));
    if (outcome.index() == 1) {
      connect_failed(Status(Code::kUnavailable, fmt::format("connect to {} timed out after {} ms", ep_.to_string(),
                                                            options_.connect_timeout_ms)));
      co_return;
    }
    auto [cec, unused] = std::get<0>(outcome);
    if (cec == asio::error::connection_refused && options_.refusals) options_.refusals->refused(ep_);
    if (cec) {
      connect_failed(
          Status(Code::kUnavailable, fmt::format("cannot connect to {}: {}", ep_.to_string(), cec.message())));
      co_return;
    }
    apply_tcp_liveness(socket_.native_handle(), options_.tcp);
  }
  on_connected(std::move(peer));
  Status hs = co_await handshake();
  if (!hs.ok()) {
    if (hs.code() == Code::kUnauthenticated) WEFT_LOG_ERROR("{}", hs.message());
    connect_failed(hs);
    co_return;
  }
  {
    std::lock_guard lock(backoff_->mu);
    backoff_->backoff_ms = 0;
    backoff_->retry_at = {};
  }
  start();
  set_ready();
}

bool ClientConnection::connect_local_first(const asio::ip::tcp::resolver::results_type& results) {
  if (!options_.local_socket) return false;
  for (const auto& entry : results) {
    int fd = connect_local(entry.endpoint().address().to_string(), ep_.port);
    if (fd < 0) continue;
    asio::error_code ec;
    socket_.assign(asio::generic::stream_protocol(AF_UNIX, 0), fd, ec);
    if (!ec) return true;
    ::close(fd);
  }
  return false;
}

// Sends Hello and waits for its reply before any queued call is written;
// the peer must answer within connect_timeout_ms. A race, not a timer that
// closes the socket: when the answer and the timer's expiry are ready at
// once (the I/O thread was busy), the first to complete wins, and a handler
// already queued can no longer close a connection whose handshake succeeded
// (nor refer to a connection that is gone).
Task<Status> ClientConnection::handshake() {
  asio::steady_timer timer(executor(), std::chrono::milliseconds(options_.connect_timeout_ms));
  auto outcome = co_await (exchange_hello() || timer.async_wait(use_nothrow));
  if (outcome.index() == 0) co_return std::get<0>(std::move(outcome));
  co_return Status(Code::kUnavailable, fmt::format("{} did not answer the handshake within {} ms", ep_.to_string(),
                                                   options_.connect_timeout_ms));
}

Task<Status> ClientConnection::exchange_hello() {
  proto::Hello hello;
  hello.set_cluster_token(options_.cluster_token);
  hello.set_client_id(options_.client_id);
  hello.set_peer_name(options_.name);
  hello.set_protocol_version(kProtocolVersion);
  std::string body = hello.SerializeAsString();
  FrameHeader h;
  h.method = kHello.wire();
  h.request_id = 0;
  h.body_len = static_cast<uint32_t>(body.size());
  std::array<std::byte, kFrameHeaderSize> hdr;
  encode_header(h, hdr.data());
  std::array<asio::const_buffer, 2> out{asio::buffer(hdr), asio::buffer(body)};
  std::string where = ep_.to_string();
  auto wec_wn_result = co_await asio::async_write(socket_, out, use_nothrow);
  auto& [wec, wn] = wec_wn_result;
  if (wec) co_return Status(Code::kUnavailable, fmt::format("handshake with {}: {}", where, wec.message()));
  auto rec_rn_result = co_await asio::async_read(socket_, asio::buffer(hdr), use_nothrow);
  auto& [rec, rn] = rec_rn_result;
  if (rec)
    co_return Status(Code::kUnavailable, fmt::format("{} closed the connection during the handshake", where));
  FrameHeader reply;
  DecodeError err = decode_header(hdr.data(), options_.limits, &reply);
  // Not a Weft server (another process on the address): kUnavailable, so that callers go on to another one.
  if (err != DecodeError::kOk || !reply.is_response() || reply.payload_len != 0)
    co_return Status(Code::kUnavailable, fmt::format("bad handshake reply from {}: {} (not a Weft server?)", where,
                                                     decode_error_name(err)));
  // The body came with the header, as a rule: taken at once, not through an
  // asynchronous read whose completion would be queued behind an expiry of
  // the timer that was ready in the same poll (and lose the race to it).
  std::string rbody(reply.body_len, '\0');
  size_t got = 0;
  asio::error_code bec;
  if (!rbody.empty() && !socket_.non_blocking()) socket_.non_blocking(true, bec);
  while (!bec && got < rbody.size())
    got += socket_.read_some(asio::buffer(rbody.data() + got, rbody.size() - got), bec);
  if (bec == asio::error::would_block || bec == asio::error::try_again) {
    auto bec_bn_result =
        co_await asio::async_read(socket_, asio::buffer(rbody.data() + got, rbody.size() - got), use_nothrow);
    bec = std::get<0>(bec_bn_result);
  }
  if (bec) co_return Status(Code::kUnavailable, fmt::format("{} closed the connection during the handshake", where));
  if (reply.status != 0)
    co_return Status(code_from_wire(reply.status), fmt::format("{} refused the connection: {}", where, rbody));
  co_return Status();
}

void ClientConnection::start_call(MethodId method, std::string body, CallOptions options, Completion done) {
  if (closed()) {
    done(error(close_status_.ok() ? Status(Code::kDisconnected, "connection to " + ep_.to_string() + " is closed")
                                  : close_status_));
    return;
  }
  // Refused here, it fails alone; sent, the server would close the connection and fail every call on it.
  size_t payload_bytes = 0;
  for (auto span : options.payload) payload_bytes += span.size();
  if (Status s = frame_size_error(options_.limits, body.size(), payload_bytes, "request"); !s.ok()) {
    done(error(Code::kInvalidArgument, "call to {}: {}", ep_.to_string(), s.message()));
    return;
  }
  if (pending_.size() >= options_.pending_max_per_connection) {
    done(error(Code::kOverloaded, "{} calls already in flight to {}", pending_.size(), ep_.to_string()));
    return;
  }
  uint64_t id = next_id_++;
  uint32_t timeout_ms = options.timeout_ms ? options.timeout_ms : options_.call_timeout_ms;
  auto frame = std::make_shared<OutFrame>();
  frame->header.method = method.wire();
  frame->header.request_id = id;
  frame->header.timeout_ms = timeout_ms;
  frame->body = std::move(body);
  frame->payload = std::move(options.payload);
  frame->call_id = id;
  frame->deadline = SteadyClock::now() + std::chrono::milliseconds(timeout_ms);
  Pending& p = pending_[id];
  p.done = std::move(done);
  p.timeout_ms = timeout_ms;
  p.deadline = frame->deadline;
  p.dest = options.response_payload;
  p.frame = frame;
  const auto deadline = p.deadline;  // send() may close the stream, which clears pending_
  send(std::move(frame));
  if (options.cancel) {
    std::weak_ptr<FrameStream> weak = shared_from_this();
    auto ex = executor();
    const uint64_t registered = options.cancel->on_cancel([weak, ex, id] {
      asio::post(ex, [weak, id] {
        if (auto self = weak.lock())
          static_cast<ClientConnection*>(self.get())->abort_call(id, Status(Code::kCancelled, "call cancelled"));
      });
    });
    // send() may have closed the stream and failed the call already.
    if (auto it = pending_.find(id); it != pending_.end())
      it->second.cancel = CancelRegistration(options.cancel, registered);
    else if (registered != 0)
      options.cancel->forget(registered);
  }
  if (sweeping_ && deadline < sweep_timer_.expiry()) {
    sweep_timer_.cancel();  // the sweep loop wakes and waits for this earlier deadline
  } else if (!sweeping_) {
    sweeping_ = true;
    auto self = std::static_pointer_cast<ClientConnection>(shared_from_this());
    asio::co_spawn(executor(), [self] { return self->sweep_deadlines(); }, closing_on_throw(self, "deadline sweep"));
  }
}

// The timer waits for the earliest deadline (start_call cancels it when a
// call with an earlier one arrives), not a fixed tick: a periodic tick per
// connection woke an otherwise idle I/O thread hundreds of times a second.
// Every expired call leaves pending_ at once (expire), so the next wake-up
// is always the earliest remaining deadline.
Task<void> ClientConnection::sweep_deadlines() {
  auto self = shared_from_this();
  std::vector<uint64_t> expired;
  while (!pending_.empty() && !closed()) {
    auto now = SteadyClock::now();
    auto next = SteadyClock::time_point::max();
    expired.clear();
    for (auto& [id, p] : pending_) {
      if (p.deadline <= now)
        expired.push_back(id);
      else
        next = std::min(next, p.deadline);
    }
    for (uint64_t id : expired) expire(id);
    if (pending_.empty() || closed()) break;
    sweep_timer_.expires_at(next);
    co_await sweep_timer_.async_wait(use_nothrow);
  }
  sweeping_ = false;
}

// A call whose deadline passed ends now, also when its request is being
// written from the caller's memory or its reply payload is landing in the
// caller's buffer: the stream takes that memory back (a copy of the rest of
// the request is written, the rest of the reply is dropped), and the
// connection goes on serving its other calls.
void ClientConnection::expire(uint64_t id) {
  auto it = pending_.find(id);
  if (it == pending_.end()) return;
  abort_call(id, Status(Code::kTimeout, fmt::format("call to {} timed out after {} ms", ep_.to_string(),
                                                    it->second.timeout_ms)));
}

void ClientConnection::abort_call(uint64_t id, Status why) {
  auto it = pending_.find(id);
  if (it == pending_.end()) return;
  Pending& p = it->second;
  if (p.receiving) release_payload_target();
  if (p.frame) release_payload(*p.frame);
  complete(id, error(std::move(why)));
}

void ClientConnection::complete(uint64_t id, Result<RawResponse> r) {
  auto it = pending_.find(id);
  if (it == pending_.end()) return;
  Completion done = std::move(it->second.done);
  pending_.erase(it);
  done(std::move(r));
}

void ClientConnection::on_frame_written(uint64_t call_id) {
  auto it = pending_.find(call_id);
  if (it == pending_.end()) return;
  it->second.frame.reset();
}

// A reply to a request not wholly written (queued, or in the middle of its
// write) cannot be from a working server, and taking it would hand the
// request's memory back to the caller while a writev still reads it (or a
// queued frame is written later from it): the connection closes before the
// reply's body or payload is read.
Status ClientConnection::check_header(const FrameHeader& h) {
  if (!h.is_response()) return {};  // on_frame closes
  auto it = pending_.find(h.request_id);
  if (it == pending_.end() || !it->second.frame || it->second.frame->state == OutFrame::State::kDone) return {};
  std::string what =
      fmt::format("{} answered call {} before its request was wholly written", ep_.to_string(), h.request_id);
  it->second.on_close = Status(Code::kProtocol, what);
  return Status(Code::kDisconnected, what);  // the other calls: retryable
}

PayloadTarget ClientConnection::payload_target(const FrameHeader& h) {
  auto it = pending_.find(h.request_id);
  if (it != pending_.end() && it->second.dest.size() >= h.payload_len) {
    it->second.receiving = true;
    return PayloadTarget{it->second.dest.data(), Buffer()};
  }
  PayloadTarget t;
  t.owned = Buffer::allocate(h.payload_len);
  t.data = t.owned.data();
  return t;
}

void ClientConnection::on_frame(const FrameHeader& h, std::string body, PayloadTarget payload) {
  if (!h.is_response()) {
    close(Status(Code::kProtocol, ep_.to_string() + " sent a request on a client connection"));
    return;
  }
  answered_ = true;
  auto it = pending_.find(h.request_id);
  if (it == pending_.end()) return;  // answer to a call that timed out or was cancelled
  if (h.status != 0) {
    complete(h.request_id, error(status_from_wire(h.status, std::move(body))));
    return;
  }
  RawResponse r;
  r.body = std::move(body);
  r.payload_len = h.payload_len;
  r.payload_in_destination = h.payload_len > 0 && payload.owned.empty();
  r.payload = std::move(payload.owned);
  complete(h.request_id, std::move(r));
}

void ClientConnection::on_closed(const Status& why) {
  broken_.store(true, std::memory_order_release);
  if (why.code() == Code::kProtocol && !answered_)
    close_status_ = Status(Code::kUnavailable, why.message());  // no answer yet: maybe not a Weft server at all
  else
    close_status_ = why.code() == Code::kDisconnected || why.code() == Code::kProtocol ||
                            why.code() == Code::kUnavailable || why.code() == Code::kUnauthenticated
                        ? why
                        : Status(Code::kDisconnected, why.message());
  sweep_timer_.cancel();
  // close() cancelled every socket operation: no caller memory is in use any more.
  auto pending = std::move(pending_);
  pending_.clear();
  for (auto& [id, p] : pending) p.done(error(p.on_close ? std::move(*p.on_close) : close_status_));
}

}  // namespace weft::rpc
