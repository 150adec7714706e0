// ChunkIo's updates when the client's routing does not know the chunk's
// chain (it lags a new chain table): a truncate or remove is not "done"
// without reaching storage; it is retried on refreshed routing and fails
// (retryable) when the chain never shows up. Only a storage server's
// kNotFound means the chunk is already gone.
#include <gtest/gtest.h>

#include <optional>
#include <thread>

#include "client/chunk_io.h"
#include "client/routing_cache.h"
#include "client/in_process_mgmtd.h"
#include "rpc/task.h"

namespace weft::client {
namespace {

using namespace std::chrono_literals;

constexpr char kToken[] = "chunk-io-test";

// One meta node (or `meta_nodes`), no chains.
struct Mgmtd : InProcessMgmtd {
  explicit Mgmtd(uint16_t at_port = 0, int meta_nodes = 1) : InProcessMgmtd(kToken, at_port, meta_nodes) {}
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

// An mgmtd whose routing is older than the client's (its state restored from
// a backup) answers every poll at once; the client keeps its routing and asks
// again after a pause instead of spinning on full snapshots.
TEST(RoutingCacheTest, AnMgmtdBehindTheClientIsNotPolledInALoop) {
  uint16_t port = 0;
  rpc::IoPool io{1};
  rpc::Client rpc(io, rpc::ClientOptions::in_cluster(kToken, "routing-test"));
  std::optional<RoutingCache> routing;
  mgmt::RoutingVersion held = 0;
  {
    Mgmtd newer(0, 6);
    port = newer.port;
    routing.emplace(io, rpc, std::vector<rpc::Endpoint>{rpc::Endpoint{"127.0.0.1", port}});
    ASSERT_TRUE(routing->start());
    held = routing->version();
    ASSERT_GT(held, 3u);
  }
  Mgmtd older(port, 2);
  ASSERT_TRUE(older.state->routing().version < held && older.state->routing().version > 1);
  for (int i = 0; i < 300 && routing->older_refused() == 0; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_GT(routing->older_refused(), 0u);
  const uint64_t fetches = routing->fetches();
  std::this_thread::sleep_for(1500ms);
  EXPECT_LE(routing->fetches() - fetches, 2u) << "polled an mgmtd behind it in a loop";
  EXPECT_EQ(routing->version(), held);
  routing->stop();
}

}  // namespace
}  // namespace weft::client
