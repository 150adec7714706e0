// storage/test_util.h
// Helpers for the storage tests: a temporary directory removed at scope end,
// deterministic chunk contents, small chunk engines and damage to a chunk on
// the disk. Test-only (no gtest: the crash helper and benches use it too).
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "common/temp_dir.h"
#include "common/random.h"
#include "storage/chunk_engine.h"

namespace weft::storage::testing {

using weft::testing::TempDir;

inline std::vector<std::byte> pattern(size_t n, uint64_t seed) {
  std::vector<std::byte> out(n);
  Xoshiro256 rng(seed);
  for (size_t i = 0; i < n; i += 8) {
    uint64_t v = rng.next_u64();
    for (size_t j = 0; j < 8 && i + j < n; ++j) out[i + j] = static_cast<std::byte>(v >> (8 * j));
  }
  return out;
}

// Options of a small test target: chunks and slab extents of 1 MiB,
// `capacity_bytes` of room (0: what its filesystem has, less the reserve).
inline EngineOptions small_engine_options(uint64_t capacity_bytes, std::string target_id = "0") {
  EngineOptions o;
  o.target_id = std::move(target_id);
  o.chunk_size_max = 1 << 20;
  o.extent_bytes = 1 << 20;
  o.capacity_bytes = capacity_bytes;
  return o;
}

// (Re)opens the target in `dir` into `engine`, closing the engine there first.
inline Result<void> open_engine(std::unique_ptr<ChunkEngine>& engine, const std::string& dir, const EngineOptions& o,
                                metrics::Registry& registry) {
  engine.reset();
  WEFT_TRY(engine, ChunkEngine::open(dir, o, registry));
  return {};
}

// Where byte `offset` of the committed chunk `id` lies on the disk.
struct DiskByte {
  std::string path;  // the chunk's slab file
  off_t pos = 0;
};
inline DiskByte committed_byte(ChunkEngine& e, const ChunkId& id, uint64_t offset) {
  ChunkMeta meta = *e.committed_meta(id);
  return {e.slab_path(meta.size_class),
          static_cast<off_t>(uint64_t{meta.slot} * class_bytes(meta.size_class) + offset)};
}

// What a rotting disk does to a chunk: flips the bits `mask` of the byte `at`
// in place and syncs the file. False if it could not be read, written or synced.
inline bool flip_bits(const DiskByte& at, unsigned char mask) {
  int fd = ::open(at.path.c_str(), O_RDWR);
  if (fd < 0) return false;
  unsigned char b = 0;
  bool ok = ::pread(fd, &b, 1, at.pos) == 1;
  b ^= mask;
  ok = ok && ::pwrite(fd, &b, 1, at.pos) == 1 && ::fsync(fd) == 0;
  ::close(fd);
  return ok;
}

}  // namespace weft::storage::testing
