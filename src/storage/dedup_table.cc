#include "storage/dedup_table.h"

#include <vector>

namespace weft::storage {

std::optional<DedupEntry> DedupTable::find(uint64_t client_id, uint64_t sequence) const {
  if (client_id == 0) return std::nullopt;
  std::lock_guard lock(mu_);
  auto it = entries_.find({client_id, sequence});
  if (it == entries_.end()) return std::nullopt;
  return it->second.entry;
}

void DedupTable::record(uint64_t client_id, uint64_t sequence, DedupEntry entry) {
  if (client_id == 0) return;
  Key key{client_id, sequence};
  std::lock_guard lock(mu_);
  if (auto it = entries_.find(key); it != entries_.end()) {  // keeps its age
    by_chunk_.erase({it->second.entry.chunk, key});
    by_chunk_.insert({entry.chunk, key});
    it->second.entry = entry;
    return;
  }
  order_.push_back(key);
  entries_.emplace(key, Slot{entry, std::prev(order_.end())});
  by_chunk_.insert({entry.chunk, key});
  while (entries_.size() > entries_max_) erase(entries_.find(order_.front()));
}

size_t DedupTable::forget_chunk(const ChunkId& chunk) {
  std::lock_guard lock(mu_);
  std::vector<Key> keys;
  for (auto it = by_chunk_.lower_bound({chunk, Key{0, 0}}); it != by_chunk_.end() && it->first == chunk; ++it)
    keys.push_back(it->second);
  for (const Key& k : keys) erase(entries_.find(k));
  return keys.size();
}

void DedupTable::erase(std::map<Key, Slot>::iterator it) {
  by_chunk_.erase({it->second.entry.chunk, it->first});
  order_.erase(it->second.age);
  entries_.erase(it);
}

size_t DedupTable::size() const {
  std::lock_guard lock(mu_);
  return entries_.size();
}

}  // namespace weft::storage
