// Read path of the chunk engine: range reads verified per 4 KiB block, and
// whole-chunk verification for the scrubber.
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>

#include "common/clock.h"
#include "common/crc32c.h"
#include "common/fault.h"
#include "storage/chunk_engine.h"
#include "storage/engine_internal.h"

namespace weft::storage {

Result<void> ChunkEngine::check_blocks(const ChunkMeta& meta, uint32_t first_block, uint32_t count,
                                       const std::byte* data) {
  for (uint32_t i = 0; i < count; ++i) {
    uint32_t b = first_block + i;
    uint32_t valid = std::min<uint32_t>(kBlockBytes, meta.length - b * kBlockBytes);
    uint32_t crc = crc32c(data + size_t{i} * kBlockBytes, valid);
    if (crc != meta.block_crcs[b] || WEFT_FAULT("storage.read.crc_mismatch")) {
      metrics_->checksum_failures.inc();
      return error(Code::kCorruption, "block {} (class {} slot {}): crc32c {:08x}, index says {:08x}", b,
                   meta.size_class, meta.slot, crc, meta.block_crcs[b]);
    }
  }
  return {};
}

// REQUIRES: the slot of `meta` cannot be freed meanwhile (chunk lock or pin).
Result<void> ChunkEngine::read_verified(const ChunkMeta& meta, uint32_t first_block, uint32_t block_count,
                                        std::byte* out) {
  WEFT_TRY(SlabFile * file, slab(meta.size_class));
  WEFT_RETURN_IF_ERROR(file->read(*ring_, meta.slot, uint64_t{first_block} * kBlockBytes, out, block_count * kBlockBytes));
  return check_blocks(meta, first_block, block_count, out);
}

// The stripe lock orders this lookup against a commit or remove, which change
// the entry and free the old slot under the exclusive lock: either the slot is
// pinned before it is freed, or the lookup sees the new entry.
Result<std::optional<ChunkMeta>> ChunkEngine::lookup_pinned(const ChunkId& id) {
  std::shared_lock lock(stripe(id).mu);
  std::optional<ChunkMeta> meta = get_meta_locked(id);
  if (auto slot = meta ? slot_of(*meta) : std::nullopt) space_.pin(*slot);
  return meta;
}

// A read whose slot is pinned and whose buffer is allocated; `count` == 0
// means there is nothing to transfer (range past the end).
struct ChunkEngine::ReadPlan {
  ChunkId id;
  ChunkMeta meta;
  uint32_t first = 0;
  uint32_t count = 0;
  int fd = -1;
  uint64_t file_offset = 0;
  ReadResult result;
  std::chrono::steady_clock::time_point start;
};

Result<ChunkEngine::ReadPlan> ChunkEngine::plan_read(const ChunkId& id, uint32_t offset, uint32_t length) {
  ReadPlan plan;
  plan.start = std::chrono::steady_clock::now();
  plan.id = id;
  if (offset > options_.chunk_size_max)
    return error(Code::kInvalidArgument, "read offset {} past chunk size maximum {}", offset, options_.chunk_size_max);
  WEFT_TRY(auto found, lookup_pinned(id));
  if (!found) return error(Code::kNotFound, "chunk {} not found", id);
  plan.meta = std::move(*found);
  const ChunkMeta& meta = plan.meta;
  uint64_t end = std::min<uint64_t>(uint64_t{offset} + length, meta.length);
  plan.result.version = meta.version;
  plan.result.chunk_length = meta.length;
  if (end <= offset) return plan;
  auto file = slab(meta.size_class);
  if (!file) {
    space_.unpin(*slot_of(meta));  // end > offset: not empty
    return error(file.error());
  }
  BlockSpan span = blocks_of(offset, end);
  plan.first = span.first;
  plan.count = span.count;
  plan.fd = (*file)->fd();
  plan.file_offset = uint64_t{meta.slot} * class_bytes(meta.size_class) + uint64_t{plan.first} * kBlockBytes;
  plan.result.buffer = Buffer::allocate(size_t{plan.count} * kBlockBytes);
  plan.result.data_offset = offset - plan.first * kBlockBytes;
  plan.result.data_length = static_cast<size_t>(end - offset);
  return plan;
}

// A read of the whole chunk is checked against the chunk's CRC: one pass over
// the bytes gives both the check and the CRC the reply carries (block CRCs
// and then the reply's would read every byte twice). A mismatch is looked at
// block by block, to name the damaged block. A partial read checks its blocks.
// With fault injection armed the blocks are always checked: tests arm
// "storage.read.crc_mismatch" per 4 KiB block.
Result<void> ChunkEngine::check_read(ReadPlan& plan) {
  const ChunkMeta& meta = plan.meta;
  const std::byte* data = plan.result.buffer.data();
  const bool one_pass = plan.first == 0 && plan.result.data_offset == 0 && plan.result.data_length == meta.length &&
                        !fault::any_armed();
  if (one_pass) {
    uint32_t crc = crc32c(data, meta.length);
    if (crc == meta.chunk_crc) {
      plan.result.data_crc = crc;
      return {};
    }
  }
  auto ok = check_blocks(meta, plan.first, plan.count, data);
  if (ok && one_pass) {  // the blocks match their CRCs, the whole does not
    metrics_->checksum_failures.inc();
    ok = error(Code::kCorruption, "chunk crc32c does not match the index's {:08x}", meta.chunk_crc);
  }
  if (!ok) return error(ok.error().with_context(fmt::format("read chunk {}", plan.id)));
  return {};
}

// Unpins the slot, checks the transfer and the CRCs. `res` as from the ring.
Result<ReadResult> ChunkEngine::finish_read(ReadPlan& plan, int res) {
  if (auto slot = slot_of(plan.meta)) space_.unpin(*slot);
  if (plan.count > 0) {
    if (res < 0) return errno_error(-res, fmt::format("read chunk {}", plan.id));
    if (static_cast<uint32_t>(res) != plan.count * kBlockBytes)
      return error(Code::kIoError, "short read of chunk {}: {} bytes", plan.id, res);
    WEFT_RETURN_IF_ERROR(check_read(plan));
  }
  metrics_->reads.inc();
  metrics_->bytes_read.inc(plan.result.data_length);
  metrics_->read_latency_us.observe(elapsed_us(plan.start));
  return std::move(plan.result);
}

void ChunkEngine::read_async(const ChunkId& id, uint32_t offset, uint32_t length, ReadDone done) {
  read_async(id, offset, length, *ring_, std::move(done));
}

void ChunkEngine::read_async(const ChunkId& id, uint32_t offset, uint32_t length, ReadSubmitter& via,
                             ReadDone done) {
  auto plan = plan_read(id, offset, length);
  if (!plan) return done(error(plan.error()));
  if (plan->count == 0) return done(finish_read(*plan, 0));
  int fd = plan->fd;
  uint64_t file_offset = plan->file_offset;
  uint32_t bytes = plan->count * kBlockBytes;
  std::byte* buf = plan->result.buffer.data();
  via.submit_read(fd, buf, bytes, file_offset, [this, plan = std::move(*plan), done = std::move(done)](int res) mutable {
    done(finish_read(plan, res));
  });
}

namespace {

// pread until done, EOF or an error; bytes read or -errno (as a ring reports).
int pread_full(int fd, std::byte* buf, uint32_t len, uint64_t offset) {
  uint32_t done = 0;
  while (done < len) {
    ssize_t n = ::pread(fd, buf + done, len - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -errno;
    if (n == 0) break;
    done += static_cast<uint32_t>(n);
  }
  return static_cast<int>(done);
}

}  // namespace

// Blocking form, for callers that block anyway (a disk pool thread): a plain
// O_DIRECT pread on the caller's thread. Through the ring it would cost a
// wake-up of the ring's completion thread and then one of the caller, and on
// a busy machine each wake-up waits for a CPU. The CRC check runs here too.
Result<ReadResult> ChunkEngine::read(const ChunkId& id, uint32_t offset, uint32_t length) {
  WEFT_TRY(ReadPlan plan, plan_read(id, offset, length));
  int res = plan.count == 0 ? 0 : pread_full(plan.fd, plan.result.buffer.data(), plan.count * kBlockBytes, plan.file_offset);
  return finish_read(plan, res);
}

Result<void> ChunkEngine::verify(const ChunkId& id) {
  WEFT_TRY(auto found, lookup_pinned(id));
  if (!found) return error(Code::kNotFound, "chunk {} not found", id);
  const ChunkMeta& meta = *found;
  uint32_t count = blocks_for(meta.length);
  Buffer buf = Buffer::allocate(size_t{count} * kBlockBytes);
  auto checked = [&]() -> Result<void> {
    if (count == 0) return {};
    WEFT_RETURN_IF_ERROR(read_verified(meta, 0, count, buf.data()));
    uint32_t whole = crc32c(buf.data(), meta.length);
    if (whole != meta.chunk_crc) {
      metrics_->checksum_failures.inc();
      return error(Code::kCorruption, "chunk crc32c {:08x}, index says {:08x}", whole, meta.chunk_crc);
    }
    return {};
  }();
  if (auto slot = slot_of(meta)) space_.unpin(*slot);
  if (!checked) return error(checked.error().with_context(fmt::format("verify chunk {}", id)));
  return {};
}

}  // namespace weft::storage
