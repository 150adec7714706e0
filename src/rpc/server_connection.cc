#include "rpc/server_connection.h"

#include <new>

#include "common/fault.h"
#include "common/log_throttle.h"
#include "common/logging.h"
#include "proto/rpc.pb.h"

namespace weft::rpc {
namespace {

// Compares without an early exit, so timing does not reveal the token.
bool same_token(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

}  // namespace

ServerConnection::ServerConnection(Socket socket, std::shared_ptr<ServerState> server)
    : FrameStream(std::move(socket), server->options.limits),
      state_(std::move(server)),
      server_(*state_),
      hello_timer_(executor()) {
  server_.connections_gauge->add(1);
  set_write_stall_timeout(std::chrono::milliseconds(server_.options.write_stall_timeout_ms));
  set_read_stall_timeout(std::chrono::milliseconds(server_.options.read_stall_timeout_ms));
  apply_tcp_liveness(socket_.native_handle(), server_.options.tcp);
}

void ServerConnection::serve() {
  start();
  if (server_.options.hello_timeout_ms == 0) return;
  hello_timer_.expires_after(std::chrono::milliseconds(server_.options.hello_timeout_ms));
  // Weak: the timer does not keep a closed connection alive.
  std::weak_ptr<FrameStream> weak = shared_from_this();
  hello_timer_.async_wait([weak](asio::error_code ec) {
    if (ec) return;  // cancelled: the Hello arrived or the connection closed
    if (auto self = weak.lock()) static_cast<ServerConnection*>(self.get())->on_hello_timeout();
  });
}

// A peer that connects and never completes its Hello (a port scanner, a
// stuck or hostile client, a client host that lost power mid-connect) would
// otherwise hold its fd and read buffer for as long as its socket lives.
void ServerConnection::on_hello_timeout() {
  // hello_seen_, not authenticated_: an expiry already queued when a bad Hello
  // or a wrong token came in must not close that reply away or count twice.
  if (closed() || hello_seen_) return;
  server_.hello_timeouts->inc();
  static LogThrottle throttle;  // a port scan leaves one such connection per port and try
  if (auto held = throttle.admit())
    WEFT_LOG_WARN("closing connection from {}: no Hello within {} ms (hello_timeout_ms){}", peer(),
                  server_.options.hello_timeout_ms, LogThrottle::held_back(*held));
  close(Status(Code::kTimeout, fmt::format("{} sent no Hello within {} ms", peer(), server_.options.hello_timeout_ms)));
}

ServerConnection::~ServerConnection() { server_.connections_gauge->add(-1); }

Status ServerConnection::check_header(const FrameHeader& h) {
  if (h.is_response()) return Status(Code::kProtocol, "peer sent a response on a server connection");
  if (!authenticated_ && (h.method != kHello.wire() || h.payload_len != 0))
    return Status(Code::kProtocol, "first frame is not a Hello");
  // A peer nobody knows yet gets no 4 MiB read buffer for its first frame.
  if (!authenticated_ && h.body_len > kHelloBodyMax)
    return Status(Code::kProtocol, fmt::format("Hello of {} bytes (at most {})", h.body_len, kHelloBodyMax));
  return {};
}

PayloadTarget ServerConnection::payload_target(const FrameHeader& h) {
  if (WEFT_FAULT("rpc.server.payload_alloc.throw")) throw std::bad_alloc();  // tests: an allocation that fails
  PayloadTarget t;
  t.owned = Buffer::allocate(h.payload_len);
  t.data = t.owned.data();
  return t;
}

void ServerConnection::send_reply(const FrameHeader& request, uint16_t status, std::string body) {
  auto frame = std::make_shared<OutFrame>();
  frame->header.flags = kFlagResponse;
  frame->header.status = status;
  frame->header.method = request.method;
  frame->header.request_id = request.request_id;
  frame->body = std::move(body);
  send(std::move(frame));
}

void ServerConnection::handle_hello(const FrameHeader& h, const std::string& body) {
  hello_seen_ = true;
  hello_timer_.cancel();  // a Hello arrived; what follows is answered either way
  proto::Hello hello;
  if (!hello.ParseFromString(body)) {
    server_.protocol_errors->inc();
    send_reply(h, static_cast<uint16_t>(Code::kProtocol), "cannot parse Hello");
    close_after_flush(Status(Code::kProtocol, "bad Hello from " + peer()));
    set_ready();
    return;
  }
  if (!same_token(hello.cluster_token(), server_.options.cluster_token)) {
    server_.refused->inc();
    static LogThrottle throttle;  // a misconfigured client reconnects again and again
    if (auto held = throttle.admit())
      WEFT_LOG_WARN("refused connection from {} ({}): wrong cluster token{}", peer(), hello.peer_name(),
                    LogThrottle::held_back(*held));
    send_reply(h, static_cast<uint16_t>(Code::kUnauthenticated),
               fmt::format("wrong cluster token: {} belongs to another cluster (check cluster_token in your config)",
                           server_.options.name));
    close_after_flush(Status(Code::kUnauthenticated, "wrong cluster token from " + peer()));
    set_ready();
    return;
  }
  authenticated_ = true;
  client_id_ = hello.client_id();
  proto::HelloReply reply;
  reply.set_server_name(server_.options.name);
  reply.set_protocol_version(kProtocolVersion);
  send_reply(h, 0, reply.SerializeAsString());
  set_ready();
}

void ServerConnection::on_frame(const FrameHeader& h, std::string body, PayloadTarget payload) {
  if (!authenticated_) return handle_hello(h, body);
  if (h.method == kHello.wire()) {
    send_reply(h, static_cast<uint16_t>(Code::kProtocol), "Hello sent twice");
    return;
  }
  auto call = std::make_shared<ServerCall>();
  call->method = MethodId::from_wire(h.method);
  call->request_id = h.request_id;
  call->peer = peer();
  call->client_id = client_id_;
  call->connection_held = held_;
  call->body = std::move(body);
  call->payload = std::move(payload.owned);
  call->payload_len = h.payload_len;
  // The budget counts from when the request's header was read (its sender
  // stamped the budget as it began writing it: a payload that came slowly
  // after it spent the sender's time too), or from when this connection
  // stopped being read if it waited in the socket meanwhile.
  auto from = frame_header_at();
  if (auto waited = frame_waited_since()) from = std::min(from, *waited);
  call->deadline = h.timeout_ms ? from + std::chrono::milliseconds(h.timeout_ms)
                                : std::chrono::steady_clock::time_point::max();
  ++inflight_;
  inflight_bytes_ += call->payload_len;
  server_.dispatch(std::static_pointer_cast<ServerConnection>(shared_from_this()), std::move(call));
}

bool ServerConnection::should_pause_reading() {
  const auto& o = server_.options;
  return inflight_ >= o.inflight_max || inflight_bytes_ >= o.inflight_bytes_max ||
         queued_bytes() >= o.queued_reply_bytes_max;
}

void ServerConnection::reply(const std::shared_ptr<ServerCall>& call, const Status& status) {
  --inflight_;
  inflight_bytes_ -= call->payload_len;
  auto frame = std::make_shared<OutFrame>();
  frame->header.flags = kFlagResponse;
  frame->header.status = static_cast<uint16_t>(status.code());
  frame->header.method = call->method.wire();
  frame->header.request_id = call->request_id;
  size_t payload_bytes = 0;
  for (auto span : call->response_payload) payload_bytes += span.size();
  Status too_large = status.ok() ? frame_size_error(server_.options.limits, call->response_body.size(), payload_bytes,
                                                    "reply")
                                 : Status();
  if (!too_large.ok()) {
    // Sent, it would make the client close the connection and fail every call on it.
    static LogThrottle throttle;
    if (auto held = throttle.admit())
      WEFT_LOG_ERROR("method {}.{} of {}: {}; answered kInternal instead{}", call->method.service,
                     call->method.method, server_.options.name, too_large.message(), LogThrottle::held_back(*held));
    frame->header.status = static_cast<uint16_t>(Code::kInternal);
    frame->body = fmt::format("{}: {}", server_.options.name, too_large.message());
  } else if (status.ok()) {
    frame->body = std::move(call->response_body);
    frame->payload = std::move(call->response_payload);
    frame->keepalive = call;  // keeps response_keepalive and the payload memory alive
  } else {
    frame->body = status.message();
    if (frame->body.size() > server_.options.limits.body_max) frame->body.resize(server_.options.limits.body_max);
  }
  call->payload = Buffer();  // request payload no longer needed
  send(std::move(frame));
  resume_reading();
}

// The peer stopped reading: closing gives back its queued replies and what
// they hold (a storage server's read budget shares) instead of keeping them
// for as long as the peer stays connected.
void ServerConnection::on_write_stalled(std::chrono::steady_clock::duration stalled_for) {
  server_.write_stalls->inc();
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(stalled_for).count();
  WEFT_LOG_WARN("closing connection from {}: it has not read for {} ms ({} reply bytes waiting to be written; "
                "write_stall_timeout_ms = {})",
                peer(), ms, queued_bytes(), server_.options.write_stall_timeout_ms);
  close(Status(Code::kTimeout, fmt::format("{} has not read its replies for {} ms", peer(), ms)));
}

// The peer stopped in the middle of a request: closing gives back the
// payload buffer it announced (up to the frame limit) and its request slot.
void ServerConnection::on_read_stalled(std::chrono::steady_clock::duration stalled_for) {
  server_.read_stalls->inc();
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(stalled_for).count();
  static LogThrottle stalls;  // many stuck peers at once: once a second
  if (auto held = stalls.admit())
    WEFT_LOG_WARN("closing connection from {}: no byte of its request for {} ms (read_stall_timeout_ms = {}){}",
                  peer(), ms, server_.options.read_stall_timeout_ms, LogThrottle::held_back(*held));
  close(Status(Code::kTimeout, fmt::format("{} sent no byte of its request for {} ms", peer(), ms)));
}

void ServerConnection::on_closed(const Status& why) {
  hello_timer_.cancel();
  if (why.code() == Code::kProtocol) server_.protocol_errors->inc();
  WEFT_LOG_DEBUG("connection from {} closed: {}", peer(), why.message());
}

}  // namespace weft::rpc
