// Update path of the chunk engine: stage (copy-on-write into a new slot),
// commit (flip the index entry), abort, remove.
#include <chrono>
#include <cstring>
#include <utility>

#include "common/assert.h"
#include "common/clock.h"
#include "common/fault.h"
#include "storage/chunk_engine.h"
#include "storage/engine_internal.h"

namespace weft::storage {

Result<uint32_t> ChunkEngine::new_length(const Update& u, uint32_t old_length) const {
  uint64_t limit = u.chunk_size == 0 ? options_.chunk_size_max : u.chunk_size;
  if (limit > options_.chunk_size_max)
    return error(Code::kInvalidArgument, "chunk size {} above this target's maximum {}", limit, options_.chunk_size_max);
  switch (u.kind) {
    case Update::Kind::kWrite: {
      // No bytes would change nothing but the version (past the end, zero-fill
      // up to the offset). Clients never send one: a file grows by its size at
      // meta alone, the bytes in between read as zeros.
      if (u.data.empty()) return error(Code::kInvalidArgument, "write of 0 bytes at offset {}", u.offset);
      if (u.offset > limit) return error(Code::kInvalidArgument, "write offset {} past chunk size {}", u.offset, limit);
      uint64_t end = uint64_t{u.offset} + u.data.size();
      if (end > limit)
        return error(Code::kInvalidArgument, "write of {} bytes at offset {} ends at {}, past chunk size {}",
                     u.data.size(), u.offset, end, limit);
      return static_cast<uint32_t>(std::max<uint64_t>(end, old_length));
    }
    case Update::Kind::kTruncate:
      if (u.length > limit) return error(Code::kInvalidArgument, "truncate to {} past chunk size {}", u.length, limit);
      return u.length;
    case Update::Kind::kReplace:
      if (u.data.size() > limit)
        return error(Code::kInvalidArgument, "replacement of {} bytes past chunk size {}", u.data.size(), limit);
      return static_cast<uint32_t>(u.data.size());
  }
  return error(Code::kInvalidArgument, "unknown update kind");
}

// The chunk's new content padded with zeros to 4 KiB. A write that replaces
// the whole content from an aligned, 4 KiB-multiple buffer (a full chunk from
// the network or a client's pooled buffer) is written from the caller's bytes:
// no copy, no zeroing.
Result<ChunkEngine::Content> ChunkEngine::build_content(const ChunkId& id, const std::optional<ChunkMeta>& old,
                                                        const Update& u, uint32_t length) {
  size_t padded = size_t{blocks_for(length)} * kBlockBytes;
  bool whole = u.kind == Update::Kind::kReplace ||
               (u.kind == Update::Kind::kWrite && u.offset == 0 && (!old || u.data.size() >= old->length));
  if (whole && u.data.size() == padded && reinterpret_cast<uintptr_t>(u.data.data()) % kBlockBytes == 0)
    return Content{Buffer{}, u.data};
  Buffer buf = Buffer::allocate(padded);
  buf.resize(padded);
  uint32_t keep = 0;  // bytes of the old content that survive
  if (old && !whole) keep = std::min(old->length, length);
  if (keep > 0) {
    auto r = read_verified(*old, 0, blocks_for(keep), buf.data());
    if (!r) return error(r.error().with_context(fmt::format("read-modify-write of chunk {}", id)));
  }
  // Zero only what neither the old content nor the new data covers.
  size_t data_begin = u.kind == Update::Kind::kTruncate ? padded : u.offset;
  size_t data_end = u.kind == Update::Kind::kTruncate ? padded : u.offset + u.data.size();
  if (data_begin > keep) std::memset(buf.data() + keep, 0, data_begin - keep);
  if (!u.data.empty()) std::memcpy(buf.data() + u.offset, u.data.data(), u.data.size());
  size_t tail = std::max<size_t>(keep, data_end);
  if (padded > tail) std::memset(buf.data() + tail, 0, padded - tail);
  std::span<const std::byte> bytes = buf.span();
  return Content{std::move(buf), bytes};
}

ChunkEngine::Reservation::Reservation(Reservation&& o) noexcept
    : engine_(std::exchange(o.engine_, nullptr)), slot_(o.slot_), backed_(o.backed_) {}

ChunkEngine::Reservation& ChunkEngine::Reservation::operator=(Reservation&& o) noexcept {
  if (this == &o) return *this;
  if (engine_) engine_->release_reservation(slot_, backed_);
  engine_ = std::exchange(o.engine_, nullptr);
  slot_ = o.slot_;
  backed_ = o.backed_;
  return *this;
}

ChunkEngine::Reservation::~Reservation() {
  if (engine_) engine_->release_reservation(slot_, backed_);
}

Result<ChunkEngine::Reservation> ChunkEngine::reserve(uint32_t length) {
  WEFT_RETURN_IF_ERROR(check_not_failed());
  WEFT_RETURN_IF_ERROR(check_space());
  Reservation r;
  if (length == 0) return r;
  if (length > options_.chunk_size_max)
    return error(Code::kInvalidArgument, "{} bytes past this target's chunk size maximum {}", length,
                 options_.chunk_size_max);
  WEFT_TRY(r.slot_, space_.allocate(class_for_length(length)));
  r.engine_ = this;
  std::lock_guard lock(slabs_mu_);  // an open slab file only: opening one is I/O
  const SlabFile* file = slabs_[r.slot_.size_class].get();
  r.backed_ = file && r.slot_.slot < file->slot_count() && !r.slot_.needs_backing;
  return r;
}

Result<void> ChunkEngine::prepare(Reservation& r) {
  if (r.ready()) return {};
  WEFT_TRY(SlabFile * file, slab(r.slot_.size_class));
  auto made = make_writable(*file, r.slot_);
  if (!made) {
    release_unwritten(file, r.slot_, false);
    r.engine_ = nullptr;
    return error(made.error());
  }
  r.slot_.needs_backing = false;
  r.backed_ = true;
  return {};
}

// Not prepared: the slot may be a hole or hold space (another writer may
// have grown the slab over it), so it is freed as unknown.
void ChunkEngine::release_reservation(const Allocation& slot, bool backed) {
  if (backed) return space_.free(slot);
  space_.free_unbacked(slot, true);
}

Result<Allocation> ChunkEngine::take_slot(uint32_t size_class, Reservation* reserved) {
  if (!reserved || !reserved->engine_ || reserved->slot_.size_class != size_class) return space_.allocate(size_class);
  WEFT_ASSERT(reserved->engine_ == this);
  reserved->engine_ = nullptr;
  return reserved->slot_;
}

Result<ChunkEngine::Pending> ChunkEngine::store_new_slot(std::span<const std::byte> content, uint32_t length,
                                                         uint64_t version, uint32_t chain_id,
                                                         Reservation* reserved) {
  Pending p;
  ChunkMeta& meta = p.meta;
  meta.chain_id = chain_id;
  meta.size_class = class_for_length(length);
  meta.length = length;
  meta.version = version;
  Checksums sums = compute_checksums(content.first(length));
  meta.chunk_crc = sums.chunk_crc;
  meta.block_crcs = std::move(sums.block_crcs);
  // An empty chunk needs no slot (slot_of): nothing to write, nothing to sync,
  // no slab growth that only a later sync would make durable.
  if (length == 0) return p;
  WEFT_TRY(Allocation slot, take_slot(meta.size_class, reserved));
  meta.slot = slot.slot;
  SlabFile* file = nullptr;
  bool backed = false;
  auto written = [&]() -> Result<void> {
    WEFT_TRY(file, slab(meta.size_class));
    WEFT_RETURN_IF_ERROR(make_writable(*file, slot));
    backed = true;
    if (content.empty()) return {};
    WEFT_TRY(uint64_t ticket, file->write(*ring_, slot.slot, content.data(), static_cast<uint32_t>(content.size())));
    if (!options_.defer_slot_sync) return file->sync_to(*ring_, ticket);
    p.unsynced = SlabTicket{file, ticket};
    return {};
  }();
  if (!written) {
    release_unwritten(file, slot, backed);
    return error(written.error());
  }
  metrics_->bytes_written.inc(length);
  return p;
}

void ChunkEngine::release_pending_slot(const ChunkMeta& meta) {
  auto slot = slot_of(meta);
  if (!slot) return;
  // Once failed, the version may be one whose commit failed after its record
  // was written: its slot stays allocated (unused) until the reopen.
  if (failed()) return;
  space_.free(*slot);
}

std::optional<ChunkEngine::Pending> ChunkEngine::take_pending(const ChunkId& id) {
  std::lock_guard lock(pending_mu_);
  auto it = pending_.find(id);
  if (it == pending_.end()) return std::nullopt;
  Pending p = std::move(it->second);
  pending_.erase(it);
  return p;
}

// REQUIRES: the chunk's ChunkLock held.
Result<WriteResult> ChunkEngine::stage_locked(const ChunkId& id, uint64_t version, const Update& u,
                                              Reservation* reserved) {
  auto start = std::chrono::steady_clock::now();
  WEFT_TRY(auto old, get_meta(id));
  uint64_t committed = old ? old->version : 0;
  if (u.kind != Update::Kind::kReplace && version != committed + 1)
    return error(Code::kVersionMismatch, "chunk {}: staged version {} but committed is {} (expected {})", id, version,
                 committed, committed + 1);
  if (version == 0) return error(Code::kInvalidArgument, "chunk {}: version 0 is reserved for 'absent'", id);
  WEFT_TRY(uint32_t length, new_length(u, old ? old->length : 0));
  WEFT_TRY(Content content, build_content(id, old, u, length));
  if (WEFT_FAULT("storage.stage.fail")) return error(Code::kIoError, "injected: stage of chunk {}", id);
  uint32_t chain_id = u.chain_id != kChainUnknown ? u.chain_id : old ? old->chain_id : kChainUnknown;
  WEFT_TRY(Pending staged, store_new_slot(content.bytes, length, version, chain_id, reserved));
  WriteResult result{staged.meta.version, staged.meta.length, staged.meta.chunk_crc};
  std::optional<Pending> replaced = take_pending(id);
  {
    std::lock_guard lock(pending_mu_);
    pending_[id] = std::move(staged);
  }
  if (replaced) release_pending_slot(replaced->meta);
  metrics_->stages.inc();
  metrics_->stage_latency_us.observe(elapsed_us(start));
  return result;
}

// REQUIRES: the chunk's ChunkLock held.
Result<WriteResult> ChunkEngine::commit_locked(const ChunkId& id, uint64_t version) {
  auto start = std::chrono::steady_clock::now();
  WEFT_TRY(auto old, get_meta(id));
  std::optional<ChunkMeta> pending;
  std::optional<SlabTicket> unsynced;
  {
    std::lock_guard lock(pending_mu_);
    auto it = pending_.find(id);
    if (it != pending_.end() && it->second.meta.version == version) {
      pending = it->second.meta;
      unsynced = it->second.unsynced;
    }
  }
  if (!pending) {
    if (old && old->version == version) return WriteResult{old->version, old->length, old->chunk_crc};
    return error(Code::kVersionMismatch, "chunk {}: commit of version {} which is not pending (committed {})", id,
                 version, old ? old->version : 0);
  }
  if (WEFT_FAULT("storage.commit.fail")) return error(Code::kIoError, "injected: commit of chunk {}", id);
  std::vector<IndexOp> ops;
  ops.push_back({chunk_key(id), pending->encode()});
  if (!old || old->chain_id != pending->chain_id) {
    if (old) ops.push_back({chain_key(old->chain_id, id), std::nullopt});
    ops.push_back({chain_key(pending->chain_id, id), std::string()});
  }
  // An unsynced slot may be made durable after the entry (one flush per
  // group): name the chunk and its previous entry for the restart check.
  if (unsynced && one_flush_) ops.push_back({restart_key(id), old ? old->encode() : std::string(), true});
  // Returns once the slot and the entry are durable.
  auto committed = committer_->commit(std::move(ops), unsynced);
  // A failed commit keeps the staged slot pending, deliberately: the entry may
  // have reached the disk before the failure (a failed sync after the write),
  // so freeing the slot could let it be reused under a durable index entry.
  // The failure is sticky (index_committer.h): no stage or remove follows
  // that could release it, and a restart rebuilds allocation from the index.
  if (!committed)
    return error(committed.error().with_context(fmt::format("commit chunk {} version {}", id, version)));
  take_pending(id);
  {
    std::unique_lock lock(stripe(id).mu);
    stripe(id).index[id] = std::make_shared<const ChunkMeta>(*pending);
    if (auto slot = old ? slot_of(*old) : std::nullopt) space_.free(*slot);
  }
  metrics_->commits.inc();
  metrics_->commit_latency_us.observe(elapsed_us(start));
  return WriteResult{pending->version, pending->length, pending->chunk_crc};
}

Result<void> ChunkEngine::check_not_failed() {
  if (!failed()) return {};
  std::optional<Status> why = failure();
  return error(why ? *why : Status(Code::kIoError, "the target refuses updates until it is reopened"));
}

Result<WriteResult> ChunkEngine::stage(const ChunkId& id, uint64_t version, const Update& update,
                                       Reservation* reserved) {
  WEFT_RETURN_IF_ERROR(check_not_failed());
  if (!reserved) WEFT_RETURN_IF_ERROR(check_space());  // reserve() checked it
  ChunkLock lock(*this, id);
  return stage_locked(id, version, update, reserved);
}

Result<WriteResult> ChunkEngine::commit(const ChunkId& id, uint64_t version) {
  ChunkLock lock(*this, id);
  return commit_locked(id, version);
}

Result<WriteResult> ChunkEngine::write(const ChunkId& id, const Update& update) {
  WEFT_RETURN_IF_ERROR(check_not_failed());
  WEFT_RETURN_IF_ERROR(check_space());
  // Deferred: the group being formed waits for this write's slot, then syncs it.
  std::optional<IndexCommitter::Intent> intent;
  if (options_.defer_slot_sync) intent.emplace(*committer_);
  ChunkLock lock(*this, id);
  WEFT_TRY(auto old, get_meta(id));
  uint64_t version = (old ? old->version : 0) + 1;
  WEFT_RETURN_IF_ERROR(stage_locked(id, version, update));
  return commit_locked(id, version);
}

Result<void> ChunkEngine::abort(const ChunkId& id, uint64_t version) {
  ChunkLock lock(*this, id);
  std::optional<ChunkMeta> pending;
  {
    std::lock_guard l(pending_mu_);
    auto it = pending_.find(id);
    if (it == pending_.end() || it->second.meta.version != version)
      return error(Code::kVersionMismatch, "chunk {}: version {} is not pending", id, version);
    pending = std::move(it->second.meta);
    pending_.erase(it);
  }
  release_pending_slot(*pending);
  return {};
}

Result<void> ChunkEngine::remove(const ChunkId& id, bool space_checked) {
  WEFT_RETURN_IF_ERROR(check_not_failed());
  if (!space_checked) WEFT_RETURN_IF_ERROR(check_space());
  ChunkLock lock(*this, id);
  WEFT_TRY(auto old, get_meta(id));
  std::optional<Pending> pending = take_pending(id);
  if (pending) release_pending_slot(pending->meta);
  if (!old) {
    if (pending) return {};
    return error(Code::kNotFound, "chunk {} not found", id);
  }
  return remove_committed(id, *old);
}

Result<bool> ChunkEngine::remove_if_in_chain(const ChunkId& id, uint32_t chain_id) {
  WEFT_RETURN_IF_ERROR(check_not_failed());
  WEFT_RETURN_IF_ERROR(check_space());
  ChunkLock lock(*this, id);
  WEFT_TRY(auto old, get_meta(id));
  if (!old || old->chain_id != chain_id) return false;
  {
    std::lock_guard l(pending_mu_);
    if (pending_.contains(id)) return false;  // an update is on its way: not stray after all
  }
  WEFT_RETURN_IF_ERROR(remove_committed(id, *old));
  return true;
}

Result<void> ChunkEngine::remove_committed(const ChunkId& id, const ChunkMeta& old) {
  std::vector<IndexOp> ops;
  ops.push_back({chunk_key(id), std::nullopt});
  ops.push_back({chain_key(old.chain_id, id), std::nullopt});
  auto removed = committer_->commit(std::move(ops), std::nullopt);
  if (!removed) return error(removed.error().with_context(fmt::format("remove chunk {}", id)));
  {
    std::unique_lock lock(stripe(id).mu);
    stripe(id).index.erase(id);
    if (auto slot = slot_of(old)) space_.free(*slot);
  }
  metrics_->removes.inc();
  return {};
}

}  // namespace weft::storage
