// Real `weft serve mgmtd` and `weft serve meta` processes: a meta restarted
// on an empty data_dir (a new store, counting inode ids from the start again)
// is refused by mgmtd and exits with the one-line error instead of serving;
// started once with --accept-store-change it serves, and its new files get
// inode ids above every id the old store issued (mgmt/cluster_state.h,
// "Meta's store"). Every process is stopped by PID, on failure too (Process).
#include <sys/wait.h>

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

  void start_mgmtd() {
    mgmtd_ = std::make_unique<Process>(
        std::vector<std::string>{testing::weft_binary(), "serve", "mgmtd", "--config", dir_.file("mgmtd.toml")},
        dir_.file("mgmtd.log"));
    ASSERT_TRUE(testing::wait_for_file(dir_.file("mgmtd.ports"), 10s)) << mgmtd_->log();
  }

  // A meta server on data_dir `data` (the same port each time).
  std::unique_ptr<Process> start_meta(const std::string& data, std::vector<std::string> flags = {}) {
    const std::string config = dir_.file("meta-" + std::to_string(starts_) + ".toml");
    testing::write_file(config, fmt::format("[server]\nlisten = \"127.0.0.1:{}\"\nmetrics_listen = \"\"\n"
                                            "cluster_token = \"tok\"\nname = \"meta-it\"\nport_file = \"{}\"\n"
                                            "[cluster]\nmgmtd = [\"127.0.0.1:{}\"]\n[meta]\ndata_dir = \"{}\"\n",
                                            meta_port_, dir_.file("meta.ports"), mgmtd_port_, dir_.file(data)));
    std::filesystem::remove(dir_.file("meta.ports"));
    std::vector<std::string> argv{testing::weft_binary(), "serve", "meta", "--config", config};
    argv.insert(argv.end(), flags.begin(), flags.end());
    return std::make_unique<Process>(argv, dir_.file("meta.log." + std::to_string(starts_++)));
  }

  static void stop(Process& p) {
    p.signal(SIGTERM);
    ASSERT_TRUE(p.wait_exit(20s)) << p.log();
  }

  // Creates `name` in / through meta; returns its inode id (0 on failure).
  meta::Ino create(const std::string& name) {
    rpc::Client rpc(io_, rpc::ClientOptions{.cluster_token = "tok"});
    meta::MetaClientOptions o;
    o.addresses = {rpc::Endpoint{"127.0.0.1", meta_port_}};
    o.call_timeout_ms = 3000;
    meta::MetaClient client(io_, rpc, o);
    auto r = client.create(meta::Cred::root(), meta::kRootIno, name, 0644, true, false);
    EXPECT_TRUE(r.has_value()) << r.error();
    return r ? r->inode.ino : 0;
  }

  TempDir dir_;
  uint16_t mgmtd_port_, meta_port_;
  int starts_ = 0;
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
  mgmtd_->signal(SIGTERM);
  EXPECT_TRUE(mgmtd_->wait_exit(20s));
}

}  // namespace
}  // namespace weft
