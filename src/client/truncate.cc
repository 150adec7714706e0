#include "client/truncate.h"

#include "client/placement.h"
#include "meta/layout.h"
#include "meta/permission.h"

#include <thread>

namespace weft::client {

Result<std::vector<mgmt::ChainId>> file_stripe(Core& core, const Layout& layout) {
  // Meta's rule (a layout a caller made up, e.g. a ReadOp's: a chunk size of
  // 0 would divide by zero wherever the file's chunks are placed).
  WEFT_RETURN_IF_ERROR(meta::validate_layout(layout));
  auto routing = core.routing->current();
  auto stripe = stripe_chains(layout, *routing);
  if (stripe) return stripe;
  // The table may be new: fetch the routing again once.
  core.routing->request_refresh();
  for (int i = 0; i < 50 && core.routing->current() == routing; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  return stripe_chains(layout, *core.routing->current());
}

Result<void> truncate_file(Core& core, const Cred& cred, const Inode& inode, uint64_t old_size, uint64_t new_size,
                           uint64_t session) {
  if (inode.is_dir()) return error(Code::kIsDirectory, "inode {} is a directory", inode.ino);
  // As meta (and truncate(2) on a FIFO, socket or device): no length to set.
  if (!inode.is_file()) return error(Code::kInvalidArgument, "inode {} is not a regular file", inode.ino);
  // Before any chunk is touched (meta would refuse the length only at the end).
  if (new_size > meta::kFileBytesMax)
    return error(Code::kFileTooBig, "length {} of file {} beyond the maximum file size {}", new_size, inode.ino,
                 meta::kFileBytesMax);
  if (new_size < old_size) {
    // Permission first, by meta's rule on the inode just read (meta checks it
    // again on setattr): no chunk is touched for a caller who may not
    // truncate. Through a write session (ftruncate) it was checked at open.
    // (Not a setattr of the old length as a probe: that could undo a length
    // another writer reported since the inode was read.)
    if (session == 0) WEFT_RETURN_IF_ERROR(meta::check_access(inode, cred, meta::kAccessWrite));
    const uint32_t cb = inode.layout.chunk_bytes;
    WEFT_TRY(auto stripe, file_stripe(core, inode.layout));
    auto address = [&](uint64_t index) {
      return ChunkAddress{inode.ino, index, chain_of_chunk(stripe, index), cb};
    };
    uint64_t keep = meta::chunk_count(new_size, cb);  // chunks [0, keep) stay
    uint64_t end = meta::chunk_count(old_size, cb);
    constexpr uint64_t kBatch = 256;
    for (uint64_t first = keep; first < end; first += kBatch) {
      std::vector<Task<Result<void>>> tasks;
      for (uint64_t i = first; i < std::min(end, first + kBatch); ++i) tasks.push_back(core.chunks->remove(address(i)));
      WEFT_RETURN_IF_ERROR(first_error(run_parallel(*core.io, std::move(tasks))));
    }
    if (new_size % cb != 0) {
      std::vector<Task<Result<void>>> tasks;
      tasks.push_back(core.chunks->truncate(address(new_size / cb), static_cast<uint32_t>(new_size % cb)));
      WEFT_RETURN_IF_ERROR(first_error(run_parallel(*core.io, std::move(tasks))));
    }
  }
  SetAttr attr;
  attr.size = new_size;
  attr.size_session = session;
  WEFT_TRY(Inode updated, core.meta->setattr(cred, inode.ino, attr));
  (void)updated;
  return {};
}

}  // namespace weft::client
