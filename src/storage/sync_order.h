// storage/sync_order.h
// A syncing replica's guard against resync copies that arrive late.
//
// The source sends each resync copy under its chunk lock, so at the source
// the copy is ordered with the chain's updates of that chunk. At the syncing
// target it can still arrive after an update the source sent later: the
// copy was held up (queued behind other copies on its connection, which is
// not the one updates to the target take when another member follows it)
// past the source's timeout, the source released the lock, and a client's
// write went through the chain. A copy replaces whatever the target holds
// (it may stage below the committed version), so staged then it would move
// the chunk back under an acknowledged write, and the source's retry skips
// the chunk as delivered.
//
// Every Forward carries the sender's order (ForwardRequest.order). While a
// target syncs a chain, it remembers per chunk the order of the last update
// it applied from the chain (not a copy), and the service refuses a copy
// ordered before it (kVersionMismatch; the source cannot be waiting for such
// a copy: it sends no update of the chunk while it holds the lock). Entries
// are kept per chain for one chain version (an update still on its way from
// an older version changes nothing): a sync ends with a new version, and a
// Forward of an older one is refused as stale routing; each routing change
// drops the chains the target no longer syncs at their version (retain). At
// most kEntriesMax chunks are remembered per target. Past that the guard
// fails closed: an update of a chunk not remembered raises the floor of its
// bucket (one of kOverflowBuckets per chain, by chunk hash; 512 KiB, only
// for a chain that overflowed), and a copy of any chunk of that bucket not
// remembered, ordered before the floor, is refused too. The source sends
// such a copy again (with a later order) after a pause; a refusal costs a
// retry, a late copy let through would cost an acknowledged write. A chunk
// remembered later (room again) starts at its bucket's floor.
// Invariant: last_applied(id) >= the order of every update applied to `id`
// at this chain version.
#pragma once

#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "mgmt/routing.h"
#include "storage/chunk_id.h"

namespace weft::storage {

class SyncOrder {
 public:
  static constexpr size_t kEntriesMax = size_t{1} << 20;
  static constexpr size_t kOverflowBuckets = size_t{1} << 16;

  // An update ordered `order` (not a resync copy) was applied to `id` while
  // this target syncs `chain` at `version`. A newer version forgets the
  // chain's entries of the older one; one older than the entries' is ignored.
  void applied(mgmt::ChainId chain, mgmt::ChainVersion version, const ChunkId& id, uint64_t order);
  // The order of the last update applied to `id` while syncing `chain` at
  // `version` (its bucket's floor when `id` is not remembered: it may have
  // been updated unremembered); 0 if none.
  uint64_t last_applied(mgmt::ChainId chain, mgmt::ChainVersion version, const ChunkId& id) const;
  // Keeps only the chains the target syncs now, each at its version there.
  void retain(const std::unordered_map<mgmt::ChainId, mgmt::ChainVersion>& syncing);

  size_t size() const;

 private:
  struct Chain {
    mgmt::ChainVersion version = 0;
    std::unordered_map<ChunkId, uint64_t, ChunkIdHash> orders;
    // Once updates went unremembered: per bucket, the highest such order.
    std::vector<uint64_t> floors;
  };
  static size_t bucket_of(const ChunkId& id);

  mutable std::mutex mu_;
  std::unordered_map<mgmt::ChainId, Chain> chains_;  // GUARDED_BY(mu_)
  size_t entries_ = 0;                               // GUARDED_BY(mu_): over all chains
  bool full_logged_ = false;                         // GUARDED_BY(mu_): since the last time below the bound
};

}  // namespace weft::storage
