// storage/engine_jobs.h
// Engine calls that several parts of the storage service (requests, repair,
// resync, reconcile) run on its DiskPool, as named callables.
#pragma once

#include "storage/chunk_engine.h"

namespace weft::storage {

// The chunk's record (kNotFound when absent).
struct StatJob {
  ChunkEngine* engine;
  ChunkId id;
  Result<ChunkInfo> operator()() const { return engine->stat(id); }
};

// The chunk's whole committed content.
struct ReadCommittedJob {
  ChunkEngine* engine;
  ChunkId id;
  Result<ReadResult> operator()() const { return engine->read(id, 0, engine->chunk_size_max()); }
};

}  // namespace weft::storage
