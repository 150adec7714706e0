#include "storage/dedup_table.h"

namespace weft::storage {

std::optional<DedupEntry> DedupTable::find(uint64_t client_id, uint64_t sequence) const {
  if (client_id == 0) return std::nullopt;
  std::lock_guard lock(mu_);
  auto it = entries_.find({client_id, sequence});
  if (it == entries_.end()) return std::nullopt;
  return it->second;
}

void DedupTable::record(uint64_t client_id, uint64_t sequence, DedupEntry entry) {
  if (client_id == 0) return;
  std::lock_guard lock(mu_);
  auto [it, inserted] = entries_.insert_or_assign({client_id, sequence}, entry);
  if (!inserted) return;
  order_.push_back(it->first);
  while (order_.size() > entries_max_) {
    entries_.erase(order_.front());
    order_.pop_front();
  }
}

size_t DedupTable::size() const {
  std::lock_guard lock(mu_);
  return entries_.size();
}

}  // namespace weft::storage
