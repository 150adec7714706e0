// meta/test_util.h
// Test helpers: a temporary directory and a fixture owning a MetaStore.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "common/temp_dir.h"
#include "meta/fsck.h"
#include "meta/meta_store.h"

namespace weft::meta::testing {

using weft::testing::TempDir;

inline Context user(uint32_t uid, uint32_t gid, std::vector<uint32_t> groups = {}) {
  return Context{Cred{uid, gid, std::move(groups)}, {}};
}
inline Context root() { return Context{}; }
inline Context with_req(Context ctx, uint64_t client, uint64_t seq) {
  ctx.req = {client, seq};
  return ctx;
}
// A caller known by its connection's client id only (a request without a
// request id, as the service passes it on): enough to open files for writing.
inline Context on_connection(Context ctx, uint64_t client) {
  ctx.connection_client_id = client;
  return ctx;
}
// Root on a connection of client 1: a caller that may own write sessions.
inline Context writer() { return on_connection(root(), 1); }

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_NO_FATAL_FAILURE(open()); }
  void TearDown() override {
    if (store_) {
      auto report = fsck(*store_->db());
      ASSERT_TRUE(report.has_value()) << report.error();
      EXPECT_TRUE(report->ok()) << report->summary();
    }
  }
  virtual StoreOptions options() {
    StoreOptions o;
    o.path = dir_.path() + "/db";
    o.sync = false;
    o.chain_count = 32;
    o.registry = &registry_;
    o.ino_batch = 64;
    o.reserve_bytes = 0;  // whatever /tmp has free (full_disk_test.cc sets one)
    return o;
  }
  void open() {
    store_.reset();
    auto s = MetaStore::open(options());
    ASSERT_TRUE(s.has_value()) << s.error();
    store_ = std::move(*s);
  }
  MetaStore& s() { return *store_; }

  Ino mkdir(const std::string& name, Ino parent = kRootIno, uint32_t mode = 0755, Context ctx = root()) {
    auto r = store_->mkdir(ctx, parent, name, mode);
    EXPECT_TRUE(r.has_value()) << r.error();
    return r ? r->ino : 0;
  }
  Ino create(const std::string& name, Ino parent = kRootIno, uint32_t mode = 0644, Context ctx = root()) {
    auto r = store_->create(ctx, parent, name, mode, true, false);
    EXPECT_TRUE(r.has_value()) << r.error();
    return r ? r->inode.ino : 0;
  }
  Code code_of(const Status& s) { return s.code(); }

  TempDir dir_;
  metrics::Registry registry_;
  std::unique_ptr<MetaStore> store_;
};

#define EXPECT_CODE(expr, c)                                                  \
  do {                                                                        \
    auto weft_r_ = (expr);                                                    \
    ASSERT_FALSE(weft_r_.has_value()) << #expr << " unexpectedly succeeded";  \
    EXPECT_EQ(weft_r_.error().code(), (c)) << weft_r_.error();                \
  } while (0)

#define ASSERT_OK(expr)                                                       \
  do {                                                                        \
    auto weft_r_ = (expr);                                                    \
    ASSERT_TRUE(weft_r_.has_value()) << #expr << ": " << weft_r_.error();     \
  } while (0)

}  // namespace weft::meta::testing
