// ChunkIo when the client's routing does not know the chunk's chain (it
// lags a new chain table): a truncate or remove is not "done" without
// reaching storage, and a read or listing does not find "no such chunk"
// (ENOENT); each is retried on refreshed routing and fails when the chain
// never shows up. Only a storage server's kNotFound means the chunk is
// already gone.
// Reads and updates that are still failing with a retryable code when the
// retry time runs out fail with kIoError (EIO), not with that code (EAGAIN,
// ESTALE, EHOSTDOWN...): a File keeps it as its error for good.
#include <gtest/gtest.h>

#include <optional>
#include <atomic>
#include <thread>
#include <utility>
#include <vector>

#include <algorithm>
#include <mutex>
#include <fmt/format.h>

#include "client/chunk_io.h"
#include "common/fault.h"
#include "client/remove_chunks.h"
#include "client/routing_cache.h"
#include "client/in_process_mgmtd.h"
#include "proto/storage.pb.h"
#include "rpc/service.h"
#include "rpc/task.h"
#include "storage/service_methods.h"

namespace weft::client {
namespace {

using namespace std::chrono_literals;

constexpr char kToken[] = "chunk-io-test";

// A storage server from before RemoveRange: it knows the single removal only
// (each remembered by chunk index); RemoveRange answers kUnknownMethod.
struct OldStorage {
  OldStorage() {
    namespace pb = proto::storage;
    server = std::make_unique<rpc::Server>(io, rpc::ServerOptions{.cluster_token = kToken, .name = "old-storage"});
    rpc::add_blocking_method<pb::RemoveRequest, pb::RemoveReply>(
        *server, storage::methods::kRemove, "storage.remove",
        [this](const pb::RemoveRequest& r, rpc::ServerCall&) -> Result<pb::RemoveReply> {
          std::lock_guard lock(mu);
          removed.push_back(r.chunk().index());
          return pb::RemoveReply{};
        });
    port = server->listen("127.0.0.1", 0).value();
  }
  ~OldStorage() {
    server->stop();
    io.stop();
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port); }
  std::vector<uint64_t> removed_sorted() {
    std::lock_guard lock(mu);
    auto out = removed;
    std::sort(out.begin(), out.end());
    return out;
  }

  rpc::IoPool io{1};
  std::unique_ptr<rpc::Server> server;
  uint16_t port = 0;
  std::mutex mu;
  std::vector<uint64_t> removed;  // GUARDED_BY(mu)
};

// A storage server whose writes answer the codes of `script` in turn (kOk,
// as a write to an empty chunk, once it runs out), recording each request's
// (sequence, attempt).
struct ScriptedStorage {
  explicit ScriptedStorage(std::vector<Code> script) : script(std::move(script)) {
    namespace pb = proto::storage;
    server = std::make_unique<rpc::Server>(io, rpc::ServerOptions{.cluster_token = kToken, .name = "scripted"});
    rpc::add_blocking_method<pb::WriteRequest, pb::WriteReply>(
        *server, storage::methods::kWrite, "storage.write",
        [this](const pb::WriteRequest& r, rpc::ServerCall&) -> Result<pb::WriteReply> {
          std::lock_guard lock(mu);
          sends.emplace_back(r.sequence(), r.attempt());
          if (sends.size() <= this->script.size() && this->script[sends.size() - 1] != Code::kOk)
            return error(this->script[sends.size() - 1], "scripted");
          // As a head answers a write to an empty chunk (ChunkIo checks it).
          pb::WriteReply w;
          w.set_version(1);
          w.set_chunk_length(r.offset() + r.length());
          w.set_chunk_crc32c(r.offset() == 0 ? r.data_crc32c() : 0);
          return w;
        });
    port = server->listen("127.0.0.1", 0).value();
  }
  ~ScriptedStorage() {
    server->stop();
    io.stop();
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port); }
  std::vector<std::pair<uint64_t, uint32_t>> sent() {
    std::lock_guard lock(mu);
    return sends;
  }

  const std::vector<Code> script;
  rpc::IoPool io{1};
  std::unique_ptr<rpc::Server> server;
  uint16_t port = 0;
  std::mutex mu;
  std::vector<std::pair<uint64_t, uint32_t>> sends;  // GUARDED_BY(mu)
};

// One meta node (or `meta_nodes`), no chains.
struct Mgmtd : InProcessMgmtd {
  explicit Mgmtd(uint16_t at_port = 0, int meta_nodes = 1) : InProcessMgmtd(kToken, at_port, meta_nodes) {}
};

TEST(ChunkIo, AChainTheRoutingDoesNotKnowIsRetriedNotMissing) {
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
  EXPECT_EQ(truncated.error().code(), Code::kIoError) << truncated.error();
  EXPECT_NE(truncated.error().message().find("chain 42"), std::string::npos) << truncated.error();
  EXPECT_NE(truncated.error().message().find("kStaleRouting"), std::string::npos) << "the last error: "
                                                                                   << truncated.error();
  auto removed = block_on(ex, chunks.remove(c));
  ASSERT_FALSE(removed.has_value()) << "a remove reported done without reaching storage";
  EXPECT_EQ(removed.error().code(), Code::kIoError) << removed.error();
  EXPECT_GT(chunks.retries(), 0u) << "retried on refreshed routing";
  // Reads and listings too: retried, then EIO, never ENOENT ("no such chunk").
  std::vector<std::byte> buf(4096);
  auto expect_retried_then_eio = [&](const Status& s, std::string_view what) {
    EXPECT_EQ(s.code(), Code::kIoError) << what << ": " << s;
    EXPECT_NE(s.message().find("kStaleRouting"), std::string::npos) << what << ": the last error: " << s;
  };
  auto first_round = chunks.read_blocking(c, 0, buf);
  ASSERT_FALSE(first_round.has_value());
  EXPECT_EQ(first_round.error().code(), Code::kStaleRouting) << "read_blocking: " << first_round.error();
  uint64_t retries = chunks.retries();
  auto read = block_on(ex, chunks.read(c, 0, buf));
  ASSERT_FALSE(read.has_value());
  expect_retried_then_eio(read.error(), "read");
  EXPECT_GT(chunks.retries(), retries);
  retries = chunks.retries();
  auto end = block_on(ex, chunks.data_end(c.ino, c.chain, c.chunk_bytes, 0, 8));
  ASSERT_FALSE(end.has_value());
  expect_retried_then_eio(end.error(), "data_end");
  EXPECT_GT(chunks.retries(), retries);
  routing.stop();
}

// Storage that stays unreachable past the retry time: writes, truncates,
// removes and reads fail with EIO (the last error, a dropped connection, in
// the message), after trying.
TEST(ChunkIo, GivingUpOnUnreachableStorageIsAnIoError) {
  Mgmtd mgmtd;
  DroppingStorage storage;
  ASSERT_EQ(mgmtd.add_storage_and_table(storage.address()), 1u);
  rpc::IoPool io{1};
  rpc::Client rpc(io, rpc::ClientOptions::in_cluster(kToken, "chunk-io-test"));
  RoutingCache routing(io, rpc, {rpc::Endpoint{"127.0.0.1", mgmtd.port}});
  ASSERT_TRUE(routing.start());
  ASSERT_FALSE(routing.current()->tables.at(1).chains.empty());
  const mgmt::ChainId chain = routing.current()->tables.at(1).chains[0];
  ChunkIo chunks(io, rpc, routing, ChunkIoOptions{.call_timeout_ms = 1000, .retry_time_ms_max = 300});
  ChunkAddress c{.ino = 7, .index = 0, .chain = chain, .chunk_bytes = 1 << 20};
  auto ex = io.at(0).get_executor();
  std::vector<std::byte> buf(4096, std::byte{1});
  auto expect_eio = [&](const Status& s, std::string_view what) {
    EXPECT_EQ(s.code(), Code::kIoError) << what << ": " << s;
    EXPECT_EQ(s.posix_errno(), EIO) << what;
    EXPECT_FALSE(s.retryable()) << what;
    EXPECT_NE(s.message().find(fmt::format("chain {}", chain)), std::string::npos) << what << ": " << s;
  };
  auto written = block_on(ex, chunks.write(c, 0, buf));
  ASSERT_FALSE(written.has_value());
  expect_eio(written.error(), "write");
  auto truncated = block_on(ex, chunks.truncate(c, 100));
  ASSERT_FALSE(truncated.has_value());
  expect_eio(truncated.error(), "truncate");
  auto removed = block_on(ex, chunks.remove(c));
  ASSERT_FALSE(removed.has_value());
  expect_eio(removed.error(), "remove");
  auto read = block_on(ex, chunks.read(c, 0, buf));
  ASSERT_FALSE(read.has_value());
  expect_eio(read.error(), "read");
  EXPECT_GT(storage.accepted.load(), 0) << "storage was tried";
  EXPECT_GT(chunks.retries(), 0u);
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
  // Up to 10 s: on a loaded machine the polls that failed while mgmtd
  // restarted back off (connect back-off, 200 ms pauses) for seconds.
  for (int i = 0; i < 1000 && routing->older_refused() == 0; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_GT(routing->older_refused(), 0u);
  const uint64_t fetches = routing->fetches();
  std::this_thread::sleep_for(1500ms);
  EXPECT_LE(routing->fetches() - fetches, 2u) << "polled an mgmtd behind it in a loop";
  EXPECT_EQ(routing->version(), held);
  routing->stop();
}

// A chain whose head predates RemoveRange (a rolling upgrade): the chunks of
// the range the caller knows are removed one index at a time, as before, each
// on its own chain.
TEST(ChunkIo, ChunksOnAHeadOlderThanRemoveRangeAreRemovedIndexByIndex) {
  Mgmtd mgmtd;
  OldStorage storage;
  ASSERT_EQ(mgmtd.add_storage_and_table(storage.address()), 1u);
  rpc::IoPool io{1};
  rpc::Client rpc(io, rpc::ClientOptions::in_cluster(kToken, "chunk-io-test"));
  RoutingCache routing(io, rpc, {rpc::Endpoint{"127.0.0.1", mgmtd.port}});
  ASSERT_TRUE(routing.start());
  ChunkIo chunks(io, rpc, routing, ChunkIoOptions{.call_timeout_ms = 1000, .retry_time_ms_max = 2000});
  auto table = routing.current()->tables.find(1);
  ASSERT_NE(table, routing.current()->tables.end());
  FileChunks file{.ino = 7, .chunk_bytes = 64 << 10, .stripe = table->second.chains};
  ASSERT_FALSE(file.stripe.empty());
  auto ranged = block_on(io.at(0).get_executor(), chunks.remove_from(7, file.stripe[0], 3));
  ASSERT_FALSE(ranged.has_value());
  EXPECT_EQ(ranged.error().code(), Code::kUnknownMethod) << ranged.error();
  auto removed = remove_chunks_from(chunks, file, 3, 10);
  ASSERT_TRUE(removed.has_value()) << removed.error();
  EXPECT_EQ(*removed, 0u) << "RemoveRange removed nothing";
  EXPECT_EQ(storage.removed_sorted(), (std::vector<uint64_t>{3, 4, 5, 6, 7, 8, 9}));
  routing.stop();
}

// A batch's groups come with the servers taken in turn: submit_reads starts
// them in order within a byte budget, so a batch listed server by server kept
// one server busy at a time. Nothing is sent: three nodes nobody serves.
TEST(ChunkIo, GroupedReadsTakeTheServersInTurn) {
  Mgmtd mgmtd;
  for (int i = 1; i <= 3; ++i) {
    auto node = mgmtd.state->register_node({.kind = mgmt::NodeKind::kStorage,
                                            .address = fmt::format("127.0.0.1:{}", 40000 + i),
                                            .incarnation = 1,
                                            .targets = {{.name = "t0"}}});
    ASSERT_TRUE(node.has_value()) << node.error();
  }
  ASSERT_TRUE(mgmtd.state->create_chain_table({.replicas = 1}).has_value());
  rpc::IoPool io{1};
  rpc::Client rpc(io, rpc::ClientOptions::in_cluster(kToken, "chunk-io-test"));
  RoutingCache routing(io, rpc, {rpc::Endpoint{"127.0.0.1", mgmtd.port}});
  ASSERT_TRUE(routing.start());
  ChunkIo chunks(io, rpc, routing, ChunkIoOptions{});
  auto table = routing.current()->tables.find(1);
  ASSERT_NE(table, routing.current()->tables.end());
  ASSERT_EQ(table->second.chains.size(), 3u);
  // Four ranges of a whole group's size per chain: one group each.
  std::vector<std::byte> buf(ChunkIo::kGroupBytesMax);
  std::vector<GroupedRead> reads;
  for (mgmt::ChainId chain : table->second.chains)
    for (uint64_t k = 0; k < 4; ++k)
      reads.push_back(GroupedRead{ChunkAddress{7, k, chain, 64 << 20}, 0, buf});
  auto groups = chunks.group_reads(reads);
  ASSERT_EQ(groups.size(), 12u);
  auto chain_of = [&](size_t g) { return reads[groups[g].at(0)].chunk.chain; };
  for (size_t g = 0; g + 1 < groups.size(); ++g)
    EXPECT_NE(chain_of(g), chain_of(g + 1)) << "groups " << g << " and " << g + 1 << " go to one server";
  routing.stop();
}

// Retries ask for a refresh after each failure: many at once (a server died
// under load) cancelled each immediate fetch before its answer came, so the
// routing never moved. A refresh request cuts a long poll only.
TEST(RoutingCacheTest, RefreshRequestsInABurstDoNotStarveTheFetch) {
  Mgmtd mgmtd;
  rpc::IoPool io{1};
  rpc::Client rpc(io, rpc::ClientOptions::in_cluster(kToken, "chunk-io-test"));
  RoutingCache routing(io, rpc, {rpc::Endpoint{"127.0.0.1", mgmtd.port}});
  ASSERT_TRUE(routing.start());
  fault::Scope slow("mgmt.get_routing.slow");  // each answer takes 5 ms
  std::atomic<bool> stop{false};
  std::thread burst([&] {
    while (!stop) {
      routing.request_refresh();
      std::this_thread::yield();
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_EQ(mgmtd.add_storage_and_table("127.0.0.1:2"), 1u);  // never dialled
  const mgmt::RoutingVersion wanted = mgmtd.state->routing_version();
  bool seen = false;
  for (int i = 0; i < 300 && !seen; ++i) {
    seen = routing.version() >= wanted;
    if (!seen) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  stop = true;
  burst.join();
  EXPECT_TRUE(seen) << "routing version " << routing.version() << ", mgmtd's " << wanted;
  routing.stop();
}

// A ScriptedStorage as the one server of an in-process mgmtd's chain table,
// and a ChunkIo that writes 4 KiB to chunk {7, 0} of its first chain.
struct ScriptedChain {
  explicit ScriptedChain(std::vector<Code> script) : storage(std::move(script)) {
    if (mgmtd.add_storage_and_table(storage.address()) == 1 && routing.start())
      c.chain = routing.current()->tables.at(1).chains[0];
  }
  ~ScriptedChain() { routing.stop(); }
  bool ready() const { return c.chain != 0; }
  Result<void> write() { return block_on(io.at(0).get_executor(), chunks.write(c, 0, buf)); }

  Mgmtd mgmtd;
  ScriptedStorage storage;
  rpc::IoPool io{1};
  rpc::Client rpc{io, rpc::ClientOptions::in_cluster(kToken, "chunk-io-test")};
  RoutingCache routing{io, rpc, {rpc::Endpoint{"127.0.0.1", mgmtd.port}}};
  ChunkIo chunks{io, rpc, routing, ChunkIoOptions{.call_timeout_ms = 1000, .retry_time_ms_max = 5000}};
  ChunkAddress c{.ino = 7, .index = 0, .chain = 0, .chunk_bytes = 1 << 20};
  std::vector<std::byte> buf = std::vector<std::byte>(4096, std::byte{1});
};

// Every send of one update carries its sequence and how many sends came
// before (storage refuses a retry it can no longer tell from a first send,
// storage/dedup_table.h); that refusal, kOutcomeUnknown, is not retried.
TEST(ChunkIo, RetriesOfAnUpdateAreNumberedAndAnUnknownOutcomeIsNotRetried) {
  ScriptedChain t({Code::kOverloaded, Code::kTimeout, Code::kOk, Code::kOutcomeUnknown});
  ASSERT_TRUE(t.ready());
  auto first = t.write();
  ASSERT_TRUE(first.has_value()) << first.error();
  auto second = t.write();
  ASSERT_FALSE(second.has_value());
  EXPECT_EQ(second.error().code(), Code::kOutcomeUnknown) << second.error();
  EXPECT_EQ(second.error().posix_errno(), EIO);
  auto sent = t.storage.sent();
  ASSERT_EQ(sent.size(), 4u) << "the unknown outcome was retried";
  const uint64_t seq = sent[0].first;
  EXPECT_EQ(sent[0], std::make_pair(seq, 0u));
  EXPECT_EQ(sent[1], std::make_pair(seq, 1u));
  EXPECT_EQ(sent[2], std::make_pair(seq, 2u));
  EXPECT_EQ(sent[3], std::make_pair(seq + 1, 0u)) << "the next update: a new sequence, a first send";
}

// A send refused before anything was staged (stale routing, not the head,
// lease expired) applied nothing: the next send is still a first one (as a
// retry, a head whose dedup table evicted this client's entries beyond it
// refused it as kOutcomeUnknown although it was never applied anywhere).
TEST(ChunkIo, ASendRefusedBeforeStagingLeavesTheNextOneAFirstSend) {
  ScriptedChain t({Code::kStaleRouting, Code::kNotChainHead, Code::kTimeout, Code::kOk});
  ASSERT_TRUE(t.ready());
  auto written = t.write();
  ASSERT_TRUE(written.has_value()) << written.error();
  auto sent = t.storage.sent();
  ASSERT_EQ(sent.size(), 4u);
  const uint64_t seq = sent[0].first;
  EXPECT_EQ(sent[1], std::make_pair(seq, 0u)) << "after a stale routing";
  EXPECT_EQ(sent[2], std::make_pair(seq, 0u)) << "after not the head";
  EXPECT_EQ(sent[3], std::make_pair(seq, 1u)) << "after a timeout: maybe applied";
}

// A payload whose checksum failed on arrival (storage refuses it, kCorruption)
// is sent again, as a read of a bad replica is tried again: the File failed
// for good on one damaged frame.
TEST(ChunkIo, AWriteWhosePayloadArrivedDamagedIsSentAgain) {
  ScriptedChain t({Code::kCorruption, Code::kOk});
  ASSERT_TRUE(t.ready());
  auto written = t.write();
  ASSERT_TRUE(written.has_value()) << written.error();
  auto sent = t.storage.sent();
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[1], std::make_pair(sent[0].first, 1u)) << "the same update, its second send";
}

}  // namespace
}  // namespace weft::client
