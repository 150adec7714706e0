#include "meta/wal_syncer.h"

#include <rocksdb/db.h>
#include <spdlog/spdlog.h>

#include <optional>
#include <thread>

#include "common/fault.h"
#include "meta/txn.h"

namespace weft::meta {

namespace {
constexpr int64_t kLingerUsMax = 1000;
}  // namespace

WalSyncer::WalSyncer(rocksdb::DB* db, metrics::Registry& registry, bool linger)
    : db_(db),
      linger_(linger),
      syncs_(&registry.counter("weft_meta_wal_syncs_total", "WAL fsyncs covering commits")),
      sync_us_(&registry.histogram("weft_meta_wal_sync_us", "Duration of one WAL fsync")),
      batch_(&registry.histogram("weft_meta_wal_sync_batch", "Commits covered by one WAL fsync")) {
  thread_ = std::thread([this] { run(); });
}

WalSyncer::~WalSyncer() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  thread_.join();
}

// Through when_durable, so a blocking waiter gets the outcome of the sync that
// covered its ticket even when a later sync succeeds before it wakes (after a
// failed fsync a later one may succeed without the lost pages: never trust it).
Result<void> WalSyncer::wait_durable() {
  std::mutex m;
  std::condition_variable cv;
  std::optional<Result<void>> outcome;
  when_durable([&](Result<void> r) {
    std::lock_guard lock(m);  // notify under the lock: the waiter's frame outlives it
    outcome = std::move(r);
    cv.notify_one();
  });
  std::unique_lock lock(m);
  cv.wait(lock, [&] { return outcome.has_value(); });
  return std::move(*outcome);
}

namespace {
std::unexpected<Status> broken_error() {
  return error(Code::kIoError, "a WAL sync of this meta store failed: no commit is acknowledged until meta restarts");
}
}  // namespace

void WalSyncer::when_durable(DurableFn done) {
  bool broken = false;
  {
    std::lock_guard lock(mu_);
    broken = broken_;
    if (!broken && !stop_) {
      waiting_.push_back(Waiter{++issued_, std::move(done)});
      // Wake the syncer only when it would act: a futex wake and a context
      // switch per commit while it lingers for a group (or is syncing) cost
      // more CPU than the commit itself.
      if (issued_ - std::max(synced_, failed_) >= wake_at_pending_) work_cv_.notify_one();
      return;
    }
  }
  // Outside mu_: a callback may commit again (and so call here).
  if (broken) return done(broken_error());
  done(error(Code::kUnavailable, "meta store closing before the commit was synced"));
}

void WalSyncer::linger(std::unique_lock<std::mutex>& lock) {
  if (!linger_ || last_batch_ <= 1) return;
  auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(std::min(last_sync_us_, kLingerUsMax));
  wake_at_pending_ = last_batch_;
  work_cv_.wait_until(lock, until, [&] { return stop_ || issued_ - std::max(synced_, failed_) >= last_batch_; });
}

std::deque<WalSyncer::Waiter> WalSyncer::take_covered(uint64_t target) {
  std::deque<Waiter> out;
  while (!waiting_.empty() && waiting_.front().ticket <= target) {
    out.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
  return out;
}

void WalSyncer::run() {
  std::unique_lock lock(mu_);
  for (;;) {
    wake_at_pending_ = 1;
    work_cv_.wait(lock, [&] { return stop_ || issued_ > std::max(synced_, failed_); });
    if (stop_) break;
    while (WEFT_FAULT("meta.wal_sync.delay")) {  // tests: let commits pile up before the sync starts
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      lock.lock();
    }
    linger(lock);
    if (stop_) break;
    uint64_t target = issued_;  // every ticket <= target wrote its WAL before now
    uint64_t covered = target - std::max(synced_, failed_);
    wake_at_pending_ = kNoWake;  // it looks for new commits when this sync is done
    lock.unlock();
    auto start = std::chrono::steady_clock::now();
    rocksdb::Status s = WEFT_FAULT("meta.wal_sync.fail") ? rocksdb::Status::IOError("injected WAL sync failure")
                                                          : db_->SyncWAL();
    last_sync_us_ =
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start).count();
    last_batch_ = covered;
    sync_us_->observe(static_cast<uint64_t>(last_sync_us_));
    syncs_->inc();
    batch_->observe(covered);
    lock.lock();
    if (s.ok()) {
      synced_ = target;
    } else {
      if (!broken_) spdlog::error("meta: WAL sync failed ({}): no commit is acknowledged until meta restarts", s.ToString());
      broken_ = true;
      failed_ = issued_;  // every commit so far: those after the target wrote behind the lost pages
      target = issued_;
    }
    std::deque<Waiter> done = take_covered(target);
    lock.unlock();
    Result<void> outcome;
    if (!s.ok()) outcome = error(from_rocks(s, "WAL sync after commit"));
    for (Waiter& w : done) w.done(outcome);
    lock.lock();
  }
  std::deque<Waiter> left = std::move(waiting_);
  lock.unlock();
  for (Waiter& w : left) w.done(error(Code::kUnavailable, "meta store closing before the commit was synced"));
}

}  // namespace weft::meta
