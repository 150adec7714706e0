// Hostile requests against the storage service: raw requests of every method
// of storage/service_methods.h, built field by field (none of
// StorageTestClient's care) and sent through rpc::Client to three in-process
// servers holding chain 1 (head, middle, tail). A fixed-seed mt19937_64
// (printed; WEFT_HOSTILE_SEED overrides) mixes the chunks of a known inode,
// absent chunks and other inodes, inodes and indexes 0 and UINT64_MAX, chains
// and targets that do not exist, stale and future chain versions, offsets and
// lengths past the chunk size up to UINT32_MAX, payloads whose length or CRC
// disagree with the request, empty payloads, batch reads of thousands of
// ranges and huge lengths, absurd truncates, Forwards, SyncDones and
// RepairChunks of bogus versions, orders and update kinds (undefined ones
// too), garbage listing cursors and RemoveRange ranges, garbage routings and
// status requests, client ids 0 and random, sequence numbers reused with
// other content, and bodies that do not decode.
// Why: a storage server takes requests from every client and every peer. A
// bad one must get a deliberate error (never kInternal), neither hang nor
// break the server, and never touch acknowledged data. The known inode's
// chunks are written and acknowledged first; the storm sends the known inode
// only updates that are invalid by construction (the poison_* functions say
// why each is), and every reply that shows a known chunk must show it
// unchanged; afterwards every replica still serves it byte for byte, and its
// checksums verify.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "common/hostile_draw.h"
#include "common/crc32c.h"
#include "proto/storage.pb.h"
#include "rpc/server.h"
#include "storage/storage_server.h"
#include "storage/storage_test_client.h"
#include "storage/test_util.h"

namespace weft::storage {
namespace {

using testing::pattern;

constexpr char kToken[] = "hostile-token";
constexpr uint64_t kDefaultSeed = 0x5eed'5707'a6e0'0001;
constexpr int kRounds = 230;  // each round sends one request of every family
constexpr uint32_t kCallTimeoutMs = 10000;
constexpr auto kHung = std::chrono::milliseconds(5000);  // a call slower than this hung
constexpr size_t kServers = 3;
constexpr uint32_t kChunkMax = 1u << 20;  // the targets' chunk_size_max
constexpr mgmt::ChainId kChain = 1;
constexpr mgmt::ChainVersion kCv = 7;       // stale below, future above
constexpr uint64_t kRoutingVersion = 1000;  // a SetRouting below it is ignored
constexpr uint64_t kKnownInode = 0x4b4e;
constexpr uint64_t kKnownClient = 0xacced;  // client id of the acknowledged updates (the storm never uses it)

mgmt::TargetId target_of(size_t server) { return 101 + 100 * server; }
bool is_known_inode(const ChunkId& id) { return id.inode == kKnownInode; }

uint64_t storm_seed() { return weft::hostile_seed(kDefaultSeed); }

// One storage server with one target, in this process.
class Server {
 public:
  Server(rpc::IoPool& io, size_t n) {
    StorageConfig sc;
    sc.targets.push_back(
        {.id = target_of(n), .path = dir_.path() + "/t", .reserve_bytes = 1u << 20, .chunk_size_max = kChunkMax});
    sc.disk_threads = 4;
    sc.forward_timeout_ms = 3000;
    sc.scrub_bytes_per_sec = 0;  // nothing reads the chunks behind the test's back
    const std::string name = "s" + std::to_string(n);
    auto s = open_storage_service(io, sc, rpc::ServiceConfig{.cluster_token = kToken, .name = name});
    EXPECT_TRUE(s.has_value()) << s.error();
    if (!s) return;
    service_ = std::move(*s);
    server_ = std::make_unique<rpc::Server>(io, rpc::ServerOptions{.cluster_token = kToken, .name = name});
    service_->register_methods(*server_);
    auto port = server_->listen("127.0.0.1", 0);
    EXPECT_TRUE(port.has_value()) << port.error();
    port_ = port ? *port : 0;
  }
  ~Server() {
    if (server_) server_->stop();
    if (service_) service_->stop();
  }
  bool ok() const { return port_ != 0; }
  rpc::Endpoint ep() const { return {"127.0.0.1", port_}; }
  StorageService& service() { return *service_; }

 private:
  testing::TempDir dir_;
  std::unique_ptr<StorageService> service_;
  std::unique_ptr<rpc::Server> server_;
  uint16_t port_ = 0;
};

// What the known inode holds: acknowledged before the storm, never changed by it.
struct Known {
  std::vector<std::byte> bytes;
  uint64_t version = 0;
};
using KnownChunks = std::map<ChunkId, Known>;

// An acknowledged update's (kKnownClient, sequence) at the head's dedup table.
struct Acked {
  uint64_t sequence = 0;
  ChunkId id;
  pb::UpdateKind kind = pb::UPDATE_WRITE;
  uint64_t version = 0;
};

// Hostile field values.
class Hostile : public HostileDraw {
 public:
  Hostile(uint64_t seed, std::vector<ChunkId> known) : HostileDraw(seed), known_(std::move(known)) {}


  // Starts a request: half of them name the chain as it is (they reach the
  // checks past the routing), the others anything.
  void next_request() { routed_ = chance(50); }

  // A known chunk, an absent one of the known inode, one of a few chunks of
  // other inodes (written, removed, written again), or any other.
  ChunkId chunk() {
    const size_t pick = below(100);
    if (pick < 30) return known_[below(known_.size())];
    if (pick < 40) return {kKnownInode, index()};
    if (pick < 80) return {one_of<uint64_t>({1, kKnownInode - 1, kKnownInode + 1}), one_of<uint64_t>({0, 1, 2, 3})};
    return {other_inode(), index()};
  }
  // Never the known inode; its neighbours often.
  uint64_t other_inode() {
    uint64_t i = one_of<uint64_t>({0, 1, 2, kKnownInode - 1, kKnownInode + 1, kKnownInode + 1, UINT64_MAX, u64()});
    return i == kKnownInode ? i + 1 : i;
  }
  uint64_t index() {
    return one_of<uint64_t>({0, 1, 2, 3, between(4, 64), uint64_t{1} << 40, UINT64_MAX - 1, UINT64_MAX, u64()});
  }
  // An index of the known inode above every known chunk's.
  uint64_t past_known_index() {
    uint64_t last = 0;
    for (const auto& id : known_) last = std::max(last, id.index);
    return chance(50) ? last + 1 : between(last + 1, UINT64_MAX);
  }
  uint32_t chain() { return routed_ || chance(75) ? kChain : bad_chain(); }
  uint32_t bad_chain() {
    uint32_t c = one_of<uint32_t>({0, 2, 77, UINT32_MAX, u32()});
    return c == kChain ? 0 : c;
  }
  uint64_t chain_version() { return routed_ || chance(75) ? kCv : bad_chain_version(); }
  uint64_t bad_chain_version() {
    uint64_t v = one_of<uint64_t>({0, 1, kCv - 1, kCv + 1, UINT64_MAX, u64()});
    return v == kCv ? 0 : v;
  }
  size_t server() { return below(kServers); }
  size_t not_head() { return 1 + below(kServers - 1); }
  // Where an update from a client goes: the head, or any server.
  size_t head_mostly() { return routed_ || chance(85) ? 0 : server(); }
  // Where a Forward goes: a successor, or any server.
  size_t successor_mostly() { return routed_ || chance(85) ? not_head() : 0; }
  // The target a request to `server` names: its own, or any.
  uint64_t target_mostly(size_t server) { return routed_ || chance(75) ? target_of(server) : target(); }
  // One of the chain's targets, or one that exists nowhere.
  uint64_t target() { return chance(60) ? target_of(server()) : stray_target(); }
  uint64_t stray_target() {
    uint64_t t = one_of<uint64_t>({0, 1, 999, UINT64_MAX, u64()});
    for (size_t n = 0; n < kServers; ++n)
      if (t == target_of(n)) t = 0;
    return t;
  }
  uint32_t offset() {
    return one_of<uint32_t>({0, u32() % 8192, u32() % kChunkMax, kChunkMax - 1, kChunkMax, kChunkMax + 1,
                             UINT32_MAX - 1, UINT32_MAX, u32()});
  }
  uint32_t length() {
    return one_of<uint32_t>(
        {0, 1, 4096, u32() % 65536, u32() % kChunkMax, kChunkMax, kChunkMax + 1, UINT32_MAX, u32()});
  }
  // A stated length other than `actual`.
  uint32_t length_other_than(size_t actual) {
    uint32_t l = one_of<uint32_t>(
        {0, 1, static_cast<uint32_t>(actual + 1), static_cast<uint32_t>(actual - 1), UINT32_MAX, u32()});
    return l == actual ? static_cast<uint32_t>(actual + 1) : l;
  }
  uint32_t chunk_size() {
    return chance(60) ? 0
                      : one_of<uint32_t>(
                            {1, 3, 4096, kChunkMax / 2, kChunkMax, kChunkMax + 1, 2 * kChunkMax, UINT32_MAX, u32()});
  }
  uint32_t nonzero() { return 1 + u32() % UINT32_MAX; }
  std::vector<std::byte> bytes(size_t n) { return pattern(n, u64()); }
  std::vector<std::byte> payload() {
    return bytes(one_of<size_t>({0, 1, 7, 512, 4096, between(1, 65536), between(1, 65536), kChunkMax, kChunkMax + 1}));
  }
  uint64_t client() {
    uint64_t c = one_of<uint64_t>({0, 0, 1, 2, u64()});
    return c == kKnownClient ? 0 : c;
  }
  uint64_t sequence() { return one_of<uint64_t>({0, 1, 2, between(3, 100), UINT64_MAX, u64()}); }
  uint32_t attempt() { return chance(80) ? 0 : one_of<uint32_t>({1, 2, UINT32_MAX}); }

 private:
  std::vector<ChunkId> known_;
  bool routed_ = false;
};

// One request as sent, with what its answer must be.
struct Shot {
  const char* name = "";
  rpc::MethodId method;
  size_t server = 0;
  std::string body;
  std::string text;  // the request, for failure messages
  std::string why;   // for the known inode: what makes it invalid
  std::vector<std::byte> payload;
  bool must_fail = false;                              // invalid by construction
  bool undecodable = false;                            // a body cut short: kProtocol is its due
  std::function<void(const rpc::RawResponse&)> check;  // of a success
};

template <class Req>
Shot make_shot(const char* name, rpc::MethodId method, size_t server, const Req& req,
               std::vector<std::byte> payload = {}) {
  Shot s;
  s.name = name;
  s.method = method;
  s.server = server;
  s.body = req.SerializeAsString();
  s.text = req.ShortDebugString();
  if (s.text.size() > 800) s.text = s.text.substr(0, 800) + fmt::format("... ({} chars)", s.text.size());
  s.payload = std::move(payload);
  return s;
}

std::string describe(const Shot& s) {
  return fmt::format("storage.{} to s{} {{{}}} payload {} bytes (CRC32C {:08x}){}{}", s.name, s.server, s.text,
                     s.payload.size(), crc32c(s.payload), s.why.empty() ? "" : ", invalid by ", s.why);
}

template <class Reply>
std::optional<Reply> parse(const rpc::RawResponse& raw) {
  Reply r;
  if (!r.ParseFromString(raw.body)) return std::nullopt;
  return r;
}

void set_chunk(pb::ChunkRef* ref, const ChunkId& id) {
  ref->set_inode(id.inode);
  ref->set_index(id.index);
}
ChunkId chunk_of(const pb::ChunkRef& ref) { return {ref.inode(), ref.index()}; }

// A code no failure may carry: kInternal, or no weft code at all.
bool bad_wire_code(uint32_t code) { return code_from_wire(code) == Code::kInternal; }

// ---- Poisons: what makes an update of the known inode invalid, whatever its
// other (random) fields. Each is refused before anything is staged (routing,
// head, payload and kind checks run first), or by the stage of every member
// (a length past the chunk size: each member checks the same request). The
// (client id, sequence) of the storm's updates never names an acknowledged
// update of the known inode (kKnownClient is not used), so no dedup entry
// answers one as done either.
// Not poisons, so never sent to the known inode: a Forward's version or its
// end past the chunk size. A member with a successor that refuses the version
// rebuilds the update from its own copy and sends the successor the result as
// a REPLACE (any version) once it matches the expected length and CRC, which
// the request itself names (chain_update.cc, forward_out): the tail may apply
// what the middle refuses. Nor a RepairChunk of a known chunk at the chain's
// version to the head: valid, it rewrites the chunk (with the same bytes).

// Write: stale or unknown chain, not the head, a CRC or length that disagrees
// with the payload, no payload, an end past the chunk size, a chunk size above
// the target's maximum.
std::string poison_write(Hostile& h, pb::WriteRequest& q, std::vector<std::byte>& data, size_t& server) {
  switch (h.below(8)) {
    case 0:
      q.set_chain_version(h.bad_chain_version());
      return "chain version";
    case 1:
      q.set_chain_id(h.bad_chain());
      return "chain";
    case 2:
      server = h.not_head();
      return "not the head";
    case 3:
      q.set_data_crc32c(crc32c(data) ^ h.nonzero());
      return "CRC";
    case 4:
      q.set_length(h.length_other_than(data.size()));
      return "stated length";
    case 5:
      data.clear();
      q.set_length(0);
      q.set_data_crc32c(0);
      return "no payload";
    case 6: {
      if (data.empty()) data = h.bytes(1 + h.below(4096));
      q.set_chunk_size(h.chance(50) ? 0 : static_cast<uint32_t>(h.between(1, kChunkMax)));
      const uint64_t limit = q.chunk_size() == 0 ? kChunkMax : q.chunk_size();
      const uint64_t first_bad = data.size() > limit ? 0 : limit - data.size() + 1;
      q.set_offset(static_cast<uint32_t>(h.chance(50) ? first_bad : h.between(first_bad, UINT32_MAX)));
      q.set_length(static_cast<uint32_t>(data.size()));
      q.set_data_crc32c(crc32c(data));
      return "end past the chunk size";
    }
    default:
      q.set_chunk_size(static_cast<uint32_t>(h.between(kChunkMax + 1, UINT32_MAX)));
      return "chunk size";
  }
}

// Truncate: stale or unknown chain, not the head, a length past the chunk
// size, a chunk size above the target's maximum.
std::string poison_truncate(Hostile& h, pb::TruncateRequest& q, size_t& server) {
  switch (h.below(5)) {
    case 0:
      q.set_chain_version(h.bad_chain_version());
      return "chain version";
    case 1:
      q.set_chain_id(h.bad_chain());
      return "chain";
    case 2:
      server = h.not_head();
      return "not the head";
    case 3: {
      q.set_chunk_size(h.chance(50) ? 0 : static_cast<uint32_t>(h.between(1, kChunkMax)));
      const uint64_t limit = q.chunk_size() == 0 ? kChunkMax : q.chunk_size();
      q.set_length(static_cast<uint32_t>(h.chance(50) ? limit + 1 : h.between(limit + 1, UINT32_MAX)));
      return "length past the chunk size";
    }
    default:
      q.set_chunk_size(static_cast<uint32_t>(h.between(kChunkMax + 1, UINT32_MAX)));
      return "chunk size";
  }
}

// Remove, RemoveRange, RepairChunk: stale or unknown chain, not the head.
template <class Req>
std::string poison_routing(Hostile& h, Req& q, size_t& server) {
  switch (h.below(3)) {
    case 0:
      q.set_chain_version(h.bad_chain_version());
      return "chain version";
    case 1:
      q.set_chain_id(h.bad_chain());
      return "chain";
    default:
      server = h.not_head();
      return "not the head";
  }
}

// Forward: stale or unknown chain, a target other than the one addressed, the
// head addressed, an undefined update kind, a payload that disagrees with a
// WRITE's or REPLACE's CRC, a repair of another kind than REPLACE.
std::string poison_forward(Hostile& h, pb::ForwardRequest& q, std::vector<std::byte>& data, size_t& server) {
  switch (h.below(7)) {
    case 0:
      q.set_chain_version(h.bad_chain_version());
      return "chain version";
    case 1:
      q.set_chain_id(h.bad_chain());
      return "chain";
    case 2:
      q.set_target_id(h.chance(50) ? h.stray_target() : target_of((server + 1 + h.below(kServers - 1)) % kServers));
      return "target";
    case 3:
      server = 0;
      return "the head addressed";
    case 4:
      q.set_kind(static_cast<pb::UpdateKind>(h.one_of<int>({4, 7, 100, INT32_MAX, -1})));
      return "kind";
    case 5:
      q.set_kind(h.chance(50) ? pb::UPDATE_WRITE : pb::UPDATE_REPLACE);
      if (data.empty()) data = h.bytes(1 + h.below(4096));
      q.set_length(static_cast<uint32_t>(data.size()));
      q.set_data_crc32c(crc32c(data) ^ h.nonzero());
      return "CRC";
    default:
      q.set_repair(true);
      q.set_kind(h.one_of({pb::UPDATE_WRITE, pb::UPDATE_TRUNCATE, pb::UPDATE_REMOVE}));
      return "repair kind";
  }
}

// ---- One request of each method (for the known inode: poisoned).

// The fields of every client update (Write, Truncate, Remove).
template <class Req>
void set_update(Req& q, uint32_t chain, uint64_t chain_version, const ChunkId& id, uint64_t client, uint64_t sequence,
                uint32_t attempt) {
  q.set_chain_id(chain);
  q.set_chain_version(chain_version);
  set_chunk(q.mutable_chunk(), id);
  q.set_client_id(client);
  q.set_sequence(sequence);
  q.set_attempt(attempt);
}

// ... with hostile values (drawn in this order).
template <class Req>
void set_hostile_update(Hostile& h, Req& q, const ChunkId& id) {
  const uint32_t chain = h.chain();
  const uint64_t chain_version = h.chain_version();
  const uint64_t client = h.client();
  const uint64_t sequence = h.sequence();
  set_update(q, chain, chain_version, id, client, sequence, h.attempt());
}

Shot write_shot(Hostile& h) {
  const ChunkId id = h.chunk();
  std::vector<std::byte> data = h.payload();
  pb::WriteRequest q;
  set_hostile_update(h, q, id);
  q.set_offset(h.chance(50) ? 0 : h.offset());
  q.set_length(static_cast<uint32_t>(data.size()));
  q.set_data_crc32c(crc32c(data));
  q.set_chunk_size(h.chunk_size());
  if (h.chance(10)) q.set_length(h.length_other_than(data.size()));
  if (h.chance(10)) q.set_data_crc32c(q.data_crc32c() ^ h.nonzero());
  size_t server = h.head_mostly();
  std::string why;
  if (is_known_inode(id)) why = poison_write(h, q, data, server);
  Shot s = make_shot("write", methods::kWrite, server, q, std::move(data));
  s.why = std::move(why);
  s.must_fail = is_known_inode(id);
  return s;
}

Shot truncate_shot(Hostile& h) {
  const ChunkId id = h.chunk();
  pb::TruncateRequest q;
  set_hostile_update(h, q, id);
  q.set_length(h.length());
  q.set_chunk_size(h.chunk_size());
  size_t server = h.head_mostly();
  std::string why;
  if (is_known_inode(id)) why = poison_truncate(h, q, server);
  Shot s = make_shot("truncate", methods::kTruncate, server, q);
  s.why = std::move(why);
  s.must_fail = is_known_inode(id);
  return s;
}

Shot remove_shot(Hostile& h) {
  const ChunkId id = h.chunk();
  pb::RemoveRequest q;
  set_hostile_update(h, q, id);
  size_t server = h.head_mostly();
  std::string why;
  if (is_known_inode(id)) why = poison_routing(h, q, server);
  Shot s = make_shot("remove", methods::kRemove, server, q);
  s.why = std::move(why);
  s.must_fail = is_known_inode(id);
  return s;
}

// Of the known inode: poisoned, or from past every known chunk (valid, and
// nothing of it to remove).
Shot remove_range_shot(Hostile& h) {
  pb::RemoveRangeRequest q;
  q.set_chain_id(h.chain());
  q.set_chain_version(h.chain_version());
  q.set_inode(h.chance(80) ? h.chunk().inode : h.one_of<uint64_t>({0, UINT64_MAX, h.u64()}));
  q.set_first_index(h.index());
  q.set_count_max(h.one_of<uint32_t>({0, 1, 2, 100, 4096, 4097, UINT32_MAX, h.u32()}));
  size_t server = h.head_mostly();
  std::string why;
  bool must_fail = false;
  if (q.inode() == kKnownInode) {
    must_fail = h.chance(60);
    if (must_fail) {
      why = poison_routing(h, q, server);
    } else {
      q.set_first_index(h.past_known_index());
      why = "(valid) a first index past every known chunk";
    }
  }
  Shot s = make_shot("remove_range", methods::kRemoveRange, server, q);
  s.why = std::move(why);
  s.must_fail = must_fail;
  return s;
}

// An update kind, undefined ones too.
pb::UpdateKind update_kind(Hostile& h) {
  if (h.chance(85)) return h.one_of({pb::UPDATE_WRITE, pb::UPDATE_TRUNCATE, pb::UPDATE_REPLACE, pb::UPDATE_REMOVE});
  return static_cast<pb::UpdateKind>(h.one_of<int>({4, 5, 100, INT32_MAX, -1, INT32_MIN}));
}

void add_held(Hostile& h, pb::ForwardRequest& q) {
  size_t n = h.chance(95) ? h.below(4) : 2000 + h.below(100);
  for (size_t i = 0; i < n; ++i) {
    auto* k = q.add_held();
    k->set_client_id(h.client());
    k->set_sequence(h.sequence());
  }
}

Shot forward_shot(Hostile& h) {
  const ChunkId id = h.chunk();
  size_t server = h.successor_mostly();
  pb::ForwardRequest q;
  q.set_chain_id(h.chain());
  q.set_chain_version(h.chain_version());
  q.set_target_id(h.target_mostly(server));
  set_chunk(q.mutable_chunk(), id);
  q.set_kind(update_kind(h));
  q.set_version(h.one_of<uint64_t>({0, 1, 1, 2, 3, h.between(4, 100), UINT64_MAX, h.u64()}));
  const bool data_kind = q.kind() == pb::UPDATE_WRITE || q.kind() == pb::UPDATE_REPLACE;
  std::vector<std::byte> data = data_kind || h.chance(10) ? h.payload() : std::vector<std::byte>{};
  q.set_offset(h.chance(60) ? 0 : h.offset());
  q.set_length(q.kind() == pb::UPDATE_TRUNCATE ? h.length() : static_cast<uint32_t>(data.size()));
  q.set_data_crc32c(crc32c(data));
  q.set_chunk_size(h.chunk_size());
  q.set_client_id(h.client());
  q.set_sequence(h.sequence());
  // The chunk as the sender staged it: what a whole write or REPLACE of
  // `data` stages (so that some succeed), or anything.
  q.set_expect_chunk_length(h.chance(60) ? static_cast<uint32_t>(data.size()) : h.length());
  q.set_expect_chunk_crc32c(h.chance(60) ? crc32c(data) : h.u32());
  q.set_sync(h.chance(20));
  q.set_sync_recorded(h.chance(20));
  q.set_repair(h.chance(10));
  q.set_forget_dedup(h.chance(10));
  q.set_order(h.one_of<uint64_t>({0, 1, UINT64_MAX, h.u64()}));
  add_held(h, q);
  if (h.chance(10)) q.set_length(h.length_other_than(data.size()));
  if (h.chance(10)) q.set_data_crc32c(q.data_crc32c() ^ h.nonzero());
  std::string why;
  if (is_known_inode(id)) why = poison_forward(h, q, data, server);
  Shot s = make_shot("forward", methods::kForward, server, q, std::move(data));
  s.why = std::move(why);
  s.must_fail = is_known_inode(id);
  return s;
}

// To the head, for a member of the chain or a stray target; of the known
// inode also stale, unknown or not to the head, or for a target off the chain.
Shot repair_chunk_shot(Hostile& h) {
  const ChunkId id = h.chunk();
  pb::RepairChunkRequest q;
  q.set_chain_id(h.chain());
  q.set_chain_version(h.chain_version());
  set_chunk(q.mutable_chunk(), id);
  q.set_target_id(h.chance(80) ? target_of(h.server()) : h.stray_target());
  size_t server = h.head_mostly();
  std::string why;
  if (is_known_inode(id)) {
    if (h.chance(75)) {
      why = poison_routing(h, q, server);
    } else {
      q.set_target_id(h.stray_target());
      why = "target off the chain";
    }
  }
  Shot s = make_shot("repair_chunk", methods::kRepairChunk, server, q);
  s.why = std::move(why);
  s.must_fail = is_known_inode(id);
  return s;
}

Shot sync_done_shot(Hostile& h) {
  size_t server = h.server();
  pb::SyncDoneRequest q;
  q.set_target_id(h.target_mostly(server));
  q.set_chain_id(h.chain());
  q.set_chain_version(h.one_of<uint64_t>({kCv, kCv - 1, kCv + 1, 0, UINT64_MAX, h.u64()}));
  q.set_chunks_copied(h.u64());
  q.set_chunks_removed(h.u64());
  return make_shot("sync_done", methods::kSyncDone, server, q);
}

Shot target_status_shot(Hostile& h) {
  size_t server = h.server();
  pb::TargetStatusRequest q;
  q.set_target_id(h.one_of<uint64_t>({0, target_of(server), h.target()}));
  Shot s = make_shot("target_status", methods::kTargetStatus, server, q);
  s.check = [](const rpc::RawResponse& raw) {
    auto r = parse<pb::TargetStatusReply>(raw);
    ASSERT_TRUE(r.has_value()) << "an unparsable TargetStatusReply";
    EXPECT_EQ(r->routing_version(), kRoutingVersion) << "the routing changed";
  };
  return s;
}

// ---- SetRouting: one that parses is older than the routing in force (so
// ignored); one at or past it is spoiled (a bad address, an undefined target
// state, a chain naming a target without an address).

std::string valid_address(Hostile& h) {
  return h.one_of<std::string>({"127.0.0.1:1", "10.1.2.3:65535", "[::1]:7001", "storage-9.example:9000"});
}

// Entries of a shape the routing accepts: serving, then syncing, then
// offline targets (at least one serving), or one last-serving and offline ones.
// (Other shapes: spoil_routing.)
void add_entries(Hostile& h, pb::RoutingChain& chain, std::vector<uint64_t> ids) {
  std::shuffle(ids.begin(), ids.end(), h.rng());
  ids.resize(1 + h.below(ids.size()));
  const bool last_serving = h.chance(20);
  const size_t serving = last_serving ? 0 : 1 + h.below(ids.size());
  const size_t syncing = last_serving ? 0 : h.below(ids.size() - serving + 1);
  for (size_t i = 0; i < ids.size(); ++i) {
    auto* e = chain.add_entries();
    e->set_target_id(ids[i]);
    if (last_serving)
      e->set_state(i == 0 ? 4 : 3);
    else if (i < serving)
      e->set_state(h.chance(30) ? 0 : 1);  // 0 reads as serving
    else
      e->set_state(i < serving + syncing ? 2 : 3);
  }
}

void random_routing(Hostile& h, pb::Routing& r) {
  std::set<uint64_t> ids;
  for (size_t i = h.below(5); i > 0; --i) {
    uint64_t id = h.chance(50) ? target_of(h.server()) : h.one_of<uint64_t>({0, 1, h.u64()});
    auto* t = r.add_targets();
    t->set_id(id);
    t->set_address(valid_address(h));
    ids.insert(id);
  }
  if (ids.empty()) return;
  for (size_t i = h.below(4); i > 0; --i) {
    auto* c = r.add_chains();
    c->set_id(h.chance(50) ? kChain : h.u32());
    c->set_version(h.one_of<uint64_t>({0, kCv - 1, kCv, kCv + 1, UINT64_MAX, h.u64()}));
    add_entries(h, *c, std::vector<uint64_t>(ids.begin(), ids.end()));
  }
}

// A chain of a shape no routing has (mgmt::check_chain): none of its
// targets, one twice, states out of order, syncing and none serving,
// last-serving beside serving, two last-serving.
void add_misshapen_chain(Hostile& h, pb::Routing& r) {
  auto* t = r.add_targets();
  t->set_id(h.u64() | 1);
  t->set_address(valid_address(h));
  auto* c = r.add_chains();
  c->set_id(h.chance(50) ? kChain : h.u32());
  c->set_version(kCv + 1);
  using S = mgmt::TargetState;
  const std::vector<std::vector<S>> shapes = {
      {}, {S::kServing, S::kServing}, {S::kSyncing, S::kServing}, {S::kSyncing},
      {S::kLastServing, S::kServing}, {S::kLastServing, S::kLastServing}};
  const auto& shape = shapes[h.below(shapes.size())];
  for (size_t i = 0; i < shape.size(); ++i) {
    auto* e = c->add_entries();
    // A second entry names the same target (the "twice" shape) or another one.
    uint64_t id = t->id();
    if (i > 0 && shape[0] != S::kServing) {
      auto* other = r.add_targets();
      other->set_id(t->id() + 2 * i);
      other->set_address(valid_address(h));
      id = other->id();
    }
    e->set_target_id(id);
    e->set_state(static_cast<uint32_t>(shape[i]));
  }
}

std::string spoil_routing(Hostile& h, pb::Routing& r) {
  switch (h.below(4)) {
    case 3:
      add_misshapen_chain(h, r);
      return "a misshapen chain";
    case 0: {
      auto* t = r.add_targets();
      t->set_id(h.u64());
      t->set_address(
          h.one_of<std::string>({"", "storage", ":7000", "host:", "host:0", "host:65536", "a:b:7000", "host:70x",
                                 "[::1:7000", "[]:1", std::string(mgmt::kAddressBytesMax, 'h') + ":1"}));
      return "target address";
    }
    case 1: {
      auto* t = r.add_targets();
      t->set_id(h.u64());
      t->set_address(valid_address(h));
      auto* e = r.add_chains()->add_entries();
      e->set_target_id(t->id());
      e->set_state(static_cast<uint32_t>(h.between(5, UINT32_MAX)));
      return "target state";
    }
    default: {
      std::set<uint64_t> ids;
      for (const auto& t : r.targets()) ids.insert(t.id());
      uint64_t absent = h.u64();
      while (ids.contains(absent)) ++absent;
      auto* c = r.add_chains();
      c->set_id(h.chance(50) ? kChain : h.u32());
      c->set_version(kCv + 1);
      c->add_entries()->set_target_id(absent);
      return "a target without an address";
    }
  }
}

// Or, now and then, the routing in force sent again (valid: nothing changes).
Shot set_routing_shot(Hostile& h, const pb::Routing& current) {
  pb::SetRoutingRequest q;
  random_routing(h, *q.mutable_routing());
  const bool again = h.chance(5);
  const bool older = !again && h.chance(50);
  std::string why;
  if (again) {
    *q.mutable_routing() = current;
  } else if (older) {
    q.mutable_routing()->set_version(h.between(0, kRoutingVersion - 1));
  } else {
    q.mutable_routing()->set_version(h.one_of<uint64_t>({kRoutingVersion, kRoutingVersion + 1, UINT64_MAX, h.u64()}));
    why = spoil_routing(h, *q.mutable_routing());
  }
  Shot s = make_shot("set_routing", methods::kSetRouting, h.server(), q);
  s.why = std::move(why);
  s.must_fail = !older && !again;
  s.check = [](const rpc::RawResponse& raw) {
    auto r = parse<pb::SetRoutingReply>(raw);
    ASSERT_TRUE(r.has_value()) << "an unparsable SetRoutingReply";
    EXPECT_EQ(r->version(), kRoutingVersion) << "an older routing was taken";
  };
  return s;
}

// ---- Reads and listings: what they show of the known inode must be what
// was acknowledged.

// A read range (many ranges: small or huge lengths).
void add_range(Hostile& h, pb::BatchReadRequest& q, bool small) {
  auto* r = q.add_ranges();
  r->set_chain_id(h.chain());
  r->set_chain_version(h.chain_version());
  set_chunk(r->mutable_chunk(), h.chunk());
  r->set_offset(h.chance(50) ? 0 : h.offset());
  r->set_length(small ? static_cast<uint32_t>(h.below(2048)) : h.length());
}

// The known chunk's bytes that range (offset, length) reads.
std::vector<std::byte> expected_range(const Known& k, uint64_t offset, uint64_t length) {
  const uint64_t begin = std::min<uint64_t>(offset, k.bytes.size());
  const uint64_t end = std::min<uint64_t>(offset + length, k.bytes.size());
  return {k.bytes.begin() + static_cast<ptrdiff_t>(begin), k.bytes.begin() + static_cast<ptrdiff_t>(end)};
}

// Every range has its result, no result is kInternal, and every range read
// from the known inode is a known chunk as acknowledged.
void check_batch_read(const pb::BatchReadRequest& q, const rpc::RawResponse& raw, const KnownChunks& known) {
  auto r = parse<pb::BatchReadReply>(raw);
  ASSERT_TRUE(r.has_value()) << "an unparsable BatchReadReply";
  ASSERT_EQ(r->results_size(), q.ranges_size());
  auto payload = raw.payload.span().first(raw.payload_len);
  size_t at = 0;
  for (int i = 0; i < q.ranges_size(); ++i) {
    const auto& range = q.ranges(i);
    const auto& res = r->results(i);
    EXPECT_FALSE(bad_wire_code(res.code())) << "range " << i << ": code " << res.code() << ": " << res.message();
    if (res.code() != 0) continue;
    ASSERT_LE(at + res.length(), payload.size()) << "range " << i << " past the payload";
    auto data = payload.subspan(at, res.length());
    at += res.length();
    EXPECT_EQ(res.crc32c(), crc32c(data)) << "range " << i;
    const ChunkId id = chunk_of(range.chunk());
    if (!is_known_inode(id)) continue;
    auto it = known.find(id);
    if (it == known.end()) {
      ADD_FAILURE() << "chunk " << id << " appeared in the known inode: " << range.ShortDebugString();
      continue;
    }
    EXPECT_EQ(res.version(), it->second.version) << id;
    EXPECT_EQ(res.chunk_length(), it->second.bytes.size()) << id;
    auto want = expected_range(it->second, range.offset(), range.length());
    EXPECT_TRUE(std::equal(data.begin(), data.end(), want.begin(), want.end()))
        << "chunk " << id << " changed: " << range.ShortDebugString();
  }
  EXPECT_EQ(at, payload.size()) << "payload bytes no result accounts for";
}

Shot batch_read_shot(Hostile& h, const KnownChunks& known) {
  pb::BatchReadRequest q;
  const int mode = static_cast<int>(h.below(100));
  // Mostly a few ranges; thousands of small ones, past the limit of ranges, or
  // hundreds of huge ones.
  const size_t n = mode < 80   ? 1 + h.below(8)
                   : mode < 88 ? h.between(1000, kBatchReadRangesMax)
                   : mode < 92 ? h.between(kBatchReadRangesMax + 1, 6000)
                               : h.between(100, 500);
  for (size_t i = 0; i < n; ++i) add_range(h, q, mode >= 80 && mode < 92);
  Shot s = make_shot("batch_read", methods::kBatchRead, h.server(), q);
  s.check = [q, &known](const rpc::RawResponse& raw) { check_batch_read(q, raw, known); };
  return s;
}

void expect_known_meta(const pb::ChunkMeta& m, const KnownChunks& known) {
  const ChunkId id = chunk_of(m.chunk());
  if (!is_known_inode(id)) return;
  auto it = known.find(id);
  if (it == known.end()) {
    ADD_FAILURE() << "chunk " << id << " appeared in the known inode: " << m.ShortDebugString();
    return;
  }
  EXPECT_EQ(m.version(), it->second.version) << m.ShortDebugString();
  EXPECT_EQ(m.length(), it->second.bytes.size()) << m.ShortDebugString();
  EXPECT_EQ(m.chunk_crc32c(), crc32c(it->second.bytes)) << m.ShortDebugString();
  EXPECT_EQ(m.chain_id(), kChain) << m.ShortDebugString();
}

Shot get_chunk_meta_shot(Hostile& h, const KnownChunks& known) {
  size_t server = h.server();
  pb::GetChunkMetaRequest q;
  q.set_target_id(h.target_mostly(server));
  if (h.chance(95)) set_chunk(q.mutable_chunk(), h.chunk());
  Shot s = make_shot("get_chunk_meta", methods::kGetChunkMeta, server, q);
  s.check = [&known](const rpc::RawResponse& raw) {
    auto r = parse<pb::GetChunkMetaReply>(raw);
    ASSERT_TRUE(r.has_value()) << "an unparsable GetChunkMetaReply";
    expect_known_meta(r->meta(), known);
    if (is_known_inode(chunk_of(r->meta().chunk()))) {
      EXPECT_EQ(r->meta().pending_version(), 0u) << r->meta().ShortDebugString();
    }
  };
  return s;
}

// A listing keeps its bounds, order and filter, shows the known chunks as
// acknowledged, and leaves out none of them in the range it covers.
void check_listing(const pb::ListChunksRequest& q, const pb::ListChunksReply& r, const KnownChunks& known) {
  const size_t max = q.count_max() == 0 ? 1024 : std::min<size_t>(q.count_max(), 65536);
  EXPECT_LE(static_cast<size_t>(r.chunks_size()), max);
  std::set<ChunkId> listed;
  std::optional<ChunkId> last;
  for (const auto& c : r.chunks()) {
    const ChunkId id = chunk_of(c.chunk());
    EXPECT_TRUE(!q.has_start() || id >= chunk_of(q.start())) << "before the start: " << c.ShortDebugString();
    EXPECT_TRUE(!q.has_end() || id < chunk_of(q.end())) << "past the end: " << c.ShortDebugString();
    EXPECT_TRUE(!last || *last < id) << "out of order: " << c.ShortDebugString();
    EXPECT_TRUE(q.chain_id() == 0 || c.chain_id() == q.chain_id() || c.chain_id() == 0)
        << "of another chain: " << c.ShortDebugString();
    expect_known_meta(c, known);
    listed.insert(id);
    last = id;
  }
  if (q.chain_id() != 0 && q.chain_id() != kChain) return;
  for (const auto& [id, k] : known) {
    bool in_range = (!q.has_start() || id >= chunk_of(q.start())) && (!q.has_end() || id < chunk_of(q.end())) &&
                    (!r.more() || (last && id <= *last));
    EXPECT_TRUE(!in_range || listed.contains(id)) << "known chunk " << id << " missing from the listing";
  }
}

Shot list_chunks_shot(Hostile& h, const KnownChunks& known) {
  size_t server = h.server();
  pb::ListChunksRequest q;
  q.set_target_id(h.target_mostly(server));
  if (h.chance(70)) set_chunk(q.mutable_start(), h.chunk());
  if (h.chance(50)) set_chunk(q.mutable_end(), h.chunk());
  q.set_count_max(h.one_of<uint32_t>({0, 1, 2, 100, 65536, 65537, UINT32_MAX, h.u32()}));
  q.set_chain_id(h.chance(50) ? 0 : h.chain());
  q.set_chain_version(h.chance(50) ? 0 : h.chain_version());
  Shot s = make_shot("list_chunks", methods::kListChunks, server, q);
  s.check = [q, &known](const rpc::RawResponse& raw) {
    auto r = parse<pb::ListChunksReply>(raw);
    ASSERT_TRUE(r.has_value()) << "an unparsable ListChunksReply";
    check_listing(q, *r, known);
  };
  return s;
}

// ---- Sequence numbers of the acknowledged updates reused: on their chunk for
// the same kind (a retry: answered from the dedup table, with the first
// outcome, whatever the new bytes), else refused (invalid by construction:
// another chunk or another kind).
Shot reused_shot(Hostile& h, const Acked& a) {
  const ChunkId id = h.chance(60) ? a.id : h.chunk();
  const pb::UpdateKind kind = h.one_of({pb::UPDATE_WRITE, pb::UPDATE_TRUNCATE, pb::UPDATE_REMOVE});
  const uint32_t attempt = h.attempt();
  Shot s;
  if (kind == pb::UPDATE_WRITE) {
    std::vector<std::byte> data = h.bytes(1 + h.below(4096));
    pb::WriteRequest q;
    set_update(q, kChain, kCv, id, kKnownClient, a.sequence, attempt);
    q.set_offset(static_cast<uint32_t>(h.below(kChunkMax - data.size())));
    q.set_length(static_cast<uint32_t>(data.size()));
    q.set_data_crc32c(crc32c(data));
    s = make_shot("write", methods::kWrite, 0, q, std::move(data));
  } else if (kind == pb::UPDATE_TRUNCATE) {
    pb::TruncateRequest q;
    set_update(q, kChain, kCv, id, kKnownClient, a.sequence, attempt);
    q.set_length(static_cast<uint32_t>(h.below(kChunkMax)));
    s = make_shot("truncate", methods::kTruncate, 0, q);
  } else {
    pb::RemoveRequest q;
    set_update(q, kChain, kCv, id, kKnownClient, a.sequence, attempt);
    s = make_shot("remove", methods::kRemove, 0, q);
  }
  const bool retry = id == a.id && kind == a.kind;
  s.why = retry ? "(a retry) the sequence of an acknowledged update" : "a sequence used for another update";
  s.must_fail = !retry;
  if (retry)  // of a write or a truncate (no acknowledged update was a removal)
    s.check = [version = a.version](const rpc::RawResponse& raw) {
      auto r = parse<pb::WriteReply>(raw);
      ASSERT_TRUE(r.has_value()) << "an unparsable WriteReply";
      EXPECT_EQ(r->version(), version) << "a retry was applied again";
    };
  return s;
}

enum class Family : uint8_t {
  kBatchRead,
  kWrite,
  kTruncate,
  kRemove,
  kGetChunkMeta,
  kListChunks,
  kRemoveRange,
  kForward,
  kSyncDone,
  kRepairChunk,
  kSetRouting,
  kTargetStatus,
  kReused,
};
constexpr std::array kFamilies = {
    Family::kBatchRead,  Family::kWrite,        Family::kTruncate, Family::kRemove,   Family::kGetChunkMeta,
    Family::kListChunks, Family::kRemoveRange,  Family::kForward,  Family::kSyncDone, Family::kRepairChunk,
    Family::kSetRouting, Family::kTargetStatus, Family::kReused,
};

class HostileRequestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (size_t n = 0; n < kServers; ++n) {
      servers_.push_back(std::make_unique<Server>(io_, n));
      ASSERT_TRUE(servers_.back()->ok()) << "server " << n << " did not start";
    }
    ASSERT_NO_FATAL_FAILURE(route());
    ASSERT_NO_FATAL_FAILURE(write_known());
  }

  rpc::Endpoint ep(size_t n) const { return servers_[n]->ep(); }

  // Chain 1 over the three servers' targets, head first, at kCv.
  void route() {
    routing_.set_version(kRoutingVersion);
    auto* chain = routing_.add_chains();
    chain->set_id(kChain);
    chain->set_version(kCv);
    for (size_t n = 0; n < kServers; ++n) {
      auto* t = routing_.add_targets();
      t->set_id(target_of(n));
      t->set_address(ep(n).to_string());
      auto* e = chain->add_entries();
      e->set_target_id(target_of(n));
      e->set_state(static_cast<uint32_t>(mgmt::TargetState::kServing));
    }
    pb::SetRoutingRequest q;
    *q.mutable_routing() = routing_;
    for (size_t n = 0; n < kServers; ++n) {
      auto r = client_.call<pb::SetRoutingReply>(ep(n), methods::kSetRouting, q);
      ASSERT_TRUE(r.has_value()) << r.error();
    }
  }

  // Whole writes of several sizes (one a full chunk, two far apart indexes),
  // a partial overwrite, a truncate that grows and one that shrinks.
  void write_known() {
    const std::pair<uint64_t, size_t> layout[] = {{0, kChunkMax}, {1, 100000},  {2, 4096},
                                                  {3, 1},         {17, 300001}, {uint64_t{1} << 40, 65543}};
    for (const auto& [index, size] : layout)
      ASSERT_NO_FATAL_FAILURE(acknowledge_write({kKnownInode, index}, 0, pattern(size, index + 1)));
    ASSERT_NO_FATAL_FAILURE(acknowledge_write({kKnownInode, 1}, 5000, pattern(3000, 99)));
    ASSERT_NO_FATAL_FAILURE(acknowledge_truncate({kKnownInode, 2}, 10000));
    ASSERT_NO_FATAL_FAILURE(acknowledge_truncate({kKnownInode, 17}, 200000));
  }

  void acknowledge_write(const ChunkId& id, uint32_t offset, const std::vector<std::byte>& data) {
    const uint64_t seq = ++sequence_;
    auto w = client_.write(ep(0), kChain, kCv, id, offset, data, kKnownClient, seq);
    ASSERT_TRUE(w.has_value()) << w.error();
    Known& k = known_[id];
    k.bytes.resize(std::max<size_t>(k.bytes.size(), offset + data.size()));
    std::copy(data.begin(), data.end(), k.bytes.begin() + offset);
    k.version = w->version();
    ASSERT_EQ(w->chunk_length(), k.bytes.size());
    ASSERT_EQ(w->chunk_crc32c(), crc32c(k.bytes));
    acked_.push_back({seq, id, pb::UPDATE_WRITE, k.version});
  }

  void acknowledge_truncate(const ChunkId& id, uint32_t length) {
    pb::TruncateRequest q;
    q.set_chain_id(kChain);
    q.set_chain_version(kCv);
    set_chunk(q.mutable_chunk(), id);
    q.set_length(length);
    q.set_client_id(kKnownClient);
    q.set_sequence(++sequence_);
    auto t = client_.call<pb::WriteReply>(ep(0), methods::kTruncate, q);
    ASSERT_TRUE(t.has_value()) << t.error();
    Known& k = known_[id];
    k.bytes.resize(length);  // zeros past the old end
    k.version = t->version();
    ASSERT_EQ(t->chunk_crc32c(), crc32c(k.bytes));
    acked_.push_back({q.sequence(), id, pb::UPDATE_TRUNCATE, k.version});
  }

  std::vector<ChunkId> known_ids() const {
    std::vector<ChunkId> ids;
    for (const auto& [id, k] : known_) ids.push_back(id);
    return ids;
  }

  Shot shot_of(Family f, Hostile& h) {
    switch (f) {
      case Family::kBatchRead:
        return batch_read_shot(h, known_);
      case Family::kWrite:
        return write_shot(h);
      case Family::kTruncate:
        return truncate_shot(h);
      case Family::kRemove:
        return remove_shot(h);
      case Family::kGetChunkMeta:
        return get_chunk_meta_shot(h, known_);
      case Family::kListChunks:
        return list_chunks_shot(h, known_);
      case Family::kRemoveRange:
        return remove_range_shot(h);
      case Family::kForward:
        return forward_shot(h);
      case Family::kSyncDone:
        return sync_done_shot(h);
      case Family::kRepairChunk:
        return repair_chunk_shot(h);
      case Family::kSetRouting:
        return set_routing_shot(h, routing_);
      case Family::kTargetStatus:
        return target_status_shot(h);
      case Family::kReused:
        return reused_shot(h, acked_[h.below(acked_.size())]);
    }
    return {};
  }

  // Now and then a payload to a method that takes none (ignored), or a body
  // cut in the middle of a field tag (it cannot decode).
  static void maybe_spoil(Hostile& h, Shot& s) {
    const bool takes_payload = s.method == methods::kWrite || s.method == methods::kForward;
    if (!takes_payload && h.chance(3)) s.payload = h.bytes(1 + h.below(65536));
    if (!h.chance(2)) return;
    s.body += "\xff\xff";
    s.undecodable = true;
    s.must_fail = true;
    s.why = "a body that does not decode";
    s.check = nullptr;
  }

  // Sends `s` and judges the answer; false when the server stopped answering.
  bool fire(const Shot& s) {
    rpc::CallOptions o;
    o.timeout_ms = kCallTimeoutMs;
    if (!s.payload.empty()) o.payload.push_back(s.payload);
    const auto start = std::chrono::steady_clock::now();
    auto r = block_on(io_.at(0).get_executor(), client_.raw().call_raw(ep(s.server), s.method, s.body, std::move(o)));
    const auto took = std::chrono::steady_clock::now() - start;
    outcomes_[s.name][std::string(r ? "ok" : code_name(r.error().code()))]++;
    if (took > kHung) {
      ADD_FAILURE() << "no answer for " << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
                    << " ms: " << describe(s);
      return false;
    }
    if (r) {
      if (s.must_fail) {
        ADD_FAILURE() << "an invalid request succeeded: " << describe(s);
      } else if (s.check) {
        s.check(*r);
      }
      return true;
    }
    const Code c = r.error().code();
    if (c == Code::kDisconnected) {
      ADD_FAILURE() << "the server dropped the connection: " << r.error() << "\n  request: " << describe(s);
      return false;
    }
    // Every method exists, and only a cut body may fail to decode.
    const bool deliberate =
        c != Code::kInternal && c != Code::kUnknownMethod && (c != Code::kProtocol || s.undecodable);
    EXPECT_TRUE(deliberate) << r.error() << "\n  request: " << describe(s);
    return true;
  }

  void print_outcomes(int sent, std::chrono::steady_clock::duration took) const {
    std::printf("%d requests in %lld ms\n", sent,
                static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(took).count()));
    for (const auto& [name, codes] : outcomes_) {
      const auto [line, total] = describe_counts(codes);
      std::printf("  storage.%s: %d:%s\n", name.c_str(), total, line.c_str());
    }
  }

  // Every replica serves every known chunk as acknowledged (version, bytes,
  // CRC), with nothing pending, and its copy verifies.
  void expect_known_intact() {
    for (size_t n = 0; n < kServers; ++n)
      for (const auto& [id, k] : known_) {
        auto r = client_.read(ep(n), kChain, kCv, id, 0, kChunkMax);
        ASSERT_TRUE(r.has_value()) << "s" << n << ": " << r.error();
        EXPECT_EQ(r->result.code(), 0u) << "s" << n << " " << id << ": " << r->result.message();
        EXPECT_EQ(r->result.version(), k.version) << "s" << n << " " << id;
        EXPECT_TRUE(r->data == k.bytes) << "s" << n << ": chunk " << id << " changed";
        EXPECT_EQ(r->result.crc32c(), crc32c(k.bytes)) << "s" << n << " " << id;
        pb::GetChunkMetaRequest q;
        q.set_target_id(target_of(n));
        set_chunk(q.mutable_chunk(), id);
        auto meta = client_.call<pb::GetChunkMetaReply>(ep(n), methods::kGetChunkMeta, q);
        ASSERT_TRUE(meta.has_value()) << "s" << n << ": " << meta.error();
        expect_known_meta(meta->meta(), known_);
        EXPECT_EQ(meta->meta().pending_version(), 0u) << "s" << n << " " << id;
        auto verified = servers_[n]->service().target(target_of(n))->engine().verify(id);
        EXPECT_TRUE(verified.has_value()) << "s" << n << " " << id << ": " << verified.error();
      }
  }

  // The chain still takes a write and serves it from its tail; the routing is the one set.
  void expect_still_serving() {
    const ChunkId fresh{kKnownInode + 7, 0};
    auto data = pattern(50000, 7);
    auto w = client_.write(ep(0), kChain, kCv, fresh, 0, data);
    ASSERT_TRUE(w.has_value()) << w.error();
    auto r = client_.read(ep(kServers - 1), kChain, kCv, fresh, 0, kChunkMax);
    ASSERT_TRUE(r.has_value()) << r.error();
    EXPECT_TRUE(r->data == data);
    for (size_t n = 0; n < kServers; ++n) {
      auto s = client_.status(ep(n), target_of(n));
      ASSERT_TRUE(s.has_value()) << s.error();
      EXPECT_EQ(s->routing_version(), kRoutingVersion) << "s" << n;
    }
  }

  rpc::IoPool io_{2};
  testing::StorageTestClient client_{io_, kToken};
  std::vector<std::unique_ptr<Server>> servers_;
  pb::Routing routing_;  // in force on every server
  KnownChunks known_;
  std::vector<Acked> acked_;
  uint64_t sequence_ = 0;
  std::map<std::string, HostileCodeCounts> outcomes_;
};

TEST_F(HostileRequestTest, EveryMethodAnswersHostileRequestsClearlyAndKeepsAcknowledgedData) {
  const uint64_t seed = storm_seed();
  std::printf("hostile request seed: %llu (WEFT_HOSTILE_SEED overrides)\n", static_cast<unsigned long long>(seed));
  Hostile h(seed, known_ids());
  auto order = kFamilies;
  const auto start = std::chrono::steady_clock::now();
  int sent = 0;
  for (int round = 0; round < kRounds; ++round) {
    std::shuffle(order.begin(), order.end(), h.rng());
    for (Family f : order) {
      h.next_request();
      Shot s = shot_of(f, h);
      maybe_spoil(h, s);
      ++sent;
      ASSERT_TRUE(fire(s)) << "the server stopped answering: the storm ends here";
    }
  }
  print_outcomes(sent, std::chrono::steady_clock::now() - start);
  expect_known_intact();
  expect_still_serving();
}

// SyncDones may name any chain: those of chains the routing here does not
// know are refused (the sender's resync tries again once it does), and the
// record TargetStatus reports keeps only what mgmtd may still need
// (StorageTarget::retain_synced). They used to pile up, one per chain id ever
// sent, until TargetStatus's reply outgrew the frame limit (kInternal).
TEST_F(HostileRequestTest, SyncDonesOfUnknownChainsAreRefusedAndTheRecordStaysSmall) {
  const size_t tail = kServers - 1;
  auto sync_done = [&](uint64_t chain, uint64_t version) {
    pb::SyncDoneRequest q;
    q.set_target_id(target_of(tail));
    q.set_chain_id(static_cast<uint32_t>(chain));
    q.set_chain_version(version);
    return client_.call<pb::SyncDoneReply>(ep(tail), methods::kSyncDone, q);
  };
  auto synced = [&] {
    pb::TargetStatusRequest q;
    q.set_target_id(target_of(tail));
    auto r = client_.call<pb::TargetStatusReply>(ep(tail), methods::kTargetStatus, q);
    EXPECT_TRUE(r.has_value()) << r.error();
    std::map<uint64_t, uint64_t> out;
    if (r && r->targets_size() == 1)
      for (const auto& c : r->targets(0).synced()) out[c.chain_id()] = c.synced_chain_version();
    return out;
  };
  for (uint64_t i = 0; i < 2000; ++i) {
    auto r = sync_done(0x80000000u + i, UINT64_MAX);
    ASSERT_FALSE(r.has_value()) << "a SyncDone of chain " << 0x80000000u + i << ", in no routing, was taken";
    EXPECT_EQ(r.error().code(), Code::kStaleRouting) << r.error();
  }
  EXPECT_TRUE(synced().empty());
  // Of the chain in force: recorded until a routing change shows mgmtd moved
  // on (the target serves at that version); at a version the routing here
  // does not know yet, kept.
  ASSERT_TRUE(sync_done(kChain, kCv).has_value());
  EXPECT_EQ(synced(), (std::map<uint64_t, uint64_t>{{kChain, kCv}}));
  pb::SetRoutingRequest again;
  *again.mutable_routing() = routing_;
  again.mutable_routing()->set_version(kRoutingVersion + 1);
  ASSERT_TRUE(client_.call<pb::SetRoutingReply>(ep(tail), methods::kSetRouting, again).has_value());
  EXPECT_TRUE(synced().empty()) << "kept after the routing showed the target serving at that version";
  ASSERT_TRUE(sync_done(kChain, kCv + 1).has_value());
  again.mutable_routing()->set_version(kRoutingVersion + 2);
  ASSERT_TRUE(client_.call<pb::SetRoutingReply>(ep(tail), methods::kSetRouting, again).has_value());
  EXPECT_EQ(synced(), (std::map<uint64_t, uint64_t>{{kChain, kCv + 1}})) << "a version ahead of the routing here";
}

}  // namespace
}  // namespace weft::storage
