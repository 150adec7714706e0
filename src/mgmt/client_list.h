// mgmt/client_list.h
// The whole client table of mgmtd, fetched page by page (ListClients): what
// meta's session reaper and `weft status` need. One reply cannot hold it: a
// full table (kClientsMax clients with 256-byte labels) is ~30 MB, far past
// the 4 MiB RPC body limit.
#pragma once

#include <vector>

#include "common/status.h"
#include "mgmt/client_table.h"
#include "mgmt/mgmt_rpc.h"

namespace weft::mgmt {

// Clients per ListClients page: at most ~300 bytes each with a label (a page
// ~600 KB), ~12 bytes as ids alone.
inline constexpr size_t kClientsPerPage = 2048;
inline constexpr size_t kClientIdsPerPage = 32768;

struct LeasedClients {
  std::vector<ClientInfo> clients;  // in id order; ids only when asked so
  // Every page came from a mgmtd that had tracked clients for a full lease +
  // grace: only then does a client missing here hold no lease.
  bool tracked = true;
};

// Pages through ListClients from the first id after `after_id` (0: from the
// first) to the last. Clients that come or go meanwhile may or may not be
// listed; one present throughout is.
Result<LeasedClients> list_all_clients(MgmtRpc& rpc, bool ids_only, uint64_t after_id = 0);

}  // namespace weft::mgmt
