// client/storage_client.h
// Storage access for background work outside libweft's Client: the meta
// server's chunk GC and its session reaper share one (I/O thread, RPC
// client, routing cache, chunk I/O). Short retries: background work that
// cannot be done now is tried again at its next pass, and a head that
// stopped answering before mgmtd declares it down must not hold a pass long.
// Threading: thread-safe. start() may be called by every user before each
// use: the first call that succeeds fetches the routing, later ones return.
#pragma once

#include <mutex>
#include <string>
#include <vector>

#include "client/chunk_io.h"
#include "client/routing_cache.h"
#include "common/status.h"
#include "rpc/client.h"
#include "rpc/io_pool.h"

namespace weft::client {

class StorageClient {
 public:
  StorageClient(std::vector<rpc::Endpoint> mgmtd, rpc::ClientOptions rpc_options, std::string thread_name);
  ~StorageClient();
  StorageClient(const StorageClient&) = delete;
  StorageClient& operator=(const StorageClient&) = delete;

  // The first routing fetch (fails when no mgmtd answers; a later call tries again).
  Result<void> start();

  rpc::IoPool& io() { return io_; }
  RoutingCache& routing() { return routing_; }
  ChunkIo& chunks() { return chunks_; }

 private:
  rpc::IoPool io_;
  rpc::Client rpc_;
  RoutingCache routing_;
  ChunkIo chunks_;
  std::mutex start_mu_;
  bool started_ = false;  // guarded by start_mu_
};

}  // namespace weft::client
