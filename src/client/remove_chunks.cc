#include "client/remove_chunks.h"

#include <algorithm>

#include "client/core.h"
#include "client/placement.h"

namespace weft::client {

std::vector<mgmt::ChainId> distinct_chains(std::span<const mgmt::ChainId> stripe) {
  std::vector<mgmt::ChainId> out;
  for (mgmt::ChainId c : stripe)
    if (std::ranges::find(out, c) == out.end()) out.push_back(c);
  return out;
}

Result<uint64_t> remove_chunks_from(ChunkIo& chunks, const FileChunks& file, uint64_t first, uint64_t fallback_end) {
  const std::vector<mgmt::ChainId> chains = distinct_chains(file.stripe);
  std::vector<Task<Result<uint64_t>>> tasks;
  for (mgmt::ChainId chain : chains) tasks.push_back(chunks.remove_from(file.ino, chain, first));
  auto results = run_parallel(chunks.io(), std::move(tasks));
  uint64_t removed = 0;
  for (size_t k = 0; k < results.size(); ++k) {
    if (results[k]) {
      removed += *results[k];
    } else if (results[k].error().code() == Code::kUnknownMethod) {
      WEFT_RETURN_IF_ERROR(remove_each(chunks, file, chains[k], first, fallback_end));
    } else {
      return std::unexpected(results[k].error());
    }
  }
  return removed;
}

ChainIndexes::ChainIndexes(std::span<const mgmt::ChainId> stripe, mgmt::ChainId chain, uint64_t first, uint64_t end)
    : n_(stripe.size()), first_(first), end_(end) {
  for (uint64_t k = 0; k < n_; ++k)
    if (stripe[k] == chain) positions_.push_back(k);
  base_ = positions_.empty() || first >= end ? end : first - first % n_;
}

std::vector<uint64_t> ChainIndexes::next(size_t max) {
  std::vector<uint64_t> out;
  while (base_ < end_ && out.size() < max) {
    const uint64_t index = base_ + positions_[pos_];
    if (index >= end_) {
      base_ = end_;  // later positions and rows are past the end too
      break;
    }
    if (index >= first_) out.push_back(index);
    if (++pos_ == positions_.size()) {
      pos_ = 0;
      base_ = end_ - base_ > n_ ? base_ + n_ : end_;  // no wrap past UINT64_MAX
    }
  }
  return out;
}

Result<void> remove_each(ChunkIo& chunks, const FileChunks& file, mgmt::ChainId chain, uint64_t first, uint64_t end,
                         const std::function<bool()>& stopping) {
  constexpr size_t kWave = 256;
  ChainIndexes indexes(file.stripe, chain, first, end);
  for (auto wave = indexes.next(kWave); !wave.empty(); wave = indexes.next(kWave)) {
    if (stopping && stopping())
      return error(Code::kCancelled, "removal of the chunks of file {} on chain {} stopped", file.ino, chain);
    std::vector<Task<Result<void>>> tasks;
    for (uint64_t index : wave) tasks.push_back(chunks.remove({file.ino, index, chain, file.chunk_bytes}));
    WEFT_RETURN_IF_ERROR(first_error(run_parallel(chunks.io(), std::move(tasks))));
  }
  return {};
}

}  // namespace weft::client
