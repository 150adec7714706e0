// meta/txn.h
// A typed view of one RocksDB pessimistic transaction of the metadata store.
// Reads that an operation depends on take row locks (GetForUpdate, shared or
// exclusive) held until commit; brand-new keys are written untracked, and
// shared directory stats are merged untracked (see merge_operator.h).
// A lock timeout or detected deadlock marks the Txn conflicted and returns
// kBusy; the caller (MetaStore::mutate) retries the whole operation.
// Threading: one thread at a time; owned by one mutation attempt.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <rocksdb/utilities/transaction.h>

#include "common/status.h"
#include "meta/codec.h"
#include "meta/types.h"

namespace weft::meta {

// RocksDB status -> Status; Busy/TimedOut/TryAgain/Expired become kBusy.
Status from_rocks(const rocksdb::Status& s, std::string_view what);
bool is_conflict(const rocksdb::Status& s);
// A directory's attrs with its DirStat applied (nlink, mtime, ctime).
Result<Inode> apply_dir_stat(Inode inode, const DirStat& stat);

class Txn {
 public:
  explicit Txn(std::unique_ptr<rocksdb::Transaction> txn) : txn_(std::move(txn)) {}

  bool conflict() const { return conflict_; }
  rocksdb::Transaction& raw() { return *txn_; }

  // Locks `key` and reads it; nullopt if absent.
  Result<std::optional<std::string>> lock_raw(const std::string& key, bool exclusive);
  // Reads without locking (latest committed data, plus this txn's writes).
  Result<std::optional<std::string>> get_raw(const std::string& key);

  // with_stat: merge a directory's DirStat in (nlink, mtime, ctime). Without
  // it a directory's nlink, mtime and ctime are the stored base values.
  Result<std::optional<Inode>> lock_inode(Ino ino, bool exclusive, bool with_stat = true);
  // Reads an inode without locking it (its attributes may change meanwhile;
  // its type never does); nullopt if absent. No DirStat merged in.
  Result<std::optional<Inode>> get_inode(Ino ino);
  // Like lock_inode but kNotFound when absent.
  Result<Inode> lock_existing(Ino ino, bool exclusive, bool with_stat = true);
  Result<std::optional<DentryValue>> lock_dentry(Ino parent, std::string_view name);
  // The merged stats of a directory (zeros when absent). Unlocked read.
  Result<DirStat> dir_stat(Ino ino);
  // Directory attrs merged with their DirStat (nlink, mtime, ctime).
  Result<Inode> with_dir_stat(Inode inode);

  // Writes an inode (locked by this txn). Directories store the base link
  // count 2; their subdirectories are counted in DirStat.
  Result<void> put_inode(Inode inode);
  Result<void> put(const std::string& key, const std::string& value);
  Result<void> put_untracked(const std::string& key, const std::string& value);
  Result<void> del(const std::string& key);
  Result<void> del_untracked(const std::string& key);
  Result<void> merge_untracked(const std::string& key, const std::string& value);
  // Queues the chunks of a destroyed file for the GC worker (key G<ino>). A
  // file of length 0 has no chunks to remove and is not queued. The queued
  // inode's ctime is when it was queued (ReadHolds::may_collect reads it).
  Result<void> queue_chunk_gc(const Inode& file);
  // The lowest inode this transaction queued, if any (for GcFloor::lower once
  // it committed).
  std::optional<Ino> gc_queued() const { return gc_queued_; }

  // Keys under `prefix` in order, at most `limit`, starting at `start`
  // (>= prefix), each with the size of its value (values are not copied).
  // Reads latest committed data: call after taking the locks that keep the
  // range stable.
  Result<std::vector<std::pair<std::string, size_t>>> scan_keys(const std::string& prefix, size_t limit,
                                                                const std::string& start = {});
  Result<bool> has_prefix(const std::string& prefix);

  void set_save_point() { txn_->SetSavePoint(); }
  Result<void> rollback_to_save_point();
  Result<void> commit();

 private:
  Result<void> check(const rocksdb::Status& s, std::string_view what);

  std::unique_ptr<rocksdb::Transaction> txn_;
  bool conflict_ = false;
  std::optional<Ino> gc_queued_;
};

}  // namespace weft::meta
