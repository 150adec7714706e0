// Hostile requests against mgmtd: raw requests of every method of
// mgmt/service_methods.h, built field by field (none of MgmtClient's care),
// sent through rpc::Client to an in-process MgmtService over a persisted
// ClusterState on a ManualClock (no ticker: the test moves the clock and runs
// the lease check, so the seed alone decides what happens). A fixed-seed
// mt19937_64 (printed; WEFT_HOSTILE_SEED overrides) mixes a valid cluster
// built first (four listening storage nodes of two targets, a chain table
// over them, a meta node on the cluster's store, a client lease; kept alive
// as the clock moves) with: node ids 0, UINT32_MAX and unknown; the valid
// nodes' ids and addresses with other incarnations and kinds; addresses
// empty, huge, with NUL, control or non-UTF-8 bytes, bad ports; undefined
// node kinds; thousands of targets, names empty, huge, repeated, non-UTF-8;
// other nodes' data ids; absurd capacities and usage (used above capacity)
// in lists of thousands; sync-done reports of any chain, target and version;
// meta stores and marks of every kind; client ids and labels of every kind;
// chain tables of every shape; replacements, removals, promotions and
// refusal reports naming anything; long polls of every version; bodies that
// do not decode. Storm nodes left alone die, so admin operations meet down
// nodes and offline targets too. Then: floods of nodes, tables and clients,
// and a routing version from the future.
// Why: mgmtd takes requests from every server and client and hands its
// routing to all of them. A bad request must get a deliberate error (never
// kInternal, a hang or a dropped connection) and change nothing of the valid
// nodes (only valid requests may); every routing handed out must parse, keep
// check_chain's invariants and fit its frame; the state must reload from
// disk as it was; floods must meet their bounds as clear refusals.
#include <arpa/inet.h>
#include <fmt/format.h>
#include <google/protobuf/stubs/logging.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "common/hostile_draw.h"
#include "common/temp_dir.h"
#include "mgmt/client_list.h"
#include "mgmt/proto_convert.h"
#include "mgmt/service.h"
#include "mgmt/service_methods.h"
#include "rpc/client.h"
#include "rpc/frame.h"
#include "rpc/server.h"

namespace weft::mgmt {
namespace {

using namespace std::chrono_literals;
using weft::testing::TempDir;

constexpr char kToken[] = "hostile-token";
constexpr uint64_t kDefaultSeed = 0x5eed'3637'0000'0001;
constexpr int kRounds = 250;  // each round sends one request of every method
constexpr uint32_t kCallTimeoutMs = 10000;
constexpr auto kHung = std::chrono::milliseconds(5000);  // a call slower than this hung
constexpr LeaseConfig kLease{.lease = 10s, .grace = 5s};
constexpr LeaseConfig kClientLease{.lease = 30s, .grace = 10s};
constexpr int kKeepAliveEvery = 24;      // requests between two keep-alive rounds
constexpr Duration kKeepAliveStep = 2s;  // the clock moves this much at each (storm nodes left alone die)
constexpr size_t kValidStorage = 4;
constexpr size_t kValidTargets = 2;  // per valid storage node
constexpr uint32_t kValidReplicas = 3;
constexpr uint64_t kStoreId = 0x5707'e000'0000'0001;  // the cluster's meta store
constexpr uint64_t kStoreMark = uint64_t{1} << 20;
constexpr uint64_t kValidClient = 0xc11e'0000'0000'0001;
constexpr char kValidLabel[] = "host-a:4242:weft-fuse";
constexpr size_t kStormNodesKept = 48;  // nodes the storm registered that it still names
constexpr size_t kStormChains = 1500;   // the storm makes chain tables up to about this many chains
constexpr uint32_t kFrameBodyMax = rpc::FrameLimits{}.body_max;

uint64_t storm_seed() { return weft::hostile_seed(kDefaultSeed); }

// A TCP port on 127.0.0.1 that listens while the object lives (a valid
// storage node's address: mgmtd's probe of a refusal report finds it
// listening), or, once closed, refuses connections.
class Listener {
 public:
  Listener() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(fd_, SOMAXCONN), 0);  // probes connect and never wait to be accepted
    EXPECT_EQ(::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len), 0);
    port_ = ntohs(a.sin_port);
  }
  ~Listener() { close(); }
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  std::string address() const { return fmt::format("127.0.0.1:{}", port_); }

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
};

// mgmtd in this process, its state in `db_dir` (empty: in memory).
class Mgmtd {
 public:
  Mgmtd(const Clock& clock, const std::string& db_dir, bool accept_older_state = false) {
    ClusterOptions o{.lease = kLease, .db_dir = db_dir, .client_lease = kClientLease};
    o.accept_older_state = accept_older_state;
    auto opened = ClusterState::open(o, clock, registry_);
    EXPECT_TRUE(opened.has_value()) << opened.error();
    if (!opened) return;
    state_ = std::move(*opened);
    MgmtServiceOptions so{.client_lease = kClientLease};
    so.refusal_probe.connect_timeout = 100ms;
    so.refusal_probe.between = 1ms;
    service_ = std::make_unique<MgmtService>(*state_, clock, so, registry_);
    server_ =
        std::make_unique<rpc::Server>(io_, rpc::ServerOptions{.cluster_token = kToken, .name = "mgmtd"}, registry_);
    service_->register_methods(*server_);
    auto port = server_->listen("127.0.0.1", 0);
    EXPECT_TRUE(port.has_value()) << port.error();
    if (port) ep_ = {"127.0.0.1", *port};
  }
  ~Mgmtd() {
    if (server_) server_->stop();
    io_.stop();  // no long poll may outlive the service
    if (service_) service_->stop();
  }
  bool ok() const { return ep_.port != 0; }
  const rpc::Endpoint& ep() const { return ep_; }
  ClusterState& state() { return *state_; }
  const MgmtService& service() const { return *service_; }
  const metrics::Registry& registry() const { return registry_; }

 private:
  metrics::Registry registry_;
  rpc::IoPool io_{2};
  std::unique_ptr<ClusterState> state_;
  std::unique_ptr<MgmtService> service_;
  std::unique_ptr<rpc::Server> server_;
  rpc::Endpoint ep_;
};

class Rng : public HostileDraw {
 public:
  explicit Rng(uint64_t seed) : HostileDraw(seed) {}
  template <class T>
  const T& pick(const std::vector<T>& values) {
    return values[below(values.size())];
  }
  std::string printable(size_t n) {
    std::string s(n, ' ');
    for (char& c : s) c = static_cast<char>(between(0x20, 0x7e));
    return s;
  }
};

// A node as the storm knows it.
struct KnownNode {
  NodeId id = kInvalidNode;
  NodeKind kind = NodeKind::kStorage;
  std::string address;
  uint64_t incarnation = 0;
  std::vector<TargetId> targets;
  pb::RegisterRequest registration;  // as last accepted
};

// What the storm knows of the cluster: the valid nodes (which only valid
// requests may change) and what the answers told.
struct World {
  std::vector<KnownNode> valid;  // kValidStorage storage nodes, then the meta node
  std::set<uint64_t> valid_data_ids;
  std::vector<KnownNode> storm;  // registered by the storm (the last kStormNodesKept)
  std::map<ChainId, pb::Chain> chains;
  std::vector<TargetId> targets;
  std::vector<uint64_t> data_ids;  // of the storm's targets
  std::vector<uint64_t> clients;
  std::set<std::string> registered;  // every address the storm registered
  std::map<std::string, int> tally;  // notable outcomes, printed at the end
  RoutingVersion version = 0;
  std::string refused_address;  // nothing listens there
  std::string mgmtd_address;

  const KnownNode* valid_at(const std::string& address) const {
    for (const auto& n : valid)
      if (n.address == address) return &n;
    return nullptr;
  }
  KnownNode* storm_at(const std::string& address) {
    for (auto& n : storm)
      if (n.address == address) return &n;
    return nullptr;
  }
  bool is_valid_target(TargetId t) const {
    for (const auto& n : valid)
      if (std::find(n.targets.begin(), n.targets.end(), t) != n.targets.end()) return true;
    return false;
  }
  void learn(const pb::Routing& r) {
    version = std::max(version, r.version());
    chains.clear();
    for (const auto& c : r.chains()) chains[c.id()] = c;
    targets.clear();
    for (const auto& t : r.targets()) targets.push_back(t.id());
  }
  void learn_version(RoutingVersion v) { version = std::max(version, v); }
};

// What makes a request invalid by construction.
struct Verdict {
  std::vector<std::string> why;  // each reason it must be refused
  bool undecodable = false;      // kProtocol is its due (a body that does not parse)
  void refuse(std::string reason) { why.push_back(std::move(reason)); }
  void protocol(std::string reason) {
    undecodable = true;
    refuse(std::move(reason));
  }
};

// One request as sent, with what its answer must be.
struct Shot {
  const char* name = "";
  rpc::MethodId method;
  std::string body;
  std::string text;  // the request, for failure messages
  Verdict verdict;
  std::function<void(const std::string& reply)> check;  // of a success
};

template <class Req>
Shot make_shot(const char* name, rpc::MethodId method, const Req& req, Verdict v = {}) {
  Shot s;
  s.name = name;
  s.method = method;
  s.body = req.SerializeAsString();  // non-UTF-8 strings are sent as they are (they do not parse at mgmtd)
  s.text = req.ShortDebugString();
  if (s.text.size() > 600) s.text = s.text.substr(0, 600) + fmt::format("... ({} chars)", s.text.size());
  s.verdict = std::move(v);
  return s;
}

std::string describe(const Shot& s) {
  std::string why;
  for (const auto& w : s.verdict.why) why += (why.empty() ? "" : "; ") + w;
  return fmt::format("mgmt.{} {{{}}} ({} bytes){}{}", s.name, s.text, s.body.size(), why.empty() ? "" : ", invalid by ",
                     why);
}

template <class Reply>
std::optional<Reply> parse(const std::string& body) {
  Reply r;
  if (!r.ParseFromString(body)) return std::nullopt;
  return r;
}

// ---- What every routing handed out must be.

// It parses (defined kinds and states, no id twice), every chain keeps
// check_chain's invariants, names known targets on distinct nodes and
// belongs to the table it names, every target's node is known, every
// address is host:port, it fits a reply, and the space a client adds up from
// it (client statfs, cluster_space) does not wrap.
void expect_well_formed(const pb::Routing& p, const std::string& where) {
  EXPECT_LE(p.ByteSizeLong(), kRoutingBytesMax) << where;
  auto info = from_proto(p);
  ASSERT_TRUE(info.has_value()) << where << ": " << info.error();
  EXPECT_EQ(info->nodes.size(), static_cast<size_t>(p.nodes_size())) << where << ": a node id twice";
  EXPECT_EQ(info->targets.size(), static_cast<size_t>(p.targets_size())) << where << ": a target id twice";
  EXPECT_EQ(info->chains.size(), static_cast<size_t>(p.chains_size())) << where << ": a chain id twice";
  for (const auto& [id, n] : info->nodes) {
    EXPECT_NE(id, kInvalidNode) << where;
    EXPECT_TRUE(check_address(n.address).has_value()) << where << ": node " << id << " at '" << n.address << "'";
  }
  for (const auto& [id, t] : info->targets)
    EXPECT_TRUE(info->nodes.contains(t.node_id)) << where << ": target " << id << " on unknown node " << t.node_id;
  for (const auto& [id, c] : info->chains) {
    auto ok = check_chain(c);
    EXPECT_TRUE(ok.has_value()) << where << ": " << ok.error();
    std::set<NodeId> nodes;
    for (const ChainEntry& e : c.entries) {
      auto t = info->targets.find(e.target_id);
      if (t == info->targets.end()) {
        ADD_FAILURE() << where << ": chain " << id << " names unknown target " << e.target_id;
        continue;
      }
      EXPECT_TRUE(nodes.insert(t->second.node_id).second)
          << where << ": chain " << id << " has two targets on node " << t->second.node_id;
    }
    auto table = info->tables.find(c.table_id);
    EXPECT_TRUE(table != info->tables.end() &&
                std::find(table->second.chains.begin(), table->second.chains.end(), id) != table->second.chains.end())
        << where << ": chain " << id << " not in its table " << c.table_id;
  }
  for (const auto& [id, t] : info->tables)
    for (ChainId c : t.chains) EXPECT_TRUE(info->chains.contains(c)) << where << ": table " << id << " chain " << c;
  const SpaceTotals space = cluster_space(*info);
  EXPECT_GE(space.capacity_bytes, space.used_bytes) << where;
  for (const auto& [id, t] : info->targets)
    EXPECT_GE(space.used_bytes, t.used_bytes) << where << ": the used bytes of the cluster wrapped";
}

void expect_chains_well_formed(const google::protobuf::RepeatedPtrField<pb::Chain>& chains, const std::string& where) {
  for (const auto& c : chains) {
    auto chain = from_proto(c);
    ASSERT_TRUE(chain.has_value()) << where << ": " << chain.error();
    auto ok = check_chain(*chain);
    EXPECT_TRUE(ok.has_value()) << where << ": " << ok.error();
  }
}

// ---- Hostile values.

std::string fresh_address(Rng& r) {
  switch (r.below(3)) {
    case 0:
      return fmt::format("10.{}.{}.{}:{}", r.below(256), r.below(256), r.below(256), 1 + r.below(65535));
    case 1:
      return fmt::format("storage-{}.example:7000", r.below(1000000));
    default:
      return fmt::format("[fd00::{:x}:{:x}]:7000", r.below(65536), r.below(65536));
  }
}

// Addresses check_address refuses, odd ones it takes, and ones that do not
// parse (non-UTF-8 in a proto3 string).
std::string hostile_address(Rng& r, Verdict& v) {
  const int kind = static_cast<int>(r.below(10));
  if (kind < 5) {
    v.refuse("address");
    return r.one_of<std::string>({"", ":", "host", "host:", ":7000", "host:0", "host:65536", "host:-1", "host:+7",
                                  "host:99999999999999999999", "a:b:7000", "[::1:7000", "[]:1", "host:7000 ",
                                  std::string(kAddressBytesMax, 'h') + ":1", std::string(100000, 'h') + ":7000"});
  }
  if (kind < 7) {  // a host with a byte no host name or IP has (they were taken and handed out)
    v.refuse("address byte");
    return r.one_of<std::string>({std::string("127.0.0.2\0x:7000", 16), "host name:7000", "\x1b[2J:7000", "h\tx:1",
                                  "h\xc3\xa9llo:7000", "[::1 ]:7000", "[::1]]:7000"});
  }
  if (kind < 8)  // odd but taken
    return r.one_of<std::string>({std::string(kAddressBytesMax - 2, 'h') + ":1", "0.0.0.0:1", "[fe80::1%eth0]:7000",
                                  fmt::format("odd_{}-x:{}", r.below(1000), 1 + r.below(65535))});
  v.protocol("non-UTF-8 address");
  return r.one_of<std::string>({"\xff\xfe:7000", "h\xc0\xaf:1", std::string("\x80", 1) + ":9"});
}

// Byte counts of every size, used above capacity too, up to UINT64_MAX
// (cluster_space saturates its sums: they once wrapped to a small total).
constexpr uint64_t kAbsurdBytes = uint64_t{1} << 48;
uint64_t absurd_bytes(Rng& r) {
  return r.one_of<uint64_t>({0, 1, 4096, uint64_t{1} << 40, kAbsurdBytes - 1, kAbsurdBytes, r.below(kAbsurdBytes),
                             UINT64_MAX - 1, UINT64_MAX});
}

// Installed routing versions: never above mgmtd's (a future one makes mgmtd
// refuse every server until it restarts: AFutureRoutingVersion... below).
uint64_t installed_version(Rng& r, const World& w) {
  return r.one_of<uint64_t>({0, 0, 1, w.version > 0 ? w.version - 1 : 0, w.version});
}

// Targets of a registration: a few, or thousands; names and data ids of
// every kind.
void add_targets(Rng& r, const World& w, pb::RegisterRequest& q, Verdict& v, bool new_node) {
  const int mode = static_cast<int>(r.below(100));
  const size_t n = mode < 93   ? r.below(5)
                   : mode < 99 ? kTargetsPerNodeMax + 1 + r.below(2000)
                               : r.between(kTargetsPerNodeMax - 1, kTargetsPerNodeMax);
  if (n > kTargetsPerNodeMax) v.refuse("too many targets");
  std::set<std::string> names;
  for (size_t i = 0; i < n; ++i) {
    auto* t = q.add_targets();
    std::string name = fmt::format("t{}", i);
    if (r.chance(n > 100 ? 0 : 10)) {
      switch (r.below(6)) {
        case 0:
          name = "";
          v.refuse("empty target name");
          break;
        case 1:
          name = std::string(1024, 'n');
          break;
        case 2:
          name = std::string(1025 + r.below(5000), 'n');
          v.refuse("target name over 1024 bytes");
          break;
        case 3:
          name = r.one_of<std::string>({std::string("t\0x", 3), "\x1b[31mred", "/data/../..", "t 0"});
          break;
        case 4:
          name = r.one_of<std::string>({"\xff", "t\xc3"});
          v.protocol("non-UTF-8 target name");
          break;
        default:
          name = names.empty() ? "t0" : *names.begin();
          break;
      }
    }
    if (!name.empty() && !names.insert(name).second) v.refuse("a target name twice");
    t->set_name(name);
    t->set_capacity_bytes(r.chance(70) ? uint64_t{1} << 40 : absurd_bytes(r));
    t->set_used_bytes(r.chance(60) ? 0 : absurd_bytes(r));
    switch (r.below(n > 100 ? 1 : 8)) {
      case 0:
      case 1:
      case 2:
        t->set_data_id(r.u64());
        break;
      case 3:
        t->set_data_id(0);
        break;
      case 4:
        if (!w.valid_data_ids.empty()) {
          t->set_data_id(
              *std::next(w.valid_data_ids.begin(), static_cast<ptrdiff_t>(r.below(w.valid_data_ids.size()))));
          // Another up node serves that data: refused for a new node (a
          // known node's target of that name just records another data id).
          if (new_node) v.refuse("the data id of a valid target");
        }
        break;
      default:
        if (!w.data_ids.empty()) t->set_data_id(r.pick(w.data_ids));
        break;
    }
  }
}

void set_meta_fields(Rng& r, pb::RegisterRequest& q) {
  q.set_meta_store_id(r.one_of<uint64_t>({kStoreId, kStoreId, kStoreId, 0, r.u64()}));
  q.set_meta_ids_issued_below(r.one_of<uint64_t>({0, 1, kStoreMark - 1, kStoreMark, kStoreMark + r.below(1 << 20),
                                                  r.between(kStoreMark, uint64_t{1} << 40),
                                                  kStoreMark + kStoreChangeIdMargin, UINT64_MAX - 1, UINT64_MAX}));
}

// ---- One request of each method.

// At a valid node's address: another kind (kExists), an older incarnation
// (kNotPermitted), or its own registration again (idempotent).
Shot reregister_valid(Rng& r, World& w) {
  const KnownNode& node = r.pick(w.valid);
  pb::RegisterRequest q = node.registration;
  Verdict v;
  const size_t how = r.below(3);
  if (how == 0) {
    q.set_kind(node.kind == NodeKind::kStorage ? 2 : 1);
    q.clear_targets();
    v.refuse("a valid node's address as another kind");
  } else if (how == 1) {
    q.set_incarnation(r.between(0, node.incarnation - 1));
    if (r.chance(50)) add_targets(r, w, q, v, false);
    if (q.incarnation() > 0)
      v.refuse("a valid node's address with an older incarnation");
    else
      v.refuse("incarnation 0");
  }
  Shot s = make_shot("register", kRegister, q, std::move(v));
  if (how == 2)
    s.check = [&node](const std::string& body) {
      auto reply = parse<pb::RegisterReply>(body);
      ASSERT_TRUE(reply.has_value());
      EXPECT_EQ(reply->node_id(), node.id) << "a valid node's registration again";
      EXPECT_EQ(std::vector<TargetId>(reply->target_ids().begin(), reply->target_ids().end()), node.targets);
    };
  return s;
}

Shot register_shot(Rng& r, World& w) {
  if (r.chance(15)) return reregister_valid(r, w);
  pb::RegisterRequest q;
  Verdict v;
  KnownNode* known = !w.storm.empty() && r.chance(30) ? &w.storm[r.below(w.storm.size())] : nullptr;
  // The kind: a known node's mostly, any defined one, or an undefined one.
  if (r.chance(8)) {
    q.set_kind(r.one_of<uint32_t>({0, 4, 5, 255, 0x80000001u, UINT32_MAX}));
    v.refuse("undefined node kind");  // kInvalidArgument: the request parsed
  } else if (known != nullptr && r.chance(85)) {
    q.set_kind(static_cast<uint32_t>(known->kind));
  } else {
    q.set_kind(r.one_of<uint32_t>({1, 1, 1, 2, 2, 3}));
    if (known != nullptr && q.kind() != static_cast<uint32_t>(known->kind)) v.refuse("a known address as another kind");
  }
  if (known != nullptr) {
    q.set_address(known->address);
    const uint64_t inc = known->incarnation;
    q.set_incarnation(r.one_of<uint64_t>({inc, inc, inc + 1, inc + 1, inc - 1, UINT64_MAX, 0}));
    if (q.incarnation() == 0)
      v.refuse("incarnation 0");
    else if (q.incarnation() < inc)
      v.refuse("an older incarnation");
  } else {
    q.set_address(r.chance(70) ? (r.chance(85) ? fresh_address(r) : w.refused_address) : hostile_address(r, v));
    if (w.valid_at(q.address()) != nullptr) q.set_address(fresh_address(r));  // the valid nodes': reregister_valid
    q.set_incarnation(r.one_of<uint64_t>({1, 2, r.between(3, uint64_t{1} << 40), UINT64_MAX, r.u64(), 0}));
    if (q.incarnation() == 0) v.refuse("incarnation 0");
  }
  const bool storage = q.kind() == static_cast<uint32_t>(NodeKind::kStorage);
  if (storage || r.chance(10)) {
    add_targets(r, w, q, v, !w.registered.contains(q.address()));
    if (!storage && q.targets_size() > 0) v.refuse("targets of a node that is not a storage node");
  }
  q.set_installed_routing_version(installed_version(r, w));
  if (q.kind() == static_cast<uint32_t>(NodeKind::kMeta) || r.chance(10)) set_meta_fields(r, q);
  const bool meta = q.kind() == static_cast<uint32_t>(NodeKind::kMeta);
  // A store change is an operator's word: sent only where the request is
  // refused for another reason (it must then leave the recorded store as it
  // was), or ignored (not a meta node).
  if (!v.why.empty() || !meta) q.set_accept_store_change(r.chance(30));
  if (meta && !q.accept_store_change() && q.meta_store_id() != 0 && q.meta_store_id() != kStoreId)
    v.refuse("another meta store");
  Shot s = make_shot("register", kRegister, q, std::move(v));
  s.check = [&w, q](const std::string& body) {
    auto reply = parse<pb::RegisterReply>(body);
    ASSERT_TRUE(reply.has_value());
    EXPECT_NE(reply->node_id(), kInvalidNode);
    ASSERT_EQ(reply->target_ids_size(), q.targets_size());
    w.learn_version(reply->routing_version());
    w.registered.insert(q.address());
    KnownNode* n = w.storm_at(q.address());
    if (n == nullptr) {
      if (w.storm.size() >= kStormNodesKept) w.storm.erase(w.storm.begin());
      n = &w.storm.emplace_back();
    }
    n->id = reply->node_id();
    n->kind = static_cast<NodeKind>(q.kind());
    n->address = q.address();
    n->incarnation = q.incarnation();
    n->targets.assign(reply->target_ids().begin(), reply->target_ids().end());
    n->registration = q;
    for (const auto& t : q.targets())
      if (t.data_id() != 0 && w.data_ids.size() < 256) w.data_ids.push_back(t.data_id());
  };
  return s;
}

// Usage reports: the node's own targets, others', unknown ones; absurd
// counts; a few or thousands. A valid node's own targets never report a
// failure (a valid request that takes them out of their chains).
void add_usage(Rng& r, const World& w, const KnownNode* node, bool valid_node, pb::HeartbeatRequest& q) {
  const int mode = static_cast<int>(r.below(100));
  const size_t n = mode < 85 ? r.below(5) : mode < 95 ? r.between(100, 3000) : r.between(20000, 50000);
  for (size_t i = 0; i < n; ++i) {
    auto* u = q.add_usage();
    const bool own = node != nullptr && !node->targets.empty() && r.chance(60);
    if (own)
      u->set_target_id(r.pick(node->targets));
    else if (!w.targets.empty() && r.chance(50))
      u->set_target_id(r.pick(w.targets));
    else
      u->set_target_id(r.one_of<uint64_t>({0, UINT64_MAX, r.u64()}));
    u->set_capacity_bytes(absurd_bytes(r));
    u->set_used_bytes(r.chance(30) ? u->capacity_bytes() + r.below(1000) : absurd_bytes(r));
    u->set_fs_id(r.one_of<uint64_t>({0, 1, r.u64()}));
    u->set_fs_free_bytes(absurd_bytes(r));
    const bool own_valid = valid_node && (own || w.is_valid_target(u->target_id()));
    u->set_failed(!own_valid && r.chance(n > 100 ? 1 : 10));
  }
}

// Sync-done reports: known chains or not, any target, any chain version.
void add_sync_done(Rng& r, const World& w, const KnownNode* node, pb::HeartbeatRequest& q) {
  const int mode = static_cast<int>(r.below(100));
  const size_t n = mode < 85 ? r.below(4) : mode < 97 ? r.between(100, 3000) : r.between(20000, 40000);
  for (size_t i = 0; i < n; ++i) {
    auto* s = q.add_sync_done();
    uint64_t cv = 0;
    if (!w.chains.empty() && r.chance(70)) {
      auto it = std::next(w.chains.begin(), static_cast<ptrdiff_t>(r.below(w.chains.size())));
      s->set_chain_id(it->first);
      cv = it->second.version();
      if (it->second.entries_size() > 0 && r.chance(60))
        s->set_target_id(it->second.entries(static_cast<int>(r.below(it->second.entries_size()))).target_id());
    } else {
      s->set_chain_id(r.one_of<uint32_t>({0, UINT32_MAX, r.u32()}));
    }
    if (s->target_id() == 0 && node != nullptr && !node->targets.empty() && r.chance(50))
      s->set_target_id(r.pick(node->targets));
    else if (s->target_id() == 0)
      s->set_target_id(r.one_of<uint64_t>({0, UINT64_MAX, r.u64()}));
    s->set_chain_version(r.one_of<uint64_t>({cv, cv, cv > 0 ? cv - 1 : 0, cv + 1, 0, UINT64_MAX, r.u64()}));
  }
}

Shot heartbeat_shot(Rng& r, World& w) {
  pb::HeartbeatRequest q;
  Verdict v;
  const KnownNode* node = nullptr;
  bool valid_node = false;
  const size_t who = r.below(10);
  if (who < 4 && !w.storm.empty()) {
    node = &r.pick(w.storm);
  } else if (who < 7) {
    node = &r.pick(w.valid);
    valid_node = true;
  }
  if (node != nullptr) {
    q.set_node_id(node->id);
    const uint64_t inc = node->incarnation;
    const size_t age = r.below(8);
    q.set_incarnation(age < 6 ? inc : age == 6 ? inc - 1 : inc + 1);
    if (q.incarnation() != inc) v.refuse(q.incarnation() < inc ? "an older incarnation" : "a newer incarnation");
  } else {
    q.set_node_id(r.one_of<uint32_t>({0, UINT32_MAX, 0x80000000u | r.u32()}));
    q.set_incarnation(r.one_of<uint64_t>({0, 1, UINT64_MAX, r.u64()}));
    v.refuse("an unknown node id");
  }
  const bool correct = node != nullptr && q.incarnation() == node->incarnation;
  add_usage(r, w, node, valid_node && correct, q);
  add_sync_done(r, w, node, q);
  q.set_installed_routing_version(installed_version(r, w));
  if ((node != nullptr && node->kind == NodeKind::kMeta) || r.chance(15)) {
    q.set_meta_store_id(r.one_of<uint64_t>({kStoreId, kStoreId, 0, r.u64()}));
    q.set_meta_ids_issued_below(
        r.one_of<uint64_t>({0, kStoreMark - 1, kStoreMark, kStoreMark + r.below(1 << 20), UINT64_MAX, r.u64()}));
    if (correct && node->kind == NodeKind::kMeta && q.meta_store_id() != 0 && q.meta_store_id() != kStoreId)
      v.refuse("a meta node on another store");
  }
  Shot s = make_shot("heartbeat", kHeartbeat, q, std::move(v));
  s.check = [&w](const std::string& body) {
    auto reply = parse<pb::HeartbeatReply>(body);
    ASSERT_TRUE(reply.has_value());
    EXPECT_GT(reply->lease_ns(), 0);
    w.learn_version(reply->routing_version());
  };
  return s;
}

// A known version long-polls (briefly); any other is answered at once.
Shot get_routing_shot(Rng& r, World& w) {
  pb::GetRoutingRequest q;
  if (r.chance(50)) {
    q.set_known_version(r.one_of<uint64_t>({w.version, w.version, w.version > 0 ? w.version - 1 : 0, 0}));
    q.set_wait_ms(r.one_of<uint32_t>({0, 1, 5}));
  } else {  // above any version mgmtd will reach here: answered with the routing at once, whatever the wait
    q.set_known_version(r.one_of<uint64_t>(
        {w.version + (uint64_t{1} << 32), UINT64_MAX, UINT64_MAX - 1, r.u64() | (uint64_t{1} << 63)}));
    q.set_wait_ms(r.one_of<uint32_t>({0, kRoutingWaitMsMax, kRoutingWaitMsMax + 1, UINT32_MAX, r.u32()}));
  }
  Shot s = make_shot("get_routing", kGetRouting, q);
  s.check = [&w, q](const std::string& body) {
    auto reply = parse<pb::GetRoutingReply>(body);
    ASSERT_TRUE(reply.has_value());
    if (reply->unchanged()) {
      EXPECT_EQ(reply->version(), q.known_version());
      return;
    }
    EXPECT_EQ(reply->routing().version(), reply->version());
    expect_well_formed(reply->routing(), "GetRouting");
    w.learn(reply->routing());
  };
  return s;
}

// Tables of every shape. Past kStormChains chains only shapes refused
// whatever the cluster (the bounds of tables and chains: the flood test).
Shot create_chain_table_shot(Rng& r, World& w) {
  pb::CreateChainTableRequest q;
  Verdict v;
  if (w.chains.size() < kStormChains && r.chance(70)) {
    q.set_replicas(r.one_of<uint32_t>({1, 2, 2, 3, 3, 4, 7, 1000}));
    q.set_chains_per_target(r.one_of<uint32_t>({0, 0, 1, 2, 3}));
  } else {
    q.set_replicas(r.one_of<uint32_t>({0, 0, 1, 2, 3, UINT32_MAX}));
    q.set_chains_per_target(r.one_of<uint32_t>({0, 1, kChainsPerTargetMax + 1, UINT32_MAX}));
    if (q.replicas() > 0 && q.replicas() < UINT32_MAX && q.chains_per_target() <= kChainsPerTargetMax)
      q.set_replicas(0);
  }
  if (q.replicas() == 0) v.refuse("no replicas");
  if (q.replicas() == UINT32_MAX) v.refuse("more replicas than nodes");
  if (q.chains_per_target() > kChainsPerTargetMax) v.refuse("too many chains per target");
  Shot s = make_shot("create_chain_table", kCreateChainTable, q, std::move(v));
  s.check = [&w, q](const std::string& body) {
    auto reply = parse<pb::CreateChainTableReply>(body);
    ASSERT_TRUE(reply.has_value());
    EXPECT_EQ(reply->table().replicas(), q.replicas());
    EXPECT_EQ(reply->table().chains_size(), reply->chains_size());
    expect_chains_well_formed(reply->chains(), "CreateChainTable");
    for (const auto& c : reply->chains()) {
      EXPECT_EQ(static_cast<uint32_t>(c.entries_size()), q.replicas());
      w.chains[c.id()] = c;
    }
    w.learn_version(reply->routing_version());
  };
  return s;
}

// Bytes of unknown fields (a newer peer's): ignored.
std::string unknown_fields(Rng& r) {
  if (r.chance(70)) return "";
  std::string junk = r.printable(r.below(300));
  return fmt::format("\x78{:c}", static_cast<char>(r.below(128))) + "\x82\x01" + static_cast<char>(junk.size() & 0x7f) +
         junk.substr(0, junk.size() & 0x7f);
}

Shot list_chain_tables_shot(Rng& r, World& w) {
  Shot s = make_shot("list_chain_tables", kListChainTables, pb::ListChainTablesRequest{});
  s.body = unknown_fields(r);
  s.check = [&w](const std::string& body) {
    auto reply = parse<pb::ListChainTablesReply>(body);
    ASSERT_TRUE(reply.has_value());
    expect_chains_well_formed(reply->chains(), "ListChainTables");
    std::set<uint32_t> listed;
    for (const auto& t : reply->tables()) listed.insert(t.chains().begin(), t.chains().end());
    EXPECT_EQ(listed.size(), static_cast<size_t>(reply->chains_size()));
    w.learn_version(reply->routing_version());
  };
  return s;
}

Shot status_shot(Rng& r, World& w) {
  Shot s = make_shot("status", kStatus, pb::StatusRequest{});
  s.body = unknown_fields(r);
  s.check = [&w](const std::string& body) {
    auto reply = parse<pb::StatusReply>(body);
    ASSERT_TRUE(reply.has_value());
    expect_well_formed(reply->routing(), "Status");
    EXPECT_LE(static_cast<size_t>(reply->clients_size()), kClientsPerPage);
    EXPECT_GE(reply->clients_total(), static_cast<uint64_t>(reply->clients_size()));
    EXPECT_EQ(reply->behind(), "");
    EXPECT_EQ(reply->meta_store_id(), kStoreId) << "the cluster's meta store changed";
    EXPECT_GE(reply->meta_ids_issued_below(), kStoreMark);
    w.learn(reply->routing());
  };
  return s;
}

Shot client_heartbeat_shot(Rng& r, World& w) {
  pb::ClientHeartbeatRequest q;
  Verdict v;
  switch (r.below(6)) {
    case 0:
      q.set_client_id(kValidClient);
      break;
    case 1:
      q.set_client_id(w.clients.empty() ? r.u64() | 1 : r.pick(w.clients));
      break;
    case 2:
      q.set_client_id(r.one_of<uint64_t>({0, 0, UINT64_MAX, 1}));
      if (q.client_id() == 0) v.refuse("client id 0");
      break;
    default:
      q.set_client_id(r.u64() | 1);
  }
  switch (r.below(10)) {
    case 0:
      q.set_label("");
      break;
    case 1:
      q.set_label(r.printable(kClientLabelBytesMax));
      break;
    case 2:
      q.set_label(r.printable(r.one_of<size_t>({kClientLabelBytesMax + 1, 5000, 100000})));
      v.refuse("label too long");
      break;
    case 3:
      q.set_label(r.one_of<std::string>({std::string("a\0b", 3), "\x1b[2J", "tab\there", "line\n", "\x7f"}));
      v.refuse("label not printable");
      break;
    case 4:
      q.set_label(r.one_of<std::string>({"h\xc3\xa9", "\xe2\x82\xac"}));  // valid UTF-8, not ASCII
      v.refuse("label not printable ASCII");
      break;
    case 5:
      q.set_label(r.one_of<std::string>({"\xff", "a\xc0"}));
      v.protocol("non-UTF-8 label");
      break;
    default:
      q.set_label(fmt::format("host-{}:{}:weft", r.below(100), r.below(100000)));
  }
  Shot s = make_shot("client_heartbeat", kClientHeartbeat, q, std::move(v));
  s.check = [&w, id = q.client_id()](const std::string& body) {
    auto reply = parse<pb::ClientHeartbeatReply>(body);
    ASSERT_TRUE(reply.has_value());
    EXPECT_GT(reply->lease_ns(), 0);
    if (id != kValidClient && w.clients.size() < 256) w.clients.push_back(id);
  };
  return s;
}

Shot list_clients_shot(Rng& r, World& w) {
  pb::ListClientsRequest q;
  q.set_after_id(r.one_of<uint64_t>(
      {0, 0, kValidClient - 1, kValidClient, UINT64_MAX, w.clients.empty() ? 1 : r.pick(w.clients), r.u64()}));
  q.set_ids_only(r.chance(50));
  Shot s = make_shot("list_clients", kListClients, q);
  s.check = [q](const std::string& body) {
    auto reply = parse<pb::ListClientsReply>(body);
    ASSERT_TRUE(reply.has_value());
    EXPECT_LE(static_cast<size_t>(reply->clients_size()), q.ids_only() ? kClientIdsPerPage : kClientsPerPage);
    uint64_t last = q.after_id();
    for (const auto& c : reply->clients()) {
      EXPECT_GT(c.id(), last) << "out of order or not after after_id";
      last = c.id();
      EXPECT_LE(c.label().size(), kClientLabelBytesMax);
      if (q.ids_only()) {
        EXPECT_EQ(c.label(), "");
      }
    }
    EXPECT_FALSE(reply->complete() && reply->more());
  };
  return s;
}

// Targets of every kind: the storm's, the valid ones, unknown ones.
TargetId any_target(Rng& r, const World& w) {
  const size_t pick = r.below(10);
  if (pick < 5 && !w.storm.empty()) {
    const KnownNode& n = r.pick(w.storm);
    if (!n.targets.empty()) return r.pick(n.targets);
  }
  if (pick < 7 && !w.targets.empty()) return r.pick(w.targets);
  if (pick < 8) return r.pick(w.valid[r.below(kValidStorage)].targets);
  return r.one_of<uint64_t>({0, UINT64_MAX, r.u64()});
}

// A target offline in some chain (what a replacement may take out), if any.
std::optional<TargetId> offline_target(Rng& r, const World& w) {
  std::vector<TargetId> offline;
  for (const auto& [id, c] : w.chains)
    for (const auto& e : c.entries())
      if (e.state() == static_cast<uint32_t>(TargetState::kOffline)) offline.push_back(e.target_id());
  if (offline.empty()) return std::nullopt;
  return r.pick(offline);
}

// A storm target in no chain (what a replacement may put in), if any.
std::optional<TargetId> spare_target(Rng& r, const World& w) {
  std::set<TargetId> in_chains;
  for (const auto& [id, c] : w.chains)
    for (const auto& e : c.entries()) in_chains.insert(e.target_id());
  std::vector<TargetId> spare;
  for (const KnownNode& n : w.storm)
    for (TargetId t : n.targets)
      if (!in_chains.contains(t)) spare.push_back(t);
  if (spare.empty()) return std::nullopt;
  return r.pick(spare);
}

Shot replace_target_shot(Rng& r, World& w) {
  pb::ReplaceTargetRequest q;
  Verdict v;
  const bool plausible = r.chance(40);
  q.set_old_target(plausible ? offline_target(r, w).value_or(any_target(r, w)) : any_target(r, w));
  q.set_new_target(r.chance(10) ? q.old_target()
                   : plausible  ? spare_target(r, w).value_or(any_target(r, w))
                                : any_target(r, w));
  q.set_force(r.chance(20));
  if (q.old_target() == q.new_target()) v.refuse("a target by itself");
  if (w.is_valid_target(q.old_target())) v.refuse("a valid target (it serves)");
  if (w.is_valid_target(q.new_target())) v.refuse("a valid target as the new one (it is in chains)");
  Shot s = make_shot("replace_target", kReplaceTarget, q, std::move(v));
  s.check = [&w](const std::string& body) {
    auto reply = parse<pb::ReplaceTargetReply>(body);
    ASSERT_TRUE(reply.has_value());
    ++w.tally["target replaced"];
    EXPECT_GT(reply->chains_size(), 0);
    expect_chains_well_formed(reply->chains(), "ReplaceTarget");
    for (const auto& c : reply->chains()) w.chains[c.id()] = c;
    w.learn_version(reply->routing_version());
  };
  return s;
}

Shot remove_node_shot(Rng& r, World& w) {
  pb::RemoveNodeRequest q;
  Verdict v;
  const size_t pick = r.below(10);
  if (pick < 6 && !w.storm.empty()) {
    q.set_node_id(r.pick(w.storm).id);
  } else if (pick < 8) {
    q.set_node_id(r.pick(w.valid).id);
    v.refuse("a valid node (it is up)");
  } else {
    q.set_node_id(r.one_of<uint32_t>({0, UINT32_MAX, 0x80000000u | r.u32()}));
    v.refuse("an unknown node");
  }
  Shot s = make_shot("remove_node", kRemoveNode, q, std::move(v));
  s.check = [&w, id = q.node_id()](const std::string& body) {
    auto reply = parse<pb::RemoveNodeReply>(body);
    ASSERT_TRUE(reply.has_value());
    std::erase_if(w.storm, [id](const KnownNode& n) { return n.id == id; });
    ++w.tally["node removed"];
    w.learn_version(reply->routing_version());
  };
  return s;
}

Shot promote_target_shot(Rng& r, World& w) {
  pb::PromoteTargetRequest q;
  Verdict v;
  std::vector<ChainId> lost;  // every entry offline: what a promotion decides for
  for (const auto& [id, c] : w.chains) {
    const auto& e = c.entries();
    auto offline = [](const pb::ChainEntry& x) { return x.state() == static_cast<uint32_t>(TargetState::kOffline); };
    if (std::all_of(e.begin(), e.end(), offline)) lost.push_back(id);
  }
  if (!w.chains.empty() && r.chance(80)) {
    auto it = !lost.empty() && r.chance(50)
                  ? w.chains.find(r.pick(lost))
                  : std::next(w.chains.begin(), static_cast<ptrdiff_t>(r.below(w.chains.size())));
    q.set_chain(it->first);
    if (it->second.entries_size() > 0 && r.chance(70))
      q.set_target(it->second.entries(static_cast<int>(r.below(it->second.entries_size()))).target_id());
    else
      q.set_target(any_target(r, w));
  } else {
    // Chain ids above UINT32_MAX too: the field is 64 bits, chain ids 32 (they
    // were cut to another chain's: 2^32 + 1 promoted in chain 1).
    q.set_chain(r.one_of<uint64_t>({0, UINT32_MAX, 0x80000000u | r.u32(), (uint64_t{1} << 32) | (w.chains.empty() ? 1 : w.chains.begin()->first),
                                    UINT64_MAX}));
    q.set_target(any_target(r, w));
    v.refuse("an unknown chain");
  }
  q.set_force(r.chance(30));
  Shot s = make_shot("promote_target", kPromoteTarget, q, std::move(v));
  s.check = [&w](const std::string& body) {
    auto reply = parse<pb::PromoteTargetReply>(body);
    ASSERT_TRUE(reply.has_value());
    ++w.tally["target promoted"];
    pb::Routing one;
    *one.add_chains() = reply->chain();
    expect_chains_well_formed(one.chains(), "PromoteTarget");
    w.chains[reply->chain().id()] = reply->chain();
    w.learn_version(reply->routing_version());
  };
  return s;
}

Shot report_refusal_shot(Rng& r, World& w) {
  pb::ReportRefusalRequest q;
  Verdict v;
  const size_t pick = r.below(10);
  if (pick < 3)
    q.set_address(r.pick(w.valid).address);
  else if (pick < 5)
    q.set_address(w.refused_address);
  else if (pick < 7 && !w.storm.empty())
    q.set_address(r.pick(w.storm).address);
  else if (pick < 8)
    q.set_address(w.mgmtd_address);
  else
    q.set_address(hostile_address(r, v));
  if (!v.undecodable) v.why.clear();  // a malformed address is refused, an odd one reported "not-up"
  Shot s = make_shot("report_refusal", kReportRefusal, q, std::move(v));
  s.check = [&w, address = q.address()](const std::string& body) {
    auto reply = parse<pb::ReportRefusalReply>(body);
    ASSERT_TRUE(reply.has_value());
    static const std::set<std::string> outcomes = {"declared", "listening", "probing", "not-up", "off", "kept"};
    EXPECT_TRUE(outcomes.contains(reply->outcome())) << reply->outcome();
    ++w.tally["refusal report " + reply->outcome()];
    EXPECT_FALSE(w.valid_at(address) != nullptr && reply->outcome() == "declared")
        << "a valid node, which listens, declared dead";
  };
  return s;
}

struct Method {
  const char* name;
  Shot (*shot)(Rng&, World&);
};

// Every method of service_methods.h.
constexpr Method kMethods[] = {
    {"register", register_shot},
    {"heartbeat", heartbeat_shot},
    {"get_routing", get_routing_shot},
    {"create_chain_table", create_chain_table_shot},
    {"list_chain_tables", list_chain_tables_shot},
    {"status", status_shot},
    {"client_heartbeat", client_heartbeat_shot},
    {"list_clients", list_clients_shot},
    {"replace_target", replace_target_shot},
    {"remove_node", remove_node_shot},
    {"promote_target", promote_target_shot},
    {"report_refusal", report_refusal_shot},
};

// Now and then a body cut in the middle of a field tag: it cannot decode.
void maybe_spoil(Rng& r, Shot& s) {
  if (!r.chance(3)) return;
  s.body += "\xff\xff";
  s.verdict.protocol("a body that does not decode");
  s.check = nullptr;
}

// Quiets what the storm makes mgmtd log (thousands of ignored reports, UTF-8
// complaints of protobuf) for the test's lifetime.
class QuietLogs {
 public:
  QuietLogs() : level_(spdlog::get_level()) { spdlog::set_level(spdlog::level::err); }
  ~QuietLogs() { spdlog::set_level(level_); }

 private:
  spdlog::level::level_enum level_;
  google::protobuf::LogSilencer protobuf_;
};

class HostileRequestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    open_mgmtd();
    ASSERT_TRUE(mgmtd_->ok());
    world_.mgmtd_address = mgmtd_->ep().to_string();
    Listener refusing;
    world_.refused_address = refusing.address();
    refusing.close();
    ASSERT_NO_FATAL_FAILURE(build_valid_cluster());
  }

  void open_mgmtd() { mgmtd_ = std::make_unique<Mgmtd>(clock_, dir_.path() + "/state"); }

  template <class Reply, class Req>
  Result<Reply> call(rpc::MethodId method, const Req& req) {
    return client_.call_blocking<Reply>(mgmtd_->ep(), method, req, {}, kCallTimeoutMs);
  }

  // Calls `method` with `req`; EXPECTs success.
  template <class Reply, class Req>
  Reply must(rpc::MethodId method, const Req& req) {
    auto r = call<Reply>(method, req);
    EXPECT_TRUE(r.has_value()) << req.ShortDebugString() << ": " << r.error();
    return r ? std::move(*r) : Reply{};
  }

  // Four storage nodes of two targets, listening; a chain table of three
  // replicas over them; a meta node on the cluster's store; a client lease.
  void build_valid_cluster() {
    for (size_t i = 0; i < kValidStorage; ++i) {
      listeners_.push_back(std::make_unique<Listener>());
      pb::RegisterRequest q;
      q.set_kind(static_cast<uint32_t>(NodeKind::kStorage));
      q.set_address(listeners_.back()->address());
      q.set_incarnation(1000 + i);
      for (size_t t = 0; t < kValidTargets; ++t) {
        auto* pt = q.add_targets();
        pt->set_name(fmt::format("/data/ssd{}", t));
        pt->set_capacity_bytes(uint64_t{1} << 40);
        pt->set_used_bytes(uint64_t{1} << 30);
        pt->set_data_id(0xda7a'0000'0000'0000 | (i << 8) | t);
        world_.valid_data_ids.insert(pt->data_id());
      }
      add_valid(NodeKind::kStorage, q);
    }
    pb::CreateChainTableRequest table;
    table.set_replicas(kValidReplicas);
    auto created = must<pb::CreateChainTableReply>(kCreateChainTable, table);
    ASSERT_GT(created.chains_size(), 0);
    pb::RegisterRequest meta;
    meta.set_kind(static_cast<uint32_t>(NodeKind::kMeta));
    meta.set_address("127.0.0.1:9500");
    meta.set_incarnation(77);
    meta.set_meta_store_id(kStoreId);
    meta.set_meta_ids_issued_below(kStoreMark);
    add_valid(NodeKind::kMeta, meta);
    pb::ClientHeartbeatRequest client;
    client.set_client_id(kValidClient);
    client.set_label(kValidLabel);
    must<pb::ClientHeartbeatReply>(kClientHeartbeat, client);
    before_ = mgmtd_->state().routing();
    world_.version = before_.version;
    pb::Routing routing;
    to_proto(before_, &routing);
    world_.learn(routing);
  }

  void add_valid(NodeKind kind, const pb::RegisterRequest& q) {
    auto reply = must<pb::RegisterReply>(kRegister, q);
    ASSERT_NE(reply.node_id(), kInvalidNode);
    world_.valid.push_back(KnownNode{.id = reply.node_id(),
                                     .kind = kind,
                                     .address = q.address(),
                                     .incarnation = q.incarnation(),
                                     .targets = {reply.target_ids().begin(), reply.target_ids().end()},
                                     .registration = q});
  }

  // The clock moves; the valid nodes and client heartbeat (sane usage); the
  // lease check runs: storm nodes left alone die.
  void keep_alive() {
    clock_.advance(kKeepAliveStep);
    for (const KnownNode& n : world_.valid) {
      pb::HeartbeatRequest q;
      q.set_node_id(n.id);
      q.set_incarnation(n.incarnation);
      for (TargetId t : n.targets) {
        auto* u = q.add_usage();
        u->set_target_id(t);
        u->set_capacity_bytes(uint64_t{1} << 40);
        u->set_used_bytes(uint64_t{1} << 30);
      }
      if (n.kind == NodeKind::kMeta) {
        q.set_meta_store_id(kStoreId);
        q.set_meta_ids_issued_below(kStoreMark);
      }
      world_.learn_version(must<pb::HeartbeatReply>(kHeartbeat, q).routing_version());
    }
    pb::ClientHeartbeatRequest client;
    client.set_client_id(kValidClient);
    client.set_label(kValidLabel);
    must<pb::ClientHeartbeatReply>(kClientHeartbeat, client);
    auto ticked = mgmtd_->state().tick();
    ASSERT_TRUE(ticked.has_value()) << ticked.error();
    world_.learn_version(mgmtd_->state().routing_version());
  }

  // Sends `s` and judges the answer; false when mgmtd stopped answering.
  bool fire(const Shot& s) {
    const auto start = std::chrono::steady_clock::now();
    auto r = client_.call_blocking(mgmtd_->ep(), s.method, s.body, {}, kCallTimeoutMs);
    const auto took = std::chrono::steady_clock::now() - start;
    outcomes_[s.name][std::string(r ? "ok" : code_name(r.error().code()))]++;
    took_[s.name] += took;
    if (took > kHung) {
      ADD_FAILURE() << "no answer for " << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
                    << " ms: " << describe(s);
      return false;
    }
    if (r) {
      EXPECT_LE(r->body.size(), kFrameBodyMax);
      if (!s.verdict.why.empty()) {
        ADD_FAILURE() << "an invalid request succeeded: " << describe(s);
      } else if (s.check) {
        s.check(r->body);
      }
      return true;
    }
    const Code c = r.error().code();
    if (c == Code::kDisconnected || c == Code::kTimeout || c == Code::kUnavailable) {
      ADD_FAILURE() << "mgmtd stopped answering: " << r.error() << "\n  request: " << describe(s);
      return false;
    }
    const bool deliberate =
        c != Code::kInternal && c != Code::kUnknownMethod && (c != Code::kProtocol || s.verdict.undecodable);
    EXPECT_TRUE(deliberate) << r.error() << "\n  request: " << describe(s);
    return true;
  }

  void print_outcomes(int sent, std::chrono::steady_clock::duration took) const {
    std::printf("%d requests in %lld ms\n", sent,
                static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(took).count()));
    for (const auto& [name, codes] : outcomes_) {
      const auto [line, total] = describe_counts(codes);
      std::printf("  mgmt.%s: %d in %lld ms:%s\n", name.c_str(), total,
                  static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(took_.at(name)).count()),
                  line.c_str());
    }
    std::string notes;
    for (const auto& [what, n] : world_.tally) notes += fmt::format("{}{} {}", notes.empty() ? "" : ", ", what, n);
    std::printf("  %s\n", notes.c_str());
  }

  // What the valid nodes were before the storm they still are: same ids,
  // kinds, addresses, incarnations, up; their targets serving, as
  // registered; their chain table and its chains unchanged; the cluster's
  // meta store; the client's lease.
  void expect_valid_state_kept(const RoutingInfo& now) {
    for (const KnownNode& n : world_.valid) {
      ASSERT_TRUE(now.nodes.contains(n.id)) << "valid node " << n.id << " gone";
      const NodeInfo& was = before_.nodes.at(n.id);
      const NodeInfo& is = now.nodes.at(n.id);
      EXPECT_EQ(is.kind, was.kind) << n.id;
      EXPECT_EQ(is.address, was.address) << n.id;
      EXPECT_EQ(is.incarnation, was.incarnation) << n.id;
      EXPECT_EQ(is.state, NodeState::kUp) << n.id;
      for (TargetId t : n.targets) {
        ASSERT_TRUE(now.targets.contains(t)) << "valid target " << t << " gone";
        const TargetInfo& tw = before_.targets.at(t);
        const TargetInfo& ti = now.targets.at(t);
        EXPECT_EQ(ti.node_id, tw.node_id) << t;
        EXPECT_EQ(ti.name, tw.name) << t;
        EXPECT_EQ(ti.data_id, tw.data_id) << t;
        EXPECT_TRUE(ti.reported) << t;
        EXPECT_FALSE(ti.lost_data) << t;
        EXPECT_EQ(ti.state, TargetState::kServing) << t;
      }
    }
    for (const auto& [id, table] : before_.tables) {
      ASSERT_TRUE(now.tables.contains(id));
      EXPECT_EQ(now.tables.at(id), table);
      for (ChainId c : table.chains) EXPECT_EQ(now.chains.at(c), before_.chains.at(c)) << "valid chain " << c;
    }
    const MetaStoreRecord store = mgmtd_->state().meta_store();
    EXPECT_EQ(store.store_id, kStoreId);
    EXPECT_GE(store.ids_issued_below, kStoreMark);
  }

  // The valid client still holds its lease (clients live in memory only).
  void expect_valid_client_kept() {
    pb::ListClientsRequest list;
    list.set_after_id(kValidClient - 1);
    auto clients = must<pb::ListClientsReply>(kListClients, list);
    ASSERT_GT(clients.clients_size(), 0);
    EXPECT_EQ(clients.clients(0).id(), kValidClient);
    EXPECT_EQ(clients.clients(0).label(), kValidLabel);
  }

  // mgmtd still answers a routing query with a well-formed routing, the
  // valid nodes as they were.
  void expect_still_serving() {
    auto reply = must<pb::GetRoutingReply>(kGetRouting, pb::GetRoutingRequest{});
    ASSERT_FALSE(reply.unchanged());
    ASSERT_NO_FATAL_FAILURE(expect_well_formed(reply.routing(), "after the storm"));
    auto now = from_proto(reply.routing());
    ASSERT_TRUE(now.has_value());
    expect_valid_state_kept(*now);
    expect_valid_client_kept();
    std::printf("after the storm: %zu nodes, %zu targets, %zu tables, %zu chains, routing %zu bytes, version %llu\n",
                now->nodes.size(), now->targets.size(), now->tables.size(), now->chains.size(),
                reply.routing().ByteSizeLong(), static_cast<unsigned long long>(now->version));
  }

  // mgmtd restarts: the state it persisted loads (validate_loaded) and is
  // what it served before, as far as it persists.
  void expect_reloads() {
    const RoutingInfo live = mgmtd_->state().routing();
    const MetaStoreRecord store = mgmtd_->state().meta_store();
    mgmtd_.reset();
    open_mgmtd();
    ASSERT_TRUE(mgmtd_->ok());
    const RoutingInfo loaded = mgmtd_->state().routing();
    EXPECT_EQ(loaded.version, live.version);
    EXPECT_EQ(mgmtd_->state().meta_store(), store);
    EXPECT_EQ(loaded.tables, live.tables);
    EXPECT_EQ(loaded.chains, live.chains);
    ASSERT_EQ(loaded.nodes.size(), live.nodes.size());
    for (const auto& [id, n] : live.nodes) {
      const NodeInfo& l = loaded.nodes.at(id);
      EXPECT_TRUE(l.kind == n.kind && l.address == n.address && l.incarnation == n.incarnation && l.state == n.state)
          << "node " << id;
    }
    ASSERT_EQ(loaded.targets.size(), live.targets.size());
    for (const auto& [id, t] : live.targets) {
      const TargetInfo& l = loaded.targets.at(id);
      EXPECT_TRUE(l.node_id == t.node_id && l.name == t.name && l.reported == t.reported && l.state == t.state &&
                  l.data_id == t.data_id && l.lost_data == t.lost_data)
          << "target " << id;
    }
    pb::Routing routing;
    to_proto(loaded, &routing);
    expect_well_formed(routing, "reloaded");
    world_.learn(routing);
    expect_valid_state_kept(loaded);
  }

  TempDir dir_;
  ManualClock clock_;
  std::vector<std::unique_ptr<Listener>> listeners_;
  std::unique_ptr<Mgmtd> mgmtd_;
  rpc::IoPool client_io_{1};
  rpc::Client client_{client_io_, rpc::ClientOptions{.cluster_token = kToken}};
  World world_;
  RoutingInfo before_;                                               // right after the valid cluster was built
  std::map<std::string, HostileCodeCounts> outcomes_;       // method -> code name -> count
  std::map<std::string, std::chrono::steady_clock::duration> took_;  // method -> time answering it
};

TEST_F(HostileRequestTest, EveryMethodAnswersHostileRequestsClearlyAndKeepsTheValidCluster) {
  const uint64_t seed = storm_seed();
  std::printf("hostile request seed: %llu (WEFT_HOSTILE_SEED overrides)\n", static_cast<unsigned long long>(seed));
  QuietLogs quiet;
  Rng r(seed);
  std::array<size_t, std::size(kMethods)> order;
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  const auto start = std::chrono::steady_clock::now();
  int sent = 0;
  for (int round = 0; round < kRounds; ++round) {
    std::shuffle(order.begin(), order.end(), r.rng());
    for (size_t i : order) {
      Shot s = kMethods[i].shot(r, world_);
      maybe_spoil(r, s);
      ASSERT_TRUE(fire(s)) << "mgmtd stopped answering: the storm ends here";
      if (++sent % kKeepAliveEvery == 0) {
        ASSERT_NO_FATAL_FAILURE(keep_alive());
      }
    }
  }
  print_outcomes(sent, std::chrono::steady_clock::now() - start);
  expect_still_serving();
  expect_reloads();
}

// A routing version above mgmtd's, from a registered node: mgmtd's state is
// older than the cluster's (cluster_state.h, "Behind"). It must refuse every
// server clearly (kVersionMismatch, which they retry) and change no routing,
// still answer routing queries, and serve again once restarted.
TEST_F(HostileRequestTest, AFutureRoutingVersionMakesMgmtdRefuseClearlyUntilItRestarts) {
  QuietLogs quiet;
  const KnownNode& reporter = world_.valid[0];
  pb::HeartbeatRequest ahead;
  ahead.set_node_id(reporter.id);
  ahead.set_incarnation(reporter.incarnation);
  ahead.set_installed_routing_version(world_.version + 1);
  auto behind = [&](const auto& r, const char* what) {
    ASSERT_FALSE(r.has_value()) << what << " taken while behind";
    EXPECT_EQ(r.error().code(), Code::kVersionMismatch) << what << ": " << r.error();
  };
  behind(call<pb::HeartbeatReply>(kHeartbeat, ahead), "the report");
  pb::HeartbeatRequest beat = ahead;
  beat.set_installed_routing_version(world_.version);
  behind(call<pb::HeartbeatReply>(kHeartbeat, beat), "a heartbeat");
  behind(call<pb::RegisterReply>(kRegister, world_.valid[1].registration), "a registration");
  pb::CreateChainTableRequest table;
  table.set_replicas(2);
  behind(call<pb::CreateChainTableReply>(kCreateChainTable, table), "a chain table");
  pb::RemoveNodeRequest remove;
  remove.set_node_id(reporter.id);
  behind(call<pb::RemoveNodeReply>(kRemoveNode, remove), "a removal");
  clock_.advance(kLease.lease + kLease.grace + 1s);
  auto dead = mgmtd_->state().tick();
  ASSERT_TRUE(dead.has_value());
  EXPECT_TRUE(dead->empty()) << "nodes declared dead on a view older than the cluster's";
  auto status = must<pb::StatusReply>(kStatus, pb::StatusRequest{});
  EXPECT_NE(status.behind(), "");
  expect_well_formed(status.routing(), "Status while behind");
  EXPECT_EQ(status.routing().version(), world_.version) << "a routing change while behind";
  ASSERT_NO_FATAL_FAILURE(expect_reloads());
  auto again = call<pb::HeartbeatReply>(kHeartbeat, beat);
  EXPECT_TRUE(again.has_value()) << "not serving after the restart: " << again.error();
}

// A future routing version in a request that is itself malformed (no
// address, incarnation 0) or not a registered node's, or absurdly far ahead
// (2^32 past mgmtd's: garbage, not a history), is refused for what it is:
// mgmtd does not become behind, which would refuse every server until it
// restarts (such requests once did just that).
TEST_F(HostileRequestTest, AFutureVersionInAMalformedOrAbsurdReportStopsNothing) {
  QuietLogs quiet;
  auto refused = [&](const auto& r, Code want, const char* what) {
    ASSERT_FALSE(r.has_value()) << what << " taken";
    EXPECT_EQ(r.error().code(), want) << what << ": " << r.error();
  };
  pb::RegisterRequest malformed;
  malformed.set_kind(static_cast<uint32_t>(NodeKind::kStorage));
  malformed.set_installed_routing_version(world_.version + 1);  // no address, incarnation 0
  refused(call<pb::RegisterReply>(kRegister, malformed), Code::kInvalidArgument, "a malformed registration");
  pb::HeartbeatRequest unknown;
  unknown.set_installed_routing_version(UINT64_MAX);  // node 0: never a node's
  refused(call<pb::HeartbeatReply>(kHeartbeat, unknown), Code::kNotFound, "an unknown node's heartbeat");
  const KnownNode& n = world_.valid[0];
  pb::HeartbeatRequest absurd;
  absurd.set_node_id(n.id);
  absurd.set_incarnation(n.incarnation);
  absurd.set_installed_routing_version(UINT64_MAX);
  refused(call<pb::HeartbeatReply>(kHeartbeat, absurd), Code::kInvalidArgument, "a report of 2^64 - 1");
  pb::HeartbeatRequest beat = absurd;
  beat.set_installed_routing_version(world_.version);
  auto ok = call<pb::HeartbeatReply>(kHeartbeat, beat);
  EXPECT_TRUE(ok.has_value()) << "mgmtd stopped serving: " << ok.error();
  EXPECT_EQ(must<pb::StatusReply>(kStatus, pb::StatusRequest{}).behind(), "");
}

// ---- Floods: what grows with the number of nodes, tables and clients is
// refused clearly at its bound (kTooBig, kOverloaded), and every reply that
// carries it still fits its frame.
// Nodes that come and go (NodesThatComeAndGoLeaveNothingBehind) leave
// nothing of theirs in mgmtd's memory or metrics.
class FloodTest : public ::testing::Test {
 protected:
  void SetUp() override {
    mgmtd_ = std::make_unique<Mgmtd>(clock_, dir_.path() + "/state");
    ASSERT_TRUE(mgmtd_->ok());
  }

  template <class Reply, class Req>
  Result<Reply> call(rpc::MethodId method, const Req& req) {
    return client_.call_blocking<Reply>(mgmtd_->ep(), method, req, {}, kCallTimeoutMs);
  }

  static pb::RegisterRequest storage(const std::string& address, size_t targets, size_t name_bytes = 8) {
    pb::RegisterRequest q;
    q.set_kind(static_cast<uint32_t>(NodeKind::kStorage));
    q.set_address(address);
    q.set_incarnation(1);
    for (size_t t = 0; t < targets; ++t) {
      auto* pt = q.add_targets();
      pt->set_name(fmt::format("t{}-", t) + std::string(name_bytes, 'n'));
      pt->set_capacity_bytes(uint64_t{1} << 40);
    }
    return q;
  }

  // Registers `q` again and again with addresses made by `address(i)` until
  // mgmtd refuses; every refusal must be kTooBig. Returns the nodes taken.
  template <class Address>
  size_t register_until_refused(pb::RegisterRequest q, Address address, size_t attempts) {
    size_t taken = 0, refused = 0;
    for (size_t i = 0; i < attempts; ++i) {
      q.set_address(address(i));
      auto r = call<pb::RegisterReply>(kRegister, q);
      if (r) {
        EXPECT_EQ(refused, 0u) << "taken after a refusal: " << q.address();
        ++taken;
        continue;
      }
      EXPECT_EQ(r.error().code(), Code::kTooBig) << r.error();
      ++refused;
    }
    EXPECT_GT(refused, 0u) << "no bound met";
    return taken;
  }

  // The replies that carry what grew: answered, within their frame, well formed.
  void expect_replies_fit() {
    auto routing = call<pb::GetRoutingReply>(kGetRouting, pb::GetRoutingRequest{});
    ASSERT_TRUE(routing.has_value()) << routing.error();
    EXPECT_LE(routing->ByteSizeLong(), kFrameBodyMax);
    expect_well_formed(routing->routing(), "GetRouting");
    auto status = call<pb::StatusReply>(kStatus, pb::StatusRequest{});
    ASSERT_TRUE(status.has_value()) << status.error();
    EXPECT_LE(status->ByteSizeLong(), kFrameBodyMax);
    auto tables = call<pb::ListChainTablesReply>(kListChainTables, pb::ListChainTablesRequest{});
    ASSERT_TRUE(tables.has_value()) << tables.error();
    EXPECT_LE(tables->ByteSizeLong(), kFrameBodyMax);
    expect_chains_well_formed(tables->chains(), "ListChainTables");
  }

  // The state persisted through the flood loads again.
  void expect_reloads() {
    const RoutingInfo live = mgmtd_->state().routing();
    mgmtd_.reset();
    mgmtd_ = std::make_unique<Mgmtd>(clock_, dir_.path() + "/state");
    ASSERT_TRUE(mgmtd_->ok());
    const RoutingInfo loaded = mgmtd_->state().routing();
    EXPECT_EQ(loaded.version, live.version);
    EXPECT_EQ(loaded.nodes.size(), live.nodes.size());
    EXPECT_EQ(loaded.targets.size(), live.targets.size());
    EXPECT_EQ(loaded.chains, live.chains);
    EXPECT_EQ(loaded.tables, live.tables);
  }

  TempDir dir_;
  ManualClock clock_;
  std::unique_ptr<Mgmtd> mgmtd_;
  rpc::IoPool io_{1};
  rpc::Client client_{io_, rpc::ClientOptions{.cluster_token = kToken}};
  QuietLogs quiet_;
};

// Every new address is a new node id: 300 cycles of a node registered,
// reported refusing (mgmtd probes it and keeps the probe's time), heartbeating,
// declared dead and removed (RemoveNode) leave no node, no
// weft_mgmt_heartbeat_age_ms series, no refusal watch and no probe record;
// the registry holds as many series after the 300th cycle as after the first.
TEST_F(FloodTest, NodesThatComeAndGoLeaveNothingBehind) {
  mgmtd_ = std::make_unique<Mgmtd>(clock_, "");
  ASSERT_TRUE(mgmtd_->ok());
  size_t series_after_first = 0;
  for (int i = 0; i < 300; ++i) {
    Listener gone;
    gone.close();  // nothing listens there: the probe is refused
    auto reg = call<pb::RegisterReply>(kRegister, storage(gone.address(), 1));
    ASSERT_TRUE(reg.has_value()) << reg.error();
    pb::ReportRefusalRequest report;
    report.set_address(gone.address());
    auto reported = call<pb::ReportRefusalReply>(kReportRefusal, report);
    ASSERT_TRUE(reported.has_value()) << reported.error();
    EXPECT_EQ(reported->outcome(), "kept") << "probed, and not declared before its first heartbeat";
    pb::HeartbeatRequest beat;
    beat.set_node_id(reg->node_id());
    beat.set_incarnation(1);
    ASSERT_TRUE(call<pb::HeartbeatReply>(kHeartbeat, beat).has_value());
    clock_.advance(kLease.lease + kLease.grace + 1s);
    auto dead = mgmtd_->state().tick();
    ASSERT_TRUE(dead.has_value()) << dead.error();
    ASSERT_EQ(*dead, std::vector<NodeId>{reg->node_id()});
    pb::RemoveNodeRequest remove;
    remove.set_node_id(reg->node_id());
    auto removed = call<pb::RemoveNodeReply>(kRemoveNode, remove);
    ASSERT_TRUE(removed.has_value()) << removed.error();
    if (i == 0) series_after_first = mgmtd_->registry().size();
  }
  EXPECT_TRUE(mgmtd_->state().routing().nodes.empty());
  const ClusterState::PerNodeEntries kept = mgmtd_->state().per_node_entries();
  EXPECT_EQ(kept.refusal_watches, 0u);
  EXPECT_EQ(kept.heartbeat_series, 0u);
  EXPECT_EQ(mgmtd_->service().probes().tracked(), 0u);
  EXPECT_EQ(mgmtd_->registry().size(), series_after_first) << "series grew with the nodes that came and went";
  const std::string text = mgmtd_->registry().prometheus_text();
  EXPECT_EQ(text.find("weft_mgmt_heartbeat_age_ms{"), std::string::npos) << text;
}

// Storage nodes of four targets with 1000-byte names: the routing fills up
// (kRoutingBytesMax) long before kNodesMax. A node already in still comes
// back and heartbeats.
TEST_F(FloodTest, NodesAreRefusedOnceTheRoutingIsFull) {
  const pb::RegisterRequest q = storage("", 4, 1000);
  const size_t taken = register_until_refused(
      q, [](size_t i) { return fmt::format("flood-{}.example:7000", i); }, 1000);
  std::printf("%zu nodes of 4 long-named targets taken\n", taken);
  pb::RegisterRequest small;  // what room is left, nodes without targets take
  small.set_kind(static_cast<uint32_t>(NodeKind::kClient));
  small.set_incarnation(1);
  const size_t more = register_until_refused(
      small, [](size_t i) { return fmt::format("c{}:1", i); }, 300);
  std::printf("then %zu nodes without targets\n", more);
  ASSERT_NO_FATAL_FAILURE(expect_replies_fit());
  pb::RegisterRequest first = q;
  first.set_address("flood-0.example:7000");
  auto back = call<pb::RegisterReply>(kRegister, first);
  ASSERT_TRUE(back.has_value()) << "a node already in, registering again: " << back.error();
  pb::HeartbeatRequest beat;
  beat.set_node_id(back->node_id());
  beat.set_incarnation(1);
  EXPECT_TRUE(call<pb::HeartbeatReply>(kHeartbeat, beat).has_value());
  expect_reloads();
}

// Nodes without targets: kNodesMax of them, then kTooBig (in memory: this
// many synced writes would take long).
TEST_F(FloodTest, NodesAreRefusedPastTheirBound) {
  mgmtd_ = std::make_unique<Mgmtd>(clock_, "");
  pb::RegisterRequest q;
  q.set_kind(static_cast<uint32_t>(NodeKind::kClient));
  q.set_incarnation(1);
  const size_t taken = register_until_refused(
      q, [](size_t i) { return fmt::format("c{}:1", i); }, kNodesMax + 50);
  EXPECT_EQ(taken, kNodesMax);
  ASSERT_NO_FATAL_FAILURE(expect_replies_fit());
}

// Chain tables over four nodes: kChainTablesMax small ones, then kTooBig;
// in another mgmtd, over four nodes of 33 targets, a table of up to 132 x
// 256 chains (past kChainsMax) is refused before it is built, and a table
// that fits is still taken.
// (Not sent, slow rather than wrong: tables up to kChainsMax chains. One of
// 32768 chains, CreateChainTable{replicas: 1, chains_per_target: 256} over
// 128 targets, takes ~4.5 s under ClusterState's mutex here, more than half
// of it in metrics::Registry::find_or_add, a linear search per new
// weft_mgmt_chain_version gauge: quadratic in the chains.)
TEST_F(FloodTest, ChainTablesAndChainsAreRefusedAtTheirBounds) {
  auto add_nodes = [&](size_t targets) {
    for (int i = 0; i < 4; ++i)
      ASSERT_TRUE(
          call<pb::RegisterReply>(kRegister, storage(fmt::format("10.0.0.{}:7000", i + 1), targets)).has_value());
  };
  auto create = [&](uint32_t replicas, uint32_t chains_per_target) {
    pb::CreateChainTableRequest q;
    q.set_replicas(replicas);
    q.set_chains_per_target(chains_per_target);
    return call<pb::CreateChainTableReply>(kCreateChainTable, q);
  };
  ASSERT_NO_FATAL_FAILURE(add_nodes(2));
  for (size_t i = 0; i < kChainTablesMax; ++i) ASSERT_TRUE(create(1, 1).has_value()) << "table " << i + 1;
  for (int i = 0; i < 3; ++i) {
    auto refused = create(1, 1);
    ASSERT_FALSE(refused.has_value()) << "a table past kChainTablesMax";
    EXPECT_EQ(refused.error().code(), Code::kTooBig) << refused.error();
  }
  ASSERT_NO_FATAL_FAILURE(expect_replies_fit());
  expect_reloads();

  mgmtd_ = std::make_unique<Mgmtd>(clock_, "");
  ASSERT_NO_FATAL_FAILURE(add_nodes(33));
  // 132 targets x this many chains each: just past kChainsMax, and far past.
  for (uint32_t per_target : {static_cast<uint32_t>(kChainsMax / 132 + 1), kChainsPerTargetMax}) {
    auto refused = create(1, per_target);
    ASSERT_FALSE(refused.has_value()) << 132 * per_target << " chains";
    EXPECT_EQ(refused.error().code(), Code::kTooBig) << refused.error();
  }
  EXPECT_TRUE(mgmtd_->state().routing().chains.empty());
  auto fits = create(3, 16);
  ASSERT_TRUE(fits.has_value()) << fits.error();
  EXPECT_EQ(fits->chains_size(), 132 * 16 / 3);
  ASSERT_NO_FATAL_FAILURE(expect_replies_fit());
}

// Thousands of clients with the longest labels: Status carries one page of
// them, ListClients pages through all in id order, every reply fits.
// With --accept-older-state a report above mgmtd's routing version raises
// mgmtd's versions past it. One absurdly far ahead is refused: UINT64_MAX
// raised the routing version to UINT64_MAX + 1, wrapped to 0 and persisted,
// and every server and client ignored mgmtd's routing from then on. A
// plausible one is still taken.
TEST_F(FloodTest, AcceptingAnOlderStateTakesNoAbsurdVersion) {
  QuietLogs quiet;
  mgmtd_.reset();
  mgmtd_ = std::make_unique<Mgmtd>(clock_, dir_.path() + "/older", /*accept_older_state=*/true);
  ASSERT_TRUE(mgmtd_->ok());
  auto reg = call<pb::RegisterReply>(kRegister, storage("127.0.0.1:7001", 1));
  ASSERT_TRUE(reg.has_value()) << reg.error();
  const uint64_t before = mgmtd_->state().routing().version;
  pb::HeartbeatRequest beat;
  beat.set_node_id(reg->node_id());
  beat.set_incarnation(1);
  beat.set_installed_routing_version(UINT64_MAX);
  auto absurd = call<pb::HeartbeatReply>(kHeartbeat, beat);
  ASSERT_FALSE(absurd.has_value()) << "a report of 2^64 - 1 taken";
  EXPECT_EQ(absurd.error().code(), Code::kInvalidArgument) << absurd.error();
  EXPECT_EQ(mgmtd_->state().routing().version, before);
  beat.set_installed_routing_version(before + 5);
  auto plausible = call<pb::HeartbeatReply>(kHeartbeat, beat);
  ASSERT_TRUE(plausible.has_value()) << plausible.error();
  EXPECT_EQ(mgmtd_->state().routing().version, before + 6);
}

TEST_F(FloodTest, ThousandsOfClientsAreListedInPagesThatFit) {
  constexpr size_t kClients = 3 * kClientsPerPage / 2;
  Rng r(storm_seed());
  std::set<uint64_t> ids;
  while (ids.size() < kClients) {
    pb::ClientHeartbeatRequest q;
    q.set_client_id(r.u64() | 1);
    q.set_label(r.printable(kClientLabelBytesMax));
    ASSERT_TRUE(call<pb::ClientHeartbeatReply>(kClientHeartbeat, q).has_value());
    ids.insert(q.client_id());
  }
  auto status = call<pb::StatusReply>(kStatus, pb::StatusRequest{});
  ASSERT_TRUE(status.has_value()) << status.error();
  EXPECT_EQ(static_cast<size_t>(status->clients_size()), kClientsPerPage);
  EXPECT_EQ(status->clients_total(), kClients);
  EXPECT_LE(status->ByteSizeLong(), kFrameBodyMax);
  for (bool ids_only : {false, true}) {
    std::vector<uint64_t> listed;
    pb::ListClientsRequest q;
    q.set_ids_only(ids_only);
    for (int page = 0; page < 100; ++page) {
      auto reply = call<pb::ListClientsReply>(kListClients, q);
      ASSERT_TRUE(reply.has_value()) << reply.error();
      EXPECT_LE(static_cast<size_t>(reply->clients_size()), ids_only ? kClientIdsPerPage : kClientsPerPage);
      for (const auto& c : reply->clients()) listed.push_back(c.id());
      if (!reply->more()) break;
      q.set_after_id(listed.back());
    }
    EXPECT_EQ(listed, std::vector<uint64_t>(ids.begin(), ids.end())) << "ids_only " << ids_only;
  }
}

}  // namespace
}  // namespace weft::mgmt
