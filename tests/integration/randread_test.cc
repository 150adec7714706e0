// Small random reads through libweft from many caller threads (each 4 KiB
// pread runs on its caller's thread over that thread's own connections,
// client/file_impl.h read_chunk_here): the bytes are right, a killed
// replica is skipped at once, and replicas answering with errors (injected
// checksum failures) are failed over and retried until the data is good.
#include <fcntl.h>
#include <signal.h>

#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <random>
#include <thread>

#include "process.h"
#include "weft/client.h"

namespace weft {
namespace {

using weft::testing::TempDir;

constexpr size_t kFileBytes = 24u << 20;  // several 1 MiB chunks on every chain
constexpr size_t kBlock = 4096;

std::vector<std::byte> pattern(size_t n) {
  std::vector<std::byte> v(n);
  std::mt19937_64 rng(42);
  for (size_t i = 0; i < n; i += 8) {
    uint64_t x = rng();
    for (size_t k = 0; k < 8 && i + k < n; ++k) v[i + k] = static_cast<std::byte>(x >> (8 * k));
  }
  return v;
}

class RandReadTest : public ::testing::Test {
 protected:
  // A 3-server, 2-replica cluster; `env` is put before `weft up` (its servers inherit it).
  void start(const std::string& env = "") {
    data_ = dir_.path() + "/cluster";
    std::string cmd = fmt::format("{} {} up --data-dir {} --storage-servers 3 --targets-per-server 2 --replicas 2 > {}/up.log 2>&1",
                                  env, weft::testing::weft_binary(), data_, dir_.path());
    ASSERT_EQ(std::system(cmd.c_str()), 0) << "weft up failed, see " << dir_.path() << "/up.log";
    ClientOptions o;
    o.config_path = data_ + "/client.toml";
    o.retry_time_ms_max = 30000;
    auto c = Client::connect(o);
    ASSERT_TRUE(c.has_value()) << c.error();
    client_ = std::move(*c);
    auto f = client_->open_path(client_->default_cred(), "/data", O_CREAT | O_WRONLY, 0644);
    ASSERT_TRUE(f.has_value()) << f.error();
    ASSERT_TRUE((*f)->pwrite(data_bytes_, 0).has_value());
    ASSERT_TRUE((*f)->close().has_value());
  }
  void TearDown() override {
    client_.reset();
    if (!data_.empty()) weft::testing::stop_cluster(data_);
  }

  // `threads` threads each read `reads` random aligned 4 KiB blocks; returns the wrong ones.
  int random_reads(int threads, int reads) {
    auto f = client_->open_path(client_->default_cred(), "/data", O_RDONLY);
    EXPECT_TRUE(f.has_value()) << f.error();
    if (!f) return -1;
    std::atomic<int> wrong{0};
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        std::mt19937_64 rng(static_cast<uint64_t>(t) + 1);
        std::vector<std::byte> buf(kBlock);
        for (int i = 0; i < reads; ++i) {
          uint64_t off = (rng() % (kFileBytes / kBlock)) * kBlock;
          auto n = (*f)->pread(buf, off);
          if (!n || *n != kBlock || !std::equal(buf.begin(), buf.end(), data_bytes_.begin() + static_cast<long>(off))) {
            if (!n) ADD_FAILURE() << "read at " << off << ": " << n.error();
            wrong.fetch_add(1);
          }
        }
      });
    }
    for (auto& w : workers) w.join();
    return wrong.load();
  }

  TempDir dir_;
  std::string data_;
  std::unique_ptr<Client> client_;
  const std::vector<std::byte> data_bytes_ = pattern(kFileBytes);
};

TEST_F(RandReadTest, ManyThreadsReadTheRightBytesAndSkipAKilledReplica) {
  ASSERT_NO_FATAL_FAILURE(start());
  EXPECT_EQ(random_reads(8, 300), 0);
  std::ifstream pidfile(data_ + "/run/storage-2.pid");
  pid_t pid = 0;
  pidfile >> pid;
  ASSERT_GT(pid, 0);
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  // Every chain still has a serving replica: the reads go on, on the other one.
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(random_reads(8, 300), 0);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
}

TEST_F(RandReadTest, ReplicasAnsweringChecksumErrorsAreFailedOverUntilTheDataIsGood) {
  // Every storage server fails a third of its reads with a checksum error.
  ASSERT_NO_FATAL_FAILURE(start("WEFT_FAULTS=storage.read.crc_mismatch=0.33:-1:0"));
  EXPECT_EQ(random_reads(4, 200), 0);
}

TEST_F(RandReadTest, AFailedReadAheadDoesNotFailTheReadBehindIt) {
  // Sequential reads make the client read whole chunks ahead; with a third of
  // all 4 KiB block checks failing, a whole-chunk read (256 blocks) almost
  // never passes on either replica, while each small read passes in a few
  // tries. Every read must still return the right bytes.
  ASSERT_NO_FATAL_FAILURE(start("WEFT_FAULTS=storage.read.crc_mismatch=0.33:-1:0"));
  auto f = client_->open_path(client_->default_cred(), "/data", O_RDONLY);
  ASSERT_TRUE(f.has_value()) << f.error();
  std::vector<std::byte> buf(kBlock);
  for (uint64_t off = 0; off < (3u << 20); off += 16 * kBlock) {
    for (uint64_t k = 0; k < 2; ++k) {  // two reads in a row: the second is sequential
      auto n = (*f)->pread(buf, off + k * kBlock);
      ASSERT_TRUE(n.has_value()) << "read at " << off + k * kBlock << ": " << n.error();
      ASSERT_EQ(*n, kBlock);
      ASSERT_TRUE(std::equal(buf.begin(), buf.end(), data_bytes_.begin() + static_cast<long>(off + k * kBlock)));
    }
  }
}

}  // namespace
}  // namespace weft
