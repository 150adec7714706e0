// ChunkIo's updates when the client's routing does not know the chunk's
// chain (it lags a new chain table): a truncate or remove is not "done"
// without reaching storage; it is retried on refreshed routing and fails
// (retryable) when the chain never shows up. Only a storage server's
// kNotFound means the chunk is already gone.
#include <gtest/gtest.h>

#include "client/chunk_io.h"
#include "client/routing_cache.h"
#include "mgmt/cluster_state.h"
#include "mgmt/service.h"
#include "rpc/server.h"
#include "rpc/task.h"

namespace weft::client {
namespace {

constexpr char kToken[] = "chunk-io-test";

// mgmtd on 127.0.0.1 with its state in memory: one meta node, no chains.
struct Mgmtd {
  Mgmtd() {
    state = std::move(mgmt::ClusterState::open(mgmt::ClusterOptions{}, SystemClock::instance(), registry).value());
    service =
        std::make_unique<mgmt::MgmtService>(*state, SystemClock::instance(), mgmt::MgmtServiceOptions{}, registry);
    server = std::make_unique<rpc::Server>(io, rpc::ServerOptions{.cluster_token = kToken, .name = "mgmtd"}, registry);
    service->register_methods(*server);
    port = server->listen("127.0.0.1", 0).value();
    service->start();
    // A first routing version (0 reads as "unchanged" to a new client).
    EXPECT_TRUE(state->register_node({.kind = mgmt::NodeKind::kMeta, .address = "127.0.0.1:1", .incarnation = 1}));
  }
  ~Mgmtd() {
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

TEST(ChunkIo, AnUpdateOfAChainTheRoutingDoesNotKnowIsNotDone) {
  Mgmtd mgmtd;
  rpc::IoPool io{1};
  rpc::Client rpc(io, rpc::ClientOptions::in_cluster(kToken, "chunk-io-test"));
  RoutingCache routing(io, rpc, {rpc::Endpoint{"127.0.0.1", mgmtd.port}});
  ASSERT_TRUE(routing.start());
  ChunkIo chunks(io, rpc, routing, ChunkIoOptions{.call_timeout_ms = 1000, .retry_time_ms_max = 300});
  ChunkAddress c{.ino = 7, .index = 0, .chain = 42, .chunk_bytes = 1 << 20};
  auto ex = io.at(0).get_executor();
  auto truncated = block_on(ex, chunks.truncate(c, 100));
  ASSERT_FALSE(truncated.has_value()) << "a truncate reported done without reaching storage";
  EXPECT_TRUE(truncated.error().retryable()) << truncated.error();
  EXPECT_NE(truncated.error().message().find("chain 42"), std::string::npos) << truncated.error();
  auto removed = block_on(ex, chunks.remove(c));
  ASSERT_FALSE(removed.has_value()) << "a remove reported done without reaching storage";
  EXPECT_TRUE(removed.error().retryable()) << removed.error();
  EXPECT_GT(chunks.retries(), 0u) << "retried on refreshed routing";
  routing.stop();
}

}  // namespace
}  // namespace weft::client
