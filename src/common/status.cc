#include "common/status.h"

#include <cerrno>
#include <cstring>

namespace weft {
namespace {

struct CodeInfo {
  Code code;
  std::string_view name;
  int err;
  bool retryable;
};

constexpr CodeInfo kCodes[] = {
#define WEFT_X(name, value, err, retry) {Code::name, #name, err, retry},
    WEFT_STATUS_CODES(WEFT_X)
#undef WEFT_X
};

const CodeInfo* find(Code c) {
  for (const auto& info : kCodes)
    if (info.code == c) return &info;
  return nullptr;
}

}  // namespace

std::string_view code_name(Code c) {
  const CodeInfo* info = find(c);
  return info ? info->name : "kUnknownCode";
}

int code_errno(Code c) {
  const CodeInfo* info = find(c);
  return info ? info->err : EIO;
}

bool code_retryable(Code c) {
  const CodeInfo* info = find(c);
  return info && info->retryable;
}

Code code_from_wire(uint32_t value) {
  for (const auto& info : kCodes)
    if (static_cast<uint32_t>(info.code) == value) return info.code;
  return Code::kInternal;
}

Code code_from_errno(int err) {
  switch (err) {
    case 0: return Code::kOk;
    case ENOENT: return Code::kNotFound;
    case EEXIST: return Code::kExists;
    case ENOTEMPTY: return Code::kNotEmpty;
    case EISDIR: return Code::kIsDirectory;
    case ENOTDIR: return Code::kNotDirectory;
    case EACCES: return Code::kPermissionDenied;
    case EPERM: return Code::kNotPermitted;
    case ENAMETOOLONG: return Code::kNameTooLong;
    case ELOOP: return Code::kLoop;
    case ENOSPC: case EDQUOT: return Code::kNoSpace;
    case ETIMEDOUT: return Code::kTimeout;
    case ECONNREFUSED: case EHOSTUNREACH: case ENETUNREACH: case EHOSTDOWN: return Code::kUnavailable;
    case ECONNRESET: case EPIPE: case ENOTCONN: return Code::kDisconnected;
    case ECANCELED: return Code::kCancelled;
    case EINVAL: return Code::kInvalidArgument;
    case ERANGE: return Code::kOutOfRange;
    case ENODATA: return Code::kNoData;
    case EROFS: return Code::kReadOnly;
    case EFBIG: return Code::kFileTooBig;
    case EXDEV: return Code::kCrossDevice;
    case EBADF: return Code::kBadHandle;
    case EBUSY: return Code::kBusy;
    case EAGAIN: return Code::kOverloaded;
    case EOPNOTSUPP: return Code::kNotSupported;
    case EMLINK: return Code::kTooManyLinks;
    default: return Code::kIoError;
  }
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  if (message_.empty()) return std::string(code_name(code_));
  return fmt::format("{}: {}", code_name(code_), message_);
}

Status Status::with_context(std::string_view context) const {
  if (ok()) return *this;
  return Status(code_, fmt::format("{}: {}", context, message_));
}

std::unexpected<Status> errno_error(int err, std::string_view what) {
  return error(code_from_errno(err), "{}: {}", what, std::strerror(err));
}

}  // namespace weft
