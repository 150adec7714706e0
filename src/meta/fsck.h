// meta/fsck.h
// Offline consistency check of a metadata store (tests, and `weft admin
// meta-fsck`). Checks: every dentry names an existing inode of its type inside
// a directory; file/symlink nlink = number of dentries; directory nlink = 2 +
// subdirectories and exactly one dentry whose parent matches its ".."
// pointer; no orphan inodes (except files with nlink 0 kept by a write
// session); every directory reachable from the root (so no cycles); GC-queued
// inodes have no live inode and hold their own; sessions, xattrs and DirStats
// belong to live inodes; sessions are of files, readable and owned by a client
// (else the reaper could never close them); no inode, session or GC id at or
// above the id high-water mark (Mnext_ino); the inode counter matches; files
// are within kFileBytesMax and of layouts validate_layout takes; symlink
// targets are not empty and hold no NUL; an inode's record of having xattrs
// (XattrPresence) matches its xattrs.
// Threading: reads through one snapshot, so it may run on a live store, but
// holds the whole namespace in memory (fine up to a few million inodes).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace rocksdb {
class DB;
}

namespace weft::meta {

struct FsckReport {
  uint64_t inodes = 0;
  uint64_t dentries = 0;
  uint64_t sessions = 0;
  uint64_t gc_queued = 0;
  std::vector<std::string> problems;  // empty when consistent
  bool ok() const { return problems.empty(); }
  std::string summary() const;
};

Result<FsckReport> fsck(rocksdb::DB& db);

// fsck of the store at `path` (a meta server's data_dir/store), opened read
// only with the store's own options: what `weft admin meta-fsck` runs. A
// running meta server may hold it: the check then sees the store as of its
// last flush plus its WAL (whole transactions only).
Result<FsckReport> fsck_store_at(const std::string& path);

}  // namespace weft::meta
