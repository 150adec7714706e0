#include "client/placement.h"

#include <algorithm>
#include <span>

#include "common/random.h"

namespace weft::client {

Result<std::vector<mgmt::ChainId>> stripe_chains(const meta::Layout& layout, const mgmt::RoutingInfo& routing) {
  auto t = routing.tables.find(layout.chain_table_id);
  if (t == routing.tables.end())
    return error(Code::kUnavailable, "chain table {} is not in the routing (version {}): create one with "
                 "`weft admin chain-table create`", layout.chain_table_id, routing.version);
  const std::vector<mgmt::ChainId>& chains = t->second.chains;
  if (chains.empty()) return error(Code::kUnavailable, "chain table {} has no chains", layout.chain_table_id);
  size_t n = chains.size();
  size_t stripe = std::clamp<size_t>(layout.stripe_count, 1, n);
  std::vector<mgmt::ChainId> out;
  out.reserve(stripe);
  for (size_t k = 0; k < stripe; ++k) out.push_back(chains[(layout.first_chain + k) % n]);
  portable_shuffle(std::span<mgmt::ChainId>(out), layout.shuffle_seed);
  return out;
}

std::vector<ChunkSpan> split_range(uint64_t offset, uint64_t length, uint32_t chunk_bytes) {
  std::vector<ChunkSpan> out;
  uint64_t done = 0;
  while (done < length) {
    uint64_t pos = offset + done;
    uint64_t index = pos / chunk_bytes;
    uint32_t in_chunk = static_cast<uint32_t>(pos % chunk_bytes);
    uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(chunk_bytes - in_chunk, length - done));
    out.push_back({index, in_chunk, n, done});
    done += n;
  }
  return out;
}

}  // namespace weft::client
