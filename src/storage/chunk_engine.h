// storage/chunk_engine.h
// The chunk engine of one storage target (a directory): stores chunks in
// per-size-class slab files (slots of 4 KiB << k) and indexes them in RocksDB
// (key 'c' + ChunkId::encode(), value ChunkMeta; plus a per-chain index so
// that one chain's chunks list cheaply, see engine_internal.h). A target
// serves several chains; every update says which chain it belongs to and the
// record keeps it (kChainUnknown: written before chains were recorded).
// Updates are copy-on-write:
//   1. the new content (read-modify-write for partial updates) goes into a
//      freshly allocated slot (a whole-chunk write from an aligned buffer is
//      written straight from the caller's bytes);
//   2. stage() makes the slot durable (grouped fdatasync) and remembers it
//      as the chunk's pending version (memory only);
//   3. commit() puts the new index entry through the index committer
//      (storage/index_committer.h): concurrent commits share one synced
//      RocksDB write, made only after the slots they point to are durable.
//      The old slot is freed in memory once that write is durable
//      (allocation state is derived from the index, so the same write batch
//      is what frees it on disk).
// With EngineOptions::defer_slot_sync (the default), stage() and write()
// make no fdatasync of their own: the commit group's leader syncs the slab
// files of the whole group, then the index, so a group of concurrent writes
// costs two syncs in all. A staged but uncommitted slot need not be durable:
// pending versions do not survive a restart anyway.
// When the slab files share the index's filesystem and it is one where any
// fdatasync flushes everything written in place (storage/flush_scope.h: ext4
// without data=journal, XFS), a group's index record is
// written first and one device flush (the slab fdatasync) covers it and the
// slots (index_committer.h); each commit of an unsynced slot also puts a
// restart-check key naming the chunk and its previous entry, deleted once
// the group's flush returned (then damage to the chunk is corruption, kept
// for repair, not a lost write). At open, check_last_group() verifies the chunks those keys
// name (only the last group can have lost a slot in a power cut) and puts
// the previous entry back for any whose new slot fails its checksums (a slot
// past its slab file's end counts as lost; a slab file missing or a size
// class above chunk_size_max refuses the open instead). Nothing is written
// until the whole index passed the open's checks.
// A crash therefore leaves either the old or the new committed chunk. Pending
// versions are NOT persisted: after a restart they are gone and the target
// must be resynced by its chain predecessor (a restarted target always is).
// Reads return the committed version only and verify the CRC32C of every
// 4 KiB block they return; a mismatch is Code::kCorruption.
//
// Space. Slab files grow by extents and keep their size; a freed slot gives
// its space back to the filesystem through the space pass (punch_free_slots,
// run every space_pass_interval_ms): it punches a hole over the free slots
// of each class beyond free_slack_bytes (the highest first; allocation takes
// the lowest, so the slack is what gets reused). Rules that keep data safe
// (slot states: space_manager.h):
//   - a slot is freed (SpaceManager::free) only after the index change that
//     freed it is durable (commit, remove), or it never was in the index (a
//     dropped pending version): a crash at any point finds it free or still
//     named by a durable record, never punched under a live one. The restart
//     check's previous entries name slots freed by the last group, and those
//     are only freed once that group's flush returned (then its new slots
//     verify and the previous entries are not used);
//   - a slot read under a pin becomes punchable only at its last unpin;
//   - a slot taken for punching is not handed out until the punch ended;
//   - a slot that may be a hole (punched, or free at open: nobody knows)
//     is re-backed (fallocate) before it is written; if that fails
//     (kNoSpace) the slot is punched again and freed: nothing half done.
// A crash between free and punch leaves a free slot holding space: at open
// every free slot inside a slab file counts as unknown (may hold space, may
// be a hole), so the pass punches it and a writer re-backs it.
// Capacity: capacity_bytes() is used + free_bytes(), and free_bytes() is
// min(configured capacity - used, filesystem available - reserve), the
// latter read again at most every 20 ms (FreeSpaceGuard): a filesystem
// filled from elsewhere shows as full. With capacity 0 (auto) the
// filesystem alone is the limit. Targets sharing a filesystem each report
// its whole free space (their sum overstates it; each one's figure is right
// for a write to it). The free slots kept as slack are not counted as free.
//
// Threading: every public method is thread-safe. Updates of one chunk are
// serialised by a per-chunk lock (the chain head serialises them anyway);
// reads never wait for updates. Blocking methods are meant for a bounded
// worker pool; read_async() calls `done` on the ring's completion thread
// (or the given submitter's; inline on an early error): `done` must be short
// and never block.
// Ownership: the engine owns its ring, slab files and index; callers must
// finish all calls before destroying it.
// Invariants: at most one pending version per chunk; a committed version only
// changes through commit()/write()/remove(); SpaceManager::used_bytes() ==
// sum of slot sizes of indexed + pending chunks (+ slots pinned by readers);
// an empty chunk holds no slot (engine_internal.h slot_of).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/buffer.h"
#include "common/free_space.h"
#include "common/metrics.h"
#include "common/status.h"
#include "storage/chunk_id.h"
#include "storage/chunk_meta.h"
#include "storage/index_committer.h"
#include "storage/io_ring.h"
#include "storage/slab_file.h"
#include "storage/space_manager.h"

namespace rocksdb {
class DB;
}

namespace weft {
class LogThrottle;
class PeriodicThread;
}  // namespace weft

namespace weft::storage {

struct EngineOptions {
  std::string target_id = "0";               // the metrics label
  uint32_t chunk_size_max = 64u << 20;       // power of two in [4 KiB, 64 MiB]
  uint64_t capacity_bytes = 0;               // 0: the filesystem's free space - reserve is the only limit (see Space above)
  // Bytes of the target's filesystem kept free for the index (RocksDB must
  // never meet a full disk) and whatever else shares it (common/free_space.h):
  // below it slab files do not grow (a write that needs a new extent fails
  // with kNoSpace; slots freed inside the slabs are still used), below a
  // quarter of it every write and removal fails. 0: no guard.
  uint64_t reserve_bytes = uint64_t{256} << 20;
  uint64_t extent_bytes = 64u << 20;         // slab growth step (at least one slot)
  // Free slots each size class keeps backed (reused without a fallocate);
  // the space pass punches those beyond. 0: punch every freed slot.
  uint64_t free_slack_bytes = 16u << 20;
  // How often the space pass runs (a thread of the engine); 0: never on
  // its own (punch_free_slots() runs it).
  uint32_t space_pass_interval_ms = 1000;
  unsigned ring_entries = 256;               // io_uring depth
  uint32_t commit_linger_us_max = 2000;      // index group commit: longest wait for the group to gather
  // write() and stage() leave the slot's fdatasync to the commit group's
  // leader (one sync per slab file and one index sync per group, in series)
  // instead of syncing it on their own (about one sync more per write).
  // Measured better on a quiet VM (docs/storage.md); off only to compare.
  bool defer_slot_sync = true;
};

// One update of a chunk's content.
struct Update {
  enum class Kind : uint8_t { kWrite, kTruncate, kReplace };
  Kind kind = Kind::kWrite;
  uint32_t offset = 0;                // kWrite: where `data` goes
  uint32_t length = 0;                // kTruncate: new length (shrinks or zero-extends)
  std::span<const std::byte> data;    // kWrite (at least one byte), kReplace (may be empty)
  uint32_t chunk_size = 0;            // the file's chunk size; 0: the engine's maximum
  uint32_t chain_id = kChainUnknown;  // the chain of this update; kChainUnknown keeps the chunk's

  static Update write(uint32_t offset, std::span<const std::byte> data, uint32_t chunk_size = 0) {
    return {Kind::kWrite, offset, 0, data, chunk_size};
  }
  static Update truncate(uint32_t length, uint32_t chunk_size = 0) { return {Kind::kTruncate, 0, length, {}, chunk_size}; }
  // Full replacement at any version (resync): the chunk becomes exactly `data`.
  static Update replace(std::span<const std::byte> data) { return {Kind::kReplace, 0, 0, data, 0}; }
};

struct WriteResult {
  uint64_t version = 0;
  uint32_t length = 0;
  uint32_t chunk_crc = 0;
};

struct ChunkInfo {
  ChunkId id;
  uint64_t version = 0;          // committed
  uint32_t length = 0;
  uint32_t chunk_crc = 0;
  uint32_t size_class = 0;
  uint64_t pending_version = 0;  // 0: none (stat only; list reports 0)
  uint32_t chain_id = kChainUnknown;
};

struct ReadResult {
  Buffer buffer;          // 4 KiB aligned; the data starts at data_offset
  size_t data_offset = 0;
  size_t data_length = 0;
  uint64_t version = 0;
  uint32_t chunk_length = 0;
  // CRC32C of data(), set when the read covered the whole chunk (verified
  // against the chunk's CRC in the same pass); otherwise callers compute it.
  std::optional<uint32_t> data_crc;
  std::span<const std::byte> data() const { return buffer.span().subspan(data_offset, data_length); }
};

class ChunkEngine {
 public:
  static Result<std::unique_ptr<ChunkEngine>> open(const std::string& dir, EngineOptions options,
                                                   metrics::Registry& registry = metrics::Registry::global());
  ~ChunkEngine();
  ChunkEngine(const ChunkEngine&) = delete;
  ChunkEngine& operator=(const ChunkEngine&) = delete;

  // A slot taken ahead of a stage() (reserve()): freed again unless a stage
  // used it. Move-only; must not outlive its engine.
  class Reservation {
   public:
    Reservation() = default;
    Reservation(Reservation&& o) noexcept;
    Reservation& operator=(Reservation&& o) noexcept;
    ~Reservation();
    // Writable as it is; otherwise prepare() must grow or re-back it.
    bool ready() const { return engine_ == nullptr || backed_; }

   private:
    friend class ChunkEngine;
    ChunkEngine* engine_ = nullptr;  // null: holds no slot
    Allocation slot_;
    bool backed_ = false;
  };

  // stage(committed + 1) and commit in one step (a chain of one). Discards a
  // pending version of the chunk, if any.
  Result<WriteResult> write(const ChunkId& id, const Update& update);
  // Writes the updated content to a new slot as the pending version.
  // `version` must be committed + 1 (kVersionMismatch otherwise) unless the
  // update is Kind::kReplace. Restaging the pending version replaces it.
  // With `reserved` (from reserve()) it writes the reserved slot if the new
  // content is of its size class and checks no space: it cannot fail for
  // lack of space then.
  Result<WriteResult> stage(const ChunkId& id, uint64_t version, const Update& update,
                            Reservation* reserved = nullptr);
  // What stage() refuses of an update whatever the chunk holds (kInvalidArgument:
  // a chunk size above the maximum, a write or truncate past the chunk size,
  // an empty write). No I/O, no lock.
  Result<void> check_update(const Update& update) const {
    auto length = new_length(update, 0);
    if (!length) return std::unexpected(length.error());
    return {};
  }
  // Everything that could refuse a stage of `length` bytes for lack of
  // space, done ahead: the space guard (check_space), the capacity (the
  // slot is allocated). No I/O (an I/O thread may call it): a slot that
  // needs the slab file to grow or to be re-backed is not ready() until
  // prepare() (which may fallocate) made it so; kNoSpace then. For a chain
  // member that must not refuse an update its successor already committed.
  // Empty (ready, no slot) for length 0.
  Result<Reservation> reserve(uint32_t length);
  Result<void> prepare(Reservation& reserved);
  // Makes the pending `version` the committed one. Committing the version
  // that is already committed (and nothing pending) succeeds: retries are idempotent.
  Result<WriteResult> commit(const ChunkId& id, uint64_t version);
  // Drops the pending version (if it is `version`).
  Result<void> abort(const ChunkId& id, uint64_t version);
  // Removes the committed and any pending version. kNotFound if neither exists.
  // `space_checked`: the caller checked the free space (check_space) before
  // it had other replicas remove the chunk; not checked again, so this one
  // is not refused after they removed it (the space guard re-reads the disk).
  Result<void> remove(const ChunkId& id, bool space_checked = false);
  // Removes the committed chunk if its record names `chain_id` and no update
  // of it is pending; false (nothing removed) otherwise. For chunks of chains
  // the target left (storage/stray_sweep.cc).
  Result<bool> remove_if_in_chain(const ChunkId& id, uint32_t chain_id);

  // Reads [offset, offset + length) of the committed version, clamped to the
  // chunk's length (a range past the end reads empty). kNotFound if no
  // committed version; kInvalidArgument if offset > chunk_size_max.
  Result<ReadResult> read(const ChunkId& id, uint32_t offset, uint32_t length);
  using ReadDone = std::move_only_function<void(Result<ReadResult>)>;
  void read_async(const ChunkId& id, uint32_t offset, uint32_t length, ReadDone done);
  // The same, submitted through `via` (e.g. the calling RPC thread's ring,
  // storage/thread_ring.h); `done` runs where `via` runs its callbacks.
  void read_async(const ChunkId& id, uint32_t offset, uint32_t length, ReadSubmitter& via, ReadDone done);
  // Reads the whole committed chunk and checks every block CRC and the chunk CRC.
  Result<void> verify(const ChunkId& id);

  Result<ChunkInfo> stat(const ChunkId& id);
  // Committed chunks in id order, starting at `start` (inclusive), at most
  // `count_max`, and below `end` (exclusive) when one is given: a listing of
  // one inode's chunks (end = its successor inode's first) costs its chunks,
  // not count_max entries of the inodes after it.
  // Both lists read the index itself: a commit of a one-flush group shows
  // there from its record on, a moment before the group's flush made it durable.
  Result<std::vector<ChunkInfo>> list(std::optional<ChunkId> start, size_t count_max,
                                      std::optional<ChunkId> end = std::nullopt);
  // The same for the chunks of one chain plus those of unknown chain (they may
  // belong to it): a prefix scan of the per-chain index, whatever else the target holds.
  Result<std::vector<ChunkInfo>> list_chain(uint32_t chain_id, std::optional<ChunkId> start, size_t count_max,
                                            std::optional<ChunkId> end = std::nullopt);
  // The chains that have chunks here according to the per-chain index
  // (kChainUnknown left out), ascending: one seek per chain.
  Result<std::vector<uint32_t>> chains();

  // Whether an update (or a removal) would be refused for lack of space now
  // (kNoSpace): the chain asks before forwarding one, so that its successors
  // do not apply what this member then refuses.
  Result<void> check_space();
  // Why this engine refuses every update until it is reopened, if it does:
  // an index write failed, or a commit group failed after its index record
  // was written (index_committer.h), or a slab file's fdatasync failed (every
  // later sync of it fails, slab_file.h). stage(), write() and the removals
  // then fail with it at once (a failed commit's record may be on the disk:
  // its staged slot must not be released by a new stage and reused). The
  // storage service then takes the target out of service.
  std::optional<Status> failure();
  bool failed() const { return slab_failed_.load(std::memory_order_acquire) || committer_->failed(); }  // cheap

  // The space pass (see Space above), now: punches the free slots beyond
  // the slack; returns the bytes punched. One pass at a time.
  Result<uint64_t> punch_free_slots();
  uint64_t used_bytes() const { return space_.used_bytes(); }
  // Drawn at random when the target's index is created and kept in it: a
  // target whose index was lost (a replaced disk, an emptied directory)
  // comes back with another one, which tells mgmtd that the data it held is
  // gone (it must not serve as a chain's copy). Never 0.
  uint64_t data_id() const { return data_id_; }
  // The data id of the target in `dir`, drawn and written first if it has
  // none (an empty directory gets an index holding only that): what a storage
  // server registers with before it opens its engines (open() reads the same).
  static Result<uint64_t> ensure_data_id(const std::string& dir);
  // used_bytes() + free_bytes(): at most the configured capacity.
  uint64_t capacity_bytes() const;
  // min(configured capacity - used, filesystem available - reserve).
  uint64_t free_bytes() const;
  // The filesystem of the target's directory (FreeSpaceGuard::fs_id) and
  // what it has free for this target (available - reserve): several targets
  // on one filesystem each report all of it.
  uint64_t fs_id() const;
  uint64_t fs_free_bytes() const;
  // Bytes of free slots that may still take filesystem space (the slack,
  // and what the next pass punches).
  uint64_t unpunched_free_bytes() const { return space_.holding_bytes(); }
  uint32_t chunk_size_max() const { return options_.chunk_size_max; }
  const std::string& dir() const { return dir_; }
  const EngineOptions& options() const { return options_; }
  IoRing& ring() { return *ring_; }
  // Path of the slab file of `size_class` (tests and tools).
  std::string slab_path(uint32_t size_class) const;
  // Where the committed chunk lives (tests and tools).
  Result<ChunkMeta> committed_meta(const ChunkId& id);
  // Sum of slot sizes over the index (a full scan; tests and tools).
  Result<uint64_t> index_bytes();

  struct Metrics;

 private:
  class ChunkLock;
  struct Pending {
    ChunkMeta meta;
    std::optional<SlabTicket> unsynced;  // the slot write, if not yet durable (write())
  };
  // The committed index is mirrored in memory, sharded by stripe: a read then
  // costs no RocksDB Get. RocksDB stays the truth; an entry changes only after
  // the RocksDB write that changed the index succeeded (commit, remove), under
  // the stripe's exclusive lock, and rebuild() loads them all at open.
  struct Stripe {
    std::shared_mutex mu;  // shared: reader looks up + pins; exclusive: index change + slot free
    std::unordered_map<ChunkId, std::shared_ptr<const ChunkMeta>, ChunkIdHash> index;  // GUARDED_BY(mu)
  };
  static constexpr size_t kStripes = 256;

  ChunkEngine(std::string dir, EngineOptions options, metrics::Registry& registry, uint32_t class_count);
  // What the restart check decided (chunk_engine.cc): written by rebuild().
  struct Settlement;
  // The restart check (see above). Runs before rebuild(): reads slots
  // through the ring and decides, for each chunk of the last group, which
  // record it keeps; writes nothing.
  Result<void> check_last_group(Settlement& settle);
  // Loads the index as `settle` leaves it and checks it against this
  // engine's options and slab files; only then writes the settlement (and,
  // `migrate`: a format-1 index, its per-chain index) in one synced batch.
  // A refusal (kConfig, kCorruption) changes nothing on disk.
  Result<void> rebuild(bool migrate, Settlement& settle);
  // The slab files that exist on disk (opened if need be).
  Result<std::vector<SlabFile*>> existing_slabs();
  // The slab file of `size_class` if it exists on disk (opened if need be),
  // else nullptr: never creates one.
  Result<SlabFile*> existing_slab(uint32_t size_class);
  // True if `meta`'s slot holds content matching its checksums; false if the
  // slot lies past the slab file's end (its growth was lost). An error where
  // the answer cannot be known: a size class above this engine's maximum
  // (kConfig), a missing slab file (kCorruption).
  Result<bool> slot_verifies(const ChunkMeta& meta);
  // Opens (creates: durably, with its directory entry) the slab file.
  Result<SlabFile*> slab(uint32_t size_class);
  // failure() as an error, if there is one.
  Result<void> check_not_failed();
  Stripe& stripe(const ChunkId& id) { return stripes_[ChunkIdHash{}(id) % kStripes]; }

  Result<std::optional<ChunkMeta>> get_meta(const ChunkId& id);
  // REQUIRES: stripe(id).mu held (shared or exclusive).
  std::optional<ChunkMeta> get_meta_locked(const ChunkId& id);
  Result<WriteResult> stage_locked(const ChunkId& id, uint64_t version, const Update& update,
                                   Reservation* reserved = nullptr);
  Result<WriteResult> commit_locked(const ChunkId& id, uint64_t version);
  Result<uint32_t> new_length(const Update& update, uint32_t old_length) const;
  // The bytes to write to the new slot, padded to 4 KiB: the caller's own
  // bytes when they are the whole new content and aligned, else a new buffer.
  struct Content {
    Buffer owned;
    std::span<const std::byte> bytes;
  };
  Result<Content> build_content(const ChunkId& id, const std::optional<ChunkMeta>& old, const Update& update,
                                uint32_t length);
  Result<void> read_verified(const ChunkMeta& meta, uint32_t first_block, uint32_t block_count, std::byte* out);
  // Grows the slab file over the slot, or re-backs a slot that may be a
  // hole; kNoSpace when the filesystem (or its reserve) cannot take it.
  Result<void> make_writable(SlabFile& file, const Allocation& slot);
  // Frees a slot whose write failed. `backed`: make_writable succeeded;
  // otherwise whatever a failed fallocate left is punched again.
  void release_unwritten(SlabFile* file, const Allocation& slot, bool backed);
  // Punches the class's free slots beyond the slack; returns the bytes punched.
  Result<uint64_t> punch_class(uint32_t size_class);
  // One tick of the background space pass; returns the wait before the next.
  std::chrono::nanoseconds space_pass_tick();
  // Writes the slot; syncs it now unless options_.defer_slot_sync (then
  // commit_locked's group syncs it: Pending::unsynced).
  Result<Pending> store_new_slot(std::span<const std::byte> content, uint32_t length, uint64_t version,
                                 uint32_t chain_id, Reservation* reserved);
  // The reserved slot if it is of `size_class` (the reservation gives it up), else a new one.
  Result<Allocation> take_slot(uint32_t size_class, Reservation* reserved);
  // Frees a reserved slot no stage used.
  void release_reservation(const Allocation& slot, bool backed);
  std::optional<Pending> take_pending(const ChunkId& id);
  // Frees the slot of a pending version that is dropped (aborted, restaged,
  // removed), unless the engine failed (see failure()).
  void release_pending_slot(const ChunkMeta& meta);
  // REQUIRES: the chunk's lock held; `old` is its committed record. Deletes
  // the record (a synced index write), then frees the slot.
  Result<void> remove_committed(const ChunkId& id, const ChunkMeta& old);
  // Checks the CRCs of blocks [first_block, first_block + count) held in `data`.
  Result<void> check_blocks(const ChunkMeta& meta, uint32_t first_block, uint32_t count, const std::byte* data);
  struct ReadPlan;
  Result<void> check_read(ReadPlan& plan);
  Result<ReadPlan> plan_read(const ChunkId& id, uint32_t offset, uint32_t length);
  Result<ReadResult> finish_read(ReadPlan& plan, int res);
  // Looks the chunk up and pins its slot (unpin when done); nullopt if absent.
  Result<std::optional<ChunkMeta>> lookup_pinned(const ChunkId& id);

  const std::string dir_;
  const EngineOptions options_;
  const uint32_t class_count_;
  metrics::Registry& registry_;
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<rocksdb::DB> db_;
  uint64_t data_id_ = 0;
  SpaceManager space_;
  std::unique_ptr<IoRing> ring_;
  std::unique_ptr<IndexCommitter> committer_;
  std::unique_ptr<FreeSpaceGuard> space_guard_;  // admits everything when reserve_bytes is 0
  bool one_flush_ = false;  // commit groups take one device flush (restart-check keys needed)

  std::mutex slabs_mu_;
  std::atomic<bool> slab_failed_{false};          // a slab file's sync failed (SlabFile::open's failed_flag)
  std::vector<std::unique_ptr<SlabFile>> slabs_;  // GUARDED_BY(slabs_mu_) for creation

  std::mutex locks_mu_;
  std::condition_variable locks_cv_;
  std::unordered_set<ChunkId, ChunkIdHash> locked_;  // GUARDED_BY(locks_mu_)

  std::mutex pending_mu_;
  std::unordered_map<ChunkId, Pending, ChunkIdHash> pending_;  // GUARDED_BY(pending_mu_)

  std::vector<Stripe> stripes_;

  std::mutex punch_mu_;                        // one space pass at a time
  std::atomic<bool> punch_unsupported_{false};  // the filesystem refused a punch: no more passes
  std::unique_ptr<LogThrottle> space_log_;
  std::unique_ptr<PeriodicThread> space_pass_;  // stopped first by the destructor
};

}  // namespace weft::storage
