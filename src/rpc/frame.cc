#include "rpc/frame.h"

#include <cstring>

#include "common/crc32c.h"

namespace weft::rpc {
namespace {

template <class T>
void put(std::byte* out, size_t off, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) out[off + i] = static_cast<std::byte>((v >> (8 * i)) & 0xff);
}

template <class T>
T get(const std::byte* in, size_t off) {
  T v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<T>(static_cast<T>(in[off + i]) << (8 * i));
  return v;
}

constexpr size_t kCrcOffset = 36;

}  // namespace

const char* decode_error_name(DecodeError e) {
  switch (e) {
    case DecodeError::kOk: return "ok";
    case DecodeError::kBadMagic: return "bad magic";
    case DecodeError::kBadVersion: return "unsupported frame version";
    case DecodeError::kBadFlags: return "unknown frame flags";
    case DecodeError::kBadCrc: return "header checksum mismatch";
    case DecodeError::kBodyTooLarge: return "body length over limit";
    case DecodeError::kPayloadTooLarge: return "payload length over limit";
  }
  return "unknown";
}

void encode_header(const FrameHeader& h, std::byte* out) {
  put<uint32_t>(out, 0, kFrameMagic);
  put<uint8_t>(out, 4, kFrameVersion);
  put<uint8_t>(out, 5, h.flags);
  put<uint16_t>(out, 6, h.status);
  put<uint32_t>(out, 8, h.method);
  put<uint32_t>(out, 12, h.timeout_ms);
  put<uint64_t>(out, 16, h.request_id);
  put<uint32_t>(out, 24, h.body_len);
  put<uint32_t>(out, 28, h.payload_len);
  put<uint32_t>(out, 32, 0);
  put<uint32_t>(out, kCrcOffset, crc32c(out, kCrcOffset));
}

DecodeError decode_header(const std::byte* in, const FrameLimits& limits, FrameHeader* out) {
  if (get<uint32_t>(in, 0) != kFrameMagic) return DecodeError::kBadMagic;
  if (get<uint8_t>(in, 4) != kFrameVersion) return DecodeError::kBadVersion;
  if (get<uint32_t>(in, kCrcOffset) != crc32c(in, kCrcOffset)) return DecodeError::kBadCrc;
  FrameHeader h;
  h.flags = get<uint8_t>(in, 5);
  if ((h.flags & ~kFlagResponse) != 0 || get<uint32_t>(in, 32) != 0) return DecodeError::kBadFlags;
  h.status = get<uint16_t>(in, 6);
  h.method = get<uint32_t>(in, 8);
  h.timeout_ms = get<uint32_t>(in, 12);
  h.request_id = get<uint64_t>(in, 16);
  h.body_len = get<uint32_t>(in, 24);
  h.payload_len = get<uint32_t>(in, 28);
  if (h.body_len > limits.body_max) return DecodeError::kBodyTooLarge;
  if (h.payload_len > limits.payload_max) return DecodeError::kPayloadTooLarge;
  *out = h;
  return DecodeError::kOk;
}

void FrameParser::feed(std::span<const std::byte> bytes) {
  if (pos_ > 0 && pos_ == buf_.size()) {
    buf_.clear();
    pos_ = 0;
  }
  buf_.insert(buf_.end(), bytes.begin(), bytes.end());
}

FrameParser::State FrameParser::next(Frame* out) {
  if (error_ != DecodeError::kOk) return State::kError;
  if (buffered() < kFrameHeaderSize) return State::kNeedMore;
  FrameHeader h;
  error_ = decode_header(buf_.data() + pos_, limits_, &h);
  if (error_ != DecodeError::kOk) return State::kError;
  size_t total = kFrameHeaderSize + size_t{h.body_len} + size_t{h.payload_len};
  if (buffered() < total) return State::kNeedMore;
  const std::byte* p = buf_.data() + pos_ + kFrameHeaderSize;
  out->header = h;
  out->body.assign(p, p + h.body_len);
  out->payload.assign(p + h.body_len, p + h.body_len + h.payload_len);
  pos_ += total;
  return State::kFrame;
}

}  // namespace weft::rpc
