// meta/service.h
// The metadata RPC service (`weft serve meta`): every MetaStore operation as
// an RPC method (service_methods.h) on an rpc::Server. Point reads and cheap
// mutations run inline on the I/O thread; a mutation's reply is sent when the
// group WAL sync covering its commit is done (DeferSync, WalSyncer), so no
// thread sleeps per request. Scans and heavy mutations (rmdir, rename, ...)
// run on the server's bounded blocking pool (table in service.cc).
// Credentials and request ids come from each request, and the client id its
// connection announced (rpc Hello) from the connection (Context); the store
// enforces permissions and de-duplicates retried mutations. Per-op counts, errors
// and latency are the store's metrics (weft_meta_*); per-method request
// counts are the RPC server's.
// Fault point: "meta.service.drop_reply" answers kTimeout AFTER a mutation
// committed (a lost reply), for retry tests.
// Threading: handlers run concurrently; the service must outlive the server.
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "common/config.h"
#include "common/periodic.h"
#include "common/status.h"
#include "meta/meta_store.h"
#include "rpc/server.h"

namespace weft::meta {

// The [meta] section of `weft serve meta --config FILE`:
//   data_dir = "./weft-data/meta"   # required; RocksDB lives in data_dir/store
//   chain_count = 1                  # chains in the default layout's table
//   chain_table_id = 1
//   request_window = 1024            # retry records kept per client
//   sync = true                      # acknowledge only after the WAL fsync
//   request_record_age_s = 3600      # a client whose newest retry record is this old
//                                    # loses all of them (active clients keep their window)
//   special_files = true             # mknod of FIFOs, sockets, devices (false: EPERM;
//                                    # while older clients remain, docs/DEPLOY.md)
//   read_hold_ms = 5000              # the data of a file whose last link went stays this
//                                    # long, and as long as a client renewing its holds has
//                                    # it open (meta/read_holds.h); 0: collected at once;
//                                    # else at least 4000
struct MetaServiceConfig {
  std::string data_dir;
  uint32_t chain_count = 1;
  uint32_t chain_table_id = 1;
  uint64_t request_window = 1024;
  bool sync = true;
  bool special_files = true;
  int64_t request_record_age_s = 3600;
  int64_t read_hold_ms = 5000;
  uint64_t reserve_bytes = uint64_t{256} << 20;  // StoreOptions::reserve_bytes

  static Result<MetaServiceConfig> from(const Config& config);
  StoreOptions store_options() const;
};

// Whether the server may answer now; an error is every request's answer
// (a meta server mgmtd fenced: its store is no longer the cluster's, or a
// newer process took its place; `weft serve meta` answers kUnavailable, which
// clients retry on their next meta address). Called for every request, on
// I/O threads, and again before a mutation is acknowledged (after its WAL
// sync): cheap and non-blocking.
using ServeCheck = std::function<Result<void>()>;

// Registers every meta method on `server`; `store` must outlive it. `check`
// (optional) comes before every method.
void register_meta_service(rpc::Server& server, MetaStore& store, ServeCheck check = nullptr);

// Drops the retry records of clients whose newest record is older than `age`
// (clients that went away leave up to request_window records each; active
// clients keep theirs) on its own thread: a pass over all clients every
// `interval`. Each tick is one bounded MetaStore::expire_requests call; while
// a pass is unfinished the next tick comes after `catch_up` (or `interval`
// if shorter), so a backlog of departed clients drains in bounded steps.
// Stops promptly in the destructor.
class RequestRecordExpirer {
 public:
  RequestRecordExpirer(MetaStore& store, std::chrono::nanoseconds age, std::chrono::milliseconds interval,
                       std::chrono::milliseconds catch_up = std::chrono::seconds(1));

 private:
  // Returns the wait before the next tick.
  std::chrono::milliseconds tick(std::chrono::milliseconds interval);

  MetaStore& store_;
  const std::chrono::nanoseconds age_;
  const std::chrono::milliseconds catch_up_;
  bool mid_pass_ = false;  // tick's thread only: the last call left a pass unfinished
  PeriodicThread thread_;  // last: starts after the fields it uses
};

}  // namespace weft::meta
