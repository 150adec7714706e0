#include "client/early_read.h"

#include "client/placement.h"
#include "client/truncate.h"

namespace weft::client {

std::unique_ptr<EarlyRead> EarlyRead::prepare(Core& core, const Inode& listed, uint64_t changes_at_start) {
  const size_t max = core.options.early_read_bytes_max;
  // Small files only, read whole (within chunk 0): a reader of a larger file
  // may want a few bytes of it, anywhere.
  if (!listed.is_file() || listed.size == 0 || listed.size > max || listed.layout.chunk_bytes == 0) return nullptr;
  const size_t bytes = static_cast<size_t>(std::min<uint64_t>(listed.size, listed.layout.chunk_bytes));
  auto stripe = file_stripe(core, listed.layout);
  if (!stripe || stripe->empty()) return nullptr;  // the open's own read tells what is wrong
  const ChunkAddress address{listed.ino, 0, chain_of_chunk(*stripe, 0), listed.layout.chunk_bytes};
  if (!core.early_reads->try_acquire(bytes)) return nullptr;
  return std::unique_ptr<EarlyRead>(new EarlyRead(core, listed, address, bytes, changes_at_start));
}

bool EarlyRead::matches(const Inode& listed, const Inode& opened) {
  return opened.ino == listed.ino && opened.type == listed.type && opened.size == listed.size &&
         opened.mtime_ns == listed.mtime_ns && opened.ctime_ns == listed.ctime_ns && opened.layout == listed.layout;
}

EarlyRead::EarlyRead(Core& core, Inode listed, ChunkAddress address, size_t bytes, uint64_t changes_at_start)
    : core_(core),
      listed_(std::move(listed)),
      address_(address),
      changes_at_start_(changes_at_start),
      charged_(bytes),
      data_(Buffer::allocate(bytes)) {}

EarlyRead::~EarlyRead() {
  if (charged_ > 0) core_.early_reads->release(charged_);
}

// One replica, a short wait: the open waits for this read, and a replica
// that does not answer must not hold an open for the call timeout (the
// File's own read then goes through the usual retries and fail-over).
void EarlyRead::read_here() {
  got_ = core_.chunks->read_blocking(address_, 0, data_.span(),
                                     ReadBounds{.timeout_ms = kTimeoutMs, .replicas_max = 1});
}

Buffer EarlyRead::take_buffer(size_t* charged) {
  *charged = std::exchange(charged_, 0);
  return std::move(data_);
}

}  // namespace weft::client
