#include "meta/merge_operator.h"

#include <algorithm>

#include "meta/codec.h"

namespace weft::meta {
namespace {

class MetaMergeOperator final : public rocksdb::AssociativeMergeOperator {
 public:
  bool Merge(const rocksdb::Slice& key, const rocksdb::Slice* existing, const rocksdb::Slice& value,
             std::string* new_value, rocksdb::Logger*) const override {
    if (key.empty()) return false;
    std::string_view operand(value.data(), value.size());
    if (key[0] == key::kDirStatPrefix) return merge_dir_stat(existing, operand, new_value);
    if (key[0] == key::kCounterPrefix) return merge_counter(existing, operand, new_value);
    return false;
  }
  const char* Name() const override { return "weft.meta.merge.v1"; }

  // Folds every operand in one pass: decode each, encode once (the pairwise
  // default re-encodes after every operand; a directory read folds up to
  // max_successive_merges of them).
  bool FullMergeV2(const MergeOperationInput& in, MergeOperationOutput* out) const override {
    if (in.key.empty()) return false;
    if (in.key[0] == key::kDirStatPrefix) return fold_dir_stat(in, out->new_value);
    if (in.key[0] == key::kCounterPrefix) return fold_counter(in, out->new_value);
    return false;
  }

 private:
  static bool merge_dir_stat(const rocksdb::Slice* existing, std::string_view operand, std::string* out) {
    auto add = decode_dir_stat(operand);
    if (!add) return false;
    if (!existing) {
      *out = std::string(operand);
      return true;
    }
    auto base = decode_dir_stat(std::string_view(existing->data(), existing->size()));
    if (!base) return false;
    DirStat s{std::max(base->mtime_ns, add->mtime_ns), std::max(base->ctime_ns, add->ctime_ns),
              base->nlink_delta + add->nlink_delta};
    *out = encode_dir_stat(s);
    return true;
  }
  static bool fold_dir_stat(const MergeOperationInput& in, std::string& out) {
    DirStat acc;
    if (in.existing_value) {
      auto base = decode_dir_stat(std::string_view(in.existing_value->data(), in.existing_value->size()));
      if (!base) return false;
      acc = *base;
    }
    for (const rocksdb::Slice& operand : in.operand_list) {
      auto add = decode_dir_stat(std::string_view(operand.data(), operand.size()));
      if (!add) return false;
      acc = DirStat{std::max(acc.mtime_ns, add->mtime_ns), std::max(acc.ctime_ns, add->ctime_ns),
                    acc.nlink_delta + add->nlink_delta};
    }
    out = encode_dir_stat(acc);
    return true;
  }
  static bool fold_counter(const MergeOperationInput& in, std::string& out) {
    int64_t acc = 0;
    if (in.existing_value) {
      auto base = decode_i64(std::string_view(in.existing_value->data(), in.existing_value->size()));
      if (!base) return false;
      acc = *base;
    }
    for (const rocksdb::Slice& operand : in.operand_list) {
      auto add = decode_i64(std::string_view(operand.data(), operand.size()));
      if (!add) return false;
      acc += *add;
    }
    out = encode_i64(acc);
    return true;
  }
  static bool merge_counter(const rocksdb::Slice* existing, std::string_view operand, std::string* out) {
    auto add = decode_i64(operand);
    if (!add) return false;
    int64_t base = 0;
    if (existing) {
      auto b = decode_i64(std::string_view(existing->data(), existing->size()));
      if (!b) return false;
      base = *b;
    }
    *out = encode_i64(base + *add);
    return true;
  }
};

}  // namespace

std::shared_ptr<rocksdb::MergeOperator> make_merge_operator() {
  return std::make_shared<MetaMergeOperator>();
}

}  // namespace weft::meta
