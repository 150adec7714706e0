#include "mgmt/client_list.h"

#include "mgmt/proto_convert.h"
#include "mgmt/service_methods.h"
#include "proto/mgmt.pb.h"

namespace weft::mgmt {

Result<LeasedClients> list_all_clients(MgmtRpc& rpc, bool ids_only, uint64_t after_id) {
  LeasedClients out;
  pb::ListClientsRequest req;
  req.set_ids_only(ids_only);
  req.set_after_id(after_id);
  // Each page must move past an id, so this ends; the bound only guards against a broken peer.
  for (size_t pages = 0; pages <= kClientsMax + 1; ++pages) {
    WEFT_TRY(auto reply, rpc.call<pb::ListClientsReply>(kListClients, req));
    // An mgmtd from before paging sends everything at once and says only `complete`.
    out.tracked = out.tracked && (reply.tracked() || reply.complete());
    for (const auto& c : reply.clients()) {
      if (c.id() <= req.after_id()) return error(Code::kProtocol, "ListClients went back to client {:x}", c.id());
      req.set_after_id(c.id());
      out.clients.push_back(from_proto(c));
    }
    if (!reply.more()) return out;
    if (reply.clients_size() == 0) return error(Code::kProtocol, "ListClients: an empty page with more to come");
  }
  return error(Code::kProtocol, "ListClients: more pages than clients");
}

}  // namespace weft::mgmt
