// storage/engine_internal.h
// Pieces shared by the chunk engine's translation units: the metrics bundle,
// the per-chunk update lock and the index key format. Not a public header.
// Keys: 'c' + ChunkId -> ChunkMeta (the record; one per committed chunk), and
// 'k' + chain id (u32 big-endian) + ChunkId -> "" (the per-chain index: lists
// one chain's chunks with a prefix scan). Both change in one write batch.
// Chunks of format-1 records are indexed under kChainUnknown.
// 'V' + ChunkId -> the chunk's previous ChunkMeta ("" if it had none): the
// restart-check keys of the last commit group (IndexOp::until_next_group;
// deleted once its flush returned),
// see ChunkEngine::check_last_group.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <rocksdb/slice.h>

#include "common/metrics.h"
#include "storage/chunk_engine.h"

namespace weft::storage {

struct ChunkEngine::Metrics {
  Metrics(metrics::Registry& r, const std::string& target);
  metrics::Counter& bytes_read;
  metrics::Counter& bytes_written;
  metrics::Counter& reads;
  metrics::Counter& stages;
  metrics::Counter& commits;
  metrics::Counter& removes;
  metrics::Counter& checksum_failures;
  metrics::Histogram& read_latency_us;
  metrics::Histogram& stage_latency_us;
  metrics::Histogram& commit_latency_us;
  metrics::Histogram& commit_group_size;
  metrics::Gauge& ring_depth;
};

// Holds the update lock of one chunk (scoped).
class ChunkEngine::ChunkLock {
 public:
  ChunkLock(ChunkEngine& e, const ChunkId& id);
  ~ChunkLock();
  ChunkLock(const ChunkLock&) = delete;
  ChunkLock& operator=(const ChunkLock&) = delete;

 private:
  ChunkEngine& e_;
  ChunkId id_;
};

// The slot a record occupies. An empty chunk (length 0) occupies none: its
// record says class 0, slot 0 and nothing reads, frees or checks that slot
// (records written before this rule may name another slot: ignored too).
inline std::optional<SlotRef> slot_of(const ChunkMeta& meta) {
  if (meta.length == 0) return std::nullopt;
  return SlotRef{meta.size_class, meta.slot};
}

inline constexpr char kChunkKeyPrefix = 'c';
inline constexpr char kChainKeyPrefix = 'k';
inline constexpr char kRestartKeyPrefix = 'V';
inline constexpr std::string_view kFormatKey = "mformat";
// Format 2 added the per-chain index; a format-1 index is migrated at open.
inline constexpr std::string_view kFormatValue = "weft-chunk-engine-2";
inline constexpr std::string_view kFormatValueV1 = "weft-chunk-engine-1";
// ChunkEngine::data_id(), 8 bytes little-endian; written once, with the format
// (or at the first open of an index older than it).
inline constexpr std::string_view kDataIdKey = "mdataid";

inline std::string chunk_key(const ChunkId& id) {
  auto enc = id.encode();
  std::string key(1, kChunkKeyPrefix);
  key.append(enc.data(), enc.size());
  return key;
}

inline std::string restart_key(const ChunkId& id) {
  auto enc = id.encode();
  std::string key(1, kRestartKeyPrefix);
  key.append(enc.data(), enc.size());
  return key;
}

inline bool is_chunk_key(const rocksdb::Slice& key) {
  return key.size() == 1 + ChunkId::kEncodedBytes && key[0] == kChunkKeyPrefix;
}

inline std::string chain_prefix(uint32_t chain_id) {
  std::string key(1, kChainKeyPrefix);
  for (int i = 3; i >= 0; --i) key.push_back(static_cast<char>(chain_id >> (8 * i)));
  return key;
}

inline std::string chain_key(uint32_t chain_id, const ChunkId& id) {
  auto enc = id.encode();
  std::string key = chain_prefix(chain_id);
  key.append(enc.data(), enc.size());
  return key;
}

inline constexpr size_t kChainKeyBytes = 1 + 4 + ChunkId::kEncodedBytes;

// The chunk id of a chain key of `chain_id`; nullopt for any other key.
inline std::optional<ChunkId> chain_key_id(const rocksdb::Slice& key, std::string_view prefix) {
  if (key.size() != kChainKeyBytes || std::string_view(key.data(), prefix.size()) != prefix) return std::nullopt;
  return ChunkId::decode(std::string_view(key.data() + prefix.size(), ChunkId::kEncodedBytes));
}

}  // namespace weft::storage
