// Crash consistency with a real SIGKILL: a child process streams versioned
// updates and reports each acknowledged commit; the parent kills it
// mid-stream, reopens the target and checks that every acknowledged update
// survived and that no chunk is torn (each is exactly some version's content).
// The child punches every freed slot as it goes (crash_model.h), so kills
// also land between a free and its punch and between a punch and the slot's
// reuse; the check punches whatever the reopen found free before reading.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <thread>

#include "storage/crash_model.h"

namespace weft::storage {
namespace {

std::string helper_path() {
  return (std::filesystem::read_symlink("/proc/self/exe").parent_path() / "storage_crash_helper").string();
}

// Runs the helper until `acks_min` new acknowledgements arrived (then a
// little longer), SIGKILLs it and returns the highest acked version per chunk.
void run_and_kill(const std::string& dir, size_t acks_min, int delay_ms, std::map<uint64_t, uint64_t>& acked) {
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::dup2(fds[1], 3);  // dup2 clears O_CLOEXEC on the copy
    std::string exe = helper_path();
    ::execl(exe.c_str(), exe.c_str(), dir.c_str(), "3", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(fds[1]);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  size_t got = 0;
  testing::CrashRecord rec{};
  while (got < acks_min && std::chrono::steady_clock::now() < deadline) {
    if (::read(fds[0], &rec, sizeof rec) != sizeof rec) break;
    acked[rec.index] = std::max(acked[rec.index], rec.version);
    ++got;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  while (::read(fds[0], &rec, sizeof rec) == sizeof rec) acked[rec.index] = std::max(acked[rec.index], rec.version);
  ::close(fds[0]);
  ASSERT_GE(got, acks_min) << "helper did not make progress (exit status " << status << ")";
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "helper ended on its own: " << status;
}

void check_target(const std::string& dir, const std::map<uint64_t, uint64_t>& acked) {
  metrics::Registry registry;
  auto engine = ChunkEngine::open(dir, testing::crash_engine_options(), registry);
  ASSERT_TRUE(engine.has_value()) << engine.error();
  // Free slots found at open (maybe punched, maybe not) are punched now:
  // nothing live may be among them.
  auto punched = (*engine)->punch_free_slots();
  ASSERT_TRUE(punched.has_value()) << punched.error();
  EXPECT_EQ((*engine)->unpunched_free_bytes(), 0u);
  for (uint64_t index = 0; index < testing::kCrashThreads * testing::kCrashChunksPerThread; ++index) {
    ChunkId id{testing::kCrashInode, index};
    auto it = acked.find(index);
    uint64_t acked_version = it == acked.end() ? 0 : it->second;
    auto info = (*engine)->stat(id);
    if (!info) {
      EXPECT_EQ(acked_version, 0u) << "acknowledged chunk " << index << " lost: " << info.error();
      continue;
    }
    // The acked version, or the one in flight when the kill landed.
    EXPECT_TRUE(info->version == acked_version || info->version == acked_version + 1)
        << index << ": version " << info->version << ", acked " << acked_version;
    auto read = (*engine)->read(id, 0, testing::kCrashChunkBytes);
    ASSERT_TRUE(read.has_value()) << read.error();
    auto expected = testing::crash_content(index, info->version);
    EXPECT_TRUE(std::equal(read->data().begin(), read->data().end(), expected.begin(), expected.end()))
        << "chunk " << index << " torn at version " << info->version;
    EXPECT_TRUE((*engine)->verify(id).has_value());
  }
  auto index_bytes = (*engine)->index_bytes();
  ASSERT_TRUE(index_bytes.has_value());
  EXPECT_EQ((*engine)->used_bytes(), *index_bytes);
}

TEST(ChunkEngineCrash, AcknowledgedWritesSurviveSigkillAndNothingIsTorn) {
  ASSERT_TRUE(std::filesystem::exists(helper_path())) << helper_path();
  testing::TempDir dir;
  std::map<uint64_t, uint64_t> acked;
  int delays_ms[] = {0, 3, 11, 1};
  for (int cycle = 0; cycle < 4; ++cycle) {
    SCOPED_TRACE(cycle);
    run_and_kill(dir.path(), 60, delays_ms[cycle], acked);
    check_target(dir.path(), acked);
    if (HasFatalFailure()) return;
  }
  size_t total = 0;
  for (auto& [i, v] : acked) total += v;
  EXPECT_GE(total, 240u);
}

}  // namespace
}  // namespace weft::storage
