// rpc/test_cluster.h — for RPC tests: an echo server and a client on
// 127.0.0.1, each with its own I/O thread, sharing one cluster token unless
// the client is given another.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "common/metrics.h"
#include "proto/rpc.pb.h"
#include "rpc/client.h"
#include "rpc/echo_service.h"
#include "rpc/server.h"

namespace weft::rpc::testing {

inline constexpr char kTestToken[] = "test-token";

struct EchoCluster {
  explicit EchoCluster(ServerOptions so = {}, ClientOptions co = {}) {
    so.cluster_token = kTestToken;
    so.name = "test-server";
    server = std::make_unique<Server>(server_io, so, registry);
    register_echo_service(*server);
    port = server->listen("127.0.0.1", 0).value();
    if (co.cluster_token.empty()) co.cluster_token = kTestToken;
    client = std::make_unique<Client>(client_io, co);
    ep = Endpoint{"127.0.0.1", port};
  }
  ~EchoCluster() {
    client.reset();
    server.reset();
  }

  // The coroutine call, run to completion from the test thread.
  Result<proto::EchoReply> echo(proto::EchoRequest req, CallOptions opts = {}, RawResponse* raw = nullptr,
                                MethodId m = kEcho) {
    return block_on(client_io.at(0).get_executor(), client->call<proto::EchoReply>(ep, m, req, std::move(opts), raw));
  }
  // The calling-thread call (Client::call_blocking).
  Result<proto::EchoReply> echo_blocking(const proto::EchoRequest& req, std::span<std::byte> dst = {},
                                         RawResponse* raw = nullptr, uint32_t timeout_ms = 0) {
    return client->call_blocking<proto::EchoReply>(ep, kEcho, req, dst, timeout_ms, raw);
  }
  int64_t server_connections() {
    return registry.gauge("weft_rpc_server_connections", "Open connections", {{"server", "test-server"}}).value();
  }

  metrics::Registry registry;
  IoPool server_io{1, "srv"};
  IoPool client_io{1, "cli"};
  std::unique_ptr<Server> server;
  std::unique_ptr<Client> client;
  uint16_t port = 0;
  Endpoint ep;
};

}  // namespace weft::rpc::testing
