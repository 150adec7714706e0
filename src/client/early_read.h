// client/early_read.h
// Early reads: a read-only open by path of a small file whose name a recent
// directory listing gave (client/dir_ahead.h, kept as a hint only) reads the
// file (its first chunk) from storage while meta answers the open, instead
// of after it: the open and the read then cost one round trip's wait
// instead of two (a first epoch over small files).
// Kept only when meta's answer to the open matches the listing (the same
// inode, type, length, mtime, ctime and layout; matches()), so the bytes are
// those a read after the open would have found:
//   - Another client's data change visible to this open went through a
//     length report, which moves ctime (meta/store_session.cc apply_length),
//     after its data was acknowledged by storage. A report before the listing
//     means the data was on storage before the read began; one after it, and
//     before meta answered the open, moves ctime away from the listing's.
//     (A write not reported yet need not be seen: close-to-open.)
//   - A truncate, unlink, rename over the name, layout or link change
//     moves ctime or answers another inode (or an error).
//   - This client's own writes: the read is not started while a File of
//     the inode is open here for writing (or a truncate pins it), and is
//     dropped when any data changed through this client (Core::local_changes)
//     between its start and the moment the File holding it is registered,
//     after which a write here drops it as it drops read-ahead
//     (Core::chunk_written).
// Both calls run on the opening thread: the open's request goes to meta, the
// read is made, then meta's answer is read (MetaClient::start_open_read_at;
// through the I/O threads, either call cost a hand-off and a wake-up more
// than the overlap saved). The buffer is charged to Core::early_reads (no
// early read when that is spent) until the File holding it lets it go (its
// first read, or its close), or the EarlyRead is dropped.
// Threading: one thread's.
#pragma once

#include <cstdint>
#include <memory>

#include "client/chunk_io.h"
#include "client/core.h"
#include "common/buffer.h"

namespace weft::client {

class EarlyRead {
 public:
  // Prepares to read `listed` (a regular file's attributes from a listing)
  // whole, or its first chunk, if it holds at most early_read_bytes_max
  // bytes; null when there is nothing to read (empty, larger) or no room
  // left in Core::early_reads. REQUIRES: `changes_at_start` is
  // Core::local_changes as read before the caller saw no File of the inode
  // open here for writing.
  static std::unique_ptr<EarlyRead> prepare(Core& core, const Inode& listed, uint64_t changes_at_start);
  // Whether meta's answer `opened` leaves the listing's bytes valid.
  static bool matches(const Inode& listed, const Inode& opened);

  ~EarlyRead();
  EarlyRead(const EarlyRead&) = delete;
  EarlyRead& operator=(const EarlyRead&) = delete;

  // Reads them on the calling thread from one replica, waiting at most
  // kTimeoutMs (an error then: the File reads for itself).
  void read_here();
  static constexpr uint32_t kTimeoutMs = 500;
  // After read_here(): the bytes read (from offset 0 of chunk 0) or the error.
  const Result<uint32_t>& got() const { return got_; }
  const Inode& listed() const { return listed_; }
  uint64_t changes_at_start() const { return changes_at_start_; }
  // After read_here(): hands the buffer (and its charge to Core::early_reads)
  // to the caller, who then owns both; the EarlyRead releases nothing after.
  Buffer take_buffer(size_t* charged);

 private:
  EarlyRead(Core& core, Inode listed, ChunkAddress address, size_t bytes, uint64_t changes_at_start);

  Core& core_;
  const Inode listed_;
  const ChunkAddress address_;
  const uint64_t changes_at_start_;
  size_t charged_;
  Buffer data_;
  Result<uint32_t> got_ = 0u;
};

}  // namespace weft::client
