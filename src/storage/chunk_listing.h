// storage/chunk_listing.h
// One chain's chunks on two members, listed a page at a time in id order so
// that the two listings can be merged (resync.cc: what to copy to a syncing
// successor; replica_check.cc: which chunks differ between serving members).
#pragma once

#include <optional>
#include <vector>

#include "mgmt/routing.h"
#include "rpc/client.h"
#include "rpc/task.h"
#include "storage/chunk_id.h"
#include "storage/chunk_meta.h"
#include "storage/disk_pool.h"

namespace weft::storage {

class ChunkEngine;

// A chunk as a listing shows it.
struct Seen {
  ChunkId id;
  uint64_t version = 0;
  uint32_t crc = 0;
  uint32_t length = 0;
  uint32_t chain = kChainUnknown;
  bool same_content(const Seen& o) const { return version == o.version && crc == o.crc && length == o.length; }
};

// One side's listing, a page at a time.
struct Cursor {
  std::vector<Seen> page;
  size_t pos = 0;
  bool more = true;
  std::optional<ChunkId> start;

  bool need_page() const { return pos == page.size() && more; }
  const Seen* peek() const { return pos < page.size() ? &page[pos] : nullptr; }
  void load(std::vector<Seen> next, bool has_more) {
    page = std::move(next);
    pos = 0;
    std::optional<ChunkId> after = page.empty() ? std::nullopt : page.back().id.successor();
    more = has_more && after.has_value();  // nothing follows the largest id
    if (after) start = after;
  }
};

// Loads the next `batch` of `chain`'s chunks (and those of unknown chain)
// into `c`: of the local `engine` (on `pool`), or of `target` on the server
// at `ep` (ListChunks).
Task<Result<void>> load_local_page(DiskPool& pool, ChunkEngine& engine, mgmt::ChainId chain, size_t batch,
                                   Cursor& c);
Task<Result<void>> load_remote_page(rpc::Client& client, const rpc::Endpoint& ep, mgmt::TargetId target,
                                    mgmt::ChainId chain, size_t batch, Cursor& c);

}  // namespace weft::storage
