// rpc/frame_stream.h (internal to rpc)
// One connection (TCP, or a Unix socket to a server on this host:
// rpc/local_socket.h) carrying frames in both directions: a buffered reader
// that parses frames and reads large payloads straight into their final
// destination, and a writer that gathers many queued frames (header, body
// and caller-owned payload spans) into one writev.
// Threading: every method runs on the socket's executor (one I/O thread);
// callers on other threads post to executor() first.
// Invariants: a frame in `kWriting` state is never freed, and its bytes are
// never changed, until its write completes (release_payload moves them to
// memory the frame owns, between two writes); it is `kDone` as soon as its last byte went to the
// kernel (maybe before the rest of its batch), so before any frame read
// after that is decoded; a dropped frame is never written. With a write-stall
// timeout set, a stream whose writer has waited that long with no byte
// written or acknowledged by the peer is handed to on_write_stalled() (once);
// a stream with nothing to write never is. Likewise, with a read-stall
// timeout set, a stream in the middle of reading a frame (header read, body
// or payload not yet whole) that got no byte for that long is handed to
// on_read_stalled() (once); a stream between frames never is. A caller's
// memory is free again as soon as release_payload() or
// release_payload_target() returns (payloads are written by non-blocking
// calls between waits for the socket; a payload read pending into caller
// memory is cancelled, which on this one thread happens before it copied
// anything), and the connection stays usable.
#pragma once

#include <array>
#include <chrono>
#include <optional>
#include <deque>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <asio/cancellation_signal.hpp>
#include <asio/generic/stream_protocol.hpp>
#include <asio/steady_timer.hpp>

#include "common/buffer.h"
#include "common/status.h"
#include "rpc/frame.h"
#include "rpc/task.h"

namespace weft::rpc {

struct OutFrame {
  enum class State { kQueued, kWriting, kDone };
  FrameHeader header;
  std::array<std::byte, kFrameHeaderSize> encoded;
  std::string body;
  std::vector<std::span<const std::byte>> payload;  // gathered as is; not copied
  std::shared_ptr<void> keepalive;                  // owns payload memory when needed
  uint64_t call_id = 0;                             // client side: the pending call
  // Client side: the call's deadline. header.timeout_ms is set from it when
  // the header starts to be written, so the receiver's budget does not
  // include the time the frame waited in this queue (or for the handshake).
  std::chrono::steady_clock::time_point deadline{};
  size_t queued_bytes = 0;                          // counted in FrameStream::queued_bytes() until written or dropped
  State state = State::kQueued;
  bool dropped = false;
};

// Where a frame's payload lands: caller memory (`data`) or an owned buffer.
struct PayloadTarget {
  std::byte* data = nullptr;
  Buffer owned;
};

// Why a frame of `body` and `payload` bytes cannot be sent under `limits`
// (the peer would close the connection at its header; a length over 4 GiB
// does not even fit in it), or OK. `what`: "request", "reply".
Status frame_size_error(const FrameLimits& limits, size_t body, size_t payload, std::string_view what);

class FrameStream : public std::enable_shared_from_this<FrameStream> {
 public:
  using Socket = asio::generic::stream_protocol::socket;

  FrameStream(Socket socket, FrameLimits limits);
  virtual ~FrameStream() = default;

  asio::any_io_executor executor() { return socket_.get_executor(); }
  bool closed() const { return closed_; }
  const std::string& peer() const { return peer_; }

  // Starts the read loop (and the writer, once ready).
  void start();
  // Frames queue until set_ready(); then they are written in order.
  std::shared_ptr<OutFrame> send(std::shared_ptr<OutFrame> frame);
  void set_ready();
  // Closes after everything queued so far has been written.
  void close_after_flush(Status why);
  void close(Status why);
  // The completion of one of the stream's detached loops (`loop` names it):
  // an exception it let out (an allocation that failed) closes the stream.
  // With asio::detached it was dropped, and a stream neither read nor
  // closed went on taking calls that could only time out.
  static auto closing_on_throw(std::shared_ptr<FrameStream> self, const char* loop) {
    return [self = std::move(self), loop](std::exception_ptr e) {
      if (e) self->close_for(e, loop);
    };
  }

 private:
  void close_for(std::exception_ptr e, const char* loop);

 protected:
  // Called for every decoded header before its body is read; an error closes the stream.
  virtual Status check_header(const FrameHeader& /*h*/) { return {}; }
  virtual PayloadTarget payload_target(const FrameHeader& h) = 0;
  virtual void on_frame(const FrameHeader& h, std::string body, PayloadTarget payload) = 0;
  virtual void on_frame_written(uint64_t /*call_id*/) {}
  virtual void on_closed(const Status& why) = 0;
  // True when a frame sent now has nothing to be batched with (one call in flight):
  // send() then writes it at once instead of through the event loop.
  virtual bool prefer_immediate_write() { return false; }
  // Back-pressure: while true, the reader stops reading the socket. It is
  // asked again after each frame read and each batch of frames written.
  virtual bool should_pause_reading() { return false; }
  void resume_reading();
  // During on_frame: when the frame waited in the socket while reading was
  // paused, the moment reading stopped (it was sent about then or later);
  // nullopt otherwise. A receiver's deadline counts from there.
  std::optional<std::chrono::steady_clock::time_point> frame_waited_since() const { return frame_waited_since_; }
  // During on_frame: when the frame's header was decoded (its body and
  // payload may have taken long to come after it).
  std::chrono::steady_clock::time_point frame_header_at() const { return frame_header_at_; }
  // A frame whose payload spans are caller memory, sent and not yet wholly
  // written, gives that memory back: a queued frame is dropped (never
  // written), a frame being written goes on from a copy of its payload made
  // now. After this the caller may reuse or free the spans.
  void release_payload(OutFrame& f);
  // The payload being read straight into a caller's buffer (payload_target's
  // `data`) goes to scratch memory from now on and is dropped; the frame is
  // delivered with `data` null. After this the caller may reuse the buffer.
  // No-op unless a payload is being read into caller memory.
  void release_payload_target();
  // Bytes of frames sent and not yet written to the socket (a peer that does
  // not read makes this grow).
  size_t queued_bytes() const { return queued_bytes_; }
  // After an outgoing connect: names the peer (`peer`, else its address)
  // and sets TCP_NODELAY (TCP).
  void on_connected(std::string peer = {});
  // Bounds how long the writer may wait with no byte written or acknowledged
  // by the peer; 0 (the default) waits forever. Set before start().
  void set_write_stall_timeout(std::chrono::milliseconds timeout) { write_stall_timeout_ = timeout; }
  // Called when that bound passed with frames still unwritten; by default it
  // closes the stream (kTimeout).
  virtual void on_write_stalled(std::chrono::steady_clock::duration stalled_for);
  // Bounds how long a frame's body and payload may take to arrive with no
  // byte coming (a peer that announced 64 MiB and stopped holds a buffer of
  // that size); 0 (the default) waits forever. Set before start().
  void set_read_stall_timeout(std::chrono::milliseconds timeout) { read_stall_timeout_ = timeout; }
  // Called when that bound passed; by default it closes the stream (kTimeout).
  virtual void on_read_stalled(std::chrono::steady_clock::duration stalled_for);

  Socket socket_;

 private:
  Task<void> read_loop();
  Task<void> write_loop();
  void watch_writes();  // starts watch_loop() unless it runs or the bound is off
  Task<void> watch_loop();
  void begin_frame_read();  // a header was read: the read-stall watch runs until the frame is whole
  Task<void> read_watch_loop();
  int64_t unacked_bytes();  // the kernel's send queue (SIOCOUTQ): unsent or unacknowledged; -1 if unknown
  Task<bool> fill(size_t n);  // ensures n unread bytes in rbuf_; false on EOF/error
  Task<bool> read_payload(std::byte* dest, size_t len);  // false: closed
  bool try_write_now();      // true: the lone queued frame was written (or the stream closed)
  void uncount(OutFrame& f);  // f leaves queued_bytes() (once)

  FrameLimits limits_;
  std::string peer_;
  std::vector<std::byte> rbuf_;
  size_t rpos_ = 0, rend_ = 0;
  std::deque<std::shared_ptr<OutFrame>> outq_;
  bool ready_ = false;
  bool writing_ = false;
  bool closed_ = false;
  bool close_after_flush_ = false;
  Status close_reason_;
  bool paused_ = false;
  // After a pause, frames waited (frame_waited_since) until the socket is
  // found empty (a short read), for at most kDrainWindow (the sender's own
  // buffer drains behind the receive queue); then the bytes still buffered
  // here (waited_bytes_) were waiting too.
  bool draining_ = false;
  uint64_t waited_bytes_ = 0;
  std::chrono::steady_clock::time_point paused_at_;
  std::chrono::steady_clock::time_point resumed_at_;
  std::optional<std::chrono::steady_clock::time_point> frame_waited_since_;
  std::chrono::steady_clock::time_point frame_header_at_;
  size_t first_frame_written_ = 0;  // bytes of outq_.front() written by try_write_now()
  bool payload_moved_ = false;      // release_payload() copied a frame of the batch being written
  std::byte* payload_dest_ = nullptr;  // caller memory read_payload() reads into; null: scratch
  asio::cancellation_signal payload_cancel_;  // cancels read_payload()'s pending read (release_payload_target)
  size_t queued_bytes_ = 0;
  asio::steady_timer resume_;
  // The write-stall watch: one timer per stream, ticking while the writer runs.
  std::chrono::steady_clock::duration write_stall_timeout_{0};
  std::chrono::steady_clock::time_point write_progress_at_;  // writer started or last wrote a byte
  bool watching_ = false;
  asio::steady_timer stall_timer_;
  // The read-stall watch: ticks only while a frame is partly read.
  std::chrono::steady_clock::duration read_stall_timeout_{0};
  std::chrono::steady_clock::time_point read_progress_at_;  // frame's header read or last byte of it came
  bool in_frame_ = false;
  bool read_watching_ = false;
  asio::steady_timer read_stall_timer_;
};

}  // namespace weft::rpc
