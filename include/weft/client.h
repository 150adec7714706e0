// weft/client.h — libweft, the native client of a Weft cluster.
//
// A Client finds the cluster through its client config (mgmtd addresses and
// the cluster token; see ClientOptions), keeps the routing (chains and the
// storage servers that hold them) current by long-polling mgmtd, asks the
// metadata service for names, attributes and layouts, and moves file data
// straight between the caller's buffers and the storage servers: chunks are
// placed by the file's layout, computed here, never looked up.
//
// Two ways in:
//   - inode-level calls (lookup/getattr/create/open(ino)...) for the FUSE
//     mount, which keeps its own inode numbers = Weft inode ids;
//   - path-level calls (stat/open/mkdirs/...) for tools and Python.
// Every call takes the caller's credentials explicitly (Cred), or uses the
// client's default (the process's uid/gid/groups unless ClientOptions says).
//
// Data path guarantees:
//   - pwrite copies into a write-behind buffer and returns; full chunks are
//     flushed in the background, in parallel across chains, within
//     ClientOptions::write_buffer_bytes (writers block when it is full).
//     fsync() and close() return only when every byte written through the
//     File is acknowledged by every serving replica, and the file length is
//     reported to meta. Several Files (in one or several processes) may write
//     disjoint ranges of one file: only the bytes written are sent.
//   - reads are CRC32C-checked end to end; a failing replica (error,
//     checksum mismatch, unreachable) is skipped for the next one of the chain.
//   - data calls ride out storage server failures: stale routing is refreshed
//     and the call retried (writes carry a client id + sequence number, so a
//     retried write is applied once) for up to retry_time_ms_max; a data
//     call still failing then fails with kIoError (EIO), never with a
//     retryable code (the File it failed keeps that error).
//
// Threading: Client and File are thread-safe. Calls block the calling thread;
// never call them from a Weft I/O thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "meta/types.h"

namespace weft {

using meta::Cred;
using meta::DirEntry;
using meta::DirPage;
using meta::Ino;
using meta::Inode;
using meta::InodeType;
using meta::Layout;
using meta::RenameFlags;
using meta::SetAttr;
using meta::StatFs;
using meta::XattrFlags;

// Hears each error of a walk that goes on past them (Client::remove_tree).
using TreeErrorFn = std::function<void(const Status&)>;
inline constexpr Ino kRootIno = meta::kRootIno;

struct ClientOptions {
  // Threads a client may ask for (connect refuses more: each is a thread
  // and an io_context started at once).
  static constexpr size_t kIoThreadsMax = 256;

  // Where the cluster is (client/cluster_config.h): --config FILE, else
  // $WEFT_CONFIG, else ./weft-data/client.toml; `cluster` replaces the mgmtd list.
  // The file's tcp_* keys set keepalive and TCP_USER_TIMEOUT on every connection.
  std::string config_path;
  std::string cluster;
  // Default credentials; unset: the process's uid, gid and supplementary groups.
  std::optional<Cred> cred;

  size_t io_threads = 2;  // 1..kIoThreadsMax (0: 1)
  size_t write_buffer_bytes = 256u << 20;   // dirty bytes buffered per client before writers wait
  size_t inflight_bytes_max = 256u << 20;   // bytes in flight to storage per client
  size_t readahead_bytes_max = 16u << 20;   // per sequential stream
  uint32_t call_timeout_ms = 10000;         // per storage/meta attempt; below the file's tcp_user_timeout_ms
  uint32_t retry_time_ms_max = 60000;       // data calls retry through failures this long
  // Statahead for read-only opens by path (open_path without a write flag),
  // off at 0. On: when such opens keep asking meta for names in one
  // directory (of at most 4096 entries), the directory is listed once with
  // attributes and the next opens in it are answered from the listing for
  // this many seconds, with no meta round trip: the staleness a FUSE mount's
  // attribute timeout allows (a file another client changed, removed or
  // replaced within that time is opened as listed; a new name is always
  // asked for). Any change made through this Client drops every listing.
  // For data sets that do not change while they are read (a first epoch).
  // At most a day (larger values count as a day).
  double statahead_ttl_s = 0;
  // Early reads for read-only opens by path while statahead is off: when
  // such opens keep asking meta for names in one directory (of at most 4096
  // entries), the directory is listed once, and a later open there of a file
  // the listing names with at most this many bytes reads it (whole, or its
  // first chunk) from storage while meta answers the open. The bytes are
  // kept for the File's first read only if meta's answer matches the listing
  // (same inode, length, mtime, ctime, layout), so reads see what a read
  // after the open would (close-to-open); else they are dropped. One round
  // trip's wait less per small file. 0: off.
  size_t early_read_bytes_max = 1u << 20;
  // Files open here keep their data while they are open, even once another
  // client (or this one) unlinks or replaces them: every File open here is
  // named to meta every few seconds (one call for all of them), and meta's
  // chunk GC leaves those alone. Off: such a file's data may go while it is
  // open, and its reads then fail with ESTALE (kStaleHandle).
  bool hold_open_files = true;
  std::string name = "weft-client";         // in server logs
};

class Client;

// An open file. Obtained from Client::open/create; close() (or the last
// shared_ptr going away) ends the write session. Offsets are absolute.
// Dropped without close(), a File still flushes and closes (the drop of the
// last reference waits for it), with nobody to hear of an error: call
// close() to know that the data landed.
class File {
 public:
  virtual ~File() = default;
  virtual Ino ino() const = 0;
  virtual Layout layout() const = 0;
  // The length as this File knows it: meta's at open, grown by its own writes
  // and truncates. refresh_size() asks meta again.
  virtual uint64_t size() const = 0;
  virtual Result<uint64_t> refresh_size() = 0;
  // The end of the bytes written through this File that meta may not count
  // yet (buffered, in flight, or acknowledged but not reported); 0 when meta
  // has heard of every write. What this File adds to a length fresh from
  // meta: size() may be older than that length (another client's truncate).
  virtual uint64_t unreported_end() const = 0;
  // The file's attributes as they were when this File opened it (size() is
  // the length it knows now): what is left to tell of a file removed since.
  virtual Inode opened() const = 0;
  virtual bool readable() const = 0;  // opened O_RDONLY or O_RDWR
  virtual bool writable() const = 0;  // opened O_WRONLY or O_RDWR

  // Reads up to dst.size() bytes; short only at the end of the file.
  // kBadHandle (EBADF) when the File was opened write-only.
  virtual Result<size_t> pread(std::span<std::byte> dst, uint64_t offset) = 0;
  // pread whatever the access mode: for a page cache kept over this File,
  // such as the kernel's with the mount's writeback_cache, which fills the
  // rest of a partly written page by reading through the write-only handle
  // that wrote it. The caller answers for the bytes not reaching whoever
  // opened the File without read access.
  virtual Result<size_t> pread_page_fill(std::span<std::byte> dst, uint64_t offset) = 0;
  // Buffers the bytes (write-behind; mtime moves when they are reported to
  // meta, at a flush); errors of the background flush surface
  // from a later pwrite, flush, fsync or close. No byte goes at or past
  // meta::kFileBytesMax (16 TiB): kFileTooBig (EFBIG) at it, a short count
  // for a write that crosses it.
  virtual Result<size_t> pwrite(std::span<const std::byte> src, uint64_t offset) = 0;
  // Sends every byte buffered by writes made before the call (not those other
  // threads make meanwhile) and waits for the acks; reports the length.
  virtual Result<void> flush() = 0;
  // flush(); data and length are durable when it returns.
  virtual Result<void> fsync() = 0;
  // Sets the length (as Client::setattr: every File of the inode open in
  // this client flushes first and learns it). A length beyond
  // meta::kFileBytesMax: kFileTooBig, nothing changes.
  virtual Result<void> truncate(uint64_t length) = 0;
  // Makes the length at least `length`, never less: this File's writes go
  // out first, then one length report of `length`, before it returns. What
  // lies past the old length reads as zeros (unless a writer that died left
  // chunks there, as after a truncate that lengthens); the other Files of
  // the inode open in this client count it (their appends go after it).
  // Allocates no space (chunks are written when data is). Past meta::kFileBytesMax:
  // kFileTooBig; a failure changes nothing in this File.
  virtual Result<void> extend(uint64_t length) = 0;
  // flush() and end the session; later calls fail with kBadHandle.
  virtual Result<void> close() = 0;
  // Once close() returned: what its flush answered. A close can fail after a
  // flush that went through (meta's end of the session lost: no data is; the
  // session stays open at meta until this client's lease ends, as a dead
  // writer's); this tells the two apart. Before close(): success.
  virtual Result<void> close_flushed() const = 0;
  // A write through this File failed for good: every later call but pread
  // returns that error (close() too). A failed length report is not such a
  // failure: the next flush reports again.
  virtual bool failed() const = 0;
};

// One read of a batch: up to dst.size() bytes at `offset` of file `ino`, into
// `dst` (fewer at the end of the file). What the reads of one inode need of it comes, once
// per batch, from the `attrs` of its first op that has them (a lookup or
// listing the caller made, of this very inode, else EINVAL: its layout and
// size; `file_size` is then not used), else from meta if any of its ops
// lacks `layout` or `file_size`, else from the first op's `layout` and
// `file_size`. Read permission for `cred` is checked as open_read_known
// checks it in the first two cases; ops that all bring a bare layout and
// length are the caller's word and are not checked.
struct ReadOp {
  Ino ino = 0;
  uint64_t offset = 0;
  std::span<std::byte> dst;
  std::optional<Layout> layout;
  std::optional<uint64_t> file_size;  // clips the read; unset: asks meta
  std::optional<Inode> attrs;
};

// One write of a batch, into an open writable File.
struct WriteOp {
  std::shared_ptr<File> file;
  uint64_t offset = 0;
  std::span<const std::byte> src;
};

class Client {
 public:
  static Result<std::unique_ptr<Client>> connect(const ClientOptions& options);
  virtual ~Client() = default;

  virtual const Cred& default_cred() const = 0;
  // Counts since connect, for tests and tuning.
  struct Stats {
    uint64_t early_reads = 0;       // started (ClientOptions::early_read_bytes_max)
    uint64_t early_reads_kept = 0;  // handed to the File opened (meta's answer matched)
  };
  virtual Stats stats() const = 0;
  // How many lengths Files of this client have reported to meta. It moves
  // before the reported writes stop counting in the local size added to
  // meta's answers (lookup, getattr): a caller holding attributes fetched
  // before it moved (a listing page) may hold a length older than this
  // client's writes and should fetch them again.
  virtual uint64_t length_reports() const = 0;
  virtual std::string cluster_description() const = 0;  // "mgmtd 127.0.0.1:7000 (from ./weft-data/client.toml)"

  // ---- inode-level namespace (FUSE) ----
  virtual Result<Inode> lookup(const Cred& cred, Ino parent, std::string_view name) = 0;
  virtual Result<Inode> getattr(const Cred& cred, Ino ino) = 0;
  // A size change truncates or extends the file (chunks beyond are removed);
  // a size beyond meta::kFileBytesMax: kFileTooBig.
  virtual Result<Inode> setattr(const Cred& cred, Ino ino, const SetAttr& attr) = 0;
  virtual Result<DirPage> readdir(const Cred& cred, Ino dir, std::string_view cookie, uint32_t limit) = 0;
  virtual Result<Inode> mkdir(const Cred& cred, Ino parent, std::string_view name, uint32_t mode) = 0;
  virtual Result<Inode> symlink(const Cred& cred, Ino parent, std::string_view name, std::string_view target) = 0;
  // A FIFO, socket or character/block device (meta::is_special_type): its
  // entry and attributes live in Weft, its opens in the kernel of the host
  // that opens it (through a mount); the native calls refuse to open it
  // (kNotSupported). Devices need root (kNotPermitted); rdev: devices only.
  virtual Result<Inode> mknod(const Cred& cred, Ino parent, std::string_view name, InodeType type, uint32_t mode,
                              uint64_t rdev = 0) = 0;
  virtual Result<std::string> readlink(const Cred& cred, Ino ino) = 0;
  virtual Result<Inode> link(const Cred& cred, Ino ino, Ino new_parent, std::string_view new_name) = 0;
  virtual Result<void> unlink(const Cred& cred, Ino parent, std::string_view name) = 0;
  virtual Result<void> rmdir(const Cred& cred, Ino parent, std::string_view name) = 0;
  virtual Result<void> rename(const Cred& cred, Ino parent, std::string_view name, Ino new_parent,
                              std::string_view new_name, RenameFlags flags = RenameFlags::kNone) = 0;
  virtual Result<StatFs> statfs(const Cred& cred) = 0;
  virtual Result<std::string> getxattr(const Cred& cred, Ino ino, std::string_view name) = 0;
  virtual Result<void> setxattr(const Cred& cred, Ino ino, std::string_view name, std::string_view value,
                                XattrFlags flags = XattrFlags::kAny) = 0;
  virtual Result<std::vector<std::string>> listxattr(const Cred& cred, Ino ino) = 0;
  virtual Result<void> removexattr(const Cred& cred, Ino ino, std::string_view name) = 0;
  virtual Result<Layout> get_layout(const Cred& cred, Ino dir) = 0;
  virtual Result<void> set_layout(const Cred& cred, Ino dir, const Layout& layout) = 0;

  // `flags`: O_RDONLY/O_WRONLY/O_RDWR, O_TRUNC, O_APPEND (O_CREAT/O_EXCL: create()).
  // O_TRUNC truncates with any access mode, as Linux (write permission needed).
  // O_APPEND: each pwrite ignores its offset and writes at the end of the file
  // as this client knows it (meta's length when each File of it opened here,
  // grown by every write here); appends of one client never overlap, those of
  // different clients are not ordered with each other (as NFS). Files of one
  // inode open in one client see each other's writes as two descriptors of a
  // local file do.
  virtual Result<std::shared_ptr<File>> open(const Cred& cred, Ino ino, int flags) = 0;
  // Opens for reading from an inode the caller fetched itself (lookup,
  // getattr), with no round trip: the mount's read-only open while the
  // attributes it holds are fresh. Read permission is checked here against
  // `inode`; the caller answers for how recent it is (a size or mode changed
  // since then is not seen). kIsDirectory for a directory, kInvalidArgument
  // for a symlink.
  virtual Result<std::shared_ptr<File>> open_read_known(const Cred& cred, const Inode& inode) = 0;
  // Creates (exclusive when O_EXCL is in flags) and opens; an existing file
  // (without O_EXCL) is opened with open(2)'s checks for the access mode
  // (O_RDWR: read and write permission). A symlink of that name: kLoop (the
  // caller follows it; open_path does).
  virtual Result<std::pair<Inode, std::shared_ptr<File>>> create(const Cred& cred, Ino parent, std::string_view name,
                                                                 uint32_t mode, int flags) = 0;

  // ---- path-level (tools, Python). Paths are absolute within the cluster ("/a/b"). ----
  // A path ending in '/' names a directory, as in POSIX: its last name is
  // followed if a symlink and must be a directory (kNotDirectory); open_path
  // with O_CREAT refuses it (kIsDirectory), remove_path removes only a
  // directory there, rename_path moves only a directory from or to it.
  virtual Result<Inode> resolve(const Cred& cred, std::string_view path, bool follow_last = true) = 0;
  // `flags` as open(): O_CREAT creates the last name (O_EXCL: exclusively)
  // or opens the file there; a symlink at the last name is followed as
  // open(2) follows it (with O_CREAT: an existing target opened, a missing
  // one created; not with O_EXCL, kExists), at most 40 in a row (kLoop);
  // O_NOFOLLOW: kLoop for a symlink at the last name.
  virtual Result<std::shared_ptr<File>> open_path(const Cred& cred, std::string_view path, int flags,
                                                  uint32_t mode = 0644) = 0;
  // mkdir -p: every level asked of meta (looked up, made where missing;
  // nothing from the directory cache), a symlink to a directory followed, a
  // level that is not a directory kNotDirectory.
  virtual Result<void> mkdirs(const Cred& cred, std::string_view path, uint32_t mode = 0755) = 0;
  virtual Result<void> remove_path(const Cred& cred, std::string_view path) = 0;  // file, symlink or empty dir
  // rm -r: `path` and, if it is a directory, everything under it. Its last
  // name is not followed (a symlink there is removed); its parent is asked of
  // meta afresh and the walk goes by inode from there, so nothing another
  // client moved or replaced meanwhile is removed through the old path. The
  // root and a last name "." or ".." are refused (kInvalidArgument); a path
  // ending in '/' must name a directory (kNotDirectory). Entries another
  // remover took first are not errors. A directory it may not list is
  // removed all the same when it is empty (as rm -r). An error does not stop
  // the walk: `on_error` hears each, named by its path, the first is
  // returned, and directories not emptied stay.
  virtual Result<void> remove_tree(const Cred& cred, std::string_view path, const TreeErrorFn& on_error = {}) = 0;
  // unlink(2) and rmdir(2) by path: kIsDirectory / kNotDirectory for the
  // other type; a path ending in '/' names a directory (unlink: kNotDirectory
  // for a file there). Like remove_path, they check with meta that no
  // directory on the way was moved since this client cached it.
  virtual Result<void> unlink_path(const Cred& cred, std::string_view path) = 0;
  virtual Result<void> rmdir_path(const Cred& cred, std::string_view path) = 0;
  // mkdir(2) and symlink(2) by path, checked the same way.
  virtual Result<Inode> mkdir_path(const Cred& cred, std::string_view path, uint32_t mode = 0755) = 0;
  virtual Result<Inode> symlink_path(const Cred& cred, std::string_view target, std::string_view path) = 0;
  // Both ways are looked up afresh (nothing cached steers a rename).
  virtual Result<void> rename_path(const Cred& cred, std::string_view from, std::string_view to,
                                   RenameFlags flags = RenameFlags::kNone) = 0;
  virtual Result<std::vector<DirEntry>> list_path(const Cred& cred, std::string_view path) = 0;

  // ---- batches ----
  // Many reads at once: grouped per storage server into one request each;
  // results in the order of `ops` (bytes read, short at end of file).
  virtual std::vector<Result<size_t>> read_batch(const Cred& cred, std::span<const ReadOp> ops) = 0;
  // The asynchronous forms: no thread per call (reads run on the client's
  // I/O threads, write batches on a few workers: batches that write a common
  // file run one after another in submission order, so the later one's bytes
  // win where they overlap; batches of disjoint files may run at once). The
  // ops' buffers (dst, src) must stay valid until the future is ready, and
  // destroying the future does not wait for it: keep it, or the buffers,
  // until then. submit_reads may block for the metadata of ops given without
  // layout and file_size. A write batch's results come after every distinct
  // file in it was flushed once. The Client must outlive its batches (its
  // destructor waits for submitted ones).
  virtual std::future<std::vector<Result<size_t>>> submit_reads(const Cred& cred, std::vector<ReadOp> ops) = 0;
  virtual std::future<std::vector<Result<size_t>>> submit_writes(std::vector<WriteOp> ops) = 0;
};

// Splits "/a/b/c" into its components: empty names are dropped, "." and ".."
// are kept (resolved by lookup, as POSIX does: "a/link/.." is the parent of
// the link's target) except at the start of an absolute path (the root's
// parent is the root). Refuses names longer than 255 bytes and NUL bytes.
Result<std::vector<std::string>> split_path(std::string_view path);
// Whether `path` ends in '/' after a name ("a/", "/a//"; not "/"): it names a directory.
bool names_directory(std::string_view path);

}  // namespace weft
