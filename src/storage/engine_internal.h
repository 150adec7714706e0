// storage/engine_internal.h
// Pieces shared by the chunk engine's translation units: the metrics bundle,
// the per-chunk update lock and the index key format. Not a public header.
#pragma once

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

inline constexpr char kChunkKeyPrefix = 'c';
inline constexpr std::string_view kFormatKey = "mformat";
inline constexpr std::string_view kFormatValue = "weft-chunk-engine-1";

inline std::string chunk_key(const ChunkId& id) {
  auto enc = id.encode();
  std::string key(1, kChunkKeyPrefix);
  key.append(enc.data(), enc.size());
  return key;
}

inline bool is_chunk_key(const rocksdb::Slice& key) {
  return key.size() == 1 + ChunkId::kEncodedBytes && key[0] == kChunkKeyPrefix;
}

}  // namespace weft::storage
