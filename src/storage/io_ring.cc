#include "storage/io_ring.h"

#include <condition_variable>
#include <mutex>

#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstring>
#include <vector>

#include "common/assert.h"
#include "common/fault.h"

namespace weft::storage {

Result<std::unique_ptr<IoRing>> IoRing::create(unsigned entries, metrics::Gauge* depth_gauge) {
  if (entries < 2 || entries > 4096) return error(Code::kInvalidArgument, "io_uring entries {} not in [2, 4096]", entries);
  std::unique_ptr<IoRing> ring(new IoRing(entries, depth_gauge));
  io_uring_params params{};
  int rc = io_uring_queue_init_params(entries, &ring->ring_, &params);
  if (rc < 0) return errno_error(-rc, "io_uring_queue_init");
  ring->submitter_ = std::thread([r = ring.get()] { r->submitter_loop(); });
  ring->reaper_ = std::thread([r = ring.get()] { r->reaper_loop(); });
  return ring;
}

IoRing::IoRing(unsigned entries, metrics::Gauge* depth_gauge) : entries_(entries), depth_gauge_(depth_gauge) {}

IoRing::~IoRing() {
  if (!submitter_.joinable()) return;  // queue_init failed
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  submitter_.join();
  reaper_.join();
  io_uring_queue_exit(&ring_);
}

// Flat combining: the enqueuing thread submits everything queued itself when
// no other thread is submitting; otherwise the submitter thread picks it up.
void IoRing::enqueue(std::unique_ptr<Op> op) {
  {
    std::lock_guard lock(mu_);
    WEFT_ASSERT_MSG(!stopping_, "submission to a ring that is shutting down");
    queue_.push_back(std::move(op));
  }
  if (depth_gauge_) depth_gauge_->add(1);
  if (sq_mu_.try_lock()) {
    while (submit_queued_locked()) {
    }
    sq_mu_.unlock();
    std::lock_guard lock(mu_);
    if (queue_.empty()) return;  // else: ring full or a racing push; let the thread handle it
  }
  cv_.notify_all();
}

// REQUIRES: sq_mu_ held. Submits what is queued (within the in-flight
// bound) in one io_uring_submit; false if nothing was queued.
bool IoRing::submit_queued_locked() {
  std::vector<std::unique_ptr<Op>> batch;
  {
    std::lock_guard lock(mu_);
    while (!queue_.empty() && inflight_ < entries_) {
      batch.push_back(std::move(queue_.front()));
      queue_.pop_front();
      ++inflight_;
    }
    if (batch.empty()) return false;
    ++submit_calls_;
  }
  submit_batch_locked(batch);
  return true;
}

void IoRing::submit_batch_locked(std::vector<std::unique_ptr<Op>>& batch) {
  for (auto& op : batch) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    WEFT_ASSERT_MSG(sqe != nullptr, "io_uring submission queue full despite in-flight bound");
    prep(sqe, op.release());
  }
  // The kernel may take fewer entries than are in the SQ (a short count, or
  // -EAGAIN/-EBUSY while it lacks memory or the CQ is full): the rest must
  // not wait for a later enqueue, which a quiet target may never make. Try
  // again after a short pause (completions free what the kernel lacked).
  for (;;) {
    // Fault point: the kernel took none of the entries (as a short submit).
    int rc = WEFT_FAULT("storage.ring.submit_short") ? 0 : io_uring_submit(&ring_);
    if (rc >= 0 && io_uring_sq_ready(&ring_) == 0) break;
    WEFT_ASSERT_MSG(rc >= 0 || rc == -EINTR || rc == -EAGAIN || rc == -EBUSY, "io_uring_submit failed");
    if (rc != -EINTR) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

void IoRing::submit_read(int fd, void* buf, uint32_t len, uint64_t offset, Callback cb) {
  enqueue(std::make_unique<Op>(Op{OpKind::kRead, fd, buf, len, offset, std::move(cb)}));
}

void IoRing::submit_write(int fd, const void* buf, uint32_t len, uint64_t offset, Callback cb) {
  enqueue(std::make_unique<Op>(Op{OpKind::kWrite, fd, const_cast<void*>(buf), len, offset, std::move(cb)}));
}

void IoRing::submit_fdatasync(int fd, Callback cb) {
  enqueue(std::make_unique<Op>(Op{OpKind::kSync, fd, nullptr, 0, 0, std::move(cb)}));
}

int IoRing::wait_for(OpKind kind, int fd, void* buf, uint32_t len, uint64_t offset) {
  // The completion notifies while it holds `mu`, so the waiter (which needs
  // `mu` to return) cannot end this frame before the notify is done: an
  // atomic's notify after its store could reach a frame already gone.
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  int result = 0;
  auto cb = [&](int res) {
    std::lock_guard lock(mu);
    result = res;
    done = true;
    cv.notify_one();
  };
  enqueue(std::make_unique<Op>(Op{kind, fd, buf, len, offset, std::move(cb)}));
  std::unique_lock lock(mu);
  cv.wait(lock, [&] { return done; });
  return result;
}

int IoRing::read(int fd, void* buf, uint32_t len, uint64_t offset) { return wait_for(OpKind::kRead, fd, buf, len, offset); }
int IoRing::write(int fd, const void* buf, uint32_t len, uint64_t offset) {
  return wait_for(OpKind::kWrite, fd, const_cast<void*>(buf), len, offset);
}
int IoRing::fdatasync(int fd) { return wait_for(OpKind::kSync, fd, nullptr, 0, 0); }

int64_t IoRing::depth() const {
  std::lock_guard lock(mu_);
  return static_cast<int64_t>(queue_.size() + inflight_);
}

uint64_t IoRing::submit_calls() const {
  std::lock_guard lock(mu_);
  return submit_calls_;
}

void IoRing::prep(io_uring_sqe* sqe, Op* op) {
  switch (op->kind) {
    case OpKind::kRead: io_uring_prep_read(sqe, op->fd, op->buf, op->len, op->offset); break;
    case OpKind::kWrite: io_uring_prep_write(sqe, op->fd, op->buf, op->len, op->offset); break;
    case OpKind::kSync: io_uring_prep_fsync(sqe, op->fd, IORING_FSYNC_DATASYNC); break;
    case OpKind::kStop: io_uring_prep_nop(sqe); break;
  }
  io_uring_sqe_set_data(sqe, op);
}

// The backstop submitter: handles work queued while another thread held
// sq_mu_ or while the ring was full, and the final stop marker.
void IoRing::submitter_loop() {
  for (;;) {
    bool stop = false;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return (!queue_.empty() && inflight_ < entries_) || (stopping_ && queue_.empty()); });
      stop = stopping_ && queue_.empty();
    }
    std::lock_guard sq(sq_mu_);
    if (stop) {
      std::vector<std::unique_ptr<Op>> marker;
      marker.push_back(std::make_unique<Op>(Op{OpKind::kStop, -1, nullptr, 0, 0, nullptr}));
      submit_batch_locked(marker);
      return;
    }
    submit_queued_locked();
  }
}

void IoRing::reaper_loop() {
  bool saw_stop = false;
  for (;;) {
    io_uring_cqe* cqe = nullptr;
    int rc = io_uring_wait_cqe(&ring_, &cqe);
    if (rc == -EINTR || rc == -EAGAIN) continue;
    WEFT_ASSERT_MSG(rc == 0, "io_uring_wait_cqe failed");
    unsigned head = 0, seen = 0, done_ops = 0;
    io_uring_for_each_cqe(&ring_, head, cqe) {
      ++seen;
      std::unique_ptr<Op> op(static_cast<Op*>(io_uring_cqe_get_data(cqe)));
      if (op->kind == OpKind::kStop) {
        saw_stop = true;
        continue;
      }
      op->cb(cqe->res);
      ++done_ops;
    }
    io_uring_cq_advance(&ring_, seen);
    bool exit_now = false, backlog = false;
    {
      std::lock_guard lock(mu_);
      inflight_ -= done_ops;
      exit_now = saw_stop && inflight_ == 0;
      backlog = !queue_.empty() || stopping_;
    }
    if (depth_gauge_) depth_gauge_->add(-static_cast<int64_t>(done_ops));
    if (backlog) cv_.notify_all();
    if (exit_now) return;
  }
}

}  // namespace weft::storage
