#include "storage/index_committer.h"

#include <algorithm>

#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include "common/fault.h"
#include "common/rocks_env.h"

namespace weft::storage {

IndexCommitter::IndexCommitter(rocksdb::DB* db, IoRing* ring, metrics::Histogram* group_size,
                               std::chrono::microseconds linger_us_max, bool one_flush)
    : db_(db), ring_(ring), group_size_(group_size), linger_us_max_(linger_us_max), one_flush_(one_flush) {}

// The last group's restart-check keys are not needed once it is durable
// (retire_restart_keys drops them then); a closed committer drops any left,
// so a later open does not take damage to those chunks for a lost last group.
// Deletes retired without a sync are made durable too: RocksDB (7.x) does
// not sync its log at close, and a power cut after a clean stop would bring
// them back (an acknowledged version rolled back for damage to its slot).
IndexCommitter::~IndexCommitter() {
  // Fault point: tests take this for a crash (the keys stay, as after a power cut).
  if (WEFT_FAULT("storage.index.keep_restart_keys") || failure()) return;
  if (last_keys_.empty()) {
    if (retired_unsynced_.load(std::memory_order_acquire)) db_->FlushWAL(/*sync=*/true);  // best effort, as below
    return;
  }
  rocksdb::WriteBatch batch;
  for (const std::string& key : last_keys_) batch.Delete(key);
  rocksdb::WriteOptions wo;
  wo.sync = true;
  db_->Write(wo, &batch);  // best effort: the keys are harmless where it fails (it covers the retired deletes too)
}

uint64_t IndexCommitter::groups() const {
  std::lock_guard lock(mu_);
  return groups_;
}

std::optional<Status> IndexCommitter::failure() const {
  std::lock_guard lock(failed_mu_);
  return failed_;
}

void IndexCommitter::set_failed(Status s) {
  std::lock_guard lock(failed_mu_);
  failed_ = std::move(s);
  failed_flag_.store(true, std::memory_order_release);
}

Result<void> IndexCommitter::commit(std::vector<IndexOp> ops, std::optional<SlabTicket> slab) {
  Request req{std::move(ops), slab};
  std::unique_lock lock(mu_);
  queue_.push_back(&req);
  cv_.notify_all();  // a lingering leader counts arrivals
  while (!req.done) {
    if (leading_) {
      cv_.wait(lock);
      continue;
    }
    // Lead: the queue (which holds `req`) becomes one group.
    leading_ = true;
    linger(lock);
    std::vector<Request*> group(queue_.begin(), queue_.end());
    queue_.clear();
    lock.unlock();
    auto start = std::chrono::steady_clock::now();
    Result<void> result = write_group(group);
    auto took = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start);
    lock.lock();
    for (Request* r : group) {
      r->result = result;
      r->done = true;
    }
    leading_ = false;
    last_group_ = group.size();
    last_group_us_ = took;
    ++groups_;
    cv_.notify_all();
  }
  return req.result;
}

IndexCommitter::Intent::Intent(IndexCommitter& c) : c_(c) {
  std::lock_guard lock(c_.mu_);
  ++c_.intents_;
}

IndexCommitter::Intent::~Intent() {
  std::lock_guard lock(c_.mu_);
  --c_.intents_;
}

void IndexCommitter::linger(std::unique_lock<std::mutex>& lock) {
  auto wanted = [&] { return std::max(intents_, last_group_ > 1 ? last_group_ : size_t{0}); };
  if (queue_.size() >= wanted()) return;
  // Before any group finished there is no duration to go by: the whole budget.
  auto budget = last_group_us_.count() > 0 ? std::min(last_group_us_, linger_us_max_) : linger_us_max_;
  auto deadline = std::chrono::steady_clock::now() + budget;
  while (queue_.size() < wanted())
    if (cv_.wait_until(lock, deadline) == std::cv_status::timeout) break;
}

Result<void> IndexCommitter::write_group(const std::vector<Request*>& group) {
  if (auto failed = failure()) return error(*failed);
  // One sync per slab file, up to the highest ticket the group holds.
  std::vector<SlabTicket> syncs;
  for (const Request* r : group) {
    if (!r->slab) continue;
    auto it = std::find_if(syncs.begin(), syncs.end(), [&](const SlabTicket& s) { return s.file == r->slab->file; });
    if (it == syncs.end()) {
      syncs.push_back(*r->slab);
    } else {
      it->ticket = std::max(it->ticket, r->slab->ticket);
    }
  }
  if (!one_flush_ || syncs.empty()) {
    for (const SlabTicket& s : syncs) WEFT_RETURN_IF_ERROR(s.file->sync_to(*ring_, s.ticket));
    return write_index(group, false);
  }
  // A slab file whose sync failed fails every sync: learn it before the record is written.
  for (const SlabTicket& s : syncs)
    if (auto failed = s.file->failure()) return error(*failed);
  // One flush: the record's pages reach the device, then the slab syncs flush
  // it. The first must be a sync that starts after the record was written: one
  // that a concurrent or earlier leader started may already cover the slots
  // (their tickets) but not the record. The others need only cover their slots.
  WEFT_RETURN_IF_ERROR(write_index(group, true));
  for (size_t i = 0; i < syncs.size(); ++i) {
    const SlabTicket& s = syncs[i];
    Result<void> synced = i == 0 ? s.file->sync_from_now(*ring_) : s.file->sync_to(*ring_, s.ticket);
    if (!synced) {
      Status failed = synced.error().with_context(
          "slab sync after the index record was written: the target refuses updates until it is reopened");
      set_failed(failed);
      return error(failed);
    }
  }
  retire_restart_keys();
  return {};
}

// Left until the next group, the keys of a durable group made an idle
// target that crashed take damage found in those chunks at the next open
// (bit rot after the ack) for a group lost in a power cut, and roll the
// acknowledged version back (or drop a new chunk). Not synced: where the
// delete does not reach the disk the keys stay, as they did before.
// Fault point storage.index.keep_restart_keys: they stay (tests: the power
// cut came before the group's flush returned).
void IndexCommitter::retire_restart_keys() {
  if (last_keys_.empty() || WEFT_FAULT("storage.index.keep_restart_keys")) return;
  rocksdb::WriteBatch batch;
  for (const std::string& key : last_keys_) batch.Delete(key);
  if (!db_->Write(rocksdb::WriteOptions(), &batch).ok()) return;
  last_keys_.clear();
  retired_unsynced_.store(true, std::memory_order_release);
}

Result<void> IndexCommitter::sync_retired_keys() {
  std::unique_lock lock(mu_);
  // A group running syncs the WAL itself (and its own keys are not retired yet).
  if (!retired_unsynced_.load(std::memory_order_acquire) || leading_) return {};
  leading_ = true;  // no group starts meanwhile: this sync is not one without its flush
  lock.unlock();
  rocksdb::Status s = db_->FlushWAL(/*sync=*/true);
  lock.lock();
  leading_ = false;
  if (s.ok()) retired_unsynced_.store(false, std::memory_order_release);
  cv_.notify_all();  // a commit queued meanwhile leads now
  if (!s.ok()) return error(Code::kIoError, "sync of the chunk index's log: {}", s.ToString());
  return {};
}

Result<void> IndexCommitter::write_index(const std::vector<Request*>& group, bool without_flush) {
  rocksdb::WriteBatch batch;
  for (const std::string& key : last_keys_) batch.Delete(key);  // first: this group may put one again
  std::vector<std::string> keys;
  for (const Request* r : group)
    for (const IndexOp& op : r->ops) {
      if (op.value) {
        batch.Put(op.key, *op.value);
        if (op.until_next_group) keys.push_back(op.key);
      } else {
        batch.Delete(op.key);
      }
    }
  rocksdb::WriteOptions wo;
  wo.sync = true;
  std::optional<WalSyncWithoutFlush> scope;
  if (without_flush) scope.emplace();
  // Fault points: the write fails before anything is written, or after the
  // record was written (a failed WAL sync: the record may be on the disk).
  rocksdb::Status s = WEFT_FAULT("storage.index.write_fail") ? rocksdb::Status::IOError("injected: index write")
                                                             : db_->Write(wo, &batch);
  if (s.ok() && WEFT_FAULT("storage.index.write_then_fail")) s = rocksdb::Status::IOError("injected: after the write");
  scope.reset();
  if (!s.ok()) {
    // Sticky whatever the order: the record may be on the disk (or reach it
    // with a later WAL write) although the commit failed, so its slots must
    // not be freed and reused, nor the group's chunks staged again, until a
    // reopen reads what the index holds; RocksDB itself refuses writes after
    // a failed WAL write or sync.
    Status failed(Code::kIoError,
                  fmt::format("synced index write of {} updates: {}: the target refuses updates until it is reopened",
                              group.size(), s.ToString()));
    set_failed(failed);
    return error(failed);
  }
  last_keys_ = std::move(keys);
  retired_unsynced_.store(false, std::memory_order_release);  // this synced write covers the deletes before it
  if (group_size_) group_size_->observe(group.size());
  return {};
}

}  // namespace weft::storage
