// libFuzzer target for a storage target's chunk records (storage/chunk_meta.h,
// the values of its RocksDB): a damaged or foreign record must be
// Code::kCorruption, never a crash or an out-of-bounds read, and what decodes
// re-encodes to a record that decodes to the same chunk.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "storage/chunk_meta.h"

using weft::storage::ChunkMeta;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto first = ChunkMeta::decode(bytes);
  if (!first) {
    if (first.error().code() != weft::Code::kCorruption) std::abort();
    return 0;
  }
  const std::string encoded = first->encode();
  auto second = ChunkMeta::decode(encoded);
  if (!second || !(*second == *first) || second->encode() != encoded) std::abort();
  return 0;
}
