// Failure handling of a real cluster on 127.0.0.1 (issue 4): `weft serve
// mgmtd` plus storage servers that join it, and a writer that always writes
// through the current head with the current chain version, retrying the same
// (client id, sequence) after a routing refresh.
//   - a storage server SIGKILLed under write load: writes stall until mgmtd
//     moves its targets out of their chains, then resume; the server restarts
//     with the same node and target ids, is resynced (syncing -> serving), and
//     every acknowledged write reads back from every replica;
//   - a storage server that stays dead: a new server's targets replace its
//     targets in their chains (`weft admin target replace`), sync and serve,
//     and hold every acknowledged write; mgmtd forgets the dead node, which
//     returns as a new one without changing any chain;
//   - mgmtd restarted (SIGKILL, then SIGTERM) under write load: nodes and
//     chains are kept, writes carry on, nothing acknowledged is lost;
//   - a storage server cut off from mgmtd (mgmtd SIGSTOPped; the
//     mgmt_client.heartbeat fault point in one server) stops accepting writes
//     once its lease ran out: kLeaseExpired, never an acknowledged write;
//   - bad input at process level.
// DISABLED_StallBenchmark measures the writer stall after a kill (see
// docs/BENCHMARKS.md, "Failover stall (issue 4)").
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "cluster_fixture.h"
#include "process.h"
#include "mgmt/mgmt_client.h"
#include "mgmt/refusal_reporter.h"
#include "storage/storage_test_client.h"
#include "storage/test_util.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;
using mgmt::TargetState;
using storage::ChunkId;
using testing::ClusterFixture;
using testing::ClusterOptions;
using testing::eventually;
using testing::env_u64;

constexpr uint64_t kInode = 4242;
constexpr uint32_t kChunkBytes = 16 * 1024;
constexpr uint64_t kClientId = 77;

double ms_between(SteadyClock::time_point a, SteadyClock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

bool retry_code(Code c) {
  return c == Code::kStaleRouting || c == Code::kNotChainHead || c == Code::kUnavailable || c == Code::kLeaseExpired ||
         mgmt::MgmtRpc::is_transport_error(c);
}

// The content of write `seq` to chunk `index`: checkable from (index, seq) alone.
std::vector<std::byte> content(uint64_t index, uint64_t seq) {
  return storage::testing::pattern(kChunkBytes, index * 1'000'003 + seq);
}

// Writes whole chunks round-robin over `chunks` chunks spread over `chains`,
// through the head of the current routing, retrying each write (same sequence
// number) after refreshing routing until it is acknowledged. Records every
// acknowledgement.
class Writer {
 public:
  // `refusals`: told of refused connections to storage servers, as a real client's.
  Writer(ClusterFixture& cluster, std::vector<mgmt::ChainId> chains, uint64_t chunks,
         std::shared_ptr<rpc::RefusalListener> refusals = nullptr)
      : cluster_(cluster), chains_(std::move(chains)), chunks_(chunks), client_(io_, cluster_.options().token, kClientId, std::move(refusals)) {}
  ~Writer() { stop(); }

  void start() { thread_ = std::thread([this] { run(); }); }
  // Stops after the write in flight is acknowledged (or abandoned after `patience`).
  void stop(std::chrono::milliseconds patience = 30s) {
    patience_ = patience;
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }

  mgmt::ChainId chain_of(uint64_t index) const { return chains_[index % chains_.size()]; }
  uint64_t acked() const { return acked_.load(); }
  uint64_t failures() const { return failures_.load(); }
  // index -> sequence number of its last acknowledged write.
  std::map<uint64_t, uint64_t> last_acked() {
    std::lock_guard lock(mu_);
    return last_;
  }
  std::vector<std::string> unexpected() {
    std::lock_guard lock(mu_);
    return unexpected_;
  }
  // Set when stop() gave up on a write: that chunk may hold it or the previous one.
  std::optional<std::pair<uint64_t, uint64_t>> abandoned() {
    std::lock_guard lock(mu_);
    return abandoned_;
  }
  // Longest gap between successive acknowledgements ending after `since`
  // (including the one spanning `since`); if none came after it, the time since.
  double max_gap_after(SteadyClock::time_point since) {
    std::lock_guard lock(mu_);
    double gap = 0;
    bool any = false;
    for (size_t i = 1; i < ack_times_.size(); ++i) {
      if (ack_times_[i] <= since) continue;
      any = true;
      gap = std::max(gap, ms_between(ack_times_[i - 1], ack_times_[i]));
    }
    if (!any) return ms_between(since, SteadyClock::now());
    return gap;
  }
  std::map<std::string, uint64_t> error_counts() {
    std::lock_guard lock(mu_);
    return errors_;
  }
  double slowest_call_ms() {
    std::lock_guard lock(mu_);
    return slowest_call_ms_;
  }
  double last_ack_age_ms() {
    std::lock_guard lock(mu_);
    return ack_times_.empty() ? -1 : ms_between(ack_times_.back(), SteadyClock::now());
  }

 private:
  void refresh() {
    auto r = cluster_.routing();
    if (r) routing_ = std::make_shared<mgmt::RoutingInfo>(std::move(*r));
  }

  Result<proto::storage::WriteReply> write_once(uint64_t index, uint64_t seq, const std::vector<std::byte>& data) {
    if (!routing_) return error(Code::kUnavailable, "no routing yet");
    mgmt::ChainId chain_id = chain_of(index);
    WEFT_TRY(const mgmt::ChainInfo* chain, routing_->chain(chain_id));
    WEFT_TRY(mgmt::ChainRoute route, mgmt::route_chain(*chain));
    WEFT_TRY(std::string address, routing_->target_address(route.head()));
    WEFT_TRY(rpc::Endpoint ep, rpc::Endpoint::parse(address));
    return client_.write(ep, chain_id, chain->version, ChunkId{kInode, index}, 0, data, kClientId, seq, 1u << 20);
  }

  void run() {
    refresh();
    for (uint64_t seq = 1; !stop_; ++seq) {
      uint64_t index = (seq - 1) % chunks_;
      auto data = content(index, seq);
      SteadyClock::time_point stop_seen{};
      while (true) {
        auto call_start = SteadyClock::now();
        auto w = write_once(index, seq, data);
        double took = ms_between(call_start, SteadyClock::now());
        {
          std::lock_guard lock(mu_);
          slowest_call_ms_ = std::max(slowest_call_ms_, took);
        }
        if (w) break;
        failures_++;
        {
          std::lock_guard lock(mu_);
          errors_[std::string(code_name(w.error().code()))]++;
          if (!retry_code(w.error().code()) && unexpected_.size() < 20)
            unexpected_.push_back(fmt::format("seq {} chunk {}: {}", seq, index, w.error().to_string()));
        }
        if (stop_) {
          if (stop_seen == SteadyClock::time_point{}) stop_seen = SteadyClock::now();
          if (SteadyClock::now() - stop_seen > patience_) {
            std::lock_guard lock(mu_);
            abandoned_ = {index, seq};
            return;
          }
        }
        std::this_thread::sleep_for(10ms);
        refresh();
      }
      std::lock_guard lock(mu_);
      last_[index] = seq;
      ack_times_.push_back(SteadyClock::now());
      acked_++;
    }
  }

  ClusterFixture& cluster_;
  const std::vector<mgmt::ChainId> chains_;
  const uint64_t chunks_;
  rpc::IoPool io_{1};
  storage::testing::StorageTestClient client_;
  std::shared_ptr<mgmt::RoutingInfo> routing_;  // writer thread only
  std::atomic<bool> stop_{false};
  std::chrono::milliseconds patience_{30s};
  std::atomic<uint64_t> acked_{0}, failures_{0};
  std::mutex mu_;
  std::map<uint64_t, uint64_t> last_;
  std::vector<SteadyClock::time_point> ack_times_;
  std::map<std::string, uint64_t> errors_;
  double slowest_call_ms_ = 0;
  std::vector<std::string> unexpected_;
  std::optional<std::pair<uint64_t, uint64_t>> abandoned_;
  std::thread thread_;
};

// Direct writes, one per chain, to the head in `routing`; returns the first error or ok.
struct DirectWriter {
  explicit DirectWriter(ClusterFixture& c) : client(io, c.options().token, 99) {}
  Result<void> write(const mgmt::RoutingInfo& routing, mgmt::ChainId chain_id, uint64_t index) {
    WEFT_TRY(const mgmt::ChainInfo* chain, routing.chain(chain_id));
    WEFT_TRY(mgmt::ChainRoute route, mgmt::route_chain(*chain));
    WEFT_TRY(std::string address, routing.target_address(route.head()));
    WEFT_TRY(rpc::Endpoint ep, rpc::Endpoint::parse(address));
    ++seq;
    auto w = client.write(ep, chain_id, chain->version, ChunkId{kInode + 1, index}, 0, content(index, seq), 99, seq,
                          1u << 20);
    if (!w) return error(w.error());
    return {};
  }
  rpc::IoPool io{1};
  storage::testing::StorageTestClient client;
  uint64_t seq = 0;
};

class FailoverTest : public ::testing::Test {
 protected:
  // mgmtd, `servers` storage servers of `targets` targets each, one chain table of `replicas`.
  void start_cluster(ClusterOptions o, int servers, int targets, int replicas, std::vector<std::string> env_of_last = {}) {
    cluster_ = std::make_unique<ClusterFixture>(o);
    ASSERT_TRUE(cluster_->start_mgmtd()) << cluster_->mgmtd_log();
    for (int i = 0; i < servers; ++i) cluster_->add_storage(targets);
    for (int i = 0; i < servers; ++i)
      ASSERT_TRUE(cluster_->start_storage(i, i + 1 == servers ? env_of_last : std::vector<std::string>{}))
          << cluster_->all_logs();
    ASSERT_TRUE(cluster_->wait_nodes_up(servers, servers * targets)) << cluster_->all_logs();
    testing::CliResult created =
        cluster_->weft({"admin", "chain-table", "create", "--replicas", std::to_string(replicas)});
    ASSERT_EQ(created.exit_code, 0) << created.output;
    auto r = cluster_->status();
    ASSERT_TRUE(r) << r.error();
    ASSERT_FALSE(r->chains.empty());
    for (auto& [id, c] : r->chains) chains_.push_back(id);
  }

  // Every acknowledged write reads back exactly from every replica of its chain.
  void verify_replicas(Writer& writer) {
    auto r = cluster_->status();
    ASSERT_TRUE(r) << r.error();
    auto last = writer.last_acked();
    auto abandoned = writer.abandoned();
    ASSERT_FALSE(last.empty());
    rpc::IoPool io(1);
    storage::testing::StorageTestClient reader(io, cluster_->options().token);
    size_t reads = 0;
    for (auto& [index, seq] : last) {
      mgmt::ChainId chain_id = writer.chain_of(index);
      auto chain = r->chain(chain_id);
      ASSERT_TRUE(chain) << chain.error();
      auto expected = content(index, seq);
      for (auto& e : (*chain)->entries) {
        ASSERT_EQ(e.state, TargetState::kServing) << "chain " << chain_id << " target " << e.target_id;
        auto address = r->target_address(e.target_id);
        ASSERT_TRUE(address) << address.error();
        auto ep = rpc::Endpoint::parse(*address);
        ASSERT_TRUE(ep);
        // The server may not have the newest routing yet (it learns it with its next heartbeat).
        Result<storage::testing::ReadOut> got;
        eventually(
            [&] {
              got = reader.read(*ep, chain_id, (*chain)->version, ChunkId{kInode, index}, 0, 1u << 20);
              return !got || got->result.code() != static_cast<uint32_t>(Code::kStaleRouting);
            },
            5s);
        ASSERT_TRUE(got) << got.error();
        ASSERT_EQ(got->result.code(), 0u) << got->result.message() << " chain " << chain_id << " target "
                                          << e.target_id << " at " << *address;
        EXPECT_EQ(crc32c(got->data), got->result.crc32c());
        if (abandoned && abandoned->first == index) {
          EXPECT_TRUE(got->data == expected || got->data == content(index, abandoned->second)) << "chunk " << index;
        } else {
          EXPECT_TRUE(got->data == expected) << "chunk " << index << " (seq " << seq << ") on target " << e.target_id
                                             << " of chain " << chain_id;
        }
        ++reads;
      }
    }
    EXPECT_GE(reads, last.size() * 2);
  }

  // Chunks written once and never again (inode kInode + 1, `per_chain` per chain):
  // index -> (chain, sequence). A resync must leave them intact on every replica.
  std::map<uint64_t, std::pair<mgmt::ChainId, uint64_t>> write_cold_chunks(DirectWriter& direct, int per_chain) {
    std::map<uint64_t, std::pair<mgmt::ChainId, uint64_t>> out;
    uint64_t index = 1000;
    for (auto c : chains_)
      for (int i = 0; i < per_chain; ++i, ++index) {
        bool ok = eventually(
            [&] {
              auto r = cluster_->routing();
              return r && direct.write(*r, c, index).has_value();
            },
            10s);
        EXPECT_TRUE(ok) << "cold chunk " << index << " of chain " << c;
        if (ok) out[index] = {c, direct.seq};
      }
    return out;
  }
  void verify_cold_chunks(const std::map<uint64_t, std::pair<mgmt::ChainId, uint64_t>>& cold) {
    auto r = cluster_->status();
    ASSERT_TRUE(r) << r.error();
    rpc::IoPool io(1);
    storage::testing::StorageTestClient reader(io, cluster_->options().token);
    for (auto& [index, cs] : cold) {
      auto chain = r->chain(cs.first);
      ASSERT_TRUE(chain);
      for (auto& e : (*chain)->entries) {
        auto ep = rpc::Endpoint::parse(*r->target_address(e.target_id));
        Result<storage::testing::ReadOut> got;
        eventually(
            [&] {
              got = reader.read(*ep, cs.first, (*chain)->version, ChunkId{kInode + 1, index}, 0, 1u << 20);
              return !got || got->result.code() != static_cast<uint32_t>(Code::kStaleRouting);
            },
            5s);
        ASSERT_TRUE(got) << got.error();
        EXPECT_EQ(got->result.code(), 0u) << got->result.message() << ": cold chunk " << index << " of chain "
                                          << cs.first << " on target " << e.target_id;
        EXPECT_TRUE(got->data == content(index, cs.second))
            << "cold chunk " << index << " of chain " << cs.first << " on target " << e.target_id;
      }
    }
  }

  bool wait_acks(Writer& w, uint64_t more, std::chrono::milliseconds timeout) {
    uint64_t target = w.acked() + more;
    return eventually([&] { return w.acked() >= target; }, timeout);
  }

  std::unique_ptr<ClusterFixture> cluster_;
  std::vector<mgmt::ChainId> chains_;
};

std::string describe(Writer& w) {
  std::string s = fmt::format("acked {} failures {} slowest call {:.0f} ms last ack {:.0f} ms ago:", w.acked(),
                              w.failures(), w.slowest_call_ms(), w.last_ack_age_ms());
  for (auto& [code, n] : w.error_counts()) s += fmt::format(" {}={}", code, n);
  for (auto& u : w.unexpected()) s += "\n  unexpected: " + u;
  return s;
}

// Kills storage server `victim` under load; returns the stall (ms) and checks detection.
struct KillOutcome {
  double stall_ms = 0;
  double detect_ms = 0;
};

KillOutcome kill_and_measure(ClusterFixture& cluster, Writer& writer, int victim, const ClusterOptions& o) {
  KillOutcome out;
  auto before = cluster.status();
  EXPECT_TRUE(before);
  if (!before) return out;
  mgmt::NodeId node = ClusterFixture::node_of(*before, cluster.storage_address(victim));
  auto targets = ClusterFixture::targets_of(*before, node);
  SteadyClock::time_point killed = SteadyClock::now();
  cluster.kill_storage(victim);
  bool detected = eventually(
      [&] {
        auto r = cluster.status();
        if (!r) return false;
        if (r->nodes.at(node).state != mgmt::NodeState::kDown) return false;
        for (auto& [id, c] : r->chains)
          for (auto t : targets) {
            auto s = ClusterFixture::state_in(c, t);
            if (s && *s != TargetState::kOffline) return false;
          }
        return true;
      },
      std::chrono::milliseconds(o.lease_ms + o.grace_ms + 10000), 10ms);
  out.detect_ms = ms_between(killed, SteadyClock::now());
  EXPECT_TRUE(detected) << cluster.mgmtd_log();
  // Writes resume: plenty of acknowledgements after detection.
  uint64_t at_detect = writer.acked();
  EXPECT_TRUE(eventually([&] { return writer.acked() >= at_detect + 30; }, 60s)) << describe(writer);
  out.stall_ms = writer.max_gap_after(killed);
  return out;
}

TEST_F(FailoverTest, StorageKilledUnderWriteLoadResumesResyncsAndKeepsEveryAck) {
  ClusterOptions o{.lease_ms = 1000, .grace_ms = 500, .tick_ms = 50};
  ASSERT_NO_FATAL_FAILURE(start_cluster(o, 3, 2, 2));
  auto initial = cluster_->status();
  ASSERT_TRUE(initial);
  const int victim = 1;
  mgmt::NodeId node = ClusterFixture::node_of(*initial, cluster_->storage_address(victim));
  ASSERT_NE(node, mgmt::kInvalidNode);
  auto victim_targets = ClusterFixture::targets_of(*initial, node);
  ASSERT_EQ(victim_targets.size(), 2u);
  std::map<mgmt::ChainId, mgmt::ChainVersion> versions_before;
  for (auto& [id, c] : initial->chains)
    for (auto t : victim_targets)
      if (ClusterFixture::state_in(c, t)) versions_before[id] = c.version;
  ASSERT_FALSE(versions_before.empty());

  DirectWriter direct(*cluster_);
  auto cold = write_cold_chunks(direct, 6);
  Writer writer(*cluster_, chains_, 8 * chains_.size());
  writer.start();
  ASSERT_TRUE(wait_acks(writer, 50, 60s)) << describe(writer) << cluster_->all_logs();
  std::this_thread::sleep_for(1s);

  KillOutcome k = kill_and_measure(*cluster_, writer, victim, o);
  std::printf("[failover] kill -9 of s%d: detected after %.0f ms, writer stall %.0f ms (lease %d ms, grace %d ms)\n",
              victim, k.detect_ms, k.stall_ms, o.lease_ms, o.grace_ms);
  EXPECT_LT(k.stall_ms, o.lease_ms + o.grace_ms + 8000) << describe(writer);
  auto after = cluster_->status();
  ASSERT_TRUE(after);
  for (auto& [id, v] : versions_before) EXPECT_GT(after->chains.at(id).version, v) << "chain " << id;

  // Restart: same node id, same target ids; syncing, then serving.
  ASSERT_TRUE(cluster_->start_storage(victim)) << cluster_->storage_log(victim);
  bool saw_syncing = false;
  bool all_serving = eventually(
      [&] {
        auto r = cluster_->status();
        if (!r) return false;
        bool serving = true;
        for (auto& [id, c] : r->chains)
          for (auto t : victim_targets) {
            auto s = ClusterFixture::state_in(c, t);
            if (!s) continue;
            saw_syncing |= *s == TargetState::kSyncing;
            serving &= *s == TargetState::kServing;
          }
        return serving && r->nodes.at(node).state == mgmt::NodeState::kUp;
      },
      40s, 10ms);
  ASSERT_TRUE(all_serving) << describe(writer) << cluster_->all_logs();
  EXPECT_TRUE(saw_syncing) << "the restarted targets should have been syncing first";
  auto rejoined = cluster_->status();
  ASSERT_TRUE(rejoined);
  EXPECT_EQ(ClusterFixture::node_of(*rejoined, cluster_->storage_address(victim)), node);
  EXPECT_EQ(ClusterFixture::targets_of(*rejoined, node), victim_targets);
  EXPECT_GT(rejoined->nodes.at(node).incarnation, initial->nodes.at(node).incarnation);

  ASSERT_TRUE(wait_acks(writer, 50, 60s)) << describe(writer);
  writer.stop();
  EXPECT_FALSE(writer.abandoned());
  EXPECT_TRUE(writer.unexpected().empty()) << describe(writer);
  EXPECT_GT(writer.failures(), 0u) << "the kill should have failed some writes";
  std::printf("[failover] writer: %s\n", describe(writer).c_str());
  ASSERT_TRUE(cluster_->wait_all_serving(5s));
  verify_replicas(writer);
  verify_cold_chunks(cold);
}

// A storage server killed outright leaves nothing listening on its port: the
// first peer whose connection is refused reports it, mgmtd's own probe is
// refused too, and the node is declared dead at once instead of after lease +
// grace (15 + 1 s here, so at least 11 s after the kill). Twice: a writer
// only to chains where the victim is the tail (only the heads forwarding to it
// can tell), then one only to chains it heads (only the client can tell).
// Writes resume on the shorter chains and every ack is kept.
TEST_F(FailoverTest, StorageKilledIsDeclaredDeadWhenNothingListensLongBeforeItsLeaseRunsOut) {
  ClusterOptions o{.lease_ms = 15000, .grace_ms = 1000, .tick_ms = 50};
  ASSERT_NO_FATAL_FAILURE(start_cluster(o, 3, 2, 2));
  // Chains whose head (head = true) or tail is a target of server `victim`.
  auto chains_where = [&](int victim, bool head) {
    auto r = cluster_->status();
    EXPECT_TRUE(r);
    std::vector<mgmt::ChainId> out;
    if (!r) return out;
    auto targets = ClusterFixture::targets_of(*r, ClusterFixture::node_of(*r, cluster_->storage_address(victim)));
    for (auto& [id, c] : r->chains) {
      mgmt::TargetId t = head ? c.entries.front().target_id : c.entries.back().target_id;
      if (std::find(targets.begin(), targets.end(), t) != targets.end()) out.push_back(id);
    }
    return out;
  };
  rpc::IoPool io(1);
  rpc::Client mgmt_client(io, rpc::ClientOptions{.cluster_token = o.token});
  mgmt::MgmtRpc mgmt_rpc(io, mgmt_client, {{"127.0.0.1", cluster_->mgmtd_port()}});
  auto client_reports = std::make_shared<mgmt::RefusalReporter>();
  client_reports->start(mgmt_rpc);

  struct Round {
    int victim;
    bool victim_heads;
  };
  for (Round round : {Round{2, false}, Round{0, true}}) {
    SCOPED_TRACE(fmt::format("victim s{}, {}", round.victim, round.victim_heads ? "head" : "tail"));
    auto chains = chains_where(round.victim, round.victim_heads);
    ASSERT_FALSE(chains.empty());
    Writer writer(*cluster_, chains, 8 * chains.size(), round.victim_heads ? client_reports : nullptr);
    writer.start();
    ASSERT_TRUE(wait_acks(writer, 50, 60s)) << describe(writer) << cluster_->all_logs();
    KillOutcome k = kill_and_measure(*cluster_, writer, round.victim, o);
    std::printf("[failover] kill -9 of s%d (%s of the chains written): detected after %.0f ms, writer stall %.0f ms "
                "(lease %d ms, grace %d ms)\n",
                round.victim, round.victim_heads ? "head" : "tail", k.detect_ms, k.stall_ms, o.lease_ms, o.grace_ms);
    // By its lease it would be at least 11 s (see above); the probe's path (a
    // refused write, a report, mgmtd's probe, 10 ms polls of Status) gets 10 s
    // on a loaded machine, not 5.
    EXPECT_LT(k.detect_ms, 10000) << "declared by its lease, not by the probe:\n" << cluster_->all_logs();
    ASSERT_TRUE(cluster_->start_storage(round.victim)) << cluster_->storage_log(round.victim);
    ASSERT_TRUE(cluster_->wait_all_serving(60s)) << describe(writer) << cluster_->all_logs();
    ASSERT_TRUE(wait_acks(writer, 50, 60s)) << describe(writer);
    writer.stop();
    EXPECT_FALSE(writer.abandoned());
    EXPECT_TRUE(writer.unexpected().empty()) << describe(writer);
    verify_replicas(writer);
  }
  EXPECT_NE(cluster_->mgmtd_log().find("declared dead without waiting for its lease"), std::string::npos)
      << cluster_->mgmtd_log();
  client_reports->stop();
}

// A storage server that never comes back: a new server's targets take its
// targets' places (`weft admin target replace`) under write load, are copied
// from the chains' serving targets, serve, and hold every acknowledged write.
TEST_F(FailoverTest, DeadServerReplacedBySpareUnderWriteLoadKeepsEveryAck) {
  ClusterOptions o{.lease_ms = 1000, .grace_ms = 500, .tick_ms = 50, .storage_keys = "stray_chunk_grace_s = 0\n"};
  ASSERT_NO_FATAL_FAILURE(start_cluster(o, 3, 2, 2));
  const int victim = 1, spare_server = 3;
  cluster_->add_storage(2);  // joins after the chain table: in no chain
  auto initial = cluster_->status();
  ASSERT_TRUE(initial);
  auto victim_targets =
      ClusterFixture::targets_of(*initial, ClusterFixture::node_of(*initial, cluster_->storage_address(victim)));
  ASSERT_EQ(victim_targets.size(), 2u);

  DirectWriter direct(*cluster_);
  auto cold = write_cold_chunks(direct, 6);
  Writer writer(*cluster_, chains_, 8 * chains_.size());
  writer.start();
  ASSERT_TRUE(wait_acks(writer, 50, 60s)) << describe(writer) << cluster_->all_logs();
  ASSERT_TRUE(cluster_->start_storage(spare_server)) << cluster_->storage_log(spare_server);
  ASSERT_TRUE(cluster_->wait_nodes_up(4, 8)) << cluster_->all_logs();
  auto with_spare = cluster_->status();
  ASSERT_TRUE(with_spare);
  auto spares = ClusterFixture::targets_of(
      *with_spare, ClusterFixture::node_of(*with_spare, cluster_->storage_address(spare_server)));
  ASSERT_EQ(spares.size(), 2u);
  testing::CliResult live = cluster_->weft(
      {"admin", "target", "replace", std::to_string(victim_targets[0]), std::to_string(spares[0])});
  EXPECT_NE(live.exit_code, 0) << "a serving target is never replaced: " << live.output;
  EXPECT_NE(live.output.find("only an offline target"), std::string::npos) << live.output;

  kill_and_measure(*cluster_, writer, victim, o);
  for (size_t i = 0; i < 2; ++i) {
    testing::CliResult replaced = cluster_->weft(
        {"admin", "target", "replace", std::to_string(victim_targets[i]), std::to_string(spares[i])});
    ASSERT_EQ(replaced.exit_code, 0) << replaced.output << cluster_->mgmtd_log();
    EXPECT_NE(replaced.output.find("replaced by target " + std::to_string(spares[i])), std::string::npos)
        << replaced.output;
  }
  ASSERT_TRUE(cluster_->wait_all_serving(60s)) << describe(writer) << cluster_->all_logs();
  auto after = cluster_->status();
  ASSERT_TRUE(after);
  size_t spare_entries = 0;
  for (auto& [id, c] : after->chains)
    for (auto& e : c.entries) {
      EXPECT_TRUE(std::find(victim_targets.begin(), victim_targets.end(), e.target_id) == victim_targets.end())
          << "chain " << id << " still holds a dead target";
      spare_entries += std::find(spares.begin(), spares.end(), e.target_id) != spares.end();
    }
  EXPECT_GT(spare_entries, 0u);

  // mgmtd forgets the dead node; when the server comes back after all, it is
  // a new node whose targets are spares, and the chains stay as they are.
  mgmt::NodeId victim_node = ClusterFixture::node_of(*after, cluster_->storage_address(victim));
  testing::CliResult removed = cluster_->weft({"admin", "node", "remove", std::to_string(victim_node)});
  ASSERT_EQ(removed.exit_code, 0) << removed.output;
  ASSERT_TRUE(cluster_->start_storage(victim)) << cluster_->storage_log(victim);
  ASSERT_TRUE(cluster_->wait_nodes_up(4, 8)) << cluster_->all_logs();
  auto back = cluster_->status();
  ASSERT_TRUE(back);
  EXPECT_NE(ClusterFixture::node_of(*back, cluster_->storage_address(victim)), victim_node);
  EXPECT_FALSE(back->targets.contains(victim_targets[0]));
  ASSERT_TRUE(wait_acks(writer, 50, 60s)) << describe(writer);
  auto returned = cluster_->status();
  ASSERT_TRUE(returned);
  EXPECT_EQ(returned->chains, after->chains);
  // Its targets, in no chain now, drop their old chunks (stray_chunk_grace_s = 0).
  {
    rpc::IoPool io(1);
    storage::testing::StorageTestClient lister(io, cluster_->options().token);
    auto ep = rpc::Endpoint::parse(cluster_->storage_address(victim));
    ASSERT_TRUE(ep);
    for (mgmt::TargetId t : ClusterFixture::targets_of(*back, ClusterFixture::node_of(*back, cluster_->storage_address(victim)))) {
      proto::storage::ListChunksRequest req;
      req.set_target_id(t);  // chain 0: every chunk
      Result<proto::storage::ListChunksReply> l;
      eventually([&] { return (l = lister.call<proto::storage::ListChunksReply>(*ep, storage::methods::kListChunks, req)) &&
                              l->chunks_size() == 0; },
                 20s);
      ASSERT_TRUE(l) << l.error();
      EXPECT_EQ(l->chunks_size(), 0) << "target " << t << cluster_->storage_log(victim);
    }
  }
  writer.stop();
  EXPECT_FALSE(writer.abandoned());
  EXPECT_TRUE(writer.unexpected().empty()) << describe(writer);
  verify_replicas(writer);  // every replica now, the spares included
  verify_cold_chunks(cold);
}

// Updates through the head of the current routing, retried (same sequence
// number) until acknowledged: writes, truncates and removes of any chunk.
struct HeadOps {
  explicit HeadOps(ClusterFixture& c) : cluster(c), client(io, c.options().token, kClientId) {}

  template <class Fn>
  Result<void> retry(mgmt::ChainId chain_id, Fn op) {
    ++seq;
    Status last;
    auto deadline = SteadyClock::now() + 20s;
    while (SteadyClock::now() < deadline) {
      auto r = cluster.routing();
      if (r) {
        auto chain = r->chain(chain_id);
        auto route = chain ? mgmt::route_chain(**chain) : Result<mgmt::ChainRoute>(error(chain.error()));
        auto address = route ? r->target_address(route->head()) : Result<std::string>(error(route.error()));
        auto ep = address ? rpc::Endpoint::parse(*address) : Result<rpc::Endpoint>(error(address.error()));
        if (ep) {
          Result<void> done = op(*ep, (*chain)->version);
          if (done) return done;
          last = done.error();
          if (!retry_code(last.code())) return error(last);
        }
      }
      std::this_thread::sleep_for(10ms);
    }
    return error(last);
  }
  Result<void> write(mgmt::ChainId chain, ChunkId id, const std::vector<std::byte>& data) {
    return retry(chain, [&](const rpc::Endpoint& ep, mgmt::ChainVersion v) -> Result<void> {
      auto w = client.write(ep, chain, v, id, 0, data, kClientId + 1, seq, 1u << 20);
      if (!w) return error(w.error());
      return {};
    });
  }
  Result<void> truncate(mgmt::ChainId chain, ChunkId id, uint32_t length) {
    return retry(chain, [&](const rpc::Endpoint& ep, mgmt::ChainVersion v) -> Result<void> {
      proto::storage::TruncateRequest req;
      req.set_chain_id(chain);
      req.set_chain_version(v);
      req.mutable_chunk()->set_inode(id.inode);
      req.mutable_chunk()->set_index(id.index);
      req.set_length(length);
      req.set_chunk_size(1u << 20);
      req.set_client_id(kClientId + 1);
      req.set_sequence(seq);
      auto w = client.call<proto::storage::WriteReply>(ep, storage::methods::kTruncate, req);
      if (!w) return error(w.error());
      return {};
    });
  }
  Result<void> remove(mgmt::ChainId chain, ChunkId id) {
    return retry(chain, [&](const rpc::Endpoint& ep, mgmt::ChainVersion v) -> Result<void> {
      auto w = client.remove(ep, chain, v, id);
      if (!w) return error(w.error());
      return {};
    });
  }

  ClusterFixture& cluster;
  rpc::IoPool io{1};
  storage::testing::StorageTestClient client;
  uint64_t seq = 0;
};

// Issue 4: chunk records name their chain, and a resync of chain C makes the
// successor's chunks of C exactly the predecessor's (removed chunks go, a
// chunk removed and rewritten from version 1 is replaced) without touching
// its chunks of other chains; it finishes in bounded time while a writer keeps
// rewriting the same chunks.
TEST_F(FailoverTest, ResyncMirrorsRemovalsAndRewritesPerChainUnderRewriteLoad) {
  ClusterOptions o{.lease_ms = 1000, .grace_ms = 500, .tick_ms = 50};
  ASSERT_NO_FATAL_FAILURE(start_cluster(o, 3, 2, 2));
  const int victim = 2;
  auto initial = cluster_->status();
  ASSERT_TRUE(initial);
  mgmt::NodeId node = ClusterFixture::node_of(*initial, cluster_->storage_address(victim));
  auto victim_targets = ClusterFixture::targets_of(*initial, node);
  std::vector<mgmt::ChainId> victim_chains;
  for (auto& [id, c] : initial->chains)
    for (auto t : victim_targets)
      if (ClusterFixture::state_in(c, t)) victim_chains.push_back(id);
  ASSERT_GT(victim_chains.size(), victim_targets.size()) << "each victim target should be in several chains";

  // Per victim chain (inode kInode + 2, index = chain * 100 + k): k=0 removed
  // while the victim is down, k=1 truncated and rewritten, k=2 removed and
  // rewritten from version 1 (the victim holds version 3), k>=10 bulk chunks
  // written while it is down (what the resync must copy).
  constexpr uint64_t kOpsInode = kInode + 2;
  constexpr int kBulk = 24;
  auto id_of = [&](mgmt::ChainId c, uint64_t k) { return ChunkId{kOpsInode, c * 100 + k}; };
  auto data_of = [&](mgmt::ChainId c, uint64_t k, uint64_t gen, size_t bytes) {
    return storage::testing::pattern(bytes, c * 1'000'000 + k * 1000 + gen);
  };
  HeadOps ops(*cluster_);
  DirectWriter direct(*cluster_);
  auto cold = write_cold_chunks(direct, 4);
  for (auto c : victim_chains)
    for (uint64_t k = 0; k < 3; ++k)
      for (uint64_t gen = 0; gen < 3; ++gen) ASSERT_TRUE(ops.write(c, id_of(c, k), data_of(c, k, gen, 40000)));

  Writer writer(*cluster_, chains_, 2 * chains_.size());  // every chunk rewritten many times during the resync
  writer.start();
  ASSERT_TRUE(wait_acks(writer, 30, 60s)) << describe(writer) << cluster_->all_logs();
  KillOutcome k = kill_and_measure(*cluster_, writer, victim, o);
  (void)k;

  std::map<ChunkId, std::vector<std::byte>> expect;  // final content of the chunks changed while down
  std::vector<ChunkId> gone;
  for (auto c : victim_chains) {
    ASSERT_TRUE(ops.remove(c, id_of(c, 0)));
    gone.push_back(id_of(c, 0));
    ASSERT_TRUE(ops.truncate(c, id_of(c, 1), 1000));
    auto tail = data_of(c, 1, 9, 5000);
    ASSERT_TRUE(ops.write(c, id_of(c, 1), tail));
    expect[id_of(c, 1)] = tail;
    ASSERT_TRUE(ops.remove(c, id_of(c, 2)));
    expect[id_of(c, 2)] = data_of(c, 2, 9, 20000);
    ASSERT_TRUE(ops.write(c, id_of(c, 2), expect[id_of(c, 2)]));
    for (uint64_t b = 10; b < 10 + kBulk; ++b) {
      expect[id_of(c, b)] = data_of(c, b, 1, 256 * 1024);
      ASSERT_TRUE(ops.write(c, id_of(c, b), expect[id_of(c, b)]));
    }
  }

  // Restart under the rewrite load: every victim target serving again within the bound.
  auto restarted = SteadyClock::now();
  uint64_t acked_at_restart = writer.acked();
  ASSERT_TRUE(cluster_->start_storage(victim)) << cluster_->storage_log(victim);
  bool all_serving = eventually(
      [&] {
        auto r = cluster_->status();
        if (!r || r->nodes.at(node).state != mgmt::NodeState::kUp) return false;
        for (auto& [id, c] : r->chains)
          for (auto t : victim_targets) {
            auto s = ClusterFixture::state_in(c, t);
            if (s && *s != TargetState::kServing) return false;
          }
        return true;
      },
      45s, 20ms);
  double resync_s = std::chrono::duration<double>(SteadyClock::now() - restarted).count();
  std::printf("[failover] restart to all serving under rewrites: %.1f s (%zu victim chains, %d x 256 KiB bulk each)\n",
              resync_s, victim_chains.size(), kBulk);
  ASSERT_TRUE(all_serving) << describe(writer) << cluster_->all_logs();
  uint64_t acked_at_serving = writer.acked();
  std::printf("[failover] writes acknowledged during the resync: %llu\n",
              static_cast<unsigned long long>(acked_at_serving - acked_at_restart));
  EXPECT_GT(acked_at_serving, acked_at_restart) << "the writer should have kept rewriting during the resync";
  ASSERT_TRUE(wait_acks(writer, 30, 60s)) << describe(writer);
  writer.stop();
  EXPECT_TRUE(writer.unexpected().empty()) << describe(writer);
  ASSERT_TRUE(cluster_->wait_all_serving(10s));
  verify_replicas(writer);
  verify_cold_chunks(cold);

  auto r = cluster_->status();
  ASSERT_TRUE(r);
  rpc::IoPool io(1);
  storage::testing::StorageTestClient reader(io, cluster_->options().token);
  auto read_on = [&](mgmt::TargetId t, mgmt::ChainId c, ChunkId id) {
    auto ep = rpc::Endpoint::parse(*r->target_address(t));
    Result<storage::testing::ReadOut> got;
    eventually(
        [&] {
          got = reader.read(*ep, c, (*r->chain(c))->version, id, 0, 1u << 20);
          return !got || got->result.code() != static_cast<uint32_t>(Code::kStaleRouting);
        },
        5s);
    return got;
  };
  for (auto c : victim_chains) {
    for (auto& e : (*r->chain(c))->entries) {
      auto got = read_on(e.target_id, c, id_of(c, 0));
      ASSERT_TRUE(got) << got.error();
      EXPECT_EQ(got->result.code(), static_cast<uint32_t>(Code::kNotFound))
          << "removed chunk " << id_of(c, 0) << " is back on target " << e.target_id;
      for (auto& [id, data] : expect) {
        if (id.index / 100 != c) continue;
        auto g = read_on(e.target_id, c, id);
        ASSERT_TRUE(g) << g.error();
        ASSERT_EQ(g->result.code(), 0u) << g->result.message() << " chunk " << id << " target " << e.target_id;
        EXPECT_TRUE(g->data == data) << "chunk " << id << " on target " << e.target_id << " of chain " << c;
      }
    }
  }
  // Every replica of a chain lists the same chunks of it (version, length, CRC),
  // and no target holds a chunk recorded for a chain it is not in.
  for (auto& [cid, chain] : r->chains) {
    std::optional<std::vector<std::tuple<uint64_t, uint64_t, uint64_t, uint32_t, uint32_t>>> first;
    for (auto& e : chain.entries) {
      auto ep = rpc::Endpoint::parse(*r->target_address(e.target_id));
      proto::storage::ListChunksRequest req;
      req.set_target_id(e.target_id);
      req.set_chain_id(cid);
      req.set_count_max(65536);
      auto l = reader.call<proto::storage::ListChunksReply>(*ep, storage::methods::kListChunks, req);
      ASSERT_TRUE(l) << l.error();
      std::vector<std::tuple<uint64_t, uint64_t, uint64_t, uint32_t, uint32_t>> got;
      for (auto& m : l->chunks()) {
        EXPECT_EQ(m.chain_id(), cid) << "chunk " << m.chunk().inode() << "." << m.chunk().index();
        got.emplace_back(m.chunk().inode(), m.chunk().index(), m.version(), m.length(), m.chunk_crc32c());
      }
      if (!first) {
        first = got;
      } else {
        EXPECT_TRUE(*first == got) << "replicas of chain " << cid << " differ (" << first->size() << " vs "
                                   << got.size() << " chunks)";
      }
    }
  }
  std::set<mgmt::TargetId> all_targets;
  for (auto& [tid, t] : r->targets) all_targets.insert(tid);
  for (auto tid : all_targets) {
    std::set<mgmt::ChainId> member;
    for (auto& [cid, chain] : r->chains)
      if (ClusterFixture::state_in(chain, tid)) member.insert(cid);
    auto ep = rpc::Endpoint::parse(*r->target_address(tid));
    auto l = reader.list(*ep, tid);
    ASSERT_TRUE(l) << l.error();
    for (auto& m : l->chunks())
      EXPECT_TRUE(member.contains(m.chain_id())) << "target " << tid << " holds chunk " << m.chunk().inode() << "."
                                                 << m.chunk().index() << " of chain " << m.chain_id();
  }
}

TEST_F(FailoverTest, MgmtdRestartedUnderWriteLoadKeepsNodesChainsAndWrites) {
  // A lease long enough to outlast mgmtd's restart on a loaded machine.
  ClusterOptions o{.lease_ms = 3000, .grace_ms = 500, .tick_ms = 50};
  ASSERT_NO_FATAL_FAILURE(start_cluster(o, 3, 1, 2));
  ASSERT_TRUE(cluster_->wait_all_serving(10s));
  auto before = cluster_->status();
  ASSERT_TRUE(before);

  Writer writer(*cluster_, chains_, 8 * chains_.size());
  writer.start();
  ASSERT_TRUE(wait_acks(writer, 50, 60s)) << describe(writer) << cluster_->all_logs();

  for (int sig : {SIGKILL, SIGTERM}) {
    SCOPED_TRACE(sig == SIGKILL ? "SIGKILL" : "SIGTERM");
    SteadyClock::time_point stopped = SteadyClock::now();
    ASSERT_TRUE(cluster_->stop_mgmtd(sig));
    // Writes do not need mgmtd while nothing changes (leases last lease_ms).
    EXPECT_TRUE(wait_acks(writer, 5, std::chrono::milliseconds(o.lease_ms / 2))) << describe(writer);
    std::this_thread::sleep_for(300ms);
    ASSERT_TRUE(cluster_->start_mgmtd()) << cluster_->mgmtd_log();
    ASSERT_TRUE(wait_acks(writer, 50, 60s)) << describe(writer) << cluster_->all_logs();
    // Nodes keep their ids and stay up (no re-registration), chains are unchanged.
    auto after = cluster_->status();
    ASSERT_TRUE(after) << after.error();
    ASSERT_EQ(after->nodes.size(), before->nodes.size());
    for (auto& [id, n] : before->nodes) {
      ASSERT_TRUE(after->nodes.count(id)) << id;
      EXPECT_EQ(after->nodes.at(id).address, n.address);
      EXPECT_EQ(after->nodes.at(id).incarnation, n.incarnation) << "no restart, no new incarnation";
      EXPECT_EQ(after->nodes.at(id).state, mgmt::NodeState::kUp);
    }
    EXPECT_EQ(after->targets.size(), before->targets.size());
    EXPECT_EQ(after->tables, before->tables);
    EXPECT_EQ(after->chains, before->chains) << "no chain changed";
    EXPECT_GE(after->version, before->version);
    double stall = writer.max_gap_after(stopped);
    std::printf("[failover] mgmtd %s + restart: longest writer gap %.0f ms\n", sig == SIGKILL ? "SIGKILL" : "SIGTERM",
                stall);
    EXPECT_LT(stall, o.lease_ms) << "writes should not wait for mgmtd";
  }
  // Still consistent after a few heartbeats with the new mgmtd.
  std::this_thread::sleep_for(std::chrono::milliseconds(o.lease_ms + o.grace_ms));
  auto settled = cluster_->status();
  ASSERT_TRUE(settled);
  EXPECT_EQ(settled->chains, before->chains);
  writer.stop();
  EXPECT_FALSE(writer.abandoned());
  EXPECT_TRUE(writer.unexpected().empty()) << describe(writer);
  verify_replicas(writer);
}

TEST_F(FailoverTest, MgmtdStoppedLeasesRunOutWritesRefusedThenResume) {
  ClusterOptions o{.lease_ms = 1000, .grace_ms = 500, .tick_ms = 50};
  ASSERT_NO_FATAL_FAILURE(start_cluster(o, 3, 1, 2));
  ASSERT_TRUE(cluster_->wait_all_serving(10s));
  auto routing = cluster_->routing();
  ASSERT_TRUE(routing);
  DirectWriter direct(*cluster_);
  ASSERT_TRUE(eventually(
      [&] {
        for (auto c : chains_)
          if (!direct.write(*routing, c, c)) return false;
        return true;
      },
      10s))
      << cluster_->all_logs();

  // mgmtd frozen: no heartbeat is answered, every lease runs out within lease_ms.
  SteadyClock::time_point frozen = SteadyClock::now();
  cluster_->signal_mgmtd(SIGSTOP);
  double last_ok_started_ms = -1;
  std::map<Code, int> refused;
  while (SteadyClock::now() - frozen < std::chrono::milliseconds(o.lease_ms + 700)) {
    for (auto c : chains_) {
      double started = ms_between(frozen, SteadyClock::now());
      auto w = direct.write(*routing, c, c);
      if (w) {
        last_ok_started_ms = std::max(last_ok_started_ms, started);
      } else {
        refused[w.error().code()]++;
      }
    }
    std::this_thread::sleep_for(5ms);
  }
  // The lease was granted for a heartbeat sent before SIGSTOP: it ends before frozen + lease.
  EXPECT_LT(last_ok_started_ms, o.lease_ms + 50) << "a write was accepted after every lease had expired";
  for (auto c : chains_) {
    auto w = direct.write(*routing, c, c);
    ASSERT_FALSE(w) << "chain " << c << ": a fenced head accepted a write";
    EXPECT_EQ(w.error().code(), Code::kLeaseExpired) << w.error();
  }
  EXPECT_GT(refused[Code::kLeaseExpired], 0);
  std::printf("[failover] mgmtd stopped: last accepted write started %.0f ms after SIGSTOP (lease %d ms)\n",
              last_ok_started_ms, o.lease_ms);

  // Thawed: heartbeats renew the leases; whatever mgmtd decided meanwhile, writes resume.
  cluster_->signal_mgmtd(SIGCONT);
  Writer writer(*cluster_, chains_, 4 * chains_.size());
  writer.start();
  ASSERT_TRUE(wait_acks(writer, 30, 60s)) << describe(writer) << cluster_->all_logs();
  ASSERT_TRUE(cluster_->wait_all_serving(30s)) << cluster_->all_logs();
  ASSERT_TRUE(wait_acks(writer, 30, 60s)) << describe(writer);
  writer.stop();
  EXPECT_TRUE(writer.unexpected().empty()) << describe(writer);
  verify_replicas(writer);
}

// One storage server's heartbeats fail from its 13th on (fault point
// mgmt_client.heartbeat): mgmtd takes its target out of the chains, writes go on
// without it, and it refuses writes itself once its lease ran out.
TEST_F(FailoverTest, StorageCutOffFromMgmtdIsFencedAndChainsMoveOn) {
  // grace_ms is the window in which the server's own lease has run out while
  // mgmtd still lists it up (expired_while_up below must see a write refused
  // in it): 1.5 s, not 0.5 s, so that a test thread held up for a few hundred
  // ms on a loaded machine still samples it.
  ClusterOptions o{.lease_ms = 1200, .grace_ms = 1500, .tick_ms = 50};
  // Heartbeats every lease/3 = 400 ms: they start failing about 5 s after it joined.
  ASSERT_NO_FATAL_FAILURE(start_cluster(o, 3, 1, 2, {"WEFT_FAULTS=mgmt_client.heartbeat=1:-1:12"}));
  const int cut = 2;
  auto initial = cluster_->status();
  ASSERT_TRUE(initial);
  mgmt::NodeId node = ClusterFixture::node_of(*initial, cluster_->storage_address(cut));
  auto targets = ClusterFixture::targets_of(*initial, node);
  ASSERT_EQ(targets.size(), 1u);
  // A chain headed by the cut-off server (chains start with every target serving).
  auto routing = cluster_->routing();
  ASSERT_TRUE(routing);
  std::optional<mgmt::ChainId> headed;
  for (auto& [id, c] : routing->chains)
    if (c.entries.front().target_id == targets[0]) headed = id;
  ASSERT_TRUE(headed) << "every target heads some chain";

  Writer writer(*cluster_, chains_, 4 * chains_.size());
  writer.start();
  ASSERT_TRUE(wait_acks(writer, 30, 60s)) << describe(writer) << cluster_->all_logs();
  // Until mgmtd declares it dead, write to it as the head of `headed` (the routing
  // from before): accepted while its lease holds, then kLeaseExpired, and never
  // accepted again. Its lease ends before mgmtd's deadline (lease + grace), so
  // kLeaseExpired shows while mgmtd still lists it up; afterwards it knows the new
  // routing (kStaleRouting) or still has none (kLeaseExpired).
  DirectWriter direct(*cluster_);
  std::map<Code, int> answers;
  int accepted_after_expiry = 0;
  bool expired = false, expired_while_up = false, down = false;
  auto deadline = SteadyClock::now() + 30s;
  while (!down && SteadyClock::now() < deadline) {
    auto st = cluster_->status();
    ASSERT_TRUE(st) << st.error();
    down = st->nodes.at(node).state == mgmt::NodeState::kDown;
    auto w = direct.write(*routing, *headed, 1);
    if (w) {
      answers[Code::kOk]++;
      accepted_after_expiry += expired;
    } else {
      answers[w.error().code()]++;
      if (w.error().code() == Code::kLeaseExpired) {
        expired = true;
        expired_while_up |= !down;
      }
    }
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_TRUE(down) << "the fault point should have stopped the heartbeats\n" << cluster_->all_logs();
  std::string seen;
  for (auto& [c, n] : answers) seen += fmt::format(" {}={}", code_name(c), n);
  std::printf("[failover] writes to the cut-off head until mgmtd declared it dead:%s\n", seen.c_str());
  EXPECT_TRUE(expired) << seen;
  EXPECT_TRUE(expired_while_up) << "its lease should run out before mgmtd declares it dead:" << seen;
  EXPECT_EQ(accepted_after_expiry, 0) << "a storage server without a lease accepted a write:" << seen;
  EXPECT_TRUE(cluster_->storage(cut).running()) << "the server itself is alive";
  ASSERT_TRUE(wait_acks(writer, 30, 60s)) << describe(writer);
  for (int i = 0; i < 5; ++i) {
    auto w = direct.write(*routing, *headed, 1);
    ASSERT_FALSE(w) << "a storage server without a lease accepted a write";
    EXPECT_TRUE(w.error().code() == Code::kLeaseExpired || w.error().code() == Code::kStaleRouting) << w.error();
  }
  auto now = cluster_->status();
  ASSERT_TRUE(now);
  for (auto& [id, c] : now->chains) {
    auto s = ClusterFixture::state_in(c, targets[0]);
    if (s) {
      EXPECT_EQ(*s, TargetState::kOffline) << "chain " << id;
    }
  }
  writer.stop();
  EXPECT_TRUE(writer.unexpected().empty()) << describe(writer);
  // Every acknowledged write is on the serving replicas.
  auto last = writer.last_acked();
  storage::testing::StorageTestClient reader(direct.io, cluster_->options().token);
  for (auto& [index, seq] : last) {
    auto chain = now->chain(writer.chain_of(index));
    ASSERT_TRUE(chain);
    for (auto& e : (*chain)->entries) {
      if (e.state != TargetState::kServing) continue;
      auto ep = rpc::Endpoint::parse(*now->target_address(e.target_id));
      auto got = reader.read(*ep, (*chain)->id, (*chain)->version, ChunkId{kInode, index}, 0, 1u << 20);
      ASSERT_TRUE(got) << got.error();
      ASSERT_EQ(got->result.code(), 0u) << got->result.message();
      EXPECT_TRUE(got->data == content(index, seq)) << "chunk " << index;
    }
  }
}

TEST_F(FailoverTest, BadInputAtProcessLevel) {
  ClusterOptions o{.lease_ms = 1000, .grace_ms = 500, .tick_ms = 50};
  ASSERT_NO_FATAL_FAILURE(start_cluster(o, 3, 1, 2));

  // More replicas than storage nodes: one clear line, non-zero exit, nothing created.
  testing::CliResult five = cluster_->weft({"admin", "chain-table", "create", "--replicas", "5"});
  EXPECT_NE(five.exit_code, 0);
  EXPECT_EQ(five.output.rfind("weft: chain-table create: ", 0), 0u) << five.output;
  EXPECT_NE(five.output.find("5 replicas need 5 distinct storage nodes"), std::string::npos) << five.output;
  EXPECT_EQ(std::count(five.output.begin(), five.output.end(), '\n'), 1) << five.output;
  testing::CliResult zero = cluster_->weft({"admin", "chain-table", "create", "--replicas", "0"});
  EXPECT_NE(zero.exit_code, 0) << zero.output;
  auto r = cluster_->status();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->tables.size(), 1u);

  // A heartbeat from a node id mgmtd never assigned.
  mgmt::pb::HeartbeatRequest unknown;
  unknown.set_node_id(4711);
  unknown.set_incarnation(1);
  auto hb = cluster_->rpc().call<mgmt::pb::HeartbeatReply>(mgmt::kHeartbeat, unknown);
  ASSERT_FALSE(hb);
  EXPECT_EQ(hb.error().code(), Code::kNotFound);
  EXPECT_NE(hb.error().message().find("unknown node id 4711"), std::string::npos) << hb.error();

  // A newer incarnation registers the address of the running server s0: it
  // gets s0's node and target ids, and the real s0 process is fenced for good
  // (its next heartbeat is refused) and refuses writes.
  mgmt::NodeId node = ClusterFixture::node_of(*r, cluster_->storage_address(0));
  auto targets = ClusterFixture::targets_of(*r, node);
  ASSERT_EQ(targets.size(), 1u);
  std::optional<mgmt::ChainId> headed;
  for (auto& [id, c] : r->chains)
    if (c.entries.front().target_id == targets[0]) headed = id;
  ASSERT_TRUE(headed);
  DirectWriter direct(*cluster_);
  ASSERT_TRUE(eventually([&] { return direct.write(*r, *headed, 0).has_value(); }, 10s)) << cluster_->all_logs();
  mgmt::MgmtClientOptions mo;
  mo.registration = {.kind = mgmt::NodeKind::kStorage,
                     .address = cluster_->storage_address(0),
                     .incarnation = mgmt::new_incarnation(),
                     .targets = {{cluster_->dir().file("s0/t0"), 0, 0}}};
  mgmt::MgmtClient impostor(cluster_->rpc(), mo);
  ASSERT_TRUE(impostor.register_now());
  EXPECT_EQ(impostor.node_id(), node);
  EXPECT_EQ(impostor.target_ids(), targets);
  // Refused either by the fence (kLeaseExpired) or because the fenced server
  // already fetched the new routing where its target is no longer the head.
  ASSERT_TRUE(eventually(
      [&] {
        auto w = direct.write(*r, *headed, 0);
        return !w && (w.error().code() == Code::kLeaseExpired || w.error().code() == Code::kStaleRouting);
      },
      std::chrono::milliseconds(o.lease_ms * 3)))
      << cluster_->storage_log(0);
  EXPECT_TRUE(eventually([&] { return cluster_->storage_log(0).find("fenced") != std::string::npos; },
                         std::chrono::milliseconds(o.lease_ms * 3)))
      << cluster_->storage_log(0);
  EXPECT_TRUE(cluster_->storage(0).running());

  // Storage configs that cannot join a cluster: one line naming the problem.
  auto bad_storage = [&](const std::string& name, const std::string& text) {
    testing::write_file(cluster_->dir().file(name), text);
    testing::Process p({testing::weft_binary(), "serve", "storage", "--config", cluster_->dir().file(name)},
                       cluster_->dir().file(name + ".log"));
    auto status = p.wait_exit(20s);
    EXPECT_TRUE(status) << name;
    if (status) {
      EXPECT_NE(WEXITSTATUS(*status), 0) << name;
    }
    return p.log();
  };
  auto config = [&](uint16_t port, const std::string& target) {
    return fmt::format("[server]\nlisten = \"127.0.0.1:{}\"\ncluster_token = \"tok\"\n[cluster]\nmgmtd = "
                       "[\"127.0.0.1:{}\"]\n[[targets]]\n{}path = \"{}\"\n",
                       port, cluster_->mgmtd_port(), target, cluster_->dir().file("bad-target"));
  };
  std::string any_port = bad_storage("port0.toml", config(0, ""));
  EXPECT_NE(any_port.find("fixed port"), std::string::npos) << any_port;
  std::string with_id = bad_storage("id.toml", config(testing::free_port(), "id = 7\n"));
  EXPECT_NE(with_id.find("assigned by mgmtd"), std::string::npos) << with_id;
}

// Not a test: the writer stall after kill -9 of a storage server, several
// runs. Environment: WEFT_STALL_LEASE_MS (1000), WEFT_STALL_GRACE_MS (500),
// WEFT_STALL_RUNS (5). Run with --gtest_also_run_disabled_tests.
int env_int(const char* name, int fallback) { return static_cast<int>(env_u64(name, static_cast<uint64_t>(fallback))); }

TEST_F(FailoverTest, DISABLED_StallBenchmark) {
  ClusterOptions o{.lease_ms = env_int("WEFT_STALL_LEASE_MS", 1000),
                   .grace_ms = env_int("WEFT_STALL_GRACE_MS", 500),
                   .tick_ms = env_int("WEFT_STALL_TICK_MS", 200)};
  int runs = env_int("WEFT_STALL_RUNS", 5);
  ASSERT_NO_FATAL_FAILURE(start_cluster(o, 3, 2, 2));
  Writer writer(*cluster_, chains_, 8 * chains_.size());
  writer.start();
  ASSERT_TRUE(wait_acks(writer, 50, 60s)) << describe(writer);
  std::vector<double> stalls, detects;
  for (int run = 0; run < runs; ++run) {
    std::this_thread::sleep_for(1s);
    int victim = run % 3;
    KillOutcome k = kill_and_measure(*cluster_, writer, victim, o);
    stalls.push_back(k.stall_ms);
    detects.push_back(k.detect_ms);
    std::printf("[stall] run %d: kill -9 s%d: mgmtd shows it down after %.0f ms, writer stall %.0f ms\n", run, victim,
                k.detect_ms, k.stall_ms);
    std::fflush(stdout);
    ASSERT_TRUE(cluster_->start_storage(victim));
    ASSERT_TRUE(cluster_->wait_all_serving(60s)) << cluster_->all_logs();
  }
  writer.stop();
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  };
  std::printf("[stall] lease %d ms grace %d ms tick %d ms, %d runs: stall median %.0f ms (min %.0f, max %.0f); "
              "detection median %.0f ms\n",
              o.lease_ms, o.grace_ms, o.tick_ms, runs, median(stalls), *std::min_element(stalls.begin(), stalls.end()),
              *std::max_element(stalls.begin(), stalls.end()), median(detects));
  EXPECT_TRUE(writer.unexpected().empty()) << describe(writer);
  verify_replicas(writer);
}

}  // namespace
}  // namespace weft
