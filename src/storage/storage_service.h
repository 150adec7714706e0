// storage/storage_service.h
// The storage service of one `weft serve storage` process: hosts several
// targets and runs CRAQ chain replication between servers.
//
// Write protocol (Write/Truncate/Remove; numbered as in the code):
//   1. the head checks the chain version (kStaleRouting if it differs) and
//      that it is the head (kNotChainHead otherwise);
//   2. it takes the chunk's lock (re-checking the chain version afterwards:
//      routing may change while waiting), answers a retried (client id,
//      sequence) from its dedup table (refuses it, kOutcomeUnknown, when
//      the table evicted it: dedup_table.h), and assigns version
//      committed + 1;
//   3. it stages the update locally (copy-on-write, not yet visible);
//   4. it forwards the update with that version to its successor, which
//      locks, stages, forwards on in turn; the tail stages and commits.
//      Steps 3 and 4 run at the same time (pipelined) whenever the member
//      knows the staged result (length, CRC) before staging: a successor
//      always does (its predecessor's result), the head for whole-chunk
//      writes; otherwise (partial writes, truncates at the head) it stages
//      first. Both must succeed before the member commits. A member that
//      stages while it forwards first takes what its stage needs (the slot,
//      made writable, and a place in the disk pool's queue): it must not
//      refuse for lack of room what its successors then commit;
//   5. each member commits when its successor acknowledged (the Forward
//      reply), so the client's ack means every replica on the write path
//      (serving and syncing) has committed it. On any failure a member
//      aborts its staged version and the error travels back. A successor
//      commits only before its predecessor's timeout for the Forward, less a
//      margin for the commit and the reply (ChainUpdate::commit_by, checked
//      when the commit job starts on a disk thread, after its wait in the
//      queue), and gives its own successor a timeout that ends before then:
//      a member does not commit what a slower-to-answer chain made its
//      predecessor abort (kTimeout instead; the client's retry applies it
//      everywhere), as long as the commit itself (a group sync) fits the
//      margin; one that overruns it leaves the replicas to the reconcile.
// A successor whose staged result differs from its predecessor's (it fell
// behind, e.g. while syncing) answers kVersionMismatch and receives the full
// chunk (UPDATE_REPLACE) instead.
// RemoveRange (remove_range.cc) removes one inode's chunks of a chain from
// an index on: the head lists the ones it has (and those with an update on
// its way) and removes each as above, without a dedup entry; bounded per call.
// Reads go to any serving replica and return the committed version; a
// serving member other than the last one waits first for the lock of a
// chunk being updated there (the members after it may have committed the
// update: an older version must not be given after a newer one was). Like
// updates, they are refused (kLeaseExpired) while the server's lease from
// mgmtd has run out (StorageServiceOptions::write_fence).
//
// Resync (resync.cc): when routing shows a serving local target followed by
// a syncing one in chain C, the local target lists C's chunks on both sides
// (chunk records name their chain), copies every chunk whose version or CRC
// differs and removes the successor's chunks of C it does not have; then
// sends SyncDone. The syncing target records it (TargetStatus) and calls the
// sync listener. Updates of C reach the syncing target through the chain
// meanwhile; each copy is made under the source's chunk lock, so it is
// ordered with them, and a chunk whose update already reached the successor
// at this chain version is not copied again; a copy that arrives after an
// update the source sent later is refused there (sync_order.h). A failed copy is retried alone;
// a bounded number of copies run at once. A copy never touches the
// successor's chunks of other chains.
//
// Repair (repair.cc): a target whose copy of a chunk fails its checksums (the
// scrubber's on_corrupt, a client read answered kCorruption, a resync copy it
// could not read) queues a repair (deduplicated, one at a time per server,
// engine work on the disk pool). The repair asks the head of the chunk's chain (RepairChunk; a local
// call when the head is on this server), which, under its chunk lock (so the
// repair is ordered with client writes: one in progress finishes first, one
// arriving later waits and then builds on the repaired copy), takes a
// verified copy of its committed version: its own, or, if that is corrupt or
// is the one to repair, a readable successor's whose version, length and CRC
// equal the head's record. It repairs its own copy if that was corrupt, then
// sends the copy to the corrupt member (Forward with `repair`, not forwarded
// on). A member applies a repair only over a committed chunk of exactly that
// version, length and CRC (kVersionMismatch otherwise): a repair never moves
// a chunk backwards or onto other content. With no verified copy anywhere
// (replicas=1, every replica corrupt) nothing changes: the chunk keeps
// answering kCorruption, the failure is logged and counted
// (weft_storage_chunk_repairs_total{result="no_good_copy"}).
//
// Reconcile (reconcile.cc): an update that fails at the head after it was
// forwarded may have been committed by the members after it (a lost reply, a
// tail that committed before its predecessor aborted). The head notes the
// chunk in doubt; once every member has decided (the forward timeout later)
// it compares every member's committed record with its own and, if one
// differs, writes its own content through the chain again under the chunk's
// lock (a REPLACE, or a removal). Counted in weft_storage_reconciles_total.
// Replica check (replica_check.cc): periodically, the head of each chain
// whose members all serve compares their listings of the chain's chunks and
// notes every chunk that differs for reconciliation, whatever the cause
// (reconcile notes live in memory at one head only).
// A REPLACE may go below a member's committed version: versions start again
// at 1 when a chunk is removed and written again, and a member may still hold
// the chunk's earlier life.
//
// Threading: handlers run as coroutines on the RPC I/O threads; engine calls
// go to the service's DiskPool. Invariant: a chunk's lock is held on a chain
// member from staging until commit or abort, and locks are only awaited
// towards the tail (no cycles).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "common/log_throttle.h"
#include "common/metrics.h"
#include "rpc/client.h"
#include "rpc/server.h"
#include "storage/disk_pool.h"
#include "storage/routing_provider.h"
#include "storage/scrubber.h"
#include "storage/storage_target.h"
#include "storage/stray_sweep.h"

namespace weft::proto::storage {
class BatchReadRequest;
class BatchReadReply;
class WriteRequest;
class WriteReply;
class TruncateRequest;
class RemoveRequest;
class RemoveReply;
class RemoveRangeRequest;
class RemoveRangeReply;
class GetChunkMetaRequest;
class GetChunkMetaReply;
class ListChunksRequest;
class ListChunksReply;
class ForwardRequest;
class ForwardReply;
class SyncDoneRequest;
class SyncDoneReply;
class RepairChunkRequest;
class RepairChunkReply;
class SetRoutingRequest;
class SetRoutingReply;
class TargetStatusRequest;
class TargetStatusReply;
}  // namespace weft::proto::storage

namespace weft::storage {

namespace pb = ::weft::proto::storage;

// Connection lanes of Forwards between storage servers (chain_update.cc,
// forward_lane): chains of up to kForwardLanes + 1 members never deadlock on
// full connections; longer ones share the last lane.
inline constexpr uint32_t kForwardLanes = 4;

struct StorageServiceOptions {
  std::string name = "storage";
  // Of the connections to other storage servers (rpc::ServiceConfig::client_options);
  // call_timeout_ms is taken from forward_timeout_ms.
  rpc::ClientOptions chain_client;
  size_t disk_threads = 8;
  size_t disk_queue_max = 4096;
  uint32_t forward_timeout_ms = 10000;
  size_t resync_batch = 256;  // chunks listed per ListChunks call
  // A resync lists at most this many differing chunks, copies them, then
  // lists on: its memory stays bounded however far behind the successor is.
  size_t resync_window = 65536;
  // Bytes that chunk reads may hold on this server (their block-aligned
  // buffers), all connections together, one connection at most a quarter:
  // from the read until its reply is written to the socket (a peer that does
  // not read its replies keeps them). A BatchRead that would pass either
  // answers kOverloaded (retryable); one larger than a connection's quarter or
  // than a reply may carry, or of too many ranges, kTooBig (service_methods.h).
  uint64_t read_bytes_held_max = uint64_t{1} << 30;
  // Asked before every update (head and successors) and every client read
  // (BatchRead, GetChunkMeta); false refuses it with kLeaseExpired. Set by a
  // server whose lease comes from mgmtd: a server that cannot renew its lease
  // stops taking writes and answering reads before mgmtd may replace it (a
  // replica cut off from mgmtd must not serve data older than writes the
  // chain's new version acknowledged). Resync listings are not fenced.
  std::function<bool()> write_fence;
  // Chunks of chains a local target is no longer in are removed after this
  // long (storage/stray_sweep.h); checked every quarter of it, 1 s to 1 min.
  std::chrono::seconds stray_chunk_grace{std::chrono::hours(1)};
  bool stray_sweep = true;  // false: never (tests that set up chains by hand)
  // Every target's chunks are re-verified in the background (one
  // storage/scrubber.h per target, from start until stop()): at most this many
  // chunk bytes a second per target, 0: no scrubbing; a pass starts at once,
  // the next one scrub_interval after a pass ended. A corrupt chunk is logged
  // (throttled) and counted (weft_storage_scrub_corrupt_chunks_total) and
  // kept (a missing chunk would read as a hole) until a repair replaces it.
  uint64_t scrub_bytes_per_sec = uint64_t{64} << 20;
  std::chrono::milliseconds scrub_interval{std::chrono::hours(24)};
  // Corrupt chunks are repaired from another replica (repair.cc), one at a
  // time per server: at most repair_queue_max wait (more are dropped and
  // counted; the next scrub pass finds them again); a chunk whose repair
  // failed is not queued again for repair_retry_after.
  size_t repair_queue_max = 4096;
  std::chrono::milliseconds repair_retry_after{std::chrono::seconds(60)};
  // Every this long, the head of each chain whose members all serve compares
  // their records of the chain's chunks and reconciles those that differ
  // (replica_check.cc); the first check one interval after start. 0: never.
  std::chrono::milliseconds replica_check_interval{std::chrono::hours(1)};
  // A replica check compares at most this many chunk records per second
  // (over all members it lists); 0: no limit.
  uint64_t replica_check_chunks_per_s = 100000;
  // Chunks waiting for reconciliation at once (reconcile.cc): past it a
  // failed update's note is dropped (counted, logged; the next replica check
  // finds the chunk again), and a replica check waits for room.
  size_t reconcile_queue_max = 65536;
};

// How long a resync waits before its next pass after `failed_passes` (>= 1)
// passes in a row failed: 200 ms, doubling, at most kResyncPassBackoffMax.
// A pass that fails again and again (a chunk the source cannot read fails
// every pass) neither relists both sides every 200 ms nor floods the log.
inline constexpr std::chrono::milliseconds kResyncPassBackoffMax{60000};
std::chrono::milliseconds resync_pass_backoff(int failed_passes);

// Where one request lands: this server's target in a chain, and its successor.
struct Placement {
  RoutingSnapshot routing;
  StorageTarget* target = nullptr;
  mgmt::ChainRoute route;
  size_t index = 0;  // in route.write_path
  bool readable = false;
  struct Peer {
    mgmt::TargetId id = 0;
    rpc::Endpoint endpoint;
  };
  std::optional<Peer> successor;
};

// One update as it travels down the chain.
struct ChainUpdate {
  int kind = 0;  // pb::UpdateKind
  ChunkId id;
  uint32_t offset = 0;
  uint32_t length = 0;
  std::span<const std::byte> data;
  uint32_t chunk_size = 0;
  uint64_t client_id = 0;
  uint64_t sequence = 0;
  bool retry = false;  // from a client: not the first send of (client_id, sequence)
  bool sync = false;  // a resync copy (Forward with sync): never touches another chain's chunk
  bool sync_recorded = false;  // with sync: the source recorded the chunk as the chain's (ForwardRequest)
  // REPLACE, and a resync's or reconcile's REMOVE: the client updates the
  // sender recorded for the chunk (its content holds them, or its removal
  // followed them) (ForwardRequest.held).
  std::vector<std::pair<uint64_t, uint64_t>> held;
  // REMOVE by a reconcile: every member forgets the chunk's dedup entries
  // but those in `held` (ForwardRequest.forget_dedup).
  bool forget_dedup = false;
  // REPLACE or REMOVE of this member's own state (a reconcile at the head):
  // its dedup entries describe that state already; `held` is for the
  // successors (and may be cut to kHeldKeysMax), not to trim its own.
  bool own_content = false;
  // Set once a Forward of it went out (forward_out): a failure before that
  // changed no other member, and needs no reconcile. Mutable: the update
  // travels as const; this records what happened to it.
  mutable bool forward_sent = false;
  // A repair (REPLACE of the committed version, repair.cc): applied only over
  // the same version, length and CRC; never forwarded on.
  bool repair = false;
  std::optional<uint32_t> data_crc;  // CRC32C of `data` when already known (checked on arrival)
  // From a predecessor (Forward): past this instant it may have given up on
  // the update and aborted its own stage, so this member must not commit it,
  // nor ask its successor to (their Forward's timeout ends before it). max():
  // nobody upstream aborts on a clock (the head; resync and repair sources
  // retry a copy whose outcome they did not hear).
  std::chrono::steady_clock::time_point commit_by = std::chrono::steady_clock::time_point::max();
};

// What staging an update on one replica produced.
struct StagedUpdate {
  WriteResult result;
  bool already = false;  // this replica already had exactly this version committed
};

class StorageService {
 public:
  using SyncListener = std::function<void(mgmt::TargetId, mgmt::ChainId, mgmt::ChainVersion)>;

  StorageService(rpc::IoPool& io, StorageServiceOptions options, std::shared_ptr<RoutingProvider> routing,
                 std::vector<std::unique_ptr<StorageTarget>> targets,
                 metrics::Registry& registry = metrics::Registry::global());
  ~StorageService();
  StorageService(const StorageService&) = delete;
  StorageService& operator=(const StorageService&) = delete;

  void register_methods(rpc::Server& server);
  // Hook for the mgmtd client: a local syncing target was brought up to date.
  void set_sync_listener(SyncListener listener);
  // Tells resyncs, repairs, reconciles and the replica check to stop (they
  // end at their next step) and stops the scrubbers and the stray sweep; the
  // destructor cuts their calls to peers and waits for them.
  void stop();

  StorageTarget* target(mgmt::TargetId id);
  RoutingProvider& routing() { return *routing_; }
  const rpc::ClientOptions& chain_client_options() const { return client_.options(); }  // for tests
  size_t resyncs_running() const { return resyncs_running_.load(); }
  // Chunk ids the running resyncs hold to know which chunks writes delivered
  // (each at most twice resync_window: its window and as many past it).
  size_t resync_chunks_tracked();
  StraySweep& stray_sweep() { return *stray_; }  // for tests
  // The target's scrubber; nullptr if scrubbing is off or no such target.
  Scrubber* scrubber(mgmt::TargetId id);
  // Queues a repair of target t's chunk `id`, whose copy failed its checksums
  // (repair.cc). Cheap and thread-safe: from the scrub thread or an I/O thread.
  void request_repair(mgmt::TargetId t, const ChunkId& id);
  size_t repairs_queued();  // waiting or running (tests)
  size_t reconciles_waiting();  // chunks noted in doubt, not yet taken (tests)
  // One replica check of every chain a local target heads (replica_check.cc):
  // what it found; the chunks that differ are left to reconciliation.
  struct ReplicaCheckReport {
    uint64_t chains = 0;     // chains compared
    uint64_t compared = 0;   // chunk records compared (one per chunk and member)
    uint64_t differing = 0;  // of those, differing: noted in doubt
    uint64_t failed = 0;     // members that could not be compared (logged)
  };
  Task<ReplicaCheckReport> check_replicas();

 private:
  struct Expect {
    uint32_t length = 0;
    uint32_t crc = 0;
  };
  // What a member takes before it forwards an update it stages meanwhile:
  // its place in the disk pool's queue and the slot the stage writes.
  struct Room {
    DiskPool::Admission admission;
    ChunkEngine::Reservation slot;
  };

  Result<Placement> locate(mgmt::ChainId chain, mgmt::ChainVersion version) const;
  Result<void> check_write_fence() const;
  Result<void> check_read_fence() const;  // the same lease, for client reads
  Result<void> check_in_service(StorageTarget& t) const;  // kUnavailable while t's engine has failed
  Result<void> check_member(const StorageTarget& t, mgmt::ChainId chain_id) const;
  Result<void> check_payload(const rpc::ServerCall& call, uint32_t length, uint32_t crc, StorageTarget& t) const;

  // Data path (storage_service.cc, chain_update.cc, batch_read.cc).
  Task<Result<pb::BatchReadReply>> batch_read(const pb::BatchReadRequest& req, rpc::ServerCall& call);
  Task<Result<pb::WriteReply>> write(const pb::WriteRequest& req, rpc::ServerCall& call);
  Task<Result<pb::WriteReply>> truncate(const pb::TruncateRequest& req, rpc::ServerCall& call);
  Task<Result<pb::RemoveReply>> remove(const pb::RemoveRequest& req, rpc::ServerCall& call);
  // RemoveRange (remove_range.cc): the page of chunks to remove, then each
  // removed as RemoveRequest removes one.
  Task<Result<pb::RemoveRangeReply>> remove_range(const pb::RemoveRangeRequest& req);
  struct RangePage;
  Task<Result<RangePage>> range_page(const Placement& p, const pb::RemoveRangeRequest& req);
  Task<Result<std::vector<ChunkId>>> range_list_member(const Placement& p, size_t i, const pb::RemoveRangeRequest& req,
                                                       size_t count, uint64_t* last);
  Task<void> range_worker(const pb::RemoveRangeRequest& req, RangePage& page);
  Task<Result<pb::ForwardReply>> forward_in(const pb::ForwardRequest& req, rpc::ServerCall& call);
  // `absent` (RemoveRange): when the head has neither a committed nor a
  // pending version of the chunk, or has it in another chain (the lock it
  // waited for was that chain's update), kNotFound, nothing sent down the chain,
  // and *absent set (a kNotFound of another cause, e.g. a successor missing
  // from the routing, leaves it false).
  Task<Result<WriteResult>> head_update(mgmt::ChainId chain, mgmt::ChainVersion version, Op op,
                                        const ChainUpdate& u, bool* absent = nullptr);
  Task<Result<WriteResult>> replicate(const Placement& p, const ChainUpdate& u, uint64_t version,
                                      const Expect* expect);
  // Steps 3-4 at once when the staged result is known beforehand (`predicted`).
  Task<Result<StagedUpdate>> stage_and_forward(const Placement& p, const ChainUpdate& u, WriteResult predicted,
                                               const Expect* expect);
  Task<Result<StagedUpdate>> stage_then_forward(const Placement& p, const ChainUpdate& u, uint64_t version,
                                                const Expect* expect);
  // `room`: the stage runs in it (never refused for lack of space or queue).
  Task<Result<StagedUpdate>> stage_local(const Placement& p, const ChainUpdate& u, uint64_t version,
                                         const Expect* expect, Room* room = nullptr);
  Task<Result<Room>> make_room(const Placement& p, uint32_t length);
  // This member's own copy of `id` failed its checksums: queues its repair
  // and says so as a retryable error (chain_update.cc).
  Status own_copy_corrupt(const Placement& p, const ChunkId& id, const Status& why);
  Task<Result<void>> forward_out(const Placement& p, const ChainUpdate& u, const WriteResult& staged, bool sync);
  Task<Result<pb::GetChunkMetaReply>> get_chunk_meta(const pb::GetChunkMetaRequest& req);
  Task<Result<pb::ListChunksReply>> list_chunks(const pb::ListChunksRequest& req);

  // Admin and resync (storage_admin.cc, resync.cc).
  Result<pb::SetRoutingReply> set_routing(const pb::SetRoutingRequest& req);
  Result<pb::TargetStatusReply> target_status(const pb::TargetStatusRequest& req);
  Result<pb::SyncDoneReply> sync_done(const pb::SyncDoneRequest& req);
  void start_resyncs();
  // Routing changed: each local target's SyncOrder keeps only the chains it
  // syncs now, and its record of SyncDones (StorageTarget::retain_synced)
  // only what mgmtd may still need to hear.
  void trim_sync_orders();
  Task<void> resync(mgmt::ChainId chain, mgmt::ChainVersion version, StorageTarget* source, Placement::Peer dest);
  // `failed_chunk`: set to the chunk whose copy failed the pass, if one did.
  Task<Result<std::pair<uint64_t, uint64_t>>> resync_once(mgmt::ChainId chain, mgmt::ChainVersion version,
                                                          StorageTarget* source, const Placement::Peer& dest,
                                                          std::optional<ChunkId>& failed_chunk);
  // Waits `delay`, or less if stop() or a routing change comes first.
  Task<void> resync_pause(std::chrono::milliseconds delay);
  struct ResyncPass;
  struct Delivered;
  using ResyncKey = std::tuple<mgmt::ChainId, mgmt::ChainVersion, mgmt::TargetId>;
  enum class CopyOutcome : uint8_t { kCopied, kRemoved, kDelivered };
  Task<Result<bool>> resync_lists(ResyncPass& pass);  // true: listed to the end
  Task<void> copy_worker(ResyncPass& pass);
  Task<Result<CopyOutcome>> copy_chunk(ResyncPass& pass, ChunkId id);
  Task<Result<CopyOutcome>> copy_chunk_once(ResyncPass& pass, ChunkId id);
  Result<void> check_still_syncing(const ResyncPass& pass) const;
  Result<void> check_still_syncing(mgmt::ChainId chain, mgmt::ChainVersion version, const StorageTarget* source,
                                   mgmt::TargetId dest) const;
  // Repair (repair.cc).
  enum class RepairOutcome : uint8_t { kRepaired, kNotNeeded, kNoGoodCopy, kFailed };
  struct RepairCopy;
  Task<void> repair_worker();
  Task<RepairOutcome> repair_one(mgmt::TargetId t, ChunkId id);
  Task<Result<pb::RepairChunkReply>> ask_head_to_repair(StorageTarget& t, const ChunkId& id);
  // At the head: steps under the chunk's lock (see the header comment).
  Task<Result<pb::RepairChunkReply>> repair_chunk(const pb::RepairChunkRequest& req);
  Task<Result<RepairCopy>> verified_copy(const Placement& p, const ChunkId& id, const ChunkInfo& want,
                                         mgmt::TargetId corrupt);
  Task<Result<RepairCopy>> fetch_copy(const Placement& p, mgmt::TargetId from, const ChunkId& id,
                                      const ChunkInfo& want);
  Task<Result<void>> apply_repair(const Placement& p, const Placement::Peer* to, const RepairCopy& copy,
                                  const ChunkId& id);
  void count_repair(mgmt::TargetId t, std::string_view result);

  // Reconcile (reconcile.cc).
  using ReconcileKey = std::pair<mgmt::ChainId, ChunkId>;
  struct InDoubt {
    mgmt::TargetId target = 0;        // the head that noted it
    uint64_t committed_version = 0;   // its committed version then (0: none)
    std::chrono::steady_clock::time_point not_before;
    int attempts = 0;
  };
  enum class ReconcileOutcome : uint8_t { kDone, kRetry };
  // `why` completes "chunk ... may differ on its replicas" in the log.
  // A failed update's note is taken while the queue has room
  // (reconcile_queue_max), else dropped, counted and logged (kFull). The
  // replica check's notes leave a quarter of the queue (at least one slot)
  // free, so failed updates always find room beside a check that waits, and
  // kFull leaves them to the caller; a chunk already waiting at this head
  // keeps its entry unless the check's version is newer.
  enum class NoteOrigin : uint8_t { kFailedUpdate, kReplicaCheck };
  enum class Noted : uint8_t { kNoted, kFull, kStopping };
  Noted note_in_doubt(const Placement& p, const ChunkId& id, uint64_t committed_version, std::string_view why,
                      NoteOrigin origin = NoteOrigin::kFailedUpdate);
  Task<void> reconcile_worker();
  Task<ReconcileOutcome> reconcile_one(mgmt::ChainId chain, ChunkId id, InDoubt d);
  void count_reconcile(mgmt::TargetId t, std::string_view result);

  // Replica check (replica_check.cc).
  struct Pace;  // spaces a check's comparisons (replica_check_chunks_per_s)
  Task<Result<void>> check_member_replica(const Placement& p, mgmt::TargetId member, ReplicaCheckReport& report,
                                          Pace& pace);
  Task<Result<void>> note_found(const Placement& p, const ChunkId& id, uint64_t head_version);
  void start_replica_check();  // unless the interval is 0
  Task<void> replica_check_loop();

  // After an update of p's chain committed here and on p's successor: if a
  // resync to that successor runs, the chunk no longer needs copying.
  void note_delivered(const Placement& p, const ChunkId& id);

  // The order of the next Forward sent (ForwardRequest.order, sync_order.h).
  // Taken under the chunk's lock, so it orders a chunk's Forwards as sent.
  uint64_t next_forward_order() { return forward_order_.fetch_add(1, std::memory_order_relaxed); }

  rpc::IoPool& io_;
  const StorageServiceOptions options_;
 public:
  // Bytes chunk reads hold now (read_bytes_held_max; also a gauge).
  uint64_t read_bytes_held() const { return read_bytes_held_->load(); }

 private:
  std::shared_ptr<RoutingProvider> routing_;
  std::map<mgmt::TargetId, std::unique_ptr<StorageTarget>> targets_;
  metrics::Registry& registry_;
  DiskPool pool_;
  rpc::Client client_;
  metrics::Counter& resync_failures_;  // resync passes that failed (each is retried after resync_pass_backoff)
  metrics::Counter& resync_copied_;    // chunks by resync outcome
  metrics::Counter& resync_removed_;
  metrics::Counter& resync_delivered_;
  metrics::Counter& replica_check_passes_;
  metrics::Counter& replica_check_differing_;
  std::atomic<bool> replica_check_running_{false};  // replica_check_loop runs

  std::mutex mu_;
  SyncListener sync_listener_;                                                  // GUARDED_BY(mu_)
  std::set<ResyncKey> resyncs_;                                                 // GUARDED_BY(mu_): started
  std::map<ResyncKey, std::shared_ptr<Delivered>> delivered_;                   // GUARDED_BY(mu_): running
  std::atomic<size_t> resyncs_running_{0};
  std::atomic<bool> stopping_{false};
  // Starts at the wall clock's nanoseconds (orders are compared by the
  // successors of this server's targets, one chain version at a time; a
  // restart moves its chains to a new version anyway).
  std::atomic<uint64_t> forward_order_{static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count())};
  // A repair, reconcile or resync worker or the replica check still runs.
  bool background_busy();
  // Repairs to make (repair.cc). Invariant: a key is in `queued` iff it is in
  // `todo` or being repaired; `worker` iff a repair_worker runs.
  using RepairKey = std::pair<mgmt::TargetId, ChunkId>;
  struct Repairs {
    std::mutex mu;
    std::deque<RepairKey> todo;                                               // GUARDED_BY(mu)
    std::set<RepairKey> queued;                                               // GUARDED_BY(mu)
    std::map<RepairKey, std::chrono::steady_clock::time_point> not_before;    // GUARDED_BY(mu): failed lately
    bool worker = false;                                                      // GUARDED_BY(mu)
    LogThrottle failure_log{std::chrono::seconds(10)};
  } repairs_;
  // Chunks in doubt (reconcile.cc). Invariant: `worker` iff a reconcile_worker runs.
  struct Reconciles {
    std::mutex mu;
    std::map<ReconcileKey, InDoubt> todo;  // GUARDED_BY(mu)
    // todo's keys by not_before (the worker takes the earliest first).
    std::set<std::pair<std::chrono::steady_clock::time_point, ReconcileKey>> due;  // GUARDED_BY(mu)
    bool worker = false;                   // GUARDED_BY(mu)
    // REQUIRES: mu. Notes `key` as `d`, in place of an entry it had.
    void schedule(const ReconcileKey& key, const InDoubt& d) {
      auto [it, added] = todo.try_emplace(key, d);
      if (!added) {
        due.erase({it->second.not_before, key});
        it->second = d;
      }
      due.insert({d.not_before, key});
    }
    LogThrottle log{std::chrono::seconds(10)};
  } reconciles_;
  // Declared after targets_: they borrow their engines.
  std::unique_ptr<StraySweep> stray_;
  std::map<mgmt::TargetId, std::unique_ptr<Scrubber>> scrubbers_;
  // Bytes chunk reads hold (see read_bytes_held_max); shared with the replies'
  // keepalives, which a connection may keep after the service is gone.
  std::shared_ptr<std::atomic<uint64_t>> read_bytes_held_ = std::make_shared<std::atomic<uint64_t>>(0);
};

}  // namespace weft::storage
