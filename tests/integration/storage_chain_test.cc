// Real `weft serve storage` processes on 127.0.0.1: a chain of 3 whose middle
// server is SIGKILLed during a write stream (routing switches to the shorter
// chain, writes go on; the server restarts, rejoins as syncing tail, is
// resynced, and all replicas end byte-identical); a single server SIGKILLed
// mid-stream keeps every acknowledged write; a full target answers kNoSpace
// and still serves reads.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <mutex>
#include <thread>

#include "process.h"
#include "rpc/test_util.h"
#include "storage/storage_test_client.h"
#include "storage/test_util.h"

namespace weft {
namespace {

using mgmt::TargetState;
using storage::ChunkId;
using storage::testing::ChainSpec;
using storage::testing::pattern;
using testing::Process;
using testing::TempDir;

constexpr char kToken[] = "chain-token";
constexpr uint32_t kChunkBytes = 64 * 1024;

// One storage server process with one target, restartable on the same port and data.
class StorageProcess {
 public:
  StorageProcess(const TempDir& dir, std::string name, mgmt::TargetId target, uint64_t capacity = 0,
                 std::string extra = "")
      : dir_(dir), name_(std::move(name)), target_(target), capacity_(capacity), extra_(std::move(extra)) {}

  // Starts on `port` (0: any); waits until it listens.
  bool start(uint16_t port = 0) {
    std::string ports = dir_.file(name_ + ".ports");
    std::filesystem::remove(ports);
    std::string cfg = "[server]\nlisten = \"127.0.0.1:" + std::to_string(port) +
                      "\"\nmetrics_listen = \"127.0.0.1:0\"\ncluster_token = \"" + kToken + "\"\nname = \"" + name_ +
                      "\"\nport_file = \"" + ports + "\"\n[storage]\ndisk_threads = 4\nforward_timeout_ms = 2000\n" +
                      "[[targets]]\nid = " + std::to_string(target_) + "\npath = \"" + dir_.file(name_ + ".data") +
                      "\"\ncapacity = " + std::to_string(capacity_) + "\nchunk_size_max = 1048576\n" + extra_;
    testing::write_file(dir_.file(name_ + ".toml"), cfg);
    process_ = std::make_unique<Process>(
        std::vector<std::string>{testing::weft_binary(), "serve", "storage", "--config", dir_.file(name_ + ".toml")},
        dir_.file(name_ + ".log." + std::to_string(++starts_)));
    auto text = testing::wait_for_file(ports, std::chrono::seconds(20));
    if (!text) return false;
    std::istringstream in(*text);
    in >> port_ >> metrics_port_;
    return true;
  }
  void kill() {
    process_->signal(SIGKILL);
    process_->wait_exit(std::chrono::seconds(10));
  }
  rpc::Endpoint ep() const { return {"127.0.0.1", port_}; }
  std::string address() const { return ep().to_string(); }
  mgmt::TargetId target() const { return target_; }
  uint16_t port() const { return port_; }
  uint16_t metrics_port() const { return metrics_port_; }
  std::string log() const { return process_ ? process_->log() : ""; }

 private:
  const TempDir& dir_;
  std::string name_;
  mgmt::TargetId target_;
  uint64_t capacity_;
  std::string extra_;
  std::unique_ptr<Process> process_;
  uint16_t port_ = 0, metrics_port_ = 0;
  int starts_ = 0;
};

// Writes whole chunks in a loop, retrying every failure with the same
// sequence number against the current head and chain version. Remembers the
// acknowledged content of every chunk.
class Writer {
 public:
  Writer(storage::testing::StorageTestClient& client, rpc::Endpoint head, uint64_t chunks)
      : client_(client), head_(std::move(head)), chunks_(chunks) {}
  ~Writer() { stop(); }

  void start() { thread_ = std::thread([this] { run(); }); }
  void stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  void set_chain_version(mgmt::ChainVersion v) { version_ = v; }
  uint64_t acked() const { return acked_.load(); }
  uint64_t failures() const { return failures_.load(); }
  std::map<uint64_t, std::vector<std::byte>> content() {
    std::lock_guard lock(mu_);
    return content_;
  }
  // Stop retrying after this many consecutive failures (single-server test).
  void give_up_after(int n) { give_up_after_ = n; }

 private:
  void run() {
    for (uint64_t seq = 1; !stop_; ++seq) {
      uint64_t index = seq % chunks_;
      auto data = pattern(kChunkBytes - (seq % 7) * 4096, seq);
      int consecutive = 0;
      while (true) {
        auto w = client_.write(head_, 1, version_.load(), ChunkId{42, index}, 0, data, 9, seq, 1u << 20);
        if (w) break;
        failures_++;
        if (++consecutive >= give_up_after_ || (stop_ && consecutive > 1000)) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      std::lock_guard lock(mu_);
      // A rewrite of a whole chunk at offset 0 keeps the old tail beyond the new length.
      auto& c = content_[index];
      if (c.size() < data.size()) c.resize(data.size());
      std::copy(data.begin(), data.end(), c.begin());
      acked_++;
    }
  }

  storage::testing::StorageTestClient& client_;
  rpc::Endpoint head_;
  uint64_t chunks_;
  std::atomic<mgmt::ChainVersion> version_{1};
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> acked_{0}, failures_{0};
  int give_up_after_ = 3000;
  std::mutex mu_;
  std::map<uint64_t, std::vector<std::byte>> content_;
  std::thread thread_;
};

void wait_for(const std::function<bool()>& cond, std::chrono::seconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!cond() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

class StorageChainTest : public ::testing::Test {
 protected:
  void route(std::vector<StorageProcess*> servers, std::vector<std::pair<StorageProcess*, TargetState>> chain,
             mgmt::ChainVersion cv) {
    ChainSpec spec{1, cv, {}};
    for (auto& [s, state] : chain) spec.entries.push_back({s->target(), state});
    std::vector<rpc::Endpoint> eps;
    for (auto* s : servers) eps.push_back(s->ep());
    std::vector<std::pair<mgmt::TargetId, std::string>> targets;
    for (auto* s : all_) targets.push_back({s->target(), s->address()});
    auto r = client_.set_routing(eps, targets, {spec}, ++routing_version_);
    ASSERT_TRUE(r.has_value()) << r.error();
  }

  TempDir dir_;
  rpc::IoPool io_{2};
  storage::testing::StorageTestClient client_{io_, kToken};
  std::vector<StorageProcess*> all_;
  uint64_t routing_version_ = 0;
};

TEST_F(StorageChainTest, MiddleKilledChainShrinksThenResyncedReplicasIdentical) {
  StorageProcess a(dir_, "a", 101), b(dir_, "b", 201), c(dir_, "c", 301);
  all_ = {&a, &b, &c};
  // b comes back on its port after a kill: one from below the ephemeral range
  // (testing::free_port), which no outgoing connection takes meanwhile.
  ASSERT_TRUE(a.start() && b.start(testing::free_port()) && c.start()) << a.log() << b.log() << c.log();
  route({&a, &b, &c}, {{&a, TargetState::kServing}, {&b, TargetState::kServing}, {&c, TargetState::kServing}}, 1);

  Writer writer(client_, a.ep(), 40);
  writer.start();
  wait_for([&] { return writer.acked() >= 60; }, std::chrono::seconds(20));
  ASSERT_GE(writer.acked(), 60u);
  b.kill();
  route({&a, &c}, {{&a, TargetState::kServing}, {&c, TargetState::kServing}}, 2);
  writer.set_chain_version(2);
  uint64_t at_switch = writer.acked();
  wait_for([&] { return writer.acked() >= at_switch + 60; }, std::chrono::seconds(20));
  ASSERT_GE(writer.acked(), at_switch + 60) << "writes did not continue on the shorter chain";

  ASSERT_TRUE(b.start(b.port())) << b.log();
  route({&a, &b, &c}, {{&a, TargetState::kServing}, {&c, TargetState::kServing}, {&b, TargetState::kSyncing}}, 3);
  writer.set_chain_version(3);
  bool synced = false;
  wait_for(
      [&] {
        auto s = client_.status(b.ep(), b.target());
        if (!s) return false;
        for (auto& cs : s->targets(0).synced()) synced |= cs.chain_id() == 1 && cs.synced_chain_version() == 3;
        return synced;
      },
      std::chrono::seconds(20));
  ASSERT_TRUE(synced) << a.log() << c.log() << b.log();
  uint64_t at_sync = writer.acked();
  wait_for([&] { return writer.acked() >= at_sync + 20; }, std::chrono::seconds(20));
  writer.stop();
  route({&a, &b, &c}, {{&a, TargetState::kServing}, {&c, TargetState::kServing}, {&b, TargetState::kServing}}, 4);

  auto expected = writer.content();
  ASSERT_EQ(expected.size(), 40u);
  auto list_a = client_.list(a.ep(), a.target());
  ASSERT_TRUE(list_a.has_value());
  for (StorageProcess* s : all_) {
    auto l = client_.list(s->ep(), s->target());
    ASSERT_TRUE(l.has_value()) << l.error();
    ASSERT_EQ(l->chunks_size(), list_a->chunks_size());
    for (int i = 0; i < l->chunks_size(); ++i) {
      EXPECT_EQ(l->chunks(i).version(), list_a->chunks(i).version());
      EXPECT_EQ(l->chunks(i).chunk_crc32c(), list_a->chunks(i).chunk_crc32c());
    }
    for (auto& [index, bytes] : expected) {
      auto r = client_.read(s->ep(), 1, 4, ChunkId{42, index}, 0, 1u << 20);
      ASSERT_TRUE(r.has_value()) << r.error();
      ASSERT_EQ(r->result.code(), 0u) << r->result.message();
      EXPECT_EQ(r->data, bytes) << "chunk " << index << " on target " << s->target();
    }
  }
  EXPECT_GT(writer.failures(), 0u) << "the kill should have failed some writes";
}

TEST_F(StorageChainTest, SingleServerKilledMidStreamKeepsEveryAckedWrite) {
  // A free port for the config's [routing] section, which the server comes
  // back on after a kill: from below the ephemeral range (testing::free_port),
  // not one the kernel handed out (an outgoing connection may take that one
  // while the server is down).
  const uint16_t port = testing::free_port();
  ASSERT_NE(port, 0);
  std::string routing = "[routing]\nversion = 1\n[[routing.targets]]\nid = 101\naddress = \"127.0.0.1:" +
                        std::to_string(port) + "\"\n[[routing.chains]]\nid = 1\nversion = 1\ntargets = [\"101\"]\n";
  StorageProcess a(dir_, "solo", 101, 0, routing);
  ASSERT_TRUE(a.start(port)) << a.log();
  Writer writer(client_, a.ep(), 25);
  writer.give_up_after(1);
  writer.start();
  wait_for([&] { return writer.acked() >= 80; }, std::chrono::seconds(20));
  a.kill();
  writer.stop();
  ASSERT_GE(writer.acked(), 80u);
  ASSERT_TRUE(a.start(port)) << a.log();
  // The write in flight at the kill (sequence acked + 1) may or may not have
  // been applied; every other chunk holds exactly its last acknowledged write.
  uint64_t unsure_seq = writer.acked() + 1;
  uint64_t unsure_index = unsure_seq % 25;
  for (auto& [index, bytes] : writer.content()) {
    auto r = client_.read(a.ep(), 1, 1, ChunkId{42, index}, 0, 1u << 20);
    ASSERT_TRUE(r.has_value()) << r.error();
    ASSERT_EQ(r->result.code(), 0u) << r->result.message();
    EXPECT_EQ(crc32c(r->data), r->result.crc32c());
    if (index != unsure_index) {
      EXPECT_EQ(r->data, bytes) << "chunk " << index;
      continue;
    }
    // The in-flight write covers [0, its length); the older content shows past it.
    auto applied = pattern(kChunkBytes - (unsure_seq % 7) * 4096, unsure_seq);
    if (bytes.size() > applied.size()) applied.insert(applied.end(), bytes.begin() + applied.size(), bytes.end());
    EXPECT_TRUE(r->data == bytes || r->data == applied) << "chunk " << index;
  }
}

TEST_F(StorageChainTest, FullTargetAnswersNoSpaceAndServesReads) {
  StorageProcess a(dir_, "full", 101, 1u << 20);
  all_ = {&a};
  ASSERT_TRUE(a.start()) << a.log();
  route({&a}, {{&a, TargetState::kServing}}, 1);
  auto data = pattern(kChunkBytes, 5);
  ASSERT_TRUE(client_.write(a.ep(), 1, 1, ChunkId{1, 0}, 0, data).has_value());
  Result<proto::storage::WriteReply> w;
  for (uint64_t i = 1; i < 64; ++i) {
    w = client_.write(a.ep(), 1, 1, ChunkId{1, i}, 0, data);
    if (!w) break;
  }
  ASSERT_FALSE(w.has_value());
  EXPECT_EQ(w.error().code(), Code::kNoSpace) << w.error();
  auto r = client_.read(a.ep(), 1, 1, ChunkId{1, 0}, 0, kChunkBytes);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->data, data);

  const std::string text = rpc::testing::scrape_metrics(a.metrics_port());
  ASSERT_FALSE(text.empty());
  for (const char* name : {"weft_storage_requests_total{server=\"full\",target=\"101\",op=\"write\"}",
                           "weft_storage_request_latency_us", "weft_storage_target_free_bytes",
                           "weft_storage_disk_queue_depth", "weft_storage_payload_checksum_failures_total"})
    EXPECT_NE(text.find(name), std::string::npos) << name;
}

}  // namespace
}  // namespace weft
