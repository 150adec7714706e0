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
