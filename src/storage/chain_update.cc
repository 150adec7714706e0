// The update path of the storage service: client writes at the head and
// forwarded updates on the rest of the chain (protocol steps in
// storage_service.h).
// g++ 12 reports a false -Wmismatched-new-delete on asio's awaitable frame
// operator delete for some coroutine bodies.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

#include <thread>
#include <chrono>
#include <cstring>

#include <asio/experimental/awaitable_operators.hpp>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>

#include "common/crc32c.h"
#include "common/fault.h"
#include "common/logging.h"
#include "proto/storage.pb.h"
#include "storage/service_methods.h"
#include "storage/storage_service.h"

namespace weft::storage {
namespace {

using namespace asio::experimental::awaitable_operators;

// UPDATE_REMOVE never stages; any other kind is refused, never guessed at.
Result<Update> to_engine_update(const ChainUpdate& u, uint32_t chain) {
  Update out;
  switch (u.kind) {
    case pb::UPDATE_WRITE: out = Update::write(u.offset, u.data, u.chunk_size); break;
    case pb::UPDATE_TRUNCATE: out = Update::truncate(u.length, u.chunk_size); break;
    case pb::UPDATE_REPLACE: out = Update::replace(u.data); break;
    default: return error(Code::kInvalidArgument, "chunk {}: update kind {} cannot be staged", u.id, u.kind);
  }
  out.chain_id = chain;
  return out;
}

// Whether a resync copy of `chain` must leave this replica's chunk alone: it
// belongs to another chain, or its chain is unknown (written before chains
// were recorded), it is newer than the copy and the source did not record the
// copy as `chain`'s either (so both may be another chain's).
bool keep_on_sync(const ChunkInfo& here, uint32_t chain, uint64_t copy_version, bool copy_recorded) {
  if (here.chain_id == kChainUnknown) return !copy_recorded && here.version > copy_version;
  return here.chain_id != chain;
}

// A repair (ChainUpdate::repair) replaces exactly the committed `version`
// with the same length and CRC: anything else here means the chunk moved on
// (or never was that version) and the repair must not touch it.
Result<void> check_repairable(const Result<ChunkInfo>& info, const ChunkId& id, uint64_t version, uint32_t length,
                              uint32_t crc) {
  if (info && info->version == version && info->length == length && info->chunk_crc == crc) return {};
  if (!info)
    return error(Code::kVersionMismatch, "repair of chunk {} version {}: no committed version here", id, version);
  return error(Code::kVersionMismatch,
               "repair of chunk {} version {} (length {}, CRC {:08x}) refused: version {} (length {}, CRC {:08x}) "
               "is committed here",
               id, version, length, crc, info->version, info->length, info->chunk_crc);
}

// Step 3 on any member: stages `version` (0: committed + 1, the head's choice).
struct StageJob {
  ChunkEngine* engine;
  const ChainUpdate* u;
  uint32_t chain;
  uint64_t version;
  bool has_expect;
  uint32_t expect_length;
  uint32_t expect_crc;
  ChunkEngine::Reservation* reserved = nullptr;  // the slot to write, taken before the forward went out

  Result<StagedUpdate> operator()() const {
    auto info = engine->stat(u->id);
    if (!info && info.error().code() != Code::kNotFound) return error(info.error());
    uint64_t committed = info ? info->version : 0;
    uint64_t v = version == 0 ? committed + 1 : version;
    if (u->repair) {
      if (!has_expect) return error(Code::kInvalidArgument, "repair of chunk {} without its expected CRC", u->id);
      WEFT_RETURN_IF_ERROR(check_repairable(info, u->id, v, expect_length, expect_crc));
      return stage(v);  // never "already": the committed copy is the damaged one
    }
    if (u->sync && info && keep_on_sync(*info, chain, v, u->sync_recorded))
      return StagedUpdate{WriteResult{committed, info->length, info->chunk_crc}, true};
    if (has_expect && info && committed == v && info->chunk_crc == expect_crc && info->length == expect_length &&
        (info->chain_id == chain || !u->sync))
      return StagedUpdate{WriteResult{v, info->length, info->chunk_crc}, true};
    if (u->kind != pb::UPDATE_REPLACE && v != committed + 1)
      return error(Code::kVersionMismatch, "chunk {}: update to version {} but committed is {}", u->id, v, committed);
    return stage(v);
  }

  Result<StagedUpdate> stage(uint64_t v) const {
    WEFT_TRY(Update update, to_engine_update(*u, chain));
    WEFT_TRY(WriteResult r, engine->stage(u->id, v, update, reserved));
    if (has_expect && (r.chunk_crc != expect_crc || r.length != expect_length)) {
      (void)engine->abort(u->id, v);
      return error(Code::kVersionMismatch, "chunk {} version {}: staged content differs from the predecessor's",
                   u->id, v);
    }
    return StagedUpdate{r, false};
  }
};

struct PrepareJob {
  ChunkEngine* engine;
  ChunkEngine::Reservation* reserved;
  Result<void> operator()() const { return engine->prepare(*reserved); }
};

Status past_commit_by(const ChunkId& id, std::string_view what);

// ChainUpdate::commit_by is checked when the job runs on a disk thread (the
// one place it is checked before a commit): a commit that waited for the
// disk past it must not commit what the predecessor has aborted by then
// (kTimeout; the stage is aborted here instead).
struct CommitJob {
  ChunkEngine* engine;
  ChunkId id;
  uint64_t version;
  std::chrono::steady_clock::time_point commit_by = std::chrono::steady_clock::time_point::max();
  Result<WriteResult> operator()() const {
    // Tests: a commit whose turn at the disk comes late (a long queue).
    if (WEFT_FAULT("storage.chain.commit.queued")) std::this_thread::sleep_for(std::chrono::milliseconds(800));
    if (std::chrono::steady_clock::now() > commit_by) {
      (void)engine->abort(id, version);
      return error(past_commit_by(id, fmt::format("version {} aborted, not committed (its turn at the disk came "
                                                  "too late)", version)));
    }
    return engine->commit(id, version);
  }
};

struct AbortJob {
  ChunkEngine* engine;
  ChunkId id;
  uint64_t version;
  Result<void> operator()() const { return engine->abort(id, version); }
};

// A resync removal (`sync`) only removes a chunk recorded as `chain`'s.
// True if it removed (or tried to remove) the chunk here.
struct RemoveJob {
  ChunkEngine* engine;
  ChunkId id;
  uint32_t chain;
  bool sync;
  std::chrono::steady_clock::time_point commit_by = std::chrono::steady_clock::time_point::max();  // as CommitJob's
  bool space_checked = false;  // before the forward (ChunkEngine::remove)
  Result<bool> operator()() const {
    if (std::chrono::steady_clock::now() > commit_by)
      return error(past_commit_by(id, "removal refused (its turn at the disk came too late)"));
    if (sync) {
      auto info = engine->stat(id);
      if (!info) return info.error().code() == Code::kNotFound ? Result<bool>{false} : error(info.error());
      if (info->chain_id != chain) return false;
    }
    auto r = engine->remove(id, space_checked);
    if (!r && r.error().code() != Code::kNotFound) return error(r.error());
    return true;
  }
};

// The full new content of a chunk whose update `u` is staged here as `staged`:
// the committed content (the version before) with `u` applied. Content that
// does not match `staged` means this replica is behind too (a syncing member
// the update reached as predicted by its predecessor, not staged here):
// kVersionMismatch, so its own predecessor sends it the whole chunk.
struct FullContentJob {
  ChunkEngine* engine;
  const ChainUpdate* u;
  WriteResult staged;

  Result<std::vector<std::byte>> operator()() const {
    std::vector<std::byte> out;
    auto old = engine->read(u->id, 0, engine->chunk_size_max());
    if (old) {
      auto d = old->data();
      out.assign(d.begin(), d.end());
    } else if (old.error().code() != Code::kNotFound) {
      return error(old.error());
    }
    // replicate() checked the update's geometry; this bounds the buffer whatever a caller does.
    const uint64_t end = u->kind == pb::UPDATE_TRUNCATE ? u->length : uint64_t{u->offset} + u->data.size();
    if (end > engine->chunk_size_max())
      return error(Code::kInvalidArgument, "chunk {}: an update ending at {} is past the chunk size maximum {}", u->id,
                   end, engine->chunk_size_max());
    if (u->kind == pb::UPDATE_TRUNCATE) {
      out.resize(u->length);
    } else {
      out.resize(std::max<size_t>(out.size(), size_t{u->offset} + u->data.size()));
      if (!u->data.empty()) std::memcpy(out.data() + u->offset, u->data.data(), u->data.size());
    }
    if (out.size() != staged.length || crc32c(out) != staged.chunk_crc)
      return error(Code::kVersionMismatch, "chunk {}: content rebuilt here does not match version {}", u->id,
                   staged.version);
    return out;
  }
};

using Clock = std::chrono::steady_clock;

// What a member keeps back of a time budget it was given: its commit and the
// reply's way back, and how much later than its sender it started counting
// (the Forward's time on the wire or in the sender's queue).
Clock::duration hop_margin(Clock::duration budget) {
  using namespace std::chrono_literals;
  return std::clamp<Clock::duration>(budget / 8, 10ms, 1s);
}

// The last instant a successor may commit an update whose Forward had to be
// answered by `deadline` (the sender's call timeout, counted from arrival).
Clock::time_point commit_deadline(Clock::time_point deadline) {
  if (deadline == Clock::time_point::max()) return deadline;
  return deadline - hop_margin(deadline - Clock::now());
}

// The timeout of a Forward from a member that must commit by `commit_by`: the
// successor's answer must come before then, with room left for this
// member's own stage to finish. 0: no time left to ask.
uint32_t forward_timeout_ms(Clock::time_point commit_by, uint32_t configured) {
  if (commit_by == Clock::time_point::max()) return configured;
  auto left = commit_by - Clock::now();
  left -= hop_margin(left) / 2;
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(left).count();
  return ms <= 0 ? 0 : static_cast<uint32_t>(std::min<int64_t>(ms, configured));
}

// The connection lane of a Forward from p's member (rpc::CallOptions::lane):
// the hops the successor still has to forward (0: it is the last, or the
// Forward stops there: a resync copy, a repair). A Forward waits only on
// Forwards of the lane below, down to lane 0's, which wait on nothing: the
// storage servers' connections to each other, which stop being read when
// full, can then not all wait on one another.
uint32_t forward_lane(const Placement& p, bool stops_there) {
  if (stops_there) return 0;
  const size_t after = p.route.write_path.size() - p.index - 2;  // p has a successor
  return static_cast<uint32_t>(std::min<size_t>(after, kForwardLanes - 1));
}

Status past_commit_by(const ChunkId& id, std::string_view what) {
  return Status(Code::kTimeout, fmt::format("chunk {}: {}: the predecessor's timeout for this update has passed "
                                            "(it gives up and aborts)", id, what));
}

uint32_t data_crc_of(const ChainUpdate& u) { return u.data_crc ? *u.data_crc : crc32c(u.data); }

// What staging `u` at `version` will produce, when that is known without
// staging: a successor was told (`expect`); the head knows it for a write
// that replaces the whole content. nullopt otherwise (partial write, truncate).
std::optional<WriteResult> predict(ChunkEngine& engine, const ChainUpdate& u, uint64_t version,
                                   const std::optional<std::pair<uint32_t, uint32_t>>& expect) {
  if (expect) return WriteResult{version, expect->first, expect->second};
  if (u.kind != pb::UPDATE_REPLACE && (u.kind != pb::UPDATE_WRITE || u.offset != 0)) return std::nullopt;
  auto info = engine.stat(u.id);  // in memory: cheap enough for an I/O thread
  if (!info && info.error().code() != Code::kNotFound) return std::nullopt;
  if (u.kind == pb::UPDATE_WRITE && info && u.data.size() < info->length) return std::nullopt;
  uint64_t v = version != 0 ? version : (info ? info->version : 0) + 1;
  return WriteResult{v, static_cast<uint32_t>(u.data.size()), data_crc_of(u)};
}

void set_held(pb::ForwardRequest& req, const std::vector<DedupTable::Key>& held) {
  req.clear_held();
  for (const auto& [client, sequence] : held) {
    auto* k = req.add_held();
    k->set_client_id(client);
    k->set_sequence(sequence);
  }
}

std::vector<DedupTable::Key> held_of(const pb::ForwardRequest& req) {
  std::vector<DedupTable::Key> held;
  held.reserve(static_cast<size_t>(req.held_size()));
  for (const auto& k : req.held()) held.emplace_back(k.client_id(), k.sequence());
  return held;
}

pb::ForwardRequest forward_request(const Placement& p, const ChainUpdate& u, const WriteResult& staged, bool sync) {
  pb::ForwardRequest req;
  req.set_chain_id(p.route.chain_id);
  req.set_chain_version(p.route.version);
  req.set_target_id(p.successor->id);
  req.mutable_chunk()->set_inode(u.id.inode);
  req.mutable_chunk()->set_index(u.id.index);
  req.set_kind(static_cast<pb::UpdateKind>(u.kind));
  req.set_version(staged.version);
  req.set_offset(u.offset);
  req.set_length(u.length);
  req.set_data_crc32c(data_crc_of(u));
  req.set_chunk_size(u.chunk_size);
  req.set_client_id(u.client_id);
  req.set_sequence(u.sequence);
  req.set_expect_chunk_length(staged.length);
  req.set_expect_chunk_crc32c(staged.chunk_crc);
  req.set_sync(sync);
  req.set_sync_recorded(sync && u.sync_recorded);
  set_held(req, u.held);
  req.set_repair(u.repair);
  req.set_forget_dedup(u.kind == pb::UPDATE_REMOVE && u.forget_dedup);
  return req;
}

template <class Reply>
Reply write_reply(const WriteResult& r) {
  Reply reply;
  reply.set_version(r.version);
  reply.set_chunk_length(r.length);
  reply.set_chunk_crc32c(r.chunk_crc);
  return reply;
}

// Whether `u` is a retry of the update recorded under its (client id,
// sequence): same chunk, same kind. A successor that had fallen behind records
// a WRITE or TRUNCATE as the UPDATE_REPLACE its predecessor rebuilt it into
// (forward_out), and may be the head when the client retries.
bool is_retry_of(const DedupEntry& e, const ChainUpdate& u) {
  if (e.chunk != u.id) return false;
  if (e.kind == u.kind) return true;
  return e.kind == pb::UPDATE_REPLACE && (u.kind == pb::UPDATE_WRITE || u.kind == pb::UPDATE_TRUNCATE);
}

// Neither committed nor pending here, or recorded in another chain (a target
// serves several chains, and the chunk id is all its locks know). stat reads
// memory: cheap on an I/O thread.
bool is_absent(ChunkEngine& engine, const ChunkId& id, mgmt::ChainId chain) {
  auto info = engine.stat(id);
  if (!info) return info.error().code() == Code::kNotFound;
  return info->chain_id != kChainUnknown && info->chain_id != chain;
}

void observe(TargetMetrics& m, Op op, bool ok, uint64_t bytes, std::chrono::steady_clock::time_point start) {
  auto& o = m.of(op);
  o.ops->inc();
  if (!ok) o.errors->inc();
  o.bytes->inc(bytes);
  o.latency_us->observe(static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start).count()));
}

}  // namespace

// Steps 3-5 on one member, with the chunk's lock held.
Task<Result<WriteResult>> StorageService::replicate(const Placement& p, const ChainUpdate& u, uint64_t version,
                                                    const Expect* expect) {
  ChunkEngine* engine = &p.target->engine();
  // A member short of space refuses before it forwards: its successors would
  // otherwise apply what it does not (reads go to any replica). A stage that
  // overlaps the forward also takes its slot first (make_room).
  if (p.successor) {
    auto room = engine->check_space();
    if (!room) co_return error(room.error());
  }
  if (u.kind == pb::UPDATE_REMOVE) {
    // Admitted before the forward: the successors' removal must be this member's too.
    WEFT_CO_TRY(DiskPool::Admission admitted, pool_.admit());
    if (p.successor) {
      auto fwd = co_await forward_out(p, u, WriteResult{}, false);
      if (!fwd) co_return error(fwd.error());
    }
    RemoveJob job{engine, u.id, p.route.chain_id, u.sync, u.commit_by, /*space_checked=*/p.successor.has_value()};
    auto removed = co_await pool_.run(admitted, job);
    // A resync removal, or a reconcile's: of what this replica recorded for
    // the chunk, what the sender did not (u.held, its keys_of) is an update
    // that failed, never acknowledged, whose retry must be applied afresh;
    // what the sender recorded too was applied there as well (a write the
    // chunk's acknowledged removal then undid): its retry is answered from the
    // record, not applied again over the removal. The reconcile's head keeps
    // all of its own (own_content): they describe what it holds.
    if ((u.sync || u.forget_dedup) && !u.own_content && (!removed || *removed))
      p.target->dedup().forget_chunk_except(u.id, u.held);
    if (!removed) co_return error(removed.error());
    if (p.successor) note_delivered(p, u.id);
    co_return WriteResult{};
  }
  std::optional<WriteResult> predicted;
  if (p.successor) {
    // Refused before anything is forwarded: a member that stages while it
    // forwards would pass on (and rebuild its successor's chunk for, at up to
    // 4 GiB) an update its own stage then refuses.
    WEFT_CO_TRY(Update staged_as, to_engine_update(u, p.route.chain_id));
    WEFT_CO_RETURN_IF_ERROR(engine->check_update(staged_as));
    std::optional<std::pair<uint32_t, uint32_t>> told;
    if (expect) told.emplace(expect->length, expect->crc);
    predicted = predict(*engine, u, version, told);
  }
  Result<StagedUpdate> staged_r;
  if (predicted) {
    staged_r = co_await stage_and_forward(p, u, *predicted, expect);
  } else {
    staged_r = co_await stage_then_forward(p, u, version, expect);
  }
  if (!staged_r) co_return error(staged_r.error());
  StagedUpdate staged = *staged_r;
  if (staged.already) {
    if (p.successor) note_delivered(p, u.id);
    co_return staged.result;
  }
  // Aborts and commits finish an admitted update: a full disk pool must not
  // refuse them (it would leave the version pending, or uncommitted here
  // while the successors committed it).
  if (WEFT_FAULT("storage.chain.commit.fail")) {
    AbortJob abort{engine, u.id, staged.result.version};
    (void)co_await pool_.finish(abort);
    co_return error(Code::kIoError, "injected: commit of chunk {}", u.id);
  }
  if (WEFT_FAULT("storage.chain.commit.delay")) {  // tests: a member slow to commit
    asio::steady_timer pause(co_await asio::this_coro::executor, std::chrono::milliseconds(800));
    co_await pause.async_wait(asio::use_awaitable);
  }
  CommitJob commit{engine, u.id, staged.result.version, u.commit_by};
  auto committed = co_await pool_.finish(commit);
  // The whole content came from the predecessor (it was rebuilt for a replica
  // that differed, or is a resync copy), maybe at the version this replica
  // had committed: of the updates its dedup table names for the chunk, only
  // those the sender's content holds (u.held) are in it; the others' retries
  // must be applied again. After a failed commit (its entry may have reached
  // the disk, or not) every entry goes. A repair restores the content the
  // entries describe: they stay.
  if (u.kind == pb::UPDATE_REPLACE && !u.repair && !u.own_content) {
    if (committed)
      p.target->dedup().replaced(u.id, u.held, pb::UPDATE_REPLACE,
                                 {staged.result.version, staged.result.length, staged.result.chunk_crc});
    else if (committed.error().code() != Code::kTimeout)  // aborted in time: the content is as it was
      p.target->dedup().forget_chunk(u.id);
  }
  if (committed && p.successor) note_delivered(p, u.id);
  co_return committed;
}

// A read-modify-write or a rebuild met damage to this member's committed
// copy: every update of the chunk would fail here until it is repaired (while
// a successor that staged in parallel commits each attempt). Retryable: the
// client's retry after the repair converges the chain (a successor that
// already committed the attempt finds it there, see StageJob).
Status StorageService::own_copy_corrupt(const Placement& p, const ChunkId& id, const Status& why) {
  request_repair(p.target->id(), id);  // repair.cc
  return Status(Code::kUnavailable, fmt::format("target {}: its copy of chunk {} is corrupt, a repair is queued: {}",
                                                p.target->id(), id, why.to_string()));
}

Task<Result<StagedUpdate>> StorageService::stage_local(const Placement& p, const ChainUpdate& u, uint64_t version,
                                                       const Expect* expect, Room* room) {
  StageJob stage{&p.target->engine(), &u, p.route.chain_id, version, expect != nullptr, expect ? expect->length : 0,
                 expect ? expect->crc : 0, room ? &room->slot : nullptr};
  Result<StagedUpdate> staged;
  if (room) {
    staged = co_await pool_.run(room->admission, stage);
  } else {
    staged = co_await pool_.run(stage);
  }
  if (!staged && staged.error().code() == Code::kCorruption) co_return error(own_copy_corrupt(p, u.id, staged.error()));
  co_return staged;
}

// Before a member forwards an update it stages meanwhile: whatever could
// refuse that stage for lack of room (space guard, capacity, slab growth, a
// failing fallocate, a full disk pool) refuses now, before the successor
// commits what this member would then not have.
Task<Result<StorageService::Room>> StorageService::make_room(const Placement& p, uint32_t length) {
  Room room;
  WEFT_CO_TRY(room.admission, pool_.admit());
  WEFT_CO_TRY(room.slot, p.target->engine().reserve(length));
  if (!room.slot.ready()) {
    PrepareJob prepare{&p.target->engine(), &room.slot};
    WEFT_CO_RETURN_IF_ERROR(co_await pool_.run(prepare));
  }
  co_return std::move(room);
}

// Step 3, then step 4 with the staged result (the head of a partial write).
Task<Result<StagedUpdate>> StorageService::stage_then_forward(const Placement& p, const ChainUpdate& u,
                                                              uint64_t version, const Expect* expect) {
  auto staged = co_await stage_local(p, u, version, expect);
  if (!staged || !p.successor) co_return staged;
  auto fwd = co_await forward_out(p, u, staged->result, false);
  if (!fwd) {
    if (!staged->already) {
      AbortJob abort{&p.target->engine(), u.id, staged->result.version};
      (void)co_await pool_.finish(abort);
    }
    co_return error(fwd.error());
  }
  co_return staged;
}

// Steps 3 and 4 at the same time: the local slot write and sync overlap the
// successor's whole round trip. A failed forward aborts the local stage. The
// local stage cannot fail for lack of room (make_room); a local failure
// otherwise (a read-modify-write meeting damage, an I/O error) fails the
// update retryably although the successor may have committed it: the retry
// finds it there, or replaces it (see forward_out).
Task<Result<StagedUpdate>> StorageService::stage_and_forward(const Placement& p, const ChainUpdate& u,
                                                             WriteResult predicted, const Expect* expect) {
  WEFT_CO_TRY(Room room, co_await make_room(p, predicted.length));
  auto local = stage_local(p, u, predicted.version, expect, &room);
  auto remote = forward_out(p, u, predicted, false);
  auto joined = std::move(local) && std::move(remote);
  auto both = co_await std::move(joined);
  Result<StagedUpdate> staged = std::move(std::get<0>(both));
  const Result<void>& fwd = std::get<1>(both);
  bool differs = staged && !staged->already &&
                 (staged->result.length != predicted.length || staged->result.chunk_crc != predicted.chunk_crc);
  if (staged && !staged->already && (!fwd || differs)) {
    AbortJob abort{&p.target->engine(), u.id, staged->result.version};
    (void)co_await pool_.finish(abort);
  }
  // This replica is behind (it did not stage): that comes first, whatever
  // the successor said. Its predecessor then sends it the whole chunk, which
  // it passes on; a forward error (e.g. the rebuild of a successor's chunk
  // from this replica's stale copy) would hide it and fail the update.
  if (!staged && staged.error().code() == Code::kVersionMismatch) co_return error(staged.error());
  if (!fwd) co_return error(fwd.error());
  if (differs)
    co_return error(Code::kInternal, "chunk {} version {}: staged result differs from the one forwarded", u.id,
                    predicted.version);
  co_return staged;
}

// Step 4: sends the staged update to the successor; a successor that fell
// behind answers kVersionMismatch and gets the whole chunk instead.
Task<Result<void>> StorageService::forward_out(const Placement& p, const ChainUpdate& u, const WriteResult& staged,
                                               bool sync) {
  if (WEFT_FAULT("storage.forward.fail")) co_return error(Code::kUnavailable, "injected: forward of {}", u.id);
  pb::ForwardRequest req = forward_request(p, u, staged, sync);
  req.set_order(next_forward_order());
  rpc::CallOptions options;
  options.lane = forward_lane(p, sync || u.repair);
  options.timeout_ms = forward_timeout_ms(u.commit_by, options_.forward_timeout_ms);
  if (options.timeout_ms == 0) co_return error(past_commit_by(u.id, "not forwarded"));
  if (!u.data.empty()) options.payload.push_back(u.data);
  u.forward_sent = true;
  auto r = co_await client_.call<pb::ForwardReply>(p.successor->endpoint, methods::kForward, req, std::move(options));
  if (r && WEFT_FAULT("storage.forward.drop_reply"))  // tests: delivered and applied, the reply lost
    co_return error(Code::kDisconnected, "injected: the reply of target {} was lost", p.successor->id);
  if (r) co_return Result<void>{};
  bool rebuildable = u.kind == pb::UPDATE_WRITE || u.kind == pb::UPDATE_TRUNCATE;
  if (r.error().code() != Code::kVersionMismatch || !rebuildable)
    co_return error(r.error().with_context(fmt::format("forward to target {}", p.successor->id)));
  FullContentJob rebuild{&p.target->engine(), &u, staged};
  auto full = co_await pool_.run(rebuild);
  if (!full && full.error().code() == Code::kCorruption) co_return error(own_copy_corrupt(p, u.id, full.error()));
  if (!full) co_return error(full.error());
  req.set_kind(pb::UPDATE_REPLACE);
  req.set_order(next_forward_order());
  req.set_offset(0);
  req.set_length(static_cast<uint32_t>(full->size()));
  req.set_data_crc32c(crc32c(*full));
  set_held(req, p.target->dedup().keys_of(u.id, kHeldKeysMax));  // what this member's content holds
  rpc::CallOptions replace_options;
  replace_options.lane = options.lane;
  replace_options.timeout_ms = forward_timeout_ms(u.commit_by, options_.forward_timeout_ms);
  if (replace_options.timeout_ms == 0) co_return error(past_commit_by(u.id, "full chunk not forwarded"));
  replace_options.payload.push_back(std::span<const std::byte>(*full));
  auto r2 = co_await client_.call<pb::ForwardReply>(p.successor->endpoint, methods::kForward, req,
                                                    std::move(replace_options));
  if (!r2) co_return error(r2.error().with_context(fmt::format("forward (full chunk) to target {}", p.successor->id)));
  co_return Result<void>{};
}

// Steps 1-2 at the head, then replicate().
Task<Result<WriteResult>> StorageService::head_update(mgmt::ChainId chain, mgmt::ChainVersion version, Op op,
                                                      const ChainUpdate& u, bool* absent) {
  auto start = std::chrono::steady_clock::now();
  WEFT_CO_RETURN_IF_ERROR(check_write_fence());
  WEFT_CO_TRY(Placement first, locate(chain, version));
  if (first.index != 0)
    co_return error(Code::kNotChainHead, "target {} is not the head of chain {}", first.target->id(), chain);
  ChunkLocks::Guard guard = co_await first.target->locks().lock(u.id);
  // Re-checked: the lease may have run out, the routing changed, while waiting.
  WEFT_CO_RETURN_IF_ERROR(check_write_fence());
  auto p = locate(chain, version);
  if (!p) co_return error(p.error());
  if (p->index != 0) co_return error(Code::kNotChainHead, "target {} is no longer the head of chain {}", p->target->id(), chain);
  StorageTarget& t = *p->target;
  // Under the lock no update of the chunk is on its way here: absent now
  // (nothing committed, nothing pending) is absent for the whole chain.
  if (absent != nullptr && is_absent(t.engine(), u.id, chain)) {
    *absent = true;
    co_return error(Code::kNotFound, "chunk {} of chain {} is not on target {}", u.id, chain, t.id());
  }
  if (auto hit = t.dedup().find(u.client_id, u.sequence)) {
    // Not a retry: answering with the recorded outcome would report an update
    // that was never applied as done.
    if (!is_retry_of(*hit, u))
      co_return error(Code::kInvalidArgument,
                      "client {:016x} sequence {} was used for chunk {} (update kind {}), now for chunk {} (kind {})",
                      u.client_id, u.sequence, hit->chunk, hit->kind, u.id, u.kind);
    t.metrics().dedup_hits.inc();
    co_return WriteResult{hit->outcome.version, hit->outcome.chunk_length, hit->outcome.chunk_crc};
  }
  if (u.retry && t.dedup().forgotten(u.client_id, u.sequence))
    co_return error(Code::kOutcomeUnknown,
                    "client {:016x} sequence {} (chunk {}): a retry whose first outcome target {} no longer "
                    "remembers (its dedup table evicted this client's entries up to there); refused rather than "
                    "applied a second time",
                    u.client_id, u.sequence, u.id, t.id());
  std::optional<uint64_t> committed;  // before the update (0: no chunk), if known
  if (p->successor) {
    auto info = t.engine().stat(u.id);  // in memory: cheap enough for an I/O thread
    if (info) committed = info->version;
    else if (info.error().code() == Code::kNotFound) committed = 0;
  }
  auto r = co_await replicate(*p, u, 0, nullptr);
  if (r) t.dedup().record(u.client_id, u.sequence, {u.id, u.kind, {r->version, r->length, r->chunk_crc}});
  // Failed after forwarding: the members after this one may have committed
  // it (reconcile.cc). Failed before (no room, the disk pool full, the local
  // stage): nothing changed elsewhere, and under overload such notes would
  // crowd out the ones that matter.
  if (!r && committed && u.forward_sent) note_in_doubt(*p, u.id, *committed, "after a failed update");
  observe(t.metrics(), op, r.has_value(), u.data.size(), start);
  co_return r;
}

Task<Result<pb::WriteReply>> StorageService::write(const pb::WriteRequest& req, rpc::ServerCall& call) {
  // Refused here too (the engine does), before anything is locked or forwarded.
  if (req.length() == 0)
    co_return error(Code::kInvalidArgument, "write of 0 bytes to chunk {}",
                    ChunkId{req.chunk().inode(), req.chunk().index()});
  WEFT_CO_TRY(Placement p, locate(req.chain_id(), req.chain_version()));
  WEFT_CO_RETURN_IF_ERROR(check_payload(call, req.length(), req.data_crc32c(), *p.target));
  ChainUpdate u{pb::UPDATE_WRITE, ChunkId{req.chunk().inode(), req.chunk().index()}, req.offset(), req.length(),
                call.payload.span(), req.chunk_size(), req.client_id(), req.sequence()};
  u.retry = req.attempt() > 0;
  u.data_crc = req.data_crc32c();  // check_payload verified it
  auto r = co_await head_update(req.chain_id(), req.chain_version(), Op::kWrite, u);
  if (!r) co_return error(r.error());
  co_return write_reply<pb::WriteReply>(*r);
}

Task<Result<pb::WriteReply>> StorageService::truncate(const pb::TruncateRequest& req, rpc::ServerCall&) {
  ChainUpdate u{pb::UPDATE_TRUNCATE, ChunkId{req.chunk().inode(), req.chunk().index()}, 0, req.length(), {},
                req.chunk_size(), req.client_id(), req.sequence()};
  u.retry = req.attempt() > 0;
  auto r = co_await head_update(req.chain_id(), req.chain_version(), Op::kTruncate, u);
  if (!r) co_return error(r.error());
  co_return write_reply<pb::WriteReply>(*r);
}

Task<Result<pb::RemoveReply>> StorageService::remove(const pb::RemoveRequest& req, rpc::ServerCall&) {
  ChainUpdate u{pb::UPDATE_REMOVE, ChunkId{req.chunk().inode(), req.chunk().index()}, 0, 0, {}, 0,
                req.client_id(), req.sequence()};
  u.retry = req.attempt() > 0;
  auto r = co_await head_update(req.chain_id(), req.chain_version(), Op::kRemove, u);
  if (!r) co_return error(r.error());
  co_return pb::RemoveReply{};
}

// Steps 3-5 on a successor.
Task<Result<pb::ForwardReply>> StorageService::forward_in(const pb::ForwardRequest& req, rpc::ServerCall& call) {
  auto start = std::chrono::steady_clock::now();
  WEFT_CO_RETURN_IF_ERROR(check_write_fence());
  WEFT_CO_TRY(Placement first, locate(req.chain_id(), req.chain_version()));
  if (first.target->id() != req.target_id() || first.index == 0)
    co_return error(Code::kStaleRouting, "target {} is not at position {} of chain {}", req.target_id(), first.index,
                    req.chain_id());
  StorageTarget& t = *first.target;
  // proto3 keeps enum values it does not know: an unknown kind would otherwise
  // be staged as a write without data.
  if (!pb::UpdateKind_IsValid(req.kind()))
    co_return error(Code::kInvalidArgument, "forward of chunk {}: unknown update kind {}",
                    ChunkId{req.chunk().inode(), req.chunk().index()}, static_cast<int>(req.kind()));
  bool has_data = req.kind() == pb::UPDATE_WRITE || req.kind() == pb::UPDATE_REPLACE;
  if (has_data) WEFT_CO_RETURN_IF_ERROR(check_payload(call, req.length(), req.data_crc32c(), t));
  ChainUpdate u{req.kind(), ChunkId{req.chunk().inode(), req.chunk().index()}, req.offset(), req.length(),
                has_data ? call.payload.span() : std::span<const std::byte>{}, req.chunk_size(), req.client_id(),
                req.sequence()};
  if (has_data) u.data_crc = req.data_crc32c();  // check_payload verified it
  u.commit_by = commit_deadline(call.deadline);
  ChunkLocks::Guard guard = co_await t.locks().lock(u.id);
  if (Clock::now() > u.commit_by) co_return error(past_commit_by(u.id, "not staged: the chunk's lock came too late"));
  WEFT_CO_RETURN_IF_ERROR(check_write_fence());  // the lease may have run out while waiting
  auto p = locate(req.chain_id(), req.chain_version());
  if (!p) co_return error(p.error());
  if (req.sync() || req.repair()) p->successor.reset();  // resync copies and repairs stop at the target addressed
  // A resync copy held up until after an update the source sent later was
  // applied here must not move the chunk back under it (sync_order.h).
  if (!p->readable && req.sync() && req.order() != 0) {
    if (uint64_t last = t.sync_order().last_applied(req.chain_id(), req.chain_version(), u.id); last > req.order())
      co_return error(Code::kVersionMismatch,
                      "resync copy of chunk {} refused: it was sent (order {}) before an update applied here since "
                      "(order {}; of this chunk, or of its bucket once too many chunks were updated to remember "
                      "each: sync_order.h)",
                      u.id, req.order(), last);
  }
  u.sync = req.sync();
  u.sync_recorded = req.sync() && req.sync_recorded();
  u.held = held_of(req);
  u.repair = req.repair();
  u.forget_dedup = req.kind() == pb::UPDATE_REMOVE && req.forget_dedup();
  if (u.repair && u.kind != pb::UPDATE_REPLACE)
    co_return error(Code::kInvalidArgument, "repair of chunk {} as update kind {}", u.id, u.kind);
  Expect expect{req.expect_chunk_length(), req.expect_chunk_crc32c()};
  auto r = co_await replicate(*p, u, req.version(), req.kind() == pb::UPDATE_REMOVE ? nullptr : &expect);
  if (r) t.dedup().record(u.client_id, u.sequence, {u.id, u.kind, {r->version, r->length, r->chunk_crc}});
  if (r && !p->readable && !req.sync() && !req.repair() && req.order() != 0)
    t.sync_order().applied(req.chain_id(), req.chain_version(), u.id, req.order());
  observe(t.metrics(), req.sync() || req.repair() ? Op::kSync : Op::kForward, r.has_value(), u.data.size(), start);
  if (!r) co_return error(r.error());
  co_return write_reply<pb::ForwardReply>(*r);
}

}  // namespace weft::storage
