#include "client/truncate.h"

#include "client/placement.h"
#include "common/fault.h"
#include "client/remove_chunks.h"
#include "meta/layout.h"
#include "meta/permission.h"

#include <thread>

namespace weft::client {

Result<std::vector<mgmt::ChainId>> file_stripe(RoutingCache& routing_cache, const Layout& layout) {
  // Meta's rule (a layout a caller made up, e.g. a ReadOp's: a chunk size of
  // 0 would divide by zero wherever the file's chunks are placed).
  WEFT_RETURN_IF_ERROR(meta::validate_layout(layout));
  auto routing = routing_cache.current();
  auto stripe = stripe_chains(layout, *routing);
  if (stripe) return stripe;
  // The table may be new: fetch the routing again once.
  routing_cache.request_refresh();
  for (int i = 0; i < 50 && routing_cache.current() == routing; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  return stripe_chains(layout, *routing_cache.current());
}

Result<std::vector<mgmt::ChainId>> file_stripe(Core& core, const Layout& layout) {
  return file_stripe(*core.routing, layout);
}

Result<uint64_t> stored_end(RoutingCache& routing, ChunkIo& chunks, const Inode& inode, uint64_t cut, uint64_t end) {
  if (end <= cut) return cut;
  const uint32_t cb = inode.layout.chunk_bytes;
  WEFT_TRY(auto stripe, file_stripe(routing, inode.layout));
  const uint64_t first = cut / cb;  // the chunk the truncate cut (or the first it removed)
  const uint64_t last = (end - 1) / cb + 1;
  std::vector<Task<Result<std::optional<uint64_t>>>> lists;
  for (mgmt::ChainId chain : distinct_chains(stripe)) lists.push_back(chunks.data_end(inode.ino, chain, cb, first, last));
  uint64_t found = cut;
  for (auto& r : run_parallel(chunks.io(), std::move(lists))) {
    if (!r) return error(r.error().with_context(fmt::format("look for the data of file {} past {}", inode.ino, cut)));
    if (*r) found = std::max(found, **r);
  }
  return std::min(found, end);
}

Result<uint64_t> stored_end(Core& core, const Inode& inode, uint64_t cut, uint64_t end) {
  return stored_end(*core.routing, *core.chunks, inode, cut, end);
}

namespace {

// Whether meta will take a new length from this caller, asked before any
// chunk is removed: through `session` (ftruncate) if meta still has it open
// for this client, else by write permission on `inode` (just read), as meta's
// setattr decides. A session meta no longer has (closed by the session
// reaper after this client lost its lease, or the file gone with it) and no
// write permission: kBadHandle, as the File's other calls will answer.
// (Not a setattr of the old length as a probe: that could undo a length
// another writer reported since the inode was read. A length report of 0
// changes nothing: it never shortens a file.) Returns the inode as meta has
// it after the check (a report moves ctime).
Result<Inode> check_may_truncate(Core& core, const Cred& cred, const Inode& inode, uint64_t session) {
  if (session != 0) {
    auto held = core.meta->report_length(cred, inode.ino, session, 0);  // 0: never capped
    if (held) return held->inode;
    if (held.error().code() != Code::kBadHandle) return std::unexpected(held.error());
    if (meta::check_access(inode, cred, meta::kAccessWrite)) return inode;
    return error(held.error().with_context(fmt::format(
        "truncate file {}: the write session is no longer open and the file is not writable by uid {}", inode.ino,
        cred.uid)));
  }
  WEFT_RETURN_IF_ERROR(meta::check_access(inode, cred, meta::kAccessWrite));
  return inode;
}

// Removes the chunks past `new_size` (every one from the first past it, no
// upper bound) and cuts the chunk holding the new end.
Result<void> cut_storage(Core& core, const Inode& inode, uint64_t old_size, uint64_t new_size) {
  const uint32_t cb = inode.layout.chunk_bytes;
  WEFT_TRY(auto stripe, file_stripe(core, inode.layout));
  const FileChunks file{inode.ino, cb, std::move(stripe)};
  // Every chunk from the first past the new end, with no upper bound (one
  // RemoveRange per chain: it costs the chunks there are): also those a
  // writer sent past the length meta knows and never reported (it died).
  const uint64_t keep = meta::chunk_count(new_size, cb);  // chunks [0, keep) stay
  WEFT_RETURN_IF_ERROR(remove_chunks_from(*core.chunks, file, keep, meta::chunk_count(old_size, cb)));
  if (new_size % cb == 0) return {};
  const uint64_t last = new_size / cb;
  std::vector<Task<Result<void>>> tasks;
  tasks.push_back(core.chunks->truncate({inode.ino, last, chain_of_chunk(file.stripe, last), cb},
                                        static_cast<uint32_t>(new_size % cb)));
  return first_error(run_parallel(*core.io, std::move(tasks)));
}

// Rounds of "cut, then set the length if meta still has the length read"
// before the length is set whatever meta has (a file extended by another
// writer at every round: pathological).
constexpr int kCutRoundsMax = 8;

}  // namespace

Result<void> truncate_file(Core& core, const Cred& cred, const Inode& inode, uint64_t old_size, uint64_t new_size,
                           uint64_t session) {
  if (inode.is_dir()) return error(Code::kIsDirectory, "inode {} is a directory", inode.ino);
  // As meta (and truncate(2) on a FIFO, socket or device): no length to set.
  if (!inode.is_file()) return error(Code::kInvalidArgument, "inode {} is not a regular file", inode.ino);
  // Before any chunk is touched (meta would refuse the length only at the end).
  if (new_size > meta::kFileBytesMax)
    return error(Code::kFileTooBig, "length {} of file {} beyond the maximum file size {}", new_size, inode.ino,
                 meta::kFileBytesMax);
  // Storage is cut when the file shortens, and by every truncate to 0 (O_TRUNC
  // of a file meta knows as empty may find a crashed writer's chunks). An
  // extension leaves storage alone: chunks past meta's length may be another
  // writer's whose length is not reported yet.
  // The chunks go first (a later extension must read zeros, never old
  // bytes), then meta records the length: the common reasons meta would
  // refuse it (no permission, a session that is gone, a file that is gone)
  // are asked for first, so that they leave everything as it was.
  Inode seen = inode;  // meta's inode as last read: the length and ctime it must still have
  bool cut_any = false;
  for (int round = 1;; ++round) {
    // Per round: a writer may have made the file longer than the new length since.
    const bool cuts = new_size < std::max(old_size, seen.size) || new_size == 0;
    if (cuts && !cut_any) {
      WEFT_TRY(seen, check_may_truncate(core, cred, seen, session));
    }
    if (cuts) {
      while (WEFT_FAULT("client.truncate.before_cut.hold")) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // tests
      WEFT_RETURN_IF_ERROR(cut_storage(core, inode, std::max(old_size, seen.size), new_size));
      cut_any = true;
    }
    while (WEFT_FAULT("client.truncate.hold")) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // tests
    SetAttr attr;
    attr.size = new_size;
    attr.size_session = session;
    attr.no_cut = !cut_any;  // an extension: other writers' bytes all stayed
    // A writer that reported since `seen` was read (a longer length, or any
    // report: it moves ctime) may have chunks past the new end that the cut
    // above missed: meta then refuses (kStaleHandle) and the cut is made again.
    if (round < kCutRoundsMax) {
      attr.expect_size = seen.size;
      attr.expect_ctime_ns = seen.ctime_ns;
    }
    auto updated = core.meta->setattr(cred, inode.ino, attr);
    if (updated) return {};
    const Code code = updated.error().code();
    if (code == Code::kStaleHandle && attr.expect_size) {
      WEFT_TRY(seen, core.meta->getattr(cred, inode.ino));
      continue;
    }
    // The file is gone (unlinked and destroyed meanwhile): nothing to set.
    if (!cut_any || code == Code::kNotFound) return std::unexpected(updated.error());
    // What the check above cannot rule out: meta unreachable past its retry
    // time (or the session reaped, the mode changed) between the check and
    // here. The bytes past the new end are gone while meta keeps the old
    // length (they read as zeros): an I/O error, not a refusal that left the
    // file unchanged.
    return error(Code::kIoError, "truncate file {} to {}: its data past the new end is removed, but meta did not "
                 "record the length: {}", inode.ino, new_size, updated.error());
  }
}

}  // namespace weft::client
