#include "rpc/frame.h"

#include <gtest/gtest.h>

#include <cstring>

#include "rpc/method.h"

namespace weft::rpc {
namespace {

FrameHeader sample() {
  FrameHeader h;
  h.flags = kFlagResponse;
  h.status = 7;
  h.method = MethodId{3, 9}.wire();
  h.timeout_ms = 1500;
  h.request_id = 0x0102030405060708ULL;
  h.body_len = 12;
  h.payload_len = 1 << 20;
  return h;
}

}  // namespace
}  // namespace weft::rpc

#include "rpc/method.h"

namespace weft::rpc {
namespace {

TEST(Frame, HeaderRoundTrip) {
  std::byte buf[kFrameHeaderSize];
  FrameHeader in = sample();
  encode_header(in, buf);
  FrameHeader out;
  ASSERT_EQ(decode_header(buf, FrameLimits{}, &out), DecodeError::kOk);
  EXPECT_EQ(out.flags, in.flags);
  EXPECT_EQ(out.status, in.status);
  EXPECT_EQ(out.method, in.method);
  EXPECT_EQ(out.timeout_ms, in.timeout_ms);
  EXPECT_EQ(out.request_id, in.request_id);
  EXPECT_EQ(out.body_len, in.body_len);
  EXPECT_EQ(out.payload_len, in.payload_len);
  EXPECT_TRUE(out.is_response());
  EXPECT_EQ(MethodId::from_wire(out.method), (MethodId{3, 9}));
}

TEST(Frame, RejectsEveryCorruption) {
  std::byte good[kFrameHeaderSize];
  encode_header(sample(), good);
  FrameHeader out;
  // Any single flipped bit is caught (magic, version or CRC).
  for (size_t byte = 0; byte < kFrameHeaderSize; ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      std::byte bad[kFrameHeaderSize];
      std::memcpy(bad, good, sizeof(bad));
      bad[byte] ^= static_cast<std::byte>(1 << bit);
      EXPECT_NE(decode_header(bad, FrameLimits{}, &out), DecodeError::kOk) << byte << ":" << bit;
    }
  }
  std::byte bad[kFrameHeaderSize];
  std::memcpy(bad, good, sizeof(bad));
  bad[0] = std::byte{'X'};
  EXPECT_EQ(decode_header(bad, FrameLimits{}, &out), DecodeError::kBadMagic);
  std::memcpy(bad, good, sizeof(bad));
  bad[4] = std::byte{2};
  EXPECT_EQ(decode_header(bad, FrameLimits{}, &out), DecodeError::kBadVersion);
}

TEST(Frame, LimitsAndFlags) {
  std::byte buf[kFrameHeaderSize];
  FrameHeader h = sample();
  h.body_len = 5u << 20;
  encode_header(h, buf);
  FrameHeader out;
  EXPECT_EQ(decode_header(buf, FrameLimits{}, &out), DecodeError::kBodyTooLarge);
  h = sample();
  h.payload_len = 0xffffffffu;
  encode_header(h, buf);
  EXPECT_EQ(decode_header(buf, FrameLimits{}, &out), DecodeError::kPayloadTooLarge);
  h = sample();
  h.flags = 0x80;
  encode_header(h, buf);
  EXPECT_EQ(decode_header(buf, FrameLimits{}, &out), DecodeError::kBadFlags);
}

TEST(FrameParser, ByteByByteStream) {
  std::vector<std::byte> stream;
  for (int i = 0; i < 3; ++i) {
    FrameHeader h;
    h.request_id = i;
    h.body_len = static_cast<uint32_t>(i);
    h.payload_len = static_cast<uint32_t>(2 * i);
    std::byte hdr[kFrameHeaderSize];
    encode_header(h, hdr);
    stream.insert(stream.end(), hdr, hdr + kFrameHeaderSize);
    for (int k = 0; k < 3 * i; ++k) stream.push_back(static_cast<std::byte>(k + i));
  }
  FrameParser parser(FrameLimits{});
  std::vector<FrameParser::Frame> frames;
  for (std::byte b : stream) {
    parser.feed(std::span<const std::byte>(&b, 1));
    FrameParser::Frame f;
    while (parser.next(&f) == FrameParser::State::kFrame) frames.push_back(f);
  }
  ASSERT_EQ(frames.size(), 3u);
  EXPECT_EQ(frames[2].header.request_id, 2u);
  EXPECT_EQ(frames[2].body.size(), 2u);
  EXPECT_EQ(frames[2].payload.size(), 4u);
  EXPECT_EQ(frames[2].payload[0], std::byte{4});
  EXPECT_EQ(parser.buffered(), 0u);
}

TEST(FrameParser, GarbageIsAnError) {
  FrameParser parser(FrameLimits{});
  std::vector<std::byte> junk(100, std::byte{0x41});
  parser.feed(junk);
  FrameParser::Frame f;
  EXPECT_EQ(parser.next(&f), FrameParser::State::kError);
  EXPECT_EQ(parser.error(), DecodeError::kBadMagic);
}

}  // namespace
}  // namespace weft::rpc
