// libweft against a real local cluster started with `weft up` (3 storage
// servers x 2 targets, 2 replicas): data integrity across stripes, holes,
// truncate, concurrent writers, batches, POSIX errors, and reads/writes that
// carry on while a storage server is killed and restarted.
// WEFT_TEST_CLIENT_CONFIG=FILE runs against an existing cluster instead
// (then the kill test is skipped).
#include <fcntl.h>
#include <signal.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <random>
#include <thread>

#include "common/buffer.h"
#include "common/fault.h"
#include "process.h"
#include "rpc/test_util.h"
#include "weft/client.h"

namespace weft {
namespace {

using weft::testing::eventually;
using weft::testing::TempDir;
using namespace std::chrono_literals;

std::vector<std::byte> pattern(size_t n, uint64_t seed) {
  std::vector<std::byte> v(n);
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < n; i += 8) {
    uint64_t x = rng();
    for (size_t k = 0; k < 8 && i + k < n; ++k) v[i + k] = static_cast<std::byte>(x >> (8 * k));
  }
  return v;
}

int run(const std::string& cmd) { return std::system(cmd.c_str()); }

class ClientTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (const char* existing = std::getenv("WEFT_TEST_CLIENT_CONFIG")) {
      config_ = existing;
    } else {
      dir_ = new TempDir();
      data_ = dir_->path() + "/cluster";
      std::string cmd = fmt::format("{} up --data-dir {} --storage-servers 3 --targets-per-server 2 --replicas 2 > {}/up.log 2>&1",
                                    weft_bin(), data_, dir_->path());
      int rc = run(cmd);
      if (rc != 0) {
        std::ifstream in(dir_->path() + "/up.log");
        std::stringstream ss;
        ss << in.rdbuf();
        FAIL() << "weft up failed:\n" << ss.str();
      }
      config_ = data_ + "/client.toml";
    }
    ClientOptions o;
    o.config_path = config_;
    o.retry_time_ms_max = 30000;
    auto c = Client::connect(o);
    ASSERT_TRUE(c.has_value()) << c.error();
    client_ = c->release();
  }

  static void TearDownTestSuite() {
    delete client_;
    client_ = nullptr;
    if (dir_) {
      testing::stop_cluster(data_);
      delete dir_;
      dir_ = nullptr;
    }
  }

  static std::string weft_bin() { return weft::testing::weft_binary(); }

  // A fresh directory per test.
  std::string dir() {
    std::string d = "/" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "-" +
                    std::to_string(::getpid());
    auto r = client_->mkdirs(client_->default_cred(), d);
    EXPECT_TRUE(r.has_value()) << r.error();
    return d;
  }

  // A number from the /metrics page of the cluster's meta server (nullopt:
  // not this test's own cluster, or not found).
  static std::optional<double> meta_metric(const std::string& name) {
    if (!dir_) return std::nullopt;
    std::ifstream ports(data_ + "/run/meta.ports");
    uint16_t rpc_port = 0, metrics_port = 0;
    if (!(ports >> rpc_port >> metrics_port) || metrics_port == 0) return std::nullopt;
    const std::string text = rpc::testing::scrape_metrics(metrics_port);
    size_t at = text.find("\n" + name + " ");
    if (at == std::string::npos) return std::nullopt;
    return std::stod(text.substr(at + name.size() + 2));
  }

  // A batch read of `size` bytes of file `f` from `offset` into `dst`, with
  // its layout and length known from before (as a dataset has them): once
  // the chunk GC took a removed file's chunks it fails (kStaleHandle).
  static Result<size_t> read_known(const Inode& f, uint64_t size, uint64_t offset, std::span<std::byte> dst) {
    ReadOp op;
    op.ino = f.ino;
    op.offset = offset;
    op.dst = dst;
    op.layout = f.layout;
    op.file_size = size;
    return client_->read_batch(client_->default_cred(), std::span<const ReadOp>(&op, 1))[0];
  }

  // A second client of the same cluster (another process, as far as meta knows).
  static Result<std::unique_ptr<Client>> connect_another() {
    ClientOptions o;
    o.config_path = config_;
    return Client::connect(o);
  }

  // This client caches d/a and d/a/b (it writes d/a/b/f1); then `other`, a
  // client of its own, moves d/a to d/a.old and makes d/a/b anew.
  void move_cached_dir_away(const std::string& d, std::unique_ptr<Client>& other) {
    const Cred& cred = client_->default_cred();
    ASSERT_TRUE(client_->mkdirs(cred, d + "/a/b").has_value());
    ASSERT_TRUE(write_new(d + "/a/b/f1", pattern(10, 1)));
    auto connected = connect_another();
    ASSERT_TRUE(connected.has_value()) << connected.error();
    other = std::move(*connected);
    const Cred& ocred = other->default_cred();
    ASSERT_TRUE(other->rename_path(ocred, d + "/a", d + "/a.old").has_value());
    ASSERT_TRUE(other->mkdirs(ocred, d + "/a/b").has_value());
  }

  // Another client's writer of `path` (written here first: 1 MiB of
  // pattern(seed)) with [1 MiB, 3 MiB) of pattern(seed + 1) on storage and
  // its length report held on its way (`finish`, its fsync or close, runs on
  // a thread), while this client truncates the file to 512 KiB (`cutter`).
  // release() lets the report go and waits for `finish`.
  struct HeldReportCut {
    std::vector<std::byte> old;
    std::unique_ptr<Client> other;
    std::shared_ptr<File> writer, cutter;
    std::optional<fault::Scope> hold;
    std::thread finisher;
    void release() {
      hold.reset();
      if (finisher.joinable()) finisher.join();
    }
    ~HeldReportCut() { release(); }
  };
  void cut_beside_a_held_report(HeldReportCut& c, const std::string& path, uint64_t seed,
                                std::function<void(File&)> finish) {
    c.old = pattern(1 << 20, seed);
    ASSERT_TRUE(write_new(path, c.old));
    auto other = connect_another();
    ASSERT_TRUE(other.has_value()) << other.error();
    c.other = std::move(*other);
    auto w = c.other->open_path(c.other->default_cred(), path, O_WRONLY, 0644);
    ASSERT_TRUE(w.has_value()) << w.error();
    c.writer = *w;
    ASSERT_TRUE(c.writer->pwrite(pattern(2 << 20, seed + 1), 1 << 20).has_value());
    c.hold.emplace("client.report_length.hold");
    c.finisher = std::thread([&c, finish] { finish(*c.writer); });
    while (c.hold->triggered() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    // The writer's chunks are on storage, its report held: the cut removes them.
    c.cutter = open(path, O_RDWR);
    ASSERT_TRUE(c.cutter);
    ASSERT_TRUE(c.cutter->truncate(512 << 10).has_value());
  }

  std::shared_ptr<File> open(const std::string& path, int flags) {
    auto f = client_->open_path(client_->default_cred(), path, flags, 0644);
    EXPECT_TRUE(f.has_value()) << path << ": " << f.error();
    return f ? *f : nullptr;
  }

  // Creates `path` (it must not exist) holding `data` through `c`; true when every step worked.
  static bool write_new_with(Client& c, const std::string& path, std::span<const std::byte> data) {
    auto f = c.open_path(c.default_cred(), path, O_CREAT | O_WRONLY | O_EXCL, 0644);
    EXPECT_TRUE(f.has_value()) << path << ": " << f.error();
    if (!f) return false;
    auto n = (*f)->pwrite(data, 0);
    EXPECT_TRUE(n.has_value()) << path << ": " << n.error();
    auto closed = (*f)->close();
    EXPECT_TRUE(closed.has_value()) << path << ": " << closed.error();
    return n && closed;
  }
  bool write_new(const std::string& path, std::span<const std::byte> data) { return write_new_with(*client_, path, data); }

  // Files d/f0..f{n-1} of `bytes` bytes each (pattern(bytes, seed + i)), and
  // another client that opened d/f0 and d/f1 by path: two opens that asked
  // meta, so it has listed d (statahead's rule, which early reads share).
  struct ListedDir {
    std::vector<std::vector<std::byte>> data;
    std::unique_ptr<Client> client;
  };
  std::optional<ListedDir> listed_dir(const std::string& d, int n, size_t bytes, uint64_t seed) {
    ListedDir out;
    for (int i = 0; i < n; ++i) {
      out.data.push_back(pattern(bytes, seed + i));
      if (!write_new(fmt::format("{}/f{}", d, i), out.data.back())) return std::nullopt;
    }
    auto c = connect_another();
    EXPECT_TRUE(c.has_value()) << c.error();
    if (!c) return std::nullopt;
    out.client = std::move(*c);
    for (int i = 0; i < 2; ++i) {
      auto f = out.client->open_path(out.client->default_cred(), fmt::format("{}/f{}", d, i), O_RDONLY);
      EXPECT_TRUE(f.has_value()) << f.error();
      if (!f) return std::nullopt;
    }
    return out;
  }
  // Through `other`: empties d/sub, removes it and makes it again holding only y.
  static void remake_again(Client& other, const std::string& d, std::span<const std::byte> data) {
    auto list = other.list_path(other.default_cred(), d + "/sub");
    ASSERT_TRUE(list.has_value()) << list.error();
    for (const auto& e : *list)
      if (e.name != "." && e.name != "..") {
        ASSERT_TRUE(other.remove_path(other.default_cred(), d + "/sub/" + e.name).has_value());
      }
    ASSERT_TRUE(other.remove_path(other.default_cred(), d + "/sub").has_value());
    ASSERT_TRUE(other.mkdirs(other.default_cred(), d + "/sub").has_value());
    ASSERT_TRUE(write_new_with(other, d + "/sub/y", data));
  }

  void chmod(const std::string& path, uint32_t mode) {
    auto n = client_->resolve(client_->default_cred(), path);
    ASSERT_TRUE(n.has_value()) << n.error();
    SetAttr a;
    a.mode = mode;
    ASSERT_TRUE(client_->setattr(client_->default_cred(), n->ino, a).has_value());
  }

  std::vector<std::byte> read_all(const std::string& path) {
    auto f = open(path, O_RDONLY);
    if (!f) return {};
    std::vector<std::byte> out(f->size());
    auto n = f->pread(out, 0);
    EXPECT_TRUE(n.has_value()) << n.error();
    out.resize(n ? *n : 0);
    EXPECT_TRUE(f->close().has_value());
    return out;
  }

  // Sets the chunk size of directory `d` (new files take it).
  void set_chunk_bytes(const std::string& d, uint32_t bytes) {
    const Cred& cred = client_->default_cred();
    auto n = client_->resolve(cred, d);
    ASSERT_TRUE(n.has_value()) << n.error();
    auto layout = client_->get_layout(cred, n->ino);
    ASSERT_TRUE(layout.has_value()) << layout.error();
    layout->chunk_bytes = bytes;
    ASSERT_TRUE(client_->set_layout(cred, n->ino, *layout).has_value());
  }

  // Runs `op` on a thread of its own; false if it took longer than `bound`.
  // The cluster is then stopped (what `op` waits for fails, after the
  // client's retry time), so that a test fails rather than hangs.
  static bool ends_within(const std::function<void()>& op, std::chrono::seconds bound) {
    std::atomic<bool> done{false};
    std::thread t([&] {
      op();
      done = true;
    });
    const bool in_time = eventually([&] { return done.load(); }, bound);
    if (!in_time && dir_) run(fmt::format("{} down --data-dir {} > /dev/null 2>&1", weft_bin(), data_));
    t.join();
    return in_time;
  }

  // Whether [offset, offset + n) of the open file reads as zeros.
  static bool zeros_at(File& f, uint64_t offset, size_t n) {
    std::vector<std::byte> buf(n, std::byte{1});
    auto got = f.pread(buf, offset);
    EXPECT_TRUE(got.has_value()) << got.error();
    return got && *got == n && std::all_of(buf.begin(), buf.end(), [](std::byte b) { return b == std::byte{0}; });
  }

  static inline TempDir* dir_ = nullptr;
  static inline std::string data_;
  static inline std::string config_;
  static inline Client* client_ = nullptr;
};

TEST_F(ClientTest, LargeFileRoundTripAcrossStripesWithUnalignedWrites) {
  std::string d = dir();
  auto data = pattern(24 * 1024 * 1024 + 12345, 1);
  auto f = open(d + "/big", O_CREAT | O_WRONLY | O_TRUNC);
  ASSERT_TRUE(f);
  // Unaligned pieces of varying size, in order.
  std::mt19937 rng(7);
  size_t pos = 0;
  while (pos < data.size()) {
    size_t n = std::min<size_t>(data.size() - pos, 1 + rng() % (3 << 20));
    auto w = f->pwrite(std::span(data).subspan(pos, n), pos);
    ASSERT_TRUE(w.has_value()) << w.error();
    pos += n;
  }
  ASSERT_TRUE(f->fsync().has_value());
  ASSERT_TRUE(f->close().has_value());
  auto st = client_->resolve(client_->default_cred(), d + "/big");
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->size, data.size());
  EXPECT_EQ(read_all(d + "/big"), data);
  // Unaligned reads at random places.
  auto r = open(d + "/big", O_RDONLY);
  for (int i = 0; i < 50; ++i) {
    size_t off = rng() % data.size();
    size_t n = 1 + rng() % (2 << 20);
    std::vector<std::byte> buf(n);
    auto got = r->pread(buf, off);
    ASSERT_TRUE(got.has_value()) << got.error();
    size_t expect = std::min(n, data.size() - off);
    ASSERT_EQ(*got, expect);
    ASSERT_TRUE(std::equal(buf.begin(), buf.begin() + static_cast<long>(expect), data.begin() + static_cast<long>(off)));
  }
  std::vector<std::byte> past(10);
  EXPECT_EQ(*r->pread(past, data.size()), 0u);
}

TEST_F(ClientTest, HolesAndTruncateReadZeros) {
  std::string d = dir();
  auto f = open(d + "/sparse", O_CREAT | O_RDWR);
  ASSERT_TRUE(f);
  auto a = pattern(1000, 2);
  ASSERT_TRUE(f->pwrite(a, 5 * 1024 * 1024).has_value());  // hole before
  ASSERT_TRUE(f->flush().has_value());
  EXPECT_EQ(f->size(), 5u * 1024 * 1024 + 1000);
  std::vector<std::byte> buf(4096, std::byte{1});
  ASSERT_EQ(*f->pread(buf, 1024 * 1024), 4096u);
  EXPECT_TRUE(std::all_of(buf.begin(), buf.end(), [](std::byte b) { return b == std::byte{0}; }));
  // Shrink into the middle of the data, then grow: the cut bytes read as zeros.
  ASSERT_TRUE(f->truncate(5 * 1024 * 1024 + 100).has_value());
  ASSERT_TRUE(f->truncate(5 * 1024 * 1024 + 1000).has_value());
  std::vector<std::byte> tail(1000);
  ASSERT_EQ(*f->pread(tail, 5 * 1024 * 1024), 1000u);
  EXPECT_TRUE(std::equal(tail.begin(), tail.begin() + 100, a.begin()));
  EXPECT_TRUE(std::all_of(tail.begin() + 100, tail.end(), [](std::byte b) { return b == std::byte{0}; }));
  ASSERT_TRUE(f->close().has_value());
  // setattr(size) through the namespace call behaves the same.
  auto n = client_->resolve(client_->default_cred(), d + "/sparse");
  SetAttr attr;
  attr.size = 10;
  auto t = client_->setattr(client_->default_cred(), n->ino, attr);
  ASSERT_TRUE(t.has_value()) << t.error();
  EXPECT_EQ(t->size, 10u);
  EXPECT_EQ(read_all(d + "/sparse").size(), 10u);
}

// A 16 TiB sparse file of 64 KiB chunks (2^28 chunk indexes, three chunks
// written) truncated to 150 KiB: its chunks go, at the cost of the chunks
// there are (a removal per index took hours), the partial chunk at the new
// end is cut, and a later extension reads zeros where data was.
TEST_F(ClientTest, TruncateOfAHugeSparseFileCostsItsChunksNotItsLength) {
  std::string d = dir();
  set_chunk_bytes(d, Layout::kChunkBytesMin);
  auto f = open(d + "/huge", O_CREAT | O_RDWR);
  ASSERT_TRUE(f);
  const uint64_t kEnd = uint64_t{16} << 40;
  auto head = pattern(200 << 10, 31);
  ASSERT_TRUE(f->pwrite(head, 0).has_value());
  ASSERT_TRUE(f->pwrite(pattern(1000, 32), uint64_t{1} << 40).has_value());
  ASSERT_TRUE(f->pwrite(pattern(3000, 33), kEnd - 3000).has_value());
  ASSERT_TRUE(f->flush().has_value());
  ASSERT_EQ(f->size(), kEnd);
  const uint64_t kCut = 150 << 10;
  ASSERT_TRUE(ends_within([&] {
    auto t = f->truncate(kCut);
    EXPECT_TRUE(t.has_value()) << t.error();
  }, std::chrono::seconds(60))) << "the truncate costs the file's length";
  EXPECT_EQ(f->size(), kCut);
  ASSERT_TRUE(f->truncate(kEnd).has_value());  // an extension: zeros past the cut
  std::vector<std::byte> back(200 << 10);
  ASSERT_EQ(*f->pread(back, 0), back.size());
  EXPECT_TRUE(std::equal(back.begin(), back.begin() + kCut, head.begin()));
  EXPECT_TRUE(std::all_of(back.begin() + kCut, back.end(), [](std::byte b) { return b == std::byte{0}; }))
      << "the partial chunk at the cut was not cut";
  EXPECT_TRUE(zeros_at(*f, uint64_t{1} << 40, 1000));
  EXPECT_TRUE(zeros_at(*f, kEnd - 3000, 3000));
  ASSERT_TRUE(f->close().has_value());
}

// A truncate racing a writer (another client writes past the new end and
// reports after the truncate's cut, before meta records the truncate's
// length): the outcome is as if one came after the other, never the
// truncate's length with the writer's chunk left past it (a later extension
// showed the writer's bytes there). Past the old end (the writer makes the
// file longer) and inside it (the length stays, the report moves ctime).
TEST_F(ClientTest, ATruncateRacingAWriterLeavesNoBytesPastTheEnd) {
  std::string d = dir();
  for (const uint64_t at : {uint64_t{6} << 20, (uint64_t{2} << 20) + 100}) {
    const std::string path = d + "/raced-" + std::to_string(at);
    ASSERT_TRUE(write_new(path, pattern(3 << 20, 51)));
    auto f = open(path, O_RDWR);
    ASSERT_TRUE(f);
    auto other = connect_another();
    ASSERT_TRUE(other.has_value()) << other.error();
    auto w = (*other)->open_path((*other)->default_cred(), path, O_WRONLY, 0644);
    ASSERT_TRUE(w.has_value()) << w.error();
    std::optional<fault::Scope> hold(std::in_place, "client.truncate.hold");
    std::thread cutter([&] {
      auto t = f->truncate(1000);
      EXPECT_TRUE(t.has_value()) << t.error();
    });
    while (hold->triggered() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    // The cut is made; the writer lands past it and tells meta.
    ASSERT_TRUE((*w)->pwrite(pattern(4096, 52), at).has_value());
    ASSERT_TRUE((*w)->fsync().has_value());
    hold.reset();
    cutter.join();
    ASSERT_TRUE((*w)->close().has_value());
    auto n = client_->resolve(client_->default_cred(), path);
    ASSERT_TRUE(n.has_value()) << n.error();
    ASSERT_TRUE(f->refresh_size().has_value());
    if (n->size != 1000) {
      EXPECT_GE(n->size, at + 4096) << "the write came after the truncate";
    } else {  // the truncate came after the write
      ASSERT_TRUE(f->truncate(at + 4096).has_value());
      EXPECT_TRUE(zeros_at(*f, at, 4096)) << "the writer's bytes at " << at << " stayed past the truncate's end";
    }
    ASSERT_TRUE(f->close().has_value());
  }
}

// A truncate of an inode no File of this client has open, and a File of the
// same client opened during it (meta does not cap a client's own reports for
// its truncate: the client orders them). Without order: the File's chunk
// lands before the truncate's removal, its length report after the
// truncate's length, and the file ends 4 KiB of zeros with the write's fsync
// answered. The File's write waits for the truncate instead, as a File open
// before it would.
TEST_F(ClientTest, AFileOpenedDuringATruncateWithNoFileOpenWritesAfterIt) {
  using namespace std::chrono_literals;
  const std::string path = dir() + "/cut-unopened";
  ASSERT_TRUE(write_new(path, pattern(3 << 20, 61)));
  auto n = client_->resolve(client_->default_cred(), path);
  ASSERT_TRUE(n.has_value()) << n.error();
  std::optional<fault::Scope> before_cut(std::in_place, "client.truncate.before_cut.hold");
  std::optional<fault::Scope> report(std::in_place, "client.report_length.hold");
  std::thread cutter([&] {
    SetAttr attr;
    attr.size = 0;
    auto t = client_->setattr(client_->default_cred(), n->ino, attr);
    EXPECT_TRUE(t.has_value()) << t.error();
  });
  while (before_cut->triggered() == 0) std::this_thread::sleep_for(1ms);
  std::atomic<bool> synced{false};
  std::thread writer([&] {
    auto w = open(path, O_WRONLY);
    ASSERT_TRUE(w);
    auto wrote = w->pwrite(pattern(4096, 62), 0);
    EXPECT_TRUE(wrote.has_value()) << wrote.error();
    auto s = w->fsync();
    EXPECT_TRUE(s.has_value()) << s.error();
    synced = true;
    EXPECT_TRUE(w->close().has_value());
  });
  auto late = open(path, O_RDONLY);  // meta answers with the old length
  ASSERT_TRUE(late);
  // Unordered, the chunk is on storage and its report held within this time.
  for (int i = 0; i < 300 && report->triggered() == 0; ++i) std::this_thread::sleep_for(1ms);
  EXPECT_EQ(report->triggered(), 0) << "the write went on beside the truncate";
  before_cut.reset();
  cutter.join();  // the removal, then meta's length 0
  EXPECT_EQ(late->size(), 0u) << "a File opened during the truncate learns its length";
  report.reset();
  writer.join();
  EXPECT_TRUE(synced.load());
  auto f = open(path, O_RDWR);
  ASSERT_TRUE(f);
  ASSERT_TRUE(f->refresh_size().has_value());
  if (f->size() == 0) {  // the truncate came last: nothing of the write may be left
    ASSERT_TRUE(f->truncate(4096).has_value());
    EXPECT_TRUE(zeros_at(*f, 0, 4096)) << "the write's bytes stayed past the truncate's end";
  } else {
    EXPECT_EQ(f->size(), 4096u);
    std::vector<std::byte> got(4096);
    auto r = f->pread(got, 0);
    ASSERT_TRUE(r.has_value()) << r.error();
    EXPECT_TRUE(got == pattern(4096, 62)) << "the write's fsync was answered, its bytes are gone";
  }
  ASSERT_TRUE(f->close().has_value());
}

// Another client's writes that reached storage before this client's
// truncate, their length report still on its way: the truncate removed them,
// so the report must not raise the length over the range as zeros (neither
// order of the write and the truncate gives that). The report (a flush's, or
// close's) finds the cut and reports what storage still holds: nothing.
TEST_F(ClientTest, AReportOfWritesAnotherClientsTruncateRemovedBringsNoZerosBack) {
  const std::string d = dir();
  for (const bool by_close : {false, true}) {
    const std::string path = d + (by_close ? "/cut-before-close" : "/cut-before-fsync");
    HeldReportCut c;
    ASSERT_NO_FATAL_FAILURE(cut_beside_a_held_report(c, path, 70, [by_close](File& w) {
      auto r = by_close ? w.close() : w.fsync();
      EXPECT_TRUE(r.has_value()) << r.error();
    }));
    c.release();
    const auto& old = c.old;
    auto& f = c.cutter;
    auto& w = c.writer;
    auto n = client_->getattr(client_->default_cred(), f->ino());
    ASSERT_TRUE(n.has_value()) << n.error();
    EXPECT_EQ(n->size, 512u << 10) << "the writer's report brought the removed range back as zeros";
    if (!by_close) {
      EXPECT_EQ(w->size(), 512u << 10) << "the writer kept the length of what the truncate removed";
    }
    std::vector<std::byte> back(4 << 20);
    ASSERT_TRUE(f->refresh_size().has_value());
    auto got = f->pread(back, 0);
    ASSERT_TRUE(got.has_value()) << got.error();
    ASSERT_EQ(*got, 512u << 10);
    EXPECT_EQ(0, std::memcmp(back.data(), old.data(), *got));
    if (!by_close) {
      ASSERT_TRUE(w->close().has_value());
      n = client_->getattr(client_->default_cred(), f->ino());
      ASSERT_TRUE(n.has_value()) << n.error();
      EXPECT_EQ(n->size, 512u << 10) << "the writer's close brought the removed range back";
    }
    ASSERT_TRUE(f->close().has_value());
  }
}

// The same with a second write through the writer's File while its report
// is held: the answer to the cut does not cover that write's report, which
// would carry the removed writes' end too (the File's ends were not
// lowered), so that report looks at storage as well.
TEST_F(ClientTest, AWriteBesideTheReportThatAnswersACutBringsNoZerosBack) {
  HeldReportCut c;
  ASSERT_NO_FATAL_FAILURE(cut_beside_a_held_report(c, dir() + "/cut-beside-a-write", 74, [](File& w) {
    auto r = w.fsync();
    EXPECT_TRUE(r.has_value()) << r.error();
  }));
  const auto& old = c.old;
  auto& f = c.cutter;
  auto& w = c.writer;
  const auto line = pattern(4096, 76);
  ASSERT_TRUE(w->pwrite(line, 0).has_value());  // while the held report is on its way
  c.release();
  ASSERT_TRUE(w->fsync().has_value());
  auto n = client_->getattr(client_->default_cred(), f->ino());
  ASSERT_TRUE(n.has_value()) << n.error();
  EXPECT_EQ(n->size, 512u << 10) << "the second report brought the removed range back as zeros";
  EXPECT_EQ(w->size(), 512u << 10);
  ASSERT_TRUE(w->close().has_value());
  ASSERT_TRUE(f->refresh_size().has_value());
  std::vector<std::byte> back(1 << 20);
  ASSERT_EQ(f->pread(back, 0).value_or(0), 512u << 10);
  EXPECT_EQ(0, std::memcmp(back.data(), line.data(), line.size()));
  EXPECT_EQ(0, std::memcmp(back.data() + line.size(), old.data() + line.size(), (512 << 10) - line.size()));
  ASSERT_TRUE(f->close().has_value());
}

// The reply to a report that answered a cut is lost: meta took the answer
// and caps no more, so the File's next report of the same writes must look
// at storage itself, not raise the length over the removed range.
TEST_F(ClientTest, AnAnswerToACutWhoseReplyIsLostStillBringsNoZerosBack) {
  fault::Scope lost("client.report_length.answer_lost", fault::Spec{.hits_max = 1});
  HeldReportCut c;
  ASSERT_NO_FATAL_FAILURE(cut_beside_a_held_report(c, dir() + "/answer-lost", 81, [](File& w) {
    EXPECT_FALSE(w.fsync().has_value()) << "the reply was lost";
  }));
  c.release();
  auto& f = c.cutter;
  auto& w = c.writer;
  ASSERT_EQ(lost.triggered(), 1);
  ASSERT_TRUE(w->fsync().has_value());  // the same writes, reported again
  auto n = client_->getattr(client_->default_cred(), f->ino());
  ASSERT_TRUE(n.has_value()) << n.error();
  EXPECT_EQ(n->size, 512u << 10) << "the report after the lost answer brought the removed range back";
  ASSERT_TRUE(w->close().has_value());
  ASSERT_TRUE(f->close().has_value());
}

// A File that learns another client's truncate (a read past the end it knows
// asks meta) while it has a write not reported yet: the write still counts, and
// its report (through fsync) gives it its length.
TEST_F(ClientTest, LearningAnotherClientsTruncateKeepsWritesNotReportedYet) {
  const std::string path = dir() + "/learns-the-cut";
  auto w = open(path, O_CREAT | O_RDWR);
  ASSERT_TRUE(w);
  ASSERT_TRUE(w->pwrite(pattern(1 << 20, 79), 0).has_value());
  ASSERT_TRUE(w->fsync().has_value());
  auto other = connect_another();
  ASSERT_TRUE(other.has_value()) << other.error();
  auto t = (*other)->open_path((*other)->default_cred(), path, O_WRONLY, 0644);
  ASSERT_TRUE(t.has_value()) << t.error();
  ASSERT_TRUE((*t)->truncate(100).has_value());
  ASSERT_TRUE((*t)->close().has_value());
  const auto line = pattern(100, 80);
  ASSERT_TRUE(w->pwrite(line, 500).has_value());
  std::vector<std::byte> buf(4096);
  ASSERT_TRUE(w->pread(buf, 1 << 20).has_value());  // past the end it knows: asks meta
  ASSERT_TRUE(w->fsync().has_value());
  auto n = client_->getattr(client_->default_cred(), w->ino());
  ASSERT_TRUE(n.has_value()) << n.error();
  EXPECT_EQ(n->size, 600u) << "the write not reported when the File learned the truncate lost its length";
  ASSERT_EQ(w->pread(buf, 0).value_or(0), 600u);
  EXPECT_EQ(0, std::memcmp(buf.data() + 500, line.data(), line.size()));
  ASSERT_TRUE(w->close().has_value());
}

// An extension (fallocate) through a session another client's truncate
// marked, with every write of the File reported: it is made after the
// truncate, so it stands whole.
TEST_F(ClientTest, AnExtensionAfterAnotherClientsTruncateStands) {
  const std::string path = dir() + "/extended-after-cut";
  ASSERT_TRUE(write_new(path, pattern(1 << 20, 77)));
  auto other = connect_another();
  ASSERT_TRUE(other.has_value()) << other.error();
  auto w = (*other)->open_path((*other)->default_cred(), path, O_WRONLY, 0644);
  ASSERT_TRUE(w.has_value()) << w.error();
  ASSERT_TRUE((*w)->pwrite(pattern(4096, 78), 0).has_value());
  ASSERT_TRUE((*w)->fsync().has_value());
  auto f = open(path, O_RDWR);
  ASSERT_TRUE(f);
  ASSERT_TRUE(f->truncate(512 << 10).has_value());
  ASSERT_TRUE((*w)->extend(3 << 20).has_value());
  auto n = client_->getattr(client_->default_cred(), f->ino());
  ASSERT_TRUE(n.has_value()) << n.error();
  EXPECT_EQ(n->size, 3u << 20);
  ASSERT_TRUE(f->refresh_size().has_value());
  EXPECT_TRUE(zeros_at(*f, 512 << 10, (3 << 20) - (512 << 10)));
  ASSERT_TRUE((*w)->close().has_value());
  ASSERT_TRUE(f->close().has_value());
}

// A writer whose session saw another client's truncate, writing after it:
// its report past the cut is capped, it finds its bytes on storage and
// reports their end; the bytes and the length stand.
TEST_F(ClientTest, WritesAfterAnotherClientsTruncateStandWithTheirLength) {
  const std::string path = dir() + "/written-after-cut";
  ASSERT_TRUE(write_new(path, pattern(1 << 20, 72)));
  auto other = connect_another();
  ASSERT_TRUE(other.has_value()) << other.error();
  auto w = (*other)->open_path((*other)->default_cred(), path, O_WRONLY, 0644);
  ASSERT_TRUE(w.has_value()) << w.error();
  auto f = open(path, O_RDWR);
  ASSERT_TRUE(f);
  ASSERT_TRUE(f->truncate(512 << 10).has_value());  // marks the writer's session
  const auto line = pattern(4096, 73);
  const uint64_t at = (2 << 20) + 100;
  ASSERT_TRUE((*w)->pwrite(line, at).has_value());
  ASSERT_TRUE((*w)->fsync().has_value());
  auto n = client_->getattr(client_->default_cred(), f->ino());
  ASSERT_TRUE(n.has_value()) << n.error();
  EXPECT_EQ(n->size, at + line.size()) << "a write after the truncate lost its length";
  EXPECT_EQ((*w)->size(), at + line.size());
  ASSERT_TRUE(f->refresh_size().has_value());
  std::vector<std::byte> back(line.size());
  ASSERT_EQ(f->pread(back, at).value_or(0), line.size());
  EXPECT_EQ(back, line);
  EXPECT_TRUE(zeros_at(*f, 512 << 10, at - (512 << 10)));

  // Answered: the next writes report whole, through close.
  ASSERT_TRUE((*w)->pwrite(line, 3 << 20).has_value());
  ASSERT_TRUE((*w)->close().has_value());
  n = client_->getattr(client_->default_cred(), f->ino());
  ASSERT_TRUE(n.has_value()) << n.error();
  EXPECT_EQ(n->size, (3u << 20) + line.size());
  ASSERT_TRUE(f->close().has_value());
}

// A length report on its way to meta while another thread of this client
// truncates the file: it reports writes made before the cut, and meta keeps
// the max of reports, so landing after the cut it would bring their end
// back over the removed chunks (zeros past the cut). The cut waits for it.
TEST_F(ClientTest, ALengthReportOnItsWayDoesNotUndoATruncateHere) {
  const std::string path = dir() + "/reported";
  ASSERT_TRUE(write_new(path, pattern(1 << 20, 60)));
  auto f = open(path, O_RDWR);
  ASSERT_TRUE(f);
  // Inside the length: the truncate's own flush owes meta no report for it.
  ASSERT_TRUE(f->pwrite(pattern(500 << 10, 61), 0).has_value());
  std::optional<fault::Scope> hold(std::in_place, "client.report_length.hold");
  std::thread syncer([&] { EXPECT_TRUE(f->fsync().has_value()); });
  while (hold->triggered() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::thread cutter([&] { EXPECT_TRUE(f->truncate(1000).has_value()); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the cut, unless it waits for the report
  hold.reset();
  syncer.join();
  cutter.join();
  auto other = connect_another();
  ASSERT_TRUE(other.has_value()) << other.error();
  auto n = (*other)->getattr((*other)->default_cred(), f->ino());
  ASSERT_TRUE(n.has_value()) << n.error();
  EXPECT_EQ(n->size, 1000u) << "the report of writes before the cut landed after it";
  ASSERT_TRUE(f->close().has_value());
  n = (*other)->getattr((*other)->default_cred(), f->ino());
  ASSERT_TRUE(n.has_value()) << n.error();
  EXPECT_EQ(n->size, 1000u);
}

// A writer that died after its chunks reached storage but before meta heard
// its length (meta knows the file as empty): an O_TRUNC open removes those
// chunks too, so the old bytes never show in holes of the new content. Also
// when the open is a create (O_CREAT) that finds the file there.
TEST_F(ClientTest, OTruncRemovesTheChunksPastTheLengthMetaKnows) {
  std::string d = dir();
  const uint64_t kAt = 5 << 20;
  auto old = pattern(300 << 10, 41);
  for (int flags : {O_RDWR | O_TRUNC, O_CREAT | O_WRONLY | O_TRUNC}) {
    SCOPED_TRACE(flags & O_CREAT ? "create" : "open");
    const std::string path = d + (flags & O_CREAT ? "/crashed-create" : "/crashed-open");
    {
      auto other = connect_another();
      ASSERT_TRUE(other.has_value()) << other.error();
      fault::Scope lost("client.report_length.lost");
      fault::Scope close_lost("client.close.lost");  // it dies: meta's reaper would count what it wrote
      auto w = (*other)->open_path((*other)->default_cred(), path, O_CREAT | O_WRONLY | O_EXCL, 0644);
      ASSERT_TRUE(w.has_value()) << w.error();
      ASSERT_TRUE((*w)->pwrite(old, kAt).has_value());
      ASSERT_TRUE((*w)->pwrite(old, 0).has_value());  // in the chunk the new content goes to, past its end
      auto flushed = (*w)->flush();  // the chunks reach storage, the length never meta
      ASSERT_FALSE(flushed.has_value());
      (void)(*w)->close();
      ASSERT_GT(lost.triggered(), 0);
    }
    auto n = client_->resolve(client_->default_cred(), path);
    ASSERT_TRUE(n.has_value()) << n.error();
    ASSERT_EQ(n->size, 0u) << "meta never heard the writer's length";
    auto f = client_->open_path(client_->default_cred(), path, flags, 0644);
    ASSERT_TRUE(f.has_value()) << f.error();
    ASSERT_TRUE((*f)->pwrite(pattern(10, 42), 0).has_value());
    ASSERT_TRUE((*f)->truncate(kAt + old.size()).has_value());  // an extension over where the old bytes were
    ASSERT_TRUE((*f)->flush().has_value());
    auto r = open(path, O_RDONLY);
    ASSERT_TRUE(r);
    EXPECT_TRUE(zeros_at(*r, 10, old.size() - 10)) << "the dead writer's bytes came back after the new content";
    EXPECT_TRUE(zeros_at(*r, kAt, old.size())) << "the dead writer's bytes came back";
    ASSERT_TRUE(r->close().has_value());
    ASSERT_TRUE((*f)->close().has_value());
  }
}

// A writer's close reports its length and ends its session in one call to
// meta (close_with_length); against a meta without that call (kUnknownMethod)
// it reports, then closes, as before. Either way the length is meta's when
// close returns.
TEST_F(ClientTest, AWriterClosesWithOneCallToMetaOrTwoToAnOldMeta) {
  if (dir_ == nullptr) GTEST_SKIP() << "needs the cluster this test starts (its meta's /metrics)";
  std::string d = dir();
  const Cred& cred = client_->default_cred();
  auto ops = [](const char* op) {
    return meta_metric(std::string("weft_meta_ops_total{op=\"") + op + "\"}").value_or(0);
  };
  auto write_and_close = [&](Client& c, const std::string& path, uint64_t bytes) {
    auto f = c.open_path(cred, path, O_CREAT | O_WRONLY | O_EXCL, 0644);
    ASSERT_TRUE(f.has_value()) << f.error();
    ASSERT_TRUE((*f)->pwrite(pattern(bytes, 7), 0).has_value());
    ASSERT_TRUE((*f)->close().has_value());
    auto n = client_->resolve(cred, path);
    ASSERT_TRUE(n.has_value()) << n.error();
    EXPECT_EQ(n->size, bytes) << path;
  };
  const double reports = ops("report_length"), closes = ops("close"), merged = ops("close_with_length");
  write_and_close(*client_, d + "/new", 300 << 10);
  EXPECT_EQ(ops("close_with_length"), merged + 1);
  EXPECT_EQ(ops("report_length"), reports);
  EXPECT_EQ(ops("close"), closes);

  auto old = connect_another();  // its fallback is remembered client-wide
  ASSERT_TRUE(old.has_value()) << old.error();
  {
    fault::Scope unknown("client.meta_without_close_with_length");
    write_and_close(**old, d + "/to-an-old-meta", 200 << 10);
    EXPECT_EQ(unknown.triggered(), 1);
  }
  EXPECT_EQ(ops("report_length"), reports + 1);
  EXPECT_EQ(ops("close"), closes + 1);
  write_and_close(**old, d + "/again", 100 << 10);  // no second try of the new call
  EXPECT_EQ(ops("close_with_length"), merged + 1);
  EXPECT_EQ(ops("report_length"), reports + 2);
}

// A close whose end of session never reached meta (meta out of reach past
// the meta client's retries) fails, and the session is ended later by the
// client's own retry: else meta kept it open as long as this client holds
// its lease, and with it a file unlinked while open for writing.
TEST_F(ClientTest, AnEndOfSessionThatDidNotReachMetaIsSentAgain) {
  if (dir_ == nullptr) GTEST_SKIP() << "needs the cluster this test starts (its meta's /metrics)";
  auto count = [](const char* name) {
    return meta_metric(std::string(name) + "{op=\"close\"}").value_or(0);
  };
  const std::string path = dir() + "/unlinked-while-open";
  auto f = open(path, O_CREAT | O_WRONLY | O_EXCL);
  ASSERT_TRUE(f);
  ASSERT_TRUE(client_->unlink_path(client_->default_cred(), path).has_value());
  const double closes = count("weft_meta_ops_total"), refused = count("weft_meta_op_errors_total");
  {
    fault::Scope away("client.session_close.fail", {.hits_max = 1});
    auto closed = f->close();
    ASSERT_FALSE(closed.has_value()) << "the end of the session did not reach meta";
    EXPECT_EQ(closed.error().code(), Code::kUnavailable);
    EXPECT_EQ(away.triggered(), 1);
  }
  EXPECT_EQ(count("weft_meta_ops_total"), closes) << "meta heard the close the fault kept away";
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (count("weft_meta_ops_total") == closes && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(count("weft_meta_ops_total"), closes + 1) << "the session was never ended";
  EXPECT_EQ(count("weft_meta_op_errors_total"), refused) << "meta refused the retried close";
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_EQ(count("weft_meta_ops_total"), closes + 1) << "sent again after it landed";
}

// A flush and a close of one File on two threads: both owe meta the same
// length; when the close's close_with_length ends the session first, the
// flush's report finds no session, and the close's report stands for it.
TEST_F(ClientTest, AFlushBesideACloseOfTheSameFileSucceeds) {
  std::string d = dir();
  for (int i = 0; i < 40; ++i) {
    const std::string path = d + "/f" + std::to_string(i);
    auto f = open(path, O_CREAT | O_WRONLY | O_EXCL);
    ASSERT_TRUE(f);
    const uint64_t bytes = 4096 * static_cast<uint64_t>(i + 1);
    ASSERT_TRUE(f->pwrite(pattern(bytes, 3), 0).has_value());
    std::atomic<bool> started{false};
    Result<void> flushed;
    std::thread flusher([&] {
      started.store(true);
      flushed = f->flush();
    });
    // The close comes while the flush waits for its chunk's ack (most rounds).
    while (!started.load()) {
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50 * (i % 10)));
    auto closed = f->close();
    flusher.join();
    EXPECT_TRUE(closed.has_value()) << closed.error();
    // Refused only as a call on a closed File (it came after the close):
    // never for the session the close ended under it.
    if (!flushed) {
      EXPECT_EQ(flushed.error().message().find("report the length"), std::string::npos) << i << ": " << flushed.error();
    }
    auto n = client_->resolve(client_->default_cred(), path);
    ASSERT_TRUE(n.has_value()) << n.error();
    EXPECT_EQ(n->size, bytes);
  }
}

// Two Files of one file in one client, overlapping writes: the later write's
// bytes stay, whichever File sends first (each buffers on its own: without
// ordering, the older File's close would put its older bytes back).
TEST_F(ClientTest, TheLaterOfTwoOverlappingWritesThroughTwoFilesWins) {
  std::string d = dir();
  auto older = open(d + "/f", O_CREAT | O_RDWR);
  ASSERT_TRUE(older);
  auto newer = open(d + "/f", O_RDWR);
  ASSERT_TRUE(newer);
  auto first = pattern(8192, 1), second = pattern(8192, 2);
  ASSERT_TRUE(older->pwrite(first, 0).has_value());
  ASSERT_TRUE(newer->pwrite(second, 4096).has_value());  // over the older's second half
  ASSERT_TRUE(newer->close().has_value());
  ASSERT_TRUE(older->close().has_value());  // its buffer, if still held, would land last
  auto f = open(d + "/f", O_RDONLY);
  ASSERT_TRUE(f);
  std::vector<std::byte> got(12288);
  auto n = f->pread(got, 0);
  ASSERT_TRUE(n.has_value()) << n.error();
  ASSERT_EQ(*n, got.size());
  EXPECT_TRUE(std::equal(first.begin(), first.begin() + 4096, got.begin()));
  EXPECT_TRUE(std::equal(second.begin(), second.end(), got.begin() + 4096)) << "the older write's bytes came back";
  ASSERT_TRUE(f->close().has_value());
}

TEST_F(ClientTest, WritersOnDisjointRangesOfOneChunkKeepEachOthersBytes) {
  std::string d = dir();
  auto f0 = open(d + "/shared", O_CREAT | O_WRONLY);
  ASSERT_TRUE(f0);
  auto f1 = open(d + "/shared", O_WRONLY);
  ASSERT_TRUE(f1);
  auto data = pattern(3 * 1024 * 1024, 3);
  // Interleaved 64 KiB stripes from two handles, inside the same chunks.
  std::thread t0([&] {
    for (size_t off = 0; off < data.size(); off += 128 * 1024)
      ASSERT_TRUE(f0->pwrite(std::span(data).subspan(off, 64 * 1024), off).has_value());
    ASSERT_TRUE(f0->close().has_value());
  });
  std::thread t1([&] {
    for (size_t off = 64 * 1024; off < data.size(); off += 128 * 1024)
      ASSERT_TRUE(f1->pwrite(std::span(data).subspan(off, 64 * 1024), off).has_value());
    ASSERT_TRUE(f1->close().has_value());
  });
  t0.join();
  t1.join();
  EXPECT_EQ(read_all(d + "/shared"), data);
}

TEST_F(ClientTest, ReadBatchManySmallFiles) {
  std::string d = dir();
  const int kFiles = 60;
  std::vector<std::vector<std::byte>> contents;
  std::vector<Ino> inos;
  for (int i = 0; i < kFiles; ++i) {
    contents.push_back(pattern(1000 + 977 * i, 100 + i));
    auto f = open(fmt::format("{}/f{}", d, i), O_CREAT | O_WRONLY | O_EXCL);
    ASSERT_TRUE(f);
    ASSERT_TRUE(f->pwrite(contents.back(), 0).has_value());
    ASSERT_TRUE(f->close().has_value());
    inos.push_back(f->ino());
  }
  std::vector<std::vector<std::byte>> bufs(kFiles, std::vector<std::byte>(80 * 1024));
  std::vector<ReadOp> ops;
  for (int i = 0; i < kFiles; ++i) ops.push_back(ReadOp{inos[i], 0, bufs[i], std::nullopt, std::nullopt});
  auto results = client_->read_batch(client_->default_cred(), ops);
  ASSERT_EQ(results.size(), ops.size());
  for (int i = 0; i < kFiles; ++i) {
    ASSERT_TRUE(results[i].has_value()) << results[i].error();
    ASSERT_EQ(*results[i], contents[i].size());
    EXPECT_TRUE(std::equal(contents[i].begin(), contents[i].end(), bufs[i].begin())) << "file " << i;
  }
  auto fut = client_->submit_reads(client_->default_cred(), ops);
  for (auto& r : fut.get()) EXPECT_TRUE(r.has_value());
}

// A batch read given a length older than a truncate (the caller's attributes,
// taken before another client cut the file) counts the bytes the file has
// now, as pread does: not the old length, with zeros past the end.
TEST_F(ClientTest, ABatchReadCountsTheLengthAfterATruncateItWasNotToldOf) {
  std::string d = dir();
  auto data = pattern(3 * 100000, 17);
  ASSERT_TRUE(write_new(d + "/cut", data));
  auto n = client_->resolve(client_->default_cred(), d + "/cut");
  ASSERT_TRUE(n.has_value()) << n.error();
  auto other = connect_another();
  ASSERT_TRUE(other.has_value()) << other.error();
  ASSERT_TRUE((*other)->setattr((*other)->default_cred(), n->ino, SetAttr{.size = 1000}).has_value());

  std::vector<std::byte> buf(data.size()), tail(4096);
  std::vector<ReadOp> ops{ReadOp{n->ino, 0, buf, n->layout, n->size},
                          ReadOp{n->ino, 200000, tail, n->layout, n->size}};
  for (int pass = 0; pass < 2; ++pass) {
    auto results = pass == 0 ? client_->read_batch(client_->default_cred(), ops)
                             : client_->submit_reads(client_->default_cred(), ops).get();
    ASSERT_EQ(results.size(), 2u);
    ASSERT_TRUE(results[0].has_value()) << results[0].error();
    EXPECT_EQ(*results[0], 1000u);
    EXPECT_TRUE(std::equal(data.begin(), data.begin() + 1000, buf.begin()));
    ASSERT_TRUE(results[1].has_value()) << results[1].error();
    EXPECT_EQ(*results[1], 0u) << "past the end now";
  }
}

// The path API keeps parent directories for a second. Another client that
// removes a directory and makes it again inside that second must not make
// this one's creates, opens, removals or renames fail or land in the removed
// directory: they find the new one.
TEST_F(ClientTest, PathCallsFindADirectoryAnotherClientMadeAgain) {
  std::string d = dir();
  auto other = connect_another();
  ASSERT_TRUE(other.has_value()) << other.error();
  const Cred& cred = client_->default_cred();
  auto data = pattern(3000, 5);
  ASSERT_TRUE(write_new(d + "/a", data));  // caches d
  ASSERT_TRUE(client_->mkdirs(cred, d + "/sub").has_value());
  ASSERT_TRUE(write_new(d + "/sub/x", data));  // caches d/sub

  // The other client replaces d/sub with a new directory holding only y.
  remake_again(**other, d, data);
  // Create, then read back through the other client: the new directory.
  ASSERT_TRUE(write_new(d + "/sub/z", data));
  auto seen = (*other)->resolve(cred, d + "/sub/z");
  ASSERT_TRUE(seen.has_value()) << seen.error();
  EXPECT_EQ(seen->size, data.size());

  remake_again(**other, d, data);
  // Read-only open of a name only the new directory holds.
  EXPECT_EQ(read_all(d + "/sub/y"), data);

  remake_again(**other, d, data);
  // Removal and rename of names in the new directory.
  EXPECT_TRUE(client_->rename_path(cred, d + "/sub/y", d + "/sub/w").has_value());
  EXPECT_TRUE(client_->remove_path(cred, d + "/sub/w").has_value());
  // A name that is really missing is still ENOENT.
  auto missing = client_->open_path(cred, d + "/sub/nothing", O_RDONLY);
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().code(), Code::kNotFound);

  // Moved away (not removed) and replaced: creates and removals by path act
  // in the new directory, never in the one moved away (meta checks a cached
  // parent inside the mutation).
  auto move_and_remake = [&](const std::string& to) {
    ASSERT_TRUE((*other)->rename_path(cred, d + "/sub", d + "/" + to).has_value());
    ASSERT_TRUE((*other)->mkdirs(cred, d + "/sub").has_value());
  };
  ASSERT_TRUE(write_new(d + "/sub/m1", data));  // caches d/sub
  move_and_remake("moved1");
  ASSERT_TRUE(write_new(d + "/sub/m2", data));
  EXPECT_TRUE((*other)->resolve(cred, d + "/sub/m2").has_value()) << "created in the new directory";
  EXPECT_FALSE((*other)->resolve(cred, d + "/moved1/m2").has_value()) << "not in the one moved away";
  ASSERT_TRUE(write_new(d + "/sub/m3", data));  // caches the new d/sub
  move_and_remake("moved2");
  auto removed = client_->remove_path(cred, d + "/sub/m3");
  ASSERT_FALSE(removed.has_value()) << "m3 went away with its directory";
  EXPECT_EQ(removed.error().code(), Code::kNotFound);
  EXPECT_TRUE((*other)->resolve(cred, d + "/moved2/m3").has_value()) << "the moved directory keeps it";

  // A parent reached through a symlink (an entry meta cannot check against
  // the directory): creates and removals through it, twice (cached the second time).
  auto top = client_->resolve(cred, d);
  ASSERT_TRUE(top.has_value()) << top.error();
  ASSERT_TRUE(client_->symlink(cred, top->ino, "link", "sub").has_value());
  for (int i = 0; i < 2; ++i) {
    std::string name = fmt::format("/link/s{}", i);
    ASSERT_TRUE(write_new(d + name, data));
    EXPECT_TRUE((*other)->resolve(cred, d + fmt::format("/sub/s{}", i)).has_value());
  }
  for (int i = 0; i < 2; ++i) EXPECT_TRUE(client_->remove_path(cred, d + fmt::format("/link/s{}", i)).has_value());
  EXPECT_FALSE((*other)->resolve(cred, d + "/sub/s1").has_value());
}

// Statahead for read-only opens by path (ClientOptions::statahead_ttl_s):
// once opens keep asking meta in one directory it is listed, and the next
// opens there are answered from the listing, so another client's change
// within the ttl is not seen (the staleness of a FUSE attribute cache); a
// change made through the same client drops the listings, a name created
// since is found, and a listing older than the ttl is not used.
// A FIFO made through libweft is a name with attributes: every native open
// of it is refused (its opens belong to a mount's kernel), statahead's too.
TEST_F(ClientTest, SpecialFilesAreNotOpenedNatively) {
  std::string d = dir();
  const Cred& cred = client_->default_cred();
  auto parent = client_->resolve(cred, d, true);
  ASSERT_TRUE(parent.has_value()) << parent.error();
  auto fifo = client_->mknod(cred, parent->ino, "fifo", InodeType::kFifo, 0644);
  ASSERT_TRUE(fifo.has_value()) << fifo.error();
  auto n = client_->resolve(cred, d + "/fifo", false);
  ASSERT_TRUE(n.has_value()) << n.error();
  EXPECT_EQ(n->type, InodeType::kFifo);
  for (int flags : {O_RDONLY, O_WRONLY, O_RDWR, O_RDONLY | O_CREAT}) {
    auto f = client_->open_path(cred, d + "/fifo", flags);
    ASSERT_FALSE(f.has_value()) << "flags " << flags;
    EXPECT_EQ(f.error().code(), Code::kNotSupported) << f.error();
  }
  auto by_ino = client_->open(cred, fifo->ino, O_RDONLY);
  ASSERT_FALSE(by_ino.has_value());
  EXPECT_EQ(by_ino.error().code(), Code::kNotSupported);
  auto known = client_->open_read_known(cred, *fifo);
  ASSERT_FALSE(known.has_value());
  EXPECT_EQ(known.error().code(), Code::kNotSupported);
  auto sized = client_->setattr(cred, fifo->ino, SetAttr{.size = 0});  // truncate(2) of a FIFO: EINVAL
  ASSERT_FALSE(sized.has_value());
  EXPECT_EQ(sized.error().code(), Code::kInvalidArgument) << sized.error();
  ClientOptions o;
  o.config_path = config_;
  o.statahead_ttl_s = 60;
  auto listing = Client::connect(o);
  ASSERT_TRUE(listing.has_value()) << listing.error();
  // Opens of the files beside it have the directory listed; the FIFO is then answered from the listing.
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(write_new(fmt::format("{}/f{}", d, i), pattern(100, i)));
  }
  for (int i = 0; i < 8; ++i) {
    EXPECT_TRUE((*listing)->open_path(cred, fmt::format("{}/f{}", d, i), O_RDONLY).has_value());
  }
  auto listed = (*listing)->open_path(cred, d + "/fifo", O_RDONLY);
  ASSERT_FALSE(listed.has_value());
  EXPECT_EQ(listed.error().code(), Code::kNotSupported) << listed.error();
  EXPECT_TRUE(client_->remove_path(cred, d + "/fifo").has_value());
}

TEST_F(ClientTest, StataheadAnswersReadOnlyOpensFromAListing) {
  std::string d = dir();
  const Cred& cred = client_->default_cred();
  auto path = [&](int i) { return fmt::format("{}/f{}", d, i); };
  std::vector<std::vector<std::byte>> data;
  for (int i = 0; i < 7; ++i) {
    data.push_back(pattern(5000 + 100 * i, 40 + i));
    if (i < 6) {
      ASSERT_TRUE(write_new(path(i), data.back()));
    }
  }
  auto connect = [&](double ttl) {
    ClientOptions o;
    o.config_path = config_;
    o.statahead_ttl_s = ttl;
    auto c = Client::connect(o);
    EXPECT_TRUE(c.has_value()) << c.error();
    return c ? std::move(*c) : nullptr;
  };
  auto read_with = [&](Client& c, const std::string& p) {
    std::vector<std::byte> out;
    auto f = c.open_path(c.default_cred(), p, O_RDONLY);
    EXPECT_TRUE(f.has_value()) << p << ": " << f.error();
    if (!f) return out;
    out.resize((*f)->size());
    auto n = (*f)->pread(out, 0);
    EXPECT_TRUE(n.has_value()) << n.error();
    out.resize(n ? *n : 0);
    return out;
  };
  // Appends `extra` to file i through `c`; returns the whole new content.
  auto append = [&](Client& c, int i, uint64_t seed) {
    auto extra = pattern(3000, seed);
    auto f = c.open_path(c.default_cred(), path(i), O_WRONLY);
    EXPECT_TRUE(f.has_value()) << f.error();
    if (f) {
      EXPECT_TRUE((*f)->pwrite(extra, data[i].size()).has_value());
      EXPECT_TRUE((*f)->close().has_value());
    }
    data[i].insert(data[i].end(), extra.begin(), extra.end());
    return data[i];
  };
  // Byte vectors compared by length first: a mismatch then reads as one.
  auto same = [](const std::vector<std::byte>& got, const std::vector<std::byte>& want) {
    if (got.size() != want.size())
      return ::testing::AssertionFailure() << got.size() << " bytes where " << want.size() << " were expected";
    if (got != want) return ::testing::AssertionFailure() << "same length, other bytes";
    return ::testing::AssertionSuccess();
  };
  // Meta's rules hold for answers from a listing: f5 readable by its owner
  // only, a directory, a symlink (followed).
  auto dir_ino = client_->resolve(cred, d);
  ASSERT_TRUE(dir_ino.has_value()) << dir_ino.error();
  auto f5 = client_->resolve(cred, path(5));
  ASSERT_TRUE(f5.has_value()) << f5.error();
  SetAttr owner_only;
  owner_only.mode = 0600;
  ASSERT_TRUE(client_->setattr(cred, f5->ino, owner_only).has_value());
  ASSERT_TRUE(client_->mkdirs(cred, d + "/sub0").has_value());
  ASSERT_TRUE(client_->symlink(cred, dir_ino->ino, "link", "f1").has_value());

  auto s = connect(60);
  ASSERT_TRUE(s);
  for (int i = 0; i < 6; ++i) EXPECT_TRUE(same(read_with(*s, path(i)), data[i])) << i;
  Cred other{.uid = 4321, .gid = 4321, .groups = {}};
  auto denied = s->open_path(other, path(5), O_RDONLY);
  ASSERT_FALSE(denied.has_value());
  EXPECT_EQ(denied.error().posix_errno(), EACCES);

  EXPECT_TRUE(s->open_path(other, path(4), O_RDONLY).has_value());
  auto is_dir = s->open_path(cred, d + "/sub0", O_RDONLY);
  ASSERT_FALSE(is_dir.has_value());
  EXPECT_EQ(is_dir.error().posix_errno(), EISDIR);
  EXPECT_TRUE(same(read_with(*s, d + "/link"), data[1])) << "a symlink is followed";

  auto old_size = data[2].size();
  auto grown = append(*client_, 2, 90);
  EXPECT_EQ(read_with(*s, path(2)).size(), old_size) << "answered from the listing";
  EXPECT_TRUE(same(read_all(path(2)), grown)) << "a client without statahead asks meta";

  ASSERT_TRUE(write_new(path(6), data[6]));
  EXPECT_TRUE(same(read_with(*s, path(6)), data[6])) << "a new name is asked for";

  ASSERT_TRUE(s->mkdirs(cred, d + "/sub").has_value());
  EXPECT_TRUE(same(read_with(*s, path(2)), grown)) << "a change through this client drops the listings";
  EXPECT_TRUE(same(read_with(*s, path(0)), data[0]));  // a second miss: listed again
  auto mine = append(*s, 3, 91);
  EXPECT_TRUE(same(read_with(*s, path(3)), mine)) << "its own writes are seen";

  auto quick = connect(0.3);
  ASSERT_TRUE(quick);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(same(read_with(*quick, path(i)), data[i]));
  auto later = append(*client_, 4, 92);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_TRUE(same(read_with(*quick, path(4)), later)) << "a listing older than the ttl is not used";
}

// Early reads (ClientOptions::early_read_bytes_max, client/early_read.h):
// once opens by path keep asking meta in a directory it is listed, and a
// later open of a listed file reads its first bytes beside the open. They
// are kept only when meta's answer matches the listing: a file another
// client rewrote in place (same length) or renamed over after the early
// read and before meta answered reads as a read after the open would; so
// does one this client is writing.
TEST_F(ClientTest, AnEarlyReadIsKeptOnlyWhenMetaAgreesWithTheListing) {
  std::string d = dir();
  auto path = [&](int i) { return fmt::format("{}/f{}", d, i); };
  std::vector<std::vector<std::byte>> data;
  for (int i = 0; i < 6; ++i) {
    data.push_back(pattern(6000 + 500 * i, 70 + i));
    ASSERT_TRUE(write_new(path(i), data.back()));
  }
  auto r = connect_another();
  ASSERT_TRUE(r.has_value()) << r.error();
  Client& reader = **r;
  auto read_with = [&](const std::string& p) {
    std::vector<std::byte> out;
    auto f = reader.open_path(reader.default_cred(), p, O_RDONLY);
    EXPECT_TRUE(f.has_value()) << p << ": " << f.error();
    if (!f) return out;
    out.resize((*f)->size() + 1);
    auto n = (*f)->pread(out, 0);
    EXPECT_TRUE(n.has_value()) << n.error();
    out.resize(n ? *n : 0);
    return out;
  };
  // Opens `p` with meta asked only after the early read, once `change` (by
  // another client) is made; returns what the open reads.
  auto read_across = [&](const std::string& p, const std::function<void()>& change) {
    std::optional<fault::Scope> late(std::in_place, "client.early_read.open_late", fault::Spec{.hits_max = 1});
    std::optional<fault::Scope> hold(std::in_place, "client.early_read.hold");
    std::vector<std::byte> out;
    std::thread t([&] { out = read_with(p); });
    while (hold->triggered() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    change();
    hold.reset();
    t.join();
    return out;
  };
  // Two opens that ask meta have the directory listed.
  EXPECT_EQ(read_with(path(0)), data[0]);
  EXPECT_EQ(read_with(path(1)), data[1]);
  auto before = reader.stats();
  EXPECT_EQ(read_with(path(2)), data[2]);
  auto after = reader.stats();
  EXPECT_EQ(after.early_reads, before.early_reads + 1);
  EXPECT_EQ(after.early_reads_kept, before.early_reads_kept + 1) << "meta's answer matched the listing";

  // Rewritten in place by another client: same length, other bytes.
  auto rewritten = pattern(data[3].size(), 90);
  before = reader.stats();
  EXPECT_EQ(read_across(path(3),
                        [&] {
                          auto w = client_->open_path(client_->default_cred(), path(3), O_WRONLY);
                          ASSERT_TRUE(w.has_value()) << w.error();
                          ASSERT_TRUE((*w)->pwrite(rewritten, 0).has_value());
                          ASSERT_TRUE((*w)->close().has_value());
                        }),
            rewritten)
      << "the early bytes were dropped";
  after = reader.stats();
  EXPECT_EQ(after.early_reads, before.early_reads + 1);
  EXPECT_EQ(after.early_reads_kept, before.early_reads_kept);

  // Another file renamed over a listed name: the open answers the new file.
  before = reader.stats();
  EXPECT_EQ(read_across(path(4),
                        [&] {
                          ASSERT_TRUE(client_->rename_path(client_->default_cred(), path(5), path(4)).has_value());
                        }),
            data[5]);
  after = reader.stats();
  EXPECT_EQ(after.early_reads, before.early_reads + 1);
  EXPECT_EQ(after.early_reads_kept, before.early_reads_kept);

  // A file this client holds open for writing is not read early (a send of
  // it in flight could land after the early read, unseen): its buffered
  // bytes are read, as from another descriptor of a local file. The
  // writable open dropped the listings; two opens list the directory again.
  auto w = reader.open_path(reader.default_cred(), path(1), O_WRONLY);
  ASSERT_TRUE(w.has_value()) << w.error();
  auto mine = pattern(data[1].size(), 91);
  ASSERT_TRUE((*w)->pwrite(mine, 0).has_value());
  EXPECT_EQ(read_with(path(0)), data[0]);
  before = reader.stats();
  EXPECT_EQ(read_with(path(2)), data[2]);
  EXPECT_EQ(reader.stats().early_reads_kept, before.early_reads_kept + 1) << "listed again";
  before = reader.stats();
  EXPECT_EQ(read_with(path(1)), mine);
  EXPECT_EQ(reader.stats().early_reads, before.early_reads);
  ASSERT_TRUE((*w)->close().has_value());
}

// An early read waits for one replica, at most EarlyRead::kTimeoutMs:
// storage servers that stop answering do not hold an open for the call
// timeout (meta answers it); the File's own read then has its usual retries.
TEST_F(ClientTest, AnEarlyReadDoesNotHoldAnOpenWhileStorageDoesNotAnswer) {
  if (dir_ == nullptr) GTEST_SKIP() << "needs the cluster this test starts";
  std::string d = dir();
  auto path = [&](int i) { return fmt::format("{}/f{}", d, i); };
  auto listed = listed_dir(d, 3, 5000, 60);
  ASSERT_TRUE(listed);
  const auto& data = listed->data;
  Client& c = *listed->client;
  std::vector<pid_t> storage;
  for (int i = 1; i <= 3; ++i) {
    std::ifstream pidfile(fmt::format("{}/run/storage-{}.pid", data_, i));
    pid_t pid = 0;
    pidfile >> pid;
    ASSERT_GT(pid, 0);
    storage.push_back(pid);
  }
  // Resumed however the test ends (well within mgmtd's lease: they stay in their chains).
  struct Resume {
    std::vector<pid_t>& pids;
    ~Resume() {
      for (pid_t p : pids) ::kill(p, SIGCONT);
    }
  } resume{storage};
  for (pid_t p : storage) ASSERT_EQ(::kill(p, SIGSTOP), 0);
  auto before = c.stats();
  auto t0 = std::chrono::steady_clock::now();
  auto f = c.open_path(c.default_cred(), path(2), O_RDONLY);
  auto took = std::chrono::steady_clock::now() - t0;
  for (pid_t p : storage) ::kill(p, SIGCONT);
  ASSERT_TRUE(f.has_value()) << f.error();
  EXPECT_EQ(c.stats().early_reads, before.early_reads + 1);
  EXPECT_EQ(c.stats().early_reads_kept, before.early_reads_kept) << "it failed: nothing to keep";
  // The call timeout is 10 s; the early read gives up after 0.5 s.
  EXPECT_LT(took, std::chrono::seconds(4)) << std::chrono::duration_cast<std::chrono::milliseconds>(took).count();
  std::vector<std::byte> out(5001);
  auto n = (*f)->pread(out, 0);
  ASSERT_TRUE(n.has_value()) << n.error();
  out.resize(*n);
  EXPECT_EQ(out, data[2]);
}

// A write through this client that begins while an early read is under way
// (here: while it waits for meta's answer) drops the early bytes, even when
// meta answered the open before the write's length report: a read in this
// process after the write returned sees it.
TEST_F(ClientTest, AWriteHereDuringAnEarlyReadDropsItsBytes) {
  std::string d = dir();
  auto path = [&](int i) { return fmt::format("{}/f{}", d, i); };
  auto listed = listed_dir(d, 3, 8000, 80);
  ASSERT_TRUE(listed);
  Client& c = *listed->client;
  auto before = c.stats();
  std::optional<fault::Scope> hold(std::in_place, "client.early_read.hold");
  std::shared_ptr<File> opened;
  std::thread reader([&] {
    auto f = c.open_path(c.default_cred(), path(2), O_RDONLY);
    EXPECT_TRUE(f.has_value()) << f.error();
    if (f) opened = std::move(*f);
  });
  while (hold->triggered() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  // The early bytes are read; meta may answer the open before or after this write.
  auto mine = pattern(8000, 99);
  {
    auto w = c.open_path(c.default_cred(), path(2), O_WRONLY);
    ASSERT_TRUE(w.has_value()) << w.error();
    ASSERT_TRUE((*w)->pwrite(mine, 0).has_value());
    ASSERT_TRUE((*w)->close().has_value());
  }
  hold.reset();
  reader.join();
  ASSERT_TRUE(opened);
  EXPECT_EQ(c.stats().early_reads, before.early_reads + 1);
  std::vector<std::byte> out(8001);
  auto n = opened->pread(out, 0);
  ASSERT_TRUE(n.has_value()) << n.error();
  out.resize(*n);
  EXPECT_EQ(out, mine);
  EXPECT_EQ(c.stats().early_reads_kept, before.early_reads_kept);
}

// close() ends the write session: an unlinked file whose last writer closed
// is destroyed at once (not after the client's lease), for empty and written
// files, also when the client is destroyed right after its closes.
TEST_F(ClientTest, ClosesEndTheirSessions) {
  std::string d = dir();
  const Cred& cred = client_->default_cred();
  auto data = pattern(70000, 11);
  auto gone = [&](Ino ino) {
    auto n = client_->getattr(cred, ino);
    return !n && n.error().code() == Code::kNotFound;
  };
  auto eventually_gone = [&](Ino ino) {
    for (int i = 0; i < 250 && !gone(ino); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return gone(ino);
  };
  ClientOptions o;
  o.config_path = config_;
  {
    auto writer = Client::connect(o);
    ASSERT_TRUE(writer.has_value()) << writer.error();
    auto f = (*writer)->open_path(cred, d + "/one", O_CREAT | O_WRONLY | O_EXCL, 0644);
    ASSERT_TRUE(f.has_value()) << f.error();
    ASSERT_TRUE((*f)->pwrite(data, 0).has_value());
    ASSERT_TRUE(client_->remove_path(cred, d + "/one").has_value());
    EXPECT_TRUE(client_->getattr(cred, (*f)->ino()).has_value()) << "kept while open for writing";
    ASSERT_TRUE((*f)->close().has_value());
    EXPECT_TRUE(eventually_gone((*f)->ino())) << "the last writer closed";
  }
  std::vector<Ino> inos;
  {
    auto writer = Client::connect(o);
    ASSERT_TRUE(writer.has_value()) << writer.error();
    std::vector<std::shared_ptr<File>> files;
    for (int i = 0; i < 20; ++i) {
      auto f = (*writer)->open_path(cred, fmt::format("{}/m{}", d, i), O_CREAT | O_WRONLY | O_EXCL, 0644);
      ASSERT_TRUE(f.has_value()) << f.error();
      if (i % 2 == 0) {
        ASSERT_TRUE((*f)->pwrite(data, 0).has_value());  // half stay empty
      }
      ASSERT_TRUE(client_->remove_path(cred, fmt::format("{}/m{}", d, i)).has_value());
      inos.push_back((*f)->ino());
      files.push_back(std::move(*f));
    }
    for (auto& f : files) ASSERT_TRUE(f->close().has_value());
  }  // the client goes at once
  for (Ino ino : inos) EXPECT_TRUE(eventually_gone(ino)) << "inode " << ino;
}

// Unlinked files leave storage: meta queues the written ones for chunk GC
// (empty ones have nothing to remove), the GC worker removes their chunks in
// one wave per pass, and the targets' used space (statfs) comes back.
TEST_F(ClientTest, UnlinkedFilesLeaveStorage) {
  std::string d = dir();
  const Cred& cred = client_->default_cred();
  auto used = [&]() -> uint64_t {
    auto s = client_->statfs(cred);
    EXPECT_TRUE(s.has_value()) << s.error();
    return s ? s->used_bytes : 0;
  };
  // Targets report their usage with each heartbeat (every second): settled
  // once the reports agree for 7.5 s (earlier tests' GC may still run: meta
  // keeps a removed file's chunks [meta] read_hold_ms, 5 s, before it may).
  auto settled = [&] {
    uint64_t last = used();
    int same = 0;
    for (int i = 0; i < 16 && same < 3; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2500));
      uint64_t now = used();
      same = now == last ? same + 1 : 0;
      last = now;
    }
    return last;
  };
  const uint64_t before = settled();
  const int kFiles = 8;
  auto data = pattern(3 << 20, 23);  // 3 chunks each
  const uint64_t written = uint64_t{kFiles} * data.size();
  for (int i = 0; i < kFiles; ++i) {
    ASSERT_TRUE(write_new(fmt::format("{}/f{}", d, i), data));
    ASSERT_TRUE(write_new(fmt::format("{}/e{}", d, i), {}));
  }
  const uint64_t full = settled();
  ASSERT_GE(full, before + written);
  for (int i = 0; i < kFiles; ++i) {
    ASSERT_TRUE(client_->remove_path(cred, fmt::format("{}/f{}", d, i)).has_value());
    ASSERT_TRUE(client_->remove_path(cred, fmt::format("{}/e{}", d, i)).has_value());
  }
  EXPECT_TRUE(eventually([&] { return used() + written <= full; }, std::chrono::seconds(40)))
      << "full " << full << ", now " << used() << ": the chunks of unlinked files stay on storage";
}

// The asynchronous batch calls: many batches in flight at once, each with its
// own results (an op on a missing inode fails alone), and no thread per batch.
TEST_F(ClientTest, AsyncBatchesInFlightTogetherWithoutAThreadEach) {
  auto threads_now = [] {
    std::ifstream in("/proc/self/status");
    for (std::string line; std::getline(in, line);)
      if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
    return -1;
  };
  std::string d = dir();
  const int kFiles = 16;
  const size_t kBytes = 96 * 1024;
  std::vector<std::vector<std::byte>> contents;
  std::vector<std::shared_ptr<File>> files;
  for (int i = 0; i < kFiles; ++i) {
    contents.push_back(pattern(kBytes, 500 + i));
    files.push_back(open(fmt::format("{}/a{}", d, i), O_CREAT | O_WRONLY | O_EXCL));
    ASSERT_TRUE(files.back());
  }
  int before = threads_now();
  // One write batch per file, two halves each, all submitted before any is awaited.
  std::vector<std::future<std::vector<Result<size_t>>>> writes;
  for (int i = 0; i < kFiles; ++i) {
    std::span<const std::byte> all(contents[i]);
    writes.push_back(client_->submit_writes({WriteOp{files[i], kBytes / 2, all.subspan(kBytes / 2)},
                                             WriteOp{files[i], 0, all.first(kBytes / 2)}}));
  }
  int during_writes = threads_now();
  for (auto& w : writes)
    for (auto& r : w.get()) ASSERT_TRUE(r.has_value()) << r.error();
  std::vector<Ino> inos;
  for (auto& f : files) {
    inos.push_back(f->ino());
    ASSERT_TRUE(f->close().has_value());
  }
  // 64 read batches of 4 ranges each in flight; every 16th op names no inode.
  const int kBatches = 64;
  std::vector<std::vector<std::byte>> bufs(kBatches * 4, std::vector<std::byte>(8192));
  std::vector<std::future<std::vector<Result<size_t>>>> reads;
  std::mt19937_64 rng(7);
  std::vector<std::pair<int, uint64_t>> where;  // per op: (file or -1, offset)
  for (int b = 0; b < kBatches; ++b) {
    std::vector<ReadOp> ops;
    for (int k = 0; k < 4; ++k) {
      size_t n = static_cast<size_t>(b * 4 + k);
      int file = n % 16 == 15 ? -1 : static_cast<int>(rng() % kFiles);
      uint64_t off = rng() % (kBytes - 8192);
      where.emplace_back(file, off);
      ops.push_back(ReadOp{file < 0 ? Ino{1u << 30} : inos[file], off, bufs[n], std::nullopt, std::nullopt});
    }
    reads.push_back(client_->submit_reads(client_->default_cred(), std::move(ops)));
  }
  int during_reads = threads_now();
  for (int b = 0; b < kBatches; ++b) {
    auto results = reads[b].get();
    ASSERT_EQ(results.size(), 4u);
    for (int k = 0; k < 4; ++k) {
      size_t n = static_cast<size_t>(b * 4 + k);
      auto [file, off] = where[n];
      if (file < 0) {
        ASSERT_FALSE(results[k].has_value());
        EXPECT_EQ(results[k].error().code(), Code::kNotFound);
        continue;
      }
      ASSERT_TRUE(results[k].has_value()) << results[k].error();
      ASSERT_EQ(*results[k], 8192u);
      EXPECT_TRUE(std::equal(bufs[n].begin(), bufs[n].end(), contents[file].begin() + static_cast<long>(off)))
          << "batch " << b << " op " << k;
    }
  }
  // At most the client's few write-batch workers were added.
  EXPECT_LE(during_writes - before, 4);
  EXPECT_LE(during_reads - before, 4);
}

// Write batches that write a common file run one after another in
// submission order (the workers ran up to four at once, so an earlier batch
// could land last): of two overlapping batches submitted back to back, the
// later one's bytes are the file's, every time, even through another File.
TEST_F(ClientTest, OverlappingWriteBatchesLandInSubmissionOrder) {
  std::string d = dir();
  const size_t kBytes = (1 << 20) + (64 << 10);  // across a chunk boundary
  const size_t kPiece = 16 << 10;
  auto earlier_file = open(d + "/f", O_CREAT | O_RDWR | O_EXCL);
  auto later_file = open(d + "/f", O_RDWR);
  ASSERT_TRUE(earlier_file && later_file);
  for (int round = 0; round < 16; ++round) {
    auto earlier = pattern(kBytes, 2000 + 2 * round), later = pattern(kBytes, 2001 + 2 * round);
    std::vector<WriteOp> pieces;  // the earlier batch: many small writes (it runs longer)
    for (size_t off = 0; off < kBytes; off += kPiece)
      pieces.push_back(WriteOp{earlier_file, off, std::span<const std::byte>(earlier).subspan(off, kPiece)});
    auto first = client_->submit_writes(std::move(pieces));
    auto second = client_->submit_writes({WriteOp{later_file, 0, later}});
    for (auto& r : first.get()) ASSERT_TRUE(r.has_value()) << r.error();
    for (auto& r : second.get()) ASSERT_TRUE(r.has_value()) << r.error();
    auto got = read_all(d + "/f");
    ASSERT_EQ(got.size(), kBytes);
    auto diff = std::mismatch(got.begin(), got.end(), later.begin());
    ASSERT_TRUE(diff.first == got.end()) << "round " << round << ": the earlier batch's bytes won from byte "
                                         << (diff.first - got.begin());
  }
  EXPECT_TRUE(earlier_file->close().has_value());
  EXPECT_TRUE(later_file->close().has_value());
}

// A write op without a file fails alone (EBADF); the batch's other ops
// land. It crashed the worker thread that ran the batch.
TEST_F(ClientTest, AWriteOpWithoutAFileFailsAlone) {
  std::string d = dir();
  auto f = open(d + "/f", O_CREAT | O_RDWR | O_EXCL);
  ASSERT_TRUE(f);
  auto data = pattern(5000, 31);
  auto out = client_->submit_writes({WriteOp{nullptr, 0, data}, WriteOp{f, 0, data}}).get();
  ASSERT_EQ(out.size(), 2u);
  ASSERT_FALSE(out[0]);
  EXPECT_EQ(out[0].error().code(), Code::kBadHandle);
  ASSERT_TRUE(out[1]) << out[1].error();
  EXPECT_EQ(*out[1], data.size());
  ASSERT_TRUE(f->close().has_value());
  EXPECT_EQ(read_all(d + "/f"), data);
}

// Read-only opens by path take one round trip (lookup + open at meta); the
// answers must match the general path: symlinks followed, permissions checked.
TEST_F(ClientTest, ReadOnlyOpenByPathFollowsSymlinksAndChecksPermissions) {
  std::string d = dir();
  const Cred& root = client_->default_cred();
  auto data = pattern(5000, 9);
  ASSERT_TRUE(write_new(d + "/secret", data));
  auto dir_inode = client_->resolve(root, d);
  ASSERT_TRUE(dir_inode.has_value());
  ASSERT_TRUE(client_->symlink(root, dir_inode->ino, "link", "secret").has_value());
  auto via_link = client_->open_path(root, d + "/link", O_RDONLY);
  ASSERT_TRUE(via_link.has_value()) << via_link.error();
  std::vector<std::byte> back(data.size());
  ASSERT_EQ(*(*via_link)->pread(back, 0), data.size());
  EXPECT_EQ(back, data);
  ASSERT_NO_FATAL_FAILURE(chmod(d + "/secret", 0600));
  Cred user{.uid = 4321, .gid = 4321, .groups = {}};
  auto denied = client_->open_path(user, d + "/secret", O_RDONLY);
  ASSERT_FALSE(denied.has_value());
  EXPECT_EQ(denied.error().posix_errno(), EACCES);
  auto notdir = client_->open_path(root, d + "/secret/x", O_RDONLY);
  ASSERT_FALSE(notdir.has_value());
  EXPECT_EQ(notdir.error().posix_errno(), ENOTDIR);
  auto root_dir = client_->open_path(root, "/", O_RDONLY);
  ASSERT_FALSE(root_dir.has_value());
  EXPECT_EQ(root_dir.error().posix_errno(), EISDIR);

  // Relative targets that climb: "../x" is x in the link's parent directory.
  ASSERT_TRUE(client_->mkdirs(root, d + "/a/b").has_value());
  auto b = client_->resolve(root, d + "/a/b");
  ASSERT_TRUE(b.has_value());
  ASSERT_TRUE(client_->symlink(root, b->ino, "up", "../../link").has_value());  // -> d/link -> d/secret
  ASSERT_TRUE(client_->symlink(root, b->ino, "dir", "..").has_value());         // -> d/a
  ASSERT_TRUE(write_new(d + "/a/in-a", data));
  EXPECT_EQ(read_all(d + "/a/b/up"), data);
  EXPECT_EQ(read_all(d + "/a/b/dir/in-a"), data);
  auto up = client_->resolve(root, d + "/a/b/dir", true);
  ASSERT_TRUE(up.has_value());
  EXPECT_EQ(up->ino, client_->resolve(root, d + "/a")->ino);
  EXPECT_EQ(client_->resolve(root, "/../..")->ino, client_->resolve(root, "/")->ino) << "above / stays at /";
}

// open_path with O_CREAT follows a symlink at the last name as open(2) does:
// an existing target is opened (O_TRUNC cuts it), a dangling link creates its
// target (relative to the link's directory, or from the root); O_EXCL answers
// EEXIST and O_NOFOLLOW ELOOP without following; 40 links in a row are
// followed, the 41st is ELOOP.
// The path API's directory cache (1 s) forgets what this client changes:
// a symlink to a directory replaced by one to another directory leads to
// the new one at once, and so does a directory renamed away and made anew.
TEST_F(ClientTest, PathsFollowWhatThisClientChangedNotWhatItCached) {
  std::string d = dir();
  const Cred& cred = client_->default_cred();
  for (const char* sub : {"/d1", "/d1/sub", "/d2", "/d2/sub", "/p", "/p/sub"})
    ASSERT_TRUE(client_->mkdirs(cred, d + sub).has_value()) << sub;
  auto parent = client_->resolve(cred, d, true);
  ASSERT_TRUE(parent.has_value());
  ASSERT_TRUE(client_->symlink(cred, parent->ino, "l", "d1").has_value());
  ASSERT_TRUE(write_new(d + "/l/sub/x", pattern(10, 1)));  // caches "l" (to d1) and d1's "sub"
  ASSERT_TRUE(client_->remove_path(cred, d + "/l").has_value());
  ASSERT_TRUE(client_->symlink(cred, parent->ino, "l", "d2").has_value());
  ASSERT_TRUE(write_new(d + "/l/sub/y", pattern(10, 2)));
  EXPECT_TRUE(client_->resolve(cred, d + "/d2/sub/y", false).has_value()) << "created through the old link";
  EXPECT_FALSE(client_->resolve(cred, d + "/d1/sub/y", false).has_value());
  ASSERT_TRUE(write_new(d + "/p/sub/a", pattern(10, 3)));  // caches "p" and "sub"
  ASSERT_TRUE(client_->rename_path(cred, d + "/p", d + "/p.old").has_value());
  ASSERT_TRUE(client_->mkdirs(cred, d + "/p/sub").has_value());
  ASSERT_TRUE(write_new(d + "/p/sub/b", pattern(10, 4)));
  EXPECT_TRUE(client_->resolve(cred, d + "/p/sub/b", false).has_value());
  EXPECT_FALSE(client_->resolve(cred, d + "/p.old/sub/b", false).has_value()) << "created in the renamed tree";
}

// A directory on the way that another client moved away and made anew
// within the cache's second receives no mutation by path here: meta checks
// every cached level (meta::ParentCheck::above), and the path is then looked
// up afresh. The create landed in the moved tree, and the remove removed there.
TEST_F(ClientTest, MutationsByPathGoWhereThePathLeadsAfterAnotherClientMovedADirectoryOnTheWay) {
  std::string d = dir();
  const Cred& cred = client_->default_cred();
  std::unique_ptr<Client> other;
  ASSERT_NO_FATAL_FAILURE(move_cached_dir_away(d, other));  // caches "a" and "b", then moves "a"
  const Cred& ocred = other->default_cred();
  ASSERT_TRUE(write_new(d + "/a/b/f2", pattern(10, 2)));
  EXPECT_TRUE(other->resolve(ocred, d + "/a/b/f2", false).has_value());
  EXPECT_FALSE(other->resolve(ocred, d + "/a.old/b/f2", false).has_value()) << "created in the moved tree";
  auto removed = client_->remove_path(cred, d + "/a/b/f1");
  ASSERT_FALSE(removed.has_value()) << "removed from the moved tree";
  EXPECT_EQ(removed.error().code(), Code::kNotFound) << removed.error();
  EXPECT_TRUE(other->resolve(ocred, d + "/a.old/b/f1", false).has_value());
}

// mkdirs and remove_tree too: mkdirs asks meta level by level, remove_tree
// asks for its top's parent afresh, then walks by inode (its parent taken
// from the cache, it removed /a.old/b: seen failing that way).
TEST_F(ClientTest, MkdirsAndRemoveTreeGoWhereThePathLeadsAfterAnotherClientMovedADirectory) {
  std::string d = dir();
  const Cred& cred = client_->default_cred();
  std::unique_ptr<Client> other;
  ASSERT_NO_FATAL_FAILURE(move_cached_dir_away(d, other));  // caches "a" and "b", then moves "a"
  const Cred& ocred = other->default_cred();
  ASSERT_TRUE(client_->mkdirs(cred, d + "/a/b/c").has_value());
  EXPECT_TRUE(other->resolve(ocred, d + "/a/b/c").has_value());
  EXPECT_FALSE(other->resolve(ocred, d + "/a.old/b/c").has_value()) << "made in the moved tree";

  ASSERT_TRUE(client_->resolve(cred, d + "/a.old/b/f1").has_value());  // caches "a.old"
  ASSERT_TRUE(other->rename_path(ocred, d + "/a", d + "/a.new").has_value());
  ASSERT_TRUE(other->rename_path(ocred, d + "/a.old", d + "/a").has_value());
  ASSERT_TRUE(other->mkdirs(ocred, d + "/a.old/b").has_value());
  ASSERT_TRUE(client_->remove_tree(cred, d + "/a.old/b").has_value());
  EXPECT_TRUE(other->resolve(ocred, d + "/a/b/f1", false).has_value()) << "removed from the moved tree";
  EXPECT_FALSE(other->resolve(ocred, d + "/a.old/b").has_value());
}

// remove_tree: the tree under a directory, or one file or link (not its
// target); refusals named and heard; an error leaves what it could not
// remove and the rest goes.
TEST_F(ClientTest, RemoveTreeRemovesWhatItCanAndNamesEachError) {
  std::string d = dir();
  const Cred& root = client_->default_cred();
  ASSERT_TRUE(client_->mkdirs(root, d + "/t/x/y").has_value());
  ASSERT_TRUE(client_->mkdirs(root, d + "/keep").has_value());
  ASSERT_TRUE(write_new(d + "/t/x/y/f", pattern(100, 1)));
  ASSERT_TRUE(write_new(d + "/keep/k", pattern(100, 2)));
  ASSERT_TRUE(client_->symlink_path(root, d + "/keep", d + "/t/x/link").has_value());
  ASSERT_TRUE(client_->symlink_path(root, d + "/keep", d + "/top-link").has_value());
  ASSERT_TRUE(write_new(d + "/file", pattern(10, 3)));

  std::vector<std::string> heard;
  auto record = [&](const Status& s) { heard.push_back(s.message()); };
  for (const std::string& refused : {std::string("/"), d + "/t/..", d + "/t/.", d + "/file/", d + "/missing"}) {
    heard.clear();
    auto r = client_->remove_tree(root, refused, record);
    ASSERT_FALSE(r.has_value()) << refused;
    ASSERT_EQ(heard.size(), 1u) << refused;
    EXPECT_EQ(heard[0], r.error().message());
    EXPECT_NE(r.error().message().find(refused), std::string::npos) << r.error();
  }
  EXPECT_EQ(client_->remove_tree(root, "/").error().code(), Code::kInvalidArgument);
  EXPECT_EQ(client_->remove_tree(root, d + "/t/..").error().code(), Code::kInvalidArgument);
  EXPECT_EQ(client_->remove_tree(root, d + "/file/").error().code(), Code::kNotDirectory);
  EXPECT_EQ(client_->remove_tree(root, d + "/missing").error().code(), Code::kNotFound);

  ASSERT_TRUE(client_->remove_tree(root, d + "/top-link").has_value());
  ASSERT_TRUE(client_->remove_tree(root, d + "/file").has_value());
  EXPECT_FALSE(client_->resolve(root, d + "/file").has_value());

  // A user who may not write in x/y: y's file stays (and so do y and x), the
  // link in x goes, as rm -r does; the first error names the file.
  ASSERT_TRUE(client_->setattr(root, client_->resolve(root, d + "/t")->ino, SetAttr{.mode = 0777}).has_value());
  ASSERT_TRUE(client_->setattr(root, client_->resolve(root, d + "/t/x")->ino, SetAttr{.mode = 0777}).has_value());
  Cred user{.uid = 4242, .gid = 4242, .groups = {}};
  heard.clear();
  auto partial = client_->remove_tree(user, d + "/t", record);
  ASSERT_FALSE(partial.has_value());
  EXPECT_EQ(partial.error().code(), Code::kPermissionDenied) << partial.error();
  EXPECT_NE(partial.error().message().find(d + "/t/x/y/f"), std::string::npos) << partial.error();
  ASSERT_EQ(heard.size(), 1u);
  EXPECT_TRUE(client_->resolve(root, d + "/t/x/y/f").has_value());
  EXPECT_FALSE(client_->resolve(root, d + "/t/x/link", false).has_value());
  EXPECT_EQ(read_all(d + "/keep/k"), pattern(100, 2)) << "a link's target is not entered";

  ASSERT_TRUE(client_->remove_tree(root, d + "/t/").has_value());
  EXPECT_FALSE(client_->resolve(root, d + "/t").has_value());
  EXPECT_TRUE(client_->resolve(root, d + "/keep/k").has_value());
}

// As rm -r: a directory the user may not list is removed when it is empty
// (rmdir needs no read permission on it); one that is not empty stays, and
// the error named is the listing's (EACCES), not rmdir's ENOTEMPTY.
TEST_F(ClientTest, RemoveTreeRemovesAnEmptyDirectoryItCannotList) {
  std::string d = dir();
  const Cred& root = client_->default_cred();
  ASSERT_TRUE(client_->mkdirs(root, d + "/u/empty").has_value());
  ASSERT_TRUE(client_->mkdirs(root, d + "/u/full").has_value());
  ASSERT_TRUE(write_new(d + "/u/full/f", pattern(10, 4)));
  Cred user{.uid = 4242, .gid = 4242, .groups = {}};
  for (const char* p : {"/u", "/u/empty", "/u/full"})
    ASSERT_TRUE(client_->setattr(root, client_->resolve(root, d + p)->ino, SetAttr{.uid = 4242, .gid = 4242}).has_value());
  for (const char* p : {"/u/empty", "/u/full"})
    ASSERT_TRUE(client_->setattr(root, client_->resolve(root, d + p)->ino, SetAttr{.mode = 0300}).has_value());

  std::vector<std::string> heard;
  auto r = client_->remove_tree(user, d + "/u", [&](const Status& s) { heard.push_back(s.message()); });
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code(), Code::kPermissionDenied) << r.error();
  EXPECT_NE(r.error().message().find(d + "/u/full"), std::string::npos) << r.error();
  EXPECT_EQ(heard.size(), 1u);
  EXPECT_FALSE(client_->resolve(root, d + "/u/empty").has_value()) << "the empty unlistable directory went";
  EXPECT_TRUE(client_->resolve(root, d + "/u/full/f").has_value());

  ASSERT_TRUE(client_->setattr(root, client_->resolve(root, d + "/u/full")->ino, SetAttr{.mode = 0700}).has_value());
  auto rest = client_->remove_tree(user, d + "/u");
  ASSERT_FALSE(rest.has_value());
  EXPECT_EQ(rest.error().code(), Code::kPermissionDenied) << "u's parent is root's: " << rest.error();
  EXPECT_FALSE(client_->resolve(root, d + "/u/full").has_value()) << "what the user may list went";
}

// A path mutation of the root answers what Linux answers (the root has no
// parent to do it in).
TEST_F(ClientTest, PathMutationsOfTheRootAnswerAsLinuxDoes) {
  const Cred& root = client_->default_cred();
  std::string d = dir();
  for (std::string r : {"/", "//"}) {
    SCOPED_TRACE(r);
    EXPECT_EQ(client_->mkdir_path(root, r).error().code(), Code::kExists);
    EXPECT_EQ(client_->symlink_path(root, "x", r).error().code(), Code::kExists);
    EXPECT_EQ(client_->unlink_path(root, r).error().code(), Code::kIsDirectory);
    EXPECT_EQ(client_->rmdir_path(root, r).error().code(), Code::kBusy);
    EXPECT_EQ(client_->remove_path(root, r).error().code(), Code::kBusy);
    EXPECT_EQ(client_->open_path(root, r, O_CREAT | O_WRONLY).error().code(), Code::kIsDirectory);
    EXPECT_EQ(client_->open_path(root, r, O_CREAT | O_EXCL | O_WRONLY).error().code(), Code::kExists);
    EXPECT_EQ(client_->rename_path(root, r, d + "/moved").error().code(), Code::kBusy);
    EXPECT_EQ(client_->rename_path(root, d, r).error().code(), Code::kBusy);
    EXPECT_EQ(client_->rename_path(root, d, r, RenameFlags::kNoReplace).error().code(), Code::kExists);
  }
  // By its last name as written: "." EINVAL, ".." ENOTEMPTY.
  EXPECT_EQ(client_->rmdir_path(root, "/.").error().code(), Code::kInvalidArgument);
  EXPECT_EQ(client_->remove_path(root, "/./").error().code(), Code::kInvalidArgument);
  EXPECT_EQ(client_->rmdir_path(root, "/..").error().code(), Code::kNotEmpty);
  EXPECT_EQ(client_->mkdir_path(root, "/.").error().code(), Code::kExists);
  // The parents first: a missing one is ENOENT before the root's EBUSY.
  EXPECT_EQ(client_->rename_path(root, d + "/missing/a", "/").error().code(), Code::kNotFound);
  EXPECT_EQ(client_->rename_path(root, "/", d + "/missing/a").error().code(), Code::kNotFound);
  // An empty path names nothing.
  EXPECT_EQ(client_->mkdir_path(root, "").error().code(), Code::kNotFound);
  EXPECT_EQ(client_->rmdir_path(root, "").error().code(), Code::kNotFound);
  EXPECT_EQ(client_->rename_path(root, "", d + "/x").error().code(), Code::kNotFound);
  EXPECT_EQ(client_->open_path(root, "", O_CREAT | O_WRONLY).error().code(), Code::kNotFound);
  EXPECT_TRUE(client_->resolve(root, d).has_value());
  EXPECT_FALSE(client_->resolve(root, d + "/moved").has_value());
}

TEST_F(ClientTest, CreateByPathFollowsASymlinkAtTheLastName) {
  std::string d = dir();
  const Cred& root = client_->default_cred();
  auto dir_ino = client_->resolve(root, d);
  ASSERT_TRUE(dir_ino.has_value()) << dir_ino.error();
  ASSERT_TRUE(write_new(d + "/ckpt-1", pattern(1000, 1)));
  ASSERT_TRUE(client_->symlink(root, dir_ino->ino, "latest", "ckpt-1").has_value());
  auto f = client_->open_path(root, d + "/latest", O_CREAT | O_WRONLY | O_TRUNC, 0644);
  ASSERT_TRUE(f.has_value()) << f.error();
  auto data = pattern(300, 2);
  ASSERT_TRUE((*f)->pwrite(data, 0).has_value());
  ASSERT_TRUE((*f)->close().has_value());
  EXPECT_EQ(read_all(d + "/ckpt-1"), data) << "the target, cut and written";
  auto link = client_->resolve(root, d + "/latest", /*follow_last=*/false);
  ASSERT_TRUE(link.has_value());
  EXPECT_TRUE(link->is_symlink()) << "the link stays a link";

  // Dangling links: their targets are created.
  ASSERT_TRUE(client_->mkdirs(root, d + "/sub").has_value());
  auto sub = client_->resolve(root, d + "/sub");
  ASSERT_TRUE(sub.has_value());
  ASSERT_TRUE(client_->symlink(root, sub->ino, "next", "../ckpt-2").has_value());
  auto made = client_->open_path(root, d + "/sub/next", O_CREAT | O_RDWR, 0600);
  ASSERT_TRUE(made.has_value()) << made.error();
  ASSERT_TRUE((*made)->close().has_value());
  auto created = client_->resolve(root, d + "/ckpt-2", false);
  ASSERT_TRUE(created.has_value()) << created.error();
  EXPECT_TRUE(created->is_file());
  EXPECT_EQ(created->mode & 07777, 0600u);
  ASSERT_TRUE(client_->symlink(root, sub->ino, "abs", d + "/ckpt-3").has_value());
  auto via_abs = client_->open_path(root, d + "/sub/abs", O_CREAT | O_WRONLY, 0644);
  ASSERT_TRUE(via_abs.has_value()) << via_abs.error();
  ASSERT_TRUE((*via_abs)->close().has_value());
  EXPECT_TRUE(client_->resolve(root, d + "/ckpt-3", false).has_value());

  // Neither O_EXCL nor O_NOFOLLOW follows.
  ASSERT_TRUE(client_->symlink(root, dir_ino->ino, "dangling", "nothing").has_value());
  for (const char* name : {"/latest", "/dangling"}) {
    auto excl = client_->open_path(root, d + name, O_CREAT | O_WRONLY | O_EXCL, 0644);
    ASSERT_FALSE(excl.has_value()) << name;
    EXPECT_EQ(excl.error().posix_errno(), EEXIST) << name;
    auto nofollow = client_->open_path(root, d + name, O_CREAT | O_WRONLY | O_NOFOLLOW, 0644);
    ASSERT_FALSE(nofollow.has_value()) << name;
    EXPECT_EQ(nofollow.error().posix_errno(), ELOOP) << name;
  }
  EXPECT_EQ(client_->resolve(root, d + "/nothing").error().posix_errno(), ENOENT);
  for (int flags : {O_RDONLY, O_WRONLY}) {
    auto plain = client_->open_path(root, d + "/latest", flags | O_NOFOLLOW);
    ASSERT_FALSE(plain.has_value()) << flags;
    EXPECT_EQ(plain.error().posix_errno(), ELOOP) << flags;
  }

  // Chains: c0 -> c1 -> ... -> c41 -> "end" (missing).
  for (int i = 0; i <= 41; ++i) {
    std::string target = i == 41 ? "end" : fmt::format("c{}", i + 1);
    ASSERT_TRUE(client_->symlink(root, dir_ino->ino, fmt::format("c{}", i), target).has_value());
  }
  auto too_many = client_->open_path(root, d + "/c0", O_CREAT | O_WRONLY, 0644);  // 42 links
  ASSERT_FALSE(too_many.has_value());
  EXPECT_EQ(too_many.error().posix_errno(), ELOOP);
  auto forty = client_->open_path(root, d + "/c2", O_CREAT | O_WRONLY, 0644);  // 40 links
  ASSERT_TRUE(forty.has_value()) << forty.error();
  ASSERT_TRUE((*forty)->close().has_value());
  EXPECT_TRUE(client_->resolve(root, d + "/end", false).has_value());
  ASSERT_TRUE(client_->symlink(root, dir_ino->ino, "self", "self").has_value());
  auto self = client_->open_path(root, d + "/self", O_CREAT | O_WRONLY, 0644);
  ASSERT_FALSE(self.has_value());
  EXPECT_EQ(self.error().posix_errno(), ELOOP);
}

// open(2) of an existing file checks what the access mode needs, with
// O_CREAT as without: read and write for O_RDWR.
TEST_F(ClientTest, CreateByPathOfAnExistingFileChecksReadAndWrite) {
  std::string d = dir();
  const Cred& root = client_->default_cred();
  ASSERT_TRUE(write_new(d + "/wo", pattern(10, 3)));
  ASSERT_NO_FATAL_FAILURE(chmod(d + "/wo", 0222));
  Cred user{.uid = 4321, .gid = 4321, .groups = {}};
  for (int flags : {O_RDWR, O_RDONLY}) {
    auto denied = client_->open_path(user, d + "/wo", O_CREAT | flags, 0644);
    ASSERT_FALSE(denied.has_value()) << flags;
    EXPECT_EQ(denied.error().posix_errno(), EACCES) << flags;
  }
  auto w = client_->open_path(user, d + "/wo", O_CREAT | O_WRONLY, 0644);
  ASSERT_TRUE(w.has_value()) << w.error();
  ASSERT_TRUE((*w)->close().has_value());
  auto by_root = client_->open_path(root, d + "/wo", O_CREAT | O_RDWR, 0644);  // root reads anything
  ASSERT_TRUE(by_root.has_value()) << by_root.error();
  ASSERT_TRUE((*by_root)->close().has_value());
}

// ".." is the parent of where the path got to, not a lexical step back:
// after a symlink it is the parent of the link's target, and the name before
// it must be a directory the caller may search.
TEST_F(ClientTest, DotDotIsTheParentOfWhereThePathGot) {
  std::string d = dir();
  const Cred& root = client_->default_cred();
  auto data = pattern(3000, 4);
  ASSERT_TRUE(client_->mkdirs(root, d + "/x/y").has_value());
  ASSERT_TRUE(client_->mkdirs(root, d + "/a").has_value());
  ASSERT_TRUE(write_new(d + "/x/file", data));
  auto a = client_->resolve(root, d + "/a");
  ASSERT_TRUE(a.has_value());
  ASSERT_TRUE(client_->symlink(root, a->ino, "link", "../x/y").has_value());
  EXPECT_EQ(read_all(d + "/a/link/../file"), data) << "a/link/.. is x, not a";
  EXPECT_EQ(client_->resolve(root, d + "/a/link/..")->ino, client_->resolve(root, d + "/x")->ino);

  auto missing = client_->resolve(root, d + "/a/missing/..");
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().posix_errno(), ENOENT);
  auto through_file = client_->resolve(root, d + "/x/file/..");
  ASSERT_FALSE(through_file.has_value());
  EXPECT_EQ(through_file.error().posix_errno(), ENOTDIR);

  // Creates and removals through ".." land where the path resolves.
  auto made = client_->open_path(root, d + "/a/link/../new", O_CREAT | O_WRONLY, 0644);
  ASSERT_TRUE(made.has_value()) << made.error();
  ASSERT_TRUE((*made)->close().has_value());
  ASSERT_TRUE(client_->resolve(root, d + "/x/new").has_value());
  ASSERT_TRUE(client_->remove_path(root, d + "/a/link/../new").has_value());
  EXPECT_EQ(client_->resolve(root, d + "/x/new").error().posix_errno(), ENOENT);

  // "." is a name in its directory too: "x/file/." is not the file, and
  // removing "a/." does not remove a.
  auto dot_after_file = client_->resolve(root, d + "/x/file/.");
  ASSERT_FALSE(dot_after_file.has_value());
  EXPECT_EQ(dot_after_file.error().posix_errno(), ENOTDIR);
  EXPECT_FALSE(client_->remove_path(root, d + "/a/.").has_value());
  EXPECT_TRUE(client_->resolve(root, d + "/a").has_value());
  EXPECT_EQ(read_all(d + "/x/./file"), data);

  // A directory this client knows from its cache, moved by another client:
  // ".." after it is not where it went (the path never named that place).
  auto other = connect_another();
  ASSERT_TRUE(other.has_value()) << other.error();
  ASSERT_TRUE(client_->mkdirs(root, d + "/w/z").has_value());
  ASSERT_TRUE(write_new(d + "/w/z/f", data));
  ASSERT_TRUE(client_->resolve(root, d + "/x/y/in-y").error().code() == Code::kNotFound);  // caches x/y
  ASSERT_TRUE((*other)->rename_path(root, d + "/x/y", d + "/w/y").has_value());
  auto moved = client_->resolve(root, d + "/x/y/../z/f");
  ASSERT_FALSE(moved.has_value()) << "resolved through the directory's new parent";
  EXPECT_EQ(moved.error().posix_errno(), ENOENT);
  ASSERT_TRUE((*other)->rename_path(root, d + "/w/y", d + "/x/y").has_value());

  // Stepping out of a directory needs search permission on it.
  ASSERT_NO_FATAL_FAILURE(chmod(d + "/x/y", 0700));
  Cred user{.uid = 4321, .gid = 4321, .groups = {}};
  auto denied = client_->resolve(user, d + "/x/y/../file");
  ASSERT_FALSE(denied.has_value());
  EXPECT_EQ(denied.error().posix_errno(), EACCES);
}

// The client tracks open files per inode (local sizes, truncates); files
// closed long ago must not stay tracked: a first epoch opens millions of
// distinct files through one client. 200,000 opens of distinct inodes
// (open_read_known of made-up inode numbers: no round trip) must not grow
// the process by more than a few MiB.
TEST_F(ClientTest, ClosedFilesAreNotKept) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "ASan keeps freed memory in quarantine: RSS says nothing here";
#endif
  std::string d = dir();
  const Cred& root = client_->default_cred();
  ASSERT_TRUE(write_new(d + "/f", pattern(100, 5)));
  auto inode = client_->resolve(root, d + "/f");
  ASSERT_TRUE(inode.has_value()) << inode.error();
  auto rss_kib = [] {
    std::ifstream in("/proc/self/status");
    std::string line;
    while (std::getline(in, line))
      if (line.starts_with("VmRSS:")) return std::stol(line.substr(6));
    return 0L;
  };
  auto open_many = [&](uint64_t first, int n) {
    Inode copy = *inode;
    for (int i = 0; i < n; ++i) {
      copy.ino = first + static_cast<uint64_t>(i);
      auto f = client_->open_read_known(root, copy);
      ASSERT_TRUE(f.has_value()) << f.error();
      ASSERT_TRUE((*f)->close().has_value());
    }
  };
  open_many(uint64_t{1} << 40, 20000);  // warm the allocator up
  long before = rss_kib();
  open_many((uint64_t{1} << 40) + 20000, 200000);
  long grown = rss_kib() - before;
  EXPECT_LT(grown, 8 * 1024) << "KiB grown over 200,000 opens of distinct files";
}

// The mount's read-only open from attributes it already holds: no round trip,
// the same permission rule as meta's open, and data read by the given inode.
TEST_F(ClientTest, ReadOnlyOpenOfAKnownInodeChecksPermissions) {
  std::string d = dir();
  const Cred& root = client_->default_cred();
  auto data = pattern(70000, 4);
  ASSERT_TRUE(write_new(d + "/f", data));
  auto inode = client_->resolve(root, d + "/f");
  ASSERT_TRUE(inode.has_value());
  auto f = client_->open_read_known(root, *inode);
  ASSERT_TRUE(f.has_value()) << f.error();
  std::vector<std::byte> back(data.size());
  ASSERT_EQ(*(*f)->pread(back, 0), data.size());
  EXPECT_EQ(back, data);
  EXPECT_FALSE((*f)->writable());
  EXPECT_FALSE((*f)->pwrite(data, 0).has_value());

  Inode private_copy = *inode;
  private_copy.mode = 0600;
  Cred user{.uid = 4321, .gid = 4321, .groups = {}};
  auto denied = client_->open_read_known(user, private_copy);
  ASSERT_FALSE(denied.has_value());
  EXPECT_EQ(denied.error().posix_errno(), EACCES);
  Inode group_readable = private_copy;
  group_readable.mode = 0640;
  group_readable.gid = 77;
  Cred member{.uid = 4321, .gid = 4321, .groups = {77}};
  EXPECT_TRUE(client_->open_read_known(member, group_readable).has_value());

  auto dir_inode = client_->resolve(root, d);
  ASSERT_TRUE(dir_inode.has_value());
  auto is_dir = client_->open_read_known(root, *dir_inode);
  ASSERT_FALSE(is_dir.has_value());
  EXPECT_EQ(is_dir.error().posix_errno(), EISDIR);
}

// A batch read checks read permission as a read-only open does, on the
// attributes it fetches or is given; a bare layout and size are the caller's
// word and are read as given.
TEST_F(ClientTest, ABatchReadChecksReadPermission) {
  std::string d = dir();
  const Cred& root = client_->default_cred();
  auto data = pattern(9000, 6);
  ASSERT_TRUE(write_new(d + "/private", data));
  chmod(d + "/private", 0600);
  auto inode = client_->resolve(root, d + "/private");
  ASSERT_TRUE(inode.has_value());

  Cred user{.uid = 4321, .gid = 4321, .groups = {}};
  auto read_as = [&](const Cred& cred, auto&& fill) {
    std::vector<std::byte> back(data.size());
    ReadOp op;
    op.ino = inode->ino;
    op.dst = back;
    fill(op);
    auto r = client_->read_batch(cred, std::span<const ReadOp>(&op, 1))[0];
    if (r) {
      EXPECT_EQ(back, data);
    }
    return r;
  };
  auto asks_meta = read_as(user, [](ReadOp&) {});
  ASSERT_FALSE(asks_meta.has_value());
  EXPECT_EQ(asks_meta.error().posix_errno(), EACCES);
  auto given_attrs = read_as(user, [&](ReadOp& op) { op.attrs = *inode; });
  ASSERT_FALSE(given_attrs.has_value());
  EXPECT_EQ(given_attrs.error().posix_errno(), EACCES);
  auto vouched = read_as(user, [&](ReadOp& op) {
    op.layout = inode->layout;
    op.file_size = inode->size;
  });
  ASSERT_TRUE(vouched.has_value()) << vouched.error();
  EXPECT_EQ(*vouched, data.size());
  auto owner = read_as(root, [&](ReadOp& op) { op.attrs = *inode; });
  ASSERT_TRUE(owner.has_value()) << owner.error();
  EXPECT_EQ(*owner, data.size());

  // One inode, two ops: a vouched one first does not spare the other's check.
  std::vector<std::byte> a(100), b(100);
  std::vector<ReadOp> both(2);
  both[0].ino = both[1].ino = inode->ino;
  both[0].dst = a;
  both[0].layout = inode->layout;
  both[0].file_size = inode->size;
  both[1].dst = b;
  both[1].attrs = *inode;
  for (const auto& r : client_->read_batch(user, both)) {
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error().posix_errno(), EACCES);
  }
  // Attributes of another inode are refused, not read with.
  ASSERT_TRUE(write_new(d + "/other", pattern(100, 7)));
  auto other = client_->resolve(root, d + "/other");
  ASSERT_TRUE(other.has_value());
  auto mixed = read_as(root, [&](ReadOp& op) { op.attrs = *other; });
  ASSERT_FALSE(mixed.has_value());
  EXPECT_EQ(mixed.error().posix_errno(), EINVAL);
}

TEST_F(ClientTest, PosixErrors) {
  std::string d = dir();
  const Cred& c = client_->default_cred();
  auto missing = client_->open_path(c, d + "/nope", O_RDONLY);
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().posix_errno(), ENOENT);
  EXPECT_NE(missing.error().message().find("/nope"), std::string::npos);
  auto isdir = client_->open_path(c, d, O_RDONLY);
  ASSERT_FALSE(isdir.has_value());
  EXPECT_EQ(isdir.error().posix_errno(), EISDIR);
  ASSERT_TRUE(open(d + "/x", O_CREAT | O_WRONLY | O_EXCL));
  auto again = client_->open_path(c, d + "/x", O_CREAT | O_WRONLY | O_EXCL);
  ASSERT_FALSE(again.has_value());
  EXPECT_EQ(again.error().posix_errno(), EEXIST);
  auto notdir = client_->resolve(c, d + "/x/y");
  ASSERT_FALSE(notdir.has_value());
  EXPECT_EQ(notdir.error().posix_errno(), ENOTDIR);
  auto ro = open(d + "/x", O_RDONLY);
  auto w = ro->pwrite(pattern(10, 1), 0);
  ASSERT_FALSE(w.has_value());
  EXPECT_EQ(w.error().posix_errno(), EBADF);
  ASSERT_TRUE(ro->close().has_value());
  EXPECT_EQ(ro->close().error().posix_errno(), EBADF);
  ASSERT_TRUE(client_->mkdirs(c, d + "/sub/a").has_value());
  auto rm = client_->remove_path(c, d + "/sub");
  ASSERT_FALSE(rm.has_value());
  EXPECT_EQ(rm.error().posix_errno(), ENOTEMPTY);
  ASSERT_TRUE(client_->rename_path(c, d + "/x", d + "/sub/a/x").has_value());
  auto list = client_->list_path(c, d + "/sub/a");
  ASSERT_TRUE(list.has_value());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].name, "x");
  // remove_path: a file, then the emptied directories (unlink first, rmdir on EISDIR).
  ASSERT_TRUE(client_->remove_path(c, d + "/sub/a/x").has_value());
  ASSERT_TRUE(client_->remove_path(c, d + "/sub/a").has_value());
  ASSERT_TRUE(client_->remove_path(c, d + "/sub").has_value());
  EXPECT_EQ(client_->resolve(c, d + "/sub").error().posix_errno(), ENOENT);
  EXPECT_EQ(client_->remove_path(c, d + "/sub").error().posix_errno(), ENOENT);
}

// A path ending in '/' names a directory, as a path to open(2), stat(2),
// unlink(2), rename(2) does on Linux: a file there is ENOTDIR, creating one
// there EISDIR; a symlink to a directory is followed.
TEST_F(ClientTest, APathEndingInASlashNamesADirectory) {
  std::string d = dir();
  const Cred& c = client_->default_cred();
  auto data = pattern(100, 3);
  ASSERT_TRUE(write_new(d + "/f", data));
  ASSERT_TRUE(client_->mkdirs(c, d + "/sub").has_value());
  auto dir_inode = client_->resolve(c, d);
  ASSERT_TRUE(dir_inode.has_value());
  ASSERT_TRUE(client_->symlink(c, dir_inode->ino, "to-sub", "sub").has_value());
  ASSERT_TRUE(client_->symlink(c, dir_inode->ino, "to-f", "f").has_value());
  auto errno_of = [](const auto& r) { return r.has_value() ? 0 : r.error().posix_errno(); };
  EXPECT_EQ(errno_of(client_->resolve(c, d + "/f/")), ENOTDIR);
  EXPECT_EQ(errno_of(client_->resolve(c, d + "/to-f/")), ENOTDIR);
  auto sub = client_->resolve(c, d + "/to-sub/", /*follow_last=*/false);
  ASSERT_TRUE(sub.has_value()) << sub.error();
  EXPECT_TRUE(sub->is_dir()) << "followed: the slash asks for the directory";
  EXPECT_EQ(errno_of(client_->open_path(c, d + "/f/", O_RDONLY)), ENOTDIR);
  EXPECT_EQ(errno_of(client_->open_path(c, d + "/f/", O_WRONLY)), ENOTDIR);
  EXPECT_EQ(errno_of(client_->open_path(c, d + "/sub/", O_RDONLY)), EISDIR);
  EXPECT_EQ(errno_of(client_->open_path(c, d + "/new/", O_CREAT | O_WRONLY)), EISDIR);
  EXPECT_EQ(errno_of(client_->resolve(c, d + "/new")), ENOENT) << "nothing created";
  EXPECT_EQ(errno_of(client_->remove_path(c, d + "/f/")), ENOTDIR);
  EXPECT_EQ(errno_of(client_->rename_path(c, d + "/f/", d + "/g")), ENOTDIR);
  EXPECT_EQ(errno_of(client_->rename_path(c, d + "/f", d + "/g/")), ENOTDIR);
  EXPECT_EQ(read_all(d + "/f"), data) << "the file is where it was";
  ASSERT_TRUE(client_->rename_path(c, d + "/sub/", d + "/moved/").has_value());
  ASSERT_TRUE(client_->remove_path(c, d + "/moved/").has_value());
  EXPECT_EQ(errno_of(client_->resolve(c, d + "/moved")), ENOENT);
}

// No byte at or past meta::kFileBytesMax: EFBIG before anything is buffered,
// cut or recorded (meta refuses such lengths too).
TEST_F(ClientTest, FileLengthIsBounded) {
  std::string d = dir();
  const Cred& c = client_->default_cred();
  auto f = open(d + "/f", O_CREAT | O_RDWR | O_EXCL);
  ASSERT_TRUE(f);
  auto data = pattern(4096, 3);
  ASSERT_TRUE(f->pwrite(data, 0).has_value());
  for (uint64_t offset : {meta::kFileBytesMax, UINT64_MAX - 10}) {
    auto w = f->pwrite(data, offset);
    ASSERT_FALSE(w.has_value()) << "offset " << offset;
    EXPECT_EQ(w.error().posix_errno(), EFBIG);
  }
  auto t = f->truncate(meta::kFileBytesMax + 1);
  ASSERT_FALSE(t.has_value());
  EXPECT_EQ(t.error().posix_errno(), EFBIG);
  SetAttr huge;
  huge.size = UINT64_MAX;
  auto a = client_->setattr(c, f->ino(), huge);
  ASSERT_FALSE(a.has_value());
  EXPECT_EQ(a.error().posix_errno(), EFBIG);
  ASSERT_TRUE(f->close().has_value());
  EXPECT_EQ(read_all(d + "/f"), data);
}

// meta asks mgmtd whether a layout's chain table exists: files under a
// directory on a missing table could be neither written nor collected.
TEST_F(ClientTest, LayoutsNameAnExistingChainTable) {
  std::string d = dir();
  const Cred& c = client_->default_cred();
  auto dir_inode = client_->resolve(c, d);
  ASSERT_TRUE(dir_inode.has_value()) << dir_inode.error();
  auto layout = client_->get_layout(c, dir_inode->ino);
  ASSERT_TRUE(layout.has_value()) << layout.error();
  Layout missing = *layout;
  missing.chain_table_id = layout->chain_table_id + 1000;
  auto r = client_->set_layout(c, dir_inode->ino, missing);
  ASSERT_FALSE(r.has_value()) << "chain table " << missing.chain_table_id << " accepted";
  EXPECT_EQ(r.error().code(), Code::kInvalidArgument) << r.error();
  EXPECT_NE(r.error().message().find("does not exist"), std::string::npos) << r.error();
  Layout wider = *layout;
  wider.stripe_count = 2;
  ASSERT_TRUE(client_->set_layout(c, dir_inode->ino, wider).has_value());
  EXPECT_EQ(client_->get_layout(c, dir_inode->ino)->chain_table_id, layout->chain_table_id);
  ASSERT_TRUE(write_new(d + "/f", pattern(5000, 9)));
}

// Last: kills a storage server of the cluster this suite started.
// fsync waits for the writes made before it, not for those another thread
// makes while it waits: a partly written chunk begun meanwhile (sent by no
// one until the next flush) once kept it waiting forever.
TEST_F(ClientTest, AFlushWaitsForTheWritesBeforeItNotForThoseMadeMeanwhile) {
  std::string d = dir();
  auto f = open(d + "/flush-race", O_CREAT | O_RDWR);
  ASSERT_TRUE(f);
  auto big = pattern(64u << 20, 7);
  ASSERT_TRUE(f->pwrite(big, 0).has_value());  // 64 full chunks go out at once
  std::promise<Result<void>> flushed;
  auto done = flushed.get_future();
  std::thread flusher([&] { flushed.set_value(f->flush()); });
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  auto small = pattern(4096, 8);
  ASSERT_TRUE(f->pwrite(small, uint64_t{200} << 20).has_value());  // a new, partial chunk
  bool returned = done.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
  EXPECT_TRUE(returned) << "flush still waiting after 20 s";
  if (!returned) {
    EXPECT_TRUE(f->flush().has_value());  // (sends the partial chunk: lets the thread go)
  }
  flusher.join();
  EXPECT_TRUE(done.get().has_value());
  ASSERT_TRUE(f->close().has_value());
  auto back = read_all(d + "/flush-race");
  ASSERT_EQ(back.size(), (uint64_t{200} << 20) + 4096);
  EXPECT_TRUE(std::equal(big.begin(), big.end(), back.begin()));
  EXPECT_TRUE(std::equal(small.begin(), small.end(), back.end() - 4096));
}

// A truncate through one File, or an open with O_TRUNC, reaches every File of
// that inode open in the client: they flush first, their chunks past the cut
// go (also those sent in the background, whose length meta did not know
// yet), and they learn the length, so what they write afterwards is counted.
TEST_F(ClientTest, ATruncateReachesEveryFileOfTheInodeOpenInTheClient) {
  std::string d = dir();
  auto f1 = open(d + "/t", O_CREAT | O_WRONLY);
  ASSERT_TRUE(f1);
  ASSERT_TRUE(f1->pwrite(pattern(4u << 20, 9), 0).has_value());
  ASSERT_TRUE(f1->fsync().has_value());
  auto f2 = open(d + "/t", O_WRONLY | O_TRUNC);
  ASSERT_TRUE(f2);
  auto n = client_->getattr(client_->default_cred(), f1->ino());
  ASSERT_TRUE(n.has_value()) << n.error();
  EXPECT_EQ(n->size, 0u);
  EXPECT_EQ(f1->size(), 0u);
  auto hello = pattern(100, 10);
  ASSERT_TRUE(f1->pwrite(hello, 0).has_value());
  ASSERT_TRUE(f1->fsync().has_value());
  ASSERT_TRUE(f1->close().has_value());
  ASSERT_TRUE(f2->close().has_value());
  EXPECT_EQ(read_all(d + "/t"), hello) << "the write after the sibling's truncate is the whole file";

  // Full chunks sent in the background, their length not reported: a
  // truncate to 0 through another File still removes them.
  auto g1 = open(d + "/u", O_CREAT | O_WRONLY);
  ASSERT_TRUE(g1);
  ASSERT_TRUE(g1->pwrite(pattern(4u << 20, 11), 0).has_value());
  auto g2 = open(d + "/u", O_WRONLY);
  ASSERT_TRUE(g2);
  ASSERT_TRUE(g2->truncate(0).has_value());
  ASSERT_TRUE(g2->truncate(4u << 20).has_value());  // extended again: zeros
  ASSERT_TRUE(g2->close().has_value());
  ASSERT_TRUE(g1->close().has_value());
  auto back = read_all(d + "/u");
  ASSERT_EQ(back.size(), 4u << 20);
  EXPECT_EQ(std::count(back.begin(), back.end(), std::byte{0}), 4 << 20) << "old bytes after truncate and extension";
}

// A failed write loses what the File still buffers, as EIO on a local file
// does: it is never sent later. Its close once sent it, after a truncate
// through another File had cut the file below it (the failed File reported
// no length for it): the old bytes came back when the file was extended.
TEST_F(ClientTest, AFailedFilesBufferedWritesNeverLandAfterATruncate) {
  std::string d = dir();
  auto f = open(d + "/failed", O_CREAT | O_RDWR);
  ASSERT_TRUE(f);
  const uint32_t cb = f->layout().chunk_bytes;
  auto old = pattern(100, 32);
  ASSERT_TRUE(f->pwrite(old, 0).has_value());   // chunk 0: partial, buffered
  ASSERT_TRUE(f->pwrite(old, cb).has_value());  // chunk 1 too
  {
    fault::Scope fail("client.write.fail", {.hits_max = 1});
    ASSERT_TRUE(f->pwrite(pattern(cb, 33), 2ull * cb).has_value());  // full: sent now, and fails
    // A write into buffered chunk 0 sends nothing; it fails once the File did.
    ASSERT_TRUE(eventually([&] { return !f->pwrite(std::span(old).first(1), 0).has_value(); }));
  }
  auto g = open(d + "/failed", O_RDWR);
  ASSERT_TRUE(g);
  ASSERT_TRUE(g->truncate(0).has_value());
  EXPECT_FALSE(f->close().has_value()) << "the failure is reported at close";
  ASSERT_TRUE(g->truncate(3ull * cb).has_value());
  std::vector<std::byte> back(3ull * cb, std::byte{1});
  ASSERT_EQ(g->pread(back, 0).value_or(0), back.size());
  EXPECT_EQ(std::count(back.begin(), back.end(), std::byte{0}), static_cast<ptrdiff_t>(back.size()))
      << "bytes of the failed File after the truncate";
  ASSERT_TRUE(g->close().has_value());
}

// A File whose writes failed dropped them: the other Files of the inode in
// this client and its attributes do not count them (the length grew over
// them until the failed File was closed, and they read as zeros).
TEST_F(ClientTest, AFailedFilesDroppedWritesDoNotCountForItsSiblings) {
  std::string d = dir();
  auto f = open(d + "/failed", O_CREAT | O_RDWR);
  auto r = open(d + "/failed", O_RDONLY);
  ASSERT_TRUE(f && r);
  const uint32_t cb = f->layout().chunk_bytes;
  {
    fault::Scope fail("client.write.fail", {.hits_max = 1});
    ASSERT_TRUE(f->pwrite(pattern(cb, 34), 0).has_value());  // full: sent now, and fails
    ASSERT_TRUE(eventually([&] { return !f->flush().has_value(); }));
  }
  auto attr = client_->getattr(client_->default_cred(), f->ino());
  ASSERT_TRUE(attr.has_value()) << attr.error();
  EXPECT_EQ(attr->size, 0u) << "the length counts writes that failed";
  std::vector<std::byte> back(cb);
  EXPECT_EQ(r->pread(back, 0).value_or(99), 0u);
  EXPECT_FALSE(f->close().has_value());
  EXPECT_TRUE(r->close().has_value());
}

// More partly written chunks than a File keeps buffered (kDirtyChunksMax):
// the write that makes one too many sends them all, and every byte lands.
TEST_F(ClientTest, ManyPartlyWrittenChunksAreAllSent) {
  std::string d = dir();
  auto f = open(d + "/sparse-many", O_CREAT | O_RDWR);
  ASSERT_TRUE(f);
  const uint64_t cb = f->layout().chunk_bytes;
  const int chunks = 40;
  auto data = pattern(16 * chunks, 34);
  for (int i = 0; i < chunks; ++i) {
    // Scattered, so the buffered chunks' map is not filled in order.
    uint64_t chunk = (uint64_t(i) * 17) % chunks;
    ASSERT_TRUE(f->pwrite(std::span(data).subspan(16 * chunk, 16), chunk * cb).has_value());
  }
  ASSERT_TRUE(f->close().has_value());
  auto g = open(d + "/sparse-many", O_RDONLY);
  ASSERT_TRUE(g);
  std::vector<std::byte> back(16);
  for (uint64_t chunk = 0; chunk < chunks; ++chunk) {
    ASSERT_EQ(g->pread(back, chunk * cb).value_or(0), 16u);
    EXPECT_TRUE(std::equal(back.begin(), back.end(), data.begin() + 16 * chunk)) << "chunk " << chunk;
  }
  ASSERT_TRUE(g->close().has_value());
}

// A batch read sees what Files of this client wrote and still buffer.
TEST_F(ClientTest, BatchReadsSeeTheClientsOwnBufferedWrites) {
  std::string d = dir();
  auto f = open(d + "/b", O_CREAT | O_WRONLY);
  ASSERT_TRUE(f);
  auto data = pattern(4096, 12);
  ASSERT_TRUE(f->pwrite(data, 0).has_value());
  std::vector<std::byte> dst(4096);
  ReadOp op;
  op.ino = f->ino();
  op.dst = dst;
  auto res = client_->read_batch(client_->default_cred(), std::span<const ReadOp>(&op, 1));
  ASSERT_TRUE(res[0].has_value()) << res[0].error();
  EXPECT_EQ(*res[0], 4096u);
  EXPECT_EQ(dst, data);
  ASSERT_TRUE(f->close().has_value());
}

// Another client replaces a directory (a checkpoint published by exchange)
// while this one has it in its path cache: a name only the new one has is
// found, and a directory looked up last leads the next path call into it.
TEST_F(ClientTest, PathsReachADirectoryAnotherClientJustReplaced) {
  std::string d = dir();
  const Cred& cred = client_->default_cred();
  auto other = connect_another();
  ASSERT_TRUE(other.has_value()) << other.error();
  Client& b = **other;
  ASSERT_TRUE(b.mkdirs(b.default_cred(), d + "/cur").has_value());
  ASSERT_TRUE(write_new_with(b, d + "/cur/old", pattern(10, 40)));
  ASSERT_TRUE(client_->resolve(cred, d + "/cur/old").has_value());  // cur is in this client's cache now
  for (int round = 0; round < 2; ++round) {
    // Round 1 writes a file of the name round 0's directory has too.
    std::string next = fmt::format("{}/next{}", d, round), name = "new";
    ASSERT_TRUE(b.mkdirs(b.default_cred(), next).has_value());
    ASSERT_TRUE(write_new_with(b, next + "/" + name, pattern(10, 41 + round)));
    auto np = b.resolve(b.default_cred(), d);
    ASSERT_TRUE(np.has_value());
    ASSERT_TRUE(b.rename(b.default_cred(), np->ino, fmt::format("next{}", round), np->ino, "cur",
                         RenameFlags::kExchange).has_value());
    if (round == 0) {
      auto found = client_->resolve(cred, d + "/cur/" + name);
      EXPECT_TRUE(found.has_value()) << "a stale cached directory: " << found.error();
    } else {
      // What weft.torch.load does: the directory's inode, then a file in it by path.
      auto cur = client_->resolve(cred, d + "/cur");
      ASSERT_TRUE(cur.has_value());
      auto f = client_->open_path(cred, d + "/cur/" + name, O_RDONLY, 0);
      ASSERT_TRUE(f.has_value()) << f.error();
      std::vector<std::byte> got(10);
      ASSERT_EQ((*f)->pread(got, 0).value_or(0), 10u);
      EXPECT_EQ(got, pattern(10, 42)) << "read below the directory replaced before";
      ASSERT_TRUE((*f)->close().has_value());
    }
  }
}

// A size of /proc/self/status in bytes (`field` "VmRSS:": resident now).
size_t status_bytes(std::string_view field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.starts_with(field)) return std::stoull(line.substr(field.size())) * 1024;
  return 0;
}
size_t resident_bytes() { return status_bytes("VmRSS:"); }

// Read-ahead of every File of a client together stays within its memory
// bound (inflight_bytes_max): it used to be bounded per File only, so many
// files read sequentially and kept open held window after window.
TEST_F(ClientTest, ReadAheadOfManyOpenFilesStaysWithinTheClientsBound) {
  std::string d = dir();
  constexpr int kFiles = 16;
  auto first = open(d + "/r0", O_CREAT | O_WRONLY);
  ASSERT_TRUE(first);
  const size_t cb = first->layout().chunk_bytes;
  ASSERT_TRUE(first->close().has_value());
  const auto data = pattern(8 * cb, 43);
  for (int i = 0; i < kFiles; ++i) {
    auto f = open(fmt::format("{}/r{}", d, i), O_CREAT | O_WRONLY);
    ASSERT_TRUE(f);
    ASSERT_TRUE(f->pwrite(data, 0).has_value());
    ASSERT_TRUE(f->close().has_value());
  }
  ClientOptions o;
  o.config_path = config_;
  o.inflight_bytes_max = 2 * cb;
  o.readahead_bytes_max = 8 * cb;
  auto c = Client::connect(o);
  ASSERT_TRUE(c.has_value()) << c.error();
  std::vector<std::shared_ptr<File>> open_files;
  std::vector<std::byte> buf(cb);
  const size_t before = resident_bytes();
  for (int i = 0; i < kFiles; ++i) {
    auto f = (*c)->open_path((*c)->default_cred(), fmt::format("{}/r{}", d, i), O_RDONLY, 0);
    ASSERT_TRUE(f.has_value()) << f.error();
    for (size_t k = 0; k < 3; ++k) {  // sequential: the window grows to 8 chunks
      ASSERT_EQ((*f)->pread(buf, k * cb).value_or(0), cb);
      EXPECT_TRUE(std::equal(buf.begin(), buf.end(), data.begin() + k * cb));
    }
    open_files.push_back(*f);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // read-ahead lands
  const size_t grown = resident_bytes() - before;
  EXPECT_LT(grown, kFiles * 2 * cb) << "read-ahead held " << grown / cb << " chunks for " << kFiles
                                   << " open files; the bound is 2";
  // Every file still reads right (streams without read-ahead read directly).
  for (int i = 0; i < kFiles; ++i) {
    for (size_t k = 3; k < 8; ++k) {
      ASSERT_EQ(open_files[i]->pread(buf, k * cb).value_or(0), cb);
      EXPECT_TRUE(std::equal(buf.begin(), buf.end(), data.begin() + k * cb)) << "file " << i << " chunk " << k;
    }
    ASSERT_TRUE(open_files[i]->close().has_value());
  }
}

// A batch's grouped reads stay within inflight_bytes_max (per batch):
// each group's reply (up to 16 MiB) is held whole before it is copied out,
// and every group used to start at once, so a batch of many GiB held as
// much. Here 48 chunks over three servers, a bound of two chunks: one group
// at a time.
TEST_F(ClientTest, ABatchReadsGroupsStayWithinInflightBytesMax) {
  std::string d = dir();
  auto first = open(d + "/b0", O_CREAT | O_WRONLY);
  ASSERT_TRUE(first);
  const size_t cb = first->layout().chunk_bytes;
  ASSERT_TRUE(first->close().has_value());
  constexpr int kFiles = 48;
  std::vector<std::vector<std::byte>> contents;
  for (int i = 0; i < kFiles; ++i) {
    contents.push_back(pattern(cb, 300 + i));
    ASSERT_TRUE(write_new(fmt::format("{}/g{}", d, i), contents.back()));
  }
  ClientOptions o;
  o.config_path = config_;
  o.inflight_bytes_max = 2 * cb;
  auto c = Client::connect(o);
  ASSERT_TRUE(c.has_value()) << c.error();
  std::vector<std::vector<std::byte>> bufs(kFiles, std::vector<std::byte>(cb, std::byte{1}));  // touched
  std::vector<ReadOp> ops;
  for (int i = 0; i < kFiles; ++i) {
    auto n = (*c)->resolve((*c)->default_cred(), fmt::format("{}/g{}", d, i));
    ASSERT_TRUE(n.has_value()) << n.error();
    ops.push_back(ReadOp{n->ino, 0, bufs[i], n->layout, n->size});
  }
  // Counted in RPC buffers held (by capacity), not resident memory: how
  // much of a reply buffer a group touches, and whether the pool or the heap
  // had it already, vary from run to run (power-of-two classes reused).
  Buffer::reset_pooled_peak();
  const size_t before = Buffer::pooled_bytes_held();
  auto results = (*c)->read_batch((*c)->default_cred(), ops);
  const size_t held = Buffer::pooled_bytes_peak() - before;
  for (int i = 0; i < kFiles; ++i) {
    ASSERT_TRUE(results[i].has_value()) << results[i].error();
    ASSERT_EQ(*results[i], cb);
    EXPECT_TRUE(bufs[i] == contents[i]) << "file " << i;
  }
  // One group's reply of up to 16 chunks at a time, and slack for this
  // process's other clients (all groups at once: 48 chunks).
  EXPECT_LT(held, 24 * cb) << "the batch's replies held " << held / cb << " chunks at their peak";
}

// A write racing a truncate of the same File lands wholly before the cut
// (cut away) or after it (kept, and inside the reported length): it used to
// be sent after the chunks were removed and then left out of the length, so
// its bytes came back when the file was extended again.
TEST_F(ClientTest, AWriteRacingATruncateIsWhollyBeforeOrAfterIt) {
  std::string d = dir();
  auto f = open(d + "/race", O_CREAT | O_RDWR);
  ASSERT_TRUE(f);
  const uint64_t cb = f->layout().chunk_bytes;
  const uint64_t at = 8 * cb;
  auto x = pattern(4096, 30);
  for (int round = 0; round < 20; ++round) {
    ASSERT_TRUE(f->truncate(16 * cb).has_value());
    std::thread writer([&] {
      std::this_thread::sleep_for(std::chrono::microseconds(500 * (round % 10)));
      EXPECT_TRUE(f->pwrite(x, at).has_value());
    });
    ASSERT_TRUE(f->truncate(0).has_value());
    writer.join();
    ASSERT_TRUE(f->fsync().has_value());
    auto n = client_->getattr(client_->default_cred(), f->ino());
    ASSERT_TRUE(n.has_value()) << n.error();
    bool kept = n->size >= at + x.size();
    ASSERT_TRUE(f->truncate(16 * cb).has_value());
    std::vector<std::byte> back(x.size());
    ASSERT_EQ(f->pread(back, at).value_or(0), x.size());
    if (kept) {
      EXPECT_EQ(back, x) << "round " << round << ": the write after the cut is lost";
    } else {
      EXPECT_EQ(std::count(back.begin(), back.end(), std::byte{0}), 4096)
          << "round " << round << ": bytes of a write outside the length came back after extension";
    }
  }
  ASSERT_TRUE(f->close().has_value());
}

// Read-ahead made while the file was shorter is not taken for holes once it
// grew: a reader at its old end sees what another File appended.
TEST_F(ClientTest, AReaderAtTheEndSeesWhatWasAppendedAfterItsReadAhead) {
  std::string d = dir();
  auto w = open(d + "/grow", O_CREAT | O_WRONLY);
  ASSERT_TRUE(w);
  const uint64_t cb = w->layout().chunk_bytes;
  auto first = pattern(cb + cb / 2, 31);
  ASSERT_TRUE(w->pwrite(first, 0).has_value());
  ASSERT_TRUE(w->close().has_value());
  auto r = open(d + "/grow", O_RDONLY);
  ASSERT_TRUE(r);
  std::vector<std::byte> buf(cb / 4);
  for (uint64_t off = 0; off < first.size(); off += buf.size()) {
    ASSERT_EQ(r->pread(buf, off).value_or(0), buf.size());  // sequential: reads ahead
  }
  ASSERT_EQ(r->pread(buf, first.size()).value_or(1), 0u);  // the end, for now
  auto more = pattern(cb / 4, 32);
  auto a = open(d + "/grow", O_WRONLY);
  ASSERT_TRUE(a);
  ASSERT_TRUE(a->pwrite(more, first.size()).has_value());
  ASSERT_TRUE(a->close().has_value());
  ASSERT_EQ(r->pread(buf, first.size()).value_or(0), more.size());
  EXPECT_EQ(buf, more) << "zeros from a read-ahead of the old tail";
  ASSERT_TRUE(r->close().has_value());
}

// Two Files of one inode in one client are coherent as two descriptors of a
// local file: a read through one sees what the other wrote before it, whether
// that is still buffered or replaced a chunk the reader had read ahead.
TEST_F(ClientTest, FilesOfOneInodeInOneClientSeeEachOthersWrites) {
  std::string d = dir();
  auto w0 = open(d + "/co", O_CREAT | O_WRONLY);
  ASSERT_TRUE(w0);
  const uint64_t cb = w0->layout().chunk_bytes;
  ASSERT_TRUE(w0->pwrite(pattern(4 * cb, 33), 0).has_value());
  ASSERT_TRUE(w0->close().has_value());
  auto r = open(d + "/co", O_RDONLY);
  ASSERT_TRUE(r);
  std::vector<std::byte> buf(cb / 2);
  ASSERT_EQ(r->pread(buf, 0).value_or(0), buf.size());
  ASSERT_EQ(r->pread(buf, cb / 2).value_or(0), buf.size());  // sequential: chunks 1.. read ahead
  auto w = open(d + "/co", O_WRONLY);
  ASSERT_TRUE(w);
  auto fresh = pattern(cb, 34);
  ASSERT_TRUE(w->pwrite(fresh, cb).has_value());
  ASSERT_TRUE(w->fsync().has_value());
  std::vector<std::byte> back(cb);
  ASSERT_EQ(r->pread(back, cb).value_or(0), back.size());
  EXPECT_EQ(back, fresh) << "a chunk read ahead before another File rewrote it";
  // Still buffered in the writer, and past the length meta knows.
  auto tail = pattern(100, 35);
  ASSERT_TRUE(w->pwrite(tail, 4 * cb).has_value());
  std::vector<std::byte> t(200);
  ASSERT_EQ(r->pread(t, 4 * cb).value_or(0), tail.size());
  t.resize(tail.size());
  EXPECT_EQ(t, tail);
  ASSERT_TRUE(w->close().has_value());
  ASSERT_TRUE(r->close().has_value());
}

// A writer whose file another client truncated reports its later writes even
// below the length it reported before (it used to skip the report, and its
// acknowledged bytes stayed outside the file); an overwrite moves mtime.
TEST_F(ClientTest, WritesAfterAnotherClientsTruncateAreReportedAndMoveMtime) {
  std::string d = dir();
  auto other = connect_another();
  ASSERT_TRUE(other.has_value()) << other.error();
  auto f = open(d + "/log", O_CREAT | O_WRONLY);
  ASSERT_TRUE(f);
  ASSERT_TRUE(f->pwrite(pattern(1u << 20, 36), 0).has_value());
  ASSERT_TRUE(f->fsync().has_value());
  auto t = (*other)->open_path((*other)->default_cred(), d + "/log", O_WRONLY | O_TRUNC, 0644);
  ASSERT_TRUE(t.has_value()) << t.error();
  ASSERT_TRUE((*t)->close().has_value());
  auto line = pattern(4096, 37);
  ASSERT_TRUE(f->pwrite(line, 0).has_value());
  ASSERT_TRUE(f->fsync().has_value());
  auto seen = (*other)->getattr((*other)->default_cred(), f->ino());
  ASSERT_TRUE(seen.has_value()) << seen.error();
  EXPECT_EQ(seen->size, line.size());
  int64_t before = seen->mtime_ns;
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(f->pwrite(pattern(10, 38), 0).has_value());  // inside the length
  ASSERT_TRUE(f->close().has_value());
  auto after = (*other)->getattr((*other)->default_cred(), f->ino());
  ASSERT_TRUE(after.has_value()) << after.error();
  EXPECT_GT(after->mtime_ns, before) << "an overwrite left mtime alone";
}

// A File open here (for reading, or for writing with every write reported)
// knows a length from before another client cut the file: it must not hide
// the cut from this client's stat, or from a reader here, who would read
// the old length's worth of zeros.
TEST_F(ClientTest, AnotherClientsTruncateIsSeenWhileFilesHereAreOpen) {
  std::string d = dir();
  auto other = connect_another();
  ASSERT_TRUE(other.has_value()) << other.error();
  ASSERT_TRUE(write_new_with(*client_, d + "/cut", pattern(1u << 20, 40)));
  auto reader = open(d + "/cut", O_RDONLY);
  auto writer = open(d + "/cut", O_WRONLY);
  ASSERT_TRUE(reader && writer);
  ASSERT_TRUE(writer->pwrite(pattern(4096, 41), 0).has_value());
  ASSERT_TRUE(writer->fsync().has_value());  // reported: nothing here is unknown to meta

  auto t = (*other)->open_path((*other)->default_cred(), d + "/cut", O_WRONLY | O_TRUNC, 0644);
  ASSERT_TRUE(t.has_value()) << t.error();
  auto fresh = pattern(10, 42);
  ASSERT_TRUE((*t)->pwrite(fresh, 0).has_value());
  ASSERT_TRUE((*t)->close().has_value());

  auto seen = client_->getattr(client_->default_cred(), reader->ino());
  ASSERT_TRUE(seen.has_value()) << seen.error();
  EXPECT_EQ(seen->size, fresh.size()) << "a File open here kept the old length";
  auto again = open(d + "/cut", O_RDONLY);
  ASSERT_TRUE(again);
  std::vector<std::byte> buf(1u << 20);
  auto n = again->pread(buf, 0);
  ASSERT_TRUE(n.has_value()) << n.error();
  ASSERT_EQ(*n, fresh.size()) << "read past the end another client cut";
  EXPECT_EQ(0, std::memcmp(buf.data(), fresh.data(), fresh.size()));
  // Writes here that meta has not heard of still count.
  ASSERT_TRUE(writer->pwrite(pattern(100, 43), 50).has_value());
  seen = client_->getattr(client_->default_cred(), reader->ino());
  ASSERT_TRUE(seen.has_value()) << seen.error();
  EXPECT_EQ(seen->size, 150u);
  // The File opened before the cut still thinks 1 MiB: its read meets the
  // hole past the new end, asks meta, and stops there.
  n = reader->pread(buf, 0);
  ASSERT_TRUE(n.has_value()) << n.error();
  ASSERT_EQ(*n, 150u);
  EXPECT_EQ(0, std::memcmp(buf.data(), fresh.data(), fresh.size()));
  EXPECT_TRUE(std::all_of(buf.begin() + 10, buf.begin() + 50, [](std::byte b) { return b == std::byte{0}; }));
  EXPECT_EQ(0, std::memcmp(buf.data() + 50, pattern(100, 43).data(), 100));
  EXPECT_EQ(reader->size(), 150u);
  EXPECT_TRUE(reader->close().has_value());
  EXPECT_TRUE(writer->close().has_value());
  EXPECT_TRUE(again->close().has_value());
}

// O_APPEND: appends through several Files of one client never land on one
// offset (every line is there once, whole).
TEST_F(ClientTest, AppendsOfOneClientDoNotOverwriteEachOther) {
  std::string d = dir();
  auto a = open(d + "/app", O_CREAT | O_WRONLY | O_APPEND);
  auto b = open(d + "/app", O_WRONLY | O_APPEND);
  ASSERT_TRUE(a && b);
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      File& f = t == 0 ? *a : *b;
      for (int i = 0; i < 50; ++i) {
        std::string line = fmt::format("{}:{:03}\n", t, i);
        EXPECT_TRUE(f.pwrite(std::as_bytes(std::span(line)), 0).has_value());
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_TRUE(a->close().has_value());
  ASSERT_TRUE(b->close().has_value());
  auto all = read_all(d + "/app");
  std::string text(reinterpret_cast<const char*>(all.data()), all.size());
  EXPECT_EQ(text.size(), 100u * 6);
  for (int t = 0; t < 2; ++t)
    for (int i = 0; i < 50; ++i) EXPECT_NE(text.find(fmt::format("{}:{:03}\n", t, i)), std::string::npos);
}

// A write through one File waits for what another File of the inode
// buffered over its range before it, never for what that one writes
// meanwhile (it waited for a buffer refilled during the send, which nothing
// sends until that File flushes).
TEST_F(ClientTest, AWriteDoesNotWaitForWhatAnotherFileWritesMeanwhile) {
  std::string d = dir();
  auto a = open(d + "/f", O_CREAT | O_RDWR);
  auto b = open(d + "/f", O_RDWR);
  ASSERT_TRUE(a && b);
  std::atomic<bool> stop{false};
  std::thread rewriter([&] {
    const auto data = pattern(4096, 1);
    while (!stop) EXPECT_TRUE(a->pwrite(data, 0).has_value());
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  auto write = std::async(std::launch::async, [&] { return b->pwrite(pattern(4096, 2), 0); });
  const bool done = write.wait_for(std::chrono::seconds(5)) == std::future_status::ready;
  stop = true;
  rewriter.join();
  if (!done) {
    ASSERT_TRUE(a->flush().has_value());  // lets it finish
  }
  EXPECT_TRUE(done) << "the write waited for the other File's later writes";
  EXPECT_TRUE(write.get().has_value());
  EXPECT_TRUE(a->close().has_value());
  EXPECT_TRUE(b->close().has_value());
}

// Access mode 3 (O_ACCMODE: Linux's open for ioctls only) needs read and
// write permission, as open(2) checks it, and O_TRUNC truncates (it was
// taken for neither: no check at all, and no truncate).
TEST_F(ClientTest, AccessModeThreeNeedsReadAndWritePermission) {
  std::string d = dir();
  ASSERT_TRUE(write_new(d + "/f", pattern(5000, 3)));
  Cred other{.uid = 4321, .gid = 4321, .groups = {}};
  auto readable = client_->open_path(other, d + "/f", O_RDONLY);
  ASSERT_TRUE(readable.has_value()) << readable.error();
  auto mode_3 = client_->open_path(other, d + "/f", O_ACCMODE);
  ASSERT_FALSE(mode_3.has_value()) << "opened without write permission";
  EXPECT_EQ(mode_3.error().posix_errno(), EACCES);
  auto truncating = client_->open_path(client_->default_cred(), d + "/f", O_ACCMODE | O_TRUNC);
  ASSERT_TRUE(truncating.has_value()) << truncating.error();
  ASSERT_TRUE((*truncating)->close().has_value());
  EXPECT_EQ(read_all(d + "/f").size(), 0u);
}

// A length report of this client that completes between meta's answer to
// a getattr or lookup and the client adding its unreported writes is in
// neither: the answer had the length from before those writes (the mount
// hands it to the kernel, and an O_APPEND writer's next write landed at that
// old end). Such an answer is asked for again.
TEST_F(ClientTest, AnAttributeAnswerOlderThanALengthReportHereIsAskedAgain) {
  std::string d = dir();
  const Cred& root = client_->default_cred();
  auto parent = client_->resolve(root, d);
  ASSERT_TRUE(parent.has_value()) << parent.error();
  auto f = open(d + "/f", O_CREAT | O_WRONLY);
  ASSERT_TRUE(f);
  for (uint64_t i = 0; i < 2; ++i) {
    const bool by_lookup = i == 1;
    ASSERT_TRUE(f->pwrite(pattern(1000, 61), i * 1000).has_value());  // buffered: not reported
    std::optional<fault::Scope> hold(std::in_place, "client.attr_answer.hold");
    auto answer = std::async(std::launch::async, [&] {
      return by_lookup ? client_->lookup(root, parent->ino, "f") : client_->getattr(root, f->ino());
    });
    while (hold->triggered() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ASSERT_TRUE(f->flush().has_value());  // meta's answer is in hand: the report completes after it
    hold.reset();
    auto n = answer.get();
    ASSERT_TRUE(n.has_value()) << n.error();
    EXPECT_EQ(n->size, (i + 1) * 1000) << (by_lookup ? "lookup" : "getattr");
  }
  ASSERT_TRUE(f->close().has_value());
}

// open and create with O_RDONLY | O_TRUNC truncate an existing file, as
// Linux does (the mount's CREATE for a name the kernel held as missing
// comes here); that needs write permission: EACCES, the file as it was.
TEST_F(ClientTest, ReadOnlyOpenOrCreateWithOTruncTruncates) {
  std::string d = dir();
  const Cred& root = client_->default_cred();
  Cred other{.uid = 4321, .gid = 4321, .groups = {}};
  for (int creating : {0, O_CREAT}) {
    const std::string f = d + (creating ? "/created" : "/opened");
    ASSERT_TRUE(write_new(f, pattern(5000, 3)));
    auto refused = client_->open_path(other, f, O_RDONLY | O_TRUNC | creating, 0644);
    ASSERT_FALSE(refused.has_value()) << f << ": truncated without write permission";
    EXPECT_EQ(refused.error().posix_errno(), EACCES) << refused.error();
    EXPECT_TRUE(read_all(f) == pattern(5000, 3)) << f << ": changed by the refused open";
    auto opened = client_->open_path(root, f, O_RDONLY | O_TRUNC | creating, 0644);
    ASSERT_TRUE(opened.has_value()) << f << ": " << opened.error();
    EXPECT_EQ((*opened)->size(), 0u) << f;
    ASSERT_TRUE((*opened)->close().has_value());
    EXPECT_EQ(read_all(f).size(), 0u) << f;
  }
}

// As read(2) on a descriptor opened O_WRONLY: EBADF, and nothing read. A
// page cache over the File (the mount's writeback_cache) reads through it
// with pread_page_fill.
// File::extend (fallocate through the mount) makes the length at least what
// it is given, reported to meta with the File's earlier writes before it
// returns; it never shortens; past the maximum EFBIG; a read-only File EBADF.
TEST_F(ClientTest, ExtendMakesTheLengthAtLeastItsArgument) {
  std::string d = dir();
  const Cred& root = client_->default_cred();
  auto f = open(d + "/f", O_CREAT | O_RDWR);
  ASSERT_TRUE(f);
  auto data = pattern(3000, 9);
  ASSERT_EQ(*f->pwrite(data, 0), data.size());  // buffered: neither sent nor reported yet
  constexpr uint64_t kLength = 1 << 20;
  ASSERT_TRUE(f->extend(kLength).has_value());
  auto seen = client_->resolve(root, d + "/f");
  ASSERT_TRUE(seen.has_value());
  EXPECT_EQ(seen->size, kLength);
  auto back = read_all(d + "/f");
  ASSERT_EQ(back.size(), kLength);
  EXPECT_TRUE(std::equal(data.begin(), data.end(), back.begin()));
  EXPECT_TRUE(std::all_of(back.begin() + data.size(), back.end(), [](std::byte b) { return b == std::byte{0}; }));

  ASSERT_TRUE(f->extend(10).has_value());
  {
    // A failed extend leaves no trace: not in this File's length, nor in a
    // later report (its flush or close).
    fault::Scope lost("client.report_length.lost");
    auto failed = f->extend(4 * kLength);
    ASSERT_FALSE(failed.has_value());
    if (lost.triggered() == 0) GTEST_SKIP() << "fault injection compiled out";
  }
  EXPECT_EQ(f->size(), kLength);
  ASSERT_TRUE(f->flush().has_value());
  auto too_far = f->extend(meta::kFileBytesMax + 1);
  ASSERT_FALSE(too_far.has_value());
  EXPECT_EQ(too_far.error().posix_errno(), EFBIG);
  ASSERT_TRUE(f->close().has_value());
  seen = client_->resolve(root, d + "/f");
  ASSERT_TRUE(seen.has_value());
  EXPECT_EQ(seen->size, kLength);

  auto r = open(d + "/f", O_RDONLY);
  ASSERT_TRUE(r);
  auto refused = r->extend(2 * kLength);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().posix_errno(), EBADF);
  ASSERT_TRUE(r->close().has_value());
}

TEST_F(ClientTest, AWriteOnlyFileRefusesReads) {
  std::string d = dir();
  auto data = pattern(5000, 4);
  ASSERT_TRUE(write_new(d + "/f", data));
  auto w = open(d + "/f", O_WRONLY);
  ASSERT_TRUE(w);
  EXPECT_FALSE(w->readable());
  EXPECT_TRUE(w->writable());
  std::vector<std::byte> buf(100, std::byte{7});
  auto refused = w->pread(buf, 0);
  ASSERT_FALSE(refused.has_value()) << "read " << *refused << " bytes through a write-only File";
  EXPECT_EQ(refused.error().posix_errno(), EBADF) << refused.error();
  EXPECT_TRUE(std::all_of(buf.begin(), buf.end(), [](std::byte b) { return b == std::byte{7}; }));
  auto filled = w->pread_page_fill(buf, 0);
  ASSERT_TRUE(filled.has_value()) << filled.error();
  EXPECT_EQ(*filled, buf.size());
  EXPECT_TRUE(std::equal(buf.begin(), buf.end(), data.begin()));
  ASSERT_TRUE(w->close().has_value());

  auto rw = open(d + "/f", O_RDWR);
  ASSERT_TRUE(rw);
  EXPECT_TRUE(rw->readable() && rw->writable());
  auto n = rw->pread(buf, 0);
  ASSERT_TRUE(n.has_value()) << n.error();
  EXPECT_EQ(*n, buf.size());
  ASSERT_TRUE(rw->close().has_value());
  auto r = open(d + "/f", O_RDONLY);
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->readable() && !r->writable());
  ASSERT_TRUE(r->close().has_value());
}

// A File closed here still counts for the Files of its inode left open
// here: an append through one that knew an older length goes after what the
// closed one wrote (it went over it), and a read through one sees it (it
// came back short in the middle of the file).
TEST_F(ClientTest, AFileClosedHereStillCountsForItsSiblingsAppendsAndReads) {
  std::string d = dir();
  const std::string start = "0123456789";
  auto w = open(d + "/app", O_CREAT | O_WRONLY);
  ASSERT_TRUE(w && w->pwrite(std::as_bytes(std::span(start)), 0).has_value() && w->close().has_value());
  auto a = open(d + "/app", O_WRONLY | O_APPEND);
  auto b = open(d + "/app", O_WRONLY | O_APPEND);
  auto r = open(d + "/app", O_RDONLY);
  ASSERT_TRUE(a && b && r);
  std::vector<std::byte> buf(400);
  ASSERT_EQ(r->pread(buf, 0).value_or(0), start.size());
  std::string first(100, 'A'), second(50, 'B');
  ASSERT_TRUE(a->pwrite(std::as_bytes(std::span(first)), 0).has_value());
  ASSERT_TRUE(a->close().has_value());
  auto n = r->pread(buf, 0);
  ASSERT_TRUE(n.has_value()) << n.error();
  EXPECT_EQ(*n, start.size() + first.size()) << "a read missed what a File closed here wrote";
  ASSERT_TRUE(b->pwrite(std::as_bytes(std::span(second)), 0).has_value());
  ASSERT_TRUE(b->close().has_value());
  auto all = read_all(d + "/app");
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(all.data()), all.size()), start + first + second);
  // A truncate here lowers what closed Files count: the next append goes at the new end.
  auto c = open(d + "/app", O_WRONLY | O_APPEND);
  auto e = open(d + "/app", O_WRONLY);
  ASSERT_TRUE(c && e);
  ASSERT_TRUE(c->pwrite(std::as_bytes(std::span(first)), 0).has_value());
  ASSERT_TRUE(c->close().has_value());
  ASSERT_TRUE(e->truncate(10).has_value());
  ASSERT_TRUE(e->pwrite(std::as_bytes(std::span(second)), 0).has_value()) << "not an append: offset 0";
  auto f = open(d + "/app", O_WRONLY | O_APPEND);
  ASSERT_TRUE(f);
  const std::string z = "Z";
  ASSERT_TRUE(f->pwrite(std::as_bytes(std::span(z)), 0).has_value());
  ASSERT_TRUE(f->close().has_value());
  ASSERT_TRUE(e->close().has_value());
  all = read_all(d + "/app");
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(all.data()), all.size()), second + "Z");
}

// An extend (fallocate) here makes the file that long for its siblings too:
// an append through another File goes after it, a read sees up to it.
TEST_F(ClientTest, AnExtendHereCountsForItsSiblingsAppendsAndReads) {
  std::string d = dir();
  const std::string start = "0123456789";
  ASSERT_TRUE(write_new(d + "/ext", std::as_bytes(std::span(start))));
  auto a = open(d + "/ext", O_WRONLY | O_APPEND);
  auto e = open(d + "/ext", O_WRONLY);
  auto r = open(d + "/ext", O_RDONLY);
  ASSERT_TRUE(a && e && r);
  ASSERT_TRUE(e->extend(100).has_value());
  std::vector<std::byte> buf(400);
  auto n = r->pread(buf, 0);
  ASSERT_TRUE(n.has_value()) << n.error();
  EXPECT_EQ(*n, 100u) << "a read missed the extension made here";
  const std::string xy = "xy";
  ASSERT_TRUE(a->pwrite(std::as_bytes(std::span(xy)), 0).has_value());
  ASSERT_TRUE(a->close().has_value());
  ASSERT_TRUE(e->close().has_value());
  ASSERT_TRUE(r->close().has_value());
  auto all = read_all(d + "/ext");
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(all.data()), all.size()),
            start + std::string(90, '\0') + xy)
      << "the append landed inside the extension";
}

// The last reference going away without close() closes the File, flushing
// what it buffered (it used to abort the process: std::bad_weak_ptr). Sends
// in flight hold references too, so the close may come a moment later.
TEST_F(ClientTest, AFileDroppedWithoutCloseIsFlushedAndClosed) {
  std::string d = dir();
  auto data = pattern((3u << 20) + 5000, 13);  // three full chunks and a partial one
  {
    auto f = open(d + "/drop", O_CREAT | O_WRONLY);
    ASSERT_TRUE(f);
    ASSERT_TRUE(f->pwrite(data, 0).has_value());
  }
  std::vector<std::byte> back;
  for (int i = 0; i < 500 && (back = read_all(d + "/drop")) != data; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(back.size(), data.size());
  EXPECT_TRUE(back == data);
}

// A File dropped without close() while a send's completion holds it (telling
// the inode's other Files here that a chunk was written) loses its last
// reference on that I/O thread. Its close must not run there: its call to
// meta waited for the thread it blocked, and every later call of the client
// hung. It closes off the I/O threads, and its session ends.
TEST_F(ClientTest, AFileWhoseLastReferenceASendCompletionHoldsClosesOffTheIoThreads) {
  std::string d = dir();
  const Cred& cred = client_->default_cred();
  ClientOptions o;
  o.config_path = config_;
  o.io_threads = 1;  // a call from that thread always waits for itself
  auto c = Client::connect(o);
  ASSERT_TRUE(c.has_value()) << c.error();
  auto a = (*c)->open_path(cred, d + "/f", O_CREAT | O_RDWR, 0644);
  ASSERT_TRUE(a.has_value()) << a.error();
  auto b = (*c)->open_path(cred, d + "/f", O_WRONLY, 0644);
  ASSERT_TRUE(b.has_value()) << b.error();
  const Ino ino = (*a)->ino();
  ASSERT_TRUE(client_->remove_path(cred, d + "/f").has_value());  // destroyed once both sessions end
  {
    fault::Scope hold("client.chunk_written.hold");
    ASSERT_TRUE((*a)->pwrite(pattern((*a)->layout().chunk_bytes, 31), 0).has_value());  // full: sent now
    ASSERT_TRUE(eventually([&] { return hold.triggered() > 0; }));
    b->reset();  // the completion, held at the fault point, has the last reference
  }
  // A hung client can be neither used nor destroyed: watched, and leaked if it hangs.
  auto closed = std::make_shared<std::promise<Result<void>>>();
  auto done = closed->get_future();
  std::thread([closed, f = *a] { closed->set_value(f->close()); }).detach();
  a->reset();
  if (done.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
    c->release();
    FAIL() << "close still waiting after 30 s: the client hangs";
  }
  EXPECT_TRUE(done.get().has_value());
  EXPECT_TRUE(eventually([&] {
    auto n = client_->getattr(cred, ino);
    return !n && n.error().code() == Code::kNotFound;
  })) << "the dropped File's session never ended";
}

// A File the user drops without close() is closed by the drop, while its
// siblings can still see it (their truncates and reads wait for its
// writes): not later by whatever dropped its last reference, a send's
// completion here, when the length its close reports could come after a
// sibling's truncate.
TEST_F(ClientTest, AFileDroppedWithoutCloseIsClosedByTheDrop) {
  std::string d = dir();
  const Cred& cred = client_->default_cred();
  auto f = open(d + "/f", O_CREAT | O_WRONLY | O_EXCL);
  ASSERT_TRUE(f);
  const Ino ino = f->ino();
  const auto data = pattern(f->layout().chunk_bytes, 41);
  std::optional<fault::Scope> hold(std::in_place, "client.chunk_written.hold");
  ASSERT_TRUE(f->pwrite(data, 0).has_value());  // a full chunk: sent now, its completion held
  ASSERT_TRUE(eventually([&] { return hold->triggered() > 0; }));
  std::thread release([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    hold.reset();
  });
  f.reset();  // waits for the send and the close
  auto n = client_->getattr(cred, ino);
  release.join();
  ASSERT_TRUE(n.has_value()) << n.error();
  EXPECT_EQ(n->size, data.size()) << "the drop returned before the File was closed";
  EXPECT_EQ(read_all(d + "/f"), data);
}

// A length meta gave for an ask made before a truncate here does not raise
// the File's length after it: the File's appends then went at the old end,
// past zeros.
TEST_F(ClientTest, ALengthAskedBeforeATruncateHereDoesNotComeBackAfterIt) {
  std::string d = dir();
  ASSERT_TRUE(write_new(d + "/f", pattern(1000, 5)));
  auto f = open(d + "/f", O_RDWR | O_APPEND);
  ASSERT_TRUE(f);
  std::optional<fault::Scope> hold(std::in_place, "client.refresh_size.hold");
  std::promise<Result<uint64_t>> refreshed;
  auto answer = refreshed.get_future();
  std::thread asker([&] { refreshed.set_value(f->refresh_size()); });  // meta says 1000, held before it counts
  ASSERT_TRUE(eventually([&] { return hold->triggered() > 0; }));
  auto cut = f->truncate(0);
  hold.reset();
  asker.join();
  ASSERT_TRUE(cut.has_value()) << cut.error();
  ASSERT_TRUE(answer.get().has_value());
  EXPECT_EQ(f->size(), 0u) << "the length from before the truncate came back";
  const auto tail = pattern(3, 6);
  ASSERT_TRUE(f->pwrite(tail, 0).has_value());  // O_APPEND: at the end
  ASSERT_TRUE(f->close().has_value());
  EXPECT_EQ(read_all(d + "/f"), tail);
}

// POSIX's "an open file outlives its last link", for readers too: a file
// replaced (renamed over) by another client while a File has it open here
// keeps its data until that File closes (the client names its open files to
// meta, whose chunk GC leaves them alone: meta/read_holds.h), and so does
// every other reader meanwhile. Once nobody holds it the data goes, and a
// reader without holds (ClientOptions::hold_open_files off) then fails with
// kStaleHandle (ESTALE) instead of reading zeros, File and batch reads
// alike. A hole in a file that still exists reads as zeros, as ever.
TEST_F(ClientTest, AFileReplacedWhileOpenKeepsItsDataUntilItsReaderCloses) {
  std::string d = dir();
  const Cred& cred = client_->default_cred();
  auto data = pattern(3u << 20, 21);
  auto other_data = pattern(4096, 22);
  // The control file first: a lower inode, which a GC pass looks at first.
  ASSERT_TRUE(write_new(d + "/control", other_data));
  ASSERT_TRUE(write_new(d + "/doomed", data));
  auto control = client_->resolve(cred, d + "/control");
  ASSERT_TRUE(control.has_value()) << control.error();
  ClientOptions o;
  o.config_path = config_;
  o.hold_open_files = false;
  auto unholding = Client::connect(o);
  ASSERT_TRUE(unholding.has_value()) << unholding.error();
  auto held = open(d + "/doomed", O_RDONLY);
  ASSERT_TRUE(held);
  auto unheld = (*unholding)->open_path(cred, d + "/doomed", O_RDONLY, 0);
  ASSERT_TRUE(unheld.has_value()) << unheld.error();
  std::vector<std::byte> buf(4096);
  ASSERT_EQ(held->pread(buf, 0).value_or(0), 4096u);
  ASSERT_EQ((*unheld)->pread(buf, 0).value_or(0), 4096u);

  // Another client replaces it, then removes the control file.
  ASSERT_TRUE(write_new_with(**unholding, d + "/new", other_data));
  ASSERT_TRUE((*unholding)->rename_path(cred, d + "/new", d + "/doomed").has_value());
  ASSERT_TRUE((*unholding)->remove_path(cred, d + "/control").has_value());
  // The GC takes the control file (a batch read of it, with its layout and
  // length known from before as a dataset has them, fails once it did) and
  // so looked at the replaced file in that pass or the next: it left it.
  Result<size_t> r = 0u;
  ASSERT_TRUE(eventually([&] {
    r = read_known(*control, other_data.size(), 0, buf);
    return !r.has_value();
  }, 30s)) << "the GC never took the control file";
  EXPECT_EQ(r.error().code(), Code::kStaleHandle) << r.error();
  std::this_thread::sleep_for(2500ms);  // passes from the queue's front (1 s apart once they finish nothing)
  if (dir_) {
    EXPECT_GE(meta_metric("weft_meta_read_holds_files").value_or(0), 1) << "meta's /metrics shows the hold";
    EXPECT_GE(meta_metric("weft_meta_gc_files_collected").value_or(0), 1);
  }
  std::vector<std::byte> all(data.size());
  ASSERT_EQ(held->pread(all, 0).value_or(0), data.size());
  EXPECT_TRUE(all == data) << "a replaced file open here lost its data";
  std::fill(all.begin(), all.end(), std::byte{0});
  ASSERT_EQ((*unheld)->pread(all, 0).value_or(0), data.size()) << "another client's hold keeps it for every reader";
  EXPECT_TRUE(all == data);

  // The holder closes: the data goes, and the reader without holds learns it.
  const Inode opened = held->opened();
  ASSERT_TRUE(held->close().has_value());
  ASSERT_TRUE(eventually([&] {
    r = (*unheld)->pread(buf, 2u << 20);
    if (r) {
      EXPECT_TRUE(std::equal(buf.begin(), buf.end(), data.begin() + (2u << 20)));
    }
    return !r.has_value();
  }, 30s)) << "still reading 30 s after the last holder closed: the GC never took the chunks?";
  EXPECT_EQ(r.error().code(), Code::kStaleHandle) << r.error();
  r = read_known(opened, data.size(), 2u << 20, buf);
  ASSERT_FALSE(r.has_value()) << "a removed file read as zeros";
  EXPECT_EQ(r.error().code(), Code::kStaleHandle) << r.error();
  EXPECT_EQ(read_all(d + "/doomed"), other_data) << "the name holds the file that replaced it";

  auto g = open(d + "/sparse", O_CREAT | O_RDWR);
  ASSERT_TRUE(g);
  ASSERT_TRUE(g->pwrite(std::span(data).first(10), 3u << 20).has_value());
  ASSERT_TRUE(g->fsync().has_value());
  std::vector<std::byte> hole(4096, std::byte{1});
  ASSERT_EQ(g->pread(hole, 1u << 20).value_or(0), 4096u);
  EXPECT_EQ(std::count(hole.begin(), hole.end(), std::byte{0}), 4096);
  ASSERT_TRUE(g->close().has_value());
}

// A client that shuts down tells meta it holds nothing any more (holds go
// at once, not read_hold_ms later, and the space of files removed meanwhile
// comes back sooner).
TEST_F(ClientTest, AClientThatShutsDownReleasesItsReadHoldsAtOnce) {
  if (dir_ == nullptr) GTEST_SKIP() << "needs the cluster this test starts (its meta's /metrics)";
  std::string d = dir();
  const Cred& cred = client_->default_cred();
  ASSERT_TRUE(write_new(d + "/f", pattern(4096, 41)));
  // Other clients' holds first settle (the fixture's client may still have to
  // tell meta it closed an earlier test's files: within a renewal, 1.25 s).
  double before = -1;
  ASSERT_TRUE(eventually([&] {
    const double was = before;
    std::this_thread::sleep_for(1500ms);
    before = meta_metric("weft_meta_read_holds_clients").value_or(-1);
    return before >= 0 && before == was;
  }, 20s)) << "the number of holding clients never settled";
  ClientOptions o;
  o.config_path = config_;
  auto reader = Client::connect(o);
  ASSERT_TRUE(reader.has_value()) << reader.error();
  auto f = (*reader)->open_path(cred, d + "/f", O_RDONLY, 0);
  ASSERT_TRUE(f.has_value()) << f.error();
  ASSERT_TRUE(eventually([&] { return meta_metric("weft_meta_read_holds_clients").value_or(0) == before + 1; }, 10s))
      << "the reader's first renewal never reached meta";
  reader->reset();  // the File still open: the client closes it as it shuts down
  EXPECT_EQ(meta_metric("weft_meta_read_holds_clients").value_or(-1), before)
      << "the holds of a client that shut down stay until they expire";
  f->reset();  // closed by the client already: its last reference only frees it
}

// A restarted meta has lost every client's read holds (they live in its
// memory only): it collects nothing for read_hold_ms after it starts
// serving, by which time the reader here has renewed. The replaced file was
// queued longer than read_hold_ms before the restart, so only that window and
// the renewal keep it: the GC's first pass runs as meta starts. A second
// control file, removed after the restart, shows the GC passed over it.
TEST_F(ClientTest, ARestartedMetaLearnsTheHoldsAgainBeforeItCollects) {
  if (dir_ == nullptr) GTEST_SKIP() << "needs the cluster this test starts";
  std::string d = dir();
  const Cred& cred = client_->default_cred();
  auto data = pattern(2u << 20, 31);
  auto small = pattern(4096, 32);
  ASSERT_TRUE(write_new(d + "/control1", small));
  ASSERT_TRUE(write_new(d + "/doomed", data));
  ASSERT_TRUE(write_new(d + "/control2", small));
  auto control1 = client_->resolve(cred, d + "/control1");
  auto control2 = client_->resolve(cred, d + "/control2");
  ASSERT_TRUE(control1.has_value() && control2.has_value());
  auto held = open(d + "/doomed", O_RDONLY);
  ASSERT_TRUE(held);
  std::vector<std::byte> buf(4096);
  auto gone = [&](const Inode& f) { return !read_known(f, small.size(), 0, buf).has_value(); };
  ASSERT_TRUE(client_->remove_path(cred, d + "/doomed").has_value());
  ASSERT_TRUE(client_->remove_path(cred, d + "/control1").has_value());
  ASSERT_TRUE(eventually([&] { return gone(*control1); }, 30s)) << "the GC never took the first control file";

  std::ifstream pidfile(data_ + "/run/meta.pid");
  pid_t pid = 0;
  pidfile >> pid;
  ASSERT_GT(pid, 0);
  // However this test ends, meta serves again for the tests after it.
  struct Restart {
    ~Restart() { run(fmt::format("{} up --data-dir {} > /dev/null 2>&1", weft_bin(), data_)); }
  } restart;
  ASSERT_EQ(::kill(pid, SIGTERM), 0);
  ASSERT_TRUE(eventually([&] { return !testing::pid_alive(pid); }, 30s)) << "meta did not stop";
  ASSERT_EQ(run(fmt::format("{} up --data-dir {} > /dev/null 2>&1", weft_bin(), data_)), 0);
  ASSERT_TRUE(client_->remove_path(cred, d + "/control2").has_value());  // retried until meta answers
  ASSERT_TRUE(eventually([&] { return gone(*control2); }, 30s)) << "the GC never took the second control file";
  std::this_thread::sleep_for(2500ms);  // passes from the queue's front (1 s apart once they finish nothing)
  std::vector<std::byte> all(data.size());
  ASSERT_EQ(held->pread(all, 0).value_or(0), data.size());
  EXPECT_TRUE(all == data) << "the restarted meta collected a file a reader here holds";
  ASSERT_TRUE(held->close().has_value());
}

TEST_F(ClientTest, ReadsAndWritesCarryOnWhileAStorageServerDies) {
  if (dir_ == nullptr) GTEST_SKIP() << "needs the cluster this test starts";
  std::string d = dir();
  auto data = pattern(8 * 1024 * 1024, 9);
  auto f = open(d + "/survivor", O_CREAT | O_WRONLY);
  ASSERT_TRUE(f);
  ASSERT_TRUE(f->pwrite(data, 0).has_value());
  ASSERT_TRUE(f->close().has_value());
  std::ifstream pidfile(data_ + "/run/storage-1.pid");
  pid_t pid = 0;
  pidfile >> pid;
  ASSERT_GT(pid, 0);
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  // Reads fail over to the other replica at once.
  EXPECT_EQ(read_all(d + "/survivor"), data);
  // Writes wait for mgmtd to take the dead server out of its chains, then go on.
  auto g = open(d + "/after-kill", O_CREAT | O_WRONLY);
  ASSERT_TRUE(g);
  ASSERT_TRUE(g->pwrite(data, 0).has_value());
  auto closed = g->close();
  ASSERT_TRUE(closed.has_value()) << closed.error();
  EXPECT_EQ(read_all(d + "/after-kill"), data);
  // `weft up` restarts the dead server; everything still reads back.
  ASSERT_EQ(run(fmt::format("{} up --data-dir {} > /dev/null 2>&1", weft_bin(), data_)), 0);
  EXPECT_EQ(read_all(d + "/survivor"), data);
  EXPECT_EQ(read_all(d + "/after-kill"), data);
}

}  // namespace
}  // namespace weft
