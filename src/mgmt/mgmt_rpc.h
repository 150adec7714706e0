// mgmt/mgmt_rpc.h
// Blocking calls to mgmtd with failover over several configured addresses:
// tried in order starting with the last one that answered; a transport
// failure (unreachable, disconnected, timed out, overloaded) moves on to the
// next, any answer from mgmtd (success or error) is final. HA through etcd
// replaces the fixed list later; callers do not change.
// Threading: thread-safe; must NOT be called from an I/O thread of `io`
// (block_on would deadlock).
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "common/status.h"
#include "rpc/client.h"
#include "rpc/endpoint.h"
#include "rpc/io_pool.h"

namespace weft::mgmt {

class MgmtRpc {
 public:
  MgmtRpc(rpc::IoPool& io, rpc::Client& client, std::vector<rpc::Endpoint> mgmtd, uint32_t timeout_ms = 3000);

  // Resp, Req: protobuf messages. timeout_ms 0: the default given above.
  // A cancelled call (kCancelled) is final: no other address is tried.
  template <class Resp, class Req>
  Result<Resp> call(rpc::MethodId method, const Req& req, uint32_t timeout_ms = 0, rpc::CancelToken cancel = nullptr) {
    Status last(Code::kUnavailable, "no mgmtd address configured");
    size_t start = preferred_.load();
    for (size_t i = 0; i < mgmtd_.size(); ++i) {
      size_t idx = (start + i) % mgmtd_.size();
      rpc::CallOptions options;
      options.timeout_ms = timeout_ms != 0 ? timeout_ms : timeout_ms_;
      options.cancel = cancel;
      auto r = block_on(io_.at(0).get_executor(), client_.call<Resp>(mgmtd_[idx], method, req, std::move(options)));
      if (r) {
        preferred_ = idx;
        return r;
      }
      if (!is_transport_error(r.error().code())) return r;
      last = Status(r.error().code(), fmt::format("mgmtd {}: {}", mgmtd_[idx].to_string(), r.error().message()));
    }
    return std::unexpected(last);
  }

  const std::vector<rpc::Endpoint>& addresses() const { return mgmtd_; }

  static bool is_transport_error(Code c);

 private:
  rpc::IoPool& io_;
  rpc::Client& client_;
  const std::vector<rpc::Endpoint> mgmtd_;
  const uint32_t timeout_ms_;
  std::atomic<size_t> preferred_{0};
};

}  // namespace weft::mgmt
