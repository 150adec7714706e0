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
// Safe because RocksDB's log reader treats an all-zero record header as
// padding (record type 0, "reserved for preallocated files") and skips the
// rest of the block: a log that ends in zeros replays exactly like one that
// ends at its last record, and a torn last record followed by zeros is a torn
// last record, as with appends. Only files named like WALs ("<digits>.log")
// are affected; SSTs, MANIFEST and the info LOG are written as usual.
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

// The file system behind rocks_env(), over `base`, zeroing WALs ahead in
// steps growing from `first_step` bytes to `max_step` (tests use small steps
// to cross many of them).
std::shared_ptr<rocksdb::FileSystem> prezeroed_wal_fs(std::shared_ptr<rocksdb::FileSystem> base,
                                                      uint64_t first_step = 1 << 20, uint64_t max_step = 16 << 20);

}  // namespace weft
