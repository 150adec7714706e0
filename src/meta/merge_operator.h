// meta/merge_operator.h
// The RocksDB merge operator of the metadata store. It lets concurrent
// transactions update shared values without taking a lock (MergeUntracked):
//   T<ino>  DirStat: mtime takes the later time, unless the new one is more
//           than 10 s earlier (a time set ahead, a clock stepped back: then
//           the new one); ctime the maximum; nlink_delta adds;
//   C...    i64 counters: add.
// Threading: stateless, called by RocksDB from any thread. A malformed operand
// makes the merge fail, which RocksDB reports as Corruption on read.
#pragma once

#include <memory>

#include <rocksdb/merge_operator.h>

namespace weft::meta {

std::shared_ptr<rocksdb::MergeOperator> make_merge_operator();

}  // namespace weft::meta
