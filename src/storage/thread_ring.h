// storage/thread_ring.h
// An io_uring owned by one RPC I/O thread, for the read path: a read
// handler submits its disk reads here and their completions come back on
// the same thread, through the thread's event loop. So a 4 KiB read costs no
// hand-off to a ring thread and no wake-up of its own: reads queued during
// one turn of the event loop go to the kernel in one io_uring_enter (posted
// to run after the handlers that are ready now), and completions are reaped
// in batches when the ring's eventfd becomes readable (the same epoll_wait
// that waits for sockets). Where the kernel allows it the ring is set up
// with IORING_SETUP_DEFER_TASKRUN: completion work runs only when this
// thread asks for it, never as an interrupt of whatever thread is running.
// Threading: every method on the owning thread only (the ring is
// single-issuer). Callbacks run on that thread and must not block.
// Lifetime: one per I/O thread of an rpc::IoPool, created on first use and
// destroyed when the thread exits; the destructor waits for reads still in
// the kernel (their buffers stay valid) and drops their callbacks uncalled,
// as asio drops the handlers of a stopped io_context.
// Bounds: at most `kEntries` reads in the kernel; more wait in a queue.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>

#include <asio/io_context.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <liburing.h>

#include "common/status.h"
#include "storage/io_ring.h"

namespace weft::storage {

class ThreadRing final : public ReadSubmitter {
 public:
  static constexpr unsigned kEntries = 256;

  // The ring of the calling thread when it is an rpc::IoPool I/O thread
  // (created on first use); null elsewhere or when io_uring setup failed
  // (callers then use the engine's own ring).
  static ThreadRing* for_this_thread();

  ~ThreadRing() override;
  ThreadRing(const ThreadRing&) = delete;
  ThreadRing& operator=(const ThreadRing&) = delete;

  void submit_read(int fd, void* buf, uint32_t len, uint64_t offset, Callback cb) override;

  // Observability for tests: io_uring_enter calls that submitted, reads in the kernel.
  uint64_t submit_calls() const { return submit_calls_; }
  unsigned inflight() const { return inflight_; }
  bool deferred_taskrun() const { return deferred_; }

 private:
  struct Op {
    int fd;
    void* buf;
    uint32_t len;
    uint64_t offset;
    Callback cb;
  };

  explicit ThreadRing(asio::io_context& io);
  Result<void> init();
  void prep(std::unique_ptr<Op> op);
  void schedule_flush();
  void flush();
  void arm();
  void reap();

  asio::io_context& io_;
  io_uring ring_{};
  bool ring_ok_ = false;
  bool deferred_ = false;
  int event_fd_ = -1;
  std::unique_ptr<asio::posix::stream_descriptor> event_;
  unsigned prepared_ = 0;   // SQEs not yet submitted
  unsigned inflight_ = 0;   // submitted, not yet reaped
  std::deque<std::unique_ptr<Op>> waiting_;  // the ring was full
  bool flush_posted_ = false;
  bool armed_ = false;
  uint64_t submit_calls_ = 0;
};

}  // namespace weft::storage
