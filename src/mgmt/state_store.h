// mgmt/state_store.h
// mgmtd's durable state: a plain RocksDB in one directory holding the records
// of mgmt/state_codec.h. Every write is one atomic, synced WriteBatch, so a
// crash leaves either the state before or after a change, never half of it.
// RocksDB is kept out of this header; its errors become Status values
// (exceptions never escape).
// Threading: not thread-safe; ClusterState serialises calls under its mutex.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "mgmt/state_codec.h"

namespace weft::mgmt {

struct StoreBatch {
  std::vector<std::pair<std::string, std::string>> puts;
  std::vector<std::string> deletes;
  bool empty() const { return puts.empty() && deletes.empty(); }
};

class StateStore {
 public:
  // Creates the directory's database when missing.
  static Result<std::unique_ptr<StateStore>> open(const std::string& dir);
  virtual ~StateStore() = default;

  // Reads every record; an empty database gives the default PersistedState.
  virtual Result<PersistedState> load() = 0;
  // Applies the batch atomically with sync. Fault point "mgmt.store.write".
  virtual Result<void> write(const StoreBatch& batch) = 0;
};

}  // namespace weft::mgmt
