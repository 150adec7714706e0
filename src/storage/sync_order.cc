#include "storage/sync_order.h"

#include "common/logging.h"

namespace weft::storage {

size_t SyncOrder::bucket_of(const ChunkId& id) { return ChunkIdHash{}(id) % kOverflowBuckets; }

void SyncOrder::applied(mgmt::ChainId chain, mgmt::ChainVersion version, const ChunkId& id, uint64_t order) {
  std::lock_guard lock(mu_);
  Chain& c = chains_[chain];
  if (version < c.version) return;  // finished after the chain moved on: its entries are not this version's
  if (version > c.version) {
    entries_ -= c.orders.size();
    c.orders.clear();
    c.floors.clear();
    c.version = version;
  }
  auto it = c.orders.find(id);
  if (it != c.orders.end()) {
    it->second = std::max(it->second, order);
    return;
  }
  if (entries_ < kEntriesMax) {
    // Room again (another chain's entries went): updates of `id` made while
    // it was not remembered are below its bucket's floor.
    const uint64_t floor = c.floors.empty() ? 0 : c.floors[bucket_of(id)];
    c.orders.emplace(id, std::max(order, floor));
    ++entries_;
    return;
  }
  if (c.floors.empty()) c.floors.assign(kOverflowBuckets, 0);
  uint64_t& floor = c.floors[bucket_of(id)];
  floor = std::max(floor, order);
  if (!full_logged_) {
    full_logged_ = true;
    WEFT_LOG_WARN("sync order: {} chunks updated during resyncs are remembered, the most kept; resync copies of "
                  "chunks updated since are refused when sent before any update of a chunk of the same bucket "
                  "(the source sends them again)",
                  kEntriesMax);
  }
}

uint64_t SyncOrder::last_applied(mgmt::ChainId chain, mgmt::ChainVersion version, const ChunkId& id) const {
  std::lock_guard lock(mu_);
  auto c = chains_.find(chain);
  if (c == chains_.end() || c->second.version != version) return 0;
  // A remembered chunk's entry covers every update of it (it started at its
  // bucket's floor); the floor speaks only for chunks not remembered.
  auto it = c->second.orders.find(id);
  if (it != c->second.orders.end()) return it->second;
  return c->second.floors.empty() ? 0 : c->second.floors[bucket_of(id)];
}

void SyncOrder::retain(const std::unordered_map<mgmt::ChainId, mgmt::ChainVersion>& syncing) {
  std::lock_guard lock(mu_);
  for (auto c = chains_.begin(); c != chains_.end();) {
    auto now = syncing.find(c->first);
    if (now != syncing.end() && now->second == c->second.version) {
      ++c;
      continue;
    }
    entries_ -= c->second.orders.size();
    c = chains_.erase(c);
  }
  if (entries_ < kEntriesMax) full_logged_ = false;
}

size_t SyncOrder::size() const {
  std::lock_guard lock(mu_);
  return entries_;
}

}  // namespace weft::storage
