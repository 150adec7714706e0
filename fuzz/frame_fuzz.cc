// libFuzzer target for the frame decoder (rpc/frame.h). Properties checked
// on arbitrary bytes:
//  - decoding never crashes, reads out of bounds or allocates past the limits;
//  - a stream parsed in one piece and in two pieces (split anywhere) yields
//    the same frames and the same error;
//  - every decoded header re-encodes to bytes that decode to the same header.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "rpc/frame.h"

using weft::rpc::DecodeError;
using weft::rpc::FrameHeader;
using weft::rpc::FrameLimits;
using weft::rpc::FrameParser;

namespace {

struct Outcome {
  std::vector<FrameParser::Frame> frames;
  FrameParser::State last;
  DecodeError error;
};

Outcome parse(const uint8_t* data, size_t size, size_t split, const FrameLimits& limits) {
  FrameParser parser(limits);
  Outcome out;
  auto drain = [&] {
    FrameParser::Frame f;
    while ((out.last = parser.next(&f)) == FrameParser::State::kFrame) out.frames.push_back(f);
  };
  parser.feed({reinterpret_cast<const std::byte*>(data), split});
  drain();
  parser.feed({reinterpret_cast<const std::byte*>(data) + split, size - split});
  drain();
  out.error = parser.error();
  return out;
}

bool same(const FrameHeader& a, const FrameHeader& b) {
  return a.flags == b.flags && a.status == b.status && a.method == b.method && a.timeout_ms == b.timeout_ms &&
         a.request_id == b.request_id && a.body_len == b.body_len && a.payload_len == b.payload_len;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FrameLimits limits{4096, 1 << 16};
  size_t split = size == 0 ? 0 : data[0] % (size + 1);
  Outcome whole = parse(data, size, size, limits);
  Outcome pieces = parse(data, size, split, limits);
  if (whole.frames.size() != pieces.frames.size() || whole.error != pieces.error) std::abort();
  for (size_t i = 0; i < whole.frames.size(); ++i) {
    const auto& f = whole.frames[i];
    if (!same(f.header, pieces.frames[i].header) || f.body != pieces.frames[i].body ||
        f.payload != pieces.frames[i].payload)
      std::abort();
    if (f.body.size() != f.header.body_len || f.payload.size() != f.header.payload_len) std::abort();
    if (f.header.body_len > limits.body_max || f.header.payload_len > limits.payload_max) std::abort();
    std::byte again[weft::rpc::kFrameHeaderSize];
    weft::rpc::encode_header(f.header, again);
    FrameHeader h;
    if (weft::rpc::decode_header(again, limits, &h) != DecodeError::kOk || !same(h, f.header)) std::abort();
  }
  return 0;
}
