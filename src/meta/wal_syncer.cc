#include "meta/wal_syncer.h"

#include <rocksdb/db.h>

#include "meta/txn.h"

namespace weft::meta {

WalSyncer::WalSyncer(rocksdb::DB* db, metrics::Registry& registry)
    : db_(db), syncs_(&registry.counter("weft_meta_wal_syncs_total", "WAL fsyncs covering commits")) {
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

Result<void> WalSyncer::wait_durable() {
  std::unique_lock lock(mu_);
  uint64_t ticket = ++issued_;
  work_cv_.notify_one();
  done_cv_.wait(lock, [&] { return synced_ >= ticket || failed_ >= ticket || stop_; });
  if (synced_ >= ticket) return {};
  if (stop_) return error(Code::kUnavailable, "meta store closing before the commit was synced");
  return error(Code::kIoError, "WAL sync failed after commit");
}

void WalSyncer::run() {
  std::unique_lock lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [&] { return stop_ || issued_ > std::max(synced_, failed_); });
    if (stop_) break;
    uint64_t target = issued_;  // every ticket <= target wrote its WAL before now
    lock.unlock();
    rocksdb::Status s = db_->SyncWAL();
    syncs_->inc();
    lock.lock();
    if (s.ok()) {
      synced_ = target;
    } else {
      failed_ = target;
    }
    done_cv_.notify_all();
  }
  done_cv_.notify_all();
}

}  // namespace weft::meta
