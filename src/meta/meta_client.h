// meta/meta_client.h
// Typed client of the metadata service over rpc::Client, for the client
// library and tools: one method per operation, each taking the caller's
// credentials. Synchronous methods block (call them from threads that are
// not I/O threads of `io`: there they fail with kInternal); call_async is
// the coroutine form underneath.
// Retries: retryable failures (timeouts, disconnects, kOverloaded, kBusy)
// are retried with backoff until attempts_max or retry_time_ms_max; a
// mutation keeps the SAME request id across retries, so a retried commit
// returns the original outcome (MetaStore's retry table). Transport failures
// (timeout, disconnect, unavailable) fail over to the next address in
// order; the last address that answered is tried first next time.
// Request ids: (client_id, seq): client_id is random per MetaClient unless
// set (two MetaClients must never share one), seq counts mutations from 1.
// Meta keeps the retry records of a client's last request_window sequence
// numbers only, so a mutation still retrying must never be more than that
// many behind the newest: a new mutation waits until the oldest unfinished
// one is less than MetaClientOptions::request_window behind it (else a retry
// after a lost reply could run again: EEXIST for a file it made).
// Threading: every method is thread-safe.
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "meta/types.h"
#include "proto/meta.pb.h"
#include "rpc/client.h"
#include "rpc/io_pool.h"
#include "rpc/task.h"

namespace weft::meta {

struct MetaClientOptions {
  std::vector<rpc::Endpoint> addresses;  // meta servers, in failover order
  uint64_t client_id = 0;                // request-id namespace; 0: random per MetaClient
  uint32_t call_timeout_ms = 10000;      // per attempt
  int attempts_max = 100;
  uint32_t retry_time_ms_max = 20000;    // stop retrying after this long
  uint32_t backoff_min_ms = 10;
  uint32_t backoff_max_ms = 500;
  // At most the meta servers' [meta] request_window (at least 1024 there).
  uint64_t request_window = 1024;
};

class MetaClient {
 public:
  MetaClient(rpc::IoPool& io, rpc::Client& rpc, MetaClientOptions options);

  // --- reads ---
  Result<Inode> lookup(const Cred& cred, Ino parent, std::string_view name);
  Result<Inode> getattr(const Cred& cred, Ino ino);
  Result<std::string> readlink(const Cred& cred, Ino ino);
  Result<DirPage> readdir(const Cred& cred, Ino dir, std::string_view cookie, uint32_t limit);
  Result<StatFs> statfs(const Cred& cred);
  Result<std::string> getxattr(const Cred& cred, Ino ino, std::string_view name);
  Result<std::vector<std::string>> listxattr(const Cred& cred, Ino ino);
  Result<Layout> get_layout(const Cred& cred, Ino dir);
  // One result per ino, in order (in several calls when meta answers a prefix).
  // `with_queued`: a file whose chunks wait for meta's chunk GC answers with
  // its queued inode (a meta from before the flag answers kNotFound).
  Result<std::vector<Result<Inode>>> batch_stat(const Cred& cred, const std::vector<Ino>& inos,
                                                bool with_queued = false);
  // Tells meta that this client has exactly `inos` open now (meta/read_holds.h)
  // and returns how often to renew (0: meta keeps no holds). One attempt of
  // at most `timeout`, at the address that answered last (the next after a
  // transport failure): the caller renews again soon, and a retry loop or a
  // long wait would outlast the hold. `seq`: the renewal's number, ascending
  // (meta ignores one older than a renewal it took; 0: unordered). Blocking;
  // not on an I/O thread.
  Result<std::chrono::milliseconds> hold_reads(const Cred& cred, std::span<const Ino> inos,
                                               std::chrono::milliseconds timeout, uint64_t seq = 0);

  // --- mutations ---
  // Mutations sent so far (counted before each is sent) and finished (its
  // reply or its final error came back). An answer fetched while both were
  // equal and stayed so saw every change made through this client. (A
  // mutation that ended in a timeout may still land at meta afterwards.)
  uint64_t mutations_sent() const { return seq_.load(); }
  uint64_t mutations_done() const { return done_.load(); }
  // expect_parent (create, unlink, rmdir): see ParentCheck (meta/types.h).
  // `open`: the open's access (MetaStore::create checks it on an existing file).
  Result<Reply> create(const Cred& cred, Ino parent, std::string_view name, uint32_t mode, bool exclusive,
                       OpenFlags open, const std::optional<ParentCheck>& expect_parent = std::nullopt);
  // The same, for O_WRONLY (open_for_write) or O_RDONLY.
  Result<Reply> create(const Cred& cred, Ino parent, std::string_view name, uint32_t mode, bool exclusive,
                       bool open_for_write, const std::optional<ParentCheck>& expect_parent = std::nullopt);
  Result<Inode> mkdir(const Cred& cred, Ino parent, std::string_view name, uint32_t mode,
                      const std::optional<ParentCheck>& expect_parent = std::nullopt);
  Result<Inode> symlink(const Cred& cred, Ino parent, std::string_view name, std::string_view target,
                        const std::optional<ParentCheck>& expect_parent = std::nullopt);
  Result<Inode> mknod(const Cred& cred, Ino parent, std::string_view name, InodeType type, uint32_t mode,
                      uint64_t rdev);
  Result<Inode> link(const Cred& cred, Ino ino, Ino new_parent, std::string_view new_name);
  Result<void> unlink(const Cred& cred, Ino parent, std::string_view name,
                      const std::optional<ParentCheck>& expect_parent = std::nullopt);
  Result<void> rmdir(const Cred& cred, Ino parent, std::string_view name,
                     const std::optional<ParentCheck>& expect_parent = std::nullopt);
  Result<void> rename(const Cred& cred, Ino src_parent, std::string_view src_name, Ino dst_parent,
                      std::string_view dst_name, RenameFlags flags = RenameFlags::kNone);
  Result<Inode> setattr(const Cred& cred, Ino ino, const SetAttr& attr);
  Result<void> setxattr(const Cred& cred, Ino ino, std::string_view name, std::string_view value,
                        XattrFlags flags = XattrFlags::kAny);
  Result<void> removexattr(const Cred& cred, Ino ino, std::string_view name);
  Result<void> set_layout(const Cred& cred, Ino dir, const Layout& layout);
  Result<Reply> open(const Cred& cred, Ino ino, OpenFlags flags);
  // Lookup + read-only open of `name` in one round trip; a symlink comes back
  // unopened (is_symlink(): follow it, then open the target).
  Result<Inode> open_read_at(const Cred& cred, Ino parent, std::string_view name);
  // `abandon`: MetaStore::abandon_session instead (a meta from before it closes).
  Result<void> close(const Cred& cred, Ino ino, uint64_t session_id, bool abandon = false);
  // The cut a report was capped for (MetaStore::report_length): a writer
  // answers it with `ack_cut`.
  Result<LengthReply> report_length(const Cred& cred, Ino ino, uint64_t session_id, uint64_t length,
                                    uint64_t ack_cut = 0);
  // Both in one call (kUnknownMethod from a meta that predates it); a
  // capped report leaves the session open.
  Result<LengthReply> close_with_length(const Cred& cred, Ino ino, uint64_t session_id, uint64_t length,
                                        uint64_t ack_cut = 0);

  // open_read_at in two halves on the calling thread (rpc::Client::
  // start_blocking): the request goes out to the current meta address now,
  // and finish reads the answer; when that first attempt failed in a way a
  // retry may mend, finish goes on as open_read_at does (retries, failover).
  // REQUIRES: as open_read_at's, on one thread, start before finish.
  class PendingOpen {
   private:
    friend class MetaClient;
    proto::meta::MetaRequest req_;
    size_t addr_ = 0;
    std::optional<rpc::PendingCall> call_;
  };
  PendingOpen start_open_read_at(const Cred& cred, Ino parent, std::string_view name);
  Result<Inode> finish_open_read_at(PendingOpen& open);
  // The coroutine form: sends `req` (cred set by the caller) with retries and
  // failover; a mutation gets a fresh request id first.
  Task<Result<proto::meta::MetaReply>> call_async(rpc::MethodId method, proto::meta::MetaRequest req, bool mutation);

  uint64_t client_id() const { return client_id_; }
  uint64_t retries() const { return retries_.load(); }
  uint64_t failovers() const { return failovers_.load(); }

 private:
  Result<proto::meta::MetaReply> call(rpc::MethodId method, proto::meta::MetaRequest req, bool mutation);
  // `failed_first`: the first attempt was made elsewhere and failed so (on
  // the current address): the loop goes on from there (backoff, failover).
  Result<proto::meta::MetaReply> call_here(rpc::MethodId method, proto::meta::MetaRequest req, bool mutation,
                                           const Status* failed_first = nullptr);
  class Attempts;
  // Checks there is a server to ask; gives a mutation its request id (once,
  // for all attempts; blocks while the window is full, see above).
  Result<void> prepare(proto::meta::MetaRequest& req, bool mutation);
  // A sequence number, unless the window is full now.
  std::optional<uint64_t> try_take_seq();
  // The mutation numbered `seq` finished (answered or failed for good).
  void finish_seq(uint64_t seq);
  struct SeqDone;
  Result<proto::meta::MetaReply> read(rpc::MethodId method, const Cred& cred, proto::meta::MetaRequest req);
  Result<proto::meta::MetaReply> mutate(rpc::MethodId method, const Cred& cred, proto::meta::MetaRequest req);

  rpc::IoPool& io_;
  rpc::Client& rpc_;
  const MetaClientOptions options_;
  const uint64_t client_id_;
  std::atomic<uint64_t> seq_{0};  // the last sequence number taken
  std::atomic<uint64_t> done_{0};
  std::mutex seq_mu_;
  std::condition_variable seq_cv_;
  std::set<uint64_t> unfinished_;  // GUARDED_BY(seq_mu_): mutations sent, not yet finished
  std::atomic<size_t> current_{0};  // index of the address tried first
  std::atomic<uint64_t> retries_{0};
  std::atomic<uint64_t> failovers_{0};
};

}  // namespace weft::meta
