// common/status.h
// Errors are values: every operating error (disk, network, peer, user input)
// travels as a Status inside Result<T>. One table of codes, each with the
// POSIX errno it surfaces as and whether a caller may retry it unchanged.
// Exceptions never cross a module boundary.
#pragma once

#include <cstdint>
#include <expected>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>

namespace weft {

// X(name, value, errno, retryable). Values are on the wire: never renumber.
#define WEFT_STATUS_CODES(X)                      \
  X(kOk, 0, 0, false)                             \
  X(kInvalidArgument, 1, EINVAL, false)           \
  X(kNotFound, 2, ENOENT, false)                  \
  X(kExists, 3, EEXIST, false)                    \
  X(kNotEmpty, 4, ENOTEMPTY, false)               \
  X(kIsDirectory, 5, EISDIR, false)               \
  X(kNotDirectory, 6, ENOTDIR, false)             \
  X(kPermissionDenied, 7, EACCES, false)          \
  X(kNotPermitted, 8, EPERM, false)               \
  X(kNameTooLong, 9, ENAMETOOLONG, false)         \
  X(kLoop, 10, ELOOP, false)                      \
  X(kNoSpace, 11, ENOSPC, false)                  \
  X(kIoError, 12, EIO, false)                     \
  X(kCorruption, 13, EIO, false)                  \
  X(kTimeout, 14, ETIMEDOUT, true)                \
  X(kUnavailable, 15, EHOSTDOWN, true)            \
  X(kDisconnected, 16, ECONNRESET, true)          \
  X(kCancelled, 17, ECANCELED, false)             \
  X(kOverloaded, 18, EBUSY, true)                 \
  X(kStaleRouting, 19, ESTALE, true)              \
  X(kNotChainHead, 20, ESTALE, true)              \
  X(kProtocol, 21, EPROTO, false)                 \
  X(kUnauthenticated, 22, EACCES, false)          \
  X(kUnknownMethod, 23, ENOSYS, false)            \
  X(kInternal, 24, EIO, false)                    \
  X(kOutOfRange, 25, ERANGE, false)               \
  X(kNoData, 26, ENODATA, false)                  \
  X(kReadOnly, 27, EROFS, false)                  \
  X(kFileTooBig, 28, EFBIG, false)                \
  X(kCrossDevice, 29, EXDEV, false)               \
  X(kBadHandle, 30, EBADF, false)                 \
  X(kLeaseExpired, 31, EAGAIN, true)              \
  X(kVersionMismatch, 32, EAGAIN, true)           \
  X(kBusy, 33, EBUSY, true)                       \
  X(kNotSupported, 34, EOPNOTSUPP, false)         \
  X(kTooManyLinks, 35, EMLINK, false)             \
  X(kConfig, 36, EINVAL, false)                  \
  X(kTooBig, 37, E2BIG, false)                   \
  X(kStaleHandle, 38, ESTALE, false)             \
  X(kOutcomeUnknown, 39, EIO, false)

enum class Code : uint16_t {
#define WEFT_X(name, value, err, retry) name = value,
  WEFT_STATUS_CODES(WEFT_X)
#undef WEFT_X
};

std::string_view code_name(Code c);
int code_errno(Code c);
bool code_retryable(Code c);
// Maps a value from the wire; unknown values become kInternal.
Code code_from_wire(uint32_t value);
// The code that best describes a POSIX errno (for syscall failures).
Code code_from_errno(int err);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  int posix_errno() const { return code_errno(code_); }
  bool retryable() const { return code_retryable(code_); }

  // "kNotFound: no such file /a/b"
  std::string to_string() const;

  // Adds context in front of the message: "while X: <message>".
  Status with_context(std::string_view context) const;

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

template <class T = void>
using Result = std::expected<T, Status>;

inline std::unexpected<Status> error(Code code, std::string message) {
  return std::unexpected<Status>(Status(code, std::move(message)));
}

template <class... Args>
std::unexpected<Status> error(Code code, fmt::format_string<Args...> f, Args&&... args) {
  return std::unexpected<Status>(Status(code, fmt::format(f, std::forward<Args>(args)...)));
}

inline std::unexpected<Status> error(Status s) { return std::unexpected<Status>(std::move(s)); }

inline std::ostream& operator<<(std::ostream& os, const Status& s) { return os << s.to_string(); }

// From the current errno after a failed syscall: "open /x: No such file".
std::unexpected<Status> errno_error(int err, std::string_view what);

}  // namespace weft

template <>
struct fmt::formatter<weft::Status> : fmt::formatter<std::string_view> {
  auto format(const weft::Status& s, fmt::format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(s.to_string(), ctx);
  }
};

#define WEFT_CONCAT_INNER(a, b) a##b
#define WEFT_CONCAT(a, b) WEFT_CONCAT_INNER(a, b)

// WEFT_TRY(auto x, expr): evaluates a Result; returns its error or binds its value.
#define WEFT_TRY(decl, expr) WEFT_TRY_IMPL(WEFT_CONCAT(weft_try_, __LINE__), decl, expr)
#define WEFT_TRY_IMPL(tmp, decl, expr)                             \
  auto tmp = (expr);                                               \
  if (!tmp) return std::unexpected<::weft::Status>(std::move(tmp).error()); \
  decl = std::move(*tmp)

// WEFT_CHECK_OK(expr): for Result<void>; returns its error if any.
#define WEFT_RETURN_IF_ERROR(expr)                                            \
  do {                                                                        \
    auto weft_r_ = (expr);                                                    \
    if (!weft_r_) return std::unexpected<::weft::Status>(std::move(weft_r_).error()); \
  } while (0)

// Coroutine forms.
#define WEFT_CO_TRY(decl, expr) WEFT_CO_TRY_IMPL(WEFT_CONCAT(weft_try_, __LINE__), decl, expr)
#define WEFT_CO_TRY_IMPL(tmp, decl, expr)                              \
  auto tmp = (expr);                                                   \
  if (!tmp) co_return std::unexpected<::weft::Status>(std::move(tmp).error()); \
  decl = std::move(*tmp)
#define WEFT_CO_RETURN_IF_ERROR(expr)                                            \
  do {                                                                           \
    auto weft_r_ = (expr);                                                       \
    if (!weft_r_) co_return std::unexpected<::weft::Status>(std::move(weft_r_).error()); \
  } while (0)
