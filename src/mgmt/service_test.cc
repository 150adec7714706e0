// MgmtService on a real rpc::Server (in process, 127.0.0.1) driven by
// MgmtClients: registration, heartbeats, lease expiry through the ticker,
// re-registration, fencing, long-polled routing, chain tables.
#include "mgmt/service.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "mgmt/client_list.h"
#include "mgmt/mgmt_client.h"
#include "mgmt/proto_convert.h"
#include "mgmt/refusal_reporter.h"
#include "mgmt/service_methods.h"
#include "mgmt/test_util.h"
#include "rpc/service.h"

namespace weft::mgmt {
namespace {

using namespace std::chrono_literals;

// An in-process mgmtd with a short lease, and the client side's RPC plumbing.
struct Fixture {
  explicit Fixture(std::string db_dir = "", LeaseConfig client_lease = {.lease = 300ms, .grace = 100ms},
                   LeaseConfig lease = {.lease = 300ms, .grace = 100ms})
      : client_lease(client_lease) {
    options.db_dir = std::move(db_dir);
    options.lease = lease;
    start_server();
    // Made here, before any test thread runs: a lazy make_unique in rpc() raced
    // when several threads made the first call at once. The server keeps port_
    // across restarts.
    mgmt_rpc = std::make_unique<MgmtRpc>(client_io, client, std::vector<rpc::Endpoint>{{"127.0.0.1", port_}}, 2000);
  }
  ~Fixture() {
    stop_server();
    server_io.stop();  // no long poll may outlive `service`
  }

  void start_server() {
    options.client_lease = client_lease;
    auto opened = ClusterState::open(options, SystemClock::instance(), registry);
    EXPECT_TRUE(opened) << opened.error();
    state = std::move(*opened);
    service = std::make_unique<MgmtService>(*state, SystemClock::instance(), MgmtServiceOptions{.tick = 20ms, .client_lease = client_lease},
                                            registry);
    server = std::make_unique<rpc::Server>(server_io, rpc::ServerOptions{.cluster_token = "t", .name = "mgmtd"},
                                           registry);
    service->register_methods(*server);
    auto port = server->listen("127.0.0.1", port_);
    EXPECT_TRUE(port) << port.error();
    port_ = *port;
    service->start();
  }
  void stop_server() {
    if (!server) return;
    server->stop();
    service->stop();
  }

  MgmtClientOptions storage(int i, uint64_t incarnation = 1) {
    MgmtClientOptions o;
    o.registration = {.kind = NodeKind::kStorage, .address = "127.0.0.1:" + std::to_string(9100 + i),
                      .incarnation = incarnation, .targets = {{"t0", 1 << 30, 0}, {"t1", 1 << 30, 0}}};
    return o;
  }

  LeaseConfig client_lease;
  ClusterOptions options;
  metrics::Registry registry;
  rpc::IoPool server_io{1};
  std::unique_ptr<ClusterState> state;
  std::unique_ptr<MgmtService> service;
  std::unique_ptr<rpc::Server> server;
  uint16_t port_ = 0;

  rpc::IoPool client_io{1};
  rpc::Client client{client_io, rpc::ClientOptions{.cluster_token = "t", .backoff_min_ms = 10, .backoff_max_ms = 50}};
  std::unique_ptr<MgmtRpc> mgmt_rpc;  // made by the constructor
  MgmtRpc& rpc() { return *mgmt_rpc; }
};

// `call`'s result once mgmtd answered it. After the server restarts, the
// client may not have seen the old server close its connection yet: the next
// call goes out on it and fails as kDisconnected (a transport error) without
// reaching the new server.
template <class Call>
auto answered(Call call) {
  auto r = call();
  for (int i = 0; i < 100 && !r && MgmtRpc::is_transport_error(r.error().code()); ++i) {
    std::this_thread::sleep_for(10ms);
    r = call();
  }
  return r;
}

template <class Pred>
bool eventually(Pred pred, Duration timeout = 5s) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return pred();
}

// A routing version far past the one held (kRoutingVersionJumpMax) from a
// broken or hostile mgmtd is refused, the held routing kept and the next sane
// one taken. Held, it had the server refuse every later routing as older
// until it registered again.
TEST(MgmtClientRouting, AFarVersionJumpIsRefused) {
  Fixture f;  // its client plumbing; the routing comes from a fake mgmtd
  metrics::Registry registry;
  rpc::IoPool io{1};
  std::atomic<RoutingVersion> version{10};
  rpc::Server fake(io, rpc::ServerOptions{.cluster_token = "t", .name = "fake-mgmtd"}, registry);
  rpc::add_blocking_method<pb::GetRoutingRequest, pb::GetRoutingReply>(
      fake, kGetRouting, "mgmt.get_routing", [&](const pb::GetRoutingRequest&, rpc::ServerCall&) {
        pb::GetRoutingReply r;
        r.mutable_routing()->set_version(version.load());
        return Result<pb::GetRoutingReply>(std::move(r));
      });
  auto port = fake.listen("127.0.0.1", 0);
  ASSERT_TRUE(port) << port.error();
  MgmtRpc to_fake(f.client_io, f.client, {{"127.0.0.1", *port}}, 2000);
  MgmtClient node(to_fake, f.storage(0));
  ASSERT_TRUE(node.refresh());
  EXPECT_EQ(node.routing()->version, 10u);
  for (RoutingVersion far : {UINT64_MAX, UINT64_MAX - 1, RoutingVersion{10} + kRoutingVersionJumpMax + 1}) {
    version = far;
    auto r = node.refresh();
    ASSERT_FALSE(r) << "took routing version " << far;
    EXPECT_EQ(r.error().code(), Code::kProtocol) << r.error();
    EXPECT_EQ(node.routing()->version, 10u);
  }
  version = 11;
  ASSERT_TRUE(node.refresh());
  EXPECT_EQ(node.routing()->version, 11u);
  version = 11 + kRoutingVersionJumpMax;  // the furthest jump taken
  ASSERT_TRUE(node.refresh());
  EXPECT_EQ(node.routing()->version, 11 + kRoutingVersionJumpMax);
  fake.stop();
  io.stop();
}

TEST(MgmtService, RegisterHeartbeatCreateTableAndRouting) {
  Fixture f;
  std::vector<std::unique_ptr<MgmtClient>> nodes;
  for (int i = 0; i < 3; ++i) {
    nodes.push_back(std::make_unique<MgmtClient>(f.rpc(), f.storage(i)));
    ASSERT_TRUE(nodes.back()->register_now());
    EXPECT_EQ(nodes.back()->target_ids().size(), 2u);
    EXPECT_TRUE(nodes.back()->lease().can_serve_writes());
  }
  pb::CreateChainTableRequest create;
  create.set_replicas(2);
  auto table = f.rpc().call<pb::CreateChainTableReply>(kCreateChainTable, create);
  ASSERT_TRUE(table) << table.error();
  EXPECT_EQ(table->table().id(), 1u);
  EXPECT_GT(table->chains_size(), 0);
  for (const auto& c : table->chains()) EXPECT_EQ(c.entries_size(), 2);

  // A heartbeat sees the newer routing version and refreshes the cache.
  ASSERT_TRUE(nodes[0]->heartbeat_now());
  ASSERT_TRUE(nodes[0]->routing());
  EXPECT_EQ(nodes[0]->routing()->version, table->routing_version());
  EXPECT_EQ(nodes[0]->routing()->chains.size(), static_cast<size_t>(table->chains_size()));

  auto list = f.rpc().call<pb::ListChainTablesReply>(kListChainTables, pb::ListChainTablesRequest{});
  ASSERT_TRUE(list);
  ASSERT_EQ(list->tables_size(), 1);
  EXPECT_EQ(list->tables(0).replicas(), 2u);

  pb::CreateChainTableRequest too_many;
  too_many.set_replicas(4);
  auto refused = f.rpc().call<pb::CreateChainTableReply>(kCreateChainTable, too_many);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), Code::kInvalidArgument);
}

TEST(MgmtService, LongPollReturnsOnChangeOrTimeout) {
  Fixture f;
  MgmtClient a(f.rpc(), f.storage(0));
  std::atomic<RoutingVersion> heard{0};
  a.set_routing_listener([&heard](std::shared_ptr<const RoutingInfo> r) { heard = r->version; });
  ASSERT_TRUE(a.register_now());
  RoutingVersion v = a.routing()->version;
  EXPECT_EQ(heard.load(), v);
  auto start = std::chrono::steady_clock::now();
  auto same = a.refresh(200);
  ASSERT_TRUE(same);
  EXPECT_GE(std::chrono::steady_clock::now() - start, 150ms);
  EXPECT_EQ((*same)->version, v);

  std::thread later([&] {
    std::this_thread::sleep_for(100ms);
    MgmtClient b(f.rpc(), f.storage(1));
    EXPECT_TRUE(b.register_now());
  });
  auto changed = a.refresh(5000);
  later.join();
  ASSERT_TRUE(changed);
  EXPECT_GT((*changed)->version, v);
  EXPECT_EQ((*changed)->nodes.size(), 2u);
  EXPECT_EQ(heard.load(), (*changed)->version);
}

// Usage changes in place (no new routing version), yet a full GetRouting
// answers the reported figures, not a snapshot cached before the report.
TEST(MgmtService, RoutingCarriesUsageReportedAfterTheVersion) {
  Fixture f;
  MgmtClient a(f.rpc(), f.storage(0));
  ASSERT_TRUE(a.register_now());
  auto full = [&] {
    pb::GetRoutingRequest req;  // known_version 0: always the whole snapshot
    auto r = f.rpc().call<pb::GetRoutingReply>(kGetRouting, req);
    EXPECT_TRUE(r) << r.error();
    auto info = from_proto(r->routing());
    EXPECT_TRUE(info) << info.error();
    return *info;
  };
  RoutingInfo before = full();
  TargetId t0 = a.target_ids().at(0);
  EXPECT_EQ(before.targets.at(t0).used_bytes, 0u);
  a.set_usage_source([&] { return std::vector<TargetUsage>{{t0, 12345, 1 << 20}}; });
  ASSERT_TRUE(a.heartbeat_now());
  RoutingInfo after = full();
  EXPECT_EQ(after.version, before.version);
  EXPECT_EQ(after.targets.at(t0).used_bytes, 12345u);
  EXPECT_EQ(after.targets.at(t0).capacity_bytes, 1u << 20);
}

// A peer reports that a storage server refused its connection: mgmtd probes
// the address itself and declares the node dead at once only when nothing
// listens there, long before its lease (60 s here) would; a server that takes
// connections is left to its lease, whoever reports it.
// Every retry of every caller meets the same refusal: the reporter sends an
// address at most once per interval, never mgmtd's own, and queues at most
// kQueuedMax (the lease still finds the rest).
TEST(RefusalReporter, ReportsAnAddressOncePerIntervalNeverMgmtdAndQueuesABoundedNumber) {
  Fixture f;
  auto reports = [&] {
    return f.registry.counter("weft_mgmt_refusal_reports_total", "", {{"outcome", "not-up"}}).value();
  };
  {
    RefusalReporter reporter(300ms);
    reporter.start(f.rpc());
    const rpc::Endpoint nobody{"127.0.0.1", 9};
    for (int i = 0; i < 100; ++i) reporter.refused(nobody);
    reporter.refused({"::ffff:127.0.0.1", f.port_});  // mgmtd itself, spelled otherwise
    ASSERT_TRUE(eventually([&] { return reporter.sent() == 1; }));
    std::this_thread::sleep_for(100ms);
    EXPECT_EQ(reporter.sent(), 1u) << "one report per interval, none for mgmtd";
    EXPECT_EQ(reports(), 1u);
    std::this_thread::sleep_for(300ms);
    reporter.refused(nobody);
    ASSERT_TRUE(eventually([&] { return reporter.sent() == 2; })) << "the interval is over";
  }
  RefusalReporter unstarted;
  for (uint16_t port = 1; port <= 100; ++port) unstarted.refused({"127.0.0.1", port});
  unstarted.start(f.rpc());
  ASSERT_TRUE(eventually([&] { return unstarted.sent() == RefusalReporter::kQueuedMax; }));
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(unstarted.sent(), RefusalReporter::kQueuedMax) << "the rest were dropped";
}

TEST(MgmtService, AReportedRefusalIsProbedAndOnlyANodeWhereNothingListensIsDeclaredDead) {
  Fixture f("", {.lease = 300ms, .grace = 100ms}, {.lease = 60s, .grace = 5s});
  int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(listener, 16), 0);
  socklen_t len = sizeof a;
  ASSERT_EQ(::getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const std::string live = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  uint16_t closed_port;
  {
    int s = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in c{};
    c.sin_family = AF_INET;
    c.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::bind(s, reinterpret_cast<sockaddr*>(&c), sizeof c), 0);
    len = sizeof c;
    ASSERT_EQ(::getsockname(s, reinterpret_cast<sockaddr*>(&c), &len), 0);
    closed_port = ntohs(c.sin_port);
    ::close(s);  // bound, never listening: refused
  }
  const std::string dead = "127.0.0.1:" + std::to_string(closed_port);
  MgmtClientOptions lo = f.storage(0), d = f.storage(1);
  lo.registration.address = live;
  d.registration.address = dead;
  MgmtClient live_node(f.rpc(), lo), dead_node(f.rpc(), d);
  ASSERT_TRUE(live_node.register_now());
  ASSERT_TRUE(dead_node.register_now());
  ASSERT_TRUE(live_node.heartbeat_now());
  pb::CreateChainTableRequest create;
  create.set_replicas(2);
  ASSERT_TRUE(f.rpc().call<pb::CreateChainTableReply>(kCreateChainTable, create));
  const RoutingVersion before = f.state->routing_version();

  auto report = [&](const std::string& address) {
    pb::ReportRefusalRequest req;
    req.set_address(address);
    auto r = f.rpc().call<pb::ReportRefusalReply>(kReportRefusal, req);
    EXPECT_TRUE(r) << r.error();
    return r ? r->outcome() : std::string("error");
  };
  EXPECT_EQ(report(live), "listening");
  EXPECT_EQ(report(live), "probing") << "probed moments ago";
  EXPECT_EQ(f.state->routing().nodes.at(live_node.node_id()).state, NodeState::kUp);
  EXPECT_EQ(f.state->routing_version(), before);

  EXPECT_EQ(report(dead), "kept") << "no heartbeat since it registered: it may still be starting";
  std::this_thread::sleep_for(1100ms);  // the quiet time after a probe of it
  ASSERT_TRUE(dead_node.heartbeat_now());
  // Reported as another peer prints it (IPv4-mapped IPv6): the same node, probed where it registered.
  EXPECT_EQ(report("[::ffff:127.0.0.1]:" + std::to_string(closed_port)), "declared");
  EXPECT_EQ(f.state->routing().nodes.at(dead_node.node_id()).state, NodeState::kDown);
  EXPECT_GT(f.state->routing_version(), before) << "its chains moved on";
  for (const auto& [id, chain] : f.state->routing().chains)
    for (const auto& e : chain.entries) {
      if (f.state->routing().targets.at(e.target_id).node_id == dead_node.node_id()) {
        EXPECT_EQ(e.state, TargetState::kOffline) << "chain " << id;
      }
    }
  EXPECT_EQ(report(dead), "not-up");
  EXPECT_EQ(report("127.0.0.1:1"), "not-up") << "no node registered there";
  ::close(listener);
}

// A probe's record of a node matters for `quiet` after it (begin() refuses
// that node till then): older ones are forgotten as probes end, and a removed
// node's at once, so nodes that come and go leave nothing.
TEST(RefusalProbes, KeepOnlyRecordsWithinTheQuietTimeAndForgetRemovedNodes) {
  RefusalProbes probes(1s);
  TimePoint now{};
  for (NodeId n = 1; n <= 100; ++n) {
    ASSERT_TRUE(probes.begin(n, now)) << n;
    EXPECT_FALSE(probes.begin(n + 1, now)) << "one probe at a time";
    probes.end(n, now);
    now += 400ms;
  }
  EXPECT_EQ(probes.tracked(), 3u) << "the probes of the last second";
  EXPECT_FALSE(probes.begin(100, now)) << "probed 400 ms ago";
  EXPECT_TRUE(probes.begin(98, now)) << "1.2 s ago";
  probes.end(98, now);
  probes.forget(98);
  probes.forget(99);
  probes.forget(100);
  EXPECT_EQ(probes.tracked(), 0u);
  EXPECT_TRUE(probes.begin(100, now)) << "a removed node's record went with it";
}

TEST(MgmtdConfig, ProbingRefusalsCanBeTurnedOff) {
  auto on = MgmtdConfig::from(*Config::parse("[mgmtd]\ndata_dir = \"x\"\n", "test"));
  ASSERT_TRUE(on) << on.error();
  EXPECT_TRUE(on->service.refusal_probe.enabled);
  auto off = MgmtdConfig::from(*Config::parse("[mgmtd]\ndata_dir = \"x\"\nprobe_refusals = false\n", "test"));
  ASSERT_TRUE(off) << off.error();
  EXPECT_FALSE(off->service.refusal_probe.enabled);
}

TEST(MgmtService, ExpiredLeaseMarksNodeDownAndLoopRevivesIt) {
  Fixture f;
  MgmtClient a(f.rpc(), f.storage(0));
  MgmtClient b(f.rpc(), f.storage(1));
  a.start();
  b.start();
  ASSERT_TRUE(eventually([&] { return a.node_id() != 0 && b.node_id() != 0; }));
  NodeId bid = b.node_id();
  b.stop();
  ASSERT_TRUE(eventually([&] { return f.state->routing().nodes.at(bid).state == NodeState::kDown; }));
  EXPECT_EQ(f.state->routing().nodes.at(a.node_id()).state, NodeState::kUp);
  // a's cache follows the change through its heartbeats.
  ASSERT_TRUE(eventually([&] {
    auto r = a.routing();
    return r && r->nodes.count(bid) && r->nodes.at(bid).state == NodeState::kDown;
  }));
  b.start();
  ASSERT_TRUE(eventually([&] { return f.state->routing().nodes.at(bid).state == NodeState::kUp; }));
  a.stop();
  b.stop();
}

// Routing first, lease second, also when the routing poll fetched the new
// routing and is still handing it over (recording it in the target
// directories, then to the service) as the heartbeat's answer names that
// version: the heartbeat waits for the hand-over (it took the version as
// had, and granted the lease while the service still served the routing
// under which the node had been declared dead).
TEST(MgmtService, AHeartbeatGrantsNoLeaseWhileItsRoutingIsStillBeingHandedOver) {
  Fixture f;
  MgmtClient b(f.rpc(), f.storage(1));
  ASSERT_TRUE(b.register_now());
  const NodeId id = b.node_id();
  ASSERT_TRUE(eventually([&] { return f.state->routing().nodes.at(id).state == NodeState::kDown; }));
  ASSERT_FALSE(b.lease().can_serve_writes());
  ASSERT_TRUE(f.state->heartbeat({.node_id = id, .incarnation = 1}).has_value());  // back up: a newer routing
  const RoutingVersion revived = f.state->routing_version();
  std::mutex mu;
  std::condition_variable cv;
  bool entered = false, release = false;
  b.set_routing_listener([&](std::shared_ptr<const RoutingInfo> r) {
    if (r->version < revived) return;
    std::unique_lock lock(mu);
    entered = true;
    cv.notify_all();
    cv.wait(lock, [&] { return release; });
  });
  std::thread poll([&] { EXPECT_TRUE(b.refresh().has_value()); });
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, 5s, [&] { return entered; }));
  }
  std::atomic<bool> beat_done{false};
  std::thread beat([&] {
    EXPECT_TRUE(b.heartbeat_now().has_value());
    beat_done = true;
  });
  std::this_thread::sleep_for(200ms);
  EXPECT_FALSE(b.lease().can_serve_writes()) << "a lease before the routing it answers was handed over";
  {
    std::lock_guard lock(mu);
    release = true;
    cv.notify_all();
  }
  poll.join();
  beat.join();
  EXPECT_TRUE(beat_done);
  EXPECT_TRUE(b.lease().can_serve_writes());
}

TEST(MgmtService, RestartWithoutStateReRegistersAndNewerIncarnationFencesOld) {
  Fixture f;
  MgmtClient a(f.rpc(), f.storage(0, 5));
  ASSERT_TRUE(a.register_now());
  // mgmtd loses its state: it is behind the routing version `a` installed and
  // refuses it; that is not final. Started with --accept-older-state, its
  // version goes above a's: the next heartbeat hears "unknown node" and
  // registers again.
  const RoutingVersion installed = a.installed_routing_version();
  ASSERT_GT(installed, 0u);
  f.stop_server();
  f.start_server();
  auto refused = answered([&] { return a.heartbeat_now(); });
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), Code::kVersionMismatch) << refused.error();
  EXPECT_FALSE(a.fenced());
  f.stop_server();
  f.options.accept_older_state = true;
  f.start_server();
  uint64_t before = a.registrations();
  ASSERT_TRUE(eventually([&] { return a.heartbeat_now().has_value(); }));
  EXPECT_EQ(a.registrations(), before + 1);
  EXPECT_EQ(f.state->routing().nodes.size(), 1u);
  EXPECT_GT(a.routing()->version, installed);

  // A restarted process (newer incarnation) replaces it; the old one is fenced.
  MgmtClient a2(f.rpc(), f.storage(0, 6));
  ASSERT_TRUE(a2.register_now());
  auto hb = a.heartbeat_now();
  ASSERT_FALSE(hb);
  EXPECT_EQ(hb.error().code(), Code::kNotPermitted);
  EXPECT_TRUE(a.fenced());
  EXPECT_FALSE(a.lease().can_serve_writes());
  // An older incarnation cannot register.
  MgmtClient zombie(f.rpc(), f.storage(0, 4));
  auto z = zombie.register_now();
  ASSERT_FALSE(z);
  EXPECT_EQ(z.error().code(), Code::kNotPermitted);
}

// Meta's store over the wire (mgmt/cluster_state.h, "Meta's store"): the
// mark its source gives goes with every registration and heartbeat, another
// store is refused and fences the client (`weft serve meta` exits on it), and
// the operator's override goes with the first registration only and reports
// the mark to raise past.
TEST(MgmtService, MetasStoreIsCheckedAtRegistrationAndItsMarkFollowsHeartbeats) {
  Fixture f;
  std::atomic<uint64_t> mark{5000};
  auto meta = [&](uint64_t store_id, uint64_t incarnation, bool accept = false) {
    MgmtClientOptions o;
    o.registration = {.kind = NodeKind::kMeta, .address = "127.0.0.1:9200", .incarnation = incarnation,
                      .meta_store = {.store_id = store_id}, .accept_store_change = accept};
    o.meta_ids_mark = [&] { return mark.load(); };
    return o;
  };
  MgmtClient a(f.rpc(), meta(0xa, 1));
  ASSERT_TRUE(a.register_now());
  EXPECT_TRUE(a.meta_store_check().checked);
  EXPECT_EQ(f.state->meta_store(), (MetaStoreRecord{.store_id = 0xa, .ids_issued_below = 5000}));
  mark = 9096;
  ASSERT_TRUE(a.heartbeat_now());
  EXPECT_EQ(f.state->meta_store().ids_issued_below, 9096u);

  MgmtClient empty(f.rpc(), meta(0xb, 2));  // restarted on an empty data_dir
  mark = 2;
  auto refused = empty.register_now();
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), Code::kNotPermitted);
  EXPECT_NE(refused.error().message().find("--accept-store-change"), std::string::npos) << refused.error();
  EXPECT_TRUE(empty.fenced());

  MgmtClient accepted(f.rpc(), meta(0xb, 3, /*accept=*/true));
  ASSERT_TRUE(accepted.register_now());
  EXPECT_EQ(accepted.meta_store_check().recorded_mark, 9096u);
  EXPECT_EQ(f.state->meta_store(), (MetaStoreRecord{.store_id = 0xb, .ids_issued_below = 9096 + kStoreChangeIdMargin}))
      << "the floor the new store raises its ids to";
  // Not raised yet: a second registration without the override is refused.
  auto again = accepted.register_now();
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code(), Code::kNotPermitted);
}

// A meta that keeps running after another meta's accepted store change
// replaced its store: its next heartbeat is refused, and its client fences
// itself, tells the listener once (`weft serve meta` then refuses every
// request) and keeps the reason. Status shows the store of record.
TEST(MgmtService, ARunningMetaWhoseStoreWasReplacedIsFencedOnItsHeartbeat) {
  Fixture f;
  auto meta = [&](const std::string& address, uint64_t store_id, bool accept = false) {
    MgmtClientOptions o;
    o.registration = {.kind = NodeKind::kMeta, .address = address, .incarnation = 1,
                      .meta_store = {.store_id = store_id, .ids_issued_below = 5000}, .accept_store_change = accept};
    return o;
  };
  MgmtClient old_meta(f.rpc(), meta("127.0.0.1:9200", 0xa));
  std::atomic<int> told{0};
  std::string told_why;
  old_meta.set_fence_listener([&](const Status& why) {
    told_why = why.message();
    told.fetch_add(1);
  });
  ASSERT_TRUE(old_meta.register_now());
  ASSERT_TRUE(old_meta.heartbeat_now());
  auto status = f.rpc().call<pb::StatusReply>(kStatus, pb::StatusRequest{});
  ASSERT_TRUE(status) << status.error();
  EXPECT_EQ(status->meta_store_id(), 0xau);
  EXPECT_EQ(status->meta_ids_issued_below(), 5000u);
  EXPECT_EQ(status->routing().meta_store_id(), 0xau);

  MgmtClient new_meta(f.rpc(), meta("127.0.0.1:9201", 0xb, /*accept=*/true));
  ASSERT_TRUE(new_meta.register_now());
  auto refused = old_meta.heartbeat_now();
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), Code::kNotPermitted);
  EXPECT_TRUE(old_meta.fenced());
  EXPECT_FALSE(old_meta.lease().can_serve_writes());
  EXPECT_NE(old_meta.fence_reason().find("no longer the cluster's meta store"), std::string::npos)
      << old_meta.fence_reason();
  EXPECT_EQ(told.load(), 1);
  EXPECT_EQ(told_why, old_meta.fence_reason());
  EXPECT_FALSE(old_meta.heartbeat_now());
  EXPECT_EQ(told.load(), 1) << "told once";
  ASSERT_TRUE(new_meta.heartbeat_now());
  EXPECT_FALSE(new_meta.fenced());
  EXPECT_EQ(new_meta.fence_reason(), "");
  status = f.rpc().call<pb::StatusReply>(kStatus, pb::StatusRequest{});
  ASSERT_TRUE(status) << status.error();
  EXPECT_EQ(status->meta_store_id(), 0xbu);
  EXPECT_EQ(status->meta_ids_issued_below(), 5000u + kStoreChangeIdMargin);
  EXPECT_EQ(status->routing().meta_store_id(), 0xbu);
}

// A server records the highest routing version it installed in its
// directories; restarted against an mgmtd whose state is older (a restored
// backup), it is refused with the reason, keeps retrying without fencing
// itself and serves no writes; `weft status` (Status) says why.
TEST(MgmtService, MgmtdBehindTheClusterRefusesRestartedServersUntilAccepted) {
  testing::TempDir state_dir, target_dir;
  Fixture f(state_dir.path() + "/state");
  MgmtClientOptions o = f.storage(0, 1);
  o.state_dirs = {target_dir.path()};
  RoutingVersion backup = 0;
  {
    MgmtClient a(f.rpc(), o);
    ASSERT_TRUE(a.register_now());
    backup = f.state->routing_version();
    // The cluster moves on after mgmtd's backup was taken.
    ASSERT_TRUE(f.state->create_chain_table({.replicas = 1}));
    ASSERT_TRUE(a.heartbeat_now());
    ASSERT_GT(a.installed_routing_version(), backup);
  }
  const RoutingVersion cluster = f.state->routing_version();
  EXPECT_EQ(read_routing_version({target_dir.path()}), cluster);
  // mgmtd restarts on an emptied data_dir (its state from before anything).
  f.stop_server();
  f.state.reset();
  std::filesystem::remove_all(state_dir.path() + "/state");
  f.start_server();
  o.registration.incarnation = 2;  // the storage server restarts too
  MgmtClient a(f.rpc(), o);
  EXPECT_EQ(a.installed_routing_version(), cluster);
  auto r = answered([&] { return a.register_now(); });
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kVersionMismatch);
  EXPECT_NE(r.error().message().find("--accept-older-state"), std::string::npos) << r.error();
  a.start();  // the loop keeps trying
  ASSERT_TRUE(eventually([&] { return f.registry.counter("weft_mgmt_refused_behind_total", "").value() >= 3; }));
  EXPECT_FALSE(a.fenced());
  EXPECT_FALSE(a.lease().can_serve_writes());
  EXPECT_EQ(f.state->routing_version(), 0u);
  auto st = f.rpc().call<pb::StatusReply>(kStatus, pb::StatusRequest{});
  ASSERT_TRUE(st) << st.error();
  EXPECT_NE(st->behind().find("mgmtd's state is older than the cluster's"), std::string::npos) << st->behind();
  a.stop();

  // The operator accepts mgmtd's view: the server joins above its old version.
  f.stop_server();
  f.state.reset();
  f.options.accept_older_state = true;
  f.start_server();
  a.start();
  ASSERT_TRUE(eventually([&] { return a.lease().can_serve_writes(); }));
  EXPECT_GT(a.routing()->version, cluster);
  EXPECT_GT(read_routing_version({target_dir.path()}), cluster);
  a.stop();
}

// A server restarted after its wall clock stepped back: its new incarnation
// (next_incarnation over its directories) is still above the one mgmtd has
// registered, so it registers and replaces its old process instead of being
// refused as a zombie until the clock catches up.
TEST(MgmtService, IncarnationsGrowAcrossRestartsWhenTheClockStepsBack) {
  Fixture f;
  testing::TempDir dirs;
  const std::vector<std::string> targets{dirs.path() + "/t0", dirs.path() + "/t1"};
  ManualClock clock(2'000'000'000'000'000'000);
  auto first = next_incarnation(targets, clock);
  ASSERT_TRUE(first) << first.error();
  EXPECT_EQ(*first, 2'000'000'000'000'000'000u);
  MgmtClient a(f.rpc(), f.storage(0, *first));
  ASSERT_TRUE(a.register_now());

  clock.advance(-1h);  // NTP stepped the clock back; the server restarts
  auto second = next_incarnation(targets, clock);
  ASSERT_TRUE(second) << second.error();
  EXPECT_GT(*second, *first);
  MgmtClient restarted(f.rpc(), f.storage(0, *second));
  auto r = restarted.register_now();
  ASSERT_TRUE(r) << r.error();
  EXPECT_FALSE(restarted.fenced());
  EXPECT_EQ(a.heartbeat_now().error().code(), Code::kNotPermitted) << "the old process is fenced";

  // The largest record of any directory counts (a target moved from another
  // server, or one directory's write lost): every directory gets the new one.
  ASSERT_TRUE(next_incarnation({targets[0]}, clock));
  auto third = next_incarnation(targets, clock);
  ASSERT_TRUE(third) << third.error();
  EXPECT_EQ(*third, *second + 2);
  clock.advance(2h);  // past the records again: the wall clock
  auto fourth = next_incarnation(targets, clock);
  ASSERT_TRUE(fourth) << fourth.error();
  EXPECT_EQ(*fourth, static_cast<uint64_t>(clock.wall_ns()));
}

// A process that missed its lease lives on while an operator removes its
// node: its next heartbeat registers anew, its targets get new ids, and it
// fences itself (it serves under the old ids, which no chain names any more).
TEST(MgmtService, ANodeRemovedWhileItsProcessLivesIsFencedWhenItComesBack) {
  Fixture f;
  MgmtClient a(f.rpc(), f.storage(0));
  ASSERT_TRUE(a.register_now());
  const NodeId old_node = a.node_id();
  const std::vector<TargetId> old_targets = a.target_ids();
  ASSERT_TRUE(eventually([&] { return f.state->routing().nodes.at(old_node).state == NodeState::kDown; }));
  ASSERT_TRUE(f.state->remove_node(old_node));
  auto hb = a.heartbeat_now();
  ASSERT_FALSE(hb);
  EXPECT_EQ(hb.error().code(), Code::kNotPermitted);
  EXPECT_NE(hb.error().message().find("restart"), std::string::npos) << hb.error();
  EXPECT_TRUE(a.fenced());
  EXPECT_FALSE(a.lease().can_serve_writes());
  EXPECT_EQ(a.target_ids(), old_targets) << "it keeps the ids it serves under";
  // Restarted (a new process), the server joins as a new node.
  MgmtClient restarted(f.rpc(), f.storage(0, 2));
  ASSERT_TRUE(restarted.register_now());
  EXPECT_FALSE(restarted.fenced());
  EXPECT_NE(restarted.node_id(), old_node);
}

TEST(MgmtService, UnknownNodeHeartbeatAndFailoverToSecondAddress) {
  Fixture f;
  pb::HeartbeatRequest hb;
  hb.set_node_id(77);
  hb.set_incarnation(1);
  auto r = f.rpc().call<pb::HeartbeatReply>(kHeartbeat, hb);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kNotFound);

  // The first configured address is dead: the call goes on to the second.
  MgmtRpc two(f.client_io, f.client, {{"127.0.0.1", 1}, {"127.0.0.1", f.port_}}, 1000);
  auto st = two.call<pb::StatusReply>(kStatus, pb::StatusRequest{});
  ASSERT_TRUE(st) << st.error();
  MgmtRpc none(f.client_io, f.client, {{"127.0.0.1", 1}}, 1000);
  auto down = none.call<pb::StatusReply>(kStatus, pb::StatusRequest{});
  ASSERT_FALSE(down);
  EXPECT_TRUE(MgmtRpc::is_transport_error(down.error().code()));
}


// Some other program on a port (it answers anything with an HTTP error).
class NotAWeftServer {
 public:
  NotAWeftServer() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(fd_, 16), 0);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] {
      while (!stop_) {
        pollfd p{fd_, POLLIN, 0};
        if (::poll(&p, 1, 50) <= 0) continue;
        int c = ::accept(fd_, nullptr, nullptr);
        if (c < 0) continue;
        ++accepted_;
        char buf[4096];
        [[maybe_unused]] ssize_t n = ::recv(c, buf, sizeof buf, 0);
        std::string reply = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n" + std::string(40, 'x');
        n = ::send(c, reply.data(), reply.size(), MSG_NOSIGNAL);
        pollfd q{c, POLLIN, 0};
        ::poll(&q, 1, 2000);  // until the client closes: it reads the reply, not a reset
        ::close(c);
      }
    });
  }
  ~NotAWeftServer() {
    stop_ = true;
    thread_.join();
    ::close(fd_);
  }
  uint16_t port() const { return port_; }
  int accepted() const { return accepted_; }

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> accepted_{0};
  std::thread thread_;
};

// Another program on the first configured address (a wrong port in the
// config, a port reused): its answer is no mgmtd's, so not final, and the
// call goes on to the second address.
TEST(MgmtService, FailoverPastAnAddressThatIsNoMgmtd) {
  Fixture f;
  NotAWeftServer other;
  MgmtRpc two(f.client_io, f.client, {{"127.0.0.1", other.port()}, {"127.0.0.1", f.port_}}, 1000);
  auto st = two.call<pb::StatusReply>(kStatus, pb::StatusRequest{});
  ASSERT_TRUE(st) << st.error();
  EXPECT_EQ(other.accepted(), 1);
}

Result<pb::ClientHeartbeatReply> client_heartbeat(MgmtRpc& rpc, uint64_t id, std::string label) {
  pb::ClientHeartbeatRequest req;
  req.set_client_id(id);
  req.set_label(std::move(label));
  return rpc.call<pb::ClientHeartbeatReply>(kClientHeartbeat, req);
}

pb::ListClientsReply list_clients(MgmtRpc& rpc) {
  auto r = rpc.call<pb::ListClientsReply>(kListClients, pb::ListClientsRequest{});
  EXPECT_TRUE(r) << r.error();
  return r ? *r : pb::ListClientsReply{};
}

TEST(MgmtServiceClients, HeartbeatIsARegistrationThatExpiresWithoutBumpingRouting) {
  Fixture f;
  RoutingVersion before = f.state->routing_version();
  auto granted = client_heartbeat(f.rpc(), 0xabc, "host:42:test");
  ASSERT_TRUE(granted) << granted.error();
  EXPECT_EQ(granted->lease_ns(), 300'000'000);
  ASSERT_TRUE(client_heartbeat(f.rpc(), 0xdef, "host:43:test"));
  pb::ListClientsReply list = list_clients(f.rpc());
  ASSERT_EQ(list.clients_size(), 2);
  EXPECT_EQ(list.clients(0).id(), 0xabcu);
  EXPECT_EQ(list.clients(0).label(), "host:42:test");
  auto status = f.rpc().call<pb::StatusReply>(kStatus, pb::StatusRequest{});
  ASSERT_TRUE(status);
  EXPECT_EQ(status->clients_size(), 2) << "weft status shows clients";
  EXPECT_EQ(f.state->routing_version(), before) << "clients are not part of the routing info";

  // 0xdef keeps renewing, 0xabc stops: only 0xabc expires after lease + grace.
  auto deadline = std::chrono::steady_clock::now() + 5s;
  bool expired = false;
  while (!expired && std::chrono::steady_clock::now() < deadline) {
    ASSERT_TRUE(client_heartbeat(f.rpc(), 0xdef, "host:43:test"));
    std::this_thread::sleep_for(50ms);
    list = list_clients(f.rpc());
    expired = list.clients_size() == 1;
  }
  ASSERT_TRUE(expired) << "a client that stops heartbeating loses its lease";
  EXPECT_EQ(list.clients(0).id(), 0xdefu);
  EXPECT_TRUE(list.complete()) << "mgmtd has run for longer than lease + grace";
}

// client_lease_ms lowered across a restart of mgmtd: clients granted the old
// lease renew only every old lease / 3, so the table is complete (meta may
// close the sessions of clients missing from it) only after the old lease +
// grace, not the new one.
TEST(MgmtServiceClients, TableOfARestartWithALoweredLeaseWaitsForTheOldOne) {
  testing::TempDir dir;
  Fixture f(dir.path(), {.lease = 2s, .grace = 100ms});
  auto restart = [&] {  // no long poll runs: the service may go before the I/O threads
    f.stop_server();
    f.server.reset();
    f.service.reset();
    f.state.reset();  // releases the RocksDB lock
    f.start_server();
  };
  f.client_lease = {.lease = 300ms, .grace = 100ms};
  // Taken before the restart: the service counts from its start, inside restart().
  auto restarted = std::chrono::steady_clock::now();
  restart();
  std::this_thread::sleep_for(600ms);
  EXPECT_FALSE(f.service->clients().list().complete) << "a client may renew its 2 s lease only now";
  ASSERT_TRUE(eventually([&] { return f.service->clients().list().complete; }));
  EXPECT_GE(std::chrono::steady_clock::now() - restarted, 2100ms);
  // The ticker records the shorter lease once the old one ran out (a 200 ms
  // sleep stood here: a ticker held up longer left the 2 s lease recorded).
  ASSERT_TRUE(eventually([&] { return f.state->recorded_leases().client == 300ms; }));
  restarted = std::chrono::steady_clock::now();
  restart();
  EXPECT_EQ(f.state->leases_at_open().client, 300ms);
  ASSERT_TRUE(eventually([&] { return f.service->clients().list().complete; }));
  // The old lease would take 2.1 s from the service's start (after `restarted`);
  // the new one 0.4 s, plus the restart itself.
  EXPECT_LT(std::chrono::steady_clock::now() - restarted, 1900ms);
}

TEST(MgmtServiceClients, BadHeartbeatsGetClearErrors) {
  Fixture f;
  auto zero = client_heartbeat(f.rpc(), 0, "x");
  ASSERT_FALSE(zero);
  EXPECT_EQ(zero.error().code(), Code::kInvalidArgument);
  auto control = client_heartbeat(f.rpc(), 1, std::string("a\x01b"));
  ASSERT_FALSE(control);
  EXPECT_EQ(control.error().code(), Code::kInvalidArgument);
  EXPECT_EQ(list_clients(f.rpc()).clients_size(), 0);
}

// More clients than one RPC body holds (16,000 with 256-byte labels are ~4.6 MB
// against the 4 MiB limit): ListClients and Status answer in pages, and
// list_all_clients (meta's session reaper, `weft status`) gets every one.
TEST(MgmtServiceClients, ManyClientsAreListedInPages) {
  Fixture f("", {.lease = 60s, .grace = 10s});
  constexpr uint64_t kClients = 16'000;
  auto label_of = [](uint64_t id) { return fmt::format("{:0>256}", id); };
  {
    MgmtRpc& rpc = f.rpc();  // shared by four threads (made by the fixture, before them)
    std::vector<std::thread> threads;
    std::atomic<int> failed{0};
    for (uint64_t t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        for (uint64_t id = 1 + t; id <= kClients; id += 4)
          if (!client_heartbeat(rpc, id * 7919, label_of(id * 7919))) failed++;
      });
    }
    for (auto& t : threads) t.join();
    ASSERT_EQ(failed.load(), 0);
  }
  auto first = f.rpc().call<pb::ListClientsReply>(kListClients, pb::ListClientsRequest{});
  ASSERT_TRUE(first) << first.error();
  EXPECT_EQ(first->clients_size(), static_cast<int>(kClientsPerPage));
  EXPECT_TRUE(first->more());
  EXPECT_FALSE(first->complete()) << "a caller that does not page must not take one page for the whole list";

  for (bool ids_only : {false, true}) {
    auto all = list_all_clients(f.rpc(), ids_only);
    ASSERT_TRUE(all) << all.error();
    ASSERT_EQ(all->clients.size(), kClients);
    for (uint64_t i = 0; i < kClients; ++i) {
      ASSERT_EQ(all->clients[i].id, (i + 1) * 7919);
      ASSERT_EQ(all->clients[i].label, ids_only ? "" : label_of((i + 1) * 7919));
    }
    EXPECT_FALSE(all->tracked) << "this mgmtd has not run for a lease + grace";
  }

  auto status = f.rpc().call<pb::StatusReply>(kStatus, pb::StatusRequest{});
  ASSERT_TRUE(status) << status.error();
  EXPECT_EQ(status->clients_total(), kClients);
  EXPECT_EQ(status->clients_size(), static_cast<int>(kClientsPerPage));
}

}  // namespace
}  // namespace weft::mgmt
