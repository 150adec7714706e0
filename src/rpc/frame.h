// rpc/frame.h
// The wire frame: a fixed 40-byte header, then `body_len` bytes of protobuf
// body, then `payload_len` bytes of raw payload (bulk data, never inside
// protobuf). All integers little-endian.
//
//   off size field
//     0    4 magic "WEFT"
//     4    1 version (1)
//     5    1 flags (bit 0: response; other bits must be 0)
//     6    2 status (responses: a weft::Code; requests: 0)
//     8    4 method (service << 16 | method)
//    12    4 timeout_ms (requests: the caller's remaining budget; 0 = none)
//    16    8 request id (echoed in the response)
//    24    4 body length
//    28    4 payload length
//    32    4 reserved (0)
//    36    4 CRC32C of bytes 0..35
//
// Decoding never trusts the peer: a bad magic, version, flag bits, CRC or a
// length over the receiver's limits is an error that closes the connection.
// This file depends on nothing but the standard library and common/crc32c.h
// (no <expected>) so that the libFuzzer build (clang) can compile it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace weft::rpc {

inline constexpr uint32_t kFrameMagic = 0x54464557;  // "WEFT" in memory order
inline constexpr uint8_t kFrameVersion = 1;
inline constexpr size_t kFrameHeaderSize = 40;
inline constexpr uint8_t kFlagResponse = 0x01;

struct FrameHeader {
  uint8_t flags = 0;
  uint16_t status = 0;
  uint32_t method = 0;
  uint32_t timeout_ms = 0;
  uint64_t request_id = 0;
  uint32_t body_len = 0;
  uint32_t payload_len = 0;

  bool is_response() const { return (flags & kFlagResponse) != 0; }
};

struct FrameLimits {
  uint32_t body_max = 4u << 20;      // protobuf bodies are small
  uint32_t payload_max = 80u << 20;  // one chunk (64 MiB max) plus slack
};

enum class DecodeError : uint8_t {
  kOk,
  kBadMagic,
  kBadVersion,
  kBadFlags,
  kBadCrc,
  kBodyTooLarge,
  kPayloadTooLarge,
};

const char* decode_error_name(DecodeError e);

void encode_header(const FrameHeader& h, std::byte* out /* kFrameHeaderSize bytes */);
DecodeError decode_header(const std::byte* in /* kFrameHeaderSize bytes */, const FrameLimits& limits,
                          FrameHeader* out);

// Incremental parser over a byte stream, for tests and fuzzing. (Connections
// parse the same way but read payloads straight into their destinations.)
class FrameParser {
 public:
  struct Frame {
    FrameHeader header;
    std::vector<std::byte> body;
    std::vector<std::byte> payload;
  };
  enum class State { kNeedMore, kFrame, kError };

  explicit FrameParser(FrameLimits limits) : limits_(limits) {}
  void feed(std::span<const std::byte> bytes);
  // kFrame: *out holds the next frame. kError: error() says why; the stream is dead.
  State next(Frame* out);
  DecodeError error() const { return error_; }
  size_t buffered() const { return buf_.size() - pos_; }

 private:
  FrameLimits limits_;
  std::vector<std::byte> buf_;
  size_t pos_ = 0;
  DecodeError error_ = DecodeError::kOk;
};

}  // namespace weft::rpc
