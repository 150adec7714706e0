#include "common/crc32c.h"

#include <climits>

#include <isa-l/crc.h>

namespace weft {

uint32_t crc32c_extend(uint32_t crc, const void* data, size_t len) {
  // ISA-L's crc32_iscsi neither pre- nor post-inverts; the standard CRC32C
  // does both, so invert around the call to keep crc32c_extend composable.
  uint32_t state = ~crc;
  auto* p = static_cast<unsigned char*>(const_cast<void*>(data));
  while (len > 0) {
    int step = len > static_cast<size_t>(INT_MAX) ? INT_MAX : static_cast<int>(len);
    state = crc32_iscsi(p, step, state);
    p += step;
    len -= static_cast<size_t>(step);
  }
  return ~state;
}

}  // namespace weft
