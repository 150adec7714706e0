// meta/layout.h
// The rule every file layout meets (meta refuses any other at set_layout; a
// client checks layouts it is handed the same way before it places chunks by
// one). Header-only: libweft uses it without the store.
#pragma once

#include <bit>
#include <cstdint>

#include "common/status.h"
#include "meta/types.h"

namespace weft::meta {

inline constexpr uint32_t kStripeMax = 4096;

// kInvalidArgument unless chunk size is a power of two in [64 KiB, 64 MiB]
// and the stripe count in [1, 4096].
inline Result<void> validate_layout(const Layout& l) {
  if (!std::has_single_bit(l.chunk_bytes) || l.chunk_bytes < Layout::kChunkBytesMin ||
      l.chunk_bytes > Layout::kChunkBytesMax)
    return error(Code::kInvalidArgument, "chunk size {} is not a power of two in [64 KiB, 64 MiB]", l.chunk_bytes);
  if (l.stripe_count < 1 || l.stripe_count > kStripeMax)
    return error(Code::kInvalidArgument, "stripe count {} not in [1, {}]", l.stripe_count, kStripeMax);
  return {};
}

}  // namespace weft::meta
