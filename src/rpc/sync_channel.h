// rpc/sync_channel.h (internal to rpc; used through Client::call_blocking)
// A blocking connection owned by one calling thread: one call at a time,
// the request written and the reply read on the caller's own thread. For a
// small synchronous call (a 4 KiB read) this replaces two thread hand-offs
// (caller -> I/O thread -> caller) and the I/O thread's epoll round by one
// send and one blocking recv: on a 2-core machine the hand-offs cost more
// CPU and scheduler delay than the network.
// Same wire format and handshake as ClientConnection. The reply payload
// lands in the caller's buffer when it fits (else in an owned Buffer).
// Any error (timeout, short read, malformed frame, unexpected request id)
// breaks the channel: a late reply must never be taken for the next call's.
// Threading: not thread-safe; one owner thread.
#pragma once

#include <chrono>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "rpc/client.h"

struct addrinfo;

namespace weft::rpc {

// Connects to the first of `addresses` (a getaddrinfo list for `ep`) that
// takes the connection, all within options.connect_timeout_ms: a blocking
// socket with TCP_NODELAY and options.tcp. On failure *refused (if given)
// tells whether every address tried answered ECONNREFUSED (nothing listens
// there; a timeout or an unreachable network is not a refusal).
// (connect_blocking resolves and calls it; exposed for tests.)
Result<int> connect_to_any(const Endpoint& ep, const addrinfo* addresses, const ClientOptions& options,
                           bool* refused = nullptr);
// Resolves `ep` and connect_to_any()s it (the caller owns the descriptor).
// Also how mgmtd probes whether a server still listens (mgmt/refusal_probe).
Result<int> connect_blocking(const Endpoint& ep, const ClientOptions& options, bool* refused = nullptr);

class SyncChannel {
 public:
  // Connects within options.connect_timeout_ms and does the Hello handshake.
  static Result<std::unique_ptr<SyncChannel>> open(const Endpoint& ep, const ClientOptions& options);
  ~SyncChannel();
  SyncChannel(const SyncChannel&) = delete;
  SyncChannel& operator=(const SyncChannel&) = delete;

  Result<RawResponse> call(MethodId method, const std::string& body, std::span<std::byte> response_payload,
                           uint32_t timeout_ms);
  // call() in two halves: the request goes out, and receive() reads its
  // answer later. In between the channel is awaiting(): no other call on it.
  struct Sent {
    uint64_t request_id = 0;
    std::chrono::steady_clock::time_point deadline;
  };
  Result<Sent> send(MethodId method, const std::string& body, uint32_t timeout_ms);
  Result<RawResponse> receive(const Sent& sent, std::span<std::byte> response_payload);
  // A sent request whose answer nobody will read: the connection goes (the
  // answer would be taken for the next call's).
  void abandon();
  bool awaiting() const { return awaiting_; }
  bool broken() const { return fd_ < 0; }
  const Endpoint& endpoint() const { return ep_; }

 private:
  using Deadline = std::chrono::steady_clock::time_point;
  SyncChannel(int fd, Endpoint ep, FrameLimits limits);
  Status fail(Status why);  // closes the socket, returns `why`
  Status send_frame(const FrameHeader& h, const std::string& body, Deadline deadline);
  // Reads one frame header into *h and its body; the payload is left to read_payload.
  Status read_frame(FrameHeader* h, std::string* body, Deadline deadline);
  Status read_payload(std::byte* dst, size_t n, Deadline deadline);
  // Makes sure at least n bytes are buffered (n <= rbuf_.size()).
  Status fill(size_t n, Deadline deadline);
  Status recv_some(void* dst, size_t n, Deadline deadline, size_t* got, bool wait_first = false);
  Status set_send_timeout(Deadline deadline);

  int fd_ = -1;
  Endpoint ep_;
  FrameLimits limits_;
  uint64_t next_id_ = 1;
  bool awaiting_ = false;  // send() done, receive() not yet
  bool answered_ = false;  // a reply came: a malformed frame is kProtocol (before: kUnavailable, maybe no Weft server)
  std::vector<std::byte> rbuf_;
  size_t rpos_ = 0, rend_ = 0;
  long snd_timeout_us_ = -1;  // SO_SNDTIMEO currently set
};

}  // namespace weft::rpc
