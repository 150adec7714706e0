// client/in_process_mgmtd.h
// Tests only: an mgmtd on 127.0.0.1 with its state in memory, for client code
// that needs routing and leases (connect, ChunkIo, the routing cache).
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "mgmt/cluster_state.h"
#include "mgmt/service.h"
#include "rpc/server.h"

namespace weft::client {

struct InProcessMgmtd {
  // at_port 0: any free port. meta_nodes: meta nodes registered, one routing
  // version each (0 reads as "unchanged" to a new client, so 1 at least for
  // clients that fetch routing).
  explicit InProcessMgmtd(const std::string& token, uint16_t at_port = 0, int meta_nodes = 0) {
    state = std::move(mgmt::ClusterState::open(mgmt::ClusterOptions{}, SystemClock::instance(), registry).value());
    service =
        std::make_unique<mgmt::MgmtService>(*state, SystemClock::instance(), mgmt::MgmtServiceOptions{}, registry);
    server = std::make_unique<rpc::Server>(io, rpc::ServerOptions{.cluster_token = token, .name = "mgmtd"}, registry);
    service->register_methods(*server);
    port = server->listen("127.0.0.1", at_port).value();
    service->start();
    for (int i = 1; i <= meta_nodes; ++i)
      EXPECT_TRUE(state->register_node(
          {.kind = mgmt::NodeKind::kMeta, .address = "127.0.0.1:" + std::to_string(i), .incarnation = 1}));
  }
  ~InProcessMgmtd() {
    service->stop();  // first: it ends the client's routing long poll, which server->stop() would wait for
    server->stop();
    io.stop();
  }

  metrics::Registry registry;
  rpc::IoPool io{1};
  std::unique_ptr<mgmt::ClusterState> state;
  std::unique_ptr<mgmt::MgmtService> service;
  std::unique_ptr<rpc::Server> server;
  uint16_t port = 0;
};

}  // namespace weft::client
