#include "storage/chunk_meta.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "common/crc32c.h"
#include "storage/chunk_id.h"
#include "storage/test_util.h"

namespace weft::storage {
namespace {

TEST(ChunkId, EncodingSortsByInodeThenIndex) {
  std::vector<ChunkId> ids{{2, 0}, {1, 300}, {1, 2}, {0x100, 1}, {1, 0x100000000ull}, {0, ~0ull}};
  std::vector<std::string> keys;
  for (auto& id : ids) {
    auto e = id.encode();
    keys.emplace_back(e.data(), e.size());
    EXPECT_EQ(ChunkId::decode(keys.back()), id);
  }
  std::vector<size_t> by_key(ids.size()), by_id(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) by_key[i] = by_id[i] = i;
  std::sort(by_key.begin(), by_key.end(), [&](size_t a, size_t b) { return keys[a] < keys[b]; });
  std::sort(by_id.begin(), by_id.end(), [&](size_t a, size_t b) { return ids[a] < ids[b]; });
  EXPECT_EQ(by_key, by_id);
  EXPECT_FALSE(ChunkId::decode("short").has_value());
  auto e = ChunkId{0x0102030405060708ull, 9}.encode();
  EXPECT_EQ(static_cast<uint8_t>(e[0]), 0x01);
  EXPECT_EQ(static_cast<uint8_t>(e[7]), 0x08);
  EXPECT_EQ(static_cast<uint8_t>(e[15]), 9);
}

TEST(SizeClass, SmallestClassThatFits) {
  EXPECT_EQ(class_for_length(0), 0u);
  EXPECT_EQ(class_for_length(1), 0u);
  EXPECT_EQ(class_for_length(4096), 0u);
  EXPECT_EQ(class_for_length(4097), 1u);
  EXPECT_EQ(class_for_length(8192), 1u);
  EXPECT_EQ(class_for_length(1 << 20), 8u);
  EXPECT_EQ(class_for_length((1 << 20) + 1), 9u);
  EXPECT_EQ(class_for_length(64u << 20), 14u);
  for (uint64_t len : {1ull, 4095ull, 5000ull, 12345ull, 999999ull}) {
    uint32_t c = class_for_length(len);
    EXPECT_GE(class_bytes(c), len);
    if (c > 0) {
      EXPECT_LT(class_bytes(c - 1), len);
    }
  }
}

TEST(Checksums, ChunkCrcEqualsCrcOfWholeContent) {
  for (size_t len : {0u, 1u, 4095u, 4096u, 4097u, 8192u, 3 * 4096u + 17, 1u << 20}) {
    auto data = testing::pattern(len, len);
    Checksums c = compute_checksums(data);
    EXPECT_EQ(c.chunk_crc, crc32c(data.data(), data.size())) << len;
    ASSERT_EQ(c.block_crcs.size(), blocks_for(len));
    for (size_t b = 0; b < c.block_crcs.size(); ++b) {
      size_t n = std::min<size_t>(4096, len - b * 4096);
      EXPECT_EQ(c.block_crcs[b], crc32c(data.data() + b * 4096, n));
    }
  }
}

ChunkMeta sample() {
  ChunkMeta m;
  m.size_class = 2;
  m.slot = 77;
  m.length = 12000;
  m.version = 1234567890123ull;
  m.chunk_crc = 0xdeadbeef;
  m.chain_id = 0x01020304;
  m.block_crcs = {1, 2, 3};
  return m;
}

// A record as format 1 wrote it (no chain id field).
std::string format1(const ChunkMeta& m) {
  std::string out;
  auto u32 = [&](uint32_t v) {
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
  };
  out.push_back(1);
  out.push_back(static_cast<char>(m.size_class));
  out.append(2, '\0');
  u32(m.slot);
  u32(m.length);
  u32(static_cast<uint32_t>(m.version));
  u32(static_cast<uint32_t>(m.version >> 32));
  u32(m.chunk_crc);
  u32(static_cast<uint32_t>(m.block_crcs.size()));
  for (uint32_t c : m.block_crcs) u32(c);
  u32(crc32c(out.data(), out.size()));
  return out;
}

TEST(ChunkMeta, RoundTrip) {
  ChunkMeta m = sample();
  auto d = ChunkMeta::decode(m.encode());
  ASSERT_TRUE(d.has_value()) << d.error();
  EXPECT_EQ(*d, m);
  EXPECT_EQ(static_cast<uint8_t>(m.encode()[0]), kMetaFormat);
}

TEST(ChunkMeta, Format1RecordsDecodeWithChainUnknown) {
  ChunkMeta m = sample();
  auto d = ChunkMeta::decode(format1(m));
  ASSERT_TRUE(d.has_value()) << d.error();
  EXPECT_EQ(d->chain_id, kChainUnknown);
  m.chain_id = kChainUnknown;
  EXPECT_EQ(*d, m);
  std::string bad = format1(m);
  bad[0] = 3;  // a format nobody wrote
  EXPECT_EQ(ChunkMeta::decode(bad).error().code(), Code::kCorruption);
}

TEST(ChunkMeta, DamagedValuesAreCorruptionNotCrashes) {
  std::string enc = sample().encode();
  for (size_t i = 0; i < enc.size(); ++i) {
    std::string bad = enc;
    bad[i] ^= 0x10;
    auto d = ChunkMeta::decode(bad);
    ASSERT_FALSE(d.has_value()) << i;
    EXPECT_EQ(d.error().code(), Code::kCorruption);
  }
  for (size_t n = 0; n < enc.size(); ++n) {
    auto d = ChunkMeta::decode(std::string_view(enc).substr(0, n));
    ASSERT_FALSE(d.has_value());
    EXPECT_EQ(d.error().code(), Code::kCorruption);
  }
  ChunkMeta inconsistent = sample();
  inconsistent.length = 20000;  // needs 5 blocks and a bigger class
  EXPECT_EQ(ChunkMeta::decode(inconsistent.encode()).error().code(), Code::kCorruption);
}

}  // namespace
}  // namespace weft::storage
