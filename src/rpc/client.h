// rpc/client.h
// The RPC client: a pool of connections per endpoint, many calls in flight
// per connection matched by request id, per-call deadlines, cancellation,
// and reconnection with exponential backoff after connect failures.
// Request payloads are gathered from caller memory and response payloads
// can land directly in caller memory (CallOptions), never copied through
// protobuf. Thread-safe: call from any thread or coroutine; a call's
// completion resumes the caller on its own executor. A call made on one of
// the pool's I/O threads uses that thread's own connections to the endpoint
// (so no thread hop either way); other threads share round-robin ones.
// call_blocking() is the synchronous form for threads outside every IoPool:
// it runs on the caller's thread over a connection of that thread's own
// (rpc/sync_channel.h), with no I/O thread involved.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/buffer.h"
#include "common/status.h"
#include "rpc/cancel.h"
#include "rpc/endpoint.h"
#include "rpc/frame.h"
#include "rpc/io_pool.h"
#include "rpc/method.h"
#include "rpc/task.h"
#include "rpc/tcp_liveness.h"

namespace weft::rpc {

// Told of every connection attempt whose peer host answered that nothing
// listens on the port (ECONNREFUSED: a TCP reset, as from a host whose server
// process died). A timeout or an unreachable network is never reported: only
// a refusal says the process is gone. Called on an I/O thread or on the
// caller's thread (call_blocking): must not block.
class RefusalListener {
 public:
  virtual ~RefusalListener() = default;
  virtual void refused(const Endpoint& ep) = 0;
};

struct ClientOptions {
  std::string cluster_token;
  uint64_t client_id = 0;  // 0: random per Client
  std::string name = "client";
  size_t connections_per_endpoint = 1;
  uint32_t connect_timeout_ms = 3000;
  uint32_t call_timeout_ms = 30000;  // default per-call deadline
  uint32_t backoff_min_ms = 50;      // after a failed connect, wait before the next try
  uint32_t backoff_max_ms = 2000;
  size_t pending_max_per_connection = 65536;
  // A reply stopped this long in its middle closes its connection (its calls
  // fail as disconnected, retryable), also a reply to a call that already
  // timed out, which no call's deadline would close; 0: never.
  uint32_t read_stall_timeout_ms = 30000;
  // A request stopped this long in its middle, the server taking no byte
  // of it (hung, or not reading this connection), closes its connection
  // (its calls fail as disconnected, retryable), also a request whose call
  // already timed out, which is still written whole; 0: never.
  uint32_t write_stall_timeout_ms = 30000;
  // Keepalive and TCP_USER_TIMEOUT on every connection (also call_blocking's):
  // an idle connection to a server that vanished is found and closed, and
  // a request written to it fails instead of being retransmitted for
  // ~15 minutes. Keep tcp.user_timeout_ms above every call timeout used with
  // this Client (rpc/tcp_liveness.h).
  TcpLiveness tcp;
  FrameLimits limits;
  // A server on this host is reached through its Unix socket when it has
  // one (rpc/local_socket.h), else over TCP.
  bool local_socket = true;
  // Null: refusals are only errors of the calls (mgmt/refusal_reporter.h tells mgmtd).
  std::shared_ptr<RefusalListener> refusals;

  // A client of peers inside the cluster (mgmtd, meta, storage): a dead peer
  // is noticed after a 1 s connect timeout and retried within 500 ms.
  static ClientOptions in_cluster(std::string token, std::string name) {
    ClientOptions o;
    o.cluster_token = std::move(token);
    o.name = std::move(name);
    o.connect_timeout_ms = 1000;
    o.backoff_max_ms = 500;
    return o;
  }
};

struct CallOptions {
  uint32_t timeout_ms = 0;  // 0: ClientOptions::call_timeout_ms
  // Request payload, gathered as is; the memory must stay valid until the call completes.
  std::vector<std::span<const std::byte>> payload;
  // Where the response payload goes. Empty, or too small: an owned Buffer in RawResponse.
  std::span<std::byte> response_payload;
  CancelToken cancel;
  // Which of the endpoint's connections (ClientOptions::connections_per_endpoint,
  // modulo) carries the call; unset: the next in turn. Servers that call each
  // other from their handlers (chain members forwarding) put a call on the
  // lane of the calls it will wait on, minus one (its remaining hops): a
  // connection that stops being read when full (ServerOptions::inflight_max)
  // then never holds only calls that wait on one that cannot be read.
  std::optional<uint32_t> lane;
};

struct RawResponse {
  std::string body;
  size_t payload_len = 0;
  bool payload_in_destination = false;  // true: CallOptions::response_payload holds it
  Buffer payload;                       // otherwise here
};

class ClientConnection;
struct ChannelBackoff;
class SyncChannel;

// A request sent by Client::start_blocking whose answer is still to read
// (Client::finish_blocking). Move-only; dropped unfinished, it closes the
// channel it was sent on (the answer must not be read as another call's).
// Threading: finished, moved and dropped on the thread that started it
// (its channel is that thread's).
class PendingCall {
 public:
  PendingCall() = default;
  PendingCall(PendingCall&&) = default;
  PendingCall& operator=(PendingCall&& other) noexcept;
  ~PendingCall();

 private:
  friend class Client;
  std::shared_ptr<SyncChannel> channel_;
  Endpoint ep_;
  MethodId method_;
  uint64_t request_id_ = 0;
  std::chrono::steady_clock::time_point deadline_;
};

class Client {
 public:
  Client(IoPool& io, ClientOptions options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  Task<Result<RawResponse>> call_raw(const Endpoint& ep, MethodId method, std::string body,
                                     CallOptions options = {});

  // Typed call: Req and Resp are protobuf messages.
  template <class Resp, class Req>
  Task<Result<Resp>> call(const Endpoint& ep, MethodId method, const Req& req, CallOptions options = {},
                          RawResponse* raw = nullptr) {
    std::string body;
    if (!req.SerializeToString(&body)) co_return error(Code::kInvalidArgument, "cannot serialize request");
    auto r = co_await call_raw(ep, method, std::move(body), std::move(options));
    if (!r) co_return std::unexpected(std::move(r).error());
    Resp resp;
    if (!resp.ParseFromString(r->body))
      co_return error(Code::kProtocol, "cannot parse the reply of method {}.{} from {}", method.service,
                      method.method, ep.to_string());
    if (raw) *raw = std::move(*r);
    co_return resp;
  }

  // Blocking call on the calling thread's own connection to `ep` (made on
  // first use; at most kSyncChannelsPerThreadMax per thread, least recently
  // used dropped). One call at a time per thread; no cancellation. The reply
  // payload lands in `response_payload` when it fits. A failed connect starts
  // the same backoff as call_raw's. REQUIRES: not on an I/O thread of any IoPool.
  Result<RawResponse> call_blocking(const Endpoint& ep, MethodId method, const std::string& body,
                                    std::span<std::byte> response_payload = {}, uint32_t timeout_ms = 0);
  template <class Resp, class Req>
  Result<Resp> call_blocking(const Endpoint& ep, MethodId method, const Req& req,
                             std::span<std::byte> response_payload, uint32_t timeout_ms, RawResponse* raw = nullptr) {
    std::string body;
    if (!req.SerializeToString(&body)) return error(Code::kInvalidArgument, "cannot serialize request");
    WEFT_TRY(RawResponse r, call_blocking(ep, method, body, response_payload, timeout_ms));
    return parse_reply<Resp>(std::move(r), method, ep, raw);
  }
  // call_blocking in two halves on the calling thread: the request goes out
  // now, and finish_blocking reads its answer, so that the thread can make a
  // call to another endpoint meanwhile. Until then this thread's channel to
  // `ep` is busy (a call_blocking to `ep` here fails with kInternal); a
  // PendingCall dropped unfinished closes it. Same REQUIRES as call_blocking.
  Result<PendingCall> start_blocking(const Endpoint& ep, MethodId method, const std::string& body,
                                     uint32_t timeout_ms = 0);
  Result<RawResponse> finish_blocking(PendingCall& call, std::span<std::byte> response_payload = {});
  template <class Req>
  Result<PendingCall> start_blocking(const Endpoint& ep, MethodId method, const Req& req, uint32_t timeout_ms) {
    std::string body;
    if (!req.SerializeToString(&body)) return error(Code::kInvalidArgument, "cannot serialize request");
    return start_blocking(ep, method, body, timeout_ms);
  }
  template <class Resp>
  Result<Resp> finish_blocking(PendingCall& call) {
    const Endpoint ep = call.ep_;
    const MethodId method = call.method_;
    WEFT_TRY(RawResponse r, finish_blocking(call, std::span<std::byte>{}));
    return parse_reply<Resp>(std::move(r), method, ep, nullptr);
  }
  static constexpr size_t kSyncChannelsPerThreadMax = 64;

  uint64_t client_id() const { return options_.client_id; }
  const ClientOptions& options() const { return options_; }
  // Closes every connection; in-flight calls fail with kDisconnected.
  void close_all();
  // close_all(), and every later call fails at once with kDisconnected: for
  // an owner about to be destroyed whose coroutines may still be calling.
  void shut_down();
  size_t channel_count();  // for tests: endpoints with state here

 private:
  // The reply body of `method` from `ep` as a Resp; `raw` (if given) keeps the rest.
  template <class Resp>
  static Result<Resp> parse_reply(RawResponse r, MethodId method, const Endpoint& ep, RawResponse* raw) {
    Resp resp;
    if (!resp.ParseFromString(r.body))
      return error(Code::kProtocol, "cannot parse the reply of method {}.{} from {}", method.service, method.method,
                   ep.to_string());
    if (raw) *raw = std::move(r);
    return resp;
  }
  struct Channel {
    std::vector<std::shared_ptr<ClientConnection>> conns;  // for threads outside the pool
    std::vector<std::shared_ptr<ClientConnection>> local;  // per I/O thread: [thread * per_endpoint + k]
    size_t next = 0;
    std::shared_ptr<ChannelBackoff> backoff;
  };
  // The calling thread's blocking channel to `ep` (call_blocking), made if needed.
  Result<std::shared_ptr<SyncChannel>> sync_channel_for(const Endpoint& ep);
  // `lane`: CallOptions::lane.
  Result<std::shared_ptr<ClientConnection>> connection_for(const Endpoint& ep, std::optional<uint32_t> lane = std::nullopt);
  std::shared_ptr<ChannelBackoff> backoff_for(const Endpoint& ep);
  // REQUIRES: mu_. Drops the channels of endpoints whose connections all
  // broke and whose backoff ran out, once the map has doubled since the last
  // sweep: a long-running client talks to servers that move away, and each
  // kept its dead connections (and their read buffers) for ever.
  void sweep_channels_locked();

  IoPool& io_;
  ClientOptions options_;
  std::shared_ptr<const ClientOptions> shared_options_;  // outlives this Client in its connections
  std::mutex mu_;
  std::map<Endpoint, Channel> channels_;  // GUARDED_BY(mu_)
  size_t channels_after_sweep_ = 0;       // GUARDED_BY(mu_)
  // Expires with this Client: the per-thread channels of a Client that is
  // gone are never used again (they are dropped on the thread's next miss).
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);
  std::atomic<uint64_t> generation_{0};  // close_all() retires every per-thread channel
  std::atomic<bool> shut_{false};        // shut_down(): no call gets a connection any more
};

}  // namespace weft::rpc
