// libFuzzer target for the metadata store's value decoders (meta/codec.h):
// the bytes RocksDB hands back, which a damaged disk or an older or newer
// meta may have written. The first input byte picks the decoder. Properties
// checked on arbitrary bytes:
//  - decoding never crashes, reads out of bounds or trips UB;
//  - what it refuses is Code::kCorruption (the store reports it as such);
//  - what it accepts re-encodes to bytes that decode again, to the same
//    value, and encode to the same bytes (one cycle reaches a fixed point:
//    a value read, changed elsewhere and written back is not mangled).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <concepts>
#include <type_traits>

#include "meta/codec.h"

// These files are built by clang 16 with __cpp_concepts raised so that
// libstdc++'s <expected> compiles (Makefile, `fuzz`). clang 16 implements
// conditionally trivial special members in part: a Result holding strings
// taken as trivially copyable or destructible would copy or leak them
// unseen. Pinned here, at compile time.
static_assert(!std::is_trivially_copyable_v<weft::Result<std::string>>);
static_assert(!std::is_trivially_destructible_v<weft::Result<weft::meta::Inode>>);
static_assert(!std::is_trivially_destructible_v<weft::Result<void>>);
static_assert(!std::is_trivially_copyable_v<weft::Result<int>>);  // its error holds a string

namespace {

using namespace weft::meta;

template <typename Decode, typename Encode>
void check(std::string_view bytes, Decode decode, Encode encode) {
  auto first = decode(bytes);
  if (!first) {
    if (first.error().code() != weft::Code::kCorruption) std::abort();
    return;
  }
  const std::string encoded = encode(*first);
  auto second = decode(encoded);
  if (!second || encode(*second) != encoded) std::abort();
  // RequestRecord has no operator== (its Reply neither): the fixed point of
  // the bytes covers every field the codec stores.
  if constexpr (std::equality_comparable<std::remove_cvref_t<decltype(*first)>>)
    if (!(*second == *first)) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 6) {
    case 0:
      check(bytes, decode_inode, encode_inode);
      break;
    case 1:
      check(bytes, decode_dentry, encode_dentry);
      break;
    case 2:
      check(bytes, decode_dir_stat, encode_dir_stat);
      break;
    case 3:
      check(bytes, decode_session, encode_session);
      break;
    case 4:
      check(bytes, decode_request, encode_request);
      break;
    case 5:
      check(bytes, decode_i64, encode_i64);
      break;
  }
  return 0;
}
