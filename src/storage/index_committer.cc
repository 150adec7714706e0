#include "storage/index_committer.h"

#include <algorithm>

#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include "common/fault.h"

namespace weft::storage {

IndexCommitter::IndexCommitter(rocksdb::DB* db, IoRing* ring, metrics::Histogram* group_size,
                               std::chrono::microseconds linger_us_max)
    : db_(db), ring_(ring), group_size_(group_size), linger_us_max_(linger_us_max) {}

uint64_t IndexCommitter::groups() const {
  std::lock_guard lock(mu_);
  return groups_;
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
  // 1. Every slot the group points to is durable first (one sync per file).
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
  for (const SlabTicket& s : syncs) {
    WEFT_RETURN_IF_ERROR(s.file->sync_to(*ring_, s.ticket));
  }
  // 2. One synced batch for the whole group.
  rocksdb::WriteBatch batch;
  for (const Request* r : group)
    for (const IndexOp& op : r->ops) {
      if (op.value) {
        batch.Put(op.key, *op.value);
      } else {
        batch.Delete(op.key);
      }
    }
  if (WEFT_FAULT("storage.index.write_fail")) return error(Code::kIoError, "injected: index write");
  rocksdb::WriteOptions wo;
  wo.sync = true;
  rocksdb::Status s = db_->Write(wo, &batch);
  if (!s.ok()) return error(Code::kIoError, "synced index write of {} updates: {}", group.size(), s.ToString());
  if (group_size_) group_size_->observe(group.size());
  return {};
}

}  // namespace weft::storage
