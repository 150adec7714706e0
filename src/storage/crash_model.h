// storage/crash_model.h
// The deterministic update stream of the crash-consistency test, shared by
// the helper process (which applies it) and the test (which checks what
// survived a SIGKILL). Version v of a chunk is the content after applying
// ops 1..v (every update frees the chunk's old slot, which the engine's
// space pass punches at once). Test-only.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/random.h"
#include "storage/chunk_engine.h"
#include "storage/test_util.h"

namespace weft::storage::testing {

inline constexpr uint32_t kCrashChunkBytes = 64 * 1024;
inline constexpr uint64_t kCrashInode = 77;
inline constexpr int kCrashThreads = 4;  // odd threads use write() (grouped slot + index sync)
inline constexpr int kCrashChunksPerThread = 6;

struct CrashRecord {  // written to the pipe after each acknowledged commit
  uint64_t index;
  uint64_t version;
};

struct CrashOp {
  Update::Kind kind;
  uint32_t offset = 0;
  uint32_t length = 0;
  std::vector<std::byte> data;
  Update update() const {
    return kind == Update::Kind::kTruncate ? Update::truncate(length) : Update::write(offset, data);
  }
};

inline CrashOp crash_op(uint64_t index, uint64_t version) {
  Xoshiro256 rng(index * 1000003 + version);
  CrashOp op;
  uint64_t kind = version == 1 ? 0 : rng.uniform(4);
  if (kind == 0) {  // whole new content
    op.kind = Update::Kind::kWrite;
    op.data = pattern(1 + rng.uniform(kCrashChunkBytes), rng.next_u64());
  } else if (kind == 3) {
    op.kind = Update::Kind::kTruncate;
    op.length = static_cast<uint32_t>(rng.uniform(kCrashChunkBytes + 1));
  } else {  // patch
    op.kind = Update::Kind::kWrite;
    op.offset = static_cast<uint32_t>(rng.uniform(kCrashChunkBytes - 1));
    uint32_t len = static_cast<uint32_t>(1 + rng.uniform(8192));
    op.data = pattern(std::min(len, kCrashChunkBytes - op.offset), rng.next_u64());
  }
  return op;
}

inline void apply_op(std::vector<std::byte>& content, const CrashOp& op) {
  if (op.kind == Update::Kind::kTruncate) {
    content.resize(op.length, std::byte{0});
    return;
  }
  if (content.size() < op.offset + op.data.size()) content.resize(op.offset + op.data.size(), std::byte{0});
  std::copy(op.data.begin(), op.data.end(), content.begin() + op.offset);
}

inline std::vector<std::byte> crash_content(uint64_t index, uint64_t version) {
  std::vector<std::byte> content;
  for (uint64_t v = 1; v <= version; ++v) apply_op(content, crash_op(index, v));
  return content;
}

inline EngineOptions crash_engine_options() {
  EngineOptions o;
  o.target_id = "crash";
  o.chunk_size_max = kCrashChunkBytes;
  o.extent_bytes = 1 << 20;
  o.capacity_bytes = 1ull << 30;
  // Every freed slot is punched, a pass every millisecond: kills land between
  // a slot's free and its punch, its punch and its reuse (re-backing), too.
  o.free_slack_bytes = 0;
  o.space_pass_interval_ms = 1;
  return o;
}

}  // namespace weft::storage::testing
