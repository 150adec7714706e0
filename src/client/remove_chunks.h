// client/remove_chunks.h
// Removing a file's chunks from an index on (truncate, chunk GC), at the cost
// of the chunks that exist: one storage RemoveRange per chain of the file's
// stripe (ChunkIo::remove_from), whatever the file's length. A chain whose
// head predates RemoveRange (kUnknownMethod, during a rolling upgrade) gets
// the old per-index removals instead, over a bounded range the caller knows
// (meta's length): chunks past it stay there until the head is upgraded.
// Threading: blocks the caller; never call from an I/O thread of the ChunkIo.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "client/chunk_io.h"

namespace weft::client {

// A file's chunks as storage holds them: chunk i lives on stripe[i % size].
struct FileChunks {
  uint64_t ino = 0;
  uint32_t chunk_bytes = 0;
  std::vector<mgmt::ChainId> stripe;
};

// Each chain of `stripe` once, in stripe order (a chain may appear twice in a stripe).
std::vector<mgmt::ChainId> distinct_chains(std::span<const mgmt::ChainId> stripe);

// Every chunk of `file` with index >= first on each of its chains, all chains
// at once; per-index removals of [first, fallback_end) on a chain that
// answers kUnknownMethod. Returns the chunks RemoveRange removed (the
// fallback's removals not counted). The first failure is the result.
Result<uint64_t> remove_chunks_from(ChunkIo& chunks, const FileChunks& file, uint64_t first, uint64_t fallback_end);

// The indexes in [first, end) of the chunks that live on `chain` (chunk i on
// stripe[i % size]), ascending, a batch at a time: costs the chain's share of
// the range, not the range (a wide stripe's other chains are skipped).
class ChainIndexes {
 public:
  ChainIndexes(std::span<const mgmt::ChainId> stripe, mgmt::ChainId chain, uint64_t first, uint64_t end);
  // The next at most `max` indexes; empty once the range is done.
  std::vector<uint64_t> next(size_t max);

 private:
  uint64_t n_, first_, end_;
  std::vector<uint64_t> positions_;  // of `chain` in the stripe
  uint64_t base_ = 0;                // the stripe row visited (a multiple of n_); end_ when done
  size_t pos_ = 0;                   // the next of positions_ in it
};

// The per-index fallback: removes the chunks of [first, end) that live on
// `chain`, in waves of 256 removals; `stopping` (if set) is asked between
// waves and ends it with kCancelled.
Result<void> remove_each(ChunkIo& chunks, const FileChunks& file, mgmt::ChainId chain, uint64_t first, uint64_t end,
                         const std::function<bool()>& stopping = {});

}  // namespace weft::client
