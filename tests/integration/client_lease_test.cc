// Client leases end to end, with real processes on 127.0.0.1: every client
// holds a lease at mgmtd (shown by `weft status`), and when a client dies
// with a file open for writing, meta closes its write session once the lease
// is gone, so a file unlinked while it was open is finally removed.
// Short leases: mgmtd client_lease_ms 1000 + grace 500, meta reaps every
// 200 ms sessions older than 1 s.
#include <fcntl.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include "client/chunk_gc.h"
#include "cluster_fixture.h"
#include "common/crash_child.h"
#include "common/fault.h"
#include "proto/storage.pb.h"
#include "rpc/client.h"
#include "rpc/io_pool.h"
#include "storage/service_methods.h"
#include "weft/client.h"

namespace weft::testing {
namespace {

using namespace std::chrono_literals;

class ClientLeaseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // [mgmtd] is the last table of the fixture's config: these keys land in it.
    std::ofstream(cluster_.dir().file("mgmtd.toml"), std::ios::app) << "client_lease_ms = 1000\nclient_grace_ms = 500\n";
    ASSERT_TRUE(cluster_.start_mgmtd()) << cluster_.mgmtd_log();
    // Two chains (replicas 1): on one server's two targets, or one target on each of two servers.
    const int servers = storage_servers();
    for (int i = 0; i < servers; ++i) cluster_.add_storage(2 / servers);
    for (int i = 0; i < servers; ++i) ASSERT_TRUE(cluster_.start_storage(i)) << cluster_.all_logs();
    ASSERT_TRUE(cluster_.wait_nodes_up(servers, 2)) << cluster_.all_logs();
    auto table = cluster_.weft({"admin", "chain-table", "create", "--replicas", "1"});
    ASSERT_EQ(table.exit_code, 0) << table.output;
    uint16_t meta_port = free_port();
    write_file(cluster_.dir().file("meta.toml"),
               fmt::format("[server]\nlisten = \"127.0.0.1:{}\"\ncluster_token = \"{}\"\nname = \"meta\"\n"
                           "[cluster]\nmgmtd = [\"127.0.0.1:{}\"]\n"
                           "[meta]\ndata_dir = \"{}\"\nchain_count = 2\nchain_table_id = 1\n"
                           "session_reap_interval_ms = 200\nsession_reap_min_age_s = 1\n",
                           meta_port, cluster_.options().token, cluster_.mgmtd_port(), cluster_.dir().file("meta.data")));
    meta_ = std::make_unique<Process>(
        std::vector<std::string>{weft_binary(), "serve", "meta", "--config", cluster_.dir().file("meta.toml")},
        cluster_.dir().file("meta.log"));
    auto meta_up = [&] {
      auto r = cluster_.status();
      if (!r) return false;
      for (auto& [id, n] : r->nodes)
        if (n.kind == mgmt::NodeKind::kMeta && n.state == mgmt::NodeState::kUp) return true;
      return false;
    };
    ASSERT_TRUE(eventually(meta_up, 20s)) << meta_->log();
    ClientOptions o;
    o.config_path = cluster_.dir().file("client.toml");
    o.name = "lease-test";
    auto c = Client::connect(o);
    ASSERT_TRUE(c) << c.error();
    client_ = std::move(*c);
  }

  virtual int storage_servers() const { return 1; }

  // The labels of the clients `weft status --json` lists.
  std::string status_json() { return cluster_.weft({"status", "--json"}).output; }

  ClusterFixture cluster_;
  std::unique_ptr<Process> meta_;
  std::unique_ptr<Client> client_;
};

TEST_F(ClientLeaseTest, StatusListsConnectedClients) {
  std::string mine = fmt::format(":{}:lease-test", ::getpid());
  EXPECT_NE(status_json().find(mine), std::string::npos) << status_json();
  auto text = cluster_.weft({"status"});
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_NE(text.output.find("clients ("), std::string::npos) << text.output;
  EXPECT_NE(text.output.find(mine), std::string::npos) << text.output;
  // Held across several lease periods: the client renews.
  std::this_thread::sleep_for(2500ms);
  EXPECT_NE(status_json().find(mine), std::string::npos) << "the lease is renewed while the client lives";
}

TEST_F(ClientLeaseTest, AKilledWritersSessionIsClosedAndItsUnlinkedFileRemoved) {
  // `weft put FIFO /doomed` creates its temporary /.doomed.weft-tmp-*, opens
  // it for writing and then blocks reading the FIFO: a writer we can SIGKILL
  // mid-stream.
  std::string fifo = cluster_.dir().file("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  int fifo_fd = ::open(fifo.c_str(), O_RDWR);  // O_RDWR: does not wait for a reader
  ASSERT_GE(fifo_fd, 0);
  Process put({weft_binary(), "put", fifo, "/doomed", "--config", cluster_.dir().file("client.toml")},
              cluster_.dir().file("put.log"), {"WEFT_CONFIG="});
  std::string label = fmt::format(":{}:", put.pid());
  std::string doomed_path;
  ASSERT_TRUE(eventually(
      [&] {
        auto names = client_->list_path(client_->default_cred(), "/");
        for (const auto& e : names ? *names : decltype(names)::value_type{})
          if (e.name.starts_with(".doomed.weft-tmp-")) doomed_path = "/" + e.name;
        return !doomed_path.empty();
      },
      20s))
      << put.log();
  ASSERT_TRUE(eventually([&] { return status_json().find(label) != std::string::npos; }, 10s)) << status_json();
  std::string data(3 << 20, 'x');
  ASSERT_EQ(::write(fifo_fd, data.data(), data.size()), static_cast<ssize_t>(data.size()));
  auto doomed = client_->resolve(client_->default_cred(), doomed_path);
  ASSERT_TRUE(doomed) << doomed.error();
  ASSERT_TRUE(client_->remove_path(client_->default_cred(), doomed_path));
  std::this_thread::sleep_for(1500ms);
  EXPECT_TRUE(client_->getattr(client_->default_cred(), doomed->ino).has_value())
      << "an unlinked file stays while its writer lives";

  put.signal(SIGKILL);
  ASSERT_TRUE(put.wait_exit(10s).has_value());
  ::close(fifo_fd);
  EXPECT_TRUE(eventually([&] { return status_json().find(label) == std::string::npos; }, 10s))
      << "the dead client's lease runs out: " << status_json();
  auto gone = [&] {
    auto n = client_->getattr(client_->default_cred(), doomed->ino);
    return !n && n.error().code() == Code::kNotFound;
  };
  EXPECT_TRUE(eventually(gone, 15s)) << "meta closed the dead writer's session and destroyed the inode\n"
                                     << meta_->log();
  // Servers flush their log every second (common/logging.cc): wait for the line.
  EXPECT_TRUE(eventually([&] { return meta_->log().find("session reaper: closed 1") != std::string::npos; }, 5s))
      << meta_->log();
}

// The dead writer of DeadWritersDataCountsOnceItsSessionIsReaped: a child
// process (common/crash_child.h) that writes past the file's length, gets its
// chunks to storage but never its length to meta, acknowledges, and waits to
// be killed.
constexpr uint64_t kDeadWriteAt = (3 << 20) + 5;
constexpr size_t kDeadWriteBytes = 300 << 10;
std::byte dead_writer_byte(size_t i) { return static_cast<std::byte>((i * 131 + 7) % 251); }

TEST(DeadWriterChild, WritesPastTheLengthThenWaits) {
  const char* fd_text = getenv("WEFT_DEAD_WRITER_FD");
  if (fd_text == nullptr) GTEST_SKIP() << "the child of ClientLeaseTest.ADeadWritersDataCountsOnceItsSessionIsReaped";
  ClientOptions o;
  o.config_path = getenv("WEFT_DEAD_WRITER_CONFIG");
  o.name = "dead-writer";
  auto c = Client::connect(o);
  ASSERT_TRUE(c) << c.error();
  auto f = (*c)->open_path((*c)->default_cred(), getenv("WEFT_DEAD_WRITER_PATH"), O_CREAT | O_WRONLY | O_EXCL, 0644);
  ASSERT_TRUE(f) << f.error();
  std::vector<std::byte> data(kDeadWriteBytes);
  for (size_t i = 0; i < data.size(); ++i) data[i] = dead_writer_byte(i);
  ASSERT_TRUE((*f)->pwrite(data, kDeadWriteAt).has_value());
  fault::Scope lost("client.report_length.lost");  // until the kill: no report ever reaches meta
  ASSERT_FALSE((*f)->flush().has_value()) << "the chunks reach storage, the length never meta";
  ASSERT_GT(lost.triggered(), 0);
  uint64_t ack = 0;
  ASSERT_EQ(::write(std::atoi(fd_text), &ack, sizeof ack), static_cast<ssize_t>(sizeof ack));
  for (;;) std::this_thread::sleep_for(1h);
}

// A writer killed after its data reached storage, before meta heard its
// length: once its lease is gone, meta closes its session with the length of
// what it stored (meta/session_reaper.h), so the data is in the file, as a
// killed process's writes are on a local file system, and the range before
// it reads as a hole.
TEST_F(ClientLeaseTest, ADeadWritersDataCountsOnceItsSessionIsReaped) {
#if !(defined(WEFT_FAULT_INJECTION) && WEFT_FAULT_INJECTION)
  GTEST_SKIP() << "the dead writer needs fault injection (client.report_length.lost)";
#endif
  const std::string path = "/dead-writer";
  uint64_t acked = 0;
  ASSERT_NO_FATAL_FAILURE(run_child_until_killed(
      "DeadWriterChild.WritesPastTheLengthThenWaits", "WEFT_DEAD_WRITER_FD",
      {{"WEFT_DEAD_WRITER_CONFIG", cluster_.dir().file("client.toml")}, {"WEFT_DEAD_WRITER_PATH", path}}, 1, &acked));
  ASSERT_EQ(acked, 1u);
  const Cred& cred = client_->default_cred();
  auto n = client_->resolve(cred, path);
  ASSERT_TRUE(n) << n.error();
  const uint64_t end = kDeadWriteAt + kDeadWriteBytes;
  auto reaped = [&] {
    auto m = client_->getattr(cred, n->ino);
    return m && m->size == end;
  };
  EXPECT_TRUE(eventually(reaped, 20s)) << "the length covers the dead writer's data\n" << meta_->log();
  EXPECT_TRUE(eventually([&] { return meta_->log().find("(1 with the length of data") != std::string::npos; }, 5s))
      << meta_->log();
  auto f = client_->open_path(cred, path, O_RDONLY, 0);
  ASSERT_TRUE(f) << f.error();
  std::vector<std::byte> back(end + 100);
  auto got = (*f)->pread(back, 0);
  ASSERT_TRUE(got) << got.error();
  ASSERT_EQ(*got, end);
  EXPECT_TRUE(std::all_of(back.begin(), back.begin() + kDeadWriteAt, [](std::byte b) { return b == std::byte{0}; }))
      << "the range before the write is a hole";
  bool same = true;
  for (size_t i = 0; i < kDeadWriteBytes; ++i) same = same && back[kDeadWriteAt + i] == dead_writer_byte(i);
  EXPECT_TRUE(same) << "the dead writer's bytes";
  ASSERT_TRUE((*f)->close().has_value());
}

// The same dead writer, its file unlinked while it still had it open (never
// a length reported: meta's length is 0): once the reaper closes the session
// the file goes, and the chunk GC removes what the writer stored on every
// chain of the stripe. Queued with its length (0: not queued at all; a small
// one: only the chunks of that length), the chunks stayed for the orphan sweep.
TEST_F(ClientLeaseTest, AnUnlinkedFileOfADeadWriterHasAllItsChunksRemoved) {
#if !(defined(WEFT_FAULT_INJECTION) && WEFT_FAULT_INJECTION)
  GTEST_SKIP() << "the dead writer needs fault injection (client.report_length.lost)";
#endif
  const std::string path = "/dead-unlinked";
  const Cred& cred = client_->default_cred();
  uint64_t acked = 0;
  ASSERT_NO_FATAL_FAILURE(run_child_until_killed(
      "DeadWriterChild.WritesPastTheLengthThenWaits", "WEFT_DEAD_WRITER_FD",
      {{"WEFT_DEAD_WRITER_CONFIG", cluster_.dir().file("client.toml")}, {"WEFT_DEAD_WRITER_PATH", path}}, 1, &acked));
  ASSERT_EQ(acked, 1u);
  auto n = client_->resolve(cred, path);
  ASSERT_TRUE(n) << n.error();
  ASSERT_TRUE(client_->remove_path(cred, path).has_value());  // before the lease runs out: the reaper finds it unlinked
  rpc::IoPool io(1);
  rpc::Client lister(io, rpc::ClientOptions::in_cluster(cluster_.options().token, "lister"));
  // Chunks of the file on every target of every chain (nullopt: a listing failed).
  auto stored = [&]() -> std::optional<size_t> {
    auto r = cluster_.routing();
    if (!r) return std::nullopt;
    size_t count = 0;
    for (const auto& [cid, chain] : r->chains) {
      for (const auto& e : chain.entries) {
        auto address = r->target_address(e.target_id);
        if (!address) return std::nullopt;
        auto ep = rpc::Endpoint::parse(*address);
        if (!ep) return std::nullopt;
        proto::storage::ListChunksRequest req;
        req.set_target_id(e.target_id);
        req.set_chain_id(cid);
        req.set_count_max(65536);
        auto l = lister.call_blocking<proto::storage::ListChunksReply>(*ep, storage::methods::kListChunks, req, {}, 5000);
        if (!l) return std::nullopt;
        for (const auto& c : l->chunks()) count += c.chunk().inode() == n->ino ? 1 : 0;
      }
    }
    return count;
  };
  auto before = stored();
  ASSERT_TRUE(before.has_value());
  ASSERT_GT(*before, 0u) << "the dead writer's chunks are on storage";
  auto gone = [&] {
    auto m = client_->getattr(cred, n->ino);
    return !m && m.error().code() == Code::kNotFound;
  };
  EXPECT_TRUE(eventually(gone, 20s)) << "the reaper closed the session and the file went\n" << meta_->log();
  EXPECT_TRUE(eventually([&] { return stored() == std::optional<size_t>(0); }, 30s))
      << "chunks of the dead writer's unlinked file left on storage: " << stored().value_or(9999) << "\n"
      << meta_->log();
}

// A close whose length report fails (meta or storage unreachable for the
// retry time) returns the error and abandons the write session: meta's
// session reaper closes it with what storage holds, so what was written is
// in the file, not left past its length.
TEST_F(ClientLeaseTest, AFailedClosesWritesCountOnceMetaClosesTheSession) {
  const Cred& cred = client_->default_cred();
  auto f = client_->open_path(cred, "/failed-close", O_CREAT | O_WRONLY | O_EXCL, 0644);
  ASSERT_TRUE(f) << f.error();
  std::vector<std::byte> data(kDeadWriteBytes);
  for (size_t i = 0; i < data.size(); ++i) data[i] = dead_writer_byte(i);
  ASSERT_TRUE((*f)->pwrite(data, kDeadWriteAt).has_value());
  {
    fault::Scope lost("client.report_length.lost");
    auto closed = (*f)->close();
    if (lost.triggered() == 0) GTEST_SKIP() << "fault injection compiled out";
    ASSERT_FALSE(closed.has_value()) << "the length never reached meta: close says so";
  }
  const Ino ino = (*f)->ino();
  const uint64_t end = kDeadWriteAt + kDeadWriteBytes;
  auto counted = [&] {
    auto n = client_->getattr(cred, ino);
    return n && n->size == end;
  };
  EXPECT_TRUE(eventually(counted, 20s)) << meta_->log();
  auto r = client_->open_path(cred, "/failed-close", O_RDONLY, 0);
  ASSERT_TRUE(r) << r.error();
  std::vector<std::byte> back(kDeadWriteBytes);
  auto got = (*r)->pread(back, kDeadWriteAt);
  ASSERT_TRUE(got) << got.error();
  EXPECT_EQ(*got, kDeadWriteBytes);
  EXPECT_TRUE(back == data);
  ASSERT_TRUE((*r)->close().has_value());
}

// Ctrl-C (or SIGTERM) during `weft put` removes its temporary and leaves the
// destination as it was; the process still dies of the signal.
TEST_F(ClientLeaseTest, AStopSignalDuringPutLeavesNoTemporary) {
  auto f = client_->open_path(client_->default_cred(), "/kept", O_CREAT | O_WRONLY, 0644);
  ASSERT_TRUE(f) << f.error();
  ASSERT_TRUE((*f)->pwrite(std::as_bytes(std::span(std::string_view("old"))), 0));
  ASSERT_TRUE((*f)->close());
  std::string fifo = cluster_.dir().file("fifo-int");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  int fifo_fd = ::open(fifo.c_str(), O_RDWR);
  ASSERT_GE(fifo_fd, 0);
  Process put({weft_binary(), "put", fifo, "/kept", "--config", cluster_.dir().file("client.toml")},
              cluster_.dir().file("put-int.log"), {"WEFT_CONFIG="});
  auto temporaries = [&] {
    size_t n = 0;
    auto names = client_->list_path(client_->default_cred(), "/");
    for (const auto& e : names ? *names : decltype(names)::value_type{}) n += e.name.starts_with(".kept.weft-tmp-");
    return n;
  };
  ASSERT_TRUE(eventually([&] { return temporaries() == 1; }, 20s)) << put.log();
  std::string data(1 << 20, 'x');
  ASSERT_EQ(::write(fifo_fd, data.data(), data.size()), static_cast<ssize_t>(data.size()));
  std::this_thread::sleep_for(300ms);  // copied, and blocked reading again
  put.signal(SIGINT);
  auto status = put.wait_exit(20s);
  ::close(fifo_fd);
  ASSERT_TRUE(status.has_value()) << put.log();
  EXPECT_TRUE(WIFSIGNALED(*status) && WTERMSIG(*status) == SIGINT) << put.log();
  EXPECT_EQ(temporaries(), 0u) << "the temporary stayed";
  auto back = client_->open_path(client_->default_cred(), "/kept", O_RDONLY, 0);
  ASSERT_TRUE(back) << back.error();
  std::string text(16, '\0');
  auto n = (*back)->pread(std::as_writable_bytes(std::span(text)), 0);
  ASSERT_TRUE(n) << n.error();
  EXPECT_EQ(text.substr(0, *n), "old");
}

// A stop signal the process ignores (`nohup weft put ...` and a hangup, a
// background job's SIGINT) stays ignored: the copy goes on and completes.
TEST_F(ClientLeaseTest, AnIgnoredHangupDoesNotStopPut) {
  std::string fifo = cluster_.dir().file("fifo-hup");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  int fifo_fd = ::open(fifo.c_str(), O_RDWR | O_CLOEXEC);  // put must not hold a write end: it waits for EOF
  ASSERT_GE(fifo_fd, 0);
  struct sigaction ignore {}, old {};
  ignore.sa_handler = SIG_IGN;
  ASSERT_EQ(::sigaction(SIGHUP, &ignore, &old), 0);  // inherited through fork and exec, as nohup does
  Process put({weft_binary(), "put", fifo, "/hup", "--config", cluster_.dir().file("client.toml")},
              cluster_.dir().file("put-hup.log"), {"WEFT_CONFIG="});
  ::sigaction(SIGHUP, &old, nullptr);
  std::string half(1 << 20, 'a');
  ASSERT_EQ(::write(fifo_fd, half.data(), half.size()), static_cast<ssize_t>(half.size()));
  std::this_thread::sleep_for(500ms);  // reading, its signal handlers in place
  put.signal(SIGHUP);
  std::this_thread::sleep_for(300ms);
  ASSERT_TRUE(put.running()) << "the ignored hangup stopped put: " << put.log();
  ASSERT_EQ(::write(fifo_fd, half.data(), half.size()), static_cast<ssize_t>(half.size()));
  ::close(fifo_fd);  // end of the stream
  auto status = put.wait_exit(30s);
  ASSERT_TRUE(status.has_value()) << put.log();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << "status " << *status << ": " << put.log();
  auto copied = client_->resolve(client_->default_cred(), "/hup");
  ASSERT_TRUE(copied) << copied.error() << "\n" << put.log();
  EXPECT_EQ(copied->size, 2u << 20);
}

// "-" is stdin for put and stdout for get; put from stdin into a directory
// (no name to give the file) is refused.
TEST_F(ClientLeaseTest, PutAndGetStreamThroughADash) {
  const std::string in = cluster_.dir().file("dash-in"), out = cluster_.dir().file("dash-out");
  std::string data(300000, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7);
  { std::ofstream(in, std::ios::binary) << data; }
  const std::string config = cluster_.dir().file("client.toml");
  auto sh = [&](const std::string& cmd, const std::string& log) {
    Process p({"/bin/sh", "-c", cmd}, cluster_.dir().file(log), {"WEFT_CONFIG="});
    auto status = p.wait_exit(60s);
    return std::pair<int, std::string>(status && WIFEXITED(*status) ? WEXITSTATUS(*status) : -1, p.log());
  };
  auto put = sh(fmt::format("'{}' put - /dash --config '{}' < '{}'", weft_binary(), config, in), "dash-put.log");
  ASSERT_EQ(put.first, 0) << put.second;
  auto get = sh(fmt::format("'{}' get /dash - --config '{}' > '{}'", weft_binary(), config, out), "dash-get.log");
  ASSERT_EQ(get.first, 0) << get.second;
  std::ifstream back(out, std::ios::binary);
  std::string got((std::istreambuf_iterator<char>(back)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(got == data) << got.size() << " bytes back of " << data.size();
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::current_path() / "-")) << "get made a file named '-'";
  auto into_dir = sh(fmt::format("'{}' put - / --config '{}' < '{}'", weft_binary(), config, in), "dash-dir.log");
  EXPECT_NE(into_dir.first, 0);
  EXPECT_NE(into_dir.second.find("name the file"), std::string::npos) << into_dir.second;
}

// A GC queue of the test's own, for a ChunkGc driven by the test: its hooks
// hand out files as MetaStore::gc_pending does (inode order, after a cursor)
// and drop the finished ones.
struct TestQueue {
  std::vector<meta::GcItem> items;  // in inode order
  std::vector<meta::Ino> done;

  client::ChunkGcHooks hooks() {
    client::ChunkGcHooks h;
    h.pending = [this](size_t limit, std::optional<meta::Ino> after) -> Result<std::vector<meta::GcItem>> {
      std::vector<meta::GcItem> out;
      for (const auto& item : items)
        if ((!after || item.ino > *after) && out.size() < limit) out.push_back(item);
      return out;
    };
    h.done = [this](std::span<const meta::Ino> inos) -> Result<void> {
      done.insert(done.end(), inos.begin(), inos.end());
      std::erase_if(items, [&](const meta::GcItem& item) { return std::ranges::count(inos, item.ino) > 0; });
      return {};
    };
    return h;
  }
  bool queued(meta::Ino ino) const {
    return std::ranges::any_of(items, [&](const meta::GcItem& item) { return item.ino == ino; });
  }
};

// Sends this process's log lines to a string while it lives.
class LogCapture {
 public:
  LogCapture()
      : previous_(spdlog::default_logger()),
        logger_(std::make_shared<spdlog::logger>("capture", std::make_shared<spdlog::sinks::ostream_sink_mt>(out_))) {
    spdlog::set_default_logger(logger_);
  }
  ~LogCapture() { spdlog::set_default_logger(previous_); }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;
  size_t count(std::string_view needle) const {
    std::string text = out_.str();
    size_t n = 0;
    for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + needle.size())) ++n;
    return n;
  }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::logger> previous_;
  std::shared_ptr<spdlog::logger> logger_;
};

// The chunk GC (run by meta) against a dead storage server, replicas 1: the
// files whose chunk sits on its target stay queued (their removals fail) while
// the others are removed in the same passes; once it is back, they go too.
class ChunkGcTest : public ClientLeaseTest {
 protected:
  int storage_servers() const override { return 2; }
  rpc::ClientOptions gc_rpc_options() const { return rpc::ClientOptions::in_cluster(cluster_.options().token, "chunk-gc"); }
  // Used bytes of server i's target as mgmtd last heard (heartbeats).
  uint64_t used_on(int i) {
    auto r = cluster_.status();
    if (!r) return UINT64_MAX;
    auto targets = ClusterFixture::targets_of(*r, ClusterFixture::node_of(*r, cluster_.storage_address(i)));
    return targets.empty() ? UINT64_MAX : r->targets.at(targets[0]).used_bytes;
  }
  // The chain on server i's target (one each) and its index in chain table 1,
  // which a layout of stripe 1 names as first_chain to put every chunk on it.
  struct ChainOf {
    mgmt::ChainId id = 0;
    uint32_t index = UINT32_MAX;
  };
  ChainOf chain_on(int i) {
    auto r = cluster_.routing();
    if (!r || !r->tables.contains(1)) return {};
    auto targets = ClusterFixture::targets_of(*r, ClusterFixture::node_of(*r, cluster_.storage_address(i)));
    const auto& chains = r->tables.at(1).chains;
    for (uint32_t k = 0; k < chains.size() && !targets.empty(); ++k)
      if (ClusterFixture::state_in(r->chains.at(chains[k]), targets[0])) return {chains[k], k};
    return {};
  }
  // Whether mgmtd's routing has a serving target for the chain.
  bool serving(mgmt::ChainId chain) {
    auto r = cluster_.routing();
    return r && r->chains.contains(chain) && mgmt::route_chain(r->chains.at(chain)).has_value();
  }
  // A queued file of one chunk on the chain at `index` of table 1 (no such
  // chunk on storage: its removal finds nothing, which is success).
  static meta::GcItem file_on(meta::Ino ino, uint32_t index) {
    meta::GcItem item{ino, meta::Inode{.ino = ino}};
    item.inode.size = Layout::kChunkBytesMin;
    item.inode.layout = {.chunk_bytes = Layout::kChunkBytesMin, .stripe_count = 1, .chain_table_id = 1,
                         .first_chain = index};
    return item;
  }
  // A queued file of 1 MiB whose layout names a chain table that does not
  // exist: it fails at once, with no storage call.
  static meta::GcItem failing_file(meta::Ino ino) {
    meta::GcItem item{ino, meta::Inode{.ino = ino}};
    item.inode.size = 1 << 20;
    item.inode.layout.chain_table_id = 999;
    return item;
  }
};

TEST_F(ChunkGcTest, FilesOnADeadServerStayQueuedUntilItReturns) {
  const Cred& cred = client_->default_cred();
  const uint64_t before0 = used_on(0), before1 = used_on(1);
  ASSERT_NE(before0, UINT64_MAX);
  ASSERT_NE(before1, UINT64_MAX);
  std::vector<std::byte> data(64 << 10, std::byte{7});  // one chunk: one chain per file
  for (int i = 0; i < 16; ++i) {
    auto f = client_->open_path(cred, fmt::format("/g{}", i), O_CREAT | O_WRONLY | O_EXCL, 0644);
    ASSERT_TRUE(f) << f.error();
    ASSERT_TRUE((*f)->pwrite(data, 0));
    ASSERT_TRUE((*f)->close());
  }
  ASSERT_TRUE(eventually([&] { return used_on(0) > before0 && used_on(1) > before1; }, 10s))
      << "both targets hold some of the files (one chunk each, chains chosen per file)";
  cluster_.kill_storage(1);
  for (int i = 0; i < 16; ++i) ASSERT_TRUE(client_->remove_path(cred, fmt::format("/g{}", i)));
  EXPECT_TRUE(eventually([&] { return used_on(0) <= before0; }, 30s))
      << "the live server's chunks go while the other is dead\n" << meta_->log();
  EXPECT_TRUE(eventually([&] { return meta_->log().find("files stay queued") != std::string::npos; }, 30s))
      << "removals on the dead server failed\n" << meta_->log();
  ASSERT_TRUE(cluster_.start_storage(1)) << cluster_.all_logs();
  // It registers with no usage; its heartbeats (every 333 ms) report what it holds.
  std::this_thread::sleep_for(1500ms);
  EXPECT_TRUE(eventually([&] { return used_on(1) <= before1; }, 60s))
      << "the rest go once it is back\n" << meta_->log() << cluster_.all_logs();
}

// An unlinked 16 TiB sparse file of 64 KiB chunks (2^28 chunk indexes, three
// chunks written): one pass removes its chunks, at the cost of the chunks
// there are (counted: three, not a removal per index, which took hours). The
// queue is the test's own, so the file stays linked: it reads zeros after.
TEST_F(ChunkGcTest, AHugeSparseFilesChunksGoWithoutARequestPerChunkIndex) {
  const Cred& cred = client_->default_cred();
  ASSERT_TRUE(client_->mkdirs(cred, "/huge"));
  auto dir = client_->resolve(cred, "/huge");
  ASSERT_TRUE(dir) << dir.error();
  auto layout = client_->get_layout(cred, dir->ino);
  ASSERT_TRUE(layout) << layout.error();
  layout->chunk_bytes = Layout::kChunkBytesMin;
  ASSERT_TRUE(client_->set_layout(cred, dir->ino, *layout));
  const uint64_t kEnd = uint64_t{16} << 40;
  const std::vector<uint64_t> offsets{0, uint64_t{1} << 40, kEnd - 3000};
  std::vector<std::byte> data(3000, std::byte{7});
  auto f = client_->open_path(cred, "/huge/f", O_CREAT | O_RDWR | O_EXCL, 0644);
  ASSERT_TRUE(f) << f.error();
  for (uint64_t at : offsets) ASSERT_TRUE((*f)->pwrite(data, at));
  ASSERT_TRUE((*f)->close());
  auto file = client_->resolve(cred, "/huge/f");
  ASSERT_TRUE(file) << file.error();
  ASSERT_EQ(file->size, kEnd);

  TestQueue queue;
  queue.items = {meta::GcItem{file->ino, *file}};
  client::ChunkGc gc({rpc::Endpoint{"127.0.0.1", cluster_.mgmtd_port()}}, gc_rpc_options(), queue.hooks());
  std::atomic<bool> done{false};
  std::thread pass([&] {
    auto r = gc.collect_once();
    EXPECT_TRUE(r) << r.error();
    done = true;
  });
  const bool in_time = eventually([&] { return done.load(); }, 60s);
  if (!in_time) {  // what the pass waits for fails (after ChunkIo's 2 s), so it ends
    cluster_.kill_storage(0);
    cluster_.kill_storage(1);
  }
  pass.join();
  ASSERT_TRUE(in_time) << "the pass costs the file's length";
  EXPECT_EQ(queue.done, std::vector<meta::Ino>{file->ino});
  EXPECT_EQ(gc.chunks_removed(), offsets.size()) << "removals counted beyond the chunks there were";
  auto back = client_->open_path(cred, "/huge/f", O_RDONLY, 0);
  ASSERT_TRUE(back) << back.error();
  for (uint64_t at : offsets) {
    std::vector<std::byte> buf(data.size(), std::byte{1});
    auto n = (*back)->pread(buf, at);
    ASSERT_TRUE(n) << n.error();
    EXPECT_TRUE(std::all_of(buf.begin(), buf.begin() + *n, [](std::byte b) { return b == std::byte{0}; }))
        << "chunk at " << at << " is still there";
  }
}

// More files fail than a pass takes (GC passes take 64): the first 80 files
// have a chunk on each chain, so all of them fail while server 1 is dead. The
// files queued behind them (higher inodes) are still collected: passes go
// round the queue rather than retaking its failing head.
TEST_F(ChunkGcTest, FilesBehindMoreFailingFilesThanAPassTakesAreCollected) {
  const Cred& cred = client_->default_cred();
  const uint64_t before0 = used_on(0), before1 = used_on(1);
  ASSERT_NE(before0, UINT64_MAX);
  ASSERT_NE(before1, UINT64_MAX);
  ASSERT_TRUE(client_->mkdirs(cred, "/both"));
  auto both = client_->resolve(cred, "/both");
  ASSERT_TRUE(both) << both.error();
  auto layout = client_->get_layout(cred, both->ino);
  ASSERT_TRUE(layout) << layout.error();
  ASSERT_EQ(layout->stripe_count, 2u) << "both chains";
  layout->chunk_bytes = Layout::kChunkBytesMin;
  ASSERT_TRUE(client_->set_layout(cred, both->ino, *layout));
  auto write = [&](const std::string& path, size_t bytes) {
    std::vector<std::byte> data(bytes, std::byte{7});
    auto f = client_->open_path(cred, path, O_CREAT | O_WRONLY | O_EXCL, 0644);
    ASSERT_TRUE(f) << f.error();
    ASSERT_TRUE((*f)->pwrite(data, 0));
    ASSERT_TRUE((*f)->close());
  };
  constexpr int kFailing = 80, kBehind = 16;
  for (int i = 0; i < kFailing; ++i) write(fmt::format("/both/f{}", i), 2 * Layout::kChunkBytesMin);
  for (int i = 0; i < kBehind; ++i) write(fmt::format("/g{}", i), Layout::kChunkBytesMin);  // one chain each
  ASSERT_TRUE(eventually([&] { return used_on(0) > before0 && used_on(1) > before1; }, 10s));
  cluster_.kill_storage(1);
  for (int i = 0; i < kFailing; ++i) ASSERT_TRUE(client_->remove_path(cred, fmt::format("/both/f{}", i)));
  for (int i = 0; i < kBehind; ++i) ASSERT_TRUE(client_->remove_path(cred, fmt::format("/g{}", i)));
  // Every chunk on server 0 goes: the failing files' halves (they fail on
  // their other chunk) and the later files' (never reached by passes that all
  // started at the front). Until mgmtd declares server 1 dead, a pass waits
  // out ChunkIo's retries (2 s) for its removals there; then none is sent.
  EXPECT_TRUE(eventually([&] { return used_on(0) <= before0; }, 60s))
      << "files behind the failing ones are collected while server 1 is dead\n" << meta_->log();
  ASSERT_TRUE(cluster_.start_storage(1)) << cluster_.all_logs();
  std::this_thread::sleep_for(1500ms);  // its heartbeats report what it holds
  EXPECT_TRUE(eventually([&] { return used_on(1) <= before1; }, 60s))
      << "the failing files are retried and go once it is back\n" << meta_->log();
}

// More files fail for good at the queue's front than 16 passes take (a round
// went back to the front after 16 passes, all of them failing): the file
// behind them is still reached. The queue is the test's own (the GC's hooks);
// the failing files name a chain table that does not exist (they fail at
// once, with no storage call), the last one is empty (done without one).
TEST_F(ChunkGcTest, MoreFailingFilesThanARoundTakesDoNotStarveTheRest) {
  TestQueue queue;
  constexpr meta::Ino kFailing = 16 * 64 + 100;
  for (meta::Ino ino = 100; ino < 100 + kFailing; ++ino) queue.items.push_back(failing_file(ino));
  const meta::Ino healthy = 100 + kFailing;
  queue.items.push_back(meta::GcItem{healthy, meta::Inode{.ino = healthy}});
  client::ChunkGc gc({rpc::Endpoint{"127.0.0.1", cluster_.mgmtd_port()}}, gc_rpc_options(), queue.hooks());
  for (int pass = 0; pass < 3 * 18 && queue.done.empty(); ++pass) {
    auto r = gc.collect_once();
    ASSERT_TRUE(r) << r.error();
  }
  EXPECT_EQ(queue.done, std::vector<meta::Ino>{healthy}) << "the file behind the failing ones was never reached";
  EXPECT_EQ(queue.items.size(), kFailing);
}

// Files meta may not collect yet (a reader may have them open: may_collect,
// meta/read_holds.h) are passed over like files in back-off, without a
// storage call, and collected by the first pass after they may go. The files
// are empty: done without a storage call either way.
TEST_F(ChunkGcTest, FilesThatMayNotGoYetArePassedOverUntilTheyMay) {
  TestQueue queue;
  for (meta::Ino ino = 100; ino < 104; ++ino) queue.items.push_back(meta::GcItem{ino, meta::Inode{.ino = ino}});
  std::set<meta::Ino> held{101, 103};
  client::ChunkGcHooks hooks = queue.hooks();
  std::vector<meta::Ino> asked;
  hooks.may_collect = [&](const meta::GcItem& item) {
    asked.push_back(item.ino);
    return !held.contains(item.ino);
  };
  client::ChunkGc gc({rpc::Endpoint{"127.0.0.1", cluster_.mgmtd_port()}}, gc_rpc_options(), std::move(hooks));
  auto r = gc.collect_once();
  ASSERT_TRUE(r) << r.error();
  EXPECT_EQ(asked, (std::vector<meta::Ino>{100, 101, 102, 103}));
  EXPECT_EQ(queue.done, (std::vector<meta::Ino>{100, 102}));
  EXPECT_EQ(r->taken, 4u);
  EXPECT_EQ(r->waiting, 2u);
  EXPECT_EQ(r->held, 2u);
  EXPECT_EQ(r->finished, 2u);
  EXPECT_TRUE(queue.queued(101) && queue.queued(103));
  held.erase(101);
  r = gc.collect_once();
  ASSERT_TRUE(r) << r.error();
  EXPECT_EQ(queue.done, (std::vector<meta::Ino>{100, 102, 101}));
  EXPECT_TRUE(queue.queued(103)) << "still held";
  held.clear();
  r = gc.collect_once();
  ASSERT_TRUE(r) << r.error();
  EXPECT_TRUE(queue.items.empty());
}

// The only target of a replicas-1 chain is down (mgmtd says so): a pass
// sends no removal to that chain and does not wait for it (a removal would
// retry for 2 s), the files on the other chain go. The file left waits in
// back-off (the clock never moves here) until the routing changes: it is
// tried, and collected, once the chain serves again.
TEST_F(ChunkGcTest, FilesOnAChainWithNoServingTargetFailAtOnceAndGoWhenItServes) {
  const ChainOf dead = chain_on(1), live = chain_on(0);
  ASSERT_NE(dead.index, UINT32_MAX);
  ASSERT_NE(live.index, UINT32_MAX);
  cluster_.kill_storage(1);
  ASSERT_TRUE(eventually([&] { return !serving(dead.id); }, 20s)) << "mgmtd declares server 1 dead";
  TestQueue queue;
  queue.items = {file_on(1'000'001, dead.index), file_on(1'000'002, live.index)};
  ManualClock clock;
  client::ChunkGc gc({rpc::Endpoint{"127.0.0.1", cluster_.mgmtd_port()}}, gc_rpc_options(), queue.hooks(),
                     {}, clock);
  auto start = std::chrono::steady_clock::now();
  auto r = gc.collect_once();
  auto took = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(r) << r.error();
  // A removal sent to that chain would retry for 2 s: 1.5 s leaves the pass
  // (routing from mgmtd, a removal on the live chain) more room on a loaded
  // machine than 1 s did, and still tells the two apart.
  EXPECT_LT(took, 1500ms) << "the pass waited for a chain with no serving target";
  EXPECT_EQ(queue.done, std::vector<meta::Ino>{1'000'002});
  EXPECT_TRUE(queue.queued(1'000'001));
  EXPECT_EQ(gc.files_in_backoff(), 1u);
  r = gc.collect_once();
  ASSERT_TRUE(r) << r.error();
  EXPECT_EQ(r->taken, 1u);
  EXPECT_EQ(r->waiting, 1u) << "the failed file waits for its next try";

  ASSERT_TRUE(cluster_.start_storage(1)) << cluster_.all_logs();
  ASSERT_TRUE(eventually([&] { return serving(dead.id); }, 20s)) << cluster_.all_logs();
  EXPECT_TRUE(eventually(
      [&] {
        EXPECT_TRUE(gc.collect_once().has_value());
        return !queue.queued(1'000'001);
      },
      20s))
      << "the file on the chain that serves again is collected before its back-off ends";
  EXPECT_EQ(gc.files_in_backoff(), 0u) << "a success forgets the file's back-off";
}

// A file that fails waits 1 s, then twice as long after each further failure,
// at most 4 s here (the options): passes look past it until then. Once meta
// no longer hands it out, its entry goes.
TEST_F(ChunkGcTest, AFailingFileWaitsItsBackOffDoublingUpToTheCap) {
  TestQueue queue;
  queue.items = {failing_file(100)};
  ManualClock clock;
  client::ChunkGc gc({rpc::Endpoint{"127.0.0.1", cluster_.mgmtd_port()}}, gc_rpc_options(), queue.hooks(),
                     {.backoff_first = 1s, .backoff_max = 4s}, clock);
  auto tried = [&] {
    auto r = gc.collect_once();
    EXPECT_TRUE(r.has_value()) << r.error();
    EXPECT_TRUE(r && r->taken == 1);
    return r && r->waiting == 0;
  };
  ASSERT_TRUE(tried());
  EXPECT_EQ(gc.files_in_backoff(), 1u);
  for (auto delay : {1000ms, 2000ms, 4000ms, 4000ms}) {
    EXPECT_FALSE(tried()) << "right after a failure";
    clock.advance(delay - 1ms);
    EXPECT_FALSE(tried()) << "1 ms before its next try, " << delay.count() << " ms after the failure";
    clock.advance(1ms);
    EXPECT_TRUE(tried()) << delay.count() << " ms after the failure";
  }
  EXPECT_EQ(gc.files_in_backoff(), 1u);
  EXPECT_TRUE(queue.done.empty());
  queue.items.clear();
  ASSERT_TRUE(gc.collect_once().has_value());
  EXPECT_EQ(gc.files_in_backoff(), 0u) << "the entry of a file meta no longer hands out is dropped";
}

// A pass that may not run (meta without a lease) asks nothing and keeps the
// files' back-off: it used to be told "nothing queued" and forget it, so a
// file failing for long was tried again at once after every lease gap.
TEST_F(ChunkGcTest, APassThatMayNotRunKeepsTheBackOff) {
  TestQueue queue;
  queue.items = {failing_file(100)};
  ManualClock clock;
  bool may = true;
  int asked = 0;
  client::ChunkGcHooks hooks = queue.hooks();
  auto pending = hooks.pending;
  hooks.pending = [&](size_t limit, std::optional<meta::Ino> after) {
    ++asked;
    return pending(limit, after);
  };
  hooks.may_run = [&] { return may; };
  client::ChunkGc gc({rpc::Endpoint{"127.0.0.1", cluster_.mgmtd_port()}}, gc_rpc_options(), hooks,
                     {.backoff_first = 4s, .backoff_max = 4s}, clock);
  ASSERT_TRUE(gc.collect_once().has_value());
  ASSERT_EQ(gc.files_in_backoff(), 1u);
  may = false;
  const int asked_before = asked;
  auto refused = gc.collect_once();
  ASSERT_TRUE(refused.has_value()) << refused.error();
  EXPECT_EQ(refused->taken, 0u);
  EXPECT_EQ(asked, asked_before) << "the queue was asked for";
  EXPECT_EQ(gc.files_in_backoff(), 1u) << "the back-off was dropped";
  may = true;
  auto again = gc.collect_once();
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->taken, 1u);
  EXPECT_EQ(again->waiting, 1u) << "tried again before its back-off ended";
}

// Files that stay queued are logged when one starts to fail, else at most
// once a minute: not at every try of the same files.
TEST_F(ChunkGcTest, FilesThatKeepFailingAreNotLoggedAtEveryTry) {
  TestQueue queue;
  queue.items = {failing_file(100)};
  ManualClock clock;
  client::ChunkGc gc({rpc::Endpoint{"127.0.0.1", cluster_.mgmtd_port()}}, gc_rpc_options(), queue.hooks(),
                     {.backoff_first = 1s, .backoff_max = 4s}, clock);
  LogCapture log;
  auto warnings = [&] { return log.count("files stay queued"); };
  ASSERT_TRUE(gc.collect_once().has_value());
  EXPECT_EQ(warnings(), 1u) << "the file started to fail";
  for (int i = 0; i < 14; ++i) {  // 14 tries, 4 s apart at most: under a minute
    clock.advance(4s);
    auto r = gc.collect_once();
    ASSERT_TRUE(r) << r.error();
    ASSERT_EQ(r->waiting, 0u) << "tried";
  }
  EXPECT_EQ(warnings(), 1u) << "the same file failing again within the minute";
  queue.items.push_back(failing_file(200));
  ASSERT_TRUE(gc.collect_once().has_value());
  EXPECT_EQ(warnings(), 2u) << "another file started to fail";
  clock.advance(60s);
  ASSERT_TRUE(gc.collect_once().has_value());
  EXPECT_EQ(warnings(), 3u) << "a minute later, the files still failing";
}

// Files in back-off cost a pass a look, not a try: with 2,000 of them at the
// queue's front (more than 16 passes of 64 take), a file queued behind them
// is reached within two passes (a pass looks at up to 1,024 files). The
// entries of files that leave the queue go when a pass looks over them.
TEST_F(ChunkGcTest, FilesInBackOffDoNotHoldUpTheFilesBehindThem) {
  TestQueue queue;
  constexpr meta::Ino kFailing = 2000;
  for (meta::Ino ino = 100; ino < 100 + kFailing; ++ino) queue.items.push_back(failing_file(ino));
  ManualClock clock;  // never moves: a file that failed stays in back-off
  client::ChunkGc gc({rpc::Endpoint{"127.0.0.1", cluster_.mgmtd_port()}}, gc_rpc_options(), queue.hooks(),
                     {}, clock);
  for (int pass = 0; pass < 64 && gc.files_in_backoff() < kFailing; ++pass) ASSERT_TRUE(gc.collect_once().has_value());
  ASSERT_EQ(gc.files_in_backoff(), kFailing) << "every failing file was tried once";
  const meta::Ino healthy = 100 + kFailing;
  queue.items.push_back(meta::GcItem{healthy, meta::Inode{.ino = healthy}});
  int passes = 0;
  for (; passes < 64 && queue.done.empty(); ++passes) ASSERT_TRUE(gc.collect_once().has_value());
  EXPECT_EQ(queue.done, std::vector<meta::Ino>{healthy});
  EXPECT_LE(passes, 2) << "passes spent on the files in back-off";
  EXPECT_EQ(gc.files_in_backoff(), kFailing);
  // Half of them leave the queue (meta no longer hands them out): one pass
  // round the queue drops their entries.
  std::erase_if(queue.items, [](const meta::GcItem& item) { return item.ino % 2 == 0; });
  auto r = gc.collect_once();
  ASSERT_TRUE(r) << r.error();
  EXPECT_TRUE(r->queue_end);
  EXPECT_EQ(r->waiting, kFailing / 2);
  EXPECT_EQ(gc.files_in_backoff(), kFailing / 2);
}

}  // namespace
}  // namespace weft::testing
