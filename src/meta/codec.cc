#include "meta/codec.h"

#include <cstring>

namespace weft::meta {
namespace {

void put_be64(std::string& out, uint64_t v) {
  for (int i = 7; i >= 0; --i) out.push_back(static_cast<char>((v >> (i * 8)) & 0xff));
}

std::string prefixed(char p, uint64_t v) {
  std::string k(1, p);
  put_be64(k, v);
  return k;
}

class Writer {
 public:
  Writer() { out_.push_back(static_cast<char>(kFormatVersion)); }
  Writer& u8(uint8_t v) { out_.push_back(static_cast<char>(v)); return *this; }
  Writer& u16(uint16_t v) { return le(v, 2); }
  Writer& u32(uint32_t v) { return le(v, 4); }
  Writer& u64(uint64_t v) { return le(v, 8); }
  Writer& i64(int64_t v) { return le(static_cast<uint64_t>(v), 8); }
  Writer& bytes(std::string_view s) {
    u32(static_cast<uint32_t>(s.size()));
    out_.append(s);
    return *this;
  }
  std::string take() { return std::move(out_); }

 private:
  Writer& le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(static_cast<char>((v >> (i * 8)) & 0xff));
    return *this;
  }
  std::string out_;
};

// Reads fields in order; the first short read marks the reader failed and
// every later read returns zero. Check ok() once at the end.
class Reader {
 public:
  Reader(std::string_view in, const char* what) : in_(in), what_(what) {
    if (in_.empty() || static_cast<uint8_t>(in_[0]) != kFormatVersion) {
      failed_ = true;
    } else {
      pos_ = 1;
    }
  }
  uint8_t u8() { return static_cast<uint8_t>(le(1)); }
  uint16_t u16() { return static_cast<uint16_t>(le(2)); }
  uint32_t u32() { return static_cast<uint32_t>(le(4)); }
  uint64_t u64() { return le(8); }
  int64_t i64() { return static_cast<int64_t>(le(8)); }
  std::string bytes(size_t max) {
    uint32_t n = u32();
    if (failed_ || n > max || in_.size() - pos_ < n) {
      failed_ = true;
      return {};
    }
    std::string s(in_.substr(pos_, n));
    pos_ += n;
    return s;
  }
  void fail() { failed_ = true; }
  bool at_end() const { return failed_ || pos_ == in_.size(); }
  Result<void> finish() const {
    if (failed_ || pos_ != in_.size())
      return error(Code::kCorruption, "malformed {} value ({} bytes)", what_, in_.size());
    return {};
  }

 private:
  uint64_t le(size_t n) {
    if (failed_ || in_.size() - pos_ < n) {
      failed_ = true;
      return 0;
    }
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(in_[pos_ + i])) << (8 * i);
    pos_ += n;
    return v;
  }
  std::string_view in_;
  const char* what_;
  size_t pos_ = 0;
  bool failed_ = false;
};

bool valid_type(uint8_t t) { return t >= 1 && t <= kInodeTypeMax; }

void write_inode_fields(Writer& w, const Inode& n) {
  w.u64(n.ino).u8(static_cast<uint8_t>(n.type)).u32(n.mode).u32(n.uid).u32(n.gid).u32(n.nlink);
  w.u64(n.size).i64(n.atime_ns).i64(n.mtime_ns).i64(n.ctime_ns).u64(n.parent);
  w.u32(n.layout.chunk_bytes).u32(n.layout.stripe_count).u32(n.layout.chain_table_id);
  w.u32(n.layout.first_chain).u64(n.layout.shuffle_seed).bytes(n.symlink_target);
  // Devices only: inodes stored before special files existed decode unchanged.
  if (is_device_type(n.type)) w.u64(n.rdev);
}

Inode read_inode_fields(Reader& r) {
  Inode n;
  n.ino = r.u64();
  uint8_t t = r.u8();
  if (!valid_type(t)) r.fail();
  n.type = static_cast<InodeType>(t);
  n.mode = r.u32();
  n.uid = r.u32();
  n.gid = r.u32();
  n.nlink = r.u32();
  n.size = r.u64();
  n.atime_ns = r.i64();
  n.mtime_ns = r.i64();
  n.ctime_ns = r.i64();
  n.parent = r.u64();
  n.layout.chunk_bytes = r.u32();
  n.layout.stripe_count = r.u32();
  n.layout.chain_table_id = r.u32();
  n.layout.first_chain = r.u32();
  n.layout.shuffle_seed = r.u64();
  n.symlink_target = r.bytes(kSymlinkBytesMax);
  if (is_device_type(n.type)) n.rdev = r.u64();
  if (n.mode > kModePermMask) r.fail();
  return n;
}

}  // namespace

namespace key {
std::string inode(Ino ino) { return prefixed(kInodePrefix, ino); }
std::string dentry_prefix(Ino parent) { return prefixed(kDentryPrefix, parent); }
std::string dentry(Ino parent, std::string_view name) {
  std::string k = dentry_prefix(parent);
  k.append(name);
  return k;
}
std::string session_prefix(Ino ino) { return prefixed(kSessionPrefix, ino); }
std::string session(Ino ino, uint64_t session_id) {
  std::string k = session_prefix(ino);
  put_be64(k, session_id);
  return k;
}
std::string xattr_prefix(Ino ino) { return prefixed('X', ino); }
std::string xattr(Ino ino, std::string_view name) {
  std::string k = xattr_prefix(ino);
  k.append(name);
  return k;
}
std::string dir_stat(Ino ino) { return prefixed(kDirStatPrefix, ino); }
std::string gc(Ino ino) { return prefixed(kGcPrefix, ino); }
std::string request_prefix(uint64_t client_id) { return prefixed('R', client_id); }
std::string request(uint64_t client_id, uint64_t seq) {
  std::string k = request_prefix(client_id);
  put_be64(k, seq);
  return k;
}
std::string prefix_end(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty() && static_cast<uint8_t>(end.back()) == 0xff) end.pop_back();
  if (!end.empty()) end.back() = static_cast<char>(static_cast<uint8_t>(end.back()) + 1);
  return end;
}

Result<uint64_t> u64_at(std::string_view k, size_t offset) {
  if (k.size() < offset + 8) return error(Code::kCorruption, "key too short ({} bytes)", k.size());
  uint64_t v = 0;
  for (size_t i = 0; i < 8; ++i) v = (v << 8) | static_cast<uint8_t>(k[offset + i]);
  return v;
}
}  // namespace key

// The xattr presence follows the fields in the inode record only (the retry
// table's replies embed the fields before more of their own: replayed, an
// inode's presence reads as unknown, which only costs a round trip).
// Inodes stored before it end after the fields: unknown.
std::string encode_inode(const Inode& inode) {
  Writer w;
  write_inode_fields(w, inode);
  if (inode.xattrs != XattrPresence::kUnknown) w.u8(static_cast<uint8_t>(inode.xattrs));
  return w.take();
}

Result<Inode> decode_inode(std::string_view bytes) {
  Reader r(bytes, "inode");
  Inode n = read_inode_fields(r);
  if (!r.at_end()) {
    const uint8_t presence = r.u8();
    if (presence != static_cast<uint8_t>(XattrPresence::kNone) &&
        presence != static_cast<uint8_t>(XattrPresence::kSome))
      r.fail();
    n.xattrs = static_cast<XattrPresence>(presence);
  }
  WEFT_RETURN_IF_ERROR(r.finish());
  return n;
}

std::string encode_dentry(const DentryValue& d) {
  return Writer().u8(static_cast<uint8_t>(d.type)).u64(d.ino).take();
}

Result<DentryValue> decode_dentry(std::string_view bytes) {
  Reader r(bytes, "dentry");
  DentryValue d;
  uint8_t t = r.u8();
  if (!valid_type(t)) r.fail();
  d.type = static_cast<InodeType>(t);
  d.ino = r.u64();
  WEFT_RETURN_IF_ERROR(r.finish());
  return d;
}

std::string encode_dir_stat(const DirStat& s) {
  return Writer().i64(s.mtime_ns).i64(s.ctime_ns).i64(s.nlink_delta).take();
}

Result<DirStat> decode_dir_stat(std::string_view bytes) {
  Reader r(bytes, "dir stat");
  DirStat s;
  s.mtime_ns = r.i64();
  s.ctime_ns = r.i64();
  s.nlink_delta = r.i64();
  WEFT_RETURN_IF_ERROR(r.finish());
  return s;
}

std::string encode_session(const SessionValue& s) {
  Writer w;
  w.u64(s.client_id).i64(s.opened_ns);
  // A session of a client from before cuts, never cut nor abandoned: as
  // before them. Flags: bit 0 answers_cuts, bit 1 abandoned.
  if (s.answers_cuts || s.cut_gen != 0 || s.abandoned)
    w.u8((s.answers_cuts ? 1 : 0) | (s.abandoned ? 2 : 0)).u64(s.cut_gen).u64(s.acked_gen).u64(s.cut_length);
  return w.take();
}

Result<SessionValue> decode_session(std::string_view bytes) {
  Reader r(bytes, "session");
  SessionValue s;
  s.client_id = r.u64();
  s.opened_ns = r.i64();
  if (!r.at_end()) {
    const uint8_t flags = r.u8();
    s.answers_cuts = (flags & 1) != 0;
    s.abandoned = (flags & 2) != 0;
    s.cut_gen = r.u64();
    s.acked_gen = r.u64();
    s.cut_length = r.u64();
    if (flags > 3 || s.acked_gen > s.cut_gen) r.fail();
    // Never cut: no cut length means anything (nor is one written back).
    if (s.cut_gen == 0) s.cut_length = 0;
  }
  WEFT_RETURN_IF_ERROR(r.finish());
  return s;
}

// The longest prefix of `text` of at most `max` bytes that ends between
// UTF-8 characters (continuation bytes are 10xxxxxx).
static std::string_view utf8_prefix(std::string_view text, size_t max) {
  if (text.size() <= max) return text;
  size_t n = max;
  while (n > 0 && (static_cast<uint8_t>(text[n]) & 0xC0) == 0x80) --n;
  return text.substr(0, n);
}

std::string encode_request(const RequestRecord& rec) {
  Writer w;
  w.u16(static_cast<uint16_t>(rec.code)).bytes(utf8_prefix(rec.message, kRecordMessageBytesMax)).i64(rec.time_ns);
  // Bit 0: an inode follows; bit 1: create found the file existing (records
  // from before it: never set).
  w.u64(rec.reply.session_id).u8((rec.reply.has_inode ? 1 : 0) | (rec.reply.existed ? 2 : 0));
  if (rec.reply.has_inode) write_inode_fields(w, rec.reply.inode);
  w.u8(rec.op);
  if (rec.reply.cut.gen != 0) w.u64(rec.reply.cut.gen).u64(rec.reply.cut.length);  // records before cuts: none
  return w.take();
}

Result<RequestRecord> decode_request(std::string_view bytes) {
  Reader r(bytes, "request record");
  RequestRecord rec;
  rec.code = code_from_wire(r.u16());
  rec.message = r.bytes(1 << 16);
  rec.time_ns = r.i64();
  rec.reply.session_id = r.u64();
  uint8_t reply_flags = r.u8();
  if (reply_flags > 3) r.fail();
  rec.reply.has_inode = (reply_flags & 1) != 0;
  rec.reply.existed = (reply_flags & 2) != 0;
  if (rec.reply.has_inode) rec.reply.inode = read_inode_fields(r);
  if (!r.at_end()) rec.op = r.u8();
  if (!r.at_end()) {
    rec.reply.cut.gen = r.u64();
    rec.reply.cut.length = r.u64();
    if (rec.reply.cut.gen == 0) r.fail();
  }
  WEFT_RETURN_IF_ERROR(r.finish());
  return rec;
}

std::string encode_i64(int64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((static_cast<uint64_t>(v) >> (8 * i)) & 0xff);
  return s;
}

Result<int64_t> decode_i64(std::string_view bytes) {
  if (bytes.size() != 8) return error(Code::kCorruption, "counter of {} bytes", bytes.size());
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[i])) << (8 * i);
  return static_cast<int64_t>(v);
}

}  // namespace weft::meta
