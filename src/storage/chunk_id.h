// storage/chunk_id.h
// ChunkId names one chunk of one file: (inode, chunk index). Its key form is
// 16 bytes, both fields big-endian, so byte order equals (inode, index) order
// and one file's chunks sort together in any ordered store. Shared by the
// storage engine, the storage service and the client.
// Threading: plain value type.
#pragma once

#include <array>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>

#include <fmt/format.h>

namespace weft::storage {

struct ChunkId {
  static constexpr size_t kEncodedBytes = 16;

  uint64_t inode = 0;
  uint64_t index = 0;

  auto operator<=>(const ChunkId&) const = default;

  std::array<char, kEncodedBytes> encode() const {
    std::array<char, kEncodedBytes> out{};
    for (int i = 0; i < 8; ++i) {
      out[i] = static_cast<char>(inode >> (56 - 8 * i));
      out[8 + i] = static_cast<char>(index >> (56 - 8 * i));
    }
    return out;
  }

  // nullopt unless `bytes` is exactly kEncodedBytes long.
  static std::optional<ChunkId> decode(std::string_view bytes) {
    if (bytes.size() != kEncodedBytes) return std::nullopt;
    ChunkId id;
    for (int i = 0; i < 8; ++i) {
      id.inode = (id.inode << 8) | static_cast<uint8_t>(bytes[i]);
      id.index = (id.index << 8) | static_cast<uint8_t>(bytes[8 + i]);
    }
    return id;
  }

  // The id right after this one in (inode, index) order, for paging through a
  // listing; nullopt after the largest id (nothing follows it: a listing that
  // wrapped around to {0, 0} would start over forever).
  std::optional<ChunkId> successor() const {
    if (index != UINT64_MAX) return ChunkId{inode, index + 1};
    if (inode != UINT64_MAX) return ChunkId{inode + 1, 0};
    return std::nullopt;
  }
  // The first id past every chunk of `inode` (nullopt for the largest inode):
  // the exclusive end of a listing of that inode's chunks.
  static std::optional<ChunkId> past_inode(uint64_t inode) {
    if (inode == UINT64_MAX) return std::nullopt;
    return ChunkId{inode + 1, 0};
  }

  std::string to_string() const { return fmt::format("{:x}.{}", inode, index); }
};

inline std::ostream& operator<<(std::ostream& os, const ChunkId& id) { return os << id.to_string(); }

struct ChunkIdHash {
  size_t operator()(const ChunkId& id) const {
    uint64_t h = id.inode * 0x9E3779B97F4A7C15ull ^ (id.index + 0x632BE59BD9B4E019ull);
    h ^= h >> 31;
    h *= 0xBF58476D1CE4E5B9ull;
    return static_cast<size_t>(h ^ (h >> 29));
  }
};

}  // namespace weft::storage

template <>
struct fmt::formatter<weft::storage::ChunkId> : fmt::formatter<std::string_view> {
  auto format(const weft::storage::ChunkId& id, fmt::format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(id.to_string(), ctx);
  }
};
