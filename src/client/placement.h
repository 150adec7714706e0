// client/placement.h
// Where a file's chunks live, computed by the client from the file's layout
// and the chain table (ARCHITECTURE.md "Data model"): the file uses `stripe`
// chains of its table, starting at layout.first_chain, in the order of
// portable_shuffle(shuffle_seed); chunk i lives on stripe_chains[i % stripe].
// Every client computes the same answer: nothing is looked up per chunk.
// Threading: pure functions.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "meta/types.h"
#include "mgmt/routing.h"

namespace weft::client {

// The chains of a file, in stripe order. kUnavailable if the table is unknown or empty.
Result<std::vector<mgmt::ChainId>> stripe_chains(const meta::Layout& layout, const mgmt::RoutingInfo& routing);

inline mgmt::ChainId chain_of_chunk(const std::vector<mgmt::ChainId>& stripe, uint64_t chunk_index) {
  return stripe[chunk_index % stripe.size()];
}

// One piece of a byte range that falls inside one chunk.
struct ChunkSpan {
  uint64_t chunk_index = 0;
  uint32_t offset = 0;    // within the chunk
  uint32_t length = 0;
  uint64_t buffer_offset = 0;  // within the caller's range
};

// Splits [offset, offset + length) at chunk boundaries.
std::vector<ChunkSpan> split_range(uint64_t offset, uint64_t length, uint32_t chunk_bytes);

}  // namespace weft::client
