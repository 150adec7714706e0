#include "mgmt/state_store.h"

#include <exception>

#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include "common/fault.h"
#include "common/free_space.h"
#include "common/rocks_env.h"

namespace weft::mgmt {
namespace {

std::unexpected<Status> rocks_error(const rocksdb::Status& s, std::string_view what) {
  Code code = s.IsCorruption() ? Code::kCorruption : s.IsNoSpace() ? Code::kNoSpace : Code::kIoError;
  return error(code, "mgmt state store: {}: {}", what, s.ToString());
}

class RocksStateStore final : public StateStore {
 public:
  RocksStateStore(std::unique_ptr<rocksdb::DB> db, const std::string& dir)
      : db_(std::move(db)), space_(dir, kReserveBytes) {}

  Result<PersistedState> load() override {
    try {
      PersistedState state;
      std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
      for (it->SeekToFirst(); it->Valid(); it->Next())
        WEFT_RETURN_IF_ERROR(decode_record(std::string_view(it->key().data(), it->key().size()),
                                           std::string_view(it->value().data(), it->value().size()), state));
      if (!it->status().ok()) return rocks_error(it->status(), "scan");
      return state;
    } catch (const std::exception& e) {
      return error(Code::kIoError, "mgmt state store: load: {}", e.what());
    }
  }

  Result<void> write(const StoreBatch& batch) override {
    if (WEFT_FAULT("mgmt.store.write")) return error(Code::kIoError, "mgmt state store: injected write failure");
    // The cluster's state changes are few and small: refused only once the
    // disk is nearly full (Kind::kRelease: below a quarter of the reserve),
    // before RocksDB could meet a full disk (common/free_space.h).
    WEFT_RETURN_IF_ERROR(space_.admit(FreeSpaceGuard::Kind::kRelease));
    try {
      rocksdb::WriteBatch wb;
      for (const auto& [k, v] : batch.puts) wb.Put(k, v);
      for (const auto& k : batch.deletes) wb.Delete(k);
      rocksdb::WriteOptions options;
      options.sync = true;
      rocksdb::Status s = db_->Write(options, &wb);
      if (!s.ok()) return rocks_error(s, "write");
      return {};
    } catch (const std::exception& e) {
      return error(Code::kIoError, "mgmt state store: write: {}", e.what());
    }
  }

 private:
  static constexpr uint64_t kReserveBytes = uint64_t{64} << 20;
  std::unique_ptr<rocksdb::DB> db_;
  FreeSpaceGuard space_;
};

}  // namespace

Result<std::unique_ptr<StateStore>> StateStore::open(const std::string& dir) {
  try {
    rocksdb::Options options;
    options.create_if_missing = true;
    options.keep_log_file_num = 4;
    options.env = rocks_env();
    rocksdb::DB* raw = nullptr;
    rocksdb::Status s = rocksdb::DB::Open(options, dir, &raw);
    if (!s.ok()) return rocks_error(s, "open " + dir);
    return std::unique_ptr<StateStore>(new RocksStateStore(std::unique_ptr<rocksdb::DB>(raw), dir));
  } catch (const std::exception& e) {
    return error(Code::kIoError, "mgmt state store: open {}: {}", dir, e.what());
  }
}

}  // namespace weft::mgmt
