// rpc/test_util.h — helpers for RPC tests: a raw blocking TCP client that
// speaks frames by hand, to send what a well-behaved client never would; a
// child process whose listener runs out of descriptors.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <spdlog/spdlog.h>

#include "rpc/frame.h"
#include "rpc/local_socket.h"
#include "rpc/method.h"

namespace weft::rpc::testing {

class RawSocket {
 public:
  // `local`: through the server's Unix socket (rpc/local_socket.h), not TCP.
  explicit RawSocket(uint16_t port, bool local = false) {
    if (local) {
      fd_ = connect_local("127.0.0.1", port);
      connected_ = fd_ >= 0;
      if (connected_) ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_NONBLOCK);
      return;
    }
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

// What a child process that ran out of descriptors saw.
struct OutOfDescriptors {
  int64_t value = -1;  // what the child returned; -1: it did not report
  std::string log;     // its stdout and stderr
};

// Forks. The child runs `child(listening)`: it listens and calls
// listening(port), which lowers its soft RLIMIT_NOFILE to its lowest free
// descriptor (so that every accept fails with EMFILE) while the parent makes
// `connections` connections (they wait in the listen backlog), and returns
// `hold` later; what the child then returns comes back here with its output.
inline OutOfDescriptors run_out_of_descriptors(const std::function<int64_t(std::function<void(uint16_t)>)>& child,
                                               int connections, std::chrono::milliseconds hold) {
  OutOfDescriptors out;
  std::unique_ptr<std::FILE, decltype(&std::fclose)> log(std::tmpfile(), &std::fclose);
  int pipe_fds[2];
  if (!log || ::pipe(pipe_fds) != 0) return out;
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(pipe_fds[0]);
    ::dup2(::fileno(log.get()), 1);  // spdlog's default logger writes to stdout
    ::dup2(::fileno(log.get()), 2);
    int64_t value = child([&](uint16_t port) {
      int lowest = ::fcntl(pipe_fds[1], F_DUPFD, 0);
      ::close(lowest);
      rlimit rl{};
      ::getrlimit(RLIMIT_NOFILE, &rl);
      rl.rlim_cur = static_cast<rlim_t>(lowest);
      ::setrlimit(RLIMIT_NOFILE, &rl);
      [[maybe_unused]] ssize_t n = ::write(pipe_fds[1], &port, sizeof port);
      std::this_thread::sleep_for(hold);
    });
    spdlog::default_logger()->flush();
    std::fflush(stdout);
    std::fflush(stderr);
    [[maybe_unused]] ssize_t n = ::write(pipe_fds[1], &value, sizeof value);
    ::_exit(0);
  }
  ::close(pipe_fds[1]);
  auto read_from_child = [&](void* p, size_t n) {
    pollfd pfd{pipe_fds[0], POLLIN, 0};
    return ::poll(&pfd, 1, 30000) == 1 && ::read(pipe_fds[0], p, n) == static_cast<ssize_t>(n);
  };
  uint16_t port = 0;
  if (read_from_child(&port, sizeof port)) {
    std::vector<std::unique_ptr<RawSocket>> sockets;
    for (int i = 0; i < connections; ++i) sockets.push_back(std::make_unique<RawSocket>(port));
    if (!read_from_child(&out.value, sizeof out.value)) out.value = -1;
  }
  ::close(pipe_fds[0]);
  ::kill(pid, SIGKILL);  // if it did not exit by itself
  ::waitpid(pid, nullptr, 0);
  std::fseek(log.get(), 0, SEEK_SET);
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, log.get())) > 0;) out.log.append(buf, n);
  return out;
}

// How many lines of `log` contain `what`.
inline size_t lines_with(const std::string& log, const std::string& what) {
  size_t count = 0;
  for (size_t at = 0; at < log.size();) {
    size_t end = log.find('\n', at);
    if (end == std::string::npos) end = log.size();
    if (log.substr(at, end - at).find(what) != std::string::npos) ++count;
    at = end + 1;
  }
  return count;
}

// The text of a server's /metrics page on 127.0.0.1:`port` ("" if it does not answer).
inline std::string scrape_metrics(uint16_t port) {
  RawSocket http(port);
  const std::string get = "GET /metrics HTTP/1.1\r\n\r\n";
  if (!http.send_bytes(get.data(), get.size())) return "";
  std::string text;
  char c;
  while (http.recv_bytes(&c, 1, 2000)) text += c;
  return text;
}

}  // namespace weft::rpc::testing
