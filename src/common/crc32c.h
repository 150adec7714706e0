// common/crc32c.h
// CRC32C (Castagnoli), hardware accelerated through ISA-L. Standard
// definition: crc32c("123456789") == 0xE3069283. Incremental use:
//   uint32_t c = crc32c_extend(0, a); c = crc32c_extend(c, b);
// equals crc32c(a ++ b). Free of <expected> so the fuzz build (clang) can use it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace weft {

uint32_t crc32c_extend(uint32_t crc, const void* data, size_t len);

inline uint32_t crc32c(const void* data, size_t len) { return crc32c_extend(0, data, len); }
inline uint32_t crc32c(std::span<const std::byte> data) { return crc32c(data.data(), data.size()); }

}  // namespace weft
