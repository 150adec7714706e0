#include "rpc/sync_channel.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

#include "common/wire_status.h"
#include "proto/rpc.pb.h"
#include "rpc/frame_stream.h"
#include "rpc/local_socket.h"

namespace weft::rpc {
namespace {

using SteadyClock = std::chrono::steady_clock;

// Big enough for a header, a read reply's body and a 4 KiB payload in one recv.
constexpr size_t kReadBufferBytes = 16 * 1024;

long remaining_us(SteadyClock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline - SteadyClock::now()).count();
  return std::max<long>(left, 1);
}

}  // namespace

Result<int> connect_blocking(const Endpoint& ep, const ClientOptions& options, bool* refused) {
  if (refused != nullptr) *refused = false;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  std::string port = std::to_string(ep.port);
  if (int rc = ::getaddrinfo(ep.host.c_str(), port.c_str(), &hints, &res); rc != 0)
    return error(Code::kUnavailable, "cannot resolve {}: {}", ep.to_string(), gai_strerror(rc));
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> owned(res, &::freeaddrinfo);
  return connect_to_any(ep, res, options, refused);
}

// Tries each address in turn (a name may resolve to an IPv6 address nobody
// listens on before the IPv4 one that works), all within one connect timeout.
Result<int> connect_to_any(const Endpoint& ep, const addrinfo* addresses, const ClientOptions& options,
                           bool* refused) {
  const uint32_t timeout_ms = options.connect_timeout_ms;
  const auto deadline = SteadyClock::now() + std::chrono::milliseconds(timeout_ms);
  std::string why = "no address";
  bool tried = false, all_refused = true;
  if (refused != nullptr) *refused = false;
  for (const addrinfo* a = addresses; a != nullptr; a = a->ai_next) {
    auto left_ms = std::chrono::ceil<std::chrono::milliseconds>(deadline - SteadyClock::now()).count();
    if (left_ms <= 0) {
      why = fmt::format("timed out after {} ms", timeout_ms);
      all_refused = false;  // addresses left untried prove nothing
      break;
    }
    if (options.local_socket) {
      if (int fd = connect_local(a->ai_addr, ep.port); fd >= 0) {
        ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
        return fd;
      }
    }
    int fd = ::socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
      why = std::strerror(errno);
      all_refused = false;  // an address this host cannot even try proves nothing
      continue;
    }
    int err = 0;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) < 0) {
      err = errno;
      if (err == EINPROGRESS) {
        pollfd p{fd, POLLOUT, 0};
        int rc;
        do {
          rc = ::poll(&p, 1, static_cast<int>(left_ms));
        } while (rc < 0 && errno == EINTR);
        socklen_t len = sizeof err;
        if (rc == 0)
          err = ETIMEDOUT;
        else if (rc < 0 || ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
          err = errno;
      }
    }
    if (err != 0) {
      tried = true;
      all_refused &= err == ECONNREFUSED;
      why = err == ETIMEDOUT ? fmt::format("timed out after {} ms", timeout_ms) : std::strerror(err);
      ::close(fd);
      continue;
    }
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    apply_tcp_liveness(fd, options.tcp);
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    return fd;
  }
  if (refused != nullptr) *refused = tried && all_refused;
  return error(Code::kUnavailable, "cannot connect to {}: {}", ep.to_string(), why);
}

SyncChannel::SyncChannel(int fd, Endpoint ep, FrameLimits limits)
    : fd_(fd), ep_(std::move(ep)), limits_(limits), rbuf_(kReadBufferBytes) {}

SyncChannel::~SyncChannel() {
  if (fd_ >= 0) ::close(fd_);
}

Result<std::unique_ptr<SyncChannel>> SyncChannel::open(const Endpoint& ep, const ClientOptions& options) {
  bool refused = false;
  auto connected = connect_blocking(ep, options, &refused);
  if (refused && options.refusals) options.refusals->refused(ep);
  WEFT_TRY(int fd, std::move(connected));
  std::unique_ptr<SyncChannel> ch(new SyncChannel(fd, ep, options.limits));
  proto::Hello hello;
  hello.set_cluster_token(options.cluster_token);
  hello.set_client_id(options.client_id);
  hello.set_peer_name(options.name);
  hello.set_protocol_version(kProtocolVersion);
  FrameHeader h;
  h.method = kHello.wire();
  auto deadline = SteadyClock::now() + std::chrono::milliseconds(options.connect_timeout_ms);
  if (Status s = ch->send_frame(h, hello.SerializeAsString(), deadline); !s.ok())
    return error(Code::kUnavailable, "handshake with {}: {}", ep.to_string(), s.message());
  FrameHeader reply;
  std::string body;
  // Not a Weft server (another process on the address): kUnavailable, so that callers go on to another one.
  if (Status s = ch->read_frame(&reply, &body, deadline); !s.ok())
    return error(Code::kUnavailable, "handshake with {}: {}{}", ep.to_string(), s.message(),
                 s.code() == Code::kProtocol ? " (not a Weft server?)" : "");
  if (reply.payload_len != 0 || reply.request_id != 0)
    return error(Code::kUnavailable, "bad handshake reply from {} (not a Weft server?)", ep.to_string());
  if (reply.status != 0)
    return error(code_from_wire(reply.status), "{} refused the connection: {}", ep.to_string(), body);
  return ch;
}

Status SyncChannel::fail(Status why) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  return why;
}

Status SyncChannel::set_send_timeout(Deadline deadline) {
  long us = remaining_us(deadline);
  // Within 10% is close enough: saves a setsockopt per call at a fixed timeout.
  if (snd_timeout_us_ > 0 && us <= snd_timeout_us_ && us * 10 >= snd_timeout_us_ * 9) return {};
  timeval tv{us / 1000000, us % 1000000};
  if (::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) < 0)
    return fail(Status(Code::kInternal, fmt::format("setsockopt: {}", std::strerror(errno))));
  snd_timeout_us_ = us;
  return {};
}

Status SyncChannel::send_frame(const FrameHeader& header, const std::string& body, Deadline deadline) {
  FrameHeader h = header;
  h.body_len = static_cast<uint32_t>(body.size());
  h.payload_len = 0;
  std::array<std::byte, kFrameHeaderSize> hdr;
  encode_header(h, hdr.data());
  std::array<iovec, 2> iov{iovec{hdr.data(), hdr.size()}, iovec{const_cast<char*>(body.data()), body.size()}};
  size_t first = 0;
  while (first < iov.size()) {
    if (Status s = set_send_timeout(deadline); !s.ok()) return s;
    msghdr msg{};
    msg.msg_iov = &iov[first];
    msg.msg_iovlen = iov.size() - first;
    ssize_t n = ::sendmsg(fd_, &msg, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return fail(Status(Code::kTimeout, fmt::format("sending to {} timed out", ep_.to_string())));
    if (n < 0) return fail(Status(Code::kDisconnected, fmt::format("send to {}: {}", ep_.to_string(), std::strerror(errno))));
    auto left = static_cast<size_t>(n);
    while (first < iov.size() && left >= iov[first].iov_len) left -= iov[first++].iov_len;
    if (first < iov.size()) {
      iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + left;
      iov[first].iov_len -= left;
    }
  }
  return {};
}

// Waits in ppoll for input, not in a blocking recv: a thread blocked in recv
// sleeps on the socket's one wait queue, which a Unix peer also wakes each
// time it takes bytes this end sent (write space), so every request the
// server read woke the caller once for nothing: a context switch per call,
// costly on a VM. poll's wake-ups are filtered by the events asked for.
// wait_first: the caller knows nothing is there yet (a reply just asked
// for), so the recv that would only say EAGAIN is skipped: a syscall a call.
Status SyncChannel::recv_some(void* dst, size_t n, Deadline deadline, size_t* got, bool wait_first) {
  for (bool wait = wait_first;; wait = true) {
    if (wait) {
      if (SteadyClock::now() >= deadline)
        return fail(Status(Code::kTimeout, fmt::format("call to {} timed out", ep_.to_string())));
      const long us = remaining_us(deadline);
      const timespec timeout{us / 1000000, (us % 1000000) * 1000};
      pollfd p{fd_, POLLIN, 0};
      if (::ppoll(&p, 1, &timeout, nullptr) < 0 && errno != EINTR)
        return fail(Status(Code::kDisconnected, fmt::format("poll of {}: {}", ep_.to_string(), std::strerror(errno))));
    }
    ssize_t r = ::recv(fd_, dst, n, MSG_DONTWAIT);
    if (r > 0) {
      *got = static_cast<size_t>(r);
      return {};
    }
    if (r == 0) return fail(Status(Code::kDisconnected, fmt::format("connection closed by {}", ep_.to_string())));
    if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
    return fail(Status(Code::kDisconnected, fmt::format("read from {}: {}", ep_.to_string(), std::strerror(errno))));
  }
}

Status SyncChannel::fill(size_t n, Deadline deadline) {
  if (rend_ - rpos_ >= n) return {};
  if (rpos_ + n > rbuf_.size()) {
    std::memmove(rbuf_.data(), rbuf_.data() + rpos_, rend_ - rpos_);
    rend_ -= rpos_;
    rpos_ = 0;
  }
  while (rend_ - rpos_ < n) {
    size_t got = 0;
    // Nothing buffered: every byte that was there came with the last read (the
    // whole reply to a request just sent is still to come): wait before reading.
    if (Status s = recv_some(rbuf_.data() + rend_, rbuf_.size() - rend_, deadline, &got, /*wait_first=*/rend_ == rpos_);
        !s.ok())
      return s;
    rend_ += got;
  }
  return {};
}

Status SyncChannel::read_frame(FrameHeader* h, std::string* body, Deadline deadline) {
  if (Status s = fill(kFrameHeaderSize, deadline); !s.ok()) return s;
  DecodeError err = decode_header(rbuf_.data() + rpos_, limits_, h);
  if (err != DecodeError::kOk)
    return fail(Status(Code::kProtocol, fmt::format("malformed frame from {}: {}", ep_.to_string(), decode_error_name(err))));
  if (!h->is_response())
    return fail(Status(Code::kProtocol, fmt::format("{} sent a request on a client connection", ep_.to_string())));
  rpos_ += kFrameHeaderSize;
  if (h->body_len > rbuf_.size()) rbuf_.resize(h->body_len);  // bounded by limits_.body_max
  if (Status s = fill(h->body_len, deadline); !s.ok()) return s;
  body->assign(reinterpret_cast<const char*>(rbuf_.data() + rpos_), h->body_len);
  rpos_ += h->body_len;
  return {};
}

Status SyncChannel::read_payload(std::byte* dst, size_t n, Deadline deadline) {
  size_t buffered = std::min(rend_ - rpos_, n);
  std::memcpy(dst, rbuf_.data() + rpos_, buffered);
  rpos_ += buffered;
  for (size_t done = buffered; done < n;) {
    size_t got = 0;
    if (Status s = recv_some(dst + done, n - done, deadline, &got); !s.ok()) return s;
    done += got;
  }
  if (rpos_ == rend_) rpos_ = rend_ = 0;
  return {};
}

Result<RawResponse> SyncChannel::call(MethodId method, const std::string& body, std::span<std::byte> response_payload,
                                      uint32_t timeout_ms) {
  WEFT_TRY(Sent sent, send(method, body, timeout_ms));
  return receive(sent, response_payload);
}

Result<SyncChannel::Sent> SyncChannel::send(MethodId method, const std::string& body, uint32_t timeout_ms) {
  if (broken()) return error(Code::kDisconnected, "connection to {} is closed", ep_.to_string());
  if (awaiting_) return error(Code::kInternal, "connection to {} awaits the answer to another call", ep_.to_string());
  if (Status s = frame_size_error(limits_, body.size(), 0, "request"); !s.ok())
    return error(Code::kInvalidArgument, "call to {}: {}", ep_.to_string(), s.message());
  const auto deadline = SteadyClock::now() + std::chrono::milliseconds(timeout_ms);
  FrameHeader h;
  h.method = method.wire();
  h.request_id = next_id_++;
  h.timeout_ms = timeout_ms;
  if (Status s = send_frame(h, body, deadline); !s.ok()) return error(std::move(s));
  awaiting_ = true;
  return Sent{h.request_id, deadline};
}

void SyncChannel::abandon() {
  if (awaiting_) (void)fail(Status(Code::kCancelled, "call abandoned"));
  awaiting_ = false;
}

Result<RawResponse> SyncChannel::receive(const Sent& sent, std::span<std::byte> response_payload) {
  if (!awaiting_) return error(Code::kInternal, "no call to {} awaits an answer", ep_.to_string());
  awaiting_ = false;
  // A caller that comes for the answer after the call's deadline (it made
  // another call meanwhile) still takes one that is already here.
  const auto deadline = std::max(sent.deadline, SteadyClock::now() + std::chrono::milliseconds(1));
  FrameHeader reply;
  RawResponse r;
  if (Status s = read_frame(&reply, &r.body, deadline); !s.ok()) {
    if (s.code() == Code::kProtocol && !answered_) return error(Code::kUnavailable, "{}", s.message());  // see .h
    return error(std::move(s));
  }
  answered_ = true;
  if (reply.request_id != sent.request_id)
    return error(fail(Status(Code::kProtocol, fmt::format("{} answered request {} while {} was expected",
                                                          ep_.to_string(), reply.request_id, sent.request_id))));
  r.payload_len = reply.payload_len;
  std::byte* dst = nullptr;
  if (reply.payload_len > 0 && response_payload.size() >= reply.payload_len) {
    dst = response_payload.data();
    r.payload_in_destination = true;
  } else if (reply.payload_len > 0) {
    r.payload = Buffer::allocate(reply.payload_len);
    dst = r.payload.data();
  }
  if (reply.payload_len > 0) {
    if (Status s = read_payload(dst, reply.payload_len, deadline); !s.ok()) return error(std::move(s));
  } else if (rpos_ == rend_) {
    rpos_ = rend_ = 0;
  }
  if (reply.status != 0) return error(status_from_wire(reply.status, std::move(r.body)));
  return r;
}

}  // namespace weft::rpc
