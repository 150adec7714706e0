// client/in_process_meta.h
// Tests only: a meta server on 127.0.0.1 (a MetaStore in a temporary
// directory behind an rpc::Server), for Client tests that need the namespace
// and write sessions without starting processes. `store` is at hand to do
// what only meta does (e.g. close the sessions the session reaper would).
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "common/metrics.h"
#include "common/temp_dir.h"
#include "meta/meta_store.h"
#include "meta/service.h"
#include "rpc/io_pool.h"
#include "rpc/server.h"

namespace weft::client {

struct InProcessMeta {
  explicit InProcessMeta(const std::string& token) {
    meta::StoreOptions so;
    so.path = dir.file("meta");
    so.sync = false;
    so.reserve_bytes = 0;
    so.registry = &registry;
    auto s = meta::MetaStore::open(so);
    EXPECT_TRUE(s.has_value()) << s.error();
    if (s) store = std::move(*s);
    server = std::make_unique<rpc::Server>(
        io, rpc::ServerOptions{.cluster_token = token, .name = "meta", .blocking_threads = 4}, registry);
    if (store) meta::register_meta_service(*server, *store);
    port = server->listen("127.0.0.1", 0).value();
  }
  ~InProcessMeta() {
    server->stop();
    io.stop();
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port); }

  testing::TempDir dir;
  metrics::Registry registry;
  rpc::IoPool io{1};
  std::unique_ptr<meta::MetaStore> store;
  std::unique_ptr<rpc::Server> server;
  uint16_t port = 0;
};

}  // namespace weft::client
