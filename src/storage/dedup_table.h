// storage/dedup_table.h
// Remembers the outcome of recent client updates by (client id, sequence
// number) so a retry after a lost acknowledgement is answered with the first
// outcome instead of being applied twice. Bounded: the oldest entries go
// first once `entries_max` is reached. One table per target; every chain
// member records the updates it applied, so a new head after a failover
// knows them too.
// Threading: thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <utility>

namespace weft::storage {

struct DedupOutcome {
  uint64_t version = 0;
  uint32_t chunk_length = 0;
  uint32_t chunk_crc = 0;
};

class DedupTable {
 public:
  explicit DedupTable(size_t entries_max = 65536) : entries_max_(entries_max) {}

  std::optional<DedupOutcome> find(uint64_t client_id, uint64_t sequence) const;
  // client_id 0 means "no dedup" and is ignored.
  void record(uint64_t client_id, uint64_t sequence, DedupOutcome outcome);
  size_t size() const;

 private:
  using Key = std::pair<uint64_t, uint64_t>;
  const size_t entries_max_;
  mutable std::mutex mu_;
  std::map<Key, DedupOutcome> entries_;  // GUARDED_BY(mu_)
  std::deque<Key> order_;                // GUARDED_BY(mu_), oldest first
};

}  // namespace weft::storage
