// storage/dedup_table.h
// Remembers the outcome of recent client updates by (client id, sequence
// number) so a retry after a lost acknowledgement is answered with the first
// outcome instead of being applied twice. Each entry also names the chunk and
// the kind of update it was for: a (client id, sequence) that comes back for
// another chunk or kind is not a retry, and must not be answered from here
// (the caller refuses it). Bounded: the oldest entries go first once
// `entries_max` is reached. An evicted update's retry could no longer be told
// from a first arrival, so the table keeps, per client, the highest sequence
// it evicted (the client's floor): a retry at or below it that has no entry
// is `forgotten` and the caller refuses it (kOutcomeUnknown) instead of
// applying it a second time, which could overwrite a later acknowledged write
// of another client. A first attempt is never a duplicate and is applied
// whatever its sequence. Floors of at most `clients_max` clients are kept,
// the least recently raised going first (such a client evicted nothing here
// while `clients_max` others did: far longer than a client retries).
// One table per target; every chain member records
// the updates it applied, so a new head after a failover knows them too.
// A replica whose chunk is replaced wholesale (its predecessor's content, a
// resync copy) keeps the entries of the updates the sender's content holds
// (the sender's own entries for the chunk, sent with it: `replaced`) and
// forgets the others, whose retries must be applied again; a removal by a
// resync or by a reconcile keeps the entries the sender holds for the chunk
// (updates it applied too, which a removal then undid: `forget_chunk_except`)
// and forgets the others. Invariant: a member's entries for a chunk name
// updates its committed content holds, or updates a later removal of the
// chunk undid.
// Threading: thread-safe.
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "storage/chunk_id.h"

namespace weft::storage {

// Entries a REPLACE, or a resync's or reconcile's removal, carries at most
// (DedupTable::keys_of): a bound on its request.
inline constexpr size_t kHeldKeysMax = 1024;

struct DedupOutcome {
  uint64_t version = 0;
  uint32_t chunk_length = 0;
  uint32_t chunk_crc = 0;
};

struct DedupEntry {
  ChunkId chunk;
  int kind = 0;  // pb::UpdateKind as applied on this replica
  DedupOutcome outcome;
};

class DedupTable {
 public:
  explicit DedupTable(size_t entries_max = 65536, size_t clients_max = 65536)
      : entries_max_(entries_max), clients_max_(clients_max) {}

  std::optional<DedupEntry> find(uint64_t client_id, uint64_t sequence) const;
  // True when an entry of this client at or above `sequence` was evicted:
  // whether (client_id, sequence) was applied here can no longer be told.
  bool forgotten(uint64_t client_id, uint64_t sequence) const;
  // client_id 0 means "no dedup" and is ignored.
  void record(uint64_t client_id, uint64_t sequence, DedupEntry entry);
  // Drops every entry naming `chunk` (their retries are applied again: no
  // floor is raised); returns how many.
  size_t forget_chunk(const ChunkId& chunk);
  using Key = std::pair<uint64_t, uint64_t>;  // (client id, sequence)
  // The keys of the entries naming `chunk`, at most `max`: the most recently
  // recorded here (the likeliest to be retried still; sequences of different
  // clients are not comparable).
  std::vector<Key> keys_of(const ChunkId& chunk, size_t max) const;
  // `chunk` was replaced by content holding the updates `held` (the sender's
  // keys_of): entries naming it that are not in `held` go, as in
  // forget_chunk; those in it stay, or are recorded (as `outcome`, kind
  // `kind`, the replacement's) when missing here. Returns how many went.
  // (A `held` cut to kHeldKeysMax by keys_of may omit updates the content
  // holds: their retries would be applied again. Raising the client's floor
  // instead would refuse that client's retries on every chunk: left so.)
  size_t replaced(const ChunkId& chunk, const std::vector<Key>& held, int kind, DedupOutcome outcome);
  // `chunk` was removed by a sender whose table holds `held` for it (its
  // keys_of): entries naming it that are not in `held` go; those in it stay
  // (nothing is recorded for the missing ones). Returns how many went. (A
  // `held` cut to kHeldKeysMax omits the sender's older entries: their
  // retries are applied again, as `replaced` says.)
  size_t forget_chunk_except(const ChunkId& chunk, const std::vector<Key>& held);
  size_t size() const;

 private:
  struct Slot {
    DedupEntry entry;
    std::list<Key>::iterator age;  // in order_
    uint64_t stamp = 0;            // when recorded: later is greater
  };
  struct Floor {
    uint64_t sequence = 0;
    std::list<uint64_t>::iterator age;  // in floor_order_
  };
  void erase(std::map<Key, Slot>::iterator it);  // REQUIRES: mu_ held
  // Erases the entries naming `chunk` whose keys are not in `keep`, adding
  // every key it saw to `here` (if given); how many went. REQUIRES: mu_ held.
  size_t drop_unheld_locked(const ChunkId& chunk, const std::set<Key>& keep, std::set<Key>* here);
  void raise_floor(const Key& evicted);          // REQUIRES: mu_ held

  const size_t entries_max_;
  const size_t clients_max_;
  mutable std::mutex mu_;
  std::map<Key, Slot> entries_;                  // GUARDED_BY(mu_)
  std::list<Key> order_;                         // GUARDED_BY(mu_), oldest first
  uint64_t stamps_ = 0;                          // GUARDED_BY(mu_), the last Slot::stamp given
  std::set<std::pair<ChunkId, Key>> by_chunk_;   // GUARDED_BY(mu_), the keys of entries_ by chunk
  std::map<uint64_t, Floor> floors_;             // GUARDED_BY(mu_), by client id
  std::list<uint64_t> floor_order_;              // GUARDED_BY(mu_), least recently raised first
};

}  // namespace weft::storage
