#include "mgmt/mgmt_rpc.h"

namespace weft::mgmt {

MgmtRpc::MgmtRpc(rpc::IoPool& io, rpc::Client& client, std::vector<rpc::Endpoint> mgmtd, uint32_t timeout_ms)
    : io_(io), client_(client), mgmtd_(std::move(mgmtd)), timeout_ms_(timeout_ms) {}

bool MgmtRpc::is_transport_error(Code c) {
  return c == Code::kUnavailable || c == Code::kDisconnected || c == Code::kTimeout || c == Code::kOverloaded;
}

}  // namespace weft::mgmt
