// meta/rocks_options.h
// The RocksDB options the metadata store opens its database with, tuned for
// its access pattern: small values, many point reads that miss (the retry
// record of a new request, the dentry of a name being created), inserts next
// to the previous insert of the same key family, and merge operands on shared
// directory stats and counters (merge_operator.h).
// Threading: pure functions; the objects they return are immutable.
#pragma once

#include <memory>

#include <rocksdb/options.h>
#include <rocksdb/slice_transform.h>

namespace weft::meta {

rocksdb::Options store_rocks_options();

// The memtable insert-hint prefix of a key (see codec.h for the layout):
// "D<parent>", "R<client>", "S<ino>" and "X<ino>" (first 9 bytes) group one
// directory's entries, one client's retry records, one inode's sessions or
// xattrs; inode-keyed families (I, T, G) and single keys group by their first
// byte, since new inode ids grow.
std::shared_ptr<const rocksdb::SliceTransform> make_insert_hint_prefix();

}  // namespace weft::meta
