// common/rocks_env.h
// The RocksDB Env every Weft store opens with (meta store, chunk index).
//
// It differs from rocksdb::Env::Default() in one thing: write-ahead logs are
// written in place over zeros laid down (and made durable) ahead of the
// records, instead of being appended. A synced append grows the file, so each
// WAL sync is a journal commit of the new size on top of the data flush; a
// synced overwrite is the data flush alone (about 40% cheaper on the disks we
// measured). Stores that commit grouped transactions wait for that sync, so
// its cost is their commit latency.
//
// Safe because of two things. RocksDB's log reader treats an all-zero record
// header as padding (record type 0, "reserved for preallocated files"), so a
// log that ends in zeros replays like one that ends at its last record, and a
// torn last record followed by zeros is a torn last record, as with appends.
// And because overwrites have no journal commit to order them, a power loss
// during a sync that covers several records may keep a later page and lose an
// earlier one; where the lost page starts with a record header the reader
// would skip its zeros as padding and replay the records after it (a commit
// without one it depends on). So WALs are read through a view that ends at
// the first all-zero record header: replay is always a prefix of the log.
// Only files named like WALs ("<digits>.log") are affected; SSTs, MANIFEST
// and the info LOG are written and read as usual.
// Cost: the zeros are written ahead in steps, so a nearly full disk reports
// ENOSPC up to one step (16 MiB at most) earlier, as a RocksDB write error.
#pragma once

#include <cstdint>
#include <memory>

namespace rocksdb {
class Env;
class FileSystem;
}  // namespace rocksdb

namespace weft {

// Process-wide, never destroyed (a DB may outlive any owner we could give it).
rocksdb::Env* rocks_env();

// While one is alive on the calling thread, a WAL sync that RocksDB runs on
// this thread writes the log's pages to the device and waits for them
// (sync_file_range) but leaves out the flush of the device's volatile cache.
// The caller owes that flush: before it acknowledges anything it must
// fdatasync a file on the same device (any fdatasync flushes the device).
// The chunk index uses it so that one flush covers a commit group's slot
// writes and its index record (storage/index_committer.h). Only safe where no
// other thread writes the same DB meanwhile (RocksDB may sync their records
// in the scoped call).
class WalSyncWithoutFlush {
 public:
  WalSyncWithoutFlush();
  ~WalSyncWithoutFlush();
  WalSyncWithoutFlush(const WalSyncWithoutFlush&) = delete;
  WalSyncWithoutFlush& operator=(const WalSyncWithoutFlush&) = delete;
  // How many WAL syncs in this process left their flush out (tests).
  static uint64_t deferred_syncs();
};

// The file system behind rocks_env(), over `base`, zeroing WALs ahead in
// steps growing from `first_step` bytes to `max_step` (tests use small steps
// to cross many of them).
std::shared_ptr<rocksdb::FileSystem> prezeroed_wal_fs(std::shared_ptr<rocksdb::FileSystem> base,
                                                      uint64_t first_step = 1 << 20, uint64_t max_step = 16 << 20);

}  // namespace weft
