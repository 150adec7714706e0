// storage/flush_scope.h
// Whether one fdatasync of a file in `dir` makes durable what another file
// of the same filesystem wrote in place and pushed to the device with
// sync_file_range (no flush): true where file data is written where it lies
// and any fdatasync flushes the device's cache — ext4 (unless data=journal,
// where data goes through the journal) and XFS. False for copy-on-write and
// log-structured filesystems (btrfs, f2fs, ZFS: an overwrite goes to a new
// place that only that file's own sync makes reachable), for anything else,
// and when it cannot tell. The chunk engine takes one device flush per
// commit group only where this holds (storage/index_committer.h).
#pragma once

#include <string>

namespace weft::storage {

bool one_fdatasync_flushes_all(const std::string& dir);
// The same, for files in `a` and `b` together: both on one filesystem (a
// flush is per device) and that filesystem one where the above holds.
bool one_fdatasync_flushes_both(const std::string& a, const std::string& b);

}  // namespace weft::storage
