// meta/codec.h
// RocksDB key layout and the binary encoding of every value of the metadata
// store. Keys use big-endian integers so one directory's entries, one inode's
// sessions or xattrs sort together. Values start with a format version byte
// followed by explicit little-endian fields; decoding checks every length and
// returns kCorruption for truncated or garbage bytes (never asserts).
// Threading: pure functions.
//
// Key prefixes:
//   I<ino>             inode                     (Inode)
//   D<parent><name>    directory entry           (DentryValue)
//   S<ino><session>    write session             (SessionValue)
//   X<ino><name>       extended attribute        (raw value bytes)
//   T<ino>             directory times and nlink (DirStat; merge operand)
//   G<ino>             GC queue: unlinked file   (Inode)
//   R<client><seq>     retry record              (RequestRecord)
//   Mnext_ino          inode id high-water mark  (u64)
//   Mstore_id          random id of this store   (u64; made once, with the store)
//   Cinodes            live inode count          (i64; merge operand)
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"
#include "meta/types.h"

namespace weft::meta {

inline constexpr uint8_t kFormatVersion = 1;

namespace key {
std::string inode(Ino ino);
std::string dentry(Ino parent, std::string_view name);
std::string dentry_prefix(Ino parent);
std::string session(Ino ino, uint64_t session_id);
std::string session_prefix(Ino ino);
std::string xattr(Ino ino, std::string_view name);
std::string xattr_prefix(Ino ino);
std::string dir_stat(Ino ino);
std::string gc(Ino ino);
std::string request(uint64_t client_id, uint64_t seq);
std::string request_prefix(uint64_t client_id);  // every retry record of one client
inline constexpr size_t kRequestKeyBytes = 17;    // 'R' + client (be64) + seq (be64)
inline constexpr std::string_view kNextIno = "Mnext_ino";
inline constexpr std::string_view kStoreId = "Mstore_id";
inline constexpr std::string_view kInodeCount = "Cinodes";
inline constexpr char kInodePrefix = 'I';
inline constexpr char kDentryPrefix = 'D';
inline constexpr char kSessionPrefix = 'S';
inline constexpr char kGcPrefix = 'G';
inline constexpr char kDirStatPrefix = 'T';
inline constexpr char kCounterPrefix = 'C';

// The smallest key greater than every key starting with `prefix` ("" if none):
// an iterate_upper_bound that keeps scans inside one range.
std::string prefix_end(std::string_view prefix);

// Parses the big-endian u64 at `offset` of a key; kCorruption if too short.
Result<uint64_t> u64_at(std::string_view key, size_t offset);
}  // namespace key

struct DentryValue {
  Ino ino = 0;
  InodeType type = InodeType::kFile;
  bool operator==(const DentryValue&) const = default;
};

// Directory mtime/ctime and subdirectory link delta. Merged without locks:
// times take the maximum, nlink_delta adds. A Put replaces the history.
struct DirStat {
  int64_t mtime_ns = 0;
  int64_t ctime_ns = 0;
  int64_t nlink_delta = 0;
  bool operator==(const DirStat&) const = default;
};

struct SessionValue {
  uint64_t client_id = 0;
  int64_t opened_ns = 0;
  // Truncates by other clients (types.h SessionCut), recorded only for a
  // writer that answers them (OpenFlags::answers_cuts): cut_gen counts them,
  // acked_gen is the one the writer answered for last; cut_length is the
  // shortest new length since (meaningful while cut_gen != acked_gen).
  bool answers_cuts = false;
  uint64_t cut_gen = 0;
  uint64_t acked_gen = 0;
  uint64_t cut_length = 0;
  // The writer gave up closing it (its last length report failed,
  // MetaStore::abandon_session): the session reaper closes it, whatever the
  // client's lease, with the length of what storage holds. opened_ns is
  // then the abandon's time (the reaper's min_age counts from it).
  bool abandoned = false;
  bool cut_pending() const { return cut_gen != acked_gen; }
  bool operator==(const SessionValue&) const = default;
};

// The stored outcome of one mutation, returned again on a retry. A client
// keeps up to request_window of them, so encode_request stores at most
// kRecordMessageBytesMax bytes of the message (cut at a UTF-8 character
// boundary): the code is what a retry must reproduce, the text is for people.
inline constexpr size_t kRecordMessageBytesMax = 1024;
struct RequestRecord {
  Code code = Code::kOk;
  std::string message;
  Reply reply;
  int64_t time_ns = 0;
  // 1 + the meta::Op of the mutation that made it (a retry of another op
  // under the same request id is refused, not answered with this outcome);
  // 0: recorded by a meta from before the field (stored last, optional).
  uint8_t op = 0;
};

std::string encode_inode(const Inode& inode);
Result<Inode> decode_inode(std::string_view bytes);
std::string encode_dentry(const DentryValue& d);
Result<DentryValue> decode_dentry(std::string_view bytes);
std::string encode_dir_stat(const DirStat& s);
Result<DirStat> decode_dir_stat(std::string_view bytes);
std::string encode_session(const SessionValue& s);
Result<SessionValue> decode_session(std::string_view bytes);
std::string encode_request(const RequestRecord& r);
Result<RequestRecord> decode_request(std::string_view bytes);
std::string encode_i64(int64_t v);
Result<int64_t> decode_i64(std::string_view bytes);

}  // namespace weft::meta
