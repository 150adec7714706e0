// benchsuite/content.h
// Verifiable file content: the 8-byte word at offset 8*i of a file with key
// K is mix(K, i), so any byte of any file can be regenerated from (file,
// offset) and every read is checked. The key is a hash of the file's
// relative name (plus a generation for files that are rewritten). Cost: one
// multiply per 8 bytes (several GiB/s per core).
// Threading: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

namespace weft::bench {

inline uint64_t file_key(std::string_view name, uint64_t generation = 0) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  for (char c : name) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ull;
  }
  h ^= generation * 0x9E3779B97F4A7C15ull;
  return h | 1;
}

inline uint64_t content_word(uint64_t key, uint64_t index) {
  uint64_t x = (key + index) * 0x9E3779B97F4A7C15ull;
  return x ^ (x >> 29) ^ key;
}

// Fills dst with the content of the file `key` at `offset`.
inline void fill_content(std::span<std::byte> dst, uint64_t key, uint64_t offset) {
  size_t i = 0;
  while (i < dst.size() && (offset + i) % 8 != 0) {
    uint64_t w = content_word(key, (offset + i) / 8);
    dst[i] = static_cast<std::byte>(w >> (8 * ((offset + i) % 8)));
    ++i;
  }
  uint64_t index = (offset + i) / 8;
  for (; i + 8 <= dst.size(); i += 8, ++index) {
    uint64_t w = content_word(key, index);
    std::memcpy(dst.data() + i, &w, 8);  // little-endian: byte k of the word is at offset 8*index+k
  }
  for (; i < dst.size(); ++i) {
    uint64_t w = content_word(key, (offset + i) / 8);
    dst[i] = static_cast<std::byte>(w >> (8 * ((offset + i) % 8)));
  }
}

// The number of bytes of src that differ from the content of `key` at `offset`.
inline uint64_t count_mismatches(std::span<const std::byte> src, uint64_t key, uint64_t offset) {
  uint64_t bad = 0;
  size_t i = 0;
  auto check_byte = [&](size_t j) {
    uint64_t w = content_word(key, (offset + j) / 8);
    if (src[j] != static_cast<std::byte>(w >> (8 * ((offset + j) % 8)))) ++bad;
  };
  while (i < src.size() && (offset + i) % 8 != 0) check_byte(i++);
  uint64_t index = (offset + i) / 8;
  for (; i + 8 <= src.size(); i += 8, ++index) {
    uint64_t w = content_word(key, index), got;
    std::memcpy(&got, src.data() + i, 8);
    if (got != w) {
      for (size_t k = 0; k < 8; ++k) bad += ((got ^ w) >> (8 * k)) & 0xff ? 1 : 0;
    }
  }
  for (; i < src.size(); ++i) check_byte(i);
  return bad;
}

}  // namespace weft::bench
