#include "storage/thread_ring.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <utility>
#include <vector>

#include <asio/post.hpp>

#include "common/assert.h"
#include "common/logging.h"
#include "rpc/io_pool.h"

namespace weft::storage {

ThreadRing* ThreadRing::for_this_thread() {
  thread_local std::unique_ptr<ThreadRing> t_ring;
  thread_local bool t_failed = false;
  if (t_ring) return t_ring.get();
  if (t_failed) return nullptr;
  asio::io_context* io = rpc::IoPool::current_context();
  if (!io) return nullptr;
  std::unique_ptr<ThreadRing> ring(new ThreadRing(*io));
  if (auto ok = ring->init(); !ok) {
    t_failed = true;
    WEFT_LOG_WARN("per-thread io_uring unavailable ({}); reads use the engines' rings", ok.error());
    return nullptr;
  }
  t_ring = std::move(ring);
  return t_ring.get();
}

ThreadRing::ThreadRing(asio::io_context& io) : io_(io) {}

// DEFER_TASKRUN (Linux 6.1) needs SINGLE_ISSUER; older kernels get the
// cooperative mode (no interrupting IPI), the oldest a plain ring.
Result<void> ThreadRing::init() {
  const unsigned attempts[] = {IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN, IORING_SETUP_COOP_TASKRUN, 0};
  int rc = -EINVAL;
  for (unsigned flags : attempts) {
    io_uring_params params{};
    params.flags = flags;
    rc = io_uring_queue_init_params(kEntries, &ring_, &params);
    if (rc == 0) {
      deferred_ = (flags & IORING_SETUP_DEFER_TASKRUN) != 0;
      break;
    }
    if (rc != -EINVAL) break;
  }
  if (rc < 0) return errno_error(-rc, "io_uring_queue_init");
  ring_ok_ = true;
  event_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (event_fd_ < 0) return errno_error(errno, "eventfd");
  event_ = std::make_unique<asio::posix::stream_descriptor>(io_, event_fd_);  // owns the fd now
  if (rc = io_uring_register_eventfd(&ring_, event_fd_); rc < 0) return errno_error(-rc, "io_uring_register_eventfd");
  return {};
}

ThreadRing::~ThreadRing() {
  event_.reset();
  if (!ring_ok_) return;
  if (prepared_ > 0) {
    int rc = io_uring_submit(&ring_);
    if (rc > 0) inflight_ += static_cast<unsigned>(rc);
  }
  // The kernel may still write into the buffers the callbacks own.
  while (inflight_ > 0) {
    io_uring_cqe* cqe = nullptr;
    int rc = io_uring_wait_cqe(&ring_, &cqe);
    if (rc == -EINTR) continue;
    if (rc < 0) break;
    std::unique_ptr<Op> dropped(static_cast<Op*>(io_uring_cqe_get_data(cqe)));
    io_uring_cqe_seen(&ring_, cqe);
    --inflight_;
  }
  waiting_.clear();
  io_uring_queue_exit(&ring_);
}

void ThreadRing::submit_read(int fd, void* buf, uint32_t len, uint64_t offset, Callback cb) {
  auto op = std::make_unique<Op>(Op{fd, buf, len, offset, std::move(cb)});
  if (inflight_ + prepared_ >= kEntries || !waiting_.empty()) {
    waiting_.push_back(std::move(op));
    return;
  }
  prep(std::move(op));
}

// REQUIRES: inflight_ + prepared_ < kEntries (so the SQ has room).
void ThreadRing::prep(std::unique_ptr<Op> op) {
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  WEFT_ASSERT_MSG(sqe != nullptr, "thread ring: submission queue full despite the in-flight bound");
  io_uring_prep_read(sqe, op->fd, op->buf, op->len, op->offset);
  io_uring_sqe_set_data(sqe, op.release());
  ++prepared_;
  schedule_flush();
}

// The flush runs after the handlers that are ready now: every read they
// queue goes to the kernel in the same io_uring_enter.
void ThreadRing::schedule_flush() {
  if (flush_posted_) return;
  flush_posted_ = true;
  asio::post(io_, [this] { flush(); });
}

void ThreadRing::flush() {
  flush_posted_ = false;
  if (prepared_ == 0) return;
  int rc = io_uring_submit(&ring_);
  if (rc == -EINTR || rc == -EAGAIN || rc == -EBUSY) {
    schedule_flush();  // try again after the loop turn (completions free resources)
  } else {
    WEFT_ASSERT_MSG(rc >= 0, "thread ring: io_uring_submit failed");
    ++submit_calls_;
    inflight_ += static_cast<unsigned>(rc);
    prepared_ -= static_cast<unsigned>(rc);
    if (prepared_ > 0) schedule_flush();
  }
  arm();
}

void ThreadRing::arm() {
  if (armed_ || inflight_ == 0) return;
  armed_ = true;
  event_->async_wait(asio::posix::stream_descriptor::wait_read, [this](const asio::error_code& ec) {
    armed_ = false;
    if (ec) return;  // cancelled: the ring is going away
    reap();
    arm();
  });
}

void ThreadRing::reap() {
  // Reset the eventfd BEFORE collecting: a completion that lands afterwards
  // signals it again (with DEFER_TASKRUN only the first queued work item of
  // an empty list signals, and get_events empties the list).
  uint64_t signals = 0;
  if (::read(event_fd_, &signals, sizeof signals) < 0 && errno != EAGAIN) {
    WEFT_LOG_WARN("thread ring: read eventfd: errno {}", errno);
  }
  if (deferred_) io_uring_get_events(&ring_);
  std::vector<std::pair<Op*, int>> done;
  unsigned head = 0;
  io_uring_cqe* cqe = nullptr;
  io_uring_for_each_cqe(&ring_, head, cqe) { done.emplace_back(static_cast<Op*>(io_uring_cqe_get_data(cqe)), cqe->res); }
  io_uring_cq_advance(&ring_, static_cast<unsigned>(done.size()));
  inflight_ -= static_cast<unsigned>(done.size());
  while (!waiting_.empty() && inflight_ + prepared_ < kEntries) {
    auto op = std::move(waiting_.front());
    waiting_.pop_front();
    prep(std::move(op));
  }
  for (auto& [raw, res] : done) {
    std::unique_ptr<Op> op(raw);
    op->cb(res);
  }
}

}  // namespace weft::storage
