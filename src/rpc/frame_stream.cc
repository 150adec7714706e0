#include "rpc/frame_stream.h"

#include <linux/sockios.h>
#include <sys/ioctl.h>

#include <algorithm>
#include <cstring>

#include <asio/bind_cancellation_slot.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/write.hpp>

#include "common/log_throttle.h"
#include "common/logging.h"
#include "rpc/local_socket.h"

namespace weft::rpc {
namespace {

// How long after a pause frames read are still taken for ones that waited
// through it, at most (FrameStream::draining_).
constexpr auto kDrainWindow = std::chrono::milliseconds(200);

constexpr size_t kReadBufferBytes = 64 * 1024;
constexpr size_t kWriteBatchFramesMax = 128;
constexpr size_t kWriteBatchBuffersMax = 512;  // under IOV_MAX (1024)

// TCP_NODELAY on a TCP socket; a Unix socket has no Nagle delay.
void set_no_delay(FrameStream::Socket& s) {
  if (is_local_socket(s.native_handle())) return;
  asio::error_code ec;
  s.set_option(asio::ip::tcp::no_delay(true), ec);
}

// Header, body and payload spans of one frame, skipping empty parts.
// A request leaves the queue: its header carries what is left of the call's
// budget (at least 1 ms: 0 would mean none).
void stamp_budget(OutFrame& f) {
  if (f.deadline == std::chrono::steady_clock::time_point{}) return;
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(f.deadline - std::chrono::steady_clock::now());
  f.header.timeout_ms = static_cast<uint32_t>(std::clamp<int64_t>(left.count(), 1, f.header.timeout_ms));
  encode_header(f.header, f.encoded.data());
}

void append_buffers(const OutFrame& f, std::vector<asio::const_buffer>& out) {
  out.emplace_back(f.encoded.data(), f.encoded.size());
  if (!f.body.empty()) out.emplace_back(f.body.data(), f.body.size());
  for (auto p : f.payload)
    if (!p.empty()) out.emplace_back(p.data(), p.size());
}

}  // namespace

Status frame_size_error(const FrameLimits& limits, size_t body, size_t payload, std::string_view what) {
  // The limits are uint32_t: within them, the lengths fit in the header.
  if (body > limits.body_max)
    return Status(Code::kInvalidArgument,
                  fmt::format("{} body of {} bytes is over the limit ({} bytes)", what, body, limits.body_max));
  if (payload > limits.payload_max)
    return Status(Code::kInvalidArgument, fmt::format("{} payload of {} bytes is over the limit ({} bytes)", what,
                                                      payload, limits.payload_max));
  return {};
}

FrameStream::FrameStream(Socket socket, FrameLimits limits)
    : socket_(std::move(socket)),
      limits_(limits),
      rbuf_(kReadBufferBytes),
      resume_(socket_.get_executor()),
      stall_timer_(socket_.get_executor()),
      read_stall_timer_(socket_.get_executor()) {
  if (!socket_.is_open()) {  // a client's, before its connect: on_connected() names it
    peer_ = "unknown peer";
    return;
  }
  peer_ = describe_peer(socket_.native_handle());
  set_no_delay(socket_);
}

void FrameStream::on_connected(std::string peer) {
  peer_ = peer.empty() ? describe_peer(socket_.native_handle()) : std::move(peer);
  set_no_delay(socket_);
}

void FrameStream::close_for(std::exception_ptr e, const char* loop) {
  std::string what = "an unknown exception";
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    what = x.what();
  } catch (...) {
  }
  WEFT_LOG_ERROR("closing connection with {}: its {} failed: {}", peer_, loop, what);
  close(Status(Code::kInternal, fmt::format("connection with {}: its {} failed: {}", peer_, loop, what)));
}

void FrameStream::start() {
  asio::co_spawn(executor(), [self = shared_from_this()] { return self->read_loop(); },
                 closing_on_throw(shared_from_this(), "read loop"));
}

std::shared_ptr<OutFrame> FrameStream::send(std::shared_ptr<OutFrame> frame) {
  if (closed_) {
    frame->dropped = true;
    return frame;
  }
  frame->header.body_len = static_cast<uint32_t>(frame->body.size());
  size_t payload = 0;
  for (auto s : frame->payload) payload += s.size();
  frame->header.payload_len = static_cast<uint32_t>(payload);
  encode_header(frame->header, frame->encoded.data());
  frame->queued_bytes = kFrameHeaderSize + frame->body.size() + payload;
  queued_bytes_ += frame->queued_bytes;
  outq_.push_back(frame);
  if (ready_ && !writing_ && outq_.size() == 1 && prefer_immediate_write() && try_write_now()) return frame;
  if (ready_ && !writing_) {
    writing_ = true;
    asio::co_spawn(executor(), [self = shared_from_this()] { return self->write_loop(); },
                   closing_on_throw(shared_from_this(), "write loop"));
  }
  return frame;
}

void FrameStream::uncount(OutFrame& f) {
  queued_bytes_ -= std::min(queued_bytes_, std::exchange(f.queued_bytes, 0));
}

// With nothing else to batch with, one non-blocking writev now saves a trip
// through the event loop. A partial write leaves the rest to write_loop.
bool FrameStream::try_write_now() {
  auto& f = outq_.front();
  if (f->payload.size() + 2 > 64) return false;  // asio gathers at most 64 buffers per call
  std::vector<asio::const_buffer> buffers;
  buffers.reserve(f->payload.size() + 2);
  stamp_budget(*f);
  append_buffers(*f, buffers);
  size_t total = asio::buffer_size(buffers);
  asio::error_code ec;
  if (!socket_.non_blocking()) socket_.non_blocking(true, ec);
  f->state = OutFrame::State::kWriting;
  size_t n = socket_.write_some(buffers, ec);
  if (ec == asio::error::would_block || ec == asio::error::try_again) {
    n = 0;
  } else if (ec) {
    close(Status(Code::kDisconnected, fmt::format("write to {}: {}", peer_, ec.message())));
    return true;
  }
  if (n == total) {
    auto done = std::move(outq_.front());
    outq_.pop_front();
    done->state = OutFrame::State::kDone;
    uncount(*done);
    if (done->call_id != 0) on_frame_written(done->call_id);
    return true;
  }
  // Nothing went out (the socket is full): the frame is queued as before, so
  // a call that ends meanwhile drops it and write_loop stamps its budget
  // again when it is written.
  if (n == 0) f->state = OutFrame::State::kQueued;
  first_frame_written_ = n;  // write_loop goes on after these bytes
  return false;
}

void FrameStream::release_payload(OutFrame& f) {
  if (f.state == OutFrame::State::kQueued) {
    f.dropped = true;
    return;
  }
  if (f.state != OutFrame::State::kWriting || f.payload.empty()) return;
  size_t total = 0;
  for (auto p : f.payload) total += p.size();
  auto copy = std::make_shared<Buffer>(Buffer::allocate(total));
  size_t at = 0;
  for (auto p : f.payload) {
    if (!p.empty()) std::memcpy(copy->data() + at, p.data(), p.size());
    at += p.size();
  }
  f.payload = {std::span<const std::byte>(copy->data(), total)};
  f.keepalive = std::move(copy);
  payload_moved_ = true;  // write_loop's gathered buffers still point at the old spans
}

void FrameStream::set_ready() {
  ready_ = true;
  if (!outq_.empty() && !writing_ && !closed_) {
    writing_ = true;
    asio::co_spawn(executor(), [self = shared_from_this()] { return self->write_loop(); },
                   closing_on_throw(shared_from_this(), "write loop"));
  }
}

void FrameStream::close_after_flush(Status why) {
  if (outq_.empty() && !writing_) return close(std::move(why));
  close_after_flush_ = true;
  close_reason_ = std::move(why);
}

void FrameStream::close(Status why) {
  if (closed_) return;
  closed_ = true;
  asio::error_code ec;
  socket_.shutdown(Socket::shutdown_both, ec);
  socket_.close(ec);
  resume_.cancel();
  stall_timer_.cancel();
  read_stall_timer_.cancel();
  for (auto& f : outq_)
    if (f->state == OutFrame::State::kQueued) f->dropped = true;
  queued_bytes_ = 0;
  on_closed(why);
}

void FrameStream::resume_reading() {
  if (paused_) resume_.cancel();
}

Task<bool> FrameStream::fill(size_t n) {
  if (rend_ - rpos_ >= n) co_return true;
  if (rpos_ + n > rbuf_.size()) {
    std::memmove(rbuf_.data(), rbuf_.data() + rpos_, rend_ - rpos_);
    rend_ -= rpos_;
    rpos_ = 0;
    if (n > rbuf_.size()) rbuf_.resize(n);
  }
  while (rend_ - rpos_ < n) {
    auto ec_got_result = co_await socket_.async_read_some(asio::buffer(rbuf_.data() + rend_, rbuf_.size() - rend_),
                                                      use_nothrow);
    auto& [ec, got] = ec_got_result;
    if (ec) {
      if (!closed_) {
        if (ec == asio::error::eof && rend_ == rpos_)
          close(Status(Code::kDisconnected, "connection closed by " + peer_));
        else if (ec == asio::error::eof)
          close(Status(Code::kDisconnected, "connection closed by " + peer_ + " in the middle of a frame"));
        else
          close(Status(Code::kDisconnected, "read from " + peer_ + ": " + ec.message()));
      }
      co_return false;
    }
    const bool short_read = got < rbuf_.size() - rend_;
    rend_ += got;
    if (in_frame_) read_progress_at_ = std::chrono::steady_clock::now();
    if (draining_ && short_read) {  // the socket held no more: what is buffered here waited, later frames did not
      draining_ = false;
      waited_bytes_ = rend_ - rpos_;
    }
  }
  co_return true;
}

// Reads straight into `dest` (asio's speculative reads: no epoll_ctl per
// read, as an async_wait would cost). Each read is bound to payload_cancel_:
// release_payload_target() cancels the one pending (on this stream's one
// thread, a pending read has copied nothing yet) and the rest goes to rbuf_
// (free: everything buffered went to the payload first), so `dest` is the
// caller's again as soon as it returns.
Task<bool> FrameStream::read_payload(std::byte* dest, size_t len) {
  payload_dest_ = dest;
  asio::error_code ec;
  for (size_t got = 0; got < len && !closed_;) {
    std::byte* to = payload_dest_ ? payload_dest_ + got : rbuf_.data();
    size_t want = payload_dest_ ? len - got : std::min(len - got, rbuf_.size());
    auto [e, n] = co_await socket_.async_read_some(
        asio::buffer(to, want), asio::bind_cancellation_slot(payload_cancel_.slot(), use_nothrow));
    got += n;
    if (n > 0) read_progress_at_ = std::chrono::steady_clock::now();
    if (e == asio::error::operation_aborted && !closed_) continue;  // released: the rest goes to scratch
    if (e) {
      ec = e;
      break;
    }
  }
  if (ec && !closed_)
    close(Status(Code::kDisconnected, ec == asio::error::eof
                                          ? fmt::format("connection closed by {} in the middle of a payload", peer_)
                                          : fmt::format("{} disconnected in the middle of a payload: {}", peer_,
                                                        ec.message())));
  co_return !closed_;
}

void FrameStream::release_payload_target() {
  if (!payload_dest_) return;
  payload_dest_ = nullptr;
  payload_cancel_.emit(asio::cancellation_type::total);
}

Task<void> FrameStream::read_loop() {
  auto self = shared_from_this();  // keeps the stream alive while reading
  while (!closed_) {
    if (!co_await fill(kFrameHeaderSize)) co_return;
    FrameHeader h;
    DecodeError err = decode_header(rbuf_.data() + rpos_, limits_, &h);
    if (err != DecodeError::kOk) {
      static LogThrottle malformed;  // a peer speaking another protocol, or hostile: once a second
      if (auto held = malformed.admit())
        WEFT_LOG_WARN("closing connection with {}: malformed frame ({}){}", peer_, decode_error_name(err),
                      LogThrottle::held_back(*held));
      close(Status(Code::kProtocol, fmt::format("malformed frame from {}: {}", peer_, decode_error_name(err))));
      co_return;
    }
    if (Status s = check_header(h); !s.ok()) {
      static LogThrottle refused;
      if (auto held = refused.admit())
        WEFT_LOG_WARN("closing connection with {}: {}{}", peer_, s.message(), LogThrottle::held_back(*held));
      close(std::move(s));
      co_return;
    }
    // A frame read while the backlog of a pause drains, or that starts within
    // what was buffered when it had drained, waited through the pause.
    if (draining_ && std::chrono::steady_clock::now() - resumed_at_ > kDrainWindow) draining_ = false;
    const uint64_t frame_bytes = kFrameHeaderSize + uint64_t{h.body_len} + h.payload_len;
    frame_header_at_ = std::chrono::steady_clock::now();
    frame_waited_since_.reset();
    if (draining_ || waited_bytes_ > 0) frame_waited_since_ = paused_at_;
    if (!draining_) waited_bytes_ -= std::min(waited_bytes_, frame_bytes);
    rpos_ += kFrameHeaderSize;
    if (h.body_len + uint64_t{h.payload_len} > rend_ - rpos_) begin_frame_read();
    if (!co_await fill(h.body_len)) co_return;
    std::string body(reinterpret_cast<const char*>(rbuf_.data() + rpos_), h.body_len);
    rpos_ += h.body_len;
    PayloadTarget target;
    if (h.payload_len > 0) {
      target = payload_target(h);
      size_t buffered = std::min<size_t>(rend_ - rpos_, h.payload_len);
      std::memcpy(target.data, rbuf_.data() + rpos_, buffered);
      rpos_ += buffered;
      if (buffered < h.payload_len) {
        if (!co_await read_payload(target.data + buffered, h.payload_len - buffered)) {
          payload_dest_ = nullptr;  // closed: nothing is read into it any more
          co_return;
        }
        if (!payload_dest_ && target.owned.empty()) target.data = nullptr;  // released meanwhile: dropped
        payload_dest_ = nullptr;
      }
    }
    in_frame_ = false;
    if (closed_) co_return;
    if (rpos_ == rend_) rpos_ = rend_ = 0;
    on_frame(h, std::move(body), std::move(target));
    frame_waited_since_.reset();
    if (!closed_ && should_pause_reading()) {
      // Frames that arrive meanwhile wait in the socket: sent at the earliest
      // about now (those before were read on the way here).
      if (!draining_ && waited_bytes_ == 0) paused_at_ = std::chrono::steady_clock::now();
      while (!closed_ && should_pause_reading()) {
        paused_ = true;
        resume_.expires_at(asio::steady_timer::time_point::max());
        co_await resume_.async_wait(use_nothrow);
        paused_ = false;
      }
      draining_ = true;
      resumed_at_ = std::chrono::steady_clock::now();
    }
  }
}

// Writes batches of frames with non-blocking writev calls of its own,
// waiting for the socket to take more when it is full (rather than through
// asio::async_write): each call's count is known at once, in the handler
// that made it, so a frame whose last byte went to the kernel is marked
// kDone before any other handler runs, in particular before one that reads
// an answer to it. (With async_write the completion of a writev could run
// after a read made later: a real answer would look early.)
Task<void> FrameStream::write_loop() {
  auto self = shared_from_this();
  write_progress_at_ = std::chrono::steady_clock::now();  // frames wait from now on
  watch_writes();
  std::vector<asio::const_buffer> buffers;
  std::vector<std::shared_ptr<OutFrame>> batch;
  std::vector<size_t> ends;  // where each frame of the batch ends, in bytes of `buffers`
  asio::error_code ec;
  if (!socket_.non_blocking()) socket_.non_blocking(true, ec);
  while (!closed_ && !ec) {
    buffers.clear();
    batch.clear();
    ends.clear();
    size_t batch_bytes = 0;
    // The first frame always goes, however many spans it has (writev takes them 64 at a time).
    while (!outq_.empty() && batch.size() < kWriteBatchFramesMax) {
      if (!batch.empty() && buffers.size() + 2 + outq_.front()->payload.size() > kWriteBatchBuffersMax) break;
      auto f = std::move(outq_.front());
      outq_.pop_front();
      if (f->dropped) {
        uncount(*f);
        continue;
      }
      if (f->state == OutFrame::State::kQueued) stamp_budget(*f);  // not one try_write_now() began
      f->state = OutFrame::State::kWriting;
      size_t first_buffer = buffers.size();
      append_buffers(*f, buffers);
      for (size_t i = first_buffer; i < buffers.size(); ++i) batch_bytes += buffers[i].size();
      ends.push_back(batch_bytes);
      batch.push_back(std::move(f));
    }
    if (batch.empty()) break;
    size_t written = std::exchange(first_frame_written_, 0);  // try_write_now() sent the start of the first frame
    size_t first = 0;  // buffers[first..] are left to write
    auto skip = [&](size_t bytes) {  // advances buffers[first..] past `bytes` sent
      while (bytes > 0) {
        size_t k = std::min(bytes, buffers[first].size());
        buffers[first] += k;
        bytes -= k;
        if (buffers[first].size() == 0) ++first;
      }
    };
    skip(written);
    size_t frames_written = 0;
    payload_moved_ = false;
    while (first < buffers.size()) {
      size_t n = socket_.write_some(std::span<const asio::const_buffer>(buffers).subspan(first), ec);
      if (ec == asio::error::would_block || ec == asio::error::try_again || (!ec && n == 0)) {
        auto waited = co_await socket_.async_wait(asio::socket_base::wait_write, use_nothrow);
        ec = closed_ ? asio::error::operation_aborted : std::get<0>(waited);
        if (ec) break;
        if (std::exchange(payload_moved_, false)) {
          // A frame's payload was copied (release_payload): gather the rest
          // again, from the first frame not wholly written.
          buffers.clear();
          for (size_t i = frames_written; i < batch.size(); ++i) append_buffers(*batch[i], buffers);
          first = 0;
          skip(written - (frames_written > 0 ? ends[frames_written - 1] : 0));
        }
        continue;
      }
      if (ec) break;
      write_progress_at_ = std::chrono::steady_clock::now();
      written += n;
      while (frames_written < batch.size() && ends[frames_written] <= written)
        batch[frames_written++]->state = OutFrame::State::kDone;  // not read again; the peer may answer it
      skip(n);
    }
    for (auto& f : batch) {
      f->state = OutFrame::State::kDone;
      uncount(*f);
      if (f->call_id != 0) on_frame_written(f->call_id);
    }
    resume_reading();  // a reader paused for queued output looks again
  }
  if (ec && !closed_) close(Status(Code::kDisconnected, fmt::format("write to {}: {}", peer_, ec.message())));
  writing_ = false;
  if (close_after_flush_ && outq_.empty() && !closed_) close(close_reason_);
}

void FrameStream::watch_writes() {
  if (write_stall_timeout_ <= std::chrono::steady_clock::duration::zero() || watching_) return;
  watching_ = true;
  asio::co_spawn(executor(), [self = shared_from_this()] { return self->watch_loop(); },
                 closing_on_throw(shared_from_this(), "write watch"));
}

// Looks every half timeout while the writer runs and stops at the first look
// with nothing left to write (write_loop starts it again), so a stream that
// went idle has no timer armed after its next tick. Progress is any byte written (noted by the writer) or
// acknowledged by the peer: the kernel lets the writer in only once about a
// third of the send buffer is free, so a slow reader may go on taking bytes
// for a while with no write completing; the kernel's queue shrinking (looked
// at on each tick) shows those bytes. Stalled means neither for a whole
// timeout, seen at most half a timeout late.
Task<void> FrameStream::watch_loop() {
  auto self = shared_from_this();
  int64_t unacked_seen = unacked_bytes();
  auto acked_at = std::chrono::steady_clock::time_point::min();
  while (!closed_ && writing_) {
    stall_timer_.expires_after(write_stall_timeout_ / 2);
    co_await stall_timer_.async_wait(use_nothrow);
    if (closed_ || !writing_) break;
    auto now = std::chrono::steady_clock::now();
    int64_t unacked = unacked_bytes();
    if (unacked >= 0 && unacked < unacked_seen) acked_at = now;
    unacked_seen = unacked;
    auto progress_at = std::max(write_progress_at_, acked_at);
    if (now - progress_at >= write_stall_timeout_) {
      on_write_stalled(now - progress_at);
      break;
    }
  }
  watching_ = false;
}

void FrameStream::begin_frame_read() {
  if (read_stall_timeout_ <= std::chrono::steady_clock::duration::zero()) return;
  in_frame_ = true;
  read_progress_at_ = std::chrono::steady_clock::now();
  if (read_watching_) return;
  read_watching_ = true;
  asio::co_spawn(executor(), [self = shared_from_this()] { return self->read_watch_loop(); },
                 closing_on_throw(shared_from_this(), "read watch"));
}

// Looks every half timeout while frames are being read and stops at the
// first look between frames (begin_frame_read starts it again): a stalled
// frame is seen at most half a timeout late, an idle stream has no timer.
Task<void> FrameStream::read_watch_loop() {
  auto self = shared_from_this();
  while (!closed_ && in_frame_) {
    read_stall_timer_.expires_after(read_stall_timeout_ / 2);
    co_await read_stall_timer_.async_wait(use_nothrow);
    if (closed_ || !in_frame_) break;
    auto stalled_for = std::chrono::steady_clock::now() - read_progress_at_;
    if (stalled_for >= read_stall_timeout_) {
      on_read_stalled(stalled_for);
      break;
    }
  }
  read_watching_ = false;
}

void FrameStream::on_read_stalled(std::chrono::steady_clock::duration stalled_for) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(stalled_for).count();
  close(Status(Code::kTimeout, fmt::format("no byte of a frame from {} for {} ms", peer_, ms)));
}

int64_t FrameStream::unacked_bytes() {
  int n = 0;
  if (::ioctl(socket_.native_handle(), SIOCOUTQ, &n) != 0) return -1;
  return n;
}

void FrameStream::on_write_stalled(std::chrono::steady_clock::duration stalled_for) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(stalled_for).count();
  close(Status(Code::kTimeout, fmt::format("no byte written to {} for {} ms", peer_, ms)));
}

}  // namespace weft::rpc
