// meta/types.h
// Value types of the metadata store: inodes, layouts, credentials, request
// ids and operation replies. Plain data, no behaviour beyond small helpers.
// Times are nanoseconds since the Unix epoch; sizes are bytes.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <string>
#include <vector>

namespace weft::meta {

using Ino = uint64_t;
inline constexpr Ino kRootIno = 1;
inline constexpr size_t kNameBytesMax = 255;
inline constexpr size_t kSymlinkBytesMax = 4095;
inline constexpr uint32_t kLinkCountMax = 65000;  // EMLINK beyond this
inline constexpr size_t kXattrNameBytesMax = 255;    // XATTR_NAME_MAX
inline constexpr size_t kXattrValueBytesMax = 65536;  // XATTR_SIZE_MAX
inline constexpr size_t kXattrListBytesMax = 65536;   // XATTR_LIST_MAX: listxattr's names, each with its NUL
// Largest file length (16 TiB, as ext4 with 4 KiB blocks); EFBIG beyond it.
// The chunk GC and truncate remove every chunk index below a file's length,
// written or not (nothing records which chunks of a sparse file exist), so the
// length bounds their work: at the smallest chunk size (64 KiB) a file spans
// at most 2^28 chunks, at the default 1 MiB 2^24. (At 2^50 bytes a sparse
// 64 KiB-chunk file would cost the GC 2^34 removals, days of one pass.)
// Lengths stay far from overflow in `offset + length` and in off_t.
inline constexpr uint64_t kFileBytesMax = uint64_t{1} << 44;

// Replies that list many items (readdir pages, batch_stat) stop growing once
// their encoding reaches about this many bytes (a reply always holds at least
// one item; the caller asks again for the rest). Counts alone do not bound
// them: a symlink with a 4095-byte target and a 255-byte name is ~4.4 KB per
// entry, and 1024 of them pass the RPC body limit (4 MiB, rpc/frame.h).
inline constexpr size_t kListReplyBytesMax = size_t{1} << 20;
// What one readdir entry costs on the wire at most besides its name and its
// symlink target: the protobuf tags and varints of its other fields (checked
// in proto_convert_test).
inline constexpr size_t kDirEntryFixedBytesMax = 256;

// Wire and stored values: never renumber. FIFOs, sockets and devices ("special
// files", made by mknod) hold no data in Weft: the kernel of the host that
// opens one serves it (a FUSE mount hands their opens to its own pipe, socket
// and device code); the native client refuses to open them.
enum class InodeType : uint8_t {
  kFile = 1,
  kDirectory = 2,
  kSymlink = 3,
  kFifo = 4,
  kSocket = 5,
  kCharDevice = 6,
  kBlockDevice = 7,
};
inline constexpr uint8_t kInodeTypeMax = 7;
inline constexpr bool is_special_type(InodeType t) { return t >= InodeType::kFifo && t <= InodeType::kBlockDevice; }
inline constexpr bool is_device_type(InodeType t) {
  return t == InodeType::kCharDevice || t == InodeType::kBlockDevice;
}

// Permission bits as in st_mode & 07777.
inline constexpr uint32_t kModeSetUid = 04000;
inline constexpr uint32_t kModeSetGid = 02000;
inline constexpr uint32_t kModeSticky = 01000;
inline constexpr uint32_t kModePermMask = 07777;
// What mkdir takes of the requested mode (Linux's S_IRWXUGO | S_ISVTX).
inline constexpr uint32_t kModeMkdirMask = 01777;
// Whether a change by a caller without CAP_FSETID drops setgid, as Linux's
// setattr_should_drop_sgid (since 6.2): when the group may execute, or when
// the caller is not in the file's group.
inline constexpr bool drops_setgid(uint32_t mode, bool caller_in_group) {
  return (mode & 0010) || !caller_in_group;
}
// What a write or truncate by a caller without CAP_FSETID (here: not root)
// leaves of a file's permission bits, as Linux's setattr_should_drop_suidgid:
// no setuid, and no setgid when drops_setgid.
inline constexpr uint32_t mode_without_privs(uint32_t mode, bool caller_in_group) {
  mode &= ~kModeSetUid;
  if (drops_setgid(mode, caller_in_group)) mode &= ~kModeSetGid;
  return mode;
}

// How a file's chunks are placed. Directories hold the layout their children
// inherit; files keep the one they got at create.
struct Layout {
  static constexpr uint32_t kChunkBytesMin = 64 << 10;
  static constexpr uint32_t kChunkBytesMax = 64 << 20;
  static constexpr uint32_t kChunkBytesDefault = 1 << 20;

  uint32_t chunk_bytes = kChunkBytesDefault;  // power of two in [64 KiB, 64 MiB]
  uint32_t stripe_count = 1;                  // >= 1
  uint32_t chain_table_id = 0;
  uint32_t first_chain = 0;   // files only: where the stripe starts
  uint64_t shuffle_seed = 0;  // files only: portable_shuffle seed of the chain order

  bool operator==(const Layout&) const = default;
};

// Chunks a file of `size` bytes spans: ceil(size / chunk_bytes), without the
// overflow of `size + chunk_bytes - 1` near UINT64_MAX. 0 when chunk_bytes is 0.
inline constexpr uint64_t chunk_count(uint64_t size, uint32_t chunk_bytes) {
  return chunk_bytes == 0 ? 0 : size / chunk_bytes + (size % chunk_bytes != 0 ? 1 : 0);
}

// Whether an inode has extended attributes, as meta records it beside the
// inode so a mount can answer "no such attribute" (ls -l asks every file for
// security.selinux) without a round trip. kUnknown: not recorded (inodes
// stored before it, replies replayed from the retry table): ask meta.
enum class XattrPresence : uint8_t { kUnknown = 0, kNone = 1, kSome = 2 };

struct Inode {
  Ino ino = 0;
  InodeType type = InodeType::kFile;
  uint32_t mode = 0;  // permission bits only (07777)
  uint32_t uid = 0;
  uint32_t gid = 0;
  uint32_t nlink = 0;
  uint64_t size = 0;  // file length; symlink target length; 0 for directories
  int64_t atime_ns = 0;
  int64_t mtime_ns = 0;
  int64_t ctime_ns = 0;
  Ino parent = 0;  // directories only: the ".." entry (root: itself)
  Layout layout;
  std::string symlink_target;
  uint64_t rdev = 0;  // character and block devices only: the device number (Linux dev_t encoding)
  XattrPresence xattrs = XattrPresence::kUnknown;

  bool is_dir() const { return type == InodeType::kDirectory; }
  bool is_file() const { return type == InodeType::kFile; }
  bool is_symlink() const { return type == InodeType::kSymlink; }
  bool is_special() const { return is_special_type(type); }
  bool operator==(const Inode&) const = default;
};

// The caller's identity; uid 0 is root.
struct Cred {
  uint32_t uid = 0;
  uint32_t gid = 0;
  std::vector<uint32_t> groups;  // supplementary groups

  bool in_group(uint32_t g) const;
  static Cred root() { return {}; }
};

// Identifies one mutation for retry de-duplication. client_id 0 = none
// (internal callers and tests that do not care).
struct RequestId {
  uint64_t client_id = 0;
  uint64_t seq = 0;
  bool valid() const { return client_id != 0; }
};

// What every operation carries.
struct Context {
  Cred cred;
  RequestId req;
  // The client id the caller's connection announced (rpc Hello); 0: not
  // called over RPC (internal callers, tests).
  uint64_t connection_client_id = 0;

  // The calling client, which owns the write sessions it opens: its request
  // id's client (the id a client also holds its mgmtd lease under, which the
  // session reaper matches sessions against), else its connection's; 0: unknown.
  uint64_t caller_id() const { return req.client_id != 0 ? req.client_id : connection_client_id; }
};

// An entry a path went through: `name` of directory `dir` is directory `ino`.
struct EntryCheck {
  Ino dir = 0;
  std::string name;
  Ino ino = 0;
};

// A mutation by path whose way to its parent directory came (in part) from
// a client's cache: the entry `name` of directory `dir` must still be that
// parent, each entry of `above` (the levels above it, root first; those
// reached through a symlink are left out) must still name its directory,
// and the caller may search each directory (what fresh lookups would have
// checked). A directory on the way that another client moved or replaced
// meanwhile would otherwise receive the mutation in its new place. Checked
// in the mutation's transaction (the entries stay locked until the commit);
// otherwise kStaleHandle and nothing changes: the client looks the path up
// afresh and tries again.
struct ParentCheck {
  Ino dir = 0;
  std::string name;
  std::vector<EntryCheck> above;
};

// Truncates by other clients that a write session has not answered for
// (gen 0: none). A truncate removes every chunk past its new length, also
// chunks a writer wrote before it and has not reported yet: a report past
// `length` is taken only up to it, and the writer looks at what storage still
// holds past `length` and reports that end with the generation acknowledged
// (MetaStore::report_length). Without it the report would raise the length
// over the removed bytes: zeros that neither order of the write and the
// truncate gives.
struct SessionCut {
  uint64_t gen = 0;     // the newest truncate not acknowledged (per session, from 1)
  uint64_t length = 0;  // the shortest length of the truncates not acknowledged
  bool operator==(const SessionCut&) const = default;
};

// Replies of mutations, also what the retry table stores.
struct Reply {
  bool has_inode = false;
  Inode inode;
  uint64_t session_id = 0;
  SessionCut cut;  // report_length, close_with_length: the report was capped
  // create: the name was an existing file, opened (not made). Its chunks may
  // reach past the length (a writer's not reported yet, or a dead one's):
  // an O_TRUNC create cuts them even when the length is 0.
  bool existed = false;
};

inline Reply reply_of(Inode inode, uint64_t session_id = 0) { return Reply{true, std::move(inode), session_id, {}}; }

// A length report's answer: the inode after it and, when cut.gen != 0, the
// truncate the report was capped for (close_with_length then left the
// session open).
struct LengthReply {
  Inode inode;
  SessionCut cut;
};

struct DirEntry {
  std::string name;
  Ino ino = 0;
  InodeType type = InodeType::kFile;
  // readdirplus; attr.ino == 0: not given, to a caller who may read the
  // directory but not search it (names, inode numbers and types only, as
  // getdents(2) gives there; stat of the entries is refused).
  Inode attr;
};

// At most the `limit` readdir was asked for, and about kListReplyBytesMax
// encoded (see MetaStore::readdir): a short page is no end of the directory.
struct DirPage {
  std::vector<DirEntry> entries;
  std::string cookie;  // pass back to continue after the last entry returned
  bool eof = false;
};

struct StatFs {
  uint64_t capacity_bytes = 0;
  uint64_t used_bytes = 0;
  uint64_t inodes_used = 0;
  uint64_t inodes_max = 0;
  // Every inode (and session) id meta ever handed out is below this; 0: not
  // told (an older server). A chunk of an inode below it that meta does not
  // have belongs to a file that is gone (storage/orphan_sweep.h).
  uint64_t ids_issued_below = 0;
  // Random, made once with the store (0: not told): tells this store from an
  // empty one made in its place or another meta's.
  uint64_t store_id = 0;
};

struct SetAttr {
  std::optional<uint32_t> mode;
  std::optional<uint32_t> uid;
  std::optional<uint32_t> gid;
  std::optional<uint64_t> size;
  std::optional<int64_t> atime_ns;  // kTimeNow = set to the current time
  std::optional<int64_t> mtime_ns;
  // With `size`: the caller's write session on this inode (ftruncate(2) of a
  // file open for writing): write permission was checked when it opened, so
  // the mode need not allow writing now. 0: the caller needs write permission.
  uint64_t size_session = 0;
  // With `size`: apply it only if the file is this long now, else
  // kStaleHandle and nothing changes. A truncate removes the chunks past the
  // new end of the length it read; a writer that reported a longer length
  // meanwhile may have chunks past it, so the truncate must look again.
  std::optional<uint64_t> expect_size;
  // With `size`: likewise for the file's ctime, which every length report
  // moves: a writer that wrote below the old length, past the new end, after
  // the truncate's cut, reported without making the file longer.
  std::optional<int64_t> expect_ctime_ns;
  // With `size`: the caller removed no chunks for it (an extension past
  // every length it knew): no write session is marked (SessionCut), as no
  // writer's acknowledged bytes went.
  bool no_cut = false;
  static constexpr int64_t kTimeNow = INT64_MIN;
};

enum class RenameFlags : uint32_t { kNone = 0, kNoReplace = 1, kExchange = 2 };
enum class XattrFlags : uint32_t { kAny = 0, kCreate = 1, kReplace = 2 };

struct OpenFlags {
  bool read = true;
  bool write = false;
  // The writer answers capped length reports (SessionCut); a client from
  // before them does not: its sessions are never marked, nor its reports capped.
  bool answers_cuts = true;
};

// A file waiting for its chunks to be removed.
struct GcItem {
  Ino ino = 0;
  Inode inode;  // size and layout tell which chunks exist
};

}  // namespace weft::meta
