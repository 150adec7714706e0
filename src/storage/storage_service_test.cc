// The storage service in one process: chains of 1, 2 and 3 servers on
// loopback (writes replicate byte-identically, stale chain versions and
// non-head writes are rejected, retries are de-duplicated, a corrupted
// replica answers kCorruption while another serves the read, a syncing
// target is resynced, a full target answers kNoSpace and still serves reads;
// connections to successors take the server's tcp liveness).
#include <gtest/gtest.h>

#include <algorithm>
#include <mutex>
#include <thread>

#include "common/fault.h"
#include "proto/storage.pb.h"
#include "proto/rpc.pb.h"
#include "rpc/server.h"
#include "rpc/test_util.h"
#include "storage/storage_server.h"
#include "storage/storage_test_client.h"
#include "storage/test_util.h"

namespace weft::storage {
namespace {

using mgmt::TargetState;
using testing::ChainSpec;
using testing::pattern;

constexpr char kToken[] = "test-token";
constexpr uint32_t kChunk = 256 * 1024;

// One storage server with its own targets, in this process.
class Node {
 public:
  Node(rpc::IoPool& io, const std::string& name, std::vector<mgmt::TargetId> targets, uint64_t capacity = 0,
       uint64_t read_bytes_held_max = 0, uint32_t write_stall_timeout_ms = 0,
       std::chrono::seconds stray_grace = std::chrono::hours(1), std::function<bool()> lease = nullptr,
       size_t dedup_entries_max = 65536, uint32_t forward_timeout_ms = 3000, size_t resync_window = 65536,
       const std::function<void(StorageConfig&)>& configure = {}) {
    StorageConfig sc;
    sc.resync_window = resync_window;
    sc.stray_chunk_grace = stray_grace;
    sc.dedup_entries_max = dedup_entries_max;
    if (read_bytes_held_max) sc.read_bytes_held_max = read_bytes_held_max;
    for (auto t : targets) sc.targets.push_back({t, dir_.path() + "/t" + std::to_string(t), capacity, 1u << 20});
    sc.disk_threads = 4;
    sc.forward_timeout_ms = forward_timeout_ms;
    if (configure) configure(sc);
    auto s = open_storage_service(io, sc, rpc::ServiceConfig{.cluster_token = kToken, .name = name},
                                  metrics::Registry::global(), std::move(lease));
    EXPECT_TRUE(s.has_value()) << s.error();
    service_ = std::move(*s);
    rpc::ServerOptions so{.cluster_token = kToken, .name = name};
    if (write_stall_timeout_ms) so.write_stall_timeout_ms = write_stall_timeout_ms;
    server_ = std::make_unique<rpc::Server>(io, so);
    service_->register_methods(*server_);
    port_ = *server_->listen("127.0.0.1", 0);
  }
  ~Node() {
    server_->stop();
    service_->stop();
  }
  rpc::Endpoint ep() const { return {"127.0.0.1", port_}; }
  std::string address() const { return ep().to_string(); }
  StorageService& service() { return *service_; }
  ChunkEngine& engine(mgmt::TargetId t) { return service_->target(t)->engine(); }

 private:
  testing::TempDir dir_;
  std::unique_ptr<StorageService> service_;
  std::unique_ptr<rpc::Server> server_;
  uint16_t port_ = 0;
};

// A BatchRead of `ranges` times (offset, length) of chunk `id` on chain 1 version 1.
proto::storage::BatchReadRequest batch_of(int ranges, uint32_t offset, uint32_t length, ChunkId id = {1, 0}) {
  proto::storage::BatchReadRequest req;
  for (int i = 0; i < ranges; ++i) {
    auto* r = req.add_ranges();
    r->set_chain_id(1);
    r->set_chain_version(1);
    r->mutable_chunk()->set_inode(id.inode);
    r->mutable_chunk()->set_index(id.index);
    r->set_offset(offset);
    r->set_length(length);
  }
  return req;
}

// A raw connection past the handshake, which reads nothing unless told to.
std::unique_ptr<rpc::testing::RawSocket> stalled_peer(const Node& node) {
  auto peer = std::make_unique<rpc::testing::RawSocket>(node.ep().port);
  rpc::FrameHeader h;
  h.method = rpc::kHello.wire();
  weft::proto::Hello hello;
  hello.set_cluster_token(kToken);
  EXPECT_TRUE(peer->send_frame(h, hello.SerializeAsString()));
  rpc::FrameHeader rh;
  std::string body;
  EXPECT_TRUE(peer->recv_frame(&rh, &body));
  return peer;
}

// `reads` whole-chunk reads of chunk {1, 0}, in waves a connection's share
// admits whole, then `settle` for the socket buffers (loopback: ~10 MiB) to
// fill and replies to stay queued.
void send_reads(rpc::testing::RawSocket& peer, int reads,
                std::chrono::milliseconds settle = std::chrono::milliseconds(300)) {
  rpc::FrameHeader h;
  h.method = methods::kBatchRead.wire();
  std::string one = batch_of(1, 0, kChunk).SerializeAsString();
  for (int i = 1; i <= reads; ++i) {
    h.request_id = static_cast<uint64_t>(i);
    ASSERT_TRUE(peer.send_frame(h, one));
    if (i % 2 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(3));
  }
  std::this_thread::sleep_for(settle);
}

class StorageServiceTest : public ::testing::Test {
 protected:
  void start(size_t servers, uint64_t capacity = 0, uint32_t forward_timeout_ms = 3000) {
    for (size_t i = 0; i < servers; ++i)
      nodes_.push_back(std::make_unique<Node>(io_, "s" + std::to_string(i + 1),
                                              std::vector<mgmt::TargetId>{target_of(i)}, capacity, 0, 0,
                                              std::chrono::hours(1), nullptr, 65536, forward_timeout_ms));
  }
  // One server per entry, with that target capacity (0: the filesystem's).
  void start_with_capacities(std::vector<uint64_t> capacities) {
    for (size_t i = 0; i < capacities.size(); ++i)
      nodes_.push_back(std::make_unique<Node>(io_, "s" + std::to_string(i + 1),
                                              std::vector<mgmt::TargetId>{target_of(i)}, capacities[i]));
  }
  static mgmt::TargetId target_of(size_t node) { return 101 + 100 * node; }
  // The version of `id` staged but not committed on node n (0: none).
  uint64_t pending_on(size_t n, ChunkId id) {
    auto info = nodes_[n]->engine(target_of(n)).stat(id);
    return info ? info->pending_version : 0;
  }
  // The read answer of every node for `id`: (code, version).
  std::vector<std::pair<uint32_t, uint64_t>> reads_of(ChunkId id, mgmt::ChainVersion cv) {
    std::vector<std::pair<uint32_t, uint64_t>> out;
    for (size_t n = 0; n < nodes_.size(); ++n) {
      auto r = client_.read(nodes_[n]->ep(), 1, cv, id, 0, kChunk);
      EXPECT_TRUE(r.has_value()) << r.error();
      out.emplace_back(r ? r->result.code() : 0xffffffffu, r ? r->result.version() : 0);
    }
    return out;
  }
  // Chain 1 over the given nodes (all serving unless listed in `syncing`),
  // sent to the nodes in order (`last_first`: the last node first).
  void route(std::vector<size_t> order, mgmt::ChainVersion cv, std::vector<size_t> syncing = {},
             bool last_first = false) {
    ChainSpec chain{1, cv, {}};
    for (size_t n : order) chain.entries.push_back({target_of(n), TargetState::kServing});
    for (size_t n : syncing) chain.entries.push_back({target_of(n), TargetState::kSyncing});
    std::vector<rpc::Endpoint> eps;
    std::vector<std::pair<mgmt::TargetId, std::string>> targets;
    for (size_t i = 0; i < nodes_.size(); ++i) {
      eps.push_back(nodes_[i]->ep());
      targets.push_back({target_of(i), nodes_[i]->address()});
    }
    if (last_first) std::reverse(eps.begin(), eps.end());
    auto r = client_.set_routing(eps, targets, {chain}, ++routing_version_);
    ASSERT_TRUE(r.has_value()) << r.error();
  }
  Result<proto::storage::WriteReply> write(size_t node, mgmt::ChainVersion cv, ChunkId id, uint32_t off,
                                           std::span<const std::byte> data, uint64_t client = 0, uint64_t seq = 0) {
    return client_.write(nodes_[node]->ep(), 1, cv, id, off, data, client, seq, kChunk);
  }
  // Whether node n serves chunk `id` (chain 1 at version 1) with any bytes.
  bool holds(size_t n, ChunkId id) { return read(n, 1, id).result.length() > 0; }
  // Writes `data` as chunk `id` through node 0 of the chain {0, 1, 2} with
  // the tail's reply lost: the tail commits, the middle and the head abort,
  // and the head's reconcile then removes the chunk from every member (waited
  // for, up to 5 s). False when fault injection is compiled out.
  bool commit_at_the_tail_only_then_reconcile(ChunkId id, std::span<const std::byte> data, uint64_t client,
                                              uint64_t seq) {
    {
      fault::Scope lost("storage.forward.drop_reply", {.hits_max = 1});  // the tail's reply back
      auto w = write(0, 1, id, 0, data, client, seq);
      if (lost.triggered() == 0) return false;
      EXPECT_FALSE(w.has_value());
    }
    for (int i = 0; i < 100 && (holds(0, id) || holds(1, id) || holds(2, id)); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    for (size_t n = 0; n < 3; ++n) EXPECT_FALSE(holds(n, id)) << "node " << n << " kept the chunk the head never had";
    return true;
  }
  // Writes `data` as the whole chunks {1, first}, {1, first + 1}, ... (up to
  // index 63) through node 0 at chain version 1 until one is refused: the
  // index of the last chunk tried, and its reply (the refusal, if any).
  std::pair<uint64_t, Result<proto::storage::WriteReply>> write_until_refused(uint64_t first,
                                                                              const std::vector<std::byte>& data) {
    Result<proto::storage::WriteReply> w;
    uint64_t i = first;
    for (; i < 64; ++i) {
      w = write(0, 1, ChunkId{1, i}, 0, data);
      if (!w) break;
    }
    return {i, std::move(w)};
  }
  // A Forward (as from node 0) of an update of `kind` to chunk `id`, staging
  // `version` at node 1's target, in chain 1 at version 1.
  static proto::storage::ForwardRequest forward_to_node1(ChunkId id, proto::storage::UpdateKind kind,
                                                         uint64_t version) {
    proto::storage::ForwardRequest req;
    req.set_chain_id(1);
    req.set_chain_version(1);
    req.set_target_id(target_of(1));
    req.mutable_chunk()->set_inode(id.inode);
    req.mutable_chunk()->set_index(id.index);
    req.set_kind(kind);
    req.set_version(version);
    return req;
  }
  // Sends `req` (as from forward_to_node1) to node 1 as an UPDATE_REPLACE of
  // `data`, the content its sender staged.
  Result<proto::storage::ForwardReply> replace_at_node1(proto::storage::ForwardRequest req,
                                                        const std::vector<std::byte>& data) {
    req.set_kind(proto::storage::UPDATE_REPLACE);
    req.set_length(static_cast<uint32_t>(data.size()));
    req.set_data_crc32c(crc32c(data));
    req.set_expect_chunk_length(static_cast<uint32_t>(data.size()));
    req.set_expect_chunk_crc32c(crc32c(data));
    rpc::CallOptions o;
    o.payload.push_back(data);
    return client_.call<proto::storage::ForwardReply>(nodes_[1]->ep(), methods::kForward, req, std::move(o));
  }
  // Fails node 1's engine for good: a write of `u` to `id` there meets the
  // fault `point` once (skips the test where fault injection is compiled out).
  void fail_second_engine(const std::string& point, ChunkId id, const Update& u) {
    fault::Scope fail(point, {.hits_max = 1});
    auto w = nodes_[1]->engine(target_of(1)).write(id, u);
    if (fail.triggered() == 0) GTEST_SKIP() << "fault injection compiled out";
    ASSERT_FALSE(w.has_value());
  }
  // The target of node 1, in chain 1 after node 0, whose engine failed for
  // good: out of service (`why` in the reason), a read there is refused
  // (retryable kUnavailable), a write through the chain too, and nothing is
  // changed: node 0 still serves `data` of `id`.
  void expect_second_replica_out_of_service(std::string_view why, ChunkId id, const std::vector<std::byte>& data,
                                            uint64_t seed) {
    StorageTarget& t = *nodes_[1]->service().target(target_of(1));
    ASSERT_TRUE(t.failed());
    auto reason = t.out_of_service();
    ASSERT_TRUE(reason.has_value());
    EXPECT_NE(reason->message().find(why), std::string::npos) << *reason;
    auto r = client_.read(nodes_[1]->ep(), 1, 1, id, 0, kChunk);
    ASSERT_TRUE(r.has_value()) << r.error();
    EXPECT_EQ(r->result.code(), static_cast<uint32_t>(Code::kUnavailable)) << r->result.message();
    EXPECT_NE(r->result.message().find("out of service"), std::string::npos) << r->result.message();
    EXPECT_EQ(read(0, 1, id).data, data) << "the other replica serves the read";
    auto w = write(0, 1, id, 0, pattern(30000, seed));
    ASSERT_FALSE(w.has_value());
    EXPECT_EQ(w.error().code(), Code::kUnavailable) << w.error();
    EXPECT_TRUE(w.error().retryable());
    EXPECT_EQ(read(0, 1, id).data, data) << "the failed forward was aborted on the head";
  }

  // Flips one byte of node n's committed copy of `id` at `offset`, on the disk.
  void corrupt(size_t n, ChunkId id, uint64_t offset) {
    ASSERT_TRUE(testing::flip_bits(testing::committed_byte(nodes_[n]->engine(target_of(n)), id, offset), 0x40));
  }
  // One scrub pass of node n's target, in this thread: what it found corrupt.
  std::vector<ChunkId> scrub(size_t n) {
    Scrubber* s = nodes_[n]->service().scrubber(target_of(n));
    EXPECT_NE(s, nullptr);
    return s ? s->run_pass().corrupt : std::vector<ChunkId>{};
  }
  static uint64_t repairs(size_t n, const std::string& result) {
    return metrics::Registry::global()
        .counter("weft_storage_chunk_repairs_total", "",
                 {{"target", std::to_string(target_of(n))}, {"result", result}})
        .value();
  }
  // Waits (bounded) until node n has no repair queued or running.
  bool wait_repairs_done(size_t n) {
    for (int i = 0; i < 1000 && nodes_[n]->service().repairs_queued() > 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return nodes_[n]->service().repairs_queued() == 0;
  }

  // Starts `servers` servers, routes chain 1 over the nodes `order` at
  // version 1 and writes `data` as chunk `id` through the head (node 0).
  void start_with_chunk(size_t servers, std::vector<size_t> order, ChunkId id, const std::vector<std::byte>& data) {
    start(servers);
    route(std::move(order), 1);
    ASSERT_TRUE(write(0, 1, id, 0, data).has_value());
  }

  testing::ReadOut read(size_t node, mgmt::ChainVersion cv, ChunkId id) {
    auto r = client_.read(nodes_[node]->ep(), 1, cv, id, 0, kChunk);
    EXPECT_TRUE(r.has_value()) << r.error();
    return r ? *r : testing::ReadOut{};
  }
  // Chain 1's chunks (recorded as chain 1's) of n's target.
  Result<proto::storage::ListChunksReply> list_chain1(size_t n) {
    proto::storage::ListChunksRequest req;
    req.set_target_id(target_of(n));
    req.set_chain_id(1);
    req.set_count_max(65536);
    auto l = client_.call<proto::storage::ListChunksReply>(nodes_[n]->ep(), methods::kListChunks, req);
    if (l) {
      auto* chunks = l->mutable_chunks();
      chunks->erase(std::remove_if(chunks->begin(), chunks->end(), [](auto& c) { return c.chain_id() != 1; }),
                    chunks->end());
    }
    return l;
  }
  // Every chunk of chain 1 of every listed node: same list, same versions and bytes.
  void expect_identical(std::vector<size_t> which, mgmt::ChainVersion cv) {
    auto first = list_chain1(which[0]);
    ASSERT_TRUE(first.has_value()) << first.error();
    for (size_t n : which) {
      auto l = list_chain1(n);
      ASSERT_TRUE(l.has_value());
      ASSERT_EQ(l->chunks_size(), first->chunks_size()) << "node " << n;
      for (int i = 0; i < l->chunks_size(); ++i) {
        EXPECT_EQ(l->chunks(i).chunk().index(), first->chunks(i).chunk().index());
        EXPECT_EQ(l->chunks(i).version(), first->chunks(i).version()) << "node " << n << " chunk " << i;
        EXPECT_EQ(l->chunks(i).chunk_crc32c(), first->chunks(i).chunk_crc32c()) << "node " << n << " chunk " << i;
      }
    }
    (void)cv;
  }

  // Waits (bounded) until node n's target reports chain 1 synced at `cv`.
  bool wait_synced(size_t n, mgmt::ChainVersion cv) {
    for (int i = 0; i < 500; ++i) {
      auto s = client_.status(nodes_[n]->ep(), target_of(n));
      if (!s) return false;
      for (auto& c : s->targets(0).synced())
        if (c.chain_id() == 1 && c.synced_chain_version() == cv) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

  rpc::IoPool io_{2};
  testing::StorageTestClient client_{io_, kToken};
  std::vector<std::unique_ptr<Node>> nodes_;
  uint64_t routing_version_ = 0;
};

// The connections to successors are made with the server's own options: its
// token and [server] tcp_* liveness, the forward timeout as call timeout.
// Entries are dropped by chunk; the bound and the oldest-first order hold after it.
TEST(DedupTable, ForgetsTheEntriesOfAChunk) {
  DedupTable t(3);
  t.record(1, 1, {ChunkId{5, 0}, 1, {1, 10, 0}});
  t.record(1, 2, {ChunkId{5, 1}, 1, {1, 10, 0}});
  t.record(2, 1, {ChunkId{5, 0}, 1, {2, 10, 0}});
  EXPECT_EQ(t.forget_chunk(ChunkId{5, 0}), 2u);
  EXPECT_FALSE(t.find(1, 1).has_value());
  EXPECT_FALSE(t.find(2, 1).has_value());
  EXPECT_TRUE(t.find(1, 2).has_value());
  EXPECT_EQ(t.forget_chunk(ChunkId{5, 0}), 0u);
  t.record(1, 1, {ChunkId{5, 0}, 1, {3, 10, 0}});  // recorded again: the newest now
  t.record(3, 1, {ChunkId{5, 2}, 1, {1, 10, 0}});
  t.record(3, 2, {ChunkId{5, 3}, 1, {1, 10, 0}});  // evicts the oldest, (1, 2)
  EXPECT_EQ(t.size(), 3u);
  EXPECT_FALSE(t.find(1, 2).has_value());
  EXPECT_EQ(t.find(1, 1)->outcome.version, 3u);
  t.record(3, 1, {ChunkId{5, 0}, 1, {1, 10, 0}});  // same key, other chunk
  EXPECT_EQ(t.forget_chunk(ChunkId{5, 2}), 0u);
  EXPECT_EQ(t.forget_chunk(ChunkId{5, 0}), 2u);
  EXPECT_EQ(t.size(), 1u);
}

// The keys a replacement carries, when bounded, are the most recently
// recorded, not the highest sequences: those of different clients are not
// comparable (a young client's are low, and its retry is as likely).
TEST(DedupTable, BoundedKeysAreTheMostRecentlyRecorded) {
  DedupTable t;
  const ChunkId c{5, 0};
  t.record(4, 900, {c, 1, {1, 10, 0}});
  t.record(5, 3, {c, 1, {2, 10, 0}});
  t.record(4, 901, {ChunkId{5, 1}, 1, {1, 10, 0}});
  EXPECT_EQ(t.keys_of(c, 1), (std::vector<DedupTable::Key>{{5, 3}}));
  t.record(4, 900, {c, 1, {3, 10, 0}});  // recorded again: keeps its age
  EXPECT_EQ(t.keys_of(c, 1), (std::vector<DedupTable::Key>{{5, 3}}));
  t.record(6, 1, {c, 1, {4, 10, 0}});
  EXPECT_EQ(t.keys_of(c, 2), (std::vector<DedupTable::Key>{{6, 1}, {5, 3}}));
}

// Records client 1's updates 1 and 2 (versions 1, 2) of chunk {5, 0}, and
// client 2's update 7 of chunk {5, 1}; returns {5, 0}.
ChunkId record_two_updates_and_another_chunks(DedupTable& t) {
  const ChunkId c{5, 0};
  t.record(1, 1, {c, 1, {1, 10, 0}});
  t.record(1, 2, {c, 1, {2, 10, 0}});
  t.record(2, 7, {ChunkId{5, 1}, 1, {1, 10, 0}});
  return c;
}

// A chunk replaced by content holding some of the updates recorded for it:
// those stay (or are recorded, as the replacement), the others go; the keys
// sent with it are bounded, the most recently recorded first.
TEST(DedupTable, KeepsWhatTheReplacingContentHolds) {
  DedupTable t;
  const ChunkId c = record_two_updates_and_another_chunks(t);
  EXPECT_EQ(t.keys_of(c, 10), (std::vector<DedupTable::Key>{{1, 1}, {1, 2}}));
  EXPECT_EQ(t.keys_of(c, 1), (std::vector<DedupTable::Key>{{1, 2}}));
  EXPECT_EQ(t.replaced(c, {{1, 2}, {3, 4}}, 6, {9, 20, 0}), 1u);
  EXPECT_FALSE(t.find(1, 1).has_value()) << "not in the content: its retry is applied again";
  EXPECT_EQ(t.find(1, 2)->outcome.version, 2u) << "kept as it was";
  ASSERT_TRUE(t.find(3, 4).has_value()) << "the sender's record, recorded here";
  EXPECT_EQ(t.find(3, 4)->kind, 6);
  EXPECT_EQ(t.find(3, 4)->outcome.version, 9u);
  EXPECT_TRUE(t.find(2, 7).has_value()) << "another chunk's";
}

// A chunk removed by a sender that recorded some of the updates recorded
// here: those stay as they were, the others go, and nothing is recorded for
// the sender's keys missing here.
TEST(DedupTable, KeepsWhatTheRemovingSenderRecordedToo) {
  DedupTable t;
  const ChunkId c = record_two_updates_and_another_chunks(t);
  EXPECT_EQ(t.forget_chunk_except(c, {{1, 2}, {3, 4}}), 1u);
  EXPECT_FALSE(t.find(1, 1).has_value()) << "the sender never applied it: its retry is applied afresh";
  ASSERT_TRUE(t.find(1, 2).has_value()) << "applied there too: its retry is answered from the record";
  EXPECT_EQ(t.find(1, 2)->outcome.version, 2u);
  EXPECT_FALSE(t.find(3, 4).has_value()) << "nothing recorded for a key missing here";
  EXPECT_TRUE(t.find(2, 7).has_value()) << "another chunk's";
  EXPECT_EQ(t.forget_chunk_except(c, {}), 1u);
  EXPECT_EQ(t.size(), 1u);
}

// Each client's floor is the highest sequence evicted; entries dropped with
// their chunk raise none; the floors of the clients least recently raised go
// first past clients_max.
TEST(DedupTable, RemembersHowFarItEvictedEachClient) {
  DedupTable t(2, 2);
  const DedupEntry e{ChunkId{5, 0}, 1, {1, 10, 0}};
  t.record(1, 7, e);
  t.record(1, 3, e);
  EXPECT_EQ(t.forget_chunk(ChunkId{5, 0}), 2u);
  EXPECT_FALSE(t.forgotten(1, 3)) << "dropped with its chunk: a retry is applied again";
  t.record(1, 7, e);
  t.record(1, 3, e);
  t.record(2, 1, e);  // evicts (1, 7)
  EXPECT_TRUE(t.forgotten(1, 7));
  EXPECT_TRUE(t.forgotten(1, 4)) << "below the floor, not in the table: cannot be told";
  EXPECT_FALSE(t.forgotten(1, 8));
  EXPECT_FALSE(t.forgotten(2, 1));
  EXPECT_TRUE(t.find(1, 3).has_value());
  t.record(2, 2, e);  // evicts (1, 3): client 1's floor stays 7
  EXPECT_TRUE(t.forgotten(1, 7));
  EXPECT_FALSE(t.forgotten(1, 8));
  t.record(3, 1, e);  // evicts (2, 1): client 2's floor, the newest
  t.record(3, 2, e);  // evicts (2, 2)
  t.record(4, 1, e);  // evicts (3, 1): three floors, client 1's (least recently raised) goes
  EXPECT_FALSE(t.forgotten(1, 7));
  EXPECT_TRUE(t.forgotten(2, 2));
  EXPECT_TRUE(t.forgotten(3, 1));
  EXPECT_FALSE(t.forgotten(0, 1)) << "client 0: no dedup";
}

TEST(StorageServer, ChainConnectionsTakeTheServersTcpLiveness) {
  rpc::IoPool io{1};
  testing::TempDir dir;
  StorageConfig sc;
  sc.targets.push_back({101, dir.path() + "/t", 0, 1u << 20});
  sc.forward_timeout_ms = 4000;
  rpc::ServiceConfig server{.cluster_token = kToken, .name = "s1"};
  server.tcp = {.keepalive_idle_s = 9, .keepalive_interval_s = 2, .keepalive_count = 7, .user_timeout_ms = 45000};
  auto s = open_storage_service(io, sc, server);
  ASSERT_TRUE(s.has_value()) << s.error();
  const rpc::ClientOptions& o = (*s)->chain_client_options();
  EXPECT_EQ(o.tcp, server.tcp);
  EXPECT_EQ(o.cluster_token, kToken);
  EXPECT_EQ(o.call_timeout_ms, 4000u);
  (*s)->stop();
}

// Forwards ride the server's user timeout: a forward timeout at or above it is refused.
TEST(StorageServer, ForwardTimeoutMustBeBelowTheUserTimeout) {
  auto parse = [](const std::string& server_keys, const std::string& storage_keys) -> Result<StorageConfig> {
    WEFT_TRY(Config cfg, Config::parse("[server]\ncluster_token = \"t\"\n" + server_keys + "[storage]\n" +
                                           storage_keys + "[[targets]]\nid = 1\npath = \"/nonexistent/t\"\n",
                                       "s.toml"));
    WEFT_TRY(rpc::ServiceConfig server, rpc::ServiceConfig::from(cfg, "storage"));
    return StorageConfig::from(cfg, server);
  };
  EXPECT_TRUE(parse("", "").has_value());
  const std::string short_user_timeout = "write_stall_timeout_ms = 3000\ntcp_user_timeout_ms = 5000\n";
  auto r = parse(short_user_timeout, "");
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message().find("s.toml: key 'storage.forward_timeout_ms' (10000) must be below "
                                     "'server.tcp_user_timeout_ms' (5000)"),
            std::string::npos)
      << r.error();
  EXPECT_TRUE(parse(short_user_timeout, "forward_timeout_ms = 4999\n").has_value());
  EXPECT_FALSE(parse("", "forward_timeout_ms = 60000\n").has_value());
  EXPECT_TRUE(parse("tcp_user_timeout_ms = 0\nwrite_stall_timeout_ms = 3600000\n", "forward_timeout_ms = 600000\n")
                  .has_value());
}

// A storage server's config of one target with these [storage] keys.
Result<StorageConfig> parse_storage_keys(const std::string& storage_keys) {
  WEFT_TRY(Config cfg, Config::parse("[server]\ncluster_token = \"t\"\n[storage]\n" + storage_keys +
                                         "[[targets]]\nid = 1\npath = \"/nonexistent/t\"\n",
                                     "s.toml"));
  WEFT_TRY(rpc::ServiceConfig server, rpc::ServiceConfig::from(cfg, "storage"));
  return StorageConfig::from(cfg, server);
}

// The orphan sweep waits an hour unless configured, at least 10 s, -1: off.
TEST(StorageServer, OrphanGraceIsAnHourByDefaultAtLeastTenSecondsOrOff) {
  auto parse = parse_storage_keys;
  auto dflt = parse("");
  ASSERT_TRUE(dflt.has_value()) << dflt.error();
  EXPECT_EQ(dflt->orphan_grace, std::chrono::seconds(3600));
  EXPECT_FALSE(parse("orphan_grace_s = -1\n")->orphan_grace.has_value());
  EXPECT_EQ(parse("orphan_grace_s = 10\n")->orphan_grace, std::chrono::seconds(10));
  auto short_grace = parse("orphan_grace_s = 3\n");
  ASSERT_FALSE(short_grace.has_value());
  EXPECT_NE(short_grace.error().message().find("at least 10"), std::string::npos) << short_grace.error();
  EXPECT_EQ(dflt->orphan_sweep_inodes_per_s, 10000u);
  EXPECT_EQ(parse("orphan_sweep_inodes_per_s = 0\n")->orphan_sweep_inodes_per_s, 0u);
  EXPECT_FALSE(parse("orphan_sweep_inodes_per_s = -5\n").has_value());
}

// Scrubbing: 64 MiB/s a target, a pass a day, unless configured; 0: off.
TEST(StorageServer, ScrubsAt64MiBPerSecondDailyByDefault) {
  auto parse = parse_storage_keys;
  auto dflt = parse("");
  ASSERT_TRUE(dflt.has_value()) << dflt.error();
  EXPECT_EQ(dflt->scrub_bytes_per_sec, uint64_t{64} << 20);
  EXPECT_EQ(dflt->scrub_interval, std::chrono::hours(24));
  auto set = parse("scrub_mib_per_s = 8\nscrub_interval_s = 3600\n");
  ASSERT_TRUE(set.has_value()) << set.error();
  EXPECT_EQ(set->scrub_bytes_per_sec, uint64_t{8} << 20);
  EXPECT_EQ(set->scrub_interval, std::chrono::hours(1));
  EXPECT_EQ(parse("scrub_mib_per_s = 0\n")->scrub_bytes_per_sec, 0u);
  EXPECT_FALSE(parse("scrub_mib_per_s = -1\n").has_value());
  EXPECT_FALSE(parse("scrub_interval_s = 0\n").has_value());
}

// Replica checks: hourly unless configured; 0: off.
TEST(StorageServer, ChecksReplicasHourlyByDefault) {
  auto parse = parse_storage_keys;
  auto dflt = parse("");
  ASSERT_TRUE(dflt.has_value()) << dflt.error();
  EXPECT_EQ(dflt->replica_check_interval, std::chrono::hours(1));
  EXPECT_EQ(parse("replica_check_interval_s = 60\n")->replica_check_interval, std::chrono::minutes(1));
  EXPECT_EQ(parse("replica_check_interval_s = 0\n")->replica_check_interval.count(), 0);
  EXPECT_FALSE(parse("replica_check_interval_s = -1\n").has_value());
  EXPECT_EQ(dflt->replica_check_chunks_per_s, 100000u);
  EXPECT_EQ(parse("replica_check_chunks_per_s = 0\n")->replica_check_chunks_per_s, 0u);
  EXPECT_EQ(parse("replica_check_chunks_per_s = 500\n")->replica_check_chunks_per_s, 500u);
  EXPECT_FALSE(parse("replica_check_chunks_per_s = -1\n").has_value());
}

// A resync's window of differing chunks: 65536 unless configured, at least 1.
TEST(StorageServer, ResyncsAWindowOf65536ChunksByDefault) {
  auto parse = parse_storage_keys;
  EXPECT_EQ(parse("")->resync_window, 65536u);
  EXPECT_EQ(parse("resync_window = 1000\n")->resync_window, 1000u);
  EXPECT_FALSE(parse("resync_window = 0\n").has_value());
}

// A started server checks its chains' replicas every interval
// (weft_storage_replica_check_passes_total), and stop() ends that at once.
TEST(StorageServer, ChecksReplicasEveryIntervalUntilStopped) {
  rpc::IoPool io{1};
  testing::TempDir dir;
  metrics::Registry registry;
  StorageConfig sc;
  sc.targets.push_back({101, dir.path() + "/t", 0, 1u << 20});
  sc.replica_check_interval = std::chrono::milliseconds(20);
  auto s = open_storage_service(io, sc, rpc::ServiceConfig{.cluster_token = kToken, .name = "s1"}, registry);
  ASSERT_TRUE(s.has_value()) << s.error();
  auto& passes = registry.counter("weft_storage_replica_check_passes_total", "", {{"server", "s1"}});
  for (int i = 0; i < 500 && passes.value() < 3; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_GE(passes.value(), 3u) << "no periodic replica checks";
  auto start = std::chrono::steady_clock::now();
  (*s)->stop();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  const uint64_t stopped_at = passes.value();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(passes.value(), stopped_at) << "checks went on after stop()";
}

// The dedup table's size per target: 65536 entries unless configured.
TEST(StorageServer, RemembersClientUpdatesPerTargetAsConfigured) {
  auto parse = parse_storage_keys;
  EXPECT_EQ(parse("")->dedup_entries_max, 65536u);
  EXPECT_EQ(parse("dedup_entries = 1000000\n")->dedup_entries_max, 1000000u);
  EXPECT_FALSE(parse("dedup_entries = 0\n").has_value());
}

// A started server scrubs every target in the background: a chunk that rots
// on the disk is found and counted (weft_storage_scrub_corrupt_chunks_total,
// which DEPLOY.md alerts on) and kept (reads answer kCorruption, not a hole);
// stop() ends the scrubbing.
TEST(StorageServer, ScrubsItsTargetsAndCountsACorruptChunk) {
  rpc::IoPool io{1};
  testing::TempDir dir;
  metrics::Registry registry;
  StorageConfig sc;
  sc.targets.push_back({101, dir.path() + "/t", 0, 1u << 20});
  sc.scrub_interval = std::chrono::milliseconds(20);
  auto s = open_storage_service(io, sc, rpc::ServiceConfig{.cluster_token = kToken, .name = "s1"}, registry);
  ASSERT_TRUE(s.has_value()) << s.error();
  StorageService& service = **s;
  ChunkEngine& e = service.target(101)->engine();
  const ChunkId id{3, 0};
  ASSERT_TRUE(e.write(id, Update::write(0, pattern(64 * 1024, 3))).has_value());
  auto& passes = registry.counter("weft_storage_scrub_passes_total", "", {{"target", "101"}});
  auto& corrupt = registry.counter("weft_storage_scrub_corrupt_chunks_total", "", {{"target", "101"}});
  auto wait_for = [](auto done) {
    for (int i = 0; i < 1000 && !done(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return done();
  };
  uint64_t start = passes.value();
  ASSERT_TRUE(wait_for([&] { return passes.value() >= start + 2; })) << "no scrub passes";
  EXPECT_EQ(corrupt.value(), 0u);

  ASSERT_TRUE(testing::flip_bits(testing::committed_byte(e, id, 1000), 0x10));
  ASSERT_TRUE(wait_for([&] { return corrupt.value() >= 1; })) << "the corrupt chunk was not found";
  ASSERT_NE(service.scrubber(101), nullptr);
  EXPECT_TRUE(wait_for([&] { return service.scrubber(101)->corrupt_chunks() == std::vector<ChunkId>{id}; }));
  EXPECT_TRUE(e.committed_meta(id).has_value()) << "the chunk is kept";
  EXPECT_EQ(e.read(id, 0, 4096).error().code(), Code::kCorruption);

  service.stop();
  uint64_t stopped = passes.value();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(passes.value(), stopped) << "scrubbing goes on after stop()";
}

// A resync pass that fails (e.g. at a chunk the source cannot read: it fails
// every pass until repaired) is retried after a pause that doubles from
// 200 ms up to a minute, not every 200 ms forever.
TEST(ResyncBackoff, DoublesFromTwoHundredMillisecondsUpToAMinute) {
  using std::chrono::milliseconds;
  EXPECT_EQ(resync_pass_backoff(1), milliseconds(200));
  EXPECT_EQ(resync_pass_backoff(2), milliseconds(400));
  EXPECT_EQ(resync_pass_backoff(3), milliseconds(800));
  EXPECT_EQ(resync_pass_backoff(6), milliseconds(6400));
  EXPECT_EQ(resync_pass_backoff(9), milliseconds(51200));
  EXPECT_EQ(resync_pass_backoff(10), kResyncPassBackoffMax);
  EXPECT_EQ(kResyncPassBackoffMax, milliseconds(60000));
  EXPECT_EQ(resync_pass_backoff(1000), kResyncPassBackoffMax) << "no overflow";
  for (int n = 1; n < 40; ++n) EXPECT_LE(resync_pass_backoff(n), resync_pass_backoff(n + 1));
}

TEST_F(StorageServiceTest, ChainOfOneWritesReadsTruncatesRemoves) {
  start(1);
  route({0}, 1);
  ChunkId id{5, 0};
  auto data = pattern(100000, 1);
  auto w = write(0, 1, id, 0, data);
  ASSERT_TRUE(w.has_value()) << w.error();
  EXPECT_EQ(w->version(), 1u);
  auto w2 = write(0, 1, id, 4096, std::span(data).first(10));
  ASSERT_TRUE(w2.has_value()) << w2.error();
  EXPECT_EQ(w2->version(), 2u);
  std::memcpy(data.data() + 4096, data.data(), 10);
  auto r = read(0, 1, id);
  EXPECT_EQ(r.result.code(), 0u) << r.result.message();
  EXPECT_EQ(r.result.version(), 2u);
  EXPECT_EQ(r.data, data);
  EXPECT_EQ(r.result.crc32c(), crc32c(data));

  proto::storage::TruncateRequest t;
  t.set_chain_id(1);
  t.set_chain_version(1);
  t.mutable_chunk()->set_inode(5);
  t.set_length(1000);
  auto tr = client_.call<proto::storage::WriteReply>(nodes_[0]->ep(), methods::kTruncate, t);
  ASSERT_TRUE(tr.has_value()) << tr.error();
  EXPECT_EQ(tr->chunk_length(), 1000u);
  EXPECT_EQ(read(0, 1, id).data.size(), 1000u);

  ASSERT_TRUE(client_.remove(nodes_[0]->ep(), 1, 1, id).has_value());
  EXPECT_EQ(read(0, 1, id).result.code(), static_cast<uint32_t>(Code::kNotFound));
}

// RemoveRange over a chain of three: every member loses the inode's chunks
// from the index on (however far apart), keeps those before it and other
// inodes' chunks; pages of count_max go on from next_index; a retry, or a
// range where nothing exists, removes nothing and sends nothing down the
// chain; no member records a retry entry for it.
TEST_F(StorageServiceTest, RemoveRangeRemovesAnInodesChunksFromAnIndexOnEveryMember) {
  start(3);
  route({0, 1, 2}, 1);
  const std::vector<uint64_t> indexes{0, 1, 2, 5, 9, uint64_t{1} << 40, UINT64_MAX};
  for (uint64_t i : indexes) ASSERT_TRUE(write(0, 1, ChunkId{7, i}, 0, pattern(5000, i)).has_value());
  for (ChunkId other : {ChunkId{6, 30}, ChunkId{8, 0}, ChunkId{8, 3}})
    ASSERT_TRUE(write(0, 1, other, 0, pattern(3000, other.index)).has_value());
  {  // A member's listing of one inode (what the head asks for) ends at the inode.
    proto::storage::ListChunksRequest req;
    req.set_target_id(target_of(1));
    req.set_chain_id(1);
    req.mutable_start()->set_inode(7);
    req.mutable_end()->set_inode(8);
    auto l = client_.call<proto::storage::ListChunksReply>(nodes_[1]->ep(), methods::kListChunks, req);
    ASSERT_TRUE(l.has_value()) << l.error();
    EXPECT_EQ(l->chunks_size(), static_cast<int>(indexes.size()));
    for (const auto& c : l->chunks()) EXPECT_EQ(c.chunk().inode(), 7u);
    EXPECT_FALSE(l->more());
  }

  uint64_t removed = 0;
  uint64_t first = 2;
  int calls = 0;
  for (bool more = true; more && calls < 10; ++calls) {
    auto r = client_.remove_range(nodes_[0]->ep(), 1, 1, 7, first, 2);
    ASSERT_TRUE(r.has_value()) << r.error();
    removed += r->removed();
    more = r->more();
    if (more) {
      EXPECT_GT(r->next_index(), first);
      first = r->next_index();
    }
  }
  EXPECT_EQ(removed, 5u);
  EXPECT_EQ(calls, 3) << "pages of 2: the last call finds fewer than its bound";
  for (size_t n = 0; n < 3; ++n) {
    ChunkEngine& e = nodes_[n]->engine(target_of(n));
    for (uint64_t i : indexes) {
      EXPECT_EQ(e.stat(ChunkId{7, i}).has_value(), i < 2) << "node " << n << " chunk 7:" << i;
    }
    for (ChunkId other : {ChunkId{6, 30}, ChunkId{8, 0}, ChunkId{8, 3}}) {
      EXPECT_TRUE(e.stat(other).has_value()) << "node " << n << " " << other;
    }
    EXPECT_EQ(nodes_[n]->service().target(target_of(n))->dedup().size(), 0u) << "node " << n;
  }
  expect_identical({0, 1, 2}, 1);

  // The forwarded updates nodes 1 and 2 took (a successor's share of every removal).
  auto forwards_applied = [&] {
    uint64_t sum = 0;
    for (size_t n : {1, 2}) sum += nodes_[n]->service().target(target_of(n))->metrics().of(Op::kForward).ops->value();
    return sum;
  };
  const uint64_t forwards = forwards_applied();
  for (auto [ino, from] : {std::pair<uint64_t, uint64_t>{7, 2}, {7, 2}, {99, 0}, {8, 4}}) {
    auto again = client_.remove_range(nodes_[0]->ep(), 1, 1, ino, from);
    ASSERT_TRUE(again.has_value()) << again.error();
    EXPECT_EQ(again->removed(), 0u);
    EXPECT_FALSE(again->more());
  }
  EXPECT_EQ(forwards_applied(), forwards) << "absent chunks cost no forward";
  EXPECT_TRUE(nodes_[0]->engine(target_of(0)).stat(ChunkId{8, 3}).has_value());

  // The same checks as a removal: only the head, only at the chain's version.
  auto not_head = client_.remove_range(nodes_[1]->ep(), 1, 1, 7, 0);
  ASSERT_FALSE(not_head.has_value());
  EXPECT_EQ(not_head.error().code(), Code::kNotChainHead);
  auto stale = client_.remove_range(nodes_[0]->ep(), 1, 2, 7, 0);
  ASSERT_FALSE(stale.has_value());
  EXPECT_EQ(stale.error().code(), Code::kStaleRouting);
  EXPECT_TRUE(nodes_[2]->engine(target_of(2)).stat(ChunkId{7, 0}).has_value());
}

// A chunk of the range whose update is on its way (its lock held at the head,
// not committed there when the range is listed) is waited for and removed on
// every member, as a removal of it would be.
TEST_F(StorageServiceTest, RemoveRangeWaitsForAnUpdateOnItsWayAndRemovesItsChunk) {
  start(2);
  route({0, 1}, 1);
  ASSERT_TRUE(write(0, 1, ChunkId{7, 1}, 0, pattern(4000, 1)).has_value());
  const ChunkId late{7, 50};
  StorageTarget& head = *nodes_[0]->service().target(target_of(0));
  auto in_chain1 = [](Update u) {
    u.chain_id = 1;
    return u;
  };
  // As a write in flight: committed on the tail, the head's lock held.
  auto guard = block_on(io_.at(0).get_executor(), head.locks().lock(late));
  ASSERT_TRUE(nodes_[1]->engine(target_of(1)).write(late, in_chain1(Update::write(0, pattern(4000, 50)))).has_value());
  Result<proto::storage::RemoveRangeReply> r = error(Code::kInternal, "not run");
  std::thread range([&] { r = client_.remove_range(nodes_[0]->ep(), 1, 1, 7, 0); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // it listed and waits for the lock
  ASSERT_TRUE(head.engine().write(late, in_chain1(Update::write(0, pattern(4000, 50)))).has_value());
  guard.release();
  range.join();
  ASSERT_TRUE(r.has_value()) << r.error();
  EXPECT_EQ(r->removed(), 2u);
  for (size_t n = 0; n < 2; ++n) {
    EXPECT_FALSE(nodes_[n]->engine(target_of(n)).stat(late).has_value()) << "node " << n;
    EXPECT_FALSE(nodes_[n]->engine(target_of(n)).stat(ChunkId{7, 1}).has_value()) << "node " << n;
  }
}

// The head's target is in another chain too, whose update of chunk {7, 50}
// holds the lock the range waits for: that chunk is the other chain's, and
// stays (removing it here would leave that chain's replicas different).
TEST_F(StorageServiceTest, RemoveRangeLeavesAChunkOfAnotherChainOnTheSameTarget) {
  start(2);
  route({0, 1}, 1);
  ASSERT_TRUE(write(0, 1, ChunkId{7, 1}, 0, pattern(4000, 1)).has_value());
  const ChunkId theirs{7, 50};
  StorageTarget& head = *nodes_[0]->service().target(target_of(0));
  auto guard = block_on(io_.at(0).get_executor(), head.locks().lock(theirs));
  Result<proto::storage::RemoveRangeReply> r = error(Code::kInternal, "not run");
  std::thread range([&] { r = client_.remove_range(nodes_[0]->ep(), 1, 1, 7, 0); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // it listed and waits for the lock
  const auto theirs_data = pattern(4000, 50);  // outlives the update: an Update does not own its bytes
  Update in_chain2 = Update::write(0, theirs_data);
  in_chain2.chain_id = 2;
  ASSERT_TRUE(head.engine().write(theirs, in_chain2).has_value());
  guard.release();
  range.join();
  ASSERT_TRUE(r.has_value()) << r.error();
  EXPECT_EQ(r->removed(), 1u);
  auto kept = head.engine().stat(theirs);
  ASSERT_TRUE(kept.has_value()) << "chain 1's range removed chain 2's chunk: " << kept.error();
  EXPECT_EQ(kept->chain_id, 2u);
  for (size_t n = 0; n < 2; ++n)
    EXPECT_FALSE(nodes_[n]->engine(target_of(n)).stat(ChunkId{7, 1}).has_value()) << "node " << n;
}

// A chunk a successor committed and the head does not hold (the head aborted
// its stage after a forward the successor had applied failed, and the writer
// never retried) goes with the range too: left on the tail, it would be read
// as the content of a hole once the file grows past it again.
TEST_F(StorageServiceTest, RemoveRangeRemovesChunksOnlyASuccessorHolds) {
  start(3);
  route({0, 1, 2}, 1);
  ASSERT_TRUE(write(0, 1, ChunkId{7, 0}, 0, pattern(4000, 1)).has_value());
  {
    // skip: the tail's and the middle's commits come first, then the head's (which fails).
    fault::Scope fail("storage.chain.commit.fail", {.hits_max = 1, .skip = 2});
    ASSERT_FALSE(write(0, 1, ChunkId{7, 3}, 0, pattern(4000, 3)).has_value());
    ASSERT_EQ(fail.triggered(), 1);
  }
  auto in_chain1 = [](Update u) {
    u.chain_id = 1;
    return u;
  };
  ASSERT_TRUE(nodes_[2]->engine(target_of(2)).write(ChunkId{7, 9}, in_chain1(Update::write(0, pattern(10, 9)))));
  ASSERT_FALSE(nodes_[0]->engine(target_of(0)).stat(ChunkId{7, 3}).has_value()) << "the head aborted its stage";
  ASSERT_TRUE(nodes_[2]->engine(target_of(2)).stat(ChunkId{7, 3}).has_value()) << "the tail committed";

  uint64_t removed = 0;
  uint64_t first = 1;
  for (bool more = true; more;) {
    auto r = client_.remove_range(nodes_[0]->ep(), 1, 1, 7, first, 1);  // pages of one: members' listings bound them
    ASSERT_TRUE(r.has_value()) << r.error();
    removed += r->removed();
    more = r->more();
    first = r->next_index();
  }
  EXPECT_EQ(removed, 2u);
  for (size_t n = 0; n < 3; ++n) {
    ChunkEngine& e = nodes_[n]->engine(target_of(n));
    EXPECT_TRUE(e.stat(ChunkId{7, 0}).has_value()) << "node " << n;
    EXPECT_FALSE(e.stat(ChunkId{7, 3}).has_value()) << "node " << n;
    EXPECT_FALSE(e.stat(ChunkId{7, 9}).has_value()) << "node " << n;
  }
  expect_identical({0, 1, 2}, 1);
}

TEST_F(StorageServiceTest, BatchReadSpansTargetsOfOneServer) {
  nodes_.push_back(std::make_unique<Node>(io_, "multi", std::vector<mgmt::TargetId>{1, 2}));
  auto ep = nodes_[0]->ep();
  ASSERT_TRUE(client_
                  .set_routing({ep}, {{1, nodes_[0]->address()}, {2, nodes_[0]->address()}},
                               {ChainSpec{1, 1, {{1, TargetState::kServing}}}, ChainSpec{2, 1, {{2, TargetState::kServing}}}},
                               1)
                  .has_value());
  auto a = pattern(5000, 1), b = pattern(7000, 2);
  ASSERT_TRUE(client_.write(ep, 1, 1, ChunkId{1, 0}, 0, a).has_value());
  ASSERT_TRUE(client_.write(ep, 2, 1, ChunkId{1, 1}, 0, b).has_value());
  proto::storage::BatchReadRequest req;
  auto add = [&](uint32_t chain, uint64_t index, uint32_t off, uint32_t len) {
    auto* r = req.add_ranges();
    r->set_chain_id(chain);
    r->set_chain_version(1);
    r->mutable_chunk()->set_inode(1);
    r->mutable_chunk()->set_index(index);
    r->set_offset(off);
    r->set_length(len);
  };
  add(1, 0, 100, 1000);
  add(2, 1, 0, 7000);
  add(2, 9, 0, 10);  // absent
  add(1, 0, 4000, 4000);  // clamped to 1000
  rpc::RawResponse raw;
  auto reply = client_.call<proto::storage::BatchReadReply>(ep, methods::kBatchRead, req, {}, &raw);
  ASSERT_TRUE(reply.has_value()) << reply.error();
  ASSERT_EQ(reply->results_size(), 4);
  EXPECT_EQ(reply->results(2).code(), static_cast<uint32_t>(Code::kNotFound));
  EXPECT_EQ(reply->results(3).length(), 1000u);
  std::vector<std::byte> expect(a.begin() + 100, a.begin() + 1100);
  expect.insert(expect.end(), b.begin(), b.end());
  expect.insert(expect.end(), a.begin() + 4000, a.end());
  ASSERT_EQ(raw.payload_len, expect.size());
  EXPECT_EQ(0, std::memcmp(raw.payload.data(), expect.data(), expect.size()));
}

// Reads hold their buffers until their replies are written: a peer that sends
// reads and does not read the replies holds at most a quarter of
// read_bytes_held_max on the server (others are still served meanwhile), the
// reads past it are answered kOverloaded (retryable), a batch larger than that
// kTooBig (counted as the engine's block-aligned buffers), and all of it is
// given back once the replies are written or the peer goes.
TEST_F(StorageServiceTest, ReadsHoldAtMostTheirBoundUntilTheirRepliesAreWritten) {
  constexpr uint64_t kHeldMax = 4 << 20, kPerConnection = kHeldMax / 4;
  nodes_.push_back(std::make_unique<Node>(io_, "held", std::vector<mgmt::TargetId>{1}, 0, kHeldMax));
  Node& node = *nodes_[0];
  ASSERT_TRUE(client_.set_routing({node.ep()}, {{1, node.address()}}, {ChainSpec{1, 1, {{1, TargetState::kServing}}}}, 1)
                  .has_value());
  auto data = pattern(kChunk, 3);
  ASSERT_TRUE(client_.write(node.ep(), 1, 1, ChunkId{1, 0}, 0, data, 0, 0, kChunk).has_value());
  auto too_big = [&](const proto::storage::BatchReadRequest& req) {
    auto r = client_.call<proto::storage::BatchReadReply>(node.ep(), methods::kBatchRead, req);
    return !r.has_value() && r.error().code() == Code::kTooBig;
  };
  EXPECT_TRUE(too_big(batch_of(2, 0, 1 << 20)));
  // 2 bytes across a block boundary take two blocks: 140 of them 1.1 MiB, not 280 bytes.
  EXPECT_TRUE(too_big(batch_of(140, 4095, 2)));
  EXPECT_FALSE(too_big(batch_of(100, 4095, 2)));

  // A raw peer that sends 100 MiB of reads and does not read the replies yet.
  const int kReads = 400;
  auto peer = stalled_peer(node);
  ASSERT_NO_FATAL_FAILURE(send_reads(*peer, kReads));
  EXPECT_LE(node.service().read_bytes_held(), kPerConnection);
  EXPECT_GT(node.service().read_bytes_held(), 0u) << "replies the peer does not read keep their reads";
  EXPECT_EQ(read(0, 1, ChunkId{1, 0}).data, data) << "another client is served meanwhile";
  int ok = 0, overloaded = 0;
  rpc::FrameHeader rh;
  std::string body;
  for (int i = 0; i < kReads; ++i) {
    ASSERT_TRUE(peer->recv_frame(&rh, &body)) << i;
    EXPECT_LE(node.service().read_bytes_held(), kPerConnection);
    ok += rh.status == 0;
    overloaded += rh.status == static_cast<uint16_t>(Code::kOverloaded);
  }
  EXPECT_EQ(ok + overloaded, kReads);
  EXPECT_GT(ok, 0);
  EXPECT_GT(overloaded, 0) << "reads past the bound are refused, not held";
  auto released = [&] {
    for (int i = 0; i < 300 && node.service().read_bytes_held() > 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return node.service().read_bytes_held() == 0;
  };
  EXPECT_TRUE(released()) << "every hold is given back once its reply was written";

  // A peer that goes away with its replies unwritten gives its holds back too.
  peer = stalled_peer(node);
  ASSERT_NO_FATAL_FAILURE(send_reads(*peer, kReads));
  EXPECT_GT(node.service().read_bytes_held(), 0u);
  peer.reset();
  EXPECT_TRUE(released()) << "a closed connection's holds go with it";
}

// A peer that stops reading and stays connected (hung, SIGSTOPped) keeps its
// share of the read budget only until the server's write-stall timeout
// closes it; others are served meanwhile and after.
TEST_F(StorageServiceTest, AStalledPeersReadsAreGivenBackAfterTheWriteStallTimeout) {
  constexpr uint64_t kHeldMax = 4 << 20;
  constexpr uint32_t kStallMs = 1000;  // longer than send_reads below takes
  nodes_.push_back(std::make_unique<Node>(io_, "stall", std::vector<mgmt::TargetId>{1}, 0, kHeldMax, kStallMs));
  Node& node = *nodes_[0];
  ASSERT_TRUE(client_.set_routing({node.ep()}, {{1, node.address()}}, {ChainSpec{1, 1, {{1, TargetState::kServing}}}}, 1)
                  .has_value());
  auto data = pattern(kChunk, 4);
  ASSERT_TRUE(client_.write(node.ep(), 1, 1, ChunkId{1, 0}, 0, data, 0, 0, kChunk).has_value());
  auto start = std::chrono::steady_clock::now();
  auto peer = stalled_peer(node);
  // 25 MiB: more than the socket buffers take. No settling time: the holds
  // are looked at at once, while the stall timeout (from when the buffers
  // filled) still runs; after a fixed sleep a loaded machine could be past it.
  ASSERT_NO_FATAL_FAILURE(send_reads(*peer, 100, std::chrono::milliseconds(0)));
  bool held = false;
  for (int i = 0; i < 2000 && !(held = node.service().read_bytes_held() > 0); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_TRUE(held) << "replies the peer does not read keep their reads";
  EXPECT_EQ(read(0, 1, ChunkId{1, 0}).data, data) << "another client is served meanwhile";
  for (int i = 0; i < 500 && node.service().read_bytes_held() > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(node.service().read_bytes_held(), 0u) << "the stalled peer's share did not come back";
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(kStallMs));
  EXPECT_TRUE(peer->drain_until_closed()) << "the server closed the stalled connection";
  EXPECT_EQ(read(0, 1, ChunkId{1, 0}).data, data);
}

// One BatchRead is at most kBatchReadRangesMax ranges and what one reply
// payload carries (kBatchReadBytesMax), however much a connection may hold
// (a quarter of read_held_mib: at least 128 MiB, here 256): past either it is
// kTooBig, not a reply the client closes the connection on, nor a body of
// millions of results.
TEST_F(StorageServiceTest, BatchReadIsBoundedByWhatOneReplyCarries) {
  start(1);
  route({0}, 1);
  ChunkId id{1, 0};
  auto data = pattern(1 << 20, 4);
  ASSERT_TRUE(client_.write(nodes_[0]->ep(), 1, 1, id, 0, data).has_value());
  auto call = [&](const proto::storage::BatchReadRequest& req) {
    return client_.call<proto::storage::BatchReadReply>(nodes_[0]->ep(), methods::kBatchRead, req);
  };
  const int over_payload = static_cast<int>(kBatchReadBytesMax >> 20) + 1;  // ranges of 1 MiB
  auto big = call(batch_of(over_payload, 0, 1 << 20, id));
  ASSERT_FALSE(big.has_value()) << big->results_size() << " results";
  EXPECT_EQ(big.error().code(), Code::kTooBig) << big.error();
  auto many = call(batch_of(kBatchReadRangesMax + 1, 0, 0, ChunkId{1, 1}));
  ASSERT_FALSE(many.has_value()) << many->results_size() << " results";
  EXPECT_EQ(many.error().code(), Code::kTooBig) << many.error();
  auto most = call(batch_of(kBatchReadRangesMax, 0, 1, ChunkId{1, 1}));
  ASSERT_TRUE(most.has_value()) << most.error();
  EXPECT_EQ(most->results_size(), kBatchReadRangesMax);
  auto whole = client_.read(nodes_[0]->ep(), 1, 1, id, 0, 1 << 20);
  ASSERT_TRUE(whole.has_value()) << whole.error();
  EXPECT_TRUE(whole->data == data) << "the connection still serves";
}

TEST_F(StorageServiceTest, ChainOfThreeReplicatesByteIdentically) {
  start(3);
  route({0, 1, 2}, 1);
  for (uint64_t i = 0; i < 20; ++i) {
    auto data = pattern(1000 + i * 5000, i);
    auto w = write(0, 1, ChunkId{9, i}, static_cast<uint32_t>(i * 100), data);
    ASSERT_TRUE(w.has_value()) << w.error();
    if (i % 3 == 0) {
      ASSERT_TRUE(write(0, 1, ChunkId{9, i}, 7, std::span(data).first(50)).has_value());
    }
  }
  expect_identical({0, 1, 2}, 1);
  for (size_t n = 0; n < 3; ++n) {
    auto r = read(n, 1, ChunkId{9, 3});
    EXPECT_EQ(r.result.version(), 2u);
    EXPECT_EQ(r.data, read(0, 1, ChunkId{9, 3}).data);
  }
}

TEST_F(StorageServiceTest, ConcurrentWritesToOneChunkGetDistinctVersions) {
  start(2);
  route({0, 1}, 1);
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 10; ++i) {
        auto d = pattern(4096, t * 100 + i);
        if (!write(0, 1, ChunkId{3, 0}, static_cast<uint32_t>(t * 4096), d)) failures++;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(read(1, 1, ChunkId{3, 0}).result.version(), 40u);
  expect_identical({0, 1}, 1);
}

TEST_F(StorageServiceTest, StaleVersionsAndNonHeadWritesAreRejected) {
  start(2);
  route({0, 1}, 2);
  auto data = pattern(100, 1);
  auto stale = write(0, 1, ChunkId{1, 1}, 0, data);
  ASSERT_FALSE(stale.has_value());
  EXPECT_EQ(stale.error().code(), Code::kStaleRouting);
  EXPECT_TRUE(stale.error().retryable());
  auto not_head = write(1, 2, ChunkId{1, 1}, 0, data);
  ASSERT_FALSE(not_head.has_value());
  EXPECT_EQ(not_head.error().code(), Code::kNotChainHead);
  auto stale_read = client_.read(nodes_[1]->ep(), 1, 7, ChunkId{1, 1}, 0, 10);
  ASSERT_TRUE(stale_read.has_value());
  EXPECT_EQ(stale_read->result.code(), static_cast<uint32_t>(Code::kStaleRouting));
  // A corrupted payload is refused on arrival.
  proto::storage::WriteRequest req;
  req.set_chain_id(1);
  req.set_chain_version(2);
  req.set_length(100);
  req.set_data_crc32c(crc32c(data) ^ 1);
  rpc::CallOptions o;
  o.payload.push_back(data);
  auto bad = client_.call<proto::storage::WriteReply>(nodes_[0]->ep(), methods::kWrite, req, std::move(o));
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().code(), Code::kCorruption);
}

TEST_F(StorageServiceTest, ClientRetryIsNotAppliedTwice) {
  start(2);
  route({0, 1}, 1);
  auto data = pattern(100, 1);
  auto first = write(0, 1, ChunkId{2, 0}, 0, data, 77, 1);
  ASSERT_TRUE(first.has_value()) << first.error();
  auto retry = write(0, 1, ChunkId{2, 0}, 0, data, 77, 1);
  ASSERT_TRUE(retry.has_value());
  EXPECT_EQ(retry->version(), first->version());
  EXPECT_EQ(read(1, 1, ChunkId{2, 0}).result.version(), 1u);
  auto next = write(0, 1, ChunkId{2, 0}, 0, data, 77, 2);
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->version(), 2u);
}

// A Forward whose kind is none of UpdateKind's values is refused; it used to
// be staged as a write without data (the chunk zero-filled up to `offset`).
TEST_F(StorageServiceTest, ForwardOfAnUnknownUpdateKindIsRefused) {
  start(2);
  route({0, 1}, 1);
  ChunkId id{13, 0};
  std::vector<std::byte> zeros(5000);
  auto req = forward_to_node1(id, static_cast<proto::storage::UpdateKind>(7), 1);
  req.set_offset(5000);
  req.set_expect_chunk_length(5000);  // what the zero-length write at 5000 would stage
  req.set_expect_chunk_crc32c(crc32c(zeros));
  auto r = client_.call<proto::storage::ForwardReply>(nodes_[1]->ep(), methods::kForward, req);
  ASSERT_FALSE(r.has_value()) << "staged as version " << r->version() << ", length " << r->chunk_length();
  EXPECT_EQ(r.error().code(), Code::kInvalidArgument) << r.error();
  EXPECT_NE(r.error().message().find("unknown update kind"), std::string::npos) << r.error();
  EXPECT_EQ(nodes_[1]->engine(target_of(1)).stat(id).error().code(), Code::kNotFound);
}

// A (client id, sequence) names one update: reused for another chunk or
// another kind of update it is refused, not answered "done" from the dedup
// table while nothing was written.
TEST_F(StorageServiceTest, ReusedSequenceForAnotherUpdateIsRefused) {
  start(2);
  route({0, 1}, 1);
  auto data = pattern(100, 1);
  ASSERT_TRUE(write(0, 1, ChunkId{2, 0}, 0, data, 77, 1).has_value());
  auto other = write(0, 1, ChunkId{2, 1}, 0, data, 77, 1);
  ASSERT_FALSE(other.has_value()) << "answered version " << other->version() << " without writing";
  EXPECT_EQ(other.error().code(), Code::kInvalidArgument);
  for (size_t n = 0; n < 2; ++n)
    EXPECT_EQ(read(n, 1, ChunkId{2, 1}).result.code(), static_cast<uint32_t>(Code::kNotFound)) << "node " << n;
  proto::storage::TruncateRequest t;
  t.set_chain_id(1);
  t.set_chain_version(1);
  t.mutable_chunk()->set_inode(2);
  t.set_length(10);
  t.set_client_id(77);
  t.set_sequence(1);
  auto cut = client_.call<proto::storage::WriteReply>(nodes_[0]->ep(), methods::kTruncate, t);
  ASSERT_FALSE(cut.has_value()) << "a truncate answered with the write's outcome";
  EXPECT_EQ(cut.error().code(), Code::kInvalidArgument);
  EXPECT_EQ(read(1, 1, ChunkId{2, 0}).data, data);
  auto retry = write(0, 1, ChunkId{2, 0}, 0, data, 77, 1);
  ASSERT_TRUE(retry.has_value()) << retry.error();
  EXPECT_EQ(retry->version(), 1u) << "a real retry is still answered from the table";
}

// Client 7's write of chunk A is applied and its ack lost; client 8 then
// writes A (acknowledged). Once the dedup tables have evicted 7's entry, 7's
// retry can no longer be told from a first arrival: applied again, it would
// overwrite 8's acknowledged bytes. It is refused as kOutcomeUnknown, by the
// head and, after a failover, by the former tail. A first send below the
// floor, and a retry above it, are applied.
TEST_F(StorageServiceTest, ARetryTheDedupTableEvictedIsRefusedNotAppliedTwice) {
  for (size_t n = 0; n < 2; ++n)
    nodes_.push_back(std::make_unique<Node>(io_, "s" + std::to_string(n + 1), std::vector<mgmt::TargetId>{target_of(n)},
                                            0, 0, 0, std::chrono::hours(1), nullptr, 16));
  route({0, 1}, 1);
  const ChunkId a{21, 0};
  auto mine = pattern(3000, 1), theirs = pattern(3000, 2), other = pattern(100, 3);
  auto send = [&](size_t node, mgmt::ChainVersion cv, ChunkId id, std::span<const std::byte> data, uint64_t client,
                  uint64_t seq, uint32_t attempt) {
    proto::storage::WriteRequest req;
    req.set_chain_id(1);
    req.set_chain_version(cv);
    req.mutable_chunk()->set_inode(id.inode);
    req.mutable_chunk()->set_index(id.index);
    req.set_length(static_cast<uint32_t>(data.size()));
    req.set_data_crc32c(crc32c(data));
    req.set_chunk_size(kChunk);
    req.set_client_id(client);
    req.set_sequence(seq);
    req.set_attempt(attempt);
    rpc::CallOptions o;
    o.payload.push_back(data);
    return client_.call<proto::storage::WriteReply>(nodes_[node]->ep(), methods::kWrite, req, std::move(o));
  };
  ASSERT_TRUE(send(0, 1, a, mine, 7, 50, 0).has_value());
  ASSERT_TRUE(send(0, 1, a, theirs, 8, 1, 0).has_value());
  for (uint64_t i = 0; i < 16; ++i) ASSERT_TRUE(send(0, 1, ChunkId{22, i}, other, 7, 100 + i, 0).has_value()) << i;
  auto retry = send(0, 1, a, mine, 7, 50, 1);
  ASSERT_FALSE(retry.has_value()) << "applied twice: version " << retry->version();
  EXPECT_EQ(retry.error().code(), Code::kOutcomeUnknown) << retry.error();
  for (size_t n = 0; n < 2; ++n) EXPECT_EQ(read(n, 1, a).data, theirs) << "node " << n;
  route({1}, 2);  // the head is gone: the former tail evicted the same entries
  auto at_tail = send(1, 2, a, mine, 7, 50, 3);
  ASSERT_FALSE(at_tail.has_value()) << "applied twice: version " << at_tail->version();
  EXPECT_EQ(at_tail.error().code(), Code::kOutcomeUnknown) << at_tail.error();
  EXPECT_EQ(read(1, 2, a).data, theirs);
  auto first = send(1, 2, ChunkId{23, 0}, other, 7, 40, 0);
  EXPECT_TRUE(first.has_value()) << first.error();
  auto above = send(1, 2, ChunkId{23, 1}, other, 7, 500, 2);
  EXPECT_TRUE(above.has_value()) << above.error();
}

// A write of no bytes is refused (it used to zero-fill the chunk up to its
// offset and bump the version); the client never sends one.
TEST_F(StorageServiceTest, ZeroLengthWriteIsRefused) {
  ChunkId id{14, 0};
  auto data = pattern(100, 1);
  ASSERT_NO_FATAL_FAILURE(start_with_chunk(2, {0, 1}, id, data));
  auto w = write(0, 1, id, 5000, {});
  ASSERT_FALSE(w.has_value()) << "version " << w->version() << ", length " << w->chunk_length();
  EXPECT_EQ(w.error().code(), Code::kInvalidArgument);
  for (size_t n = 0; n < 2; ++n) {
    auto r = read(n, 1, id);
    EXPECT_EQ(r.result.version(), 1u) << "node " << n;
    EXPECT_EQ(r.data, data) << "node " << n;
  }
}

TEST_F(StorageServiceTest, FailedForwardAbortsAndRetrySucceeds) {
  start(2);
  route({0, 1}, 1);
  auto data = pattern(5000, 3);
  {
    fault::Scope fail("storage.forward.fail", {.hits_max = 1});
    auto w = write(0, 1, ChunkId{4, 0}, 0, data, 5, 1);
    ASSERT_FALSE(w.has_value());
    EXPECT_EQ(w.error().code(), Code::kUnavailable);
  }
  auto w = write(0, 1, ChunkId{4, 0}, 0, data, 5, 1);
  ASSERT_TRUE(w.has_value()) << w.error();
  EXPECT_EQ(w->version(), 1u);
  expect_identical({0, 1}, 1);
}

// A member whose predecessor gave up on an update (its Forward timed out)
// must not commit it: the predecessor aborted, so the replicas would differ
// and reads would return a write that failed, until the next write rolled it
// back. The tail is slow to commit (`fault`: an 800 ms delay past every hop's
// timeout, hit first by the tail, the others waiting for their forward): each
// member's commit deadline comes from its Forward's, a margin before it, so
// the tail aborts too and every replica keeps the old content.
class GiveUpTest : public StorageServiceTest {
 protected:
  void check(const char* fault, ChunkId id, uint64_t client) {
    start(3, 0, /*forward_timeout_ms=*/300);
    route({0, 1, 2}, 1);
    auto a = pattern(kChunk, 31), b = pattern(kChunk, 32), c = pattern(kChunk, 33);
    ASSERT_TRUE(write(0, 1, id, 0, a, client, 1).has_value());
    {
      fault::Scope slow(fault, {.hits_max = 1});
      auto w = write(0, 1, id, 0, b, client, 2);
      if (slow.triggered() == 0) GTEST_SKIP() << "fault injection compiled out";
      EXPECT_FALSE(w.has_value()) << "the head's forward timed out";
      std::this_thread::sleep_for(std::chrono::milliseconds(1200));  // the delay ends; the tail decides
    }
    for (size_t n = 0; n < 3; ++n) {
      auto r = read(n, 1, id);
      EXPECT_EQ(r.result.version(), 1u) << "node " << n;
      EXPECT_TRUE(r.data == a) << "node " << n << " serves the failed write's bytes";
      EXPECT_EQ(pending_on(n, id), 0u) << "node " << n;
    }
    auto w = write(0, 1, id, 0, c, client, 3);
    ASSERT_TRUE(w.has_value()) << w.error();
    EXPECT_EQ(w->version(), 2u);
    expect_identical({0, 1, 2}, 1);
  }
};

// The tail's commit is slow before it is queued (storage.chain.commit.delay).
TEST_F(GiveUpTest, AMemberDoesNotCommitAnUpdateItsPredecessorGaveUpOn) {
  check("storage.chain.commit.delay", ChunkId{13, 0}, 11);
}

// The tail's commit job waits in the disk pool's queue past the deadline
// (storage.chain.commit.queued): the deadline is checked when the job runs,
// not only when it was queued.
TEST_F(GiveUpTest, AMemberWhoseCommitWaitedTooLongForTheDiskAbortsIt) {
  check("storage.chain.commit.queued", ChunkId{18, 0}, 16);
}

// Reads never go back in time: while an update is between the tail's
// commit and the head's, a read at the tail gives the new version, and a
// read at the head after it must not give the old one (the head waits for
// its own commit).
TEST_F(StorageServiceTest, AReadAfterAnotherSawAnUpdateNeverGivesAnOlderVersion) {
  start(2, 0);
  route({0, 1}, 1);
  ChunkId id{17, 0};
  auto a = pattern(kChunk, 71), b = pattern(kChunk, 72);
  ASSERT_TRUE(write(0, 1, id, 0, a, 15, 1).has_value());
  fault::Scope slow("storage.chain.commit.delay", {.hits_max = 1, .skip = 1});  // the head's commit (after the tail's)
  Result<proto::storage::WriteReply> w;
  std::thread writer([&] { w = write(0, 1, id, 0, b, 15, 2); });
  for (int i = 0; i < 200 && slow.triggered() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  if (slow.triggered() == 0) {
    writer.join();
    GTEST_SKIP() << "fault injection compiled out";
  }
  auto at_tail = read(1, 1, id);
  auto at_head = read(0, 1, id);
  writer.join();
  ASSERT_TRUE(w.has_value()) << w.error();
  EXPECT_EQ(at_tail.result.version(), 2u);
  EXPECT_TRUE(at_tail.data == b);
  EXPECT_EQ(at_head.result.version(), 2u) << "the head gave an older version than the tail had given before";
  EXPECT_TRUE(at_head.data == b);
}

// A Forward whose reply is lost (the connection closed after the successor
// got it) fails the update although the members after it committed it.
// Here the tail commits, the middle loses its reply and aborts, and so does
// the head: the head reconciles the chunk once every member has decided
// (after the forward timeout), rewriting its own content through the chain,
// so no replica keeps serving the failed write.
TEST_F(StorageServiceTest, AChunkAFailedUpdateLeftDifferentOnTheReplicasIsReconciled) {
  start(3, 0, /*forward_timeout_ms=*/400);
  route({0, 1, 2}, 1);
  ChunkId id{14, 0};
  auto a = pattern(kChunk, 41), b = pattern(kChunk, 42);
  ASSERT_TRUE(write(0, 1, id, 0, a, 12, 1).has_value());
  {
    fault::Scope lost("storage.forward.drop_reply", {.hits_max = 1});  // the first reply back: the tail's
    auto w = write(0, 1, id, 0, b, 12, 2);
    if (lost.triggered() == 0) GTEST_SKIP() << "fault injection compiled out";
    EXPECT_FALSE(w.has_value());
  }
  auto served = [&](size_t n) { return read(n, 1, id).data == a; };
  for (int i = 0; i < 100 && !(served(0) && served(1) && served(2)); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  for (size_t n = 0; n < 3; ++n) EXPECT_TRUE(served(n)) << "node " << n << " serves the failed write's bytes";
  expect_identical({0, 1, 2}, 1);
}

// A chunk's first write whose ack was lost on its way back: the head aborts
// (it has no chunk), the tail committed it and recorded the client's
// request. The reconcile removes it there, and the tail's record of that
// request goes too: after a failover a retry is applied afresh, not answered
// "done" over a chunk that is no longer there.
TEST_F(StorageServiceTest, AReconcileThatRemovesAChunkForgetsTheRequestsItsReplicasRecorded) {
  start(3, 0, /*forward_timeout_ms=*/400);
  route({0, 1, 2}, 1);
  ChunkId id{16, 0};
  auto a = pattern(kChunk, 61);
  if (!commit_at_the_tail_only_then_reconcile(id, a, 14, 1)) GTEST_SKIP() << "fault injection compiled out";
  if (HasFailure()) return;
  // The tail (the one member that committed: the middle aborted when its
  // forward's reply was lost) is all that is left; the client retries its
  // write there.
  route({2}, 2);
  auto retried = write(2, 2, id, 0, a, 14, 1);
  ASSERT_TRUE(retried.has_value()) << retried.error();
  EXPECT_EQ(read(2, 2, id).data, a);
}

// The same removal where the head's own history of the chunk is real: a
// write acknowledged (its reply lost, the client retries it later), then the
// chunk removed (acknowledged), then a write that only the tail committed.
// The reconcile removes the tail's chunk; the head keeps its record of the
// first write (and the members keep what the head holds), so that write's
// retry is answered from it, not applied again over the removal.
TEST_F(StorageServiceTest, AReconcileThatRemovesAChunkKeepsTheRequestsItsHeadApplied) {
  start(3, 0, /*forward_timeout_ms=*/400);
  route({0, 1, 2}, 1);
  ChunkId id{24, 0};
  auto a = pattern(kChunk, 101), b = pattern(kChunk, 102);
  auto first = write(0, 1, id, 0, a, 30, 1);
  ASSERT_TRUE(first.has_value()) << first.error();
  ASSERT_TRUE(client_.remove(nodes_[0]->ep(), 1, 1, id).has_value());
  if (!commit_at_the_tail_only_then_reconcile(id, b, 31, 1)) GTEST_SKIP() << "fault injection compiled out";
  if (HasFailure()) return;
  auto retried = write(0, 1, id, 0, a, 30, 1);
  ASSERT_TRUE(retried.has_value()) << retried.error();
  EXPECT_EQ(retried->version(), first->version()) << "answered from the record";
  for (size_t n = 0; n < 3; ++n) EXPECT_FALSE(holds(n, id)) << "node " << n << ": the retry brought the removed chunk back";
  // After a failover to the middle, which holds the head's record too.
  route({1, 2}, 2);
  auto again = write(1, 2, id, 0, a, 30, 1);
  ASSERT_TRUE(again.has_value()) << again.error();
  EXPECT_EQ(again->version(), first->version());
  EXPECT_EQ(read(1, 2, id).result.length(), 0u) << "the retry after the failover brought the removed chunk back";
}

// A Forward that never went out leaves the replicas as they were: no
// reconcile is queued for them, and nothing is rewritten.
TEST_F(StorageServiceTest, AFailedUpdateThatChangedNoReplicaIsNotRewritten) {
  start(3, 0, /*forward_timeout_ms=*/400);
  route({0, 1, 2}, 1);
  ChunkId id{15, 0};
  auto a = pattern(kChunk, 51);
  ASSERT_TRUE(write(0, 1, id, 0, a, 13, 1).has_value());
  auto reconciles = [] {
    uint64_t n = 0;
    for (const char* result : {"consistent", "converged", "rewritten", "not_head", "given_up"})
      n += metrics::Registry::global()
               .counter("weft_storage_reconciles_total", "", {{"target", std::to_string(target_of(0))}, {"result", result}})
               .value();
    return n;
  };
  const uint64_t before = reconciles();
  {
    fault::Scope fail("storage.forward.fail", {.hits_max = 1});
    EXPECT_FALSE(write(0, 1, id, 0, pattern(kChunk, 52), 13, 2).has_value());
    if (fail.triggered() == 0) GTEST_SKIP() << "fault injection compiled out";
  }
  std::this_thread::sleep_for(std::chrono::seconds(1));  // a noted chunk is reconciled well within this
  EXPECT_EQ(reconciles(), before) << "a reconcile ran for an update no other member saw";
  for (size_t n = 0; n < 3; ++n) EXPECT_EQ(read(n, 1, id).result.version(), 1u) << "node " << n;
}

// The replica check finds chunks that differ between a chain's members
// without any note of a failed update (notes are lost with a restart or a
// change of head): a chunk only the tail has, one only the head has, one at
// another version on the tail, one with other bytes on the middle. Each is
// made the head's on every member; members that are not the head check nothing.
TEST_F(StorageServiceTest, TheReplicaCheckReconcilesChunksThatDifferWithoutANote) {
  start(3, 0, /*forward_timeout_ms=*/300);
  route({0, 1, 2}, 1);
  const ChunkId same{18, 0}, tail_only{18, 1}, head_only{18, 2}, ahead{18, 3}, other{18, 4};
  auto a = pattern(kChunk, 81), b = pattern(kChunk, 82);
  for (ChunkId id : {same, ahead, other}) ASSERT_TRUE(write(0, 1, id, 0, a, 16, id.index + 1).has_value());
  auto in_chain1 = [](std::span<const std::byte> data) {
    Update u = Update::write(0, data);
    u.chain_id = 1;
    return u;
  };
  ASSERT_TRUE(nodes_[2]->engine(target_of(2)).write(tail_only, in_chain1(b)).has_value());
  ASSERT_TRUE(nodes_[0]->engine(target_of(0)).write(head_only, in_chain1(b)).has_value());
  ASSERT_TRUE(nodes_[2]->engine(target_of(2)).write(ahead, in_chain1(b)).has_value());  // version 2 there
  ASSERT_TRUE(nodes_[1]->engine(target_of(1)).remove(other).has_value());
  ASSERT_TRUE(nodes_[1]->engine(target_of(1)).write(other, in_chain1(b)).has_value());  // version 1, other bytes
  for (size_t n : {1, 2}) {
    auto r = block_on(io_.at(0).get_executor(), nodes_[n]->service().check_replicas());
    EXPECT_EQ(r.chains, 0u) << "node " << n << " is not the chain's head";
  }
  auto report = block_on(io_.at(0).get_executor(), nodes_[0]->service().check_replicas());
  EXPECT_EQ(report.chains, 1u);
  EXPECT_EQ(report.failed, 0u);
  // head_only against both members, tail_only, ahead and other against one each.
  EXPECT_EQ(report.differing, 5u);
  auto converged = [&] {
    for (ChunkId id : {same, tail_only, head_only, ahead, other}) {
      auto first = nodes_[0]->engine(target_of(0)).stat(id);
      for (size_t n : {1, 2}) {
        auto info = nodes_[n]->engine(target_of(n)).stat(id);
        if (info.has_value() != first.has_value()) return false;
        if (info && (info->version != first->version || info->chunk_crc != first->chunk_crc)) return false;
      }
    }
    return true;
  };
  for (int i = 0; i < 100 && !converged(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  expect_identical({0, 1, 2}, 1);
  for (size_t n = 0; n < 3; ++n) {
    SCOPED_TRACE(n);
    EXPECT_FALSE(nodes_[n]->engine(target_of(n)).stat(tail_only).has_value());
    EXPECT_TRUE(read(n, 1, head_only).data == b);
    EXPECT_TRUE(read(n, 1, ahead).data == a);
    EXPECT_TRUE(read(n, 1, other).data == a);
    EXPECT_TRUE(read(n, 1, same).data == a);
  }
  auto again = block_on(io_.at(0).get_executor(), nodes_[0]->service().check_replicas());
  EXPECT_EQ(again.differing, 0u) << "the chain still differs after reconciling";
}

// A replica check notes a differing chunk only once the reconcile queue has
// room: with room for 2, all 8 chunks only the tail has are reconciled, none
// dropped (it used to overflow the queue and leave them to the next check).
TEST_F(StorageServiceTest, TheReplicaCheckWaitsForRoomInTheReconcileQueue) {
  for (size_t n = 0; n < 2; ++n)
    nodes_.push_back(std::make_unique<Node>(io_, "s" + std::to_string(n + 1),
                                            std::vector<mgmt::TargetId>{target_of(n)}, 0, 0, 0,
                                            std::chrono::hours(1), nullptr, 65536, /*forward_timeout_ms=*/500, 65536,
                                            [](StorageConfig& sc) { sc.reconcile_queue_max = 2; }));
  route({0, 1}, 1);
  auto data = pattern(4096, 83);
  Update u = Update::write(0, data);
  u.chain_id = 1;
  for (uint64_t i = 0; i < 8; ++i) ASSERT_TRUE(nodes_[1]->engine(target_of(1)).write(ChunkId{19, i}, u).has_value());
  auto reconciles = [&](const char* result) {
    return metrics::Registry::global()
        .counter("weft_storage_reconciles_total", "", {{"target", std::to_string(target_of(0))}, {"result", result}})
        .value();
  };
  const uint64_t dropped = reconciles("dropped");
  auto report = block_on(io_.at(0).get_executor(), nodes_[0]->service().check_replicas());
  EXPECT_EQ(report.differing, 8u);
  EXPECT_EQ(report.failed, 0u);
  EXPECT_EQ(reconciles("dropped"), dropped) << "notes of the check were dropped";
  auto left_on_tail = [&] {
    size_t n = 0;
    for (uint64_t i = 0; i < 8; ++i) n += nodes_[1]->engine(target_of(1)).stat(ChunkId{19, i}).has_value();
    return n;
  };
  for (int i = 0; i < 750 && left_on_tail() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(left_on_tail(), 0u);
  EXPECT_EQ(block_on(io_.at(0).get_executor(), nodes_[0]->service().check_replicas()).differing, 0u);
}

// A replica check waiting for room takes at most 3/4 of the reconcile queue:
// a failed update meanwhile is noted, not dropped.
TEST_F(StorageServiceTest, AFailedUpdateFindsRoomBesideAWaitingReplicaCheck) {
  for (size_t n = 0; n < 2; ++n)
    nodes_.push_back(std::make_unique<Node>(io_, "s" + std::to_string(n + 1),
                                            std::vector<mgmt::TargetId>{target_of(n)}, 0, 0, 0,
                                            std::chrono::hours(1), nullptr, 65536, /*forward_timeout_ms=*/1500, 65536,
                                            [](StorageConfig& sc) { sc.reconcile_queue_max = 4; }));
  route({0, 1}, 1);
  ChunkId failing{22, 0};
  ASSERT_TRUE(write(0, 1, failing, 0, pattern(kChunk, 85), 14, 1).has_value());
  auto data = pattern(4096, 86);
  Update u = Update::write(0, data);
  u.chain_id = 1;
  for (uint64_t i = 0; i < 8; ++i) ASSERT_TRUE(nodes_[1]->engine(target_of(1)).write(ChunkId{21, i}, u).has_value());
  auto reconciles = [&](const char* result) {
    return metrics::Registry::global()
        .counter("weft_storage_reconciles_total", "", {{"target", std::to_string(target_of(0))}, {"result", result}})
        .value();
  };
  const uint64_t dropped = reconciles("dropped");
  StorageService& head = nodes_[0]->service();
  StorageService::ReplicaCheckReport report;
  std::thread checker([&] { report = block_on(io_.at(0).get_executor(), head.check_replicas()); });
  // Its notes are due only a forward timeout after they are taken: the
  // check holds its share of the queue meanwhile.
  for (int i = 0; i < 100 && head.reconciles_waiting() < 3; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(head.reconciles_waiting(), 3u) << "the check's share of a queue of 4";
  {
    // Forwarded (the tail applies it), its reply lost: the head fails it and notes the chunk.
    fault::Scope fail("storage.forward.drop_reply", {.hits_max = 1});
    EXPECT_FALSE(write(0, 1, failing, 0, pattern(kChunk, 87), 14, 2).has_value());
    if (fail.triggered() == 0) {
      checker.join();
      GTEST_SKIP() << "fault injection compiled out";
    }
  }
  EXPECT_EQ(reconciles("dropped"), dropped) << "the failed update's note was dropped";
  EXPECT_EQ(head.reconciles_waiting(), 4u);
  checker.join();
  EXPECT_EQ(report.differing, 8u);
  EXPECT_EQ(reconciles("dropped"), dropped);
  auto left_on_tail = [&] {
    size_t n = 0;
    for (uint64_t i = 0; i < 8; ++i) n += nodes_[1]->engine(target_of(1)).stat(ChunkId{21, i}).has_value();
    return n;
  };
  for (int i = 0; i < 750 && left_on_tail() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(left_on_tail(), 0u);
}

// A replica check compares at most replica_check_chunks_per_s chunk records
// a second: 600 at 1,000 a second take at least half a second (listing pages
// of 256 wait for their turn).
TEST_F(StorageServiceTest, TheReplicaCheckKeepsItsPace) {
  for (size_t n = 0; n < 2; ++n)
    nodes_.push_back(std::make_unique<Node>(io_, "s" + std::to_string(n + 1),
                                            std::vector<mgmt::TargetId>{target_of(n)}, 0, 0, 0,
                                            std::chrono::hours(1), nullptr, 65536, 3000, 65536,
                                            [](StorageConfig& sc) { sc.replica_check_chunks_per_s = 1000; }));
  route({0, 1}, 1);
  auto data = pattern(4096, 84);
  Update u = Update::write(0, data);
  u.chain_id = 1;
  for (uint64_t i = 0; i < 600; ++i)
    for (size_t n = 0; n < 2; ++n) ASSERT_TRUE(nodes_[n]->engine(target_of(n)).write(ChunkId{20, i}, u).has_value());
  const auto start = std::chrono::steady_clock::now();
  auto report = block_on(io_.at(0).get_executor(), nodes_[0]->service().check_replicas());
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(report.compared, 600u);
  EXPECT_EQ(report.differing, 0u);
  EXPECT_GE(took, std::chrono::milliseconds(500));
}

// Whole-chunk writes stage on the head while they are forwarded. A stage that
// fails on either side fails the write; if the head's failed, the tail may
// have committed it. The next write (other bytes, same version) must still
// leave every replica identical: the tail answers kVersionMismatch and gets
// the whole chunk.
TEST_F(StorageServiceTest, PipelinedStageFailureIsHealedByTheNextWrite) {
  start(3);
  route({0, 1, 2}, 1);
  for (uint64_t i = 0; i < 6; ++i) {
    SCOPED_TRACE(i);
    ChunkId id{12, i};
    auto a = pattern(kChunk, 100 + i), b = pattern(kChunk, 200 + i);
    {
      // skip: spread the failure over the head, the middle and the tail.
      fault::Scope fail("storage.stage.fail", {.hits_max = 1, .skip = static_cast<int64_t>(i % 3)});
      auto w = write(0, 1, id, 0, a, 9, 2 * i);
      EXPECT_FALSE(w.has_value());
    }
    auto w = write(0, 1, id, 0, b, 9, 2 * i + 1);
    ASSERT_TRUE(w.has_value()) << w.error();
    EXPECT_EQ(w->version(), 1u);
    for (size_t n = 0; n < 3; ++n) EXPECT_EQ(read(n, 1, id).data, b) << "node " << n;
  }
  expect_identical({0, 1, 2}, 1);
}

// The tail commits write s1, the head's commit fails; the next write s2 (at
// the same version, other bytes) reaches the tail as the whole chunk, which
// drops s1 there. The tail's record of s1 must go with it: once the tail is
// the head, a retry of s1 is applied again, not answered "done" from the
// dedup table while s1's bytes are gone.
TEST_F(StorageServiceTest, AChunkReplacedOnAReplicaForgetsTheRetriesItRecorded) {
  ChunkId id{16, 0};
  auto base = pattern(8192, 1), s1 = pattern(100, 2), s2 = pattern(100, 3);
  ASSERT_NO_FATAL_FAILURE(start_with_chunk(2, {0, 1}, id, base));
  {
    // skip: the tail's commit comes first, then the head's (which fails).
    fault::Scope fail("storage.chain.commit.fail", {.hits_max = 1, .skip = 1});
    auto w = write(0, 1, id, 0, s1, 77, 1);
    ASSERT_FALSE(w.has_value());
    EXPECT_EQ(fail.triggered(), 1);
  }
  ASSERT_EQ(read(1, 1, id).result.version(), 2u) << "the tail committed s1";
  auto w2 = write(0, 1, id, 4096, s2, 88, 1);
  ASSERT_TRUE(w2.has_value()) << w2.error();
  EXPECT_EQ(w2->version(), 2u);
  auto both = base;
  std::copy(s2.begin(), s2.end(), both.begin() + 4096);
  ASSERT_TRUE(read(1, 1, id).data == both) << "the tail was given the head's chunk";
  route({1}, 2);  // the head is gone
  auto retry = write(1, 2, id, 0, s1, 77, 1);
  ASSERT_TRUE(retry.has_value()) << retry.error();
  std::copy(s1.begin(), s1.end(), both.begin());
  auto r = read(1, 2, id);
  EXPECT_EQ(r.result.version(), retry->version());
  EXPECT_TRUE(r.data == both) << "the acknowledged retry of s1 is not on the replica";
}

// The same, but of an update the replacing content holds: the tail commits
// w1 on both members (its ack is lost, its client retries), then w2 on the
// tail only (the head's commit fails), then w3 reaches the tail as the head's
// whole chunk (base + w1 + w3). The tail keeps its record of w1 (the head's
// content holds it, and the head sends what its records name) and forgets
// w2's. Once the tail is the head, w1's retry is answered from the record:
// applied again, it went over w3, an acknowledged write.
TEST_F(StorageServiceTest, ARetryOfAnUpdateTheReplacingContentHoldsIsNotAppliedAgain) {
  ChunkId id{16, 1};
  auto base = pattern(8192, 1), w1 = pattern(100, 2), w2 = pattern(100, 3), w3 = pattern(50, 4);
  ASSERT_NO_FATAL_FAILURE(start_with_chunk(2, {0, 1}, id, base));
  ASSERT_TRUE(write(0, 1, id, 0, w1, 77, 1).has_value());
  {
    fault::Scope fail("storage.chain.commit.fail", {.hits_max = 1, .skip = 1});  // the head's commit
    ASSERT_FALSE(write(0, 1, id, 4096, w2, 88, 1).has_value());
  }
  ASSERT_TRUE(write(0, 1, id, 0, w3, 99, 1).has_value());
  auto expected = base;
  std::copy(w1.begin(), w1.end(), expected.begin());
  std::copy(w3.begin(), w3.end(), expected.begin());
  ASSERT_TRUE(read(1, 1, id).data == expected) << "the tail was given the head's chunk";
  route({1}, 2);  // the head is gone
  proto::storage::WriteRequest req;
  req.set_chain_id(1);
  req.set_chain_version(2);
  req.mutable_chunk()->set_inode(id.inode);
  req.mutable_chunk()->set_index(id.index);
  req.set_length(static_cast<uint32_t>(w1.size()));
  req.set_data_crc32c(crc32c(w1));
  req.set_chunk_size(kChunk);
  req.set_client_id(77);
  req.set_sequence(1);
  req.set_attempt(1);
  rpc::CallOptions o;
  o.payload.push_back(w1);
  auto retry = client_.call<proto::storage::WriteReply>(nodes_[1]->ep(), methods::kWrite, req, std::move(o));
  ASSERT_TRUE(retry.has_value()) << retry.error();
  EXPECT_TRUE(read(1, 2, id).data == expected) << "w1's retry was applied again over w3";
  // w2 is not in the content: its retry is applied.
  auto w2_retry = write(1, 2, id, 4096, w2, 88, 1);
  ASSERT_TRUE(w2_retry.has_value()) << w2_retry.error();
  std::copy(w2.begin(), w2.end(), expected.begin() + 4096);
  EXPECT_TRUE(read(1, 2, id).data == expected);
}

// Two syncing members behind the head on a chunk (here: written on the head
// alone after the first one's resync ended). A partial write reaches the
// first with a version it cannot stage (kVersionMismatch) while its forward
// to the second fails the same way and its own rebuild of the whole chunk,
// from its stale copy, cannot match. It answers its own kVersionMismatch (it
// used to answer the rebuild's kInternal, which clients do not retry), so the
// head sends it the whole chunk, and it sends that on.
TEST_F(StorageServiceTest, APartialWriteReachesTwoSyncingMembersThatAreBehind) {
  start(3);
  route({0}, 1);
  route({0}, 2, {1, 2});
  ASSERT_TRUE(wait_synced(1, 2));
  ChunkId id{17, 0};
  auto base = pattern(8192, 1), part = pattern(50, 2);
  Update u = Update::write(0, base);
  u.chain_id = 1;
  ASSERT_TRUE(nodes_[0]->engine(target_of(0)).write(id, u).has_value());
  auto w = write(0, 2, id, 100, part, 55, 1);
  ASSERT_TRUE(w.has_value()) << w.error();
  EXPECT_EQ(w->version(), 2u);
  std::copy(part.begin(), part.end(), base.begin() + 100);
  EXPECT_TRUE(read(0, 2, id).data == base);
  expect_identical({0, 1, 2}, 2);
}

TEST_F(StorageServiceTest, CorruptReplicaAnswersCorruptionAndAnotherServesTheRead) {
  ChunkId id{8, 0};
  auto data = pattern(64 * 1024, 8);
  ASSERT_NO_FATAL_FAILURE(start_with_chunk(2, {0, 1}, id, data));
  ASSERT_NO_FATAL_FAILURE(corrupt(1, id, 5000));
  EXPECT_EQ(read(1, 1, id).result.code(), static_cast<uint32_t>(Code::kCorruption));
  auto good = read(0, 1, id);
  EXPECT_EQ(good.result.code(), 0u);
  EXPECT_EQ(good.data, data);
}

// A tail whose copy rots is repaired from the head once its scrubber finds
// it: afterwards the tail itself serves the chunk (same version and bytes),
// its scrubber no longer lists it and a partial write (whose read-modify-write
// needs the old bytes there) succeeds on both replicas.
TEST_F(StorageServiceTest, ACorruptTailIsRepairedFromTheHead) {
  ChunkId id{9, 0}, other{9, 1};
  auto data = pattern(100000, 9);
  ASSERT_NO_FATAL_FAILURE(start_with_chunk(2, {0, 1}, id, data));
  ASSERT_TRUE(write(0, 1, other, 0, pattern(5000, 10)).has_value());
  uint64_t repaired = repairs(1, "repaired");
  ASSERT_NO_FATAL_FAILURE(corrupt(1, id, 70000));
  EXPECT_EQ(scrub(1), std::vector<ChunkId>{id});
  ASSERT_TRUE(wait_repairs_done(1));
  EXPECT_EQ(repairs(1, "repaired"), repaired + 1);
  auto r = read(1, 1, id);
  EXPECT_EQ(r.result.code(), 0u) << r.result.message();
  EXPECT_EQ(r.result.version(), 1u) << "repaired at the version it had";
  EXPECT_EQ(r.data, data);
  EXPECT_TRUE(nodes_[1]->service().scrubber(target_of(1))->corrupt_chunks().empty());
  EXPECT_TRUE(scrub(1).empty());
  EXPECT_TRUE(scrub(0).empty());
  auto patch = pattern(300, 11);
  ASSERT_TRUE(write(0, 1, id, 69900, patch).has_value());
  std::copy(patch.begin(), patch.end(), data.begin() + 69900);
  EXPECT_EQ(read(1, 1, id).data, data);
  EXPECT_EQ(read(0, 1, id).data, data);
  expect_identical({0, 1}, 1);
}

// A head whose copy rots fetches a verified copy from its successor (reads of
// the head itself are served again, at the same version), and a read there
// that meets the damage first is what starts the repair.
TEST_F(StorageServiceTest, ACorruptHeadIsRepairedFromItsSuccessor) {
  ChunkId id{10, 0};
  auto data = pattern(kChunk, 12);
  ASSERT_NO_FATAL_FAILURE(start_with_chunk(2, {0, 1}, id, data));
  uint64_t repaired = repairs(0, "repaired");
  ASSERT_NO_FATAL_FAILURE(corrupt(0, id, 4096 * 7 + 5));
  EXPECT_EQ(read(0, 1, id).result.code(), static_cast<uint32_t>(Code::kCorruption)) << "the read starts the repair";
  ASSERT_TRUE(wait_repairs_done(0));
  EXPECT_EQ(repairs(0, "repaired"), repaired + 1);
  auto r = read(0, 1, id);
  EXPECT_EQ(r.result.code(), 0u) << r.result.message();
  EXPECT_EQ(r.result.version(), 1u);
  EXPECT_EQ(r.data, data);
  EXPECT_TRUE(scrub(0).empty());
  EXPECT_TRUE(scrub(1).empty());
  ASSERT_TRUE(write(0, 1, id, 4096 * 7, pattern(10, 13)).has_value()) << "the head's read-modify-write works again";
  expect_identical({0, 1}, 1);
}

// A client write racing the repair is ordered with it by the head's chunk
// lock: here it arrives while the head holds the lock for the repair, waits,
// and then applies on top of the repaired copy on both replicas (without the
// repair, the tail's read-modify-write meets the damage and the write fails).
// Nothing rolls the acknowledged write back afterwards.
TEST_F(StorageServiceTest, AWriteRacingARepairIsNeverRolledBack) {
  ChunkId id{11, 0};
  auto data = pattern(60000, 14);
  ASSERT_NO_FATAL_FAILURE(start_with_chunk(2, {0, 1}, id, data));
  ASSERT_NO_FATAL_FAILURE(corrupt(1, id, 20000));
  fault::Scope pause("storage.repair.pause_locked", {.hits_max = 1});
  EXPECT_EQ(read(1, 1, id).result.code(), static_cast<uint32_t>(Code::kCorruption));
  for (int i = 0; i < 500 && pause.triggered() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(pause.triggered(), 1) << "the repair did not reach the head";
  auto patch = pattern(3000, 15);
  auto w = write(0, 1, id, 19000, patch);  // waits for the head's lock
  ASSERT_TRUE(w.has_value()) << w.error();
  EXPECT_EQ(w->version(), 2u);
  std::copy(patch.begin(), patch.end(), data.begin() + 19000);
  ASSERT_TRUE(wait_repairs_done(1));
  for (size_t n : {0, 1}) {
    auto r = read(n, 1, id);
    EXPECT_EQ(r.result.code(), 0u) << "node " << n << ": " << r.result.message();
    EXPECT_EQ(r.result.version(), 2u) << "node " << n;
    EXPECT_EQ(r.data, data) << "node " << n;
    EXPECT_TRUE(scrub(n).empty()) << "node " << n;
  }
}

// A server destroyed while its repair waits on a head that does not answer
// (forward timeout 40 s): the repair's call is cut and the repair ends before
// the service's members go (it used to wait 15 s, then free them under the
// still-waiting repair, which touched them when the call ended).
TEST_F(StorageServiceTest, AServiceDestroyedWhileItsRepairWaitsOnAPeerCutsTheCallAndWaitsForTheRepair) {
  ChunkId id{13, 0};
  start(2, 0, /*forward_timeout_ms=*/40000);
  route({0, 1}, 1);
  ASSERT_TRUE(write(0, 1, id, 0, pattern(8192, 18)).has_value());
  ASSERT_NO_FATAL_FAILURE(corrupt(1, id, 100));
  fault::Scope hold("storage.repair.hold_locked");
  EXPECT_EQ(read(1, 1, id).result.code(), static_cast<uint32_t>(Code::kCorruption));
  for (int i = 0; i < 500 && hold.triggered() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_GT(hold.triggered(), 0) << "the repair did not reach the head";
  auto t0 = std::chrono::steady_clock::now();
  nodes_[1].reset();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5)) << "the repair's call was not cut";
}

// A repair never moves a replica backwards: a repair of a version the
// replica no longer has committed is refused there (it moved on), whatever
// the sender.
TEST_F(StorageServiceTest, ARepairOfAnotherVersionIsRefused) {
  ChunkId id{12, 0};
  auto v1 = pattern(8192, 16), v2 = pattern(8192, 17);
  ASSERT_NO_FATAL_FAILURE(start_with_chunk(2, {0, 1}, id, v1));
  ASSERT_TRUE(write(0, 1, id, 0, v2).has_value());
  auto req = forward_to_node1(id, proto::storage::UPDATE_REPLACE, 1);
  req.set_repair(true);
  auto r = replace_at_node1(req, v1);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code(), Code::kVersionMismatch) << r.error();
  auto now = read(1, 1, id);
  EXPECT_EQ(now.result.version(), 2u);
  EXPECT_EQ(now.data, v2);
}

// With one replica there is no good copy to repair from: the chunk is kept
// as it is (reads answer kCorruption, never zeros or an older version), the
// failure is counted, and the scrubber keeps listing it. The same when every
// replica of a chain is corrupt.
TEST_F(StorageServiceTest, ACorruptChunkWithoutAGoodCopyIsKept) {
  ChunkId id{13, 0};
  auto data = pattern(50000, 18);
  ASSERT_NO_FATAL_FAILURE(start_with_chunk(2, {0}, id, data));
  uint64_t no_copy = repairs(0, "no_good_copy");
  ASSERT_NO_FATAL_FAILURE(corrupt(0, id, 100));
  EXPECT_EQ(scrub(0), std::vector<ChunkId>{id});
  ASSERT_TRUE(wait_repairs_done(0));
  EXPECT_EQ(repairs(0, "no_good_copy"), no_copy + 1);
  EXPECT_EQ(read(0, 1, id).result.code(), static_cast<uint32_t>(Code::kCorruption));
  EXPECT_EQ(nodes_[0]->engine(target_of(0)).committed_meta(id)->version, 1u) << "the chunk is kept";
  EXPECT_EQ(nodes_[0]->service().scrubber(target_of(0))->corrupt_chunks(), std::vector<ChunkId>{id});

  route({0, 1}, 2);  // both replicas, both corrupt
  ChunkId both{13, 1};
  ASSERT_TRUE(write(0, 2, both, 0, data).has_value());
  ASSERT_NO_FATAL_FAILURE(corrupt(0, both, 200));
  ASSERT_NO_FATAL_FAILURE(corrupt(1, both, 300));
  uint64_t no_copy1 = repairs(1, "no_good_copy");
  EXPECT_EQ(scrub(1), std::vector<ChunkId>{both});
  ASSERT_TRUE(wait_repairs_done(1));
  EXPECT_EQ(repairs(1, "no_good_copy"), no_copy1 + 1);
  for (size_t n : {0, 1}) {
    EXPECT_EQ(read(n, 2, both).result.code(), static_cast<uint32_t>(Code::kCorruption)) << "node " << n;
    EXPECT_EQ(nodes_[n]->engine(target_of(n)).committed_meta(both)->version, 1u) << "node " << n;
  }
}

// A server whose lease from mgmtd ran out answers neither writes nor reads:
// mgmtd may already have moved its chain on without it (after lease + grace)
// and the new chain version taken writes it never saw, so a client with
// routing as old as the server's would read data older than an acknowledged
// write. The refusal is retryable (the client tries the next replica and
// refreshes its routing); reads come back with the lease.
TEST_F(StorageServiceTest, AServerWhoseLeaseRanOutServesNoReads) {
  auto lease = std::make_shared<std::atomic<bool>>(true);
  nodes_.push_back(std::make_unique<Node>(io_, "s1", std::vector<mgmt::TargetId>{target_of(0)}));
  nodes_.push_back(std::make_unique<Node>(io_, "s2", std::vector<mgmt::TargetId>{target_of(1)}, 0, 0, 0,
                                          std::chrono::hours(1), [lease] { return lease->load(); }));
  route({0, 1}, 1);
  ChunkId id{9, 0};
  auto data = pattern(20000, 9);
  ASSERT_TRUE(write(0, 1, id, 0, data).has_value());
  EXPECT_EQ(read(1, 1, id).data, data);

  lease->store(false);
  auto refused = client_.read(nodes_[1]->ep(), 1, 1, id, 0, kChunk);
  ASSERT_FALSE(refused.has_value()) << "a replica whose lease ran out answered a read";
  EXPECT_EQ(refused.error().code(), Code::kLeaseExpired) << refused.error();
  EXPECT_TRUE(refused.error().retryable());
  proto::storage::GetChunkMetaRequest stat;
  stat.set_target_id(target_of(1));
  stat.mutable_chunk()->set_inode(id.inode);
  auto meta = client_.call<proto::storage::GetChunkMetaReply>(nodes_[1]->ep(), methods::kGetChunkMeta, stat);
  ASSERT_FALSE(meta.has_value());
  EXPECT_EQ(meta.error().code(), Code::kLeaseExpired) << meta.error();
  EXPECT_EQ(read(0, 1, id).data, data) << "the other replica serves the read";

  lease->store(true);
  EXPECT_EQ(read(1, 1, id).data, data);
}

// The lease is checked again once an update holds its chunk's lock: one
// that waited there behind a slow update while the lease ran out is refused,
// not applied by a server mgmtd may already have moved the chain away from.
TEST_F(StorageServiceTest, AnUpdateThatWaitedForItsChunkWhileTheLeaseRanOutIsRefused) {
  auto lease = std::make_shared<std::atomic<bool>>(true);
  nodes_.push_back(std::make_unique<Node>(io_, "s1", std::vector<mgmt::TargetId>{target_of(0)}, 0, 0, 0,
                                          std::chrono::hours(1), [lease] { return lease->load(); }));
  nodes_.push_back(std::make_unique<Node>(io_, "s2", std::vector<mgmt::TargetId>{target_of(1)}));
  route({0, 1}, 1);
  ChunkId id{16, 0};
  auto a = pattern(kChunk, 61), b = pattern(kChunk, 62);
  Result<proto::storage::WriteReply> first;
  {
    fault::Scope slow("storage.chain.commit.delay", {.hits_max = 1});  // the tail's commit: the chunk stays locked
    std::thread slow_writer([&] { first = write(0, 1, id, 0, a, 14, 1); });
    for (int i = 0; i < 200 && slow.triggered() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (slow.triggered() == 0) {
      slow_writer.join();
      GTEST_SKIP() << "fault injection compiled out";
    }
    std::thread waiting_writer([&] {
      auto w = write(0, 1, id, 0, b, 14, 2);
      ASSERT_FALSE(w.has_value()) << "applied after the lease ran out";
      EXPECT_EQ(w.error().code(), Code::kLeaseExpired) << w.error();
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // it waits for the chunk's lock
    lease->store(false);
    slow_writer.join();
    waiting_writer.join();
  }
  ASSERT_TRUE(first.has_value()) << first.error();
  lease->store(true);
  for (size_t n = 0; n < 2; ++n) EXPECT_TRUE(read(n, 1, id).data == a) << "node " << n;
}

// A target whose engine failed for good (a slab fdatasync failed: every later
// commit fails until the engine is reopened) is out of service: its requests
// are refused with a retryable kUnavailable that names the failure (reads go
// to another replica, writes wait for the chain without it: the mgmtd link
// reports it failed), not served or failed one by one as kIoError forever.
TEST_F(StorageServiceTest, ATargetWhoseEngineFailedForGoodIsOutOfService) {
  ChunkId id{10, 0};
  auto data = pattern(30000, 10);
  ASSERT_NO_FATAL_FAILURE(start_with_chunk(2, {0, 1}, id, data));
  ASSERT_NO_FATAL_FAILURE(
      fail_second_engine("storage.slab.fdatasync_eio", ChunkId{10, 1}, Update::write(0, pattern(8192, 11))));
  if (IsSkipped()) return;
  expect_second_replica_out_of_service("fdatasync", id, data, 12);
  if (HasFatalFailure()) return;

  route({0}, 2);  // mgmtd dropped it: the chain takes writes again
  EXPECT_TRUE(write(0, 2, id, 0, pattern(30000, 12)).has_value());
}

// The same for a failed index write (sticky: its record may be on the disk).
TEST_F(StorageServiceTest, ATargetWhoseIndexWriteFailedIsOutOfService) {
  ChunkId id{10, 2};
  auto data = pattern(30000, 13);
  ASSERT_NO_FATAL_FAILURE(start_with_chunk(2, {0, 1}, id, data));
  ASSERT_NO_FATAL_FAILURE(fail_second_engine("storage.index.write_then_fail", ChunkId{10, 3}, Update::truncate(0)));
  if (IsSkipped()) return;
  expect_second_replica_out_of_service("index write", id, data, 14);
}

TEST_F(StorageServiceTest, SyncingTargetIsResyncedWhileWritesGoOn) {
  start(3);
  route({0, 1}, 1);
  for (uint64_t i = 0; i < 30; ++i) ASSERT_TRUE(write(0, 1, ChunkId{6, i}, 0, pattern(3000 + i * 997, i)).has_value());
  ASSERT_TRUE(client_.remove(nodes_[0]->ep(), 1, 1, ChunkId{6, 0}).has_value());
  // Node 2 holds stale and extra chunks of chain 1 from an earlier life (to be
  // replaced or removed), a chunk of chain 2 and one of unknown chain (a record
  // from before chains were recorded): those two must stay.
  auto& stale = nodes_[2]->engine(target_of(2));
  auto in_chain = [](Update u, uint32_t chain) {
    u.chain_id = chain;
    return u;
  };
  for (uint64_t i : {0, 1, 500}) {
    ASSERT_TRUE(stale.write(ChunkId{6, i}, in_chain(Update::write(0, pattern(10, 99)), 1)).has_value());
  }
  ASSERT_TRUE(stale.write(ChunkId{6, 501}, in_chain(Update::write(0, pattern(10, 98)), 2)).has_value());
  ASSERT_TRUE(stale.write(ChunkId{6, 502}, Update::write(0, pattern(10, 97))).has_value());
  route({0, 1}, 2, {2});
  // Writes go on during the resync (partial writes reach the syncing tail as full chunks if it is behind).
  for (uint64_t i = 1; i < 30; i += 4) ASSERT_TRUE(write(0, 2, ChunkId{6, i}, 10, pattern(100, i + 7)).has_value());
  bool synced = false;
  for (int i = 0; i < 500 && !synced; ++i) {
    auto s = client_.status(nodes_[2]->ep(), target_of(2));
    ASSERT_TRUE(s.has_value());
    for (auto& c : s->targets(0).synced()) synced |= c.chain_id() == 1 && c.synced_chain_version() == 2;
    if (!synced) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(synced);
  expect_identical({0, 1, 2}, 2);
  EXPECT_EQ(stale.stat(ChunkId{6, 0}).error().code(), Code::kNotFound) << "removed at the source";
  EXPECT_EQ(stale.stat(ChunkId{6, 500}).error().code(), Code::kNotFound) << "only on the syncing target";
  EXPECT_EQ(stale.stat(ChunkId{6, 1})->chain_id, 1u);
  EXPECT_EQ(stale.stat(ChunkId{6, 501})->chain_id, 2u) << "another chain's chunk is left alone";
  EXPECT_EQ(stale.stat(ChunkId{6, 502})->chain_id, kChainUnknown) << "a chunk of unknown chain is never removed";
  // The syncing target becomes serving; it answers reads with the same bytes.
  route({0, 1, 2}, 3);
  for (uint64_t i = 1; i < 30; ++i) EXPECT_EQ(read(2, 3, ChunkId{6, i}).data, read(0, 3, ChunkId{6, i}).data);
}

// A chunk id belongs to one chain (its file's layout). A syncing target's
// chunk recorded before chains were (format 1) may be another chain's where
// the source's copy is unrecorded too, and then the newer version stays; but
// a source that recorded the chunk as this chain's proves it is this chain's,
// and its copy replaces the older life's, whatever that one's version (a
// remove and rewrite starts versions over).
TEST_F(StorageServiceTest, AnUnrecordedChunkGivesWayToTheChainsRecordedCopyInAResync) {
  start(2);
  route({0}, 1);
  ChunkEngine& dest = nodes_[1]->engine(target_of(1));
  ChunkEngine& source = nodes_[0]->engine(target_of(0));
  for (int i = 0; i < 3; ++i) {  // versions 1..3 of an earlier life, chain not recorded
    ASSERT_TRUE(dest.write(ChunkId{8, 0}, Update::write(0, pattern(5000, 40 + i))).has_value());
    ASSERT_TRUE(dest.write(ChunkId{8, 1}, Update::write(0, pattern(5000, 50 + i))).has_value());
  }
  auto now = pattern(4000, 60);
  ASSERT_TRUE(write(0, 1, ChunkId{8, 0}, 0, now).has_value());  // version 1, recorded as chain 1's
  ASSERT_TRUE(source.write(ChunkId{8, 1}, Update::write(0, pattern(5000, 70))).has_value());  // unrecorded too
  route({0}, 2, {1});
  ASSERT_TRUE(wait_synced(1, 2));
  auto copied = dest.stat(ChunkId{8, 0});
  ASSERT_TRUE(copied.has_value()) << copied.error();
  EXPECT_EQ(copied->chain_id, 1u) << "kept the earlier life's version " << copied->version;
  route({0, 1}, 3);
  EXPECT_TRUE(read(1, 3, ChunkId{8, 0}).data == now) << "the syncing target serves an earlier life's bytes";
  EXPECT_EQ(dest.stat(ChunkId{8, 1})->version, 3u) << "both unrecorded: the newer one may be another chain's";
}

// A full listing page (resync_batch, 256) whose last chunk has the largest id
// ends the listing: the resync completes (it used to wrap around to {0, 0} and
// list the chain again, forever).
TEST_F(StorageServiceTest, ResyncListingStopsAtTheLargestChunkId) {
  start(2);
  route({0}, 1);
  ChunkEngine& source = nodes_[0]->engine(target_of(0));
  for (uint64_t i = 0; i < 256; ++i) {
    ChunkId id = i == 255 ? ChunkId{UINT64_MAX, UINT64_MAX} : ChunkId{7, i};
    auto data = pattern(10, i);  // outlives u: an Update does not own its bytes
    Update u = Update::write(0, data);
    u.chain_id = 1;
    ASSERT_TRUE(source.write(id, u).has_value());
  }
  route({0}, 2, {1}, /*last_first=*/true);  // the copies find the syncing target at version 2
  ASSERT_TRUE(wait_synced(1, 2));
  expect_identical({0, 1}, 2);
  EXPECT_EQ(nodes_[1]->engine(target_of(1)).stat(ChunkId{UINT64_MAX, UINT64_MAX})->version, 1u);
}

// A resync lists and copies a window of differing chunks at a time (its
// memory bound) and goes on listing where the window ended: with a window of
// 3, the successor's 10 missing or stale chunks are copied, its 4 extra ones
// removed, and its 5 equal ones kept.
TEST_F(StorageServiceTest, AResyncFarBehindCopiesAWindowAtATime) {
  for (size_t n = 0; n < 2; ++n)
    nodes_.push_back(std::make_unique<Node>(io_, "s" + std::to_string(n + 1),
                                            std::vector<mgmt::TargetId>{target_of(n)}, 0, 0, 0,
                                            std::chrono::hours(1), nullptr, 65536, 3000, /*resync_window=*/3));
  route({0}, 1);
  ChunkEngine& source = nodes_[0]->engine(target_of(0));
  ChunkEngine& dest = nodes_[1]->engine(target_of(1));
  std::vector<std::vector<std::byte>> data;  // outlives the updates: an Update does not own its bytes
  for (uint64_t i = 0; i < 20; ++i) data.push_back(pattern(1000, 900 + i));
  auto in_chain1 = [](std::span<const std::byte> bytes) {
    Update u = Update::write(0, bytes);
    u.chain_id = 1;
    return u;
  };
  for (uint64_t i = 0; i < 15; ++i) ASSERT_TRUE(source.write(ChunkId{9, i}, in_chain1(data[i])).has_value());
  for (uint64_t i = 0; i < 5; ++i) ASSERT_TRUE(dest.write(ChunkId{9, i}, in_chain1(data[i])).has_value());  // equal
  for (uint64_t i = 5; i < 8; ++i) ASSERT_TRUE(dest.write(ChunkId{9, i}, in_chain1(data[19])).has_value());  // stale
  for (uint64_t i = 100; i < 104; ++i)
    ASSERT_TRUE(dest.write(ChunkId{9, i}, in_chain1(data[i - 100])).has_value());  // not on the source
  route({0}, 2, {1}, /*last_first=*/true);
  ASSERT_TRUE(wait_synced(1, 2));
  expect_identical({0, 1}, 2);
  for (uint64_t i = 100; i < 104; ++i) EXPECT_FALSE(dest.stat(ChunkId{9, i}).has_value()) << i;
}

// A resync copy that reaches the syncing target after an update of the same
// chunk the source forwarded later (the copy was held up past the source's
// timeout, which released the chunk's lock, and a client's write then went
// through the chain) is older than what the target holds: refused, where it
// was staged below the committed version and rolled the chunk back (the
// retry then skipped it as delivered). The source orders its Forwards; a
// copy it sends after the update is applied.
TEST_F(StorageServiceTest, AResyncCopyOlderThanAnUpdateAppliedSinceIsRefused) {
  ChunkId id{14, 0};
  auto v1 = pattern(8192, 31), v2 = pattern(8192, 32), v3 = pattern(8192, 33);
  start(2);
  route({0}, 1);
  ASSERT_TRUE(write(0, 1, id, 0, v1).has_value());
  route({0}, 2, {1});
  ASSERT_TRUE(wait_synced(1, 2));
  auto w = write(0, 2, id, 0, v2);  // through the chain: node 1 syncs still (the routing says so)
  ASSERT_TRUE(w.has_value()) << w.error();
  ChunkEngine& syncing = nodes_[1]->engine(target_of(1));
  ASSERT_EQ(syncing.stat(id)->version, 2u);
  auto copy = [&](const std::vector<std::byte>& data, uint64_t version, uint64_t order) {
    auto req = forward_to_node1(id, proto::storage::UPDATE_REPLACE, version);
    req.set_chain_version(2);
    req.set_sync(true);
    req.set_sync_recorded(true);
    req.set_order(order);
    return replace_at_node1(req, data);
  };
  auto late = copy(v1, 1, 1);  // ordered before the write
  ASSERT_FALSE(late.has_value()) << "staged as version " << late->version();
  EXPECT_EQ(late.error().code(), Code::kVersionMismatch) << late.error();
  EXPECT_EQ(syncing.stat(id)->version, 2u);
  EXPECT_EQ(syncing.stat(id)->chunk_crc, crc32c(v2));
  auto later = copy(v3, 3, UINT64_MAX);  // ordered after it
  ASSERT_TRUE(later.has_value()) << later.error();
  EXPECT_EQ(syncing.stat(id)->version, 3u);
  EXPECT_EQ(syncing.stat(id)->chunk_crc, crc32c(v3));
}

// A resync remembers which chunks an update delivered to the successor
// (their copies are skipped) for its current window, and for at most
// resync_window chunks past it (its memory bound). With a window of 3 and
// writes to the 10 chunks it must copy while its first window waits: the
// first window's 3 and the next 3 are skipped, the last 4 copied (the
// listings it holds predate the writes), and the replicas end identical.
TEST_F(StorageServiceTest, AResyncRemembersABoundedNumberOfChunksItsWritesDelivered) {
  for (size_t n = 0; n < 2; ++n)
    nodes_.push_back(std::make_unique<Node>(io_, "s" + std::to_string(n + 1),
                                            std::vector<mgmt::TargetId>{target_of(n)}, 0, 0, 0,
                                            std::chrono::hours(1), nullptr, 65536, 3000, /*resync_window=*/3));
  route({0}, 1);
  ChunkEngine& source = nodes_[0]->engine(target_of(0));
  std::vector<std::vector<std::byte>> data;  // outlives the updates: an Update does not own its bytes
  for (uint64_t i = 0; i < 20; ++i) data.push_back(pattern(1000, 700 + i));
  for (uint64_t i = 0; i < 10; ++i) {
    Update u = Update::write(0, data[i]);
    u.chain_id = 1;
    ASSERT_TRUE(source.write(ChunkId{9, i}, u).has_value());
  }
  auto outcome = [](const char* name) -> metrics::Counter& {
    return metrics::Registry::global().counter("weft_storage_resync_chunks_total", "",
                                               {{"server", "s1"}, {"outcome", name}});
  };
  const uint64_t copied = outcome("copied").value(), delivered = outcome("delivered").value();
  {
    fault::Scope hold("storage.resync.window.hold");
    route({0}, 2, {1}, /*last_first=*/true);
    StorageService& head = nodes_[0]->service();
    for (int i = 0; i < 1000 && hold.triggered() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (hold.triggered() == 0) GTEST_SKIP() << "fault injection compiled out";
    ASSERT_EQ(head.resync_chunks_tracked(), 3u);
    for (uint64_t i = 0; i < 10; ++i) {
      auto w = write(0, 2, ChunkId{9, i}, 0, data[10 + i]);
      ASSERT_TRUE(w.has_value()) << i << ": " << w.error();
    }
    EXPECT_EQ(head.resync_chunks_tracked(), 6u);
  }
  ASSERT_TRUE(wait_synced(1, 2));
  expect_identical({0, 1}, 2);
  EXPECT_EQ(outcome("delivered").value() - delivered, 6u);
  EXPECT_EQ(outcome("copied").value() - copied, 4u);
  EXPECT_EQ(read(0, 2, ChunkId{9, 9}).data, data[19]);
}

// A resync reports SyncDone only for the chain version it ran at, and only
// while that still holds: one superseded by a newer chain version (here while
// it waited for an update in progress, step 1) does not report, and a syncing
// target refuses a SyncDone of a version older than its routing's (delayed on
// the way). Only the current round reaches the sync listener (mgmtd).
TEST_F(StorageServiceTest, OnlyTheCurrentResyncRoundReportsSyncDone) {
  start(2);
  route({0}, 1);
  std::mutex mu;
  std::vector<mgmt::ChainVersion> heard;  // GUARDED_BY(mu)
  auto heard_now = [&] {
    std::lock_guard lock(mu);
    return heard;
  };
  nodes_[1]->service().set_sync_listener([&](mgmt::TargetId, mgmt::ChainId, mgmt::ChainVersion v) {
    std::lock_guard lock(mu);
    heard.push_back(v);
  });
  StorageTarget* source = nodes_[0]->service().target(target_of(0));
  auto in_progress = block_on(io_.at(0).get_executor(), source->locks().lock(ChunkId{3, 3}));
  route({0}, 2, {1});
  route({0}, 3, {1});  // same members, a new version: the round of version 2 is over
  in_progress.release();
  for (int i = 0; i < 500 && (nodes_[0]->service().resyncs_running() > 0 || heard_now().empty()); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(nodes_[0]->service().resyncs_running(), 0u);
  EXPECT_EQ(heard_now(), std::vector<mgmt::ChainVersion>{3});

  proto::storage::SyncDoneRequest late;
  late.set_target_id(target_of(1));
  late.set_chain_id(1);
  late.set_chain_version(2);
  auto r = client_.call<proto::storage::SyncDoneReply>(nodes_[1]->ep(), methods::kSyncDone, late);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code(), Code::kStaleRouting) << r.error();
  EXPECT_EQ(heard_now(), std::vector<mgmt::ChainVersion>{3});
}

TEST_F(StorageServiceTest, FullTargetAnswersNoSpaceAndStillServesReads) {
  start(1, 2u << 20);
  route({0}, 1);
  auto data = pattern(kChunk, 1);
  ASSERT_TRUE(write(0, 1, ChunkId{1, 0}, 0, data).has_value());
  auto w = write_until_refused(1, data).second;
  ASSERT_FALSE(w.has_value());
  EXPECT_EQ(w.error().code(), Code::kNoSpace);
  EXPECT_EQ(read(0, 1, ChunkId{1, 0}).data, data);
}

// A member out of room refuses an update before it forwards it, also when it
// stages while the forward runs (whole-chunk writes at the head, every
// member after it): the slot is taken first. Here the configured capacity
// is what runs out, on the head and then on the middle member; the members
// after it never commit what it refused (they used to: replicas diverged
// while the client was told kNoSpace).
TEST_F(StorageServiceTest, AMemberOutOfRoomRefusesBeforeItsSuccessorsCommit) {
  for (size_t small : {0, 1}) {
    SCOPED_TRACE(small);
    nodes_.clear();
    std::vector<uint64_t> capacities{2u << 20, 0, 0};
    capacities[small] = 1u << 20;
    start_with_capacities(capacities);
    route({0, 1, 2}, 1);
    auto data = pattern(kChunk, 1);
    auto [i, w] = write_until_refused(0, data);
    ASSERT_FALSE(w.has_value());
    EXPECT_EQ(w.error().code(), Code::kNoSpace) << w.error();
    const uint32_t absent = static_cast<uint32_t>(Code::kNotFound);
    for (auto [code, version] : reads_of(ChunkId{1, i}, 1)) EXPECT_EQ(code, absent) << "replicas diverge";
    for (size_t n = 0; n < 3; ++n) EXPECT_EQ(pending_on(n, ChunkId{1, i}), 0u) << "node " << n;
    expect_identical({0, 1, 2}, 1);
  }
}

// The same for a disk pool whose queue is full when the head would stage a
// whole-chunk write: it is refused before the forward (kOverloaded, which
// the client retries), not after the tail committed it.
TEST_F(StorageServiceTest, AFullDiskPoolRefusesAPipelinedWriteBeforeTheForward) {
  start(2);
  route({0, 1}, 1);
  ChunkId id{21, 0};
  auto data = pattern(kChunk, 2);
  {
    fault::Scope full("storage.disk_pool.full", {.hits_max = 1});
    auto w = write(0, 1, id, 0, data, 6, 1);
    if (full.triggered() == 0) GTEST_SKIP() << "fault injection compiled out";
    ASSERT_FALSE(w.has_value());
    EXPECT_EQ(w.error().code(), Code::kOverloaded) << w.error();
  }
  for (auto [code, version] : reads_of(id, 1))
    EXPECT_EQ(code, static_cast<uint32_t>(Code::kNotFound)) << "replicas diverge";
  auto w = write(0, 1, id, 0, data, 6, 1);
  ASSERT_TRUE(w.has_value()) << w.error();
  expect_identical({0, 1}, 1);
}

// Commits and aborts finish an update the disk pool admitted: a full queue
// does not refuse them. Refused, a tail's commit failed a write its stage
// had passed, and a head's abort (after a failed forward) left the version
// pending, its slot taken, until the next update of the chunk.
TEST_F(StorageServiceTest, AFullDiskPoolRefusesNoCommitOrAbort) {
  ChunkId id{22, 0};
  auto base = pattern(8192, 1);
  ASSERT_NO_FATAL_FAILURE(start_with_chunk(2, {0, 1}, id, base));
  {
    // A partial write: the head stages, the tail stages; then the commits.
    fault::Scope full("storage.disk_pool.full", {.hits_max = 1, .skip = 2});
    auto w = write(0, 1, id, 100, pattern(50, 2), 7, 1);
    EXPECT_TRUE(w.has_value()) << w.error();
  }
  {
    fault::Scope fail("storage.forward.fail", {.hits_max = 1});
    fault::Scope full("storage.disk_pool.full", {.hits_max = 1, .skip = 1});  // after the head's stage
    auto w = write(0, 1, id, 200, pattern(50, 3), 7, 2);
    if (fail.triggered() == 0) GTEST_SKIP() << "fault injection compiled out";
    ASSERT_FALSE(w.has_value());
  }
  EXPECT_EQ(pending_on(0, id), 0u) << "the abort ran";
  EXPECT_EQ(pending_on(1, id), 0u);
  expect_identical({0, 1}, 1);
}

// A member whose copy of a chunk rots fails the read-modify-write of every
// partial write of it, while its successor (which stages at the same time)
// commits the attempt. It queues its own repair and answers retryably
// (kUnavailable): the client's retry, once repaired, succeeds and leaves the
// chain identical (the tail finds that version committed already).
TEST_F(StorageServiceTest, ACorruptMiddleQueuesItsRepairAndTheRetryConverges) {
  ChunkId id{20, 0};
  auto data = pattern(16384, 3);
  ASSERT_NO_FATAL_FAILURE(start_with_chunk(3, {0, 1, 2}, id, data));
  ASSERT_NO_FATAL_FAILURE(corrupt(1, id, 100));
  uint64_t repaired = repairs(1, "repaired");
  auto patch = pattern(100, 4);
  auto w = write(0, 1, id, 8192, patch, 5, 10);
  ASSERT_FALSE(w.has_value());
  EXPECT_EQ(w.error().code(), Code::kUnavailable) << w.error();
  EXPECT_TRUE(w.error().retryable());
  ASSERT_TRUE(wait_repairs_done(1));
  EXPECT_EQ(repairs(1, "repaired"), repaired + 1);
  auto retry = write(0, 1, id, 8192, patch, 5, 10);
  ASSERT_TRUE(retry.has_value()) << retry.error();
  EXPECT_EQ(retry->version(), 2u);
  std::copy(patch.begin(), patch.end(), data.begin() + 8192);
  for (size_t n = 0; n < 3; ++n) EXPECT_EQ(read(n, 1, id).data, data) << "node " << n;
  expect_identical({0, 1, 2}, 1);
}

// The rebuild of a successor's chunk (it answered kVersionMismatch) reads
// the whole committed copy here: damage there also queues a repair and
// answers retryably. Here the head's truncate reads only the blocks it
// keeps; its successor never had the chunk.
TEST_F(StorageServiceTest, ARebuildFromACorruptCopyQueuesItsRepair) {
  ChunkId id{23, 0};
  ASSERT_NO_FATAL_FAILURE(start_with_chunk(2, {0}, id, pattern(16384, 5)));
  ASSERT_NO_FATAL_FAILURE(corrupt(0, id, 12288 + 100));
  route({0, 1}, 2);
  uint64_t tried = repairs(0, "failed") + repairs(0, "no_good_copy") + repairs(0, "repaired");
  proto::storage::TruncateRequest req;
  req.set_chain_id(1);
  req.set_chain_version(2);
  req.mutable_chunk()->set_inode(id.inode);
  req.mutable_chunk()->set_index(id.index);
  req.set_length(8192);
  req.set_chunk_size(kChunk);
  auto t = client_.call<proto::storage::WriteReply>(nodes_[0]->ep(), methods::kTruncate, req);
  ASSERT_FALSE(t.has_value());
  EXPECT_EQ(t.error().code(), Code::kUnavailable) << t.error();
  ASSERT_TRUE(wait_repairs_done(0));
  EXPECT_EQ(repairs(0, "failed") + repairs(0, "no_good_copy") + repairs(0, "repaired"), tried + 1);
  EXPECT_EQ(pending_on(0, id), 0u);
}

// Chunks of a chain their target left (another target took its place) go once
// the grace is over; its chunks of unknown chain, and every other target's, stay.
TEST_F(StorageServiceTest, ATargetRemovesTheChunksOfAChainItLeft) {
  using namespace std::chrono_literals;
  nodes_.push_back(std::make_unique<Node>(io_, "a", std::vector<mgmt::TargetId>{101}, 0, 0, 0, 0s));
  nodes_.push_back(std::make_unique<Node>(io_, "b", std::vector<mgmt::TargetId>{201, 202}, 0, 0, 0, 0s));
  Node &a = *nodes_[0], &b = *nodes_[1];
  auto set = [&](std::vector<ChainSpec> chains, uint64_t version) {
    return client_.set_routing({a.ep(), b.ep()}, {{101, a.address()}, {201, b.address()}, {202, b.address()}},
                               chains, version);
  };
  ASSERT_TRUE(set({ChainSpec{1, 1, {{101, TargetState::kServing}, {201, TargetState::kServing}}},
                   ChainSpec{2, 1, {{202, TargetState::kServing}}}},
                  1));
  auto data = pattern(10000, 4);
  for (uint64_t i = 0; i < 5; ++i) ASSERT_TRUE(client_.write(a.ep(), 1, 1, ChunkId{1, i}, 0, data).has_value());
  ASSERT_TRUE(client_.write(b.ep(), 2, 1, ChunkId{2, 0}, 0, data).has_value());
  ASSERT_TRUE(b.engine(201).write(ChunkId{3, 0}, Update::write(0, data)).has_value());  // of unknown chain
  EXPECT_EQ(b.service().stray_sweep().run_once(), 0u) << "201 is in chain 1";
  ASSERT_EQ(b.engine(201).list(std::nullopt, 100)->size(), 6u);

  // 202 takes 201's place in chain 1.
  ASSERT_TRUE(set({ChainSpec{1, 2, {{101, TargetState::kServing}, {202, TargetState::kSyncing}}},
                   ChainSpec{2, 1, {{202, TargetState::kServing}}}},
                  2));
  proto::storage::ListChunksRequest req;
  req.set_target_id(201);
  req.set_chain_id(1);
  auto listed = client_.call<proto::storage::ListChunksReply>(b.ep(), methods::kListChunks, req);
  ASSERT_FALSE(listed.has_value()) << "a chain's chunks are listed only at its members";
  EXPECT_EQ(listed.error().code(), Code::kStaleRouting) << listed.error();
  // A client's listing (with the chain version) only where a read is served:
  // not at a syncing member, nor at an older version.
  req.set_target_id(202);
  req.set_chain_version(2);
  listed = client_.call<proto::storage::ListChunksReply>(b.ep(), methods::kListChunks, req);
  ASSERT_FALSE(listed.has_value()) << "listed at a syncing member";
  EXPECT_EQ(listed.error().code(), Code::kUnavailable) << listed.error();
  req.set_target_id(101);
  listed = client_.call<proto::storage::ListChunksReply>(a.ep(), methods::kListChunks, req);
  ASSERT_TRUE(listed.has_value()) << listed.error();
  EXPECT_EQ(listed->chunks_size(), 5);
  req.set_chain_version(1);
  listed = client_.call<proto::storage::ListChunksReply>(a.ep(), methods::kListChunks, req);
  ASSERT_FALSE(listed.has_value()) << "listed at an old chain version";
  EXPECT_EQ(listed.error().code(), Code::kStaleRouting) << listed.error();
  req.set_chain_version(0);
  b.service().stray_sweep().run_once();  // (its thread may have been first: one runs at a time)
  EXPECT_EQ(a.service().stray_sweep().run_once(), 0u);
  auto left = b.engine(201).list(std::nullopt, 100);
  ASSERT_TRUE(left.has_value());
  ASSERT_EQ(left->size(), 1u);
  EXPECT_EQ((*left)[0].id, (ChunkId{3, 0}));
  EXPECT_EQ(a.engine(101).list(std::nullopt, 100)->size(), 5u);
  EXPECT_TRUE(b.engine(202).stat(ChunkId{2, 0}).has_value());
  EXPECT_TRUE(b.engine(201).chains()->empty());
}

// Within the grace nothing goes.
TEST_F(StorageServiceTest, AChainsChunksStayForTheGraceAfterTheirTargetLeftIt) {
  nodes_.push_back(std::make_unique<Node>(io_, "a", std::vector<mgmt::TargetId>{1, 2}));
  Node& a = *nodes_[0];
  auto set = [&](mgmt::TargetId member, uint64_t version) {
    return client_.set_routing({a.ep()}, {{1, a.address()}, {2, a.address()}},
                               {ChainSpec{1, version, {{member, TargetState::kServing}}}}, version);
  };
  ASSERT_TRUE(set(1, 1));
  ASSERT_TRUE(client_.write(a.ep(), 1, 1, ChunkId{1, 0}, 0, pattern(5000, 1)).has_value());
  ASSERT_TRUE(set(2, 2));
  EXPECT_EQ(a.service().stray_sweep().run_once(), 0u);
  EXPECT_TRUE(a.engine(1).stat(ChunkId{1, 0}).has_value());
}

// A target put back into a chain while its old chunks of that chain go: no
// request of the chain is served there until the sweep has stopped (ListChunks
// is refused meanwhile), so the resync sees what was removed and copies it
// back. Without that, the resync would list the chunks, skip them as equal,
// and the sweep would then remove them from a target that counts as synced.
TEST_F(StorageServiceTest, ATargetRejoiningAChainWhileItsChunksGoGetsEveryChunkBack) {
  using namespace std::chrono_literals;
  nodes_.push_back(std::make_unique<Node>(io_, "a", std::vector<mgmt::TargetId>{101}, 0, 0, 0, 0s));
  nodes_.push_back(std::make_unique<Node>(io_, "b", std::vector<mgmt::TargetId>{201}, 0, 0, 0, 0s));
  Node &a = *nodes_[0], &b = *nodes_[1];
  auto set = [&](std::vector<std::pair<mgmt::TargetId, TargetState>> entries, uint64_t version) {
    return client_.set_routing({a.ep(), b.ep()}, {{101, a.address()}, {201, b.address()}},
                               {ChainSpec{1, version, std::move(entries)}}, version);
  };
  ASSERT_TRUE(set({{101, TargetState::kServing}, {201, TargetState::kServing}}, 1));
  for (uint64_t i = 0; i < 8; ++i)
    ASSERT_TRUE(client_.write(a.ep(), 1, 1, ChunkId{1, i}, 0, pattern(10000, i)).has_value());

  uint64_t removed = 0;
  std::thread sweep;
  {
    fault::Scope hold("storage.stray_sweep.before_remove");
    ASSERT_TRUE(set({{101, TargetState::kServing}}, 2));  // 201 leaves the chain
    sweep = std::thread([&] { removed = b.service().stray_sweep().run_once(); });
    for (int i = 0; i < 1000 && hold.triggered() == 0; ++i) std::this_thread::sleep_for(5ms);
    ASSERT_GT(hold.triggered(), 0) << "the sweep never reached its first removal";
    ASSERT_TRUE(set({{101, TargetState::kServing}, {201, TargetState::kSyncing}}, 3));  // and rejoins it
    proto::storage::ListChunksRequest req;
    req.set_target_id(201);
    req.set_chain_id(1);
    auto listed = client_.call<proto::storage::ListChunksReply>(b.ep(), methods::kListChunks, req);
    if (listed.has_value()) {
      ADD_FAILURE() << "listed while the sweep may still remove";
    } else {
      EXPECT_EQ(listed.error().code(), Code::kStaleRouting) << listed.error();
      EXPECT_NE(listed.error().message().find("still removing"), std::string::npos) << listed.error();
    }
    std::this_thread::sleep_for(200ms);  // the resync tries meanwhile
  }
  sweep.join();
  EXPECT_LE(removed, 1u) << "the sweep stops at the next chunk once it sees the target back";
  ASSERT_TRUE(wait_synced(1, 3));
  expect_identical({0, 1}, 3);
  ASSERT_EQ(list_chain1(1)->chunks_size(), 8);
}

}  // namespace
}  // namespace weft::storage
