// client/core.h
// What every part of libweft shares: the I/O threads, the RPC client, the
// routing cache, the metadata client, chunk I/O and the memory budgets.
// Also the helpers that run chunk coroutines from a caller's thread.
// Threading: thread-safe members; run_parallel blocks the caller (never an I/O thread).
#pragma once

#include <atomic>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <thread>
#include <vector>

#include <asio/co_spawn.hpp>

#include "client/chunk_io.h"
#include "client/cluster_config.h"
#include "client/routing_cache.h"
#include "client/session_closer.h"
#include "mgmt/mgmt_rpc.h"
#include "mgmt/refusal_reporter.h"
#include "meta/meta_client.h"
#include "rpc/client.h"
#include "rpc/io_pool.h"
#include "weft/client.h"

namespace weft::client {

// Bytes allowed at once (write-behind data, reads in flight). acquire() blocks
// while the budget is used up; a request larger than the whole budget waits
// until nothing else is held, then goes alone. An acquire that fits and a
// release nobody waits for touch one atomic only: every small read passes
// here, from many threads at once, and a contended mutex costs each of them
// a sleep and a wake-up.
class ByteBudget {
 public:
  explicit ByteBudget(size_t max) : max_(max) {}
  // Called (without the lock) while an acquire() waits, at most every 50 ms:
  // write-behind uses it to send partly written chunks that would otherwise
  // sit in buffers forever while their owners wait here. Set before use.
  void set_pressure(std::function<void()> pressure) { pressure_ = std::move(pressure); }
  void acquire(size_t n) {
    if (try_acquire(n)) return;
    std::unique_lock lock(mu_);
    ++waiters_;  // before the re-check below: a release then sees us (or we see it)
    while (!cv_.wait_for(lock, std::chrono::milliseconds(50), [&] { return try_acquire(n); })) {
      if (!pressure_) continue;
      lock.unlock();
      pressure_();
      lock.lock();
    }
    --waiters_;
  }
  void release(size_t n) {
    size_t used = used_.load();
    while (!used_.compare_exchange_weak(used, used - std::min(n, used))) {
    }
    if (waiters_.load() == 0) return;
    { std::lock_guard lock(mu_); }  // a waiter between its check and its wait gets the notify
    cv_.notify_all();
  }
  size_t used() const { return used_.load(); }
  // Without waiting: false if `n` does not fit now (it always fits when
  // nothing is held).
  bool try_acquire(size_t n) {
    size_t used = used_.load();
    while (used == 0 || used + n <= max_)
      if (used_.compare_exchange_weak(used, used + n)) return true;
    return false;
  }

 private:
  const size_t max_;
  std::function<void()> pressure_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<size_t> used_{0};
  std::atomic<size_t> waiters_{0};  // changed under mu_
};

// Drops shared objects on a thread of its own: the last reference to a File
// may be held by an I/O completion, and a File's destructor blocks (it closes
// the file), which must never happen on an I/O thread.
class Releaser {
 public:
  Releaser() : thread_([this] { run(); }) {}
  ~Releaser() { stop(); }
  void release(std::shared_ptr<void> p) {
    {
      std::lock_guard lock(mu_);
      queue_.push_back(std::move(p));
    }
    cv_.notify_one();
  }
  void stop() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_one();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void run() {
    std::unique_lock lock(mu_);
    while (true) {
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      while (!queue_.empty()) {
        auto p = std::move(queue_.back());
        queue_.pop_back();
        lock.unlock();
        p.reset();
        lock.lock();
      }
      if (stopping_) return;
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::shared_ptr<void>> queue_;  // GUARDED_BY(mu_)
  bool stopping_ = false;                     // GUARDED_BY(mu_)
  std::thread thread_;
};

class FileImpl;

// What the Files of one inode open in this client share (made with the first
// of them, gone with the last).
struct OpenInode {
  // Writes hold it shared while they buffer; a truncate holds it exclusively
  // from its flush until every File has learned the new length. So a write is
  // wholly before the cut (flushed, then cut away) or after it (kept, and its
  // end reported), never sent after the chunks were removed and then
  // forgotten in the length.
  std::shared_mutex cut;
  // Length reports (and close_with_length) hold it shared while they are on
  // their way to meta; a truncate holds it exclusively from after its flush
  // until every File learned the new length. Meta keeps the max of reports,
  // so a report of writes made before a cut that reached meta after it would
  // bring the old length back over the removed chunks: one that waited is
  // cut to what the truncate left of its File's writes (FileImpl::hold_reports).
  // Order: cut, then reports, then a File's reporting_mu_, then its mu_
  // (never held while waiting for reports or reporting_mu_).
  std::shared_mutex reports;
  // Appends (O_APPEND) take their offset and buffer their bytes under it: two
  // appends of this client never land on one offset.
  std::mutex append;
  // The end of what Files of this inode wrote here and closed (their close
  // reported it to meta), or extended to (File::extend): the others go on
  // counting it as they count an open File's written end (an append goes
  // after it, a read sees up to it), else a File that knew an older length
  // would append over it. Raised by a close before it is seen as closed; a
  // truncate here lowers it. Another client's truncate does not (a File
  // learning of it cannot tell a sibling's close that raised it meanwhile):
  // an append here after one goes after this end, leaving zeros before it
  // (appends across clients are not ordered by close-to-open anyway).
  std::atomic<uint64_t> closed_end{0};
  void raise_closed_end(uint64_t end) {
    uint64_t now = closed_end.load();
    while (now < end && !closed_end.compare_exchange_weak(now, end)) {
    }
  }
  void lower_closed_end(uint64_t end) {
    uint64_t now = closed_end.load();
    while (now > end && !closed_end.compare_exchange_weak(now, end)) {
    }
  }
};

// Core::early_reads: at most this many bytes (or inflight_bytes_max) of early reads held at once.
inline constexpr size_t kEarlyReadBytesTotal = size_t{64} << 20;

struct Core {
  // Before any member goes: the reporter's thread uses mgmt_rpc (a Client
  // that failed to connect never reaches ~ClientImpl's stop).
  ~Core() {
    if (refusals) refusals->stop();
  }

  ClientOptions options;
  Cred cred;
  ClusterConfig cluster;
  // Read-ahead buffers held by every File, from the read until they are
  // dropped (a budget of inflight_bytes_max, taken only when free: a File
  // skips reading ahead rather than wait).
  // Before io: destroyed after the I/O threads that may still hold a buffer.
  std::unique_ptr<ByteBudget> readahead;
  // Early reads' buffers (client/early_read.h), held by the File opened
  // until its first read or close: apart from `readahead`, so that files
  // opened and not read yet cannot take what streams read ahead with.
  std::unique_ptr<ByteBudget> early_reads;
  std::unique_ptr<rpc::IoPool> io;
  // Set in rpc's options before it exists; sends over mgmt_rpc (stopped before io).
  std::shared_ptr<mgmt::RefusalReporter> refusals;
  std::unique_ptr<rpc::Client> rpc;
  std::unique_ptr<mgmt::MgmtRpc> mgmt_rpc;
  std::unique_ptr<RoutingCache> routing;
  std::unique_ptr<meta::MetaClient> meta;
  // Every end of a write session goes through it: one that failed for want
  // of meta is tried again (set by the client, after meta).
  std::unique_ptr<SessionCloser> closer;
  std::unique_ptr<ChunkIo> chunks;
  std::unique_ptr<ByteBudget> dirty;     // write-behind bytes, held until acknowledged
  std::unique_ptr<ByteBudget> inflight;  // read bytes in flight
  std::unique_ptr<Releaser> releaser = std::make_unique<Releaser>();
  // Sets the length of a file after flushing every File of it open in this
  // client, and tells them all the new length (set by the client).
  // `session`: the calling File's write session (0: none), as truncate_file's.
  std::function<Result<void>(const Cred&, Ino, uint64_t length, uint64_t session)> truncate_open;
  // Set by the client too. `writer`, a File of `ino`, wrote chunk `index`:
  // the other Files of it open here drop their read-ahead of that chunk.
  std::function<void(Ino, uint64_t index, const FileImpl* writer)> chunk_written;
  // Flushes the Files of `ino` open here for writing, except `reader`, and
  // returns the end of what they wrote (and what Files closed here wrote,
  // OpenInode::closed_end; 0: nothing): a read through one File
  // sees what the others wrote before it, as with two descriptors of one
  // local file. Not the lengths they knew at open: those may be older than
  // the reader's (another client's truncate since).
  std::function<uint64_t(Ino, const FileImpl* reader)> flush_other_writers;
  // Before `writer`, a File of `ino`, buffers a write of [offset, offset +
  // length): every other File of `ino` open here sends what it holds over
  // that range and waits for the acks (FileImpl::order_before_write).
  std::function<void(Ino, const FileImpl* writer, uint64_t offset, uint64_t length)> order_other_writers;
  // The end of what the Files of `ino` open here wrote, or closed here while
  // others stayed open (where an append of another File goes, if past its
  // own length).
  std::function<uint64_t(Ino)> local_size;
  // The end of the bytes Files of `ino` open here wrote that meta may not
  // count yet (FileImpl::unreported_end): what they add to a length fresh from meta.
  std::function<uint64_t(Ino)> unreported_end;
  // Counts every data change begun through this client (a File's write,
  // truncate or extend, a truncate by path): an early read started before
  // one is not kept (client/early_read.h).
  std::atomic<uint64_t> local_changes{0};
  // Counts the lengths meta took from a File here (FileImpl::reported_locked),
  // moved before those writes stop counting in unreported_end: an answer
  // from meta fetched before it may hold an older length that unreported_end
  // then no longer covers (Client::length_reports).
  std::atomic<uint64_t> length_reports{0};
  // Cleared when meta answers close_with_length with kUnknownMethod (a meta
  // from before it, during an upgrade): Files then report, then close.
  std::atomic<bool> meta_closes_with_length{true};
};

// A latch that sleeps at once. std::latch (libstdc++'s atomic wait) spins
// and then calls sched_yield a few times before it sleeps: with many callers
// waiting on few cores, those yields were more than half of all context
// switches of a 4 KiB random-read benchmark, and took CPU from the I/O threads.
class Countdown {
 public:
  explicit Countdown(size_t n) : left_(n) {}
  void count_down() {
    std::lock_guard lock(mu_);
    // Under the lock: the waiter may destroy this as soon as it sees zero.
    if (--left_ == 0) cv_.notify_all();
  }
  void wait() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return left_ == 0; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  size_t left_;  // GUARDED_BY(mu_)
};

// Runs every task on the I/O threads without waiting; once the last one has
// finished, calls then(results) (in the order of `tasks`) on the I/O thread
// that finished it, or at once on this thread when there are no tasks. An
// escaped exception becomes kInternal. `then` must not block.
template <class T, class Then>
void spawn_all(rpc::IoPool& io, std::vector<Task<Result<T>>> tasks, Then then) {
  if (tasks.empty()) {
    then(std::vector<Result<T>>{});
    return;
  }
  struct State {
    State(size_t n, Then t)
        : results(n, Result<T>(std::unexpected(Status(Code::kInternal, "not run")))), left(n), then(std::move(t)) {}
    std::vector<Result<T>> results;
    std::atomic<size_t> left;
    Then then;
  };
  auto state = std::make_shared<State>(tasks.size(), std::move(then));
  for (size_t i = 0; i < tasks.size(); ++i) {
    asio::co_spawn(io.next().get_executor(), std::move(tasks[i]), [state, i](std::exception_ptr e, Result<T> r) {
      if (e) r = std::unexpected(Status(Code::kInternal, "exception in a chunk task"));
      state->results[i] = std::move(r);
      // acq_rel: the last one sees every other task's result.
      if (state->left.fetch_sub(1, std::memory_order_acq_rel) == 1) state->then(std::move(state->results));
    });
  }
}

namespace detail {
template <class State>
void window_step(rpc::IoPool& io, const std::shared_ptr<State>& s, std::optional<size_t> ended) {
  std::vector<size_t> start;
  bool finished = false;
  {
    std::lock_guard lock(s->mu);
    if (ended) {
      s->held -= s->bytes[*ended];
      --s->running;
    }
    while (s->next < s->bytes.size() && (s->running == 0 || s->held + s->bytes[s->next] <= s->budget)) {
      start.push_back(s->next);
      s->held += s->bytes[s->next++];
      ++s->running;
    }
    // Decided under the lock, by the one step that saw the last task end
    // (or by the first, when there is none): `then` runs once.
    finished = s->running == 0 && s->next == s->bytes.size();
  }
  if (finished) return s->then();
  for (size_t i : start)
    asio::co_spawn(io.next().get_executor(), s->make(i),
                   [&io, s, i](std::exception_ptr, auto&&...) { window_step(io, s, i); });
}
}  // namespace detail

// As spawn_all, for tasks that hold memory in proportion to their bytes
// while they run (grouped read replies land in RPC buffers before they are
// copied out): task i, made by make(i) when it starts, holds bytes[i]; tasks
// start in order while what the running ones hold fits in `budget` (one
// always runs), and each end starts the next that fit. `then()` runs once,
// after the last; the tasks report through their own state (a task's
// exception is dropped: its work must show as not done there).
template <class Make, class Then>
void spawn_windowed(rpc::IoPool& io, std::vector<size_t> bytes, size_t budget, Make make, Then then) {
  struct State {
    State(std::vector<size_t> b, size_t n, Make m, Then t)
        : bytes(std::move(b)), budget(n), make(std::move(m)), then(std::move(t)) {}
    std::mutex mu;
    std::vector<size_t> bytes;
    size_t budget;
    Make make;
    Then then;
    size_t next = 0, running = 0, held = 0;  // GUARDED_BY(mu)
  };
  auto s = std::make_shared<State>(std::move(bytes), budget, std::move(make), std::move(then));
  detail::window_step(io, s, std::nullopt);
}

// Runs every task on the I/O threads and waits for all; results in order.
// REQUIRES: not on an I/O thread of `io`.
template <class T>
std::vector<Result<T>> run_parallel(rpc::IoPool& io, std::vector<Task<Result<T>>> tasks) {
  std::vector<Result<T>> results;
  Countdown done(1);
  spawn_all(io, std::move(tasks), [&results, &done](std::vector<Result<T>> r) {
    results = std::move(r);
    done.count_down();
  });
  done.wait();
  return results;
}

inline Result<void> first_error(const std::vector<Result<void>>& results) {
  for (const auto& r : results)
    if (!r) return r;
  return {};
}

}  // namespace weft::client
