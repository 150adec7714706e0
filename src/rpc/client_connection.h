// rpc/client_connection.h (internal to rpc)
// The client end of one connection: connect + handshake, pending calls by
// request id, deadlines swept every few milliseconds, cancellation.
// Threading: all state lives on the connection's executor; start_call is
// posted there by Client. broken() may be read from any thread.
// Invariants: a pending call completes exactly once; when it completes, no
// byte of its request payload or response destination is used any more
// (FrameStream::release_payload and release_payload_target take the memory
// back from a write or read in progress), so a call that times out or is
// cancelled mid-transfer ends at once and the connection's other calls go on.
// A reply to a call whose request is not wholly written yet (a broken peer)
// closes the connection: that call fails with kProtocol, the others with
// kDisconnected (retryable). A connection-level protocol
// failure (a bad handshake reply, a malformed frame) before any reply fails
// calls with kUnavailable: the peer may be no Weft server at all.
#pragma once

#include <atomic>
#include <functional>
#include <optional>
#include <unordered_map>

#include <asio/ip/tcp.hpp>
#include <asio/steady_timer.hpp>

#include "common/clock.h"
#include "rpc/client.h"
#include "rpc/frame_stream.h"

namespace weft::rpc {

// Shared by the connections of one endpoint: when to try connecting again.
struct ChannelBackoff {
  std::mutex mu;
  std::chrono::steady_clock::time_point retry_at{};
  uint32_t backoff_ms = 0;
  Status last_error;
};

using Completion = std::move_only_function<void(Result<RawResponse>)>;

class ClientConnection final : public FrameStream {
 public:
  ClientConnection(asio::io_context& io, Endpoint ep, std::shared_ptr<const ClientOptions> options,
                   std::shared_ptr<ChannelBackoff> backoff);

  void connect();
  bool broken() const { return broken_.load(std::memory_order_acquire); }
  // On the connection's executor.
  void start_call(MethodId method, std::string body, CallOptions options, Completion done);

 protected:
  Status check_header(const FrameHeader& h) override;
  PayloadTarget payload_target(const FrameHeader& h) override;
  void on_frame(const FrameHeader& h, std::string body, PayloadTarget payload) override;
  void on_frame_written(uint64_t call_id) override;
  void on_closed(const Status& why) override;
  bool prefer_immediate_write() override { return pending_.size() <= 1; }

 private:
  struct Pending {
    Completion done;
    std::chrono::steady_clock::time_point deadline;
    uint32_t timeout_ms = 0;
    std::span<std::byte> dest;
    std::shared_ptr<OutFrame> frame;
    bool receiving = false;
    std::optional<Status> on_close;  // what this call fails with when the connection closes (else close_status_)
    CancelRegistration cancel;  // its callback on the caller's token, dropped with this entry
  };

  Task<void> run_connect();
  // Connects socket_ through the Unix socket of a server on this host
  // (rpc/local_socket.h) when there is one; false: connect over TCP.
  bool connect_local_first(const asio::ip::tcp::resolver::results_type& results);
  Task<Status> handshake();
  Task<Status> exchange_hello();  // handshake() bounds it in time
  Task<void> sweep_deadlines();
  void abort_call(uint64_t id, Status why);
  void expire(uint64_t id);  // the call's deadline passed
  void complete(uint64_t id, Result<RawResponse> r);
  void connect_failed(Status why);

  Endpoint ep_;
  std::shared_ptr<const ClientOptions> owned_options_;
  const ClientOptions& options_;
  std::shared_ptr<ChannelBackoff> backoff_;
  std::unordered_map<uint64_t, Pending> pending_;
  uint64_t next_id_ = 1;
  bool sweeping_ = false;
  // A reply came (the peer speaks Weft): a protocol failure from now on is
  // kProtocol; before, it is kUnavailable (a wrong process on the address,
  // and callers with several addresses go on to the next).
  bool answered_ = false;
  std::atomic<bool> broken_{false};
  Status close_status_;
  asio::steady_timer sweep_timer_;
};

}  // namespace weft::rpc
