// MetaStore::expire_requests: dropping the retry records of clients that went
// away, one client at a time.
//
// A client's records R<client><seq> sort by seq, and the window deletes its
// oldest ones as it goes: the low end of its range holds tombstones until
// compaction drops them, the high end its newest record. SeekForPrev from the
// top of a client's range lands on that newest record without passing the
// tombstones (a forward Seek to the range's start would step over them), so a
// pass goes DOWN the client ids: look at one client's newest record, then seek
// below its range to the next client's.
#include <algorithm>
#include <limits>

#include <rocksdb/db.h>
#include <rocksdb/utilities/transaction_db.h>
#include <rocksdb/write_batch.h>

#include "common/free_space.h"
#include "common/logging.h"
#include "meta/meta_store.h"
#include "meta/txn.h"

namespace weft::meta {
namespace {


// One expire_requests call: its iterator, its budget and the batch it fills.
class RequestSweep {
 public:
  RequestSweep(rocksdb::DB& db, int64_t cutoff_ns, const ExpireLimits& limits,
               const std::function<void(uint64_t)>& before_expiring)
      : db_(db), cutoff_ns_(cutoff_ns), limits_(limits), before_expiring_(before_expiring),
        it_(db.NewIterator(rocksdb::ReadOptions())) {
    // One client looked at and one of its records deleted: every call gets on.
    limits_.steps_max = std::max<uint64_t>(limits_.steps_max, 2);
  }

  // Looks at clients from `cursor` down (nullopt: from the top) until the
  // budget is spent or the clients end; leaves in `cursor` where the next
  // call resumes. On error `cursor` is unchanged.
  Result<ExpireProgress> run(std::optional<uint64_t>& cursor);

 private:
  // Positions the iterator on the newest record of the highest client at or
  // below `client`; nullopt when no client is left.
  Result<std::optional<uint64_t>> seek_newest(uint64_t client);
  // Looks at `client`, whose newest record is under the iterator, and
  // deletes its records if it went away. false: the budget ran out first.
  Result<bool> visit(uint64_t client);
  // Whether the record under the iterator says its client went away. One
  // that does not decode goes too (it could only answer kCorruption).
  bool idle() const;
  // Deletes the records of `client` from the iterator's (its newest) down.
  // Returns false when the budget ran out before the last one.
  Result<bool> delete_down(uint64_t client);
  Result<void> flush();

  rocksdb::DB& db_;
  const int64_t cutoff_ns_;
  ExpireLimits limits_;
  const std::function<void(uint64_t)>& before_expiring_;
  // One iterator, so one implicit snapshot, for the whole call: see delete_down.
  std::unique_ptr<rocksdb::Iterator> it_;
  rocksdb::WriteBatch batch_;
  ExpireProgress progress_;
  uint64_t steps_ = 0;
};

Result<ExpireProgress> RequestSweep::run(std::optional<uint64_t>& cursor) {
  std::optional<uint64_t> next = cursor.value_or(std::numeric_limits<uint64_t>::max());
  while (next && steps_ < limits_.steps_max) {
    WEFT_TRY(std::optional<uint64_t> client, seek_newest(*next));
    if (!client) {
      next.reset();
      break;
    }
    next = *client;  // until it is done: a call out of budget inside it leaves it to the next
    WEFT_TRY(bool done, visit(*client));
    if (!done) break;
    next = *client == 0 ? std::nullopt : std::optional<uint64_t>(*client - 1);
  }
  WEFT_RETURN_IF_ERROR(flush());
  progress_.pass_done = !next;
  cursor = next;
  return progress_;
}

Result<bool> RequestSweep::visit(uint64_t client) {
  ++steps_;
  ++progress_.clients;
  if (!idle()) return true;
  if (before_expiring_) before_expiring_(client);
  return delete_down(client);
}

Result<std::optional<uint64_t>> RequestSweep::seek_newest(uint64_t client) {
  it_->SeekForPrev(key::request(client, std::numeric_limits<uint64_t>::max()));
  // A key of another length (only damage makes one) goes, as an undecodable
  // record does: failing here would stop every later pass at it.
  for (; it_->Valid() && it_->key().starts_with("R") && it_->key().size() != key::kRequestKeyBytes; it_->Prev()) {
    WEFT_LOG_WARN("retry records: removing a malformed key of {} bytes", it_->key().size());
    batch_.Delete(it_->key());
    ++steps_;
    ++progress_.removed;
    if (batch_.Count() >= limits_.batch_deletes_max) WEFT_RETURN_IF_ERROR(flush());
  }
  if (!it_->Valid()) {
    if (!it_->status().ok()) return error(from_rocks(it_->status(), "scan retry records"));
    return std::nullopt;
  }
  std::string_view k(it_->key().data(), it_->key().size());
  if (!k.starts_with('R')) return std::nullopt;  // below every retry record
  WEFT_TRY(uint64_t found, key::u64_at(k, 1));
  return found;
}

bool RequestSweep::idle() const {
  auto rec = decode_request(std::string_view(it_->value().data(), it_->value().size()));
  return !rec || rec->time_ns < cutoff_ns_;
}

// Point deletes, not DeleteRange: a range tombstone is checked by the reads
// of every key that share its memtable or SST (lookups of dentries and inodes
// too) until compaction drops it, and a burst of departed clients would leave
// thousands of them; a point tombstone costs only a scan through this
// client's range, which nobody but this sweep makes. Each client is deleted
// once in its life, ~request_window keys, in batches of bounded size.
//
// What is deleted is what this call's iterator sees: the records of its
// snapshot (taken when the call started) from the newest seq s down. A client
// that comes back meanwhile writes seq > s (clients number consecutively),
// which is not in the batch; a retry of a seq <= s either finds its record
// (the delete has not committed yet; TransactionDB::Write locks each key, so
// it waits for a retry holding the record) or re-executes, as the retry of an
// expired client always did, and records its outcome where the snapshot saw
// none. A transaction re-reading the newest record (GetForUpdate) would not
// cover this: a client that comes back writes a new key, not that one.
Result<bool> RequestSweep::delete_down(uint64_t client) {
  const std::string prefix = key::request_prefix(client);
  for (; it_->Valid() && it_->key().starts_with(prefix); it_->Prev()) {
    if (steps_ >= limits_.steps_max) return false;
    batch_.Delete(it_->key());
    ++steps_;
    ++progress_.removed;
    if (batch_.Count() >= limits_.batch_deletes_max) WEFT_RETURN_IF_ERROR(flush());
  }
  if (!it_->status().ok()) return error(from_rocks(it_->status(), "scan retry records"));
  return true;
}

Result<void> RequestSweep::flush() {
  if (batch_.Count() == 0) return {};
  // Not synced: deletes lost in a crash leave records the next pass removes,
  // and a record that is back only answers a retry as it did before.
  auto s = db_.Write(rocksdb::WriteOptions(), &batch_);
  if (!s.ok()) return error(from_rocks(s, "expire retry records"));
  batch_.Clear();
  return {};
}

}  // namespace

Result<ExpireProgress> MetaStore::expire_requests(int64_t age_ns, const ExpireLimits& limits) {
  WEFT_RETURN_IF_ERROR(space_->admit(FreeSpaceGuard::Kind::kRelease));
  std::lock_guard lock(expire_mu_);
  RequestSweep sweep(*db_, now_ns() - age_ns, limits, options_.before_expiring_client);
  WEFT_TRY(ExpireProgress progress, sweep.run(expire_cursor_));
  expire_removed_this_pass_ += progress.removed;
  if (progress.pass_done) {
    // The tombstones of a large removal would be stepped over by every later
    // pass (SeekForPrev and the Prev walks go through them) until compaction
    // happens to reach them: compact the retry records' range now (what it
    // touches is only that range's files; the memtable is flushed first).
    if (expire_removed_this_pass_ >= limits.compact_after_removed) WEFT_RETURN_IF_ERROR(compact_requests());
    expire_removed_this_pass_ = 0;
  }
  return progress;
}

Result<void> MetaStore::compact_requests() {
  const std::string begin = "R", end = key::prefix_end("R");
  rocksdb::Slice b(begin), e(end);
  auto s = db_->CompactRange(rocksdb::CompactRangeOptions(), &b, &e);
  if (!s.ok()) return error(from_rocks(s, "compact retry records"));
  return {};
}

}  // namespace weft::meta
