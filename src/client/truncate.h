// client/truncate.h
// Changing a file's length: when it shortens (or becomes 0) every chunk past
// the new end is removed, however far (client/remove_chunks.h), and the
// chunk holding the new end is cut, on the storage servers, BEFORE meta
// records the new length (so a later extension reads zeros, never old bytes).
// Whether meta will accept the length (session or permission) is asked first:
// a refusal leaves data and length unchanged. Only meta failing between the
// two steps leaves the data removed and the old length: kIoError (EIO); a
// file destroyed meanwhile answers kNotFound. Meta sets the length only if
// the file still has the length `inode` had (SetAttr::expect_size): a writer
// that reported a longer one meanwhile may have written past the new end
// after the cut, so the cut is made again (a truncate racing a write ends as
// if one came after the other, never with old bytes past the end).
// Threading: blocks the caller; never call from an I/O thread.
#pragma once

#include "client/core.h"

namespace weft::client {

// `old_size`: the largest length the file may have had as far as the caller
// knows (the range a storage server that predates RemoveRange is cleared of).
// `session`: the caller's write session on the file (ftruncate: no write
// permission needed now, see meta::SetAttr::size_session); 0: none.
Result<void> truncate_file(Core& core, const Cred& cred, const Inode& inode, uint64_t old_size, uint64_t new_size,
                           uint64_t session = 0);

// What a writer answers for a truncate by another client (meta/types.h
// SessionCut): the end of the data storage holds of `inode` in [cut, end),
// or `cut` when it holds none. The truncate removed every chunk past `cut`
// (and cut the one holding it), so whatever is there was written after it;
// what the writer wrote there before it is gone, and is not to come back as
// zeros. One listing per chain of the stripe (ChunkIo::data_end): it costs
// the chunks there are past the cut, not the range.
Result<uint64_t> stored_end(Core& core, const Inode& inode, uint64_t cut, uint64_t end);
// The same with the given storage access (the meta server's session reaper,
// which asks what a dead writer left past the length: `cut` = the length).
Result<uint64_t> stored_end(RoutingCache& routing, ChunkIo& chunks, const Inode& inode, uint64_t cut, uint64_t end);

// The stripe chains of a file from the current routing; kInvalidArgument for
// a layout meta would refuse (meta::validate_layout).
Result<std::vector<mgmt::ChainId>> file_stripe(Core& core, const Layout& layout);
Result<std::vector<mgmt::ChainId>> file_stripe(RoutingCache& routing, const Layout& layout);

}  // namespace weft::client
