// common/assert.h
// Always-on assertions for programmer errors and invariants (kept in release
// builds: corrupt state must never reach a replica). Never assert on bytes
// from disk or the network: return Code::kCorruption / kProtocol instead.
#pragma once

namespace weft::detail {
[[noreturn]] void assert_failed(const char* expr, const char* file, int line, const char* msg);
}

#define WEFT_ASSERT(cond)                                                   \
  do {                                                                      \
    if (!(cond)) [[unlikely]]                                               \
      ::weft::detail::assert_failed(#cond, __FILE__, __LINE__, nullptr);    \
  } while (0)

#define WEFT_ASSERT_MSG(cond, msg)                                          \
  do {                                                                      \
    if (!(cond)) [[unlikely]]                                               \
      ::weft::detail::assert_failed(#cond, __FILE__, __LINE__, (msg));      \
  } while (0)
