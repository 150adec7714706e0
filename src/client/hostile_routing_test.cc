// Hostile routing from a cluster manager, as the client's routing cache
// (RoutingCache: GetRouting, from_proto, install) and chunk I/O (ChunkIo:
// route_of, endpoint_of, head_of, first_replica, group_reads) meet it. A fake
// mgmtd (an rpc::Server answering GetRouting only: the one mgmtd method the
// routing cache calls) hands out a pb::Routing each case builds: chains whose
// targets are not in the targets map, targets whose node is not in the nodes
// map, nodes of empty or malformed addresses ("", "host", "host:99999",
// "[::1", 300 bytes), tables without chains or naming chains that do not
// exist, chains of zero, duplicate or 10,000 targets, versions going
// backwards or to UINT64_MAX and back, duplicate ids, bodies that do not
// parse, and a routing of 100,000 chains.
// Why: mgmtd is trusted with where every byte goes; a broken or hostile one
// must cost the caller a clear error (or the right behaviour), never a crash,
// a hang, an assertion or a read / write sent where the routing does not say.
// Chains of 10,000 copies of one target on a dropping or a silent (never
// accepting) storage check that a round does not cost call_timeout_ms per entry.
// Every other storage address handed out is a DroppingStorage (counts connections,
// closes them): a call that should not be made shows as a connection.
// Nothing is random here (no seed).
// Faults found and fixed (src/client/routing_cache.cc), each sent below:
//   - an mgmtd answering a long poll at once ("unchanged", ignoring wait_ms)
//     was polled in a tight loop: ~15,000 GetRouting a second
//     (EagerUnchangedDoesNotSpin);
//   - routing version UINT64_MAX (the request's "none held" value) was
//     installed, and then every later snapshot (11, 12, ...) refused as older:
//     the client was wedged on it until mgmtd restarted from 1
//     (VersionsBackwardsAndUint64Max).
//   - any other far jump forward (UINT64_MAX - 1, 10^18) then back wedged
//     the client the same way: a jump of more than 2^32 past the version
//     held is refused, as mgmtd refuses such reports (AFarJumpIsRefused).
//   - addresses Endpoint::parse takes but check_address would not ("[::1"
//     -> host "[:" port 1, "a:b:c:1", "127.0.0.1:0", 300-byte host:1) were
//     connected to and failed only after the retry time (kIoError); every
//     address mgmtd would not register now fails at once (kProtocol:
//     MalformedAddresses), and a round over replicas keeps a retryable
//     error of one over such an address's (ABadReplicaAddressDoesNotEndRetries).
#include <gtest/gtest.h>

#include <asio/co_spawn.hpp>
#include <asio/use_future.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "client/chunk_io.h"
#include "client/in_process_mgmtd.h"
#include "client/placement.h"
#include "client/routing_cache.h"
#include "mgmt/service_methods.h"
#include "proto/mgmt.pb.h"
#include "rpc/server.h"

namespace weft::client {
namespace {

namespace pb = proto::mgmt;
using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;

constexpr char kToken[] = "hostile-routing-token";
constexpr uint32_t kChunkBytes = 64u << 10;
constexpr uint64_t kIno = 0x77;
constexpr uint32_t kCallTimeoutMs = 200;
constexpr uint32_t kRetryTimeMs = 300;
constexpr auto kHung = 10s;  // a ChunkIo call slower than this hung

// ---- Building routings ----

void add_node(pb::Routing& r, uint32_t id, const std::string& address, uint32_t kind = 1) {
  pb::Node* n = r.add_nodes();
  n->set_id(id);
  n->set_kind(kind);
  n->set_address(address);
  n->set_incarnation(1);
  n->set_state(1);
}

void add_target(pb::Routing& r, uint64_t id, uint32_t node) {
  pb::Target* t = r.add_targets();
  t->set_id(id);
  t->set_node_id(node);
  t->set_name("t" + std::to_string(id));
  t->set_state(1);
  t->set_reported(true);
}

void add_chain(pb::Routing& r, uint32_t id, const std::vector<uint64_t>& targets, uint32_t table = 1) {
  pb::Chain* c = r.add_chains();
  c->set_id(id);
  c->set_table_id(table);
  c->set_version(1);
  for (uint64_t t : targets) {
    pb::ChainEntry* e = c->add_entries();
    e->set_target_id(t);
    e->set_state(1);  // serving
  }
}

void add_table(pb::Routing& r, uint32_t id, const std::vector<uint32_t>& chains) {
  pb::ChainTable* t = r.add_tables();
  t->set_id(id);
  t->set_replicas(1);
  for (uint32_t c : chains) t->add_chains(c);
}

// ---- The fake mgmtd ----

class FakeMgmtd {
 public:
  FakeMgmtd() {
    server_ = std::make_unique<rpc::Server>(io_, rpc::ServerOptions{.cluster_token = kToken, .name = "fake-mgmtd"},
                                            registry_);
    server_->add_blocking(mgmt::kGetRouting, "mgmt.GetRouting", [this](rpc::ServerCall& call) { return serve(call); });
    port_ = server_->listen("127.0.0.1", 0).value();
  }
  ~FakeMgmtd() {
    server_->stop();
    io_.stop();
  }
  uint16_t port() const { return port_; }

  // Hands out `r` from now on (a long poll of another version ends at once).
  void set(const pb::Routing& r) {
    std::lock_guard lock(mu_);
    routing_ = r;
    body_.clear();
  }
  // Answers every GetRouting with `body` (not a GetRoutingReply) from now on.
  void set_body(std::string body) {
    std::lock_guard lock(mu_);
    body_ = std::move(body);
  }
  // Ignores wait_ms: answers "unchanged" at once.
  void set_eager(bool eager) { eager_ = eager; }
  uint64_t calls() const { return calls_.load(); }

 private:
  Status serve(rpc::ServerCall& call) {
    calls_.fetch_add(1);
    pb::GetRoutingRequest req;
    if (!req.ParseFromString(call.body)) return Status(Code::kProtocol, "fake mgmtd: bad GetRouting");
    // A long poll on the version handed out: waits (at most 100 ms, so the
    // server stops fast) for a change.
    const auto until = SteadyClock::now() + std::chrono::milliseconds(std::min<uint32_t>(req.wait_ms(), 100));
    while (true) {
      {
        std::lock_guard lock(mu_);
        if (!body_.empty()) {
          call.response_body = body_;
          return Status();
        }
        pb::GetRoutingReply reply;
        if (req.known_version() != routing_.version()) {
          reply.set_version(routing_.version());
          *reply.mutable_routing() = routing_;
          reply.SerializeToString(&call.response_body);
          return Status();
        }
        if (eager_.load() || SteadyClock::now() >= until) {
          reply.set_unchanged(true);
          reply.set_version(routing_.version());
          reply.SerializeToString(&call.response_body);
          return Status();
        }
      }
      std::this_thread::sleep_for(5ms);
    }
  }

  metrics::Registry registry_;
  rpc::IoPool io_{1};
  std::unique_ptr<rpc::Server> server_;
  uint16_t port_ = 0;
  std::mutex mu_;
  pb::Routing routing_;  // GUARDED_BY(mu_)
  std::string body_;     // GUARDED_BY(mu_)
  std::atomic<bool> eager_{false};
  std::atomic<uint64_t> calls_{0};
};

// ---- The fixture ----

class HostileRoutingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Version 1: one good chain (1) on the dropping storage, so start() succeeds.
    pb::Routing r = base(1);
    mgmtd_.set(r);
    ASSERT_TRUE(routing_.start());
  }
  void TearDown() override { routing_.stop(); }

  // Node 1 (the dropping storage), target 1 on it, chain 1 of table 1 over it.
  pb::Routing base(uint64_t version) const {
    pb::Routing r;
    r.set_version(version);
    add_node(r, 1, storage_.address());
    add_target(r, 1, 1);
    add_chain(r, 1, {1});
    add_table(r, 1, {1});
    return r;
  }

  // Hands `r` out and waits (bounded) until the client holds its version.
  // Hands `r` out and checks, after a poll's time, that the client still
  // holds routing version `held` (it refused `r`).
  void offer_refused(const pb::Routing& r, uint64_t held) {
    mgmtd_.set(r);
    routing_.request_refresh();
    std::this_thread::sleep_for(300ms);
    EXPECT_EQ(routing_.version(), held);
  }

  void install(const pb::Routing& r) {
    mgmtd_.set(r);
    routing_.request_refresh();
    const auto until = SteadyClock::now() + 5s;
    while (routing_.version() != r.version() && SteadyClock::now() < until) std::this_thread::sleep_for(2ms);
    ASSERT_EQ(routing_.version(), r.version()) << "the client never took routing version " << r.version();
  }

  template <class T>
  T bounded(Task<T> task, const std::string& what) {
    const auto start = SteadyClock::now();
    auto done = asio::co_spawn(io_.at(0).get_executor(), std::move(task), asio::use_future);
    if (done.wait_for(kHung) != std::future_status::ready) {
      ADD_FAILURE() << "no answer within " << kHung.count() << " s (hung): " << what;
      return done.get();
    }
    slowest_ = std::max(slowest_, SteadyClock::now() - start);
    return done.get();
  }

  ChunkAddress at(mgmt::ChainId chain, uint64_t index = 0) const {
    return {.ino = kIno, .index = index, .chain = chain, .chunk_bytes = kChunkBytes};
  }

  // A read and a data_end of a chunk on `chain`, both failing; how long they took.
  SteadyClock::duration read_and_data_end_fail(mgmt::ChainId chain, const std::string& what) {
    std::vector<std::byte> buf(4096);
    const auto start = SteadyClock::now();
    EXPECT_FALSE(bounded(chunks_.read(at(chain), 0, buf), "read on " + what));
    EXPECT_FALSE(bounded(chunks_.data_end(kIno, chain, kChunkBytes, 0, 8), "data_end on " + what));
    return SteadyClock::now() - start;
  }

  // Write, read, truncate and data_end of a chunk on `chain`: each must fail
  // with a clear error (not kInternal, not kOk) within the bound.
  void expect_all_fail(mgmt::ChainId chain, const std::string& what) {
    std::vector<std::byte> buf(4096, std::byte{1});
    auto w = bounded(chunks_.write(at(chain), 0, buf), what + ": write");
    ASSERT_FALSE(w) << what << ": write succeeded";
    expect_clear(w.error(), what + ": write");
    auto r = bounded(chunks_.read(at(chain), 0, buf), what + ": read");
    ASSERT_FALSE(r) << what << ": read succeeded";
    expect_clear(r.error(), what + ": read");
    auto ro = bounded(chunks_.read_once(at(chain), 0, buf), what + ": read_once");
    ASSERT_FALSE(ro) << what << ": read_once succeeded";
    expect_clear(ro.error(), what + ": read_once");
    auto t = bounded(chunks_.truncate(at(chain), 10), what + ": truncate");
    ASSERT_FALSE(t) << what << ": truncate succeeded";
    expect_clear(t.error(), what + ": truncate");
    auto d = bounded(chunks_.data_end(kIno, chain, kChunkBytes, 0, 8), what + ": data_end");
    ASSERT_FALSE(d) << what << ": data_end succeeded";
    expect_clear(d.error(), what + ": data_end");
    // Grouped reads: the range is left to be read alone, or grouped to the one storage.
    GroupedRead g{.chunk = at(chain), .offset = 0, .dst = buf};
    auto groups = chunks_.group_reads(std::span<GroupedRead>(&g, 1));
    for (auto& members : groups) {
      auto rg = bounded(chunks_.read_group(std::span<GroupedRead>(&g, 1), members), what + ": read_group");
      EXPECT_TRUE(rg) << what;
    }
  }

  void expect_clear(const Status& s, const std::string& what) {
    EXPECT_NE(s.code(), Code::kOk) << what;
    EXPECT_NE(s.code(), Code::kInternal) << what << ": " << s;
    std::printf("  %s: %s\n", what.c_str(), std::string(code_name(s.code())).c_str());
  }

  DroppingStorage storage_;
  FakeMgmtd mgmtd_;
  rpc::IoPool io_{1};
  rpc::Client rpc_{io_, rpc::ClientOptions::in_cluster(kToken, "hostile-routing-test")};
  RoutingCache routing_{io_, rpc_, {rpc::Endpoint{"127.0.0.1", mgmtd_.port()}}};
  ChunkIo chunks_{io_, rpc_, routing_,
                  ChunkIoOptions{.call_timeout_ms = kCallTimeoutMs, .retry_time_ms_max = kRetryTimeMs}};
  SteadyClock::duration slowest_{};
};

// The good chain reaches the storage; a sanity check of the fixture.
TEST_F(HostileRoutingTest, GoodChainReachesStorage) {
  std::vector<std::byte> buf(100);
  auto w = bounded(chunks_.write(at(1), 0, buf), "good chain");
  EXPECT_FALSE(w);
  EXPECT_GT(storage_.accepted.load(), 0);
}

TEST_F(HostileRoutingTest, ChainTargetsNotInTargetsMap) {
  pb::Routing r = base(2);
  add_chain(r, 2, {42, 43});
  install(r);
  expect_all_fail(2, "chain of unknown targets");
  EXPECT_EQ(storage_.accepted.load(), 0) << "a call went to the storage for a chain not on it";
}

TEST_F(HostileRoutingTest, TargetNodeNotInNodesMap) {
  pb::Routing r = base(2);
  add_target(r, 5, 99);
  add_chain(r, 2, {5});
  install(r);
  expect_all_fail(2, "target of an unknown node");
  EXPECT_EQ(storage_.accepted.load(), 0);
}

TEST_F(HostileRoutingTest, MalformedAddresses) {
  const std::vector<std::string> addresses = {"",         "host",          "host:99999", "[::1",
                                              "[::1]:",   ":123",          "host:-1",    "127.0.0.1:0",
                                              "a:b:c:1",  std::string(300, 'h'), std::string(300, 'h') + ":1",
                                              std::string(1, '\0') + ":1"};
  uint64_t version = 2;
  for (const std::string& a : addresses) {
    pb::Routing r = base(version++);
    add_node(r, 7, a);
    add_target(r, 7, 7);
    add_chain(r, 2, {7});
    install(r);
    const std::string what =
        fmt::format("node address '{}' ({} bytes)", a.size() > 20 ? a.substr(0, 20) + "..." : a, a.size());
    expect_all_fail(2, what);
    // Refused at once (no connect retried for the whole retry time): an
    // address no mgmtd registers is the routing's error, not the network's.
    std::vector<std::byte> buf(4096);
    auto w = bounded(chunks_.write(at(2), 0, buf), what);
    ASSERT_FALSE(w);
    EXPECT_EQ(w.error().code(), Code::kProtocol) << what << ": " << w.error();
    auto ro = bounded(chunks_.read_once(at(2), 0, buf), what);
    ASSERT_FALSE(ro);
    EXPECT_EQ(ro.error().code(), Code::kProtocol) << what << ": " << ro.error();
  }
  EXPECT_EQ(storage_.accepted.load(), 0);
}

// A chain of a replica that is only unreachable (the dropping storage) and
// one the routing names by an address mgmtd would not register: reads and
// listings keep trying for the retry time (the first may come back), and do
// not end at once with the bad address's kProtocol, whichever replica a
// round tries last.
TEST_F(HostileRoutingTest, ABadReplicaAddressDoesNotEndRetries) {
  pb::Routing r = base(2);
  add_node(r, 7, "[::1");
  add_target(r, 7, 7);
  add_chain(r, 2, {1, 7});
  install(r);
  std::vector<std::byte> buf(4096);
  for (uint64_t index = 0; index < 4; ++index) {  // both replicas come first in some round
    const auto start = SteadyClock::now();
    auto rd = bounded(chunks_.read(at(2, index), 0, buf), "read");
    ASSERT_FALSE(rd);
    EXPECT_NE(rd.error().code(), Code::kProtocol) << rd.error();
    auto de = bounded(chunks_.data_end(kIno, 2, kChunkBytes, index, index + 1), "data_end");
    ASSERT_FALSE(de);
    EXPECT_NE(de.error().code(), Code::kProtocol) << de.error();
    EXPECT_GE(SteadyClock::now() - start, 2 * std::chrono::milliseconds(kRetryTimeMs)) << "no retry";
  }
}

TEST_F(HostileRoutingTest, TablesWithoutOrOfUnknownChains) {
  pb::Routing r = base(2);
  add_table(r, 2, {});
  add_table(r, 3, {1000, 1001});
  install(r);
  meta::Layout layout;
  layout.chain_table_id = 2;
  layout.stripe_count = 4;
  EXPECT_FALSE(stripe_chains(layout, *routing_.current()));
  layout.chain_table_id = 3;
  auto chains = stripe_chains(layout, *routing_.current());
  ASSERT_TRUE(chains);
  for (mgmt::ChainId c : *chains) expect_all_fail(c, fmt::format("chain {} a table names, not in the routing", c));
  EXPECT_EQ(storage_.accepted.load(), 0);
}

TEST_F(HostileRoutingTest, ChainOfZeroTargets) {
  pb::Routing r = base(2);
  add_chain(r, 2, {});
  install(r);
  expect_all_fail(2, "chain of no targets");
  EXPECT_EQ(storage_.accepted.load(), 0);
}

TEST_F(HostileRoutingTest, ChainOfDuplicateTargets) {
  pb::Routing r = base(2);
  add_target(r, 8, 99);  // a node not there
  add_chain(r, 2, {8, 8, 8, 8});
  install(r);
  expect_all_fail(2, "chain of one unreachable target four times");
  EXPECT_EQ(storage_.accepted.load(), 0);
}

// 10,000 targets, all on nodes not in the map but one: every lookup fails
// fast; a read tries them in one round.
TEST_F(HostileRoutingTest, ChainOfTenThousandTargets) {
  pb::Routing r = base(2);
  std::vector<uint64_t> targets;
  for (uint64_t t = 100; t < 10'100; ++t) {
    add_target(r, t, 5000);  // no such node
    targets.push_back(t);
  }
  add_chain(r, 2, targets);
  install(r);
  expect_all_fail(2, "chain of 10000 targets on an unknown node");
  EXPECT_EQ(storage_.accepted.load(), 0);
}

// 10,000 entries of one reachable (dropping) target: a round must not make
// 10,000 calls (each up to call_timeout_ms).
TEST_F(HostileRoutingTest, ChainOfTenThousandCopiesOfOneTarget) {
  pb::Routing r = base(2);
  add_chain(r, 2, std::vector<uint64_t>(10'000, 1));
  install(r);
  const auto took = read_and_data_end_fail(2, "10000 copies of one target");
  std::printf("  10000 copies: read and data_end took %lld ms, %d connections\n",
              static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(took).count()),
              storage_.accepted.load());
  EXPECT_LT(took, 5s);
}

TEST_F(HostileRoutingTest, VersionsBackwardsAndUint64Max) {
  install(base(10));
  // Backwards: refused, the newer one kept.
  offer_refused(base(5), 10);
  EXPECT_GT(routing_.older_refused(), 0u);
  // To UINT64_MAX (the request's "none held" value), then back to a sane
  // one: UINT64_MAX is refused (held, it wedged the client: every later
  // snapshot refused as older), the sane one taken.
  pb::Routing max = base(UINT64_MAX);
  add_chain(max, 2, {1});
  offer_refused(max, 10);
  {
    RoutingCache fresh{io_, rpc_, {rpc::Endpoint{"127.0.0.1", mgmtd_.port()}}};
    auto s = fresh.start();
    ASSERT_FALSE(s) << "started on routing version UINT64_MAX";
    expect_clear(s.error(), "start() on routing version UINT64_MAX");
  }
  pb::Routing eleven = base(11);
  add_chain(eleven, 2, {1});
  install(eleven);
  ASSERT_TRUE(routing_.current()->chain(2));
  expect_all_fail(3, "unknown chain after a version jump");
  // mgmtd restarting from scratch (version 1): taken.
  install(base(1));
  EXPECT_FALSE(routing_.current()->chain(2));
}

// A jump of more than 2^32 versions past the one held is no version (no
// cluster makes that many changes): refused, the next sane one taken. Held,
// it wedged the client (every later snapshot refused as older).
TEST_F(HostileRoutingTest, AFarJumpIsRefused) {
  install(base(10));
  for (uint64_t far : {UINT64_MAX - 1, uint64_t{1'000'000'000'000'000'000}, 10 + (uint64_t{1} << 32) + 1}) {
    SCOPED_TRACE(far);
    pb::Routing r = base(far);
    add_chain(r, 2, {1});
    offer_refused(r, 10);
  }
  install(base(10 + (uint64_t{1} << 32)));  // the largest jump taken
  install(base(11 + (uint64_t{1} << 32)));
  EXPECT_EQ(routing_.version(), 11 + (uint64_t{1} << 32));
}

TEST_F(HostileRoutingTest, DuplicateIds) {
  pb::Routing r = base(2);
  add_node(r, 1, "host");        // node 1 again: a bad address
  add_target(r, 1, 77);          // target 1 again: on a node not there
  add_chain(r, 1, {});           // chain 1 again: no targets
  add_table(r, 1, {1, 1, 1});    // table 1 again
  install(r);
  expect_all_fail(1, "duplicate ids");
  EXPECT_EQ(storage_.accepted.load(), 0);
}

TEST_F(HostileRoutingTest, UnparsableReplyKeepsLastRouting) {
  mgmtd_.set_body(std::string("\xff\xff\xff\xff\x0f garbage", 13));
  routing_.request_refresh();
  std::this_thread::sleep_for(300ms);
  ASSERT_TRUE(routing_.current());
  EXPECT_EQ(routing_.version(), 1u);
  // A new cache against it fails to start, with an error.
  RoutingCache fresh{io_, rpc_, {rpc::Endpoint{"127.0.0.1", mgmtd_.port()}}};
  auto s = fresh.start();
  ASSERT_FALSE(s);
  expect_clear(s.error(), "start() on an unparsable reply");
  // A reply whose routing holds a bad enum (target state 9): refused whole.
  pb::Routing r = base(3);
  r.mutable_targets(0)->set_state(9);
  offer_refused(r, 1);
}

TEST_F(HostileRoutingTest, HundredThousandChains) {
  pb::Routing r = base(2);
  std::vector<uint32_t> ids;
  for (uint32_t c = 2; c < 100'002; ++c) {
    add_chain(r, c, {1});
    ids.push_back(c);
  }
  add_table(r, 2, ids);
  const auto start = SteadyClock::now();
  install(r);
  const auto took = SteadyClock::now() - start;
  std::printf("  100000 chains (%zu bytes): installed in %lld ms\n", r.ByteSizeLong(),
              static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(took).count()));
  EXPECT_LT(took, 5s);
  EXPECT_EQ(routing_.current()->chains.size(), 100'001u);
  expect_all_fail(100'001, "a chain of a 100000-chain routing");  // reaches the dropping storage: fails
}

// An mgmtd that answers a long poll at once ("unchanged") must not have the
// client poll it in a tight loop.
TEST_F(HostileRoutingTest, EagerUnchangedDoesNotSpin) {
  mgmtd_.set_eager(true);
  const uint64_t before = mgmtd_.calls();
  std::this_thread::sleep_for(1s);
  const uint64_t calls = mgmtd_.calls() - before;
  mgmtd_.set_eager(false);
  std::printf("  eager mgmtd: %llu GetRouting calls in 1 s\n", static_cast<unsigned long long>(calls));
  EXPECT_LT(calls, 50u);
}


// A listening socket that never accepts: connections complete (the kernel's
// backlog) and no call is ever answered: each costs call_timeout_ms.
struct SilentStorage {
  SilentStorage() {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    EXPECT_EQ(::listen(fd, 4096), 0);
    socklen_t len = sizeof(a);
    EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
    port = ntohs(a.sin_port);
  }
  ~SilentStorage() { ::close(fd); }
  std::string address() const { return "127.0.0.1:" + std::to_string(port); }
  int fd = -1;
  uint16_t port = 0;
};

// 10,000 entries of one silent target: a read or data_end round must stay
// within its retry time, not try every entry for call_timeout_ms each.
TEST_F(HostileRoutingTest, ChainOfTenThousandCopiesOfOneSilentTarget) {
  SilentStorage silent;
  pb::Routing r = base(2);
  add_node(r, 9, silent.address());
  add_target(r, 9, 9);
  add_chain(r, 2, std::vector<uint64_t>(10'000, 9));
  install(r);
  const auto start = SteadyClock::now();
  read_and_data_end_fail(2, "10000 copies of one silent target");
  std::vector<std::byte> buf(4096);
  EXPECT_FALSE(bounded(chunks_.write(at(2), 0, buf), "write on 10000 copies of one silent target"));
  const auto took = SteadyClock::now() - start;
  std::printf("  10000 silent copies: read, data_end and write took %lld ms\n",
              static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(took).count()));
  EXPECT_LT(took, 8s);
}

}  // namespace
}  // namespace weft::client
