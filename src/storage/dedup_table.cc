#include "storage/dedup_table.h"

#include <algorithm>
#include <vector>

namespace weft::storage {

std::optional<DedupEntry> DedupTable::find(uint64_t client_id, uint64_t sequence) const {
  if (client_id == 0) return std::nullopt;
  std::lock_guard lock(mu_);
  auto it = entries_.find({client_id, sequence});
  if (it == entries_.end()) return std::nullopt;
  return it->second.entry;
}

bool DedupTable::forgotten(uint64_t client_id, uint64_t sequence) const {
  if (client_id == 0) return false;
  std::lock_guard lock(mu_);
  auto it = floors_.find(client_id);
  return it != floors_.end() && sequence <= it->second.sequence;
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
  entries_.emplace(key, Slot{entry, std::prev(order_.end()), ++stamps_});
  by_chunk_.insert({entry.chunk, key});
  while (entries_.size() > entries_max_) {
    raise_floor(order_.front());
    erase(entries_.find(order_.front()));
  }
}

void DedupTable::raise_floor(const Key& evicted) {
  auto [it, added] = floors_.try_emplace(evicted.first);
  Floor& f = it->second;
  if (added) {
    f.age = floor_order_.insert(floor_order_.end(), evicted.first);
  } else {
    floor_order_.splice(floor_order_.end(), floor_order_, f.age);
  }
  f.sequence = std::max(f.sequence, evicted.second);
  if (floors_.size() > clients_max_) {
    floors_.erase(floor_order_.front());
    floor_order_.pop_front();
  }
}

size_t DedupTable::forget_chunk(const ChunkId& chunk) {
  std::lock_guard lock(mu_);
  return drop_unheld_locked(chunk, {}, nullptr);
}

std::vector<DedupTable::Key> DedupTable::keys_of(const ChunkId& chunk, size_t max) const {
  std::lock_guard lock(mu_);
  std::vector<Key> keys;
  for (auto it = by_chunk_.lower_bound({chunk, Key{0, 0}}); it != by_chunk_.end() && it->first == chunk; ++it)
    keys.push_back(it->second);
  if (keys.size() > max) {
    auto stamp = [&](const Key& k) { return entries_.at(k).stamp; };
    std::sort(keys.begin(), keys.end(), [&](const Key& a, const Key& b) { return stamp(a) > stamp(b); });
    keys.resize(max);
  }
  return keys;
}

size_t DedupTable::forget_chunk_except(const ChunkId& chunk, const std::vector<Key>& held) {
  std::lock_guard lock(mu_);
  return drop_unheld_locked(chunk, std::set<Key>(held.begin(), held.end()), nullptr);
}

size_t DedupTable::replaced(const ChunkId& chunk, const std::vector<Key>& held, int kind, DedupOutcome outcome) {
  std::vector<Key> missing;
  size_t gone = 0;
  {
    std::lock_guard lock(mu_);
    const std::set<Key> keep(held.begin(), held.end());
    std::set<Key> here;
    gone = drop_unheld_locked(chunk, keep, &here);
    for (const Key& k : keep)
      if (!here.contains(k)) missing.push_back(k);
  }
  for (const Key& k : missing) record(k.first, k.second, DedupEntry{chunk, kind, outcome});
  return gone;
}

size_t DedupTable::drop_unheld_locked(const ChunkId& chunk, const std::set<Key>& keep, std::set<Key>* here) {
  std::vector<Key> drop;
  for (auto it = by_chunk_.lower_bound({chunk, Key{0, 0}}); it != by_chunk_.end() && it->first == chunk; ++it) {
    if (here != nullptr) here->insert(it->second);
    if (!keep.contains(it->second)) drop.push_back(it->second);
  }
  for (const Key& k : drop) erase(entries_.find(k));
  return drop.size();
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
