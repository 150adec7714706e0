// rpc/test_util.h — helpers for RPC tests: a raw blocking TCP client that
// speaks frames by hand, to send what a well-behaved client never would.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "rpc/frame.h"
#include "rpc/method.h"

namespace weft::rpc::testing {

class RawSocket {
 public:
  explicit RawSocket(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  ~RawSocket() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool connected() const { return connected_; }
  bool send_bytes(const void* p, size_t n) {
    auto* c = static_cast<const char*>(p);
    while (n > 0) {
      ssize_t w = ::send(fd_, c, n, MSG_NOSIGNAL);
      if (w <= 0) return false;
      c += w;
      n -= static_cast<size_t>(w);
    }
    return true;
  }
  bool send_frame(FrameHeader h, const std::string& body, const std::string& payload = "") {
    h.body_len = static_cast<uint32_t>(body.size());
    h.payload_len = static_cast<uint32_t>(payload.size());
    std::byte hdr[kFrameHeaderSize];
    encode_header(h, hdr);
    return send_bytes(hdr, sizeof(hdr)) && send_bytes(body.data(), body.size()) &&
           send_bytes(payload.data(), payload.size());
  }
  // A slow reader: from now on every recv takes at most `bytes` and is
  // followed by `pause`.
  void pace_reads(size_t bytes, std::chrono::milliseconds pause) {
    recv_max_ = bytes;
    recv_pause_ = pause;
  }
  // Reads exactly n bytes; false on EOF/error/timeout.
  bool recv_bytes(void* p, size_t n, int timeout_ms = 5000) {
    auto* c = static_cast<char*>(p);
    while (n > 0) {
      pollfd pfd{fd_, POLLIN, 0};
      if (::poll(&pfd, 1, timeout_ms) <= 0) return false;
      ssize_t r = ::recv(fd_, c, std::min(n, recv_max_), 0);
      if (r <= 0) return false;
      c += r;
      n -= static_cast<size_t>(r);
      if (recv_pause_.count() > 0) std::this_thread::sleep_for(recv_pause_);
    }
    return true;
  }
  // Reads one frame; false if the server closed the connection instead.
  bool recv_frame(FrameHeader* h, std::string* body, std::string* payload = nullptr) {
    std::byte hdr[kFrameHeaderSize];
    if (!recv_bytes(hdr, sizeof(hdr))) return false;
    if (decode_header(hdr, FrameLimits{}, h) != DecodeError::kOk) return false;
    body->resize(h->body_len);
    if (h->body_len && !recv_bytes(body->data(), h->body_len)) return false;
    std::string p(h->payload_len, '\0');
    if (h->payload_len && !recv_bytes(p.data(), h->payload_len)) return false;
    if (payload) *payload = std::move(p);
    return true;
  }
  // True if the peer closed the connection (EOF) within the timeout.
  bool closed_by_peer(int timeout_ms = 5000) {
    char c;
    pollfd pfd{fd_, POLLIN, 0};
    if (::poll(&pfd, 1, timeout_ms) <= 0) return false;
    return ::recv(fd_, &c, 1, 0) <= 0;
  }
  // Reads and drops whatever arrives until the peer closes (EOF or reset):
  // true if that happens within the timeout.
  bool drain_until_closed(int timeout_ms = 5000) {
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    std::vector<char> sink(1 << 16);
    while (std::chrono::steady_clock::now() < until) {
      pollfd pfd{fd_, POLLIN, 0};
      if (::poll(&pfd, 1, 50) <= 0) continue;
      if (::recv(fd_, sink.data(), sink.size(), 0) <= 0) return true;
    }
    return false;
  }
  void close_now() {
    ::close(fd_);
    fd_ = -1;
  }
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
  bool connected_ = false;
  size_t recv_max_ = SIZE_MAX;
  std::chrono::milliseconds recv_pause_{0};
};

}  // namespace weft::rpc::testing
