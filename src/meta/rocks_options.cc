#include "meta/rocks_options.h"

#include <rocksdb/filter_policy.h>
#include <rocksdb/table.h>

#include "common/rocks_env.h"
#include "meta/codec.h"
#include "meta/merge_operator.h"

namespace weft::meta {
namespace {

constexpr size_t kIdPrefixBytes = 9;  // family byte + big-endian u64

class InsertHintPrefix final : public rocksdb::SliceTransform {
 public:
  const char* Name() const override { return "weft.meta.insert_hint.v1"; }
  rocksdb::Slice Transform(const rocksdb::Slice& key) const override {
    return rocksdb::Slice(key.data(), grouped_by_id(key) ? kIdPrefixBytes : 1);
  }
  bool InDomain(const rocksdb::Slice& key) const override { return !key.empty(); }

 private:
  static bool grouped_by_id(const rocksdb::Slice& key) {
    if (key.size() < kIdPrefixBytes) return false;
    char c = key[0];
    return c == key::kDentryPrefix || c == 'R' || c == key::kSessionPrefix || c == 'X';
  }
};

}  // namespace

std::shared_ptr<const rocksdb::SliceTransform> make_insert_hint_prefix() {
  return std::make_shared<InsertHintPrefix>();
}

rocksdb::Options store_rocks_options() {
  rocksdb::Options opts;
  opts.create_if_missing = true;
  opts.env = rocks_env();  // pre-zeroed WAL: a commit's sync is a data flush, not a journal commit
  opts.merge_operator = make_merge_operator();
  opts.IncreaseParallelism(2);
  // Fold a hot directory's DirStat (and the inode counter) on write once 16
  // operands pile up: a write then costs a short walk (CountSuccessiveMergeEntries)
  // and a read of them folds at most 16.
  opts.max_successive_merges = 16;
  opts.enable_pipelined_write = false;
  // Point reads that miss skip the memtable's skip list and the SSTs' blocks.
  opts.memtable_prefix_bloom_size_ratio = 0.02;
  opts.memtable_whole_key_filtering = true;
  // Skip-list inserts start from the previous insert of the same family.
  opts.memtable_insert_with_hint_prefix_extractor = make_insert_hint_prefix();
  rocksdb::BlockBasedTableOptions table;
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  opts.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  return opts;
}

}  // namespace weft::meta
