// storage/io_ring.h
// One io_uring per chunk engine. Any thread may submit reads, writes and
// fdatasyncs. Submission is batched by flat combining: whichever thread holds
// the SQ lock puts everything queued so far into one io_uring_submit; a
// submitter thread does the same for work queued while the lock was busy or
// the ring was full. A reaper thread runs completion callbacks. Blocking
// helpers wait on an atomic.
// Threading: submit_* and the blocking helpers are thread-safe. Callbacks run
// on the reaper thread: they must be short and must never block on this ring.
// Bounds: at most `entries` operations are in the kernel; the rest wait in
// the queue (the queue-depth gauge counts both).
// Invariants: every submitted operation's callback runs exactly once, also
// during shutdown (the destructor drains all queued and in-flight work).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <liburing.h>

#include "common/metrics.h"
#include "common/status.h"

namespace weft::storage {

// Something that reads a file range asynchronously: an engine's IoRing, or
// the ring of one RPC I/O thread (storage/thread_ring.h). `cb` gets the
// bytes transferred or -errno; where it runs is the implementation's rule.
class ReadSubmitter {
 public:
  using Callback = std::move_only_function<void(int res)>;
  virtual ~ReadSubmitter() = default;
  virtual void submit_read(int fd, void* buf, uint32_t len, uint64_t offset, Callback cb) = 0;
};

class IoRing final : public ReadSubmitter {
 public:
  // res: bytes transferred, 0 for a sync, or -errno.
  using Callback = ReadSubmitter::Callback;

  static Result<std::unique_ptr<IoRing>> create(unsigned entries, metrics::Gauge* depth_gauge = nullptr);
  ~IoRing() override;
  IoRing(const IoRing&) = delete;
  IoRing& operator=(const IoRing&) = delete;

  void submit_read(int fd, void* buf, uint32_t len, uint64_t offset, Callback cb) override;
  void submit_write(int fd, const void* buf, uint32_t len, uint64_t offset, Callback cb);
  void submit_fdatasync(int fd, Callback cb);

  // Blocking forms: return the completion result.
  int read(int fd, void* buf, uint32_t len, uint64_t offset);
  int write(int fd, const void* buf, uint32_t len, uint64_t offset);
  int fdatasync(int fd);

  // Queued + in-flight operations.
  int64_t depth() const;
  // How many io_uring_submit calls were made (to observe batching).
  uint64_t submit_calls() const;

 private:
  enum class OpKind : uint8_t { kRead, kWrite, kSync, kStop };
  struct Op {
    OpKind kind;
    int fd;
    void* buf;
    uint32_t len;
    uint64_t offset;
    Callback cb;
  };

  explicit IoRing(unsigned entries, metrics::Gauge* depth_gauge);
  void enqueue(std::unique_ptr<Op> op);
  int wait_for(OpKind kind, int fd, void* buf, uint32_t len, uint64_t offset);
  bool submit_queued_locked();
  void submit_batch_locked(std::vector<std::unique_ptr<Op>>& batch);
  void submitter_loop();
  void reaper_loop();
  void prep(io_uring_sqe* sqe, Op* op);

  io_uring ring_{};
  unsigned entries_;
  metrics::Gauge* depth_gauge_;

  std::mutex sq_mu_;  // held by whichever thread fills and submits the SQ
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Op>> queue_;  // GUARDED_BY(mu_)
  unsigned inflight_ = 0;                  // GUARDED_BY(mu_)
  bool stopping_ = false;                  // GUARDED_BY(mu_)
  uint64_t submit_calls_ = 0;              // GUARDED_BY(mu_)

  std::thread submitter_;
  std::thread reaper_;
};

}  // namespace weft::storage
