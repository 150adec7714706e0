// Real `weft serve mgmtd` and `weft serve meta` processes: a meta restarted
// on an empty data_dir (a new store, counting inode ids from the start again)
// is refused by mgmtd and exits with the one-line error instead of serving;
// started once with --accept-store-change it serves, and its new files get
// inode ids above every id the old store issued (mgmt/cluster_state.h,
// "Meta's store"). A meta still running on the replaced store is fenced and
// refuses every request, and the meta taking over serves only once the
// replaced one can hold no lease; a meta cut off from mgmtd serves nothing
// while it has no lease; mgmtd restored from a backup older than a store
// change takes the new store with --accept-older-state only, and never a
// fresh one. Every process is stopped by PID, on failure too (Process).
#include <sys/wait.h>

#include <thread>

#include <gtest/gtest.h>

#include "meta/meta_client.h"
#include "process.h"
#include "rpc/client.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using testing::Process;
using testing::TempDir;

class StoreChange : public ::testing::Test {
 protected:
  StoreChange() : mgmtd_port_(testing::free_port()), meta_port_(testing::free_port()) {
    testing::write_file(dir_.file("mgmtd.toml"),
                        fmt::format("[server]\nlisten = \"127.0.0.1:{}\"\nmetrics_listen = \"\"\ncluster_token = "
                                    "\"tok\"\nname = \"mgmtd-it\"\nport_file = \"{}\"\n[mgmtd]\ndata_dir = \"{}\"\n"
                                    "lease_ms = 600\ngrace_ms = 300\ntick_ms = 50\n",
                                    mgmtd_port_, dir_.file("mgmtd.ports"), dir_.file("mgmtd")));
  }

  void start_mgmtd(std::vector<std::string> flags = {}) {
    std::filesystem::remove(dir_.file("mgmtd.ports"));
    std::vector<std::string> argv{testing::weft_binary(), "serve", "mgmtd", "--config", dir_.file("mgmtd.toml")};
    argv.insert(argv.end(), flags.begin(), flags.end());
    mgmtd_ = std::make_unique<Process>(argv, dir_.file("mgmtd.log." + std::to_string(mgmtd_starts_++)));
    ASSERT_TRUE(testing::wait_for_file(dir_.file("mgmtd.ports"), 10s)) << mgmtd_->log();
  }
  void stop_mgmtd() {
    mgmtd_->signal(SIGTERM);
    ASSERT_TRUE(mgmtd_->wait_exit(20s)) << mgmtd_->log();
  }

  // A meta server on data_dir `data` (port meta_port_ and port file
  // meta.ports unless told otherwise).
  std::unique_ptr<Process> start_meta(const std::string& data, std::vector<std::string> flags = {},
                                      uint16_t port = 0, const std::string& ports = "meta.ports",
                                      const std::string& token = "tok", std::vector<std::string> env = {}) {
    const std::string config = dir_.file("meta-" + std::to_string(starts_) + ".toml");
    testing::write_file(config, fmt::format("[server]\nlisten = \"127.0.0.1:{}\"\nmetrics_listen = \"\"\n"
                                            "cluster_token = \"{}\"\nname = \"meta-it\"\nport_file = \"{}\"\n"
                                            "[cluster]\nmgmtd = [\"127.0.0.1:{}\"]\n[meta]\ndata_dir = \"{}\"\n",
                                            port == 0 ? meta_port_ : port, token, dir_.file(ports), mgmtd_port_,
                                            dir_.file(data)));
    std::filesystem::remove(dir_.file(ports));
    std::vector<std::string> argv{testing::weft_binary(), "serve", "meta", "--config", config};
    argv.insert(argv.end(), flags.begin(), flags.end());
    return std::make_unique<Process>(argv, dir_.file("meta.log." + std::to_string(starts_++)), env);
  }

  static void stop(Process& p) {
    p.signal(SIGTERM);
    ASSERT_TRUE(p.wait_exit(20s)) << p.log();
  }

  // Creates `name` in / through the meta at `port` (meta_port_ if 0),
  // retrying kUnavailable for up to `retry_ms` (a meta taking over a store
  // serves once the replaced one's lease is surely over: lease + grace, 0.9 s).
  Result<meta::Ino> try_create(const std::string& name, uint16_t port = 0, uint32_t retry_ms = 5000) {
    rpc::Client rpc(io_, rpc::ClientOptions{.cluster_token = "tok"});
    meta::MetaClientOptions o;
    o.addresses = {rpc::Endpoint{"127.0.0.1", port == 0 ? meta_port_ : port}};
    o.call_timeout_ms = 3000;
    o.retry_time_ms_max = retry_ms;
    meta::MetaClient client(io_, rpc, o);
    auto r = client.create(meta::Cred::root(), meta::kRootIno, name, 0644, true, false);
    if (!r) return std::unexpected(r.error());
    return r->inode.ino;
  }
  // The same, expected to work; returns its inode id (0 on failure).
  meta::Ino create(const std::string& name, uint16_t port = 0) {
    auto r = try_create(name, port);
    EXPECT_TRUE(r.has_value()) << r.error();
    return r ? *r : 0;
  }

  TempDir dir_;
  uint16_t mgmtd_port_, meta_port_;
  int starts_ = 0, mgmtd_starts_ = 0;
  rpc::IoPool io_{1};
  std::unique_ptr<Process> mgmtd_;
};

TEST_F(StoreChange, MetaOnAnEmptyDataDirIsRefusedUnlessTheOperatorAcceptsTheChange) {
  ASSERT_NO_FATAL_FAILURE(start_mgmtd());
  // A fresh cluster: the first meta registers its store.
  auto meta = start_meta("meta");
  ASSERT_TRUE(testing::wait_for_file(dir_.file("meta.ports"), 20s)) << meta->log();
  meta::Ino old_file = 0;
  for (int i = 0; i < 100; ++i) old_file = create("old" + std::to_string(i));
  ASSERT_GT(old_file, 0u);
  ASSERT_NO_FATAL_FAILURE(stop(*meta));
  // Restarted on its own data_dir it registers again (and mgmtd hears its
  // mark, above every id it issued, from that registration at the latest).
  meta = start_meta("meta");
  ASSERT_TRUE(testing::wait_for_file(dir_.file("meta.ports"), 20s)) << meta->log();
  ASSERT_NO_FATAL_FAILURE(stop(*meta));

  // The wrong data_dir: an empty store. Refused, and meta exits instead of serving.
  meta = start_meta("empty");
  auto status = meta->wait_exit(30s);
  ASSERT_TRUE(status) << "meta on an empty data_dir kept running: " << meta->log();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) != 0) << meta->log();
  EXPECT_FALSE(std::filesystem::exists(dir_.file("meta.ports"))) << "it never listened";
  const std::string log = meta->log();
  EXPECT_NE(log.find("weft: "), std::string::npos) << log;
  EXPECT_NE(log.find("data_dir"), std::string::npos) << log;
  EXPECT_NE(log.find("--accept-store-change"), std::string::npos) << log;

  // The operator means it: the new store serves, above every old id.
  meta = start_meta("empty", {"--accept-store-change"});
  ASSERT_TRUE(testing::wait_for_file(dir_.file("meta.ports"), 20s)) << meta->log();
  meta::Ino new_file = create("new");
  EXPECT_GT(new_file, old_file);
  EXPECT_GE(new_file, uint64_t{1} << 32) << "past the recorded mark plus the margin";
  ASSERT_NO_FATAL_FAILURE(stop(*meta));
  // From now on the new store is the cluster's: without the flag it serves,
  // and its ids keep growing from where the raise put them.
  meta = start_meta("empty");
  ASSERT_TRUE(testing::wait_for_file(dir_.file("meta.ports"), 20s)) << meta->log();
  EXPECT_GT(create("newer"), new_file);
  ASSERT_NO_FATAL_FAILURE(stop(*meta));
  // The old data_dir is another store now.
  meta = start_meta("meta");
  auto old_status = meta->wait_exit(30s);
  ASSERT_TRUE(old_status) << meta->log();
  EXPECT_NE(meta->log().find("--accept-store-change"), std::string::npos) << meta->log();
  ASSERT_NO_FATAL_FAILURE(stop_mgmtd());
}

// A meta that keeps running after another meta's accepted store change
// replaced its store: its next heartbeat is refused, and it answers every
// request with kUnavailable and the reason instead of serving a store that is
// no longer the cluster's (its log says why). `weft status` shows the store
// mgmtd records.
// A refusal that waiting cannot mend (here a wrong cluster token) ends meta
// with the reason, as it ends storage; only an unreachable mgmtd, or one
// behind the cluster, is waited for.
TEST_F(StoreChange, MetaWithAWrongClusterTokenExitsWithTheReason) {
  ASSERT_NO_FATAL_FAILURE(start_mgmtd());
  auto meta = start_meta("meta", {}, 0, "meta.ports", "not-the-token");
  auto status = meta->wait_exit(20s);
  ASSERT_TRUE(status) << "meta kept retrying a final refusal: " << meta->log();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) != 0) << meta->log();
  EXPECT_NE(meta->log().find("token"), std::string::npos) << meta->log();
  EXPECT_FALSE(std::filesystem::exists(dir_.file("meta.ports"))) << "it listened";
}

TEST_F(StoreChange, ARunningMetaWhoseStoreWasReplacedStopsServing) {
  ASSERT_NO_FATAL_FAILURE(start_mgmtd());
  auto old_meta = start_meta("meta");
  ASSERT_TRUE(testing::wait_for_file(dir_.file("meta.ports"), 20s)) << old_meta->log();
  ASSERT_GT(create("before"), 0u);
  const uint16_t new_port = testing::free_port();
  auto new_meta = start_meta("new", {"--accept-store-change"}, new_port, "new-meta.ports");
  ASSERT_TRUE(testing::wait_for_file(dir_.file("new-meta.ports"), 20s)) << new_meta->log();
  EXPECT_GE(create("after", new_port), uint64_t{1} << 32);
  // The new meta served only once the old one could hold no lease: mgmtd
  // told it to wait (lease + grace after the old meta's last heartbeat).
  EXPECT_NE(new_meta->log().find("meta: serving in "), std::string::npos) << new_meta->log();
  Result<meta::Ino> refused = try_create("late", 0, /*retry_ms=*/0);
  ASSERT_FALSE(refused.has_value()) << "both metas served at once: " << old_meta->log();
  EXPECT_EQ(refused.error().code(), Code::kUnavailable) << refused.error();
  for (int i = 0; i < 100; ++i) {  // its next heartbeat (every 200 ms) is refused: fenced
    refused = try_create("late" + std::to_string(i), 0, 0);
    if (!refused && refused.error().message().find("fenced by mgmtd") != std::string::npos) break;
    std::this_thread::sleep_for(100ms);
  }
  ASSERT_FALSE(refused.has_value()) << "the replaced meta still serves: " << old_meta->log();
  EXPECT_EQ(refused.error().code(), Code::kUnavailable) << refused.error();
  EXPECT_NE(refused.error().message().find("fenced by mgmtd"), std::string::npos) << refused.error();
  EXPECT_NE(refused.error().message().find("no longer the cluster's meta store"), std::string::npos)
      << refused.error();
  EXPECT_TRUE(old_meta->running()) << "it refuses, as a fenced storage server does";
  EXPECT_NE(old_meta->log().find("mgmtd fenced this meta server"), std::string::npos) << old_meta->log();
  EXPECT_GT(create("still", new_port), 0u) << "the new store serves on";

  const std::string client = dir_.file("client.toml");
  testing::write_file(client, fmt::format("mgmtd = [\"127.0.0.1:{}\"]\ncluster_token = \"tok\"\n", mgmtd_port_));
  Process status({testing::weft_binary(), "status", "--config", client}, dir_.file("status.log"), {"WEFT_CONFIG="});
  ASSERT_TRUE(status.wait_exit(30s));
  EXPECT_NE(status.log().find("\nmeta store: "), std::string::npos) << status.log();
  EXPECT_NE(status.log().find("(inode ids issued below "), std::string::npos) << status.log();
  EXPECT_NE(new_meta->log().find(status.log().substr(status.log().find("\nmeta store: ") + 13, 16)),
            std::string::npos)
      << "the new meta's store id, as its log named it\n" << status.log() << new_meta->log();
  ASSERT_NO_FATAL_FAILURE(stop(*old_meta));
  ASSERT_NO_FATAL_FAILURE(stop(*new_meta));
  ASSERT_NO_FATAL_FAILURE(stop_mgmtd());
}

// A meta cut off from mgmtd (its heartbeats fail: fault point
// mgmt_client.heartbeat, from the 6th for 12 tries) would not hear that
// another meta's --accept-store-change replaced its store: once its lease ran
// out it serves nothing (kUnavailable, saying why), and it serves again once
// a heartbeat is answered.
TEST_F(StoreChange, AMetaWithoutALeaseFromMgmtdServesNothingUntilItHasOneAgain) {
  ASSERT_NO_FATAL_FAILURE(start_mgmtd());
  auto meta = start_meta("meta", {}, 0, "meta.ports", "tok", {"WEFT_FAULTS=mgmt_client.heartbeat=1:12:5"});
  ASSERT_TRUE(testing::wait_for_file(dir_.file("meta.ports"), 20s)) << meta->log();
  Result<meta::Ino> refused = 0;
  for (int i = 0; i < 200 && refused; ++i) {  // heartbeats every 200 ms: they fail from about 1 s on
    refused = try_create("cut" + std::to_string(i), 0, 0);
    if (refused) std::this_thread::sleep_for(50ms);
  }
  ASSERT_FALSE(refused.has_value()) << "served on without a lease: " << meta->log();
  EXPECT_EQ(refused.error().code(), Code::kUnavailable) << refused.error();
  EXPECT_NE(refused.error().message().find("holds no lease from mgmtd"), std::string::npos) << refused.error();
  // The 12 failed heartbeats over (one each 200 ms), the next one renews the lease.
  EXPECT_GT(create("back"), 0u) << meta->log();
  ASSERT_NO_FATAL_FAILURE(stop(*meta));
  ASSERT_NO_FATAL_FAILURE(stop_mgmtd());
}

// mgmtd restored from a backup taken before a store change: it knows the old
// store only. Without --accept-older-state it refuses the meta serving the
// new store, naming the option, and the meta waits without serving; with it,
// mgmtd takes the cluster's newer view and the meta serves, its ids going on
// from where they were. A meta on a fresh data_dir is refused all the same.
TEST_F(StoreChange, MgmtdOnABackupOlderThanAStoreChangeTakesTheNewStoreWithAcceptOlderState) {
  ASSERT_NO_FATAL_FAILURE(start_mgmtd());
  auto meta = start_meta("meta");
  ASSERT_TRUE(testing::wait_for_file(dir_.file("meta.ports"), 20s)) << meta->log();
  ASSERT_GT(create("old"), 0u);
  ASSERT_NO_FATAL_FAILURE(stop(*meta));
  ASSERT_NO_FATAL_FAILURE(stop_mgmtd());
  std::filesystem::copy(dir_.file("mgmtd"), dir_.file("mgmtd-backup"), std::filesystem::copy_options::recursive);
  ASSERT_NO_FATAL_FAILURE(start_mgmtd());
  meta = start_meta("new", {"--accept-store-change"});
  ASSERT_TRUE(testing::wait_for_file(dir_.file("meta.ports"), 20s)) << meta->log();
  const meta::Ino new_file = create("new");
  ASSERT_GE(new_file, uint64_t{1} << 32);
  ASSERT_NO_FATAL_FAILURE(stop(*meta));
  ASSERT_NO_FATAL_FAILURE(stop_mgmtd());

  // mgmtd on the backup.
  std::filesystem::remove_all(dir_.file("mgmtd"));
  std::filesystem::copy(dir_.file("mgmtd-backup"), dir_.file("mgmtd"), std::filesystem::copy_options::recursive);
  ASSERT_NO_FATAL_FAILURE(start_mgmtd());
  meta = start_meta("new");
  bool named = false;
  for (int i = 0; i < 100 && !named; ++i) {
    named = meta->log().find("--accept-older-state") != std::string::npos;
    if (!named) std::this_thread::sleep_for(100ms);
  }
  EXPECT_TRUE(named) << meta->log();
  EXPECT_TRUE(meta->running()) << "it waits for mgmtd: " << meta->log();
  EXPECT_FALSE(std::filesystem::exists(dir_.file("meta.ports"))) << "without serving";
  meta->signal(SIGKILL);
  ASSERT_TRUE(meta->wait_exit(20s));
  ASSERT_NO_FATAL_FAILURE(stop_mgmtd());

  ASSERT_NO_FATAL_FAILURE(start_mgmtd({"--accept-older-state"}));
  // A fresh store is still refused: only the meta's own flag takes it.
  auto fresh = start_meta("fresh");
  auto fresh_status = fresh->wait_exit(30s);
  ASSERT_TRUE(fresh_status) << "meta on a fresh data_dir kept running: " << fresh->log();
  EXPECT_TRUE(WIFEXITED(*fresh_status) && WEXITSTATUS(*fresh_status) != 0) << fresh->log();
  EXPECT_NE(fresh->log().find("--accept-store-change"), std::string::npos) << fresh->log();
  meta = start_meta("new");
  ASSERT_TRUE(testing::wait_for_file(dir_.file("meta.ports"), 20s)) << meta->log();
  EXPECT_GT(create("newer"), new_file);
  ASSERT_NO_FATAL_FAILURE(stop(*meta));
  // The record is the new store's now, without the option too.
  ASSERT_NO_FATAL_FAILURE(stop_mgmtd());
  ASSERT_NO_FATAL_FAILURE(start_mgmtd());
  meta = start_meta("new");
  ASSERT_TRUE(testing::wait_for_file(dir_.file("meta.ports"), 20s)) << meta->log();
  ASSERT_NO_FATAL_FAILURE(stop(*meta));
  meta = start_meta("meta");  // the old store stays refused
  auto old_status = meta->wait_exit(30s);
  ASSERT_TRUE(old_status) << meta->log();
  ASSERT_NO_FATAL_FAILURE(stop_mgmtd());
}

}  // namespace
}  // namespace weft
