// mgmt/render.h
// `weft status`-style views of routing info: a readable text table (nodes,
// targets with state/used/free, chains) and JSON for scripts. JSON is written
// by hand with every string escaped (RFC 8259); integers stay exact.
// Lease times are shown relative to `now` on the clock of the routing info's
// origin (mgmtd), as lease_left_ms (negative: expired).
// Threading: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "mgmt/client_table.h"
#include "mgmt/routing.h"
#include "mgmt/state_codec.h"

namespace weft::mgmt {

// `clients`: the clients holding a lease (not part of the routing info).
// `meta_store`: the cluster's meta store as mgmtd recorded it (StatusReply;
// store_id 0: none recorded), shown as "meta store" (text) and "meta_store"
// (JSON: id as a hex string, or null).
std::string render_text(const RoutingInfo& routing, TimePoint now, const std::vector<ClientInfo>& clients = {},
                        const MetaStoreRecord& meta_store = {});
std::string render_json(const RoutingInfo& routing, TimePoint now, const std::vector<ClientInfo>& clients = {},
                        const MetaStoreRecord& meta_store = {});

// "a\"b" -> a\"b (without the surrounding quotes); control bytes as \u00XX.
std::string json_escape(std::string_view s);
// 1536 -> "1.5 KiB"; below 1 KiB: "512 B".
std::string format_bytes(uint64_t bytes);

}  // namespace weft::mgmt
