#include "meta/merge_operator.h"

#include <algorithm>
#include <optional>
#include <span>

#include "meta/codec.h"

namespace weft::meta {
namespace {

// A directory's mtime updated to `next` (a change's clock reading) from
// `acc`: the later of the two, since concurrent changes commit in an order
// that need not be their clocks' (one that read the clock first may commit
// second); but a time more than kStepBackNs behind is taken as it is: the
// mtime was set ahead (utimensat to the future) or meta's clock stepped back,
// and Linux sets it to "now" on every change: max() would freeze it.
// Not associative (hence no partial merges below): operands fold in order.
// (ctime takes the maximum: no call sets it, and the inode record's ctime,
// which other changes move, counts too: txn.h apply_dir_stat.)
constexpr int64_t kStepBackNs = 10'000'000'000;
// (`acc - kStepBackNs` would overflow for an mtime set near INT64_MIN:
// compared as next + kStepBackNs < acc, which cannot overflow for a change's
// clock reading, and is checked for any other.)
int64_t changed_time(int64_t acc, int64_t next) {
  int64_t next_ahead = 0;
  const bool behind = !__builtin_add_overflow(next, kStepBackNs, &next_ahead) && next_ahead < acc;
  return behind ? next : std::max(acc, next);
}

// The two merged value kinds: how to read, combine and write them.
struct DirStatValue {
  static Result<DirStat> decode(std::string_view v) { return decode_dir_stat(v); }
  static std::string encode(const DirStat& s) { return encode_dir_stat(s); }
  static DirStat combine(const DirStat& a, const DirStat& b) {
    return DirStat{changed_time(a.mtime_ns, b.mtime_ns), std::max(a.ctime_ns, b.ctime_ns),
                   a.nlink_delta + b.nlink_delta};
  }
};
struct CounterValue {
  static Result<int64_t> decode(std::string_view v) { return decode_i64(v); }
  static std::string encode(int64_t v) { return encode_i64(v); }
  static int64_t combine(int64_t a, int64_t b) { return a + b; }
};

std::string_view view(const rocksdb::Slice& s) { return std::string_view(s.data(), s.size()); }

// Folds `operands` onto `existing` (absent: the first operand) in one pass:
// decode each, encode once. False when any value does not decode.
template <class V>
bool fold(const rocksdb::Slice* existing, std::span<const rocksdb::Slice> operands, std::string* out) {
  std::optional<typename decltype(V::decode({}))::value_type> acc;
  if (existing) {
    auto base = V::decode(view(*existing));
    if (!base) return false;
    acc = *base;
  }
  for (const rocksdb::Slice& operand : operands) {
    auto add = V::decode(view(operand));
    if (!add) return false;
    acc = acc ? V::combine(*acc, *add) : *add;
  }
  if (!acc) return false;
  *out = V::encode(*acc);
  return true;
}

bool fold_by_key(const rocksdb::Slice& key, const rocksdb::Slice* existing, std::span<const rocksdb::Slice> operands,
                 std::string* out) {
  if (key.empty()) return false;
  if (key[0] == key::kDirStatPrefix) return fold<DirStatValue>(existing, operands, out);
  if (key[0] == key::kCounterPrefix) return fold<CounterValue>(existing, operands, out);
  return false;
}

// Only full merges, onto the existing value in operand order (a directory
// time's update is not associative); PartialMerge stays the base's "cannot".
class MetaMergeOperator final : public rocksdb::MergeOperator {
 public:
  const char* Name() const override { return "weft.meta.merge.v1"; }

  // Folds every operand in one pass (a directory read folds up to max_successive_merges).
  bool FullMergeV2(const MergeOperationInput& in, MergeOperationOutput* out) const override {
    return fold_by_key(in.key, in.existing_value, in.operand_list, &out->new_value);
  }
};

}  // namespace

std::shared_ptr<rocksdb::MergeOperator> make_merge_operator() {
  return std::make_shared<MetaMergeOperator>();
}

}  // namespace weft::meta
