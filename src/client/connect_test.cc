// Client::connect and the client config's tcp_* keys: the connections
// libweft opens (here: to an in-process mgmtd) carry the file's keepalive
// and TCP_USER_TIMEOUT, read back from the sockets; a user timeout not above
// the call timeout is refused before any connection is made.
// Then a Client against an in-process mgmtd and meta whose only storage
// server never answers (DroppingStorage): calls that must fail without
// storage, or before reaching it.
#include <fcntl.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <future>
#include <thread>

#include "common/fault.h"
#include "common/temp_dir.h"
#include "client/in_process_meta.h"
#include "client/in_process_mgmtd.h"
#include "meta/session_reaper.h"
#include "rpc/test_sockets.h"
#include "weft/client.h"

namespace weft::client {
namespace {

constexpr char kToken[] = "connect-test";

// Enough for connect(), which fetches the routing and starts the lease (meta
// is listed in the config).
struct Mgmtd : InProcessMgmtd {
  Mgmtd() : InProcessMgmtd(kToken) {}
};

// `meta` empty: the file lists no meta server (the client asks mgmtd's routing).
std::string write_config(const testing::TempDir& dir, uint16_t mgmtd_port, const std::string& extra,
                         const std::string& meta = "127.0.0.1:1") {
  std::string path = dir.file("client.toml");
  std::string meta_line = meta.empty() ? std::string() : fmt::format("meta = [\"{}\"]\n", meta);
  std::ofstream(path) << fmt::format("mgmtd = [\"127.0.0.1:{}\"]\ncluster_token = \"{}\"\n{}{}", mgmtd_port, kToken,
                                     meta_line, extra);
  return path;
}

// A mgmtd that nothing has registered with yet is at routing version 0: the
// client's first fetch must still take its (empty) snapshot. It was answered
// "unchanged" (the client also starts at 0), and connect() then read the
// routing through a null pointer (a crash when the config lists no meta).
TEST(ClientConnect, AnEmptyClusterIsAClearErrorNotACrash) {
  Mgmtd mgmtd;
  testing::TempDir dir;
  ClientOptions o;
  o.config_path = write_config(dir, mgmtd.port, "", "");
  auto refused = Client::connect(o);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), Code::kUnavailable);
  EXPECT_NE(refused.error().message().find("no metadata server has registered with mgmtd"), std::string::npos)
      << refused.error();
}

// A client asks for at most ClientOptions::kIoThreadsMax I/O threads: more
// are refused before anything starts (100,000 aborted the process when the
// system refused a thread; 2^40 never returned).
TEST(ClientConnect, TooManyIoThreadsAreRefused) {
  Mgmtd mgmtd;
  testing::TempDir dir;
  ClientOptions o;
  o.config_path = write_config(dir, mgmtd.port, "");
  for (size_t n : {ClientOptions::kIoThreadsMax + 1, size_t{100000}, size_t{1} << 40}) {
    o.io_threads = n;
    auto refused = Client::connect(o);
    ASSERT_FALSE(refused) << n;
    EXPECT_EQ(refused.error().code(), Code::kInvalidArgument) << refused.error();
  }
}

// With local_socket = false the client reaches mgmtd (on this host) over
// TCP, not its Unix socket: that key is honoured too.
TEST(ClientConnect, ItsConnectionsTakeTheConfigsTcpLiveness) {
  Mgmtd mgmtd;
  testing::TempDir dir;
  ClientOptions o;
  o.config_path = write_config(dir, mgmtd.port,
                               "tcp_keepalive_idle_s = 11\ntcp_keepalive_interval_s = 2\ntcp_keepalive_count = 6\n"
                               "tcp_user_timeout_ms = 50000\nlocal_socket = false\n");
  auto client = Client::connect(o);
  ASSERT_TRUE(client) << client.error();
  // connect() fetched the routing and the lease started: mgmtd's peers in
  // this process are the client's sockets (mgmtd's own have its port as theirs).
  auto sockets = rpc::testing::tcp_fds(mgmtd.port, /*peer=*/true);
  ASSERT_FALSE(sockets.empty());
  const rpc::TcpLiveness want{
      .keepalive_idle_s = 11, .keepalive_interval_s = 2, .keepalive_count = 6, .user_timeout_ms = 50000};
  for (int fd : sockets) EXPECT_EQ(rpc::testing::liveness_of(fd), rpc::testing::SocketLiveness::of(want));
}

TEST(ClientConnect, UserTimeoutNotAboveTheCallTimeoutIsRefused) {
  testing::TempDir dir;
  ClientOptions o;
  o.config_path = write_config(dir, 1, "tcp_user_timeout_ms = 8000\n");
  o.call_timeout_ms = 8000;
  auto refused = Client::connect(o);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), Code::kConfig);
  EXPECT_NE(refused.error().message().find(o.config_path + ": key 'tcp_user_timeout_ms' (8000)"), std::string::npos)
      << refused.error();
}

// A call timeout of 0 expired every call at once (and broke a clamp's
// bounds): refused at connect.
TEST(ClientConnect, AZeroCallTimeoutIsRefused) {
  testing::TempDir dir;
  ClientOptions o;
  o.config_path = write_config(dir, 1, "");
  o.call_timeout_ms = 0;
  auto refused = Client::connect(o);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), Code::kInvalidArgument) << refused.error();
}

// A Client whose metadata is served (in-process meta) and whose one storage
// server drops every connection: data calls fail after the retry time.
class ClientWithoutStorage : public ::testing::Test {
 protected:
  static constexpr uint32_t kRetryMs = 1500;
  void SetUp() override {
    ASSERT_EQ(mgmtd.add_storage_and_table(storage.address()), 1u) << "meta's files use chain table 1";
    ClientOptions o;
    o.config_path = write_config(dir, mgmtd.port, "", meta.address());
    o.retry_time_ms_max = kRetryMs;
    o.call_timeout_ms = 1000;
    auto c = Client::connect(o);
    ASSERT_TRUE(c) << c.error();
    client = std::move(*c);
  }

  const Cred root = Cred::root();
  const Cred user{1000, 1000, {}};
  Mgmtd mgmtd;
  DroppingStorage storage;
  InProcessMeta meta{kToken};
  testing::TempDir dir;
  std::unique_ptr<Client> client;
};

// A caller's layout with chunk_bytes 0 (or another that meta would refuse)
// fails its op with kInvalidArgument; it divided by zero (SIGFPE) before.
TEST_F(ClientWithoutStorage, ReadsWithALayoutMetaWouldRefuseFailThatOp) {
  std::vector<std::byte> buf(3 * 4096);
  Layout good;
  good.chain_table_id = 1;
  Layout no_chunk = good;
  no_chunk.chunk_bytes = 0;
  Layout no_stripe = good;
  no_stripe.stripe_count = 0;
  Layout odd_chunk = good;
  odd_chunk.chunk_bytes = 100000;
  std::vector<ReadOp> ops{
      {.ino = 100, .offset = 0, .dst = std::span(buf).subspan(0, 4096), .layout = no_chunk, .file_size = 1 << 20},
      {.ino = 101, .offset = 0, .dst = std::span(buf).subspan(4096, 4096), .layout = no_stripe, .file_size = 1 << 20},
      {.ino = 102, .offset = 0, .dst = std::span(buf).subspan(8192, 4096), .layout = odd_chunk, .file_size = 1 << 20},
      {.ino = 103, .offset = 0, .dst = std::span(buf).subspan(8192, 4096), .layout = good, .file_size = 0},
  };
  auto results = client->read_batch(root, ops);
  ASSERT_EQ(results.size(), 4u);
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_FALSE(results[i].has_value()) << "op " << i;
    EXPECT_EQ(results[i].error().code(), Code::kInvalidArgument) << results[i].error();
  }
  ASSERT_TRUE(results[3].has_value()) << "the other ops of the batch are served: " << results[3].error();
  EXPECT_EQ(*results[3], 0u);
  auto submitted = client->submit_reads(root, std::vector<ReadOp>(ops.begin(), ops.begin() + 1)).get();
  ASSERT_EQ(submitted.size(), 1u);
  ASSERT_FALSE(submitted[0].has_value());
  EXPECT_EQ(submitted[0].error().code(), Code::kInvalidArgument);

  Inode bad;
  bad.ino = 104;
  bad.type = InodeType::kFile;
  bad.mode = 0644;
  bad.size = 1 << 20;
  bad.layout = no_chunk;
  auto opened = client->open_read_known(root, bad);
  ASSERT_FALSE(opened.has_value()) << "opened a file of chunk size 0";
  EXPECT_EQ(opened.error().code(), Code::kInvalidArgument) << opened.error();
  EXPECT_EQ(storage.accepted.load(), 0);
}

// A truncate that meta would refuse (the write session reaped, no write
// permission) is refused before any chunk is removed: storage is never
// asked, the length stays. (Before, the chunks past the new end went first.)
TEST_F(ClientWithoutStorage, ATruncateMetaWouldRefuseRemovesNothing) {
  auto d = client->mkdir(root, kRootIno, "d", 0777);
  ASSERT_TRUE(d) << d.error();
  auto created = client->create(user, d->ino, "f", 0644, O_RDWR | O_CREAT);
  ASSERT_TRUE(created) << created.error();
  auto& [inode, file] = *created;
  // 3 chunks long (an extension: meta only, no chunk to touch).
  SetAttr grow;
  grow.size = 3u << 20;
  ASSERT_TRUE(client->setattr(root, inode.ino, grow));
  SetAttr read_only;
  read_only.mode = 0444;
  ASSERT_TRUE(client->setattr(root, inode.ino, read_only));

  // Without a session: write permission, asked first (as before).
  SetAttr cut;
  cut.size = 1000;
  auto refused = client->setattr(user, inode.ino, cut);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code(), Code::kPermissionDenied) << refused.error();

  // Through the File, whose write session meta closed (its client lost its
  // lease, as far as the session reaper knows).
  auto reaped = meta::reap_sessions(*meta.store, [](uint64_t) { return false; }, INT64_MAX);
  ASSERT_TRUE(reaped) << reaped.error();
  ASSERT_EQ(reaped->closed, 1u);
  auto truncated = file->truncate(1000);
  ASSERT_FALSE(truncated.has_value()) << "meta took a length from a closed session without write permission";
  EXPECT_EQ(truncated.error().code(), Code::kBadHandle) << truncated.error();

  EXPECT_EQ(storage.accepted.load(), 0) << "a chunk was removed (or tried) for a truncate meta refuses";
  auto now = client->getattr(root, inode.ino);
  ASSERT_TRUE(now) << now.error();
  EXPECT_EQ(now->size, 3u << 20);
}

// A flush (or fsync) that waits for another thread's close returns what the
// close's flush returned: here the failure of writes that never land (it
// returned success, as if the bytes were acknowledged).
TEST_F(ClientWithoutStorage, AFlushThatWaitsForACloseGetsItsResult) {
  auto created = client->create(root, kRootIno, "f", 0644, O_RDWR | O_CREAT);
  ASSERT_TRUE(created) << created.error();
  std::shared_ptr<File> file = created->second;
  std::vector<std::byte> data(4096, std::byte{7});
  ASSERT_TRUE(file->pwrite(data, 0));  // buffered: its send fails after kRetryMs
  std::atomic<bool> closed{false};
  Result<void> close_result;
  std::thread closer([&] {
    close_result = file->close();
    closed = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the close is waiting for the send
  ASSERT_FALSE(closed.load()) << "the close did not wait for the writes";
  auto flushing = std::async(std::launch::async, [&] { return file->flush(); });
  auto synced = file->fsync();
  auto flushed = flushing.get();
  closer.join();
  ASSERT_FALSE(close_result.has_value());
  EXPECT_EQ(close_result.error().posix_errno(), EIO) << close_result.error();
  ASSERT_FALSE(flushed.has_value()) << "a flush waiting for a failed close reported success";
  EXPECT_EQ(flushed.error().code(), close_result.error().code()) << flushed.error();
  ASSERT_FALSE(synced.has_value()) << "an fsync waiting for a failed close reported success";
  EXPECT_EQ(synced.error().code(), close_result.error().code()) << synced.error();
  EXPECT_GT(storage.accepted.load(), 0);
}

// A write batch the system refuses a worker thread for fails each op with
// kOverloaded (it threw std::system_error out of submit_writes, or would
// wait for ever), and writes nothing.
TEST_F(ClientWithoutStorage, AWriteBatchWithoutAWorkerThreadFailsEachOp) {
  auto created = client->create(root, kRootIno, "f", 0644, O_RDWR | O_CREAT);
  ASSERT_TRUE(created) << created.error();
  std::shared_ptr<File> file = created->second;
  std::vector<std::byte> data(4096, std::byte{7});
  fault::Scope refused("client.batch_workers.thread_refused");
  auto out = client->submit_writes({WriteOp{file, 0, data}, WriteOp{file, 8192, data}});
  ASSERT_EQ(out.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  auto results = out.get();
  ASSERT_EQ(results.size(), 2u);
  for (const auto& r : results) {
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error().code(), Code::kOverloaded) << r.error();
  }
  EXPECT_EQ(storage.accepted.load(), 0);
}

}  // namespace
}  // namespace weft::client
