// meta/ops.h
// Internal: the operation kinds of MetaStore, for metrics labels.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/metrics.h"
#include "common/status.h"
#include "meta/types.h"

namespace weft::meta {

#define WEFT_META_OPS(X)                                                                       \
  X(kLookup, "lookup") X(kGetattr, "getattr") X(kReadlink, "readlink") X(kReaddir, "readdir") \
  X(kStatfs, "statfs") X(kGetxattr, "getxattr") X(kListxattr, "listxattr")                    \
  X(kGetLayout, "get_layout") X(kGcPending, "gc_pending") X(kCreate, "create")                \
  X(kMkdir, "mkdir") X(kSymlink, "symlink") X(kLink, "link") X(kUnlink, "unlink")             \
  X(kRmdir, "rmdir") X(kRename, "rename") X(kSetattr, "setattr") X(kSetxattr, "setxattr")     \
  X(kRemovexattr, "removexattr") X(kSetLayout, "set_layout") X(kOpen, "open")                 \
  X(kClose, "close") X(kReportLength, "report_length") X(kGcDone, "gc_done")    \
  X(kMknod, "mknod") X(kCloseWithLength, "close_with_length")

enum class Op : uint8_t {
#define WEFT_X(name, str) name,
  WEFT_META_OPS(WEFT_X)
#undef WEFT_X
};

inline constexpr size_t kOpCount = 0
#define WEFT_X(name, str) +1
    WEFT_META_OPS(WEFT_X)
#undef WEFT_X
    ;

inline std::string_view op_name(Op op) {
  switch (op) {
#define WEFT_X(name, str) case Op::name: return str;
    WEFT_META_OPS(WEFT_X)
#undef WEFT_X
  }
  return "unknown";
}

struct OpMetrics {
  metrics::Counter* ops;
  metrics::Counter* errors;
  metrics::Histogram* latency_us;
};

template <class T>
Result<void> to_void(Result<T> r) {
  if (!r) return std::unexpected(std::move(r).error());
  return {};
}

// A change of `n` at `now`: its ctime moves strictly forward, even within one
// tick of a coarse clock or after the clock stepped back. A truncate
// (SetAttr::expect_ctime_ns) and the session reaper (close_dead_session)
// tell that a file changed since they read it by its ctime.
inline void touch_ctime(Inode& n, int64_t now) { n.ctime_ns = std::max(now, n.ctime_ns + 1); }

inline Result<Inode> to_inode(Result<Reply> r) {
  if (!r) return std::unexpected(std::move(r).error());
  return std::move(r->inode);
}

inline Result<LengthReply> to_length_reply(Result<Reply> r) {
  if (!r) return std::unexpected(std::move(r).error());
  return LengthReply{std::move(r->inode), r->cut};
}

// Runs f() (returning a Result) and records count, errors and latency.
template <class F>
auto observe(OpMetrics& m, F&& f) {
  m.ops->inc();
  metrics::ScopedLatency latency(*m.latency_us);
  auto r = f();
  if (!r) m.errors->inc();
  return r;
}

}  // namespace weft::meta
