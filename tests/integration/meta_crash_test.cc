// A real `weft serve meta` process under concurrent creates from 4 client
// threads is SIGKILLed mid-stream and restarted on the same data dir (and
// port): every acknowledged create is present afterwards, no retried create
// saw EEXIST (request ids de-duplicate across the crash), and fsck of the
// data dir is clean once the server stopped.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "meta/fsck.h"
#include "meta/meta_client.h"
#include "meta/meta_store.h"
#include "process.h"
#include "rpc/client.h"

namespace weft {
namespace {

using testing::Process;
using testing::TempDir;

constexpr int kThreads = 4;

std::string config_text(const TempDir& dir, uint16_t port) {
  return fmt::format(
      "[server]\nlisten = \"127.0.0.1:{}\"\nmetrics_listen = \"\"\ncluster_token = \"tok\"\nname = \"meta-it\"\n"
      "blocking_threads = 16\nport_file = \"{}\"\n[meta]\ndata_dir = \"{}\"\n",
      port, dir.file("ports"), dir.file("data"));
}

uint16_t start_and_read_port(const TempDir& dir, std::unique_ptr<Process>& server, uint16_t port,
                             const std::string& log) {
  std::filesystem::remove(dir.file("ports"));
  testing::write_file(dir.file("meta.toml"), config_text(dir, port));
  server = std::make_unique<Process>(
      std::vector<std::string>{testing::weft_binary(), "serve", "meta", "--config", dir.file("meta.toml")},
      dir.file(log));
  auto text = testing::wait_for_file(dir.file("ports"), std::chrono::seconds(20));
  if (!text) return 0;
  return static_cast<uint16_t>(std::stoi(*text));
}

struct Worker {
  std::vector<std::string> acknowledged;
  int other_errors = 0;
  int exists_errors = 0;
  uint64_t retries = 0;
  meta::Ino dir = 0;
  std::string first_error;
};

void run_worker(int id, rpc::IoPool& io, rpc::Endpoint ep, std::atomic<bool>& stop, Worker& w) {
  rpc::Client rpc(io, rpc::ClientOptions{.cluster_token = "tok"});
  meta::MetaClientOptions o;
  o.addresses = {ep};
  o.call_timeout_ms = 3000;
  o.retry_time_ms_max = 30000;
  meta::MetaClient client(io, rpc, o);
  meta::Cred root;
  auto d = client.mkdir(root, meta::kRootIno, fmt::format("t{}", id), 0755);
  if (!d) {
    w.first_error = d.error().to_string();
    return;
  }
  w.dir = d->ino;
  for (int n = 0; !stop.load(); ++n) {
    std::string name = fmt::format("f{}", n);
    auto r = client.create(root, w.dir, name, 0644, true, false);
    if (r) {
      w.acknowledged.push_back(name);
    } else if (r.error().code() == Code::kExists) {
      ++w.exists_errors;
    } else {
      ++w.other_errors;
      if (w.first_error.empty()) w.first_error = r.error().to_string();
    }
  }
  w.retries = client.retries();
}

TEST(MetaCrash, AcknowledgedCreatesSurviveSigkillAndFsckIsClean) {
  TempDir dir;
  std::unique_ptr<Process> server;
  // A port from below the ephemeral range (testing::free_port), not one the
  // kernel picks (listen on port 0): the restart below needs the same port,
  // and while the server is down an outgoing connection of this or another
  // test process could take an ephemeral one as its source port.
  const uint16_t wanted = testing::free_port();
  ASSERT_NE(wanted, 0);
  uint16_t port = start_and_read_port(dir, server, wanted, "log1");
  ASSERT_EQ(port, wanted) << server->log();
  rpc::Endpoint ep{"127.0.0.1", port};

  rpc::IoPool io(2);
  std::atomic<bool> stop{false};
  std::vector<Worker> workers(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i)
    threads.emplace_back(run_worker, i, std::ref(io), ep, std::ref(stop), std::ref(workers[i]));

  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  server->signal(SIGKILL);
  ASSERT_TRUE(server->wait_exit(std::chrono::seconds(10)));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_EQ(start_and_read_port(dir, server, port, "log2"), port) << server->log();
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  stop = true;
  for (auto& t : threads) t.join();

  rpc::Client rpc(io, rpc::ClientOptions{.cluster_token = "tok"});
  meta::MetaClient checker(io, rpc, meta::MetaClientOptions{.addresses = {ep}});
  size_t total = 0;
  uint64_t retries = 0;
  for (int i = 0; i < kThreads; ++i) {
    Worker& w = workers[i];
    ASSERT_NE(w.dir, 0u) << w.first_error;
    EXPECT_EQ(w.exists_errors, 0) << "thread " << i;
    EXPECT_EQ(w.other_errors, 0) << "thread " << i << ": " << w.first_error;
    EXPECT_GT(w.acknowledged.size(), 10u) << "thread " << i;
    total += w.acknowledged.size();
    retries += w.retries;
    for (const auto& name : w.acknowledged) {
      auto r = checker.lookup(meta::Cred{}, w.dir, name);
      ASSERT_TRUE(r.has_value()) << "acknowledged create t" << i << "/" << name << " lost: " << r.error();
    }
  }
  std::cout << "acknowledged creates: " << total << ", client retries: " << retries << "\n";
  EXPECT_GE(retries, 1u) << "the kill should have interrupted calls in flight";

  server->signal(SIGTERM);
  auto status = server->wait_exit(std::chrono::seconds(20));
  ASSERT_TRUE(status);
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << server->log();

  meta::StoreOptions so;
  so.path = dir.file("data") + "/store";
  metrics::Registry registry;
  so.registry = &registry;
  auto store = meta::MetaStore::open(so);
  ASSERT_TRUE(store.has_value()) << store.error();
  auto report = meta::fsck(*(*store)->db());
  ASSERT_TRUE(report.has_value()) << report.error();
  EXPECT_TRUE(report->ok()) << report->summary();
  EXPECT_GE(report->inodes, total + kThreads + 1);
}

TEST(MetaCrash, BadConfigNamesFileAndKey) {
  TempDir dir;
  testing::write_file(dir.file("bad.toml"), "[server]\ncluster_token = \"t\"\n[meta]\ndata_dir = 5\n");
  Process p({testing::weft_binary(), "serve", "meta", "--config", dir.file("bad.toml")}, dir.file("log"));
  auto status = p.wait_exit(std::chrono::seconds(10));
  ASSERT_TRUE(status);
  EXPECT_NE(WEXITSTATUS(*status), 0);
  EXPECT_NE(p.log().find("bad.toml"), std::string::npos) << p.log();
  EXPECT_NE(p.log().find("meta.data_dir"), std::string::npos) << p.log();
}

}  // namespace
}  // namespace weft
