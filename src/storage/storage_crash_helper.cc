// Child process of chunk_engine_crash_test: applies the crash_model update
// stream to the engine in argv[1] from several threads (even threads: stage +
// commit; odd threads: write(), whose slot and index syncs are grouped with
// the other writers') and reports every acknowledged commit on fd argv[2],
// until it is killed.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "storage/crash_model.h"

using namespace weft::storage;

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s <target dir> <report fd>\n", argv[0]);
    return 2;
  }
  int report_fd = std::atoi(argv[2]);
  auto engine = ChunkEngine::open(argv[1], testing::crash_engine_options());
  if (!engine) {
    std::fprintf(stderr, "open: %s\n", engine.error().to_string().c_str());
    return 1;
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < testing::kCrashThreads; ++t) {
    threads.emplace_back([&, t] {
      for (;;) {
        for (int c = 0; c < testing::kCrashChunksPerThread; ++c) {
          uint64_t index = uint64_t(t) * testing::kCrashChunksPerThread + c;
          ChunkId id{testing::kCrashInode, index};
          auto info = (*engine)->stat(id);
          uint64_t version = (info ? info->version : 0) + 1;
          auto op = testing::crash_op(index, version);
          weft::Result<WriteResult> committed;
          if (t % 2 == 1) {
            committed = (*engine)->write(id, op.update());
            if (committed && committed->version != version) std::_Exit(3);
          } else {
            auto staged = (*engine)->stage(id, version, op.update());
            committed = staged ? (*engine)->commit(id, version) : staged;
          }
          if (!committed) {
            std::fprintf(stderr, "update %lu v%lu: %s\n", index, version, committed.error().to_string().c_str());
            std::_Exit(1);
          }
          testing::CrashRecord rec{index, version};
          if (::write(report_fd, &rec, sizeof rec) != sizeof rec) std::_Exit(1);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  return 0;
}
