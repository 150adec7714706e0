// client/in_process_mgmtd.h
// Tests only: an mgmtd on 127.0.0.1 with its state in memory, for client code
// that needs routing and leases (connect, ChunkIo, the routing cache); a
// storage server that never answers (DroppingStorage) and a chain table over
// it, for data calls that must fail (or must not be made).
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>

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
  // Registers a storage node at `address` with one target and builds a chain
  // table over it (replicas 1): every chain of that table has its head there.
  mgmt::ChainTableId add_storage_and_table(const std::string& address) {
    auto node = state->register_node(
        {.kind = mgmt::NodeKind::kStorage, .address = address, .incarnation = 1, .targets = {{.name = "t0"}}});
    EXPECT_TRUE(node.has_value()) << node.error();
    auto table = state->create_chain_table({.replicas = 1});
    EXPECT_TRUE(table.has_value()) << table.error();
    return table ? *table : 0;
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

// A "storage server" on 127.0.0.1 that accepts connections and closes them
// at once, counting them: every call to it fails (retryably: the connection
// drops), and `accepted` tells whether anything tried.
struct DroppingStorage {
  DroppingStorage() {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    EXPECT_EQ(::listen(fd, 64), 0);
    socklen_t len = sizeof(a);
    EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
    port = ntohs(a.sin_port);
    thread = std::thread([this] {
      while (true) {
        int c = ::accept(fd, nullptr, nullptr);
        if (c < 0) return;  // shut down
        accepted.fetch_add(1);
        ::close(c);
      }
    });
  }
  ~DroppingStorage() {
    ::shutdown(fd, SHUT_RDWR);  // wakes the accept
    thread.join();
    ::close(fd);
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port); }

  int fd = -1;
  uint16_t port = 0;
  std::atomic<int> accepted{0};
  std::thread thread;
};

}  // namespace weft::client
