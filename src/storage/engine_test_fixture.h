// storage/engine_test_fixture.h
// The fixture of the chunk engine tests: one engine of a small target in a
// temporary directory, open from SetUp on. Test-only.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>

#include "storage/chunk_engine.h"
#include "storage/test_util.h"

namespace weft::storage::testing {

// One engine labelled `target_id`: 1 MiB chunks, 256 MiB of room, no reserve
// (whatever the test directory's filesystem has free). A test may reopen it,
// with other options too.
class EngineTest : public ::testing::Test {
 protected:
  explicit EngineTest(std::string target_id) : target_id_(std::move(target_id)) {}
  virtual EngineOptions options() {
    EngineOptions o = small_engine_options(256ull << 20, target_id_);
    o.reserve_bytes = 0;
    return o;
  }
  void open() { open(options()); }
  void open(const EngineOptions& o) {
    auto e = open_engine(engine_, dir_.path(), o, registry_);
    ASSERT_TRUE(e.has_value()) << e.error();
  }
  void SetUp() override { open(); }

  TempDir dir_;
  metrics::Registry registry_;
  std::unique_ptr<ChunkEngine> engine_;

 private:
  std::string target_id_;
};

}  // namespace weft::storage::testing
