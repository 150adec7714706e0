#include "storage/chunk_meta.h"

#include <array>
#include <bit>
#include <cstring>

#include "common/crc32c.h"

namespace weft::storage {
namespace {

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
}
void put_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
}

class Reader {
 public:
  explicit Reader(std::string_view b) : b_(b) {}
  bool u8(uint32_t& v) { return take(1, v); }
  bool u16(uint32_t& v) { return take(2, v); }
  bool u32(uint32_t& v) { return take(4, v); }
  bool u64(uint64_t& v) {
    if (b_.size() - pos_ < 8) return false;
    v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(b_[pos_ + i]);
    pos_ += 8;
    return true;
  }
  size_t pos() const { return pos_; }
  size_t left() const { return b_.size() - pos_; }

 private:
  bool take(size_t n, uint32_t& v) {
    if (b_.size() - pos_ < n) return false;
    v = 0;
    for (size_t i = n; i-- > 0;) v = (v << 8) | static_cast<uint8_t>(b_[pos_ + i]);
    pos_ += n;
    return true;
  }
  std::string_view b_;
  size_t pos_ = 0;
};

// Raw (unconditioned) CRC32C register advanced over kBlockBytes zero bytes,
// as a linear map over GF(2) stored as 4 byte-indexed tables.
struct ShiftTables {
  std::array<std::array<uint32_t, 256>, 4> t{};
  ShiftTables() {
    std::array<uint32_t, 32> basis{};
    for (int bit = 0; bit < 32; ++bit) {
      uint32_t s = 1u << bit;
      for (uint32_t i = 0; i < kBlockBytes * 8; ++i) s = (s >> 1) ^ (0x82F63B78u & (0u - (s & 1u)));
      basis[bit] = s;
    }
    for (int k = 0; k < 4; ++k)
      for (uint32_t v = 0; v < 256; ++v) {
        uint32_t r = 0;
        for (int b = 0; b < 8; ++b)
          if (v & (1u << b)) r ^= basis[8 * k + b];
        t[k][v] = r;
      }
  }
};

const ShiftTables& shift_tables() {
  static const ShiftTables tables;
  return tables;
}

}  // namespace

uint32_t class_for_length(uint64_t length) {
  if (length <= kMinClassBytes) return 0;
  return static_cast<uint32_t>(std::bit_width((length - 1) / kMinClassBytes));
}

std::string ChunkMeta::encode() const {
  std::string out;
  out.reserve(32 + 4 * block_crcs.size());
  out.push_back(static_cast<char>(kMetaFormat));
  out.push_back(static_cast<char>(size_class));
  out.append(2, '\0');
  put_u32(out, slot);
  put_u32(out, length);
  put_u64(out, version);
  put_u32(out, chunk_crc);
  put_u32(out, chain_id);
  put_u32(out, static_cast<uint32_t>(block_crcs.size()));
  for (uint32_t c : block_crcs) put_u32(out, c);
  put_u32(out, crc32c(out.data(), out.size()));
  return out;
}

Result<ChunkMeta> ChunkMeta::decode(std::string_view bytes) {
  Reader r(bytes);
  ChunkMeta m;
  uint32_t format = 0, reserved = 0, count = 0;
  if (!r.u8(format) || !r.u8(m.size_class) || !r.u16(reserved) || !r.u32(m.slot) || !r.u32(m.length) ||
      !r.u64(m.version) || !r.u32(m.chunk_crc))
    return error(Code::kCorruption, "chunk index value truncated ({} bytes)", bytes.size());
  if (format != 1 && format != kMetaFormat)
    return error(Code::kCorruption, "chunk index value has unknown format {}", format);
  if ((format >= 2 && !r.u32(m.chain_id)) || !r.u32(count))
    return error(Code::kCorruption, "chunk index value truncated ({} bytes)", bytes.size());
  if (r.left() != 4ull * count + 4)
    return error(Code::kCorruption, "chunk index value: {} block crcs need {} bytes, have {}", count,
                 4ull * count + 4, r.left());
  m.block_crcs.resize(count);
  for (auto& c : m.block_crcs) r.u32(c);
  size_t body = r.pos();
  uint32_t stored = 0;
  r.u32(stored);
  if (crc32c(bytes.data(), body) != stored) return error(Code::kCorruption, "chunk index value checksum mismatch");
  if (m.size_class > static_cast<uint32_t>(std::countr_zero(kMaxChunkBytesLimit / kMinClassBytes)) ||
      m.length > class_bytes(m.size_class) || count != blocks_for(m.length))
    return error(Code::kCorruption, "chunk index value inconsistent: class {} length {} blocks {}", m.size_class,
                 m.length, count);
  return m;
}

uint32_t crc32c_append_block(uint32_t crc_a, uint32_t crc_b) {
  const auto& t = shift_tables().t;
  uint32_t shifted = t[0][crc_a & 0xff] ^ t[1][(crc_a >> 8) & 0xff] ^ t[2][(crc_a >> 16) & 0xff] ^ t[3][crc_a >> 24];
  return shifted ^ crc_b;
}

Checksums compute_checksums(std::span<const std::byte> data) {
  Checksums out;
  uint32_t n = blocks_for(data.size());
  out.block_crcs.resize(n);
  uint32_t whole = 0;  // crc32c of the empty string
  for (uint32_t b = 0; b < n; ++b) {
    size_t off = size_t{b} * kBlockBytes;
    size_t len = std::min<size_t>(kBlockBytes, data.size() - off);
    out.block_crcs[b] = crc32c(data.data() + off, len);
    whole = len == kBlockBytes ? crc32c_append_block(whole, out.block_crcs[b])
                               : crc32c_extend(whole, data.data() + off, len);
  }
  out.chunk_crc = whole;
  return out;
}

}  // namespace weft::storage
