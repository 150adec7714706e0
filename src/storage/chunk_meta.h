// storage/chunk_meta.h
// The index record of one committed chunk: where its bytes live (size class,
// slot), its length and version, and its checksums (CRC32C of every 4 KiB
// block, the last one over its valid bytes only, plus a whole-chunk CRC32C)
// and the chain it belongs to. Also the size-class arithmetic shared by the
// allocator and the engine.
// Encoding (little-endian, on disk in RocksDB; bump kMetaFormat on change):
//   u8 format, u8 size_class, u16 reserved(0), u32 slot, u32 length,
//   u64 version, u32 chunk_crc, u32 chain_id (format 2 only),
//   u32 block_count, u32 block_crcs[block_count], u32 crc32c of everything before it.
// Format 1 records (written before chains were recorded) decode with
// chain_id = kChainUnknown.
// decode() never asserts: a malformed value is Code::kCorruption.
// Threading: plain value types and pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace weft::storage {

inline constexpr uint32_t kBlockBytes = 4096;
inline constexpr uint32_t kMinClassBytes = 4096;               // class 0
inline constexpr uint32_t kMaxChunkBytesLimit = 64u << 20;     // largest allowed class
inline constexpr uint8_t kMetaFormat = 2;
// The chain of a chunk written before chains were recorded (mgmtd numbers chains from 1).
inline constexpr uint32_t kChainUnknown = 0;

// The blocks a read of bytes [offset, end) covers (end > offset): the first
// one and how many. A read buffer holds exactly these.
struct BlockSpan {
  uint32_t first = 0;
  uint32_t count = 0;
};
inline BlockSpan blocks_of(uint64_t offset, uint64_t end) {
  auto first = static_cast<uint32_t>(offset / kBlockBytes);
  return {first, static_cast<uint32_t>((end - 1) / kBlockBytes) - first + 1};
}

// Bytes of one slot in `size_class` (4 KiB << size_class).
inline constexpr uint64_t class_bytes(uint32_t size_class) { return uint64_t{kMinClassBytes} << size_class; }

// The smallest class whose slots hold `length` bytes (length 0 -> class 0).
uint32_t class_for_length(uint64_t length);

inline constexpr uint32_t blocks_for(uint64_t length) {
  return static_cast<uint32_t>((length + kBlockBytes - 1) / kBlockBytes);
}

struct ChunkMeta {
  uint32_t size_class = 0;
  uint32_t slot = 0;
  uint32_t length = 0;
  uint64_t version = 0;
  uint32_t chunk_crc = 0;
  uint32_t chain_id = kChainUnknown;  // the chain whose updates wrote it
  std::vector<uint32_t> block_crcs;   // blocks_for(length) entries

  std::string encode() const;
  static Result<ChunkMeta> decode(std::string_view bytes);
  bool operator==(const ChunkMeta&) const = default;
};

struct Checksums {
  uint32_t chunk_crc = 0;
  std::vector<uint32_t> block_crcs;
};

// Checksums of `data` (the whole chunk content). One pass over the bytes: the
// whole-chunk CRC is folded from the block CRCs.
Checksums compute_checksums(std::span<const std::byte> data);

// crc32c(A ++ B) from crc32c(A), crc32c(B) when B is exactly kBlockBytes long.
uint32_t crc32c_append_block(uint32_t crc_a, uint32_t crc_b);

}  // namespace weft::storage
