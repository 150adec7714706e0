#include "common/assert.h"

#include <cstdio>
#include <cstdlib>

namespace weft::detail {

void assert_failed(const char* expr, const char* file, int line, const char* msg) {
  std::fprintf(stderr, "weft: assertion failed: %s at %s:%d%s%s\n", expr, file, line,
               msg ? ": " : "", msg ? msg : "");
  std::fflush(stderr);
  std::abort();
}

}  // namespace weft::detail
