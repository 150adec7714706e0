// Hostile replies from a storage server, as the client's chunk I/O (ChunkIo:
// the code that parses and checks storage replies) meets them. A fake
// storage server (an rpc::Server with the data-path methods client code
// calls: BatchRead, Write, Truncate, Remove, RemoveRange, ListChunks)
// answers from a known content, spoiled case by case as a fixed-seed
// mt19937_64 (printed; WEFT_HOSTILE_SEED overrides) draws: reads of more
// bytes than asked, lengths that disagree with the payload, payloads cut or
// trailing, wrong CRCs, results missing, duplicated, extra or swapped, error
// codes defined and undefined (per range and for the whole call, up to
// UINT32_MAX), versions going backwards and chunk lengths past the chunk
// size, update replies of absurd versions, lengths and CRCs (or of another
// message: version 0), RemoveRange
// cursors that jump to UINT64_MAX, listings paged, past their bound or of
// absurd fields, bodies that do not parse or are another message, and
// replies that come after the call's timeout.
// Why: a storage server is a peer the client trusts with its data; a buggy
// or hostile one must cost the caller an error, never a crash, a write past
// its buffer (guard bytes around every destination), a hang (every call is
// timed), kInternal (but for an undefined code: then the reply itself is
// impossible) or bad data taken for good. What no client can tell (a
// consistent lie: "no such chunk" for one that exists, the answers of two
// ranges swapped, an empty reply of another message) is checked for bounds
// and CRC only. GetChunkMeta and chain-less listings are not served: only
// storage servers and tools call them.
// Cases of faults since fixed are sent by focused tests at the end; "Not drawn here" comments
// at the spoils that would draw them say what they did.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "common/hostile_draw.h"
#include "client/chunk_io.h"
#include "client/in_process_mgmtd.h"
#include "client/routing_cache.h"
#include "common/crc32c.h"
#include "proto/storage.pb.h"
#include "rpc/server.h"
#include "storage/service_methods.h"

namespace weft::client {
namespace {

namespace pb = proto::storage;
namespace methods = storage::methods;
using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;

constexpr char kToken[] = "hostile-reply-token";
constexpr uint64_t kDefaultSeed = 0x5eed'c11e'07a1'0001;
constexpr uint32_t kChunkBytes = 64u << 10;  // the file's chunk size
constexpr uint64_t kIno = 0x4f57;
constexpr uint64_t kReadChunks = 8;   // reads: chunks 0..7 of kIno may exist
constexpr uint64_t kListChunks = 40;  // listings: chunks 0..39
constexpr uint32_t kCallTimeoutMs = 200;
constexpr uint32_t kRetryTimeMs = 60;
constexpr auto kLate = std::chrono::milliseconds(2 * kCallTimeoutMs);  // a reply after the call's timeout
constexpr auto kHung = 5s;                                             // a call slower than this hung
constexpr size_t kGuard = 64;
constexpr std::byte kGuardByte{0xa5};
constexpr int kReads = 300;
constexpr int kGroups = 150;
constexpr int kUpdates = 150;
constexpr int kRangeRemovals = 100;
constexpr int kListings = 100;

uint64_t hostile_seed() { return weft::hostile_seed(kDefaultSeed); }

// ---- What the fake storage holds ----

// The byte at `pos` of chunk `index` of kIno (also past its end: bytes a
// spoiled reply adds).
std::byte truth_at(uint64_t index, uint64_t pos) {
  uint64_t x = ((index << 40) ^ pos) * 0x9E3779B97F4A7C15ull;
  x ^= x >> 29;
  x *= 0xBF58476D1CE4E5B9ull;
  return static_cast<std::byte>(x >> 32);
}

std::vector<std::byte> truth(uint64_t index, uint64_t offset, uint64_t n) {
  std::vector<std::byte> out(n);
  for (uint64_t i = 0; i < n; ++i) out[i] = truth_at(index, offset + i);
  return out;
}

// The chunks of kIno by index: their lengths (absent: not there).
using World = std::map<uint64_t, uint32_t>;

// What chunk `index` holds of [offset, offset + size): what a read returns.
uint32_t held(const World& w, uint64_t index, uint64_t offset, uint64_t size) {
  auto it = w.find(index);
  if (it == w.end() || offset >= it->second) return 0;
  return static_cast<uint32_t>(std::min<uint64_t>(size, it->second - offset));
}

// The end of the data of chunks [first, end): what data_end() answers.
std::optional<uint64_t> data_end_of(const World& w, uint64_t first, uint64_t end) {
  std::optional<uint64_t> out;
  for (const auto& [index, length] : w)
    if (index >= first && index < end && length > 0) out = index * kChunkBytes + length;
  return out;
}

// ---- Spoils ----

// How a whole call is answered (any method).
enum class CallSpoil {
  kNone,           // the method's own answer (maybe spoiled below)
  kCode,           // a defined error code
  kUndefinedCode,  // a status no weft::Code has (up to 65535)
  kUnparsable,     // a body that does not parse
  kWrongType,      // the body of another message (it parses)
  kLate,           // the honest answer, after the call's timeout
};

// How a BatchRead's answer is spoiled: at range `slot`, or the whole reply.
// Not drawn here (fixed; sent by the tests at the end of this file): fewer bytes than the chunk holds in the range (its
// own chunk_length says more), or more than it holds but no more than asked,
// each with the CRC of the bytes sent. ChunkIo::read_reply and read_group
// never look at chunk_length: such a reply is returned as good (read of
// [0, 4096) of a 65536-byte chunk answered {length 100, crc of those 100
// bytes, chunk_length 65536} returns 100 (read, read_once, read_blocking and
// read_group alike), and FileImpl fills the rest with zeros as a hole; a read
// of [0, 4096) of a 1000-byte chunk answered {length 4096, chunk_length 1000}
// returns 4096: 3096 bytes the chunk does not hold, as data).
enum class ReadSpoil {
  kNone,
  kAbsurdFields,        // versions 0, backwards or UINT64_MAX; chunk_length past the chunk size (full ranges)
  kPastAsked,           // more bytes than asked, their CRC right
  kLengthNotPayload,    // a length other than the bytes sent, up to UINT32_MAX
  kBadCrc,              // a wrong CRC
  kNoResults,           // no result at all
  kDuplicated,          // the slot's result twice
  kExtraResults,        // results for ranges never asked
  kRangeCode,           // a defined error code for the slot (kNotFound: a hole)
  kUndefinedRangeCode,  // an undefined one, up to UINT32_MAX
  kNotFoundWithBytes,   // kNotFound, its bytes sent all the same
  kErrorWithBytes,      // an error code, its bytes sent all the same
  kSwapped,             // the answers (and bytes) of two ranges swapped (grouped reads)
  kPayloadCut,          // the payload shorter than the lengths say
  kPayloadTrailing,     // bytes after the last range's
};

// How a Write / Truncate / Remove answer is spoiled.
enum class UpdateSpoil { kNone, kAbsurdFields, kWithPayload };

// How RemoveRange's pages are spoiled.
// Not drawn here (fixed; sent by the tests at the end of this file): `more` with a next_index that does not move forward.
// ChunkIo::remove_from follows any next_index: {removed 0, more true,
// next_index = the request's first_index} makes it call again forever (a
// hang; with `stop` set it still never ends, as stop is only read once the
// cursor moved), and a next_index below the caller's first_index has it
// send RemoveRange from there: a real head then removes chunks the caller
// meant to keep (first_index 5 answered next_index 0: the next request asks
// to remove chunks 0.. of the file).
enum class RangeSpoil {
  kNone,          // a few pages, each cursor past the last
  kAbsurdCounts,  // `removed` up to UINT64_MAX (the sum wraps)
  kFarCursor,     // a page ends at next_index up to UINT64_MAX
};

// How ListChunks' pages are spoiled.
// Not drawn here (fixed; sent by the tests at the end of this file): entries out of order or outside the range asked, and
// pages that do not move the cursor. ChunkIo::data_end_at takes the last
// entry of a page as the end of the data and as the cursor, whatever it is.
// data_end(ino, chain, 64 KiB, 4, 8) answered, every time,
//   {more: true, chunks: [(ino, 4) of 100 bytes]}: loops, page after page,
//     for ever (the cursor stays at 5; nothing bounds the pages);
//   {chunks: [(ino, 5) of 100, (ino, 3) of 100]} (unsorted): 3 * 64 KiB + 100,
//     not 5 * 64 KiB + 100;
//   {chunks: [(ino, 2) of 100, (ino, 3) of 100]} (below first_index):
//     3 * 64 KiB + 100, an end before the range asked;
//   {chunks: [(ino, 4) of UINT32_MAX]} (past the chunk size): 4295229439;
//   {chunks: [(ino - 1, 9) of 100, (ino, 5) of 100]} (a smaller inode): none;
//   {more: true, chunks: []} (no correct server sends it): none.
// Each is returned as good (stored_end() then takes it for the data a writer
// left past a truncate).
enum class ListSpoil {
  kNone,             // honest pages
  kAbsurdFields,     // versions, CRCs, pending versions and chains absurd
  kOtherInodeAfter,  // an entry of the next inode after the range (a server ignoring `end`)
  kPastEnd,          // entries past the end asked (a server ignoring `end`)
};

struct Case {
  std::string text;  // for failure messages
  CallSpoil call = CallSpoil::kNone;
  uint32_t code = 0;  // kCode, kUndefinedCode, kRangeCode, kUndefinedRangeCode, kErrorWithBytes
  std::string body;   // kUnparsable, kWrongType
  World world;
  ReadSpoil read = ReadSpoil::kNone;
  size_t slot = 0;    // the range spoiled
  size_t other = 0;   // kSwapped: the range swapped with it
  uint64_t k = 1;     // bytes added or cut
  uint64_t big = 0;   // an absurd 64-bit value
  uint32_t wide = 0;  // an absurd 32-bit value
  UpdateSpoil update = UpdateSpoil::kNone;
  RangeSpoil range = RangeSpoil::kNone;
  std::vector<uint64_t> cursors;  // RemoveRange: the first_index of each page, in order
  std::vector<uint64_t> removed;  // RemoveRange: each page's count
  ListSpoil list = ListSpoil::kNone;
  uint32_t page = 1;  // ListChunks: entries per page
  // Set: the whole answer of that method (the fixed faults' tests below).
  std::function<Result<pb::ListChunksReply>(const pb::ListChunksRequest&)> list_fn;
  std::function<Result<pb::RemoveRangeReply>(const pb::RemoveRangeRequest&)> range_fn;
  std::function<std::pair<pb::BatchReadReply, std::vector<std::byte>>(const pb::BatchReadRequest&)> read_fn;
  // Write and Truncate, by the request's `attempt`.
  std::function<Result<pb::WriteReply>(uint32_t attempt)> update_fn;
};

const char* name(CallSpoil s) {
  switch (s) {
    case CallSpoil::kNone:
      return "none";
    case CallSpoil::kCode:
      return "code";
    case CallSpoil::kUndefinedCode:
      return "undefined code";
    case CallSpoil::kUnparsable:
      return "unparsable body";
    case CallSpoil::kWrongType:
      return "another message";
    case CallSpoil::kLate:
      return "late";
  }
  return "?";
}

const char* name(ReadSpoil s) {
  switch (s) {
    case ReadSpoil::kNone:
      return "none";
    case ReadSpoil::kAbsurdFields:
      return "absurd fields";
    case ReadSpoil::kPastAsked:
      return "past asked";
    case ReadSpoil::kLengthNotPayload:
      return "length not payload";
    case ReadSpoil::kBadCrc:
      return "bad crc";
    case ReadSpoil::kNoResults:
      return "no results";
    case ReadSpoil::kDuplicated:
      return "duplicated";
    case ReadSpoil::kExtraResults:
      return "extra results";
    case ReadSpoil::kRangeCode:
      return "range code";
    case ReadSpoil::kUndefinedRangeCode:
      return "undefined range code";
    case ReadSpoil::kNotFoundWithBytes:
      return "not found with bytes";
    case ReadSpoil::kErrorWithBytes:
      return "error with bytes";
    case ReadSpoil::kSwapped:
      return "swapped";
    case ReadSpoil::kPayloadCut:
      return "payload cut";
    case ReadSpoil::kPayloadTrailing:
      return "payload trailing";
  }
  return "?";
}

std::string describe_call(const Case& c) {
  switch (c.call) {
    case CallSpoil::kCode:
    case CallSpoil::kUndefinedCode:
      return fmt::format("the call answered status {}", c.code);
    case CallSpoil::kUnparsable:
    case CallSpoil::kWrongType:
      return fmt::format("the call answered {} ({} bytes)", name(c.call), c.body.size());
    case CallSpoil::kLate:
      return "the call answered late";
    case CallSpoil::kNone:
      return "";
  }
  return "?";
}

// The wire values of the defined codes but kOk.
std::vector<uint32_t> defined_codes() {
  std::vector<uint32_t> out;
  for (uint32_t v = 1; v < 1024; ++v)
    if (static_cast<uint32_t>(code_from_wire(v)) == v) out.push_back(v);
  return out;
}

bool undefined(uint32_t v) {
  return code_from_wire(v) == Code::kInternal && v != static_cast<uint32_t>(Code::kInternal);
}

// Hostile values, from the seed.
class Hostile : public HostileDraw {
 public:
  explicit Hostile(uint64_t seed) : HostileDraw(seed), codes_(defined_codes()) {}


  uint32_t defined_code() { return codes_[below(codes_.size())]; }
  // An undefined code of at most `max` (a frame's status: 16 bits; a range's: 32).
  uint32_t undefined_code(uint32_t max) {
    const uint32_t first = codes_.back() + 1;
    uint32_t v = one_of<uint32_t>({first, first + 1, 1000, 0x7fff, 0xffff, 0x10000, UINT32_MAX - 1, UINT32_MAX,
                                   static_cast<uint32_t>(between(first, max))});
    return v <= max && undefined(v) ? v : first;
  }
  uint64_t absurd64() { return one_of<uint64_t>({0, 1, UINT64_MAX - 1, UINT64_MAX, u64()}); }
  // Past the chunk size.
  uint32_t past_chunk() {
    return one_of<uint32_t>({kChunkBytes + 1, 2 * kChunkBytes, UINT32_MAX - 1, UINT32_MAX,
                             static_cast<uint32_t>(between(kChunkBytes + 1, UINT32_MAX))});
  }
  uint64_t bytes_over() { return one_of<uint64_t>({1, 7, 4096, between(1, 2 * kChunkBytes)}); }
  // Bytes no message parses from (each fails on its own: tag 0, a field
  // longer than the body, a varint cut short, wire type 7, a group never ended).
  std::string unparsable() {
    std::string tail;
    for (size_t i = between(0, 16); i > 0; --i) tail.push_back(static_cast<char>(rng_()));
    switch (below(5)) {
      case 0:
        return std::string(1, '\0') + tail;
      case 1:
        return std::string("\x0a\xff\xff\xff\xff\x0f", 6) + tail;
      case 2:
        return std::string("\x08\x80", 2);
      case 3:
        return std::string("\x0f", 1) + tail;
      default:
        return std::string("\x0b\x08\x01", 3);
    }
  }
  // A world of chunks 0..span-1: absent, empty, full or of any length.
  World world(uint64_t span) {
    World w;
    for (uint64_t i = 0; i < span; ++i) {
      const size_t pick = below(100);
      if (pick < 20) continue;
      w[i] = pick < 25 ? 0 : pick < 55 ? kChunkBytes : static_cast<uint32_t>(between(1, kChunkBytes));
    }
    return w;
  }
  // A call spoil for one case in `percent` (late ones are rare: they cost a timeout).
  CallSpoil call_spoil(int percent) {
    if (!chance(percent)) return CallSpoil::kNone;
    const size_t pick = below(100);
    if (pick < 40) return CallSpoil::kCode;
    if (pick < 60) return CallSpoil::kUndefinedCode;
    if (pick < 75) return CallSpoil::kUnparsable;
    if (pick < 92) return CallSpoil::kWrongType;
    return CallSpoil::kLate;
  }
  // Fills c.code / c.body for c.call; `wrong_type` is another message's body.
  void fill_call(Case& c, const std::string& wrong_type) {
    if (c.call == CallSpoil::kCode) c.code = defined_code();
    if (c.call == CallSpoil::kUndefinedCode) c.code = undefined_code(0xffff);
    if (c.call == CallSpoil::kUnparsable) c.body = unparsable();
    if (c.call == CallSpoil::kWrongType) c.body = wrong_type;
  }

 private:
  std::vector<uint32_t> codes_;
};

// ---- The fake storage server ----

// One range's answer: its result and the bytes it puts in the payload.
struct Piece {
  pb::RangeResult result;
  std::vector<std::byte> bytes;
};

Piece honest_piece(const World& w, const pb::ReadRange& r) {
  Piece p;
  const uint64_t index = r.chunk().index();
  auto it = w.find(index);
  if (r.chunk().inode() != kIno || it == w.end()) {
    p.result.set_code(static_cast<uint32_t>(Code::kNotFound));
    p.result.set_message(fmt::format("chunk {}:{} not found", r.chunk().inode(), index));
    return p;
  }
  const uint32_t n = held(w, index, r.offset(), r.length());
  p.bytes = truth(index, r.offset(), n);
  p.result.set_length(n);
  p.result.set_version(7);
  p.result.set_crc32c(crc32c(p.bytes));
  p.result.set_chunk_length(it->second);
  return p;
}

void set_error(Piece& p, uint32_t code, bool keep_bytes) {
  p.result.set_code(code);
  p.result.set_message("hostile");
  if (keep_bytes) return;
  p.result.set_length(0);
  p.bytes.clear();
}

// The slot's spoils (s: its piece; r: its range).
void spoil_slot(const Case& c, const pb::ReadRange& r, Piece& s) {
  switch (c.read) {
    case ReadSpoil::kPastAsked:
      s.bytes = truth(r.chunk().index(), r.offset(), uint64_t{r.length()} + c.k);
      s.result.set_length(static_cast<uint32_t>(s.bytes.size()));
      s.result.set_crc32c(crc32c(s.bytes));
      break;
    case ReadSpoil::kLengthNotPayload:
      s.result.set_length(c.wide);
      break;
    case ReadSpoil::kBadCrc:
      s.result.set_crc32c(s.result.crc32c() ^ (c.wide | 1));
      break;
    case ReadSpoil::kRangeCode:
    case ReadSpoil::kUndefinedRangeCode:
      set_error(s, c.code, false);
      break;
    case ReadSpoil::kNotFoundWithBytes:
      set_error(s, static_cast<uint32_t>(Code::kNotFound), true);
      break;
    case ReadSpoil::kErrorWithBytes:
      set_error(s, c.code, true);
      break;
    default:
      break;
  }
}

// The answer to `req`, spoiled as `c` says: results and payload.
std::pair<pb::BatchReadReply, std::vector<std::byte>> read_answer(const Case& c, const pb::BatchReadRequest& req) {
  std::vector<Piece> pieces;
  for (const auto& r : req.ranges()) pieces.push_back(honest_piece(c.world, r));
  if (pieces.empty()) return {};  // the client never asks for no range
  const size_t slot = std::min(c.slot, pieces.size() - 1);
  spoil_slot(c, req.ranges(static_cast<int>(slot)), pieces[slot]);
  switch (c.read) {
    case ReadSpoil::kAbsurdFields:
      for (size_t i = 0; i < pieces.size(); ++i) {
        pieces[i].result.set_version(i % 2 == 0 ? c.big : 7 - i % 7);  // and backwards
        if (pieces[i].result.length() == req.ranges(static_cast<int>(i)).length())
          pieces[i].result.set_chunk_length(c.wide);
      }
      break;
    case ReadSpoil::kNoResults:
      pieces.clear();
      break;
    case ReadSpoil::kDuplicated:
      pieces.push_back(pieces[slot]);
      break;
    case ReadSpoil::kExtraResults:
      for (uint64_t i = 0; i < c.k % 3 + 1; ++i) {
        Piece extra;
        extra.bytes = truth(kReadChunks + i, 0, c.k % 512);
        extra.result.set_length(static_cast<uint32_t>(extra.bytes.size()));
        extra.result.set_crc32c(crc32c(extra.bytes));
        pieces.push_back(std::move(extra));
      }
      break;
    case ReadSpoil::kSwapped:
      std::swap(pieces[slot], pieces[std::min(c.other, pieces.size() - 1)]);
      break;
    default:
      break;
  }
  std::pair<pb::BatchReadReply, std::vector<std::byte>> out;
  for (auto& p : pieces) {
    *out.first.add_results() = p.result;
    out.second.insert(out.second.end(), p.bytes.begin(), p.bytes.end());
  }
  auto& payload = out.second;
  if (c.read == ReadSpoil::kPayloadCut && !payload.empty())
    payload.resize(payload.size() - std::min<uint64_t>(c.k, payload.size()));
  else if (c.read == ReadSpoil::kPayloadCut || c.read == ReadSpoil::kPayloadTrailing)
    payload.resize(payload.size() + c.k, std::byte{0x5a});
  return out;
}

// RemoveRange: the page that starts at `first_index`.
Result<pb::RemoveRangeReply> range_answer(const Case& c, const pb::RemoveRangeRequest& req) {
  auto at = std::find(c.cursors.begin(), c.cursors.end(), req.first_index());
  if (req.inode() != kIno || at == c.cursors.end())
    return error(Code::kInvalidArgument, "test: RemoveRange of {}:{} was never announced", req.inode(),
                 req.first_index());
  const size_t i = static_cast<size_t>(at - c.cursors.begin());
  pb::RemoveRangeReply reply;
  reply.set_removed(c.removed[i]);
  reply.set_more(i + 1 < c.cursors.size());
  if (reply.more()) reply.set_next_index(c.cursors[i + 1]);
  return reply;
}

// ListChunks: a page of the world from `start`, within `end` unless spoiled.
Result<pb::ListChunksReply> list_answer(const Case& c, const pb::ListChunksRequest& req) {
  if (req.start().inode() != kIno || req.end().inode() != kIno || req.count_max() == 0)
    return error(Code::kInvalidArgument, "test: unexpected listing request {}", req.ShortDebugString());
  const uint64_t end = c.list == ListSpoil::kPastEnd ? UINT64_MAX : req.end().index();
  const uint32_t page = std::min(c.page, req.count_max());
  pb::ListChunksReply reply;
  auto it = c.world.lower_bound(req.start().index());
  for (; it != c.world.end() && it->first < end && reply.chunks_size() < static_cast<int>(page); ++it) {
    pb::ChunkMeta* m = reply.add_chunks();
    m->mutable_chunk()->set_inode(kIno);
    m->mutable_chunk()->set_index(it->first);
    m->set_length(it->second);
    m->set_version(3);
    m->set_chunk_crc32c(crc32c(truth(it->first, 0, it->second)));
    m->set_chain_id(req.chain_id());
    if (c.list == ListSpoil::kAbsurdFields) {
      m->set_version(c.big);
      m->set_chunk_crc32c(c.wide);
      m->set_pending_version(~c.big);
      m->set_chain_id(c.wide ^ 0x5a5a);
    }
  }
  const bool rest = it != c.world.end() && it->first < end;
  reply.set_more(rest);
  if (!rest && c.list == ListSpoil::kOtherInodeAfter && reply.chunks_size() < static_cast<int>(page)) {
    pb::ChunkMeta* m = reply.add_chunks();
    m->mutable_chunk()->set_inode(kIno + 1);
    m->set_length(kChunkBytes);
    reply.set_more(true);
  }
  return reply;
}

// An rpc::Server answering the storage data path from the current Case.
class HostileStorage {
 public:
  HostileStorage() {
    server_ =
        std::make_unique<rpc::Server>(io_, rpc::ServerOptions{.cluster_token = kToken, .name = "hostile"}, registry_);
    for (rpc::MethodId m : {methods::kBatchRead, methods::kWrite, methods::kTruncate, methods::kRemove,
                            methods::kRemoveRange, methods::kListChunks})
      server_->add_async(m, fmt::format("storage.{}", m.method), [this](rpc::ServerCall& call) { return serve(call); });
    port_ = server_->listen("127.0.0.1", 0).value();
  }
  ~HostileStorage() {
    server_->stop();
    io_.stop();
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

  void set(std::shared_ptr<const Case> c) {
    std::lock_guard lock(mu_);
    case_ = std::move(c);
    range_requests_.clear();
  }
  // While set, every call is answered as refusal() says (ends a client's loop).
  void refuse(bool on) { refusing_ = on; }
  // The first_index of each RemoveRange since set().
  std::vector<uint64_t> range_requests() {
    std::lock_guard lock(mu_);
    return range_requests_;
  }
  // Requests whose body or payload the client got wrong.
  int bad_requests() const { return bad_requests_.load(); }

 private:
  std::shared_ptr<const Case> current() {
    std::lock_guard lock(mu_);
    return case_;
  }

  Task<Status> serve(rpc::ServerCall& call) {
    std::shared_ptr<const Case> c = current();
    if (refusing_ || !c) co_return refusal(call);
    if (call.method == methods::kRemoveRange) note_range_request(call);
    switch (c->call) {
      case CallSpoil::kCode:
      case CallSpoil::kUndefinedCode:
        co_return Status(static_cast<Code>(c->code), "hostile status");
      case CallSpoil::kUnparsable:
      case CallSpoil::kWrongType:
        call.response_body = c->body;
        co_return Status();
      case CallSpoil::kLate: {
        asio::steady_timer timer(co_await asio::this_coro::executor);
        timer.expires_after(kLate);
        auto waited = co_await timer.async_wait(use_nothrow);
        (void)waited;
        break;
      }
      case CallSpoil::kNone:
        break;
    }
    co_return answer(*c, call);
  }

  // What ends whatever loop a client is in: "no more" to a RemoveRange or a
  // listing (an error from a listing would crash it: see ListSpoil), an error
  // to the rest.
  static Status refusal(rpc::ServerCall& call) {
    if (call.method == methods::kRemoveRange) return serialized(Result<pb::RemoveRangeReply>(), call);
    if (call.method == methods::kListChunks) return serialized(Result<pb::ListChunksReply>(), call);
    return Status(Code::kNotSupported, "refused: the test ended a hung call");
  }

  void note_range_request(const rpc::ServerCall& call) {
    pb::RemoveRangeRequest req;
    if (!req.ParseFromString(call.body)) return;  // answer() counts it
    std::lock_guard lock(mu_);
    range_requests_.push_back(req.first_index());
  }

  template <class Req>
  std::optional<Req> parse(const rpc::ServerCall& call) {
    Req req;
    if (req.ParseFromString(call.body)) return req;
    bad_requests_.fetch_add(1);
    return std::nullopt;
  }

  // Keeps `payload` alive with the call and sends it.
  static void send_payload(rpc::ServerCall& call, std::vector<std::byte> payload) {
    auto held = std::make_shared<std::vector<std::byte>>(std::move(payload));
    if (!held->empty()) call.response_payload.push_back(*held);
    call.response_keepalive = held;
  }

  Status answer(const Case& c, rpc::ServerCall& call) {
    if (call.method == methods::kBatchRead) {
      auto req = parse<pb::BatchReadRequest>(call);
      if (!req) return Status(Code::kProtocol, "test: bad BatchRead");
      auto [reply, payload] = c.read_fn ? c.read_fn(*req) : read_answer(c, *req);
      reply.SerializeToString(&call.response_body);
      send_payload(call, std::move(payload));
      return Status();
    }
    if (call.method == methods::kWrite || call.method == methods::kTruncate) return update_answer(c, call);
    if (call.method == methods::kRemove) {
      if (!parse<pb::RemoveRequest>(call)) return Status(Code::kProtocol, "test: bad Remove");
      if (c.update == UpdateSpoil::kWithPayload) send_payload(call, std::vector<std::byte>(c.k, std::byte{7}));
      return Status();
    }
    if (call.method == methods::kRemoveRange) {
      auto req = parse<pb::RemoveRangeRequest>(call);
      if (!req) return Status(Code::kProtocol, "test: bad RemoveRange");
      return serialized(c.range_fn ? c.range_fn(*req) : range_answer(c, *req), call);
    }
    auto req = parse<pb::ListChunksRequest>(call);
    if (!req) return Status(Code::kProtocol, "test: bad ListChunks");
    return serialized(c.list_fn ? c.list_fn(*req) : list_answer(c, *req), call);
  }

  template <class Reply>
  static Status serialized(const Result<Reply>& r, rpc::ServerCall& call) {
    if (!r) return r.error();
    r->SerializeToString(&call.response_body);
    return Status();
  }

  // Honest answers are of a chunk that was not there before: zeros up to the
  // write's offset, then its bytes; zeros up to the truncate's length.
  Status update_answer(const Case& c, rpc::ServerCall& call) {
    pb::WriteReply reply;
    uint32_t attempt = 0;
    if (call.method == methods::kWrite) {
      auto req = parse<pb::WriteRequest>(call);
      if (!req) return Status(Code::kProtocol, "test: bad Write");
      const std::span<const std::byte> data(call.payload.data(), call.payload_len);
      if (call.payload_len != req->length() || crc32c(data) != req->data_crc32c()) bad_requests_.fetch_add(1);
      std::vector<std::byte> content(req->offset());
      content.insert(content.end(), data.begin(), data.end());
      reply.set_chunk_length(req->offset() + req->length());
      reply.set_chunk_crc32c(crc32c(content));
      attempt = req->attempt();
    } else {
      auto req = parse<pb::TruncateRequest>(call);
      if (!req) return Status(Code::kProtocol, "test: bad Truncate");
      if (req->length() > req->chunk_size())  // as storage's ChunkEngine::new_length
        return Status(Code::kInvalidArgument, "test: truncate past the chunk size");
      reply.set_chunk_length(req->length());
      reply.set_chunk_crc32c(crc32c(std::vector<std::byte>(req->length())));
      attempt = req->attempt();
    }
    if (c.update_fn) return serialized(c.update_fn(attempt), call);
    reply.set_version(9);
    if (c.update == UpdateSpoil::kAbsurdFields) {
      reply.set_version(c.big);
      reply.set_chunk_length(c.wide);
      reply.set_chunk_crc32c(~c.wide);
    }
    reply.SerializeToString(&call.response_body);
    if (c.update == UpdateSpoil::kWithPayload) send_payload(call, std::vector<std::byte>(c.k, std::byte{7}));
    return Status();
  }

  metrics::Registry registry_;
  rpc::IoPool io_{1};
  std::unique_ptr<rpc::Server> server_;
  uint16_t port_ = 0;
  std::mutex mu_;
  std::shared_ptr<const Case> case_;      // GUARDED_BY(mu_)
  std::vector<uint64_t> range_requests_;  // GUARDED_BY(mu_)
  std::atomic<bool> refusing_{false};
  std::atomic<int> bad_requests_{0};
};

// ---- Caller buffers ----

// Destinations in one arena, each between guard bytes.
class Guarded {
 public:
  explicit Guarded(const std::vector<size_t>& sizes) {
    size_t at = kGuard;
    for (size_t n : sizes) {
      starts_.push_back(at);
      at += n + kGuard;
    }
    sizes_ = sizes;
    arena_.assign(at, kGuardByte);
  }
  std::span<std::byte> dst(size_t i) { return std::span(arena_).subspan(starts_[i], sizes_[i]); }
  // The first guard byte written over, as "before range i" / "after range i".
  std::optional<std::string> overrun() const {
    for (size_t i = 0; i <= starts_.size(); ++i) {
      const size_t from = i == 0 ? 0 : starts_[i - 1] + sizes_[i - 1];
      const size_t to = i == starts_.size() ? arena_.size() : starts_[i];
      for (size_t b = from; b < to; ++b)
        if (arena_[b] != kGuardByte)
          return i == 0 ? fmt::format("{} bytes before range 0", to - b)
                        : fmt::format("{} bytes after range {}", b - from + 1, i - 1);
    }
    return std::nullopt;
  }

 private:
  std::vector<std::byte> arena_;
  std::vector<size_t> starts_;
  std::vector<size_t> sizes_;
};

// ---- Expectations ----

// What a call that fails with `c` every time ends with where it is retried
// (ChunkIo::retrying, read): a retryable code becomes kIoError once the
// retry time is used up; kIoError and kCorruption, retried too, stay.
Code after_retries(Code c) { return code_retryable(c) ? Code::kIoError : c; }

// Whether the case sends kInternal, or a code no weft::Code has (which the
// client can only take as kInternal: the reply itself is impossible).
bool sends_internal(const Case& c) { return c.code != 0 && code_from_wire(c.code) == Code::kInternal; }

// An error the caller can act on: kInternal only where the case sends it.
void expect_clear(const Status& s, const Case& c) {
  EXPECT_NE(s.code(), Code::kOk) << c.text;
  EXPECT_TRUE(s.code() != Code::kInternal || sends_internal(c))
      << "kInternal for a reply that is possible: " << s << "\n  " << c.text;
}

std::string code_label(const Status& s) { return std::string(code_name(s.code())); }

// ---- The fixture ----

enum class Entry { kRead, kReadOnce, kReadBlocking };

const char* name(Entry e) {
  switch (e) {
    case Entry::kRead:
      return "read";
    case Entry::kReadOnce:
      return "read_once";
    case Entry::kReadBlocking:
      return "read_blocking";
  }
  return "?";
}

struct UpdateLie;

class HostileReplyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto node = mgmtd_.state->register_node({.kind = mgmt::NodeKind::kStorage,
                                             .address = storage_.address(),
                                             .incarnation = 1,
                                             .targets = {{.name = "t0"}}});
    ASSERT_TRUE(node.has_value()) << node.error();
    node_ = node->node_id;
    ASSERT_TRUE(mgmtd_.state->create_chain_table({.replicas = 1}).has_value());
    ASSERT_TRUE(routing_.start());
    chain_ = routing_.current()->tables.at(1).chains.at(0);
    seed_ = hostile_seed();
    std::printf("hostile reply seed: %llu (WEFT_HOSTILE_SEED overrides)\n", static_cast<unsigned long long>(seed_));
  }
  void TearDown() override {
    routing_.stop();
    EXPECT_EQ(storage_.bad_requests(), 0) << "requests the client got wrong";
    print_outcomes();
  }

  // Sends `c` as every answer from now on; keeps the storage node alive at mgmtd.
  std::shared_ptr<const Case> serve(Case c) {
    auto shared = std::make_shared<const Case>(std::move(c));
    storage_.set(shared);
    auto hb = mgmtd_.state->heartbeat({.node_id = node_, .incarnation = 1});
    EXPECT_TRUE(hb.has_value()) << hb.error();
    return shared;
  }

  ChunkAddress address(uint64_t index) const {
    return {.ino = kIno, .index = index, .chain = chain_, .chunk_bytes = kChunkBytes};
  }

  // Sends `lie`'s update: a write of `data` at its offset, or a truncate to it.
  Result<void> send_update(const UpdateLie& lie, std::span<const std::byte> data);

  // Runs `task` on the client's I/O thread, at most kHung: past it, the
  // storage refuses every call (whatever loop the client is in ends) and the
  // call counts as hung.
  template <class T>
  T bounded(Task<T> task, const std::string& what) {
    const auto start = SteadyClock::now();
    auto done = asio::co_spawn(io_.at(0).get_executor(), std::move(task), asio::use_future);
    if (done.wait_for(kHung) != std::future_status::ready) {
      ADD_FAILURE() << "no answer within " << kHung.count() << " s (hung); the storage now refuses every call\n  "
                    << what;
      storage_.refuse(true);
      T out = done.get();
      storage_.refuse(false);
      return out;
    }
    slowest_ = std::max(slowest_, SteadyClock::now() - start);
    return done.get();
  }

  Result<uint32_t> read_via(Entry e, ChunkAddress a, uint32_t offset, std::span<std::byte> dst,
                            const std::string& what) {
    if (e == Entry::kRead) return bounded(chunks_.read(a, offset, dst), what);
    if (e == Entry::kReadOnce) return bounded(chunks_.read_once(a, offset, dst), what);
    const auto start = SteadyClock::now();
    auto r = chunks_.read_blocking(a, offset, dst);
    EXPECT_LT(SteadyClock::now() - start, kHung) << "hung: " << what;
    slowest_ = std::max(slowest_, SteadyClock::now() - start);
    return r;
  }

  void note(const std::string& family, const std::string& outcome) { ++outcomes_[family][outcome]; }

  void print_outcomes() const {
    for (const auto& [family, counts] : outcomes_) {
      int total = 0;
      std::string line;
      for (const auto& [what, n] : counts) {
        total += n;
        line += fmt::format(" {} {}", what, n);
      }
      std::printf("  %s: %d:%s\n", family.c_str(), total, line.c_str());
    }
    std::printf("  slowest call: %lld ms\n",
                static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(slowest_).count()));
  }

  HostileStorage storage_;
  InProcessMgmtd mgmtd_{kToken, 0, 1};
  mgmt::NodeId node_ = mgmt::kInvalidNode;
  rpc::IoPool io_{1};
  rpc::Client rpc_{io_, rpc::ClientOptions::in_cluster(kToken, "hostile-reply-test")};
  RoutingCache routing_{io_, rpc_, {rpc::Endpoint{"127.0.0.1", mgmtd_.port}}};
  ChunkIo chunks_{io_, rpc_, routing_,
                  ChunkIoOptions{.call_timeout_ms = kCallTimeoutMs, .retry_time_ms_max = kRetryTimeMs}};
  mgmt::ChainId chain_ = 0;
  uint64_t seed_ = 0;
  std::map<std::string, std::map<std::string, int>> outcomes_;
  SteadyClock::duration slowest_{};
};

// ---- Single-range reads ----

// One read as the caller asks it.
struct ReadAsk {
  uint64_t index = 0;
  uint32_t offset = 0;
  size_t size = 0;
};

ReadAsk draw_read(Hostile& h, const World& w) {
  ReadAsk a;
  a.index = h.below(kReadChunks);
  auto it = w.find(a.index);
  const uint32_t length = it == w.end() ? 0 : it->second;
  a.offset = h.one_of<uint32_t>(
      {0, 0, static_cast<uint32_t>(h.below(kChunkBytes)), length > 0 ? length - 1 : 0, length, kChunkBytes - 1});
  a.offset = std::min(a.offset, kChunkBytes - 1);
  const size_t room = kChunkBytes - a.offset;
  a.size = h.one_of<size_t>({1, 4096, room, h.between(0, room), h.between(1, std::min<size_t>(room, 9000))});
  a.size = std::min(a.size, room);
  return a;
}

// The spoils of one read's content (those that need a result of data drawn
// only for a chunk that is there).
ReadSpoil draw_read_spoil(Hostile& h, bool there) {
  if (h.chance(25)) return ReadSpoil::kNone;
  if (!there)
    return h.one_of<ReadSpoil>({ReadSpoil::kNoResults, ReadSpoil::kDuplicated, ReadSpoil::kExtraResults,
                                ReadSpoil::kPayloadCut, ReadSpoil::kPayloadTrailing});
  return h.one_of<ReadSpoil>({ReadSpoil::kAbsurdFields, ReadSpoil::kPastAsked, ReadSpoil::kLengthNotPayload,
                              ReadSpoil::kBadCrc, ReadSpoil::kNoResults, ReadSpoil::kDuplicated,
                              ReadSpoil::kExtraResults, ReadSpoil::kRangeCode, ReadSpoil::kUndefinedRangeCode,
                              ReadSpoil::kNotFoundWithBytes, ReadSpoil::kErrorWithBytes, ReadSpoil::kPayloadCut,
                              ReadSpoil::kPayloadTrailing});
}

// A length other than `n`.
uint32_t length_other_than(Hostile& h, uint32_t n) {
  uint32_t l = h.one_of<uint32_t>({n + 1, n - 1, 0, UINT32_MAX, h.u32()});
  return l == n ? n + 1 : l;
}

// Fills the slot spoil's values for a range that holds `n` bytes.
void fill_read_spoil(Hostile& h, Case& c, uint32_t n) {
  c.k = h.bytes_over();
  c.big = h.absurd64();
  c.wide = c.read == ReadSpoil::kLengthNotPayload ? length_other_than(h, n)
           : c.read == ReadSpoil::kBadCrc         ? h.u32()
                                                  : h.past_chunk();
  if (c.read == ReadSpoil::kRangeCode || c.read == ReadSpoil::kErrorWithBytes) c.code = h.defined_code();
  if (c.read == ReadSpoil::kUndefinedRangeCode) c.code = h.undefined_code(UINT32_MAX);
}

// A read answered with another message: no results, or results of lengths
// and no payload.
std::string read_wrong_type(Hostile& h) {
  if (h.chance(50)) {
    pb::WriteReply w;
    w.set_version(h.absurd64() | 1);
    w.set_chunk_length(h.u32());
    return w.SerializeAsString();
  }
  pb::ListChunksReply l;
  for (size_t i = h.between(1, 3); i > 0; --i) {
    auto* m = l.add_chunks();
    m->mutable_chunk()->set_inode(kIno);
    m->set_length(static_cast<uint32_t>(h.between(1, kChunkBytes)));
  }
  return l.SerializeAsString();
}

// What a single-range read must end with: an error code, or bytes (the truth).
struct ReadWant {
  std::optional<Code> code;
  uint32_t bytes = 0;
};

ReadWant want_read(const Case& c, const ReadAsk& a, Entry e) {
  auto fail = [&](Code code) { return ReadWant{.code = e == Entry::kRead ? after_retries(code) : code}; };
  switch (c.call) {
    case CallSpoil::kCode:
      return fail(code_from_wire(c.code));
    case CallSpoil::kUndefinedCode:
      return fail(Code::kInternal);
    case CallSpoil::kUnparsable:
    case CallSpoil::kWrongType:
      return fail(Code::kProtocol);
    case CallSpoil::kLate:
      return fail(Code::kTimeout);
    case CallSpoil::kNone:
      break;
  }
  const bool there = c.world.contains(a.index);
  switch (c.read) {
    case ReadSpoil::kNone:
    case ReadSpoil::kAbsurdFields:
    case ReadSpoil::kSwapped:
      return ReadWant{.bytes = held(c.world, a.index, a.offset, a.size)};
    case ReadSpoil::kPayloadCut:
    case ReadSpoil::kPayloadTrailing:
      // "No such chunk" is a hole, whatever the payload.
      return there ? fail(Code::kProtocol) : ReadWant{};
    case ReadSpoil::kPastAsked:
    case ReadSpoil::kLengthNotPayload:
    case ReadSpoil::kNoResults:
    case ReadSpoil::kDuplicated:
    case ReadSpoil::kExtraResults:
      return fail(Code::kProtocol);
    case ReadSpoil::kBadCrc:
      return fail(Code::kCorruption);
    case ReadSpoil::kRangeCode:
    case ReadSpoil::kErrorWithBytes:
      return code_from_wire(c.code) == Code::kNotFound ? ReadWant{} : fail(code_from_wire(c.code));
    case ReadSpoil::kUndefinedRangeCode:
      return fail(Code::kInternal);
    case ReadSpoil::kNotFoundWithBytes:
      return ReadWant{};
  }
  return {};
}

Case draw_read_case(Hostile& h, ReadAsk& a, Entry& e) {
  Case c;
  c.world = h.world(kReadChunks);
  a = draw_read(h, c.world);
  e = h.one_of<Entry>({Entry::kRead, Entry::kReadOnce, Entry::kReadBlocking});
  c.call = h.call_spoil(30);
  h.fill_call(c, read_wrong_type(h));
  const bool there = c.world.contains(a.index);
  c.read = c.call == CallSpoil::kNone ? draw_read_spoil(h, there) : ReadSpoil::kNone;
  fill_read_spoil(h, c, held(c.world, a.index, a.offset, a.size));
  auto it = c.world.find(a.index);
  c.text = fmt::format("{} of chunk {} [{}, +{}) ({}): {}{} (code {} k {} big {} wide {})", name(e), a.index, a.offset,
                       a.size, it == c.world.end() ? "absent" : fmt::format("{} bytes", it->second), describe_call(c),
                       c.call == CallSpoil::kNone ? name(c.read) : "", c.code, c.k, c.big, c.wide);
  return c;
}

TEST_F(HostileReplyTest, ReadsReturnTheChunksBytesOrAClearError) {
  Hostile h(seed_ ^ 1);
  for (int i = 0; i < kReads; ++i) {
    ReadAsk a;
    Entry e = Entry::kRead;
    auto c = serve(draw_read_case(h, a, e));
    Guarded buf({a.size});
    auto r = read_via(e, address(a.index), a.offset, buf.dst(0), c->text);
    if (auto o = buf.overrun()) ADD_FAILURE() << "written past the caller's buffer: " << *o << "\n  " << c->text;
    const ReadWant want = want_read(*c, a, e);
    note("read", r ? "ok" : code_label(r.error()));
    note("read spoils", c->call == CallSpoil::kNone ? name(c->read) : name(c->call));
    if (want.code) {
      ASSERT_FALSE(r.has_value()) << "returned " << *r << " bytes as good\n  " << c->text;
      EXPECT_EQ(r.error().code(), *want.code) << r.error() << "\n  " << c->text;
      expect_clear(r.error(), *c);
      if ((c->call == CallSpoil::kNone && c->read == ReadSpoil::kUndefinedRangeCode) ||
          c->call == CallSpoil::kUndefinedCode) {
        EXPECT_NE(r.error().message().find(fmt::format("undefined code {}", c->code)), std::string::npos)
            << "the code sent is not named: " << r.error() << "\n  " << c->text;
      }
      continue;
    }
    ASSERT_TRUE(r.has_value()) << r.error() << "\n  " << c->text;
    ASSERT_EQ(*r, want.bytes) << c->text;
    EXPECT_TRUE(std::ranges::equal(buf.dst(0).first(*r), truth(a.index, a.offset, *r))) << "wrong bytes: " << c->text;
  }
}

// ---- Grouped reads (one BatchRead of many ranges) ----

// What a grouped range may end as.
struct GroupWant {
  bool alone = false;                  // marked retry_alone
  bool exact = false;                  // its truth
  bool hole = false;                   // 0 bytes
  std::optional<size_t> swapped_with;  // the truth of that range
};

std::vector<ReadAsk> draw_group(Hostile& h, const World& w) {
  std::vector<ReadAsk> asks(h.between(1, 12));
  for (auto& a : asks) {
    a = draw_read(h, w);
    a.size = std::min<size_t>(a.size, h.between(0, 8192));
  }
  return asks;
}

// Ranges whose chunk is there (a result of data).
std::vector<size_t> with_data(const World& w, const std::vector<ReadAsk>& asks) {
  std::vector<size_t> out;
  for (size_t i = 0; i < asks.size(); ++i)
    if (w.contains(asks[i].index)) out.push_back(i);
  return out;
}

Case draw_group_case(Hostile& h, std::vector<ReadAsk>& asks) {
  Case c;
  c.world = h.world(kReadChunks);
  asks = draw_group(h, c.world);
  c.call = h.call_spoil(25);
  h.fill_call(c, read_wrong_type(h));
  const auto data = with_data(c.world, asks);
  if (c.call == CallSpoil::kNone) {
    c.read = draw_read_spoil(h, !data.empty());
    if (h.chance(15) && data.size() >= 2) c.read = ReadSpoil::kSwapped;
  }
  if (!data.empty()) {
    c.slot = data[h.below(data.size())];
    c.other = data[h.below(data.size())];
    const ReadAsk& s = asks[c.slot];
    fill_read_spoil(h, c, held(c.world, s.index, s.offset, s.size));
  }
  c.text = fmt::format("{} ranges, slot {} other {}: {}{} (code {} k {} big {} wide {})", asks.size(), c.slot, c.other,
                       describe_call(c), c.call == CallSpoil::kNone ? name(c.read) : "", c.code, c.k, c.big, c.wide);
  for (const auto& a : asks)
    c.text += fmt::format("\n    chunk {} [{}, +{}) holds {}", a.index, a.offset, a.size,
                          held(c.world, a.index, a.offset, a.size));
  return c;
}

GroupWant want_group(const Case& c, size_t i) {
  if (c.call != CallSpoil::kNone) return {.alone = true};
  switch (c.read) {
    case ReadSpoil::kNone:
    case ReadSpoil::kAbsurdFields:
      return {.exact = true};
    case ReadSpoil::kNoResults:
    case ReadSpoil::kDuplicated:
    case ReadSpoil::kExtraResults:
      return {.alone = true};
    case ReadSpoil::kPayloadCut:
    case ReadSpoil::kPayloadTrailing:  // where each range's bytes start is in doubt
      return {.alone = true};
    default:
      break;
  }
  if (i != c.slot && !(c.read == ReadSpoil::kSwapped && i == c.other)) return {.alone = true, .exact = true};
  switch (c.read) {
    case ReadSpoil::kSwapped:
      return {.alone = true, .swapped_with = i == c.slot ? c.other : c.slot};
    case ReadSpoil::kNotFoundWithBytes:
      return {.hole = true};
    case ReadSpoil::kRangeCode:
    case ReadSpoil::kErrorWithBytes:
      return code_from_wire(c.code) == Code::kNotFound ? GroupWant{.hole = true} : GroupWant{.alone = true};
    default:
      return {.alone = true};
  }
}

// Checks range i's outcome against what it may end as.
void check_grouped(const Case& c, const std::vector<ReadAsk>& asks, size_t i, const GroupedRead& g) {
  const GroupWant want = want_group(c, i);
  const std::string what = fmt::format("range {}: {}", i, c.text);
  if (g.retry_alone) {
    EXPECT_TRUE(want.alone) << "left to read alone: " << what;
    return;
  }
  ASSERT_TRUE(g.result.has_value()) << "neither read nor left to read alone: " << g.result.error() << "\n  " << what;
  const uint32_t n = *g.result;
  if (want.hole && n == 0) return;
  if (want.swapped_with) {
    const ReadAsk& o = asks[*want.swapped_with];
    if (c.slot == c.other) {  // swapped with itself: its own answer
      EXPECT_EQ(n, held(c.world, asks[i].index, asks[i].offset, asks[i].size)) << what;
      return;
    }
    EXPECT_EQ(n, held(c.world, o.index, o.offset, o.size)) << "not the answer the reply gave it: " << what;
    EXPECT_TRUE(std::ranges::equal(g.dst.first(std::min<size_t>(n, g.dst.size())), truth(o.index, o.offset, n)))
        << "not the bytes the reply gave it: " << what;
    return;
  }
  ASSERT_TRUE(want.exact) << "returned " << n << " bytes as good: " << what;
  const ReadAsk& a = asks[i];
  ASSERT_EQ(n, held(c.world, a.index, a.offset, a.size)) << what;
  EXPECT_TRUE(std::ranges::equal(g.dst.first(n), truth(a.index, a.offset, n))) << "wrong bytes: " << what;
}

TEST_F(HostileReplyTest, GroupedReadsReturnTheChunksBytesOrAreLeftToReadAlone) {
  Hostile h(seed_ ^ 2);
  for (int round = 0; round < kGroups; ++round) {
    std::vector<ReadAsk> asks;
    auto c = serve(draw_group_case(h, asks));
    std::vector<size_t> sizes;
    for (const auto& a : asks) sizes.push_back(a.size);
    Guarded buf(sizes);
    std::vector<GroupedRead> reads;
    for (size_t i = 0; i < asks.size(); ++i)
      reads.push_back(
          GroupedRead{address(asks[i].index), asks[i].offset, buf.dst(i), error(Code::kInternal, "not read"), false});
    auto groups = chunks_.group_reads(reads);
    ASSERT_EQ(groups.size(), 1u) << c->text;
    std::vector<size_t> all(asks.size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = i;
    ASSERT_EQ(groups[0], all) << "the ranges in another order: " << c->text;
    auto r = bounded(chunks_.read_group(reads, groups[0]), c->text);
    note("read_group spoils", c->call == CallSpoil::kNone ? name(c->read) : name(c->call));
    ASSERT_TRUE(r.has_value()) << r.error() << "\n  " << c->text;
    if (auto o = buf.overrun()) ADD_FAILURE() << "written past the caller's buffer: " << *o << "\n  " << c->text;
    for (size_t i = 0; i < reads.size(); ++i) {
      note("read_group", reads[i].retry_alone ? "alone" : reads[i].result ? "ok" : "unset");
      check_grouped(*c, asks, i, reads[i]);
    }
  }
}

// ---- Writes, truncates, removes ----

enum class UpdateOp { kWrite, kTruncate, kRemove };

const char* name(UpdateOp op) {
  switch (op) {
    case UpdateOp::kWrite:
      return "write";
    case UpdateOp::kTruncate:
      return "truncate";
    case UpdateOp::kRemove:
      return "remove";
  }
  return "?";
}

// Another message for an update's reply (both parse as one: WriteReply's
// fields take ListChunksReply's `more`; RemoveReply has none).
std::string update_wrong_type(Hostile& h) {
  if (h.chance(50)) {
    pb::ListChunksReply l;
    l.add_chunks()->set_length(h.u32());
    l.set_more(true);
    return l.SerializeAsString();
  }
  pb::BatchReadReply b;
  b.add_results()->set_code(h.u32());
  return b.SerializeAsString();
}

// The code an update must fail with; nullopt: it must succeed.
std::optional<Code> want_update(const Case& c, UpdateOp op, uint32_t truncate_length) {
  switch (c.call) {
    case CallSpoil::kCode: {
      const Code code = code_from_wire(c.code);
      // The head's kNotFound: the chunk to truncate or remove is already gone.
      if (code == Code::kNotFound && op != UpdateOp::kWrite) return std::nullopt;
      return after_retries(code);
    }
    case CallSpoil::kUndefinedCode:
      return Code::kInternal;
    case CallSpoil::kUnparsable:
      return Code::kProtocol;
    case CallSpoil::kLate:
      return Code::kIoError;
    case CallSpoil::kWrongType:  // parses as a WriteReply of version 0, which no head answers
      return op == UpdateOp::kRemove ? std::nullopt : std::optional(Code::kProtocol);
    case CallSpoil::kNone:
      break;
  }
  if (op == UpdateOp::kRemove) return std::nullopt;  // RemoveReply has no field
  if (op == UpdateOp::kTruncate && truncate_length > kChunkBytes) return Code::kInvalidArgument;
  // A length past the chunk size.
  if (c.update == UpdateSpoil::kAbsurdFields) return Code::kProtocol;
  return std::nullopt;
}

TEST_F(HostileReplyTest, UpdatesSucceedOrFailClearlyWhateverTheirReplySays) {
  Hostile h(seed_ ^ 3);
  for (int i = 0; i < kUpdates; ++i) {
    Case c;
    const auto op = h.one_of<UpdateOp>({UpdateOp::kWrite, UpdateOp::kTruncate, UpdateOp::kRemove});
    const uint64_t index = h.below(kReadChunks);
    const uint32_t offset = static_cast<uint32_t>(h.below(kChunkBytes));
    const auto data = truth(index, offset, std::min<uint64_t>(kChunkBytes - offset, h.between(0, 16384)));
    const uint32_t length = h.one_of<uint32_t>({0, offset, kChunkBytes, UINT32_MAX});
    c.call = h.call_spoil(40);
    h.fill_call(c, update_wrong_type(h));
    c.update = h.one_of<UpdateSpoil>({UpdateSpoil::kNone, UpdateSpoil::kAbsurdFields, UpdateSpoil::kWithPayload});
    c.big = h.absurd64();
    c.wide = h.past_chunk();
    c.k = h.bytes_over();
    c.text = fmt::format("{} of chunk {} (offset {}, {} bytes; length {}): {} update spoil {} (big {} wide {} k {})",
                         name(op), index, offset, data.size(), length, describe_call(c), static_cast<int>(c.update),
                         c.big, c.wide, c.k);
    auto shared = serve(std::move(c));
    Task<Result<void>> task = op == UpdateOp::kWrite      ? chunks_.write(address(index), offset, data)
                              : op == UpdateOp::kTruncate ? chunks_.truncate(address(index), length)
                                                          : chunks_.remove(address(index));
    auto r = bounded(std::move(task), shared->text);
    note(name(op), r ? "ok" : code_label(r.error()));
    const auto want = want_update(*shared, op, length);
    if (!want) {
      EXPECT_TRUE(r.has_value()) << r.error() << "\n  " << shared->text;
      continue;
    }
    ASSERT_FALSE(r.has_value()) << "succeeded: " << shared->text;
    EXPECT_EQ(r.error().code(), *want) << r.error() << "\n  " << shared->text;
    expect_clear(r.error(), *shared);
  }
}

// ---- RemoveRange ----

// Another message for RemoveRange's reply: parses as an empty one (nothing removed, no more).
std::string range_wrong_type(Hostile& h) {
  pb::BatchReadReply b;
  for (size_t i = h.between(1, 3); i > 0; --i) b.add_results()->set_length(h.u32());
  return b.SerializeAsString();
}

// Pages of RemoveRange from `first`: cursors strictly increasing.
void draw_pages(Hostile& h, Case& c, uint64_t first) {
  c.cursors = {first};
  for (size_t pages = h.between(1, 5); c.cursors.size() < pages;) {
    const uint64_t last = c.cursors.back();
    if (last == UINT64_MAX) break;
    const uint64_t step =
        c.range == RangeSpoil::kFarCursor && h.chance(50) ? h.between(1, UINT64_MAX - last) : h.between(1, 300);
    if (step > UINT64_MAX - last) break;
    c.cursors.push_back(last + step);
  }
  for (size_t i = 0; i < c.cursors.size(); ++i)
    c.removed.push_back(c.range == RangeSpoil::kAbsurdCounts ? h.absurd64() : h.between(0, 256));
}

// The code a call must end with when every attempt is answered as `c` says
// (retried at the head, as updates are).
Code want_call_error(const Case& c) {
  switch (c.call) {
    case CallSpoil::kCode:
      return after_retries(code_from_wire(c.code));
    case CallSpoil::kUndefinedCode:
      return Code::kInternal;
    case CallSpoil::kUnparsable:
      return Code::kProtocol;
    default:
      return Code::kIoError;  // kLate: a timeout, retried until the retry time is up
  }
}

// `stopped`: the caller's stop flag set from the start (read between pages).
void check_range_removal(const Case& c, bool stopped, uint64_t first, const Result<uint64_t>& r,
                         const std::vector<uint64_t>& asked) {
  for (uint64_t a : asked) EXPECT_GE(a, first) << "asked to remove chunks below the caller's first: " << c.text;
  if (c.call == CallSpoil::kWrongType) {  // an empty reply: nothing removed, no more
    ASSERT_TRUE(r.has_value()) << r.error() << "\n  " << c.text;
    EXPECT_EQ(*r, 0u) << c.text;
    return;
  }
  if (c.call != CallSpoil::kNone) {
    ASSERT_FALSE(r.has_value()) << "succeeded: " << c.text;
    EXPECT_EQ(r.error().code(), want_call_error(c)) << r.error() << "\n  " << c.text;
    expect_clear(r.error(), c);
    return;
  }
  if (stopped && c.cursors.size() > 1) {
    ASSERT_FALSE(r.has_value()) << "not stopped: " << c.text;
    EXPECT_EQ(r.error().code(), Code::kCancelled) << r.error() << "\n  " << c.text;
    EXPECT_EQ(asked, std::vector<uint64_t>{first}) << c.text;
    return;
  }
  uint64_t sum = 0;  // saturates, as the client's does
  for (uint64_t n : c.removed) sum = n > UINT64_MAX - sum ? UINT64_MAX : sum + n;
  ASSERT_TRUE(r.has_value()) << r.error() << "\n  " << c.text;
  EXPECT_EQ(*r, sum) << c.text;
  EXPECT_EQ(asked, c.cursors) << c.text;
}

TEST_F(HostileReplyTest, RangeRemovalsFollowTheirPagesOrFailClearly) {
  Hostile h(seed_ ^ 4);
  for (int i = 0; i < kRangeRemovals; ++i) {
    Case c;
    const uint64_t first = h.one_of<uint64_t>({0, 1, 5, h.between(0, 1000), UINT64_MAX - 3});
    c.call = h.call_spoil(40);
    h.fill_call(c, range_wrong_type(h));
    c.range = h.one_of<RangeSpoil>({RangeSpoil::kNone, RangeSpoil::kAbsurdCounts, RangeSpoil::kFarCursor});
    draw_pages(h, c, first);
    const bool stopped = h.chance(15);
    std::atomic<bool> stop{stopped};
    c.text =
        fmt::format("remove chunks {}..{}: {} pages {} removed {} (spoil {})", first, stopped ? " (stopped)" : "",
                    describe_call(c), fmt::join(c.cursors, ","), fmt::join(c.removed, ","), static_cast<int>(c.range));
    auto shared = serve(std::move(c));
    auto r = bounded(chunks_.remove_from(kIno, chain_, first, stopped || h.chance(50) ? &stop : nullptr), shared->text);
    note("remove_from", r ? "ok" : code_label(r.error()));
    check_range_removal(*shared, stopped, first, r, storage_.range_requests());
  }
}

// ---- Listings (data_end) ----

// Another message for ListChunks' reply: parses as an empty listing.
std::string list_wrong_type(Hostile& h) {
  pb::WriteReply w;
  w.set_version(h.absurd64() | 1);
  w.set_chunk_crc32c(h.u32() | 1);
  return w.SerializeAsString();
}

// Not drawn here (fixed; sent by the tests at the end of this file): any failure of a listing (an error status, an
// unparsable body, a reply after the timeout, also a target whose address
// does not parse): data_end() crashes the process (free(): double free
// detected in tcache 2, in ChunkIo::retrying's Status destructor). In
// data_end's round, `auto r = ep ? co_await data_end_at(...) : Result<T>(...)`
// (chunk_io.cc): g++ 12 destroys the result of a co_await inside ?: twice
// (a three-line asio program with the same line aborts the same way). Only
// replies that parse as a ListChunksReply are sent here.
CallSpoil draw_list_call_spoil(Hostile& h) { return h.chance(15) ? CallSpoil::kWrongType : CallSpoil::kNone; }

TEST_F(HostileReplyTest, ListingsGiveTheDataEnd) {
  Hostile h(seed_ ^ 5);
  for (int i = 0; i < kListings; ++i) {
    Case c;
    c.world = h.world(kListChunks);
    uint64_t first = h.below(kListChunks + 2);
    uint64_t end = h.below(kListChunks + 4);
    if (first > end) std::swap(first, end);
    c.call = draw_list_call_spoil(h);
    h.fill_call(c, list_wrong_type(h));
    c.list = h.one_of<ListSpoil>(
        {ListSpoil::kNone, ListSpoil::kAbsurdFields, ListSpoil::kOtherInodeAfter, ListSpoil::kPastEnd});
    c.page = static_cast<uint32_t>(h.between(1, 6));
    c.big = h.absurd64();
    c.wide = h.u32();
    // Another message parses as an empty listing: nothing there.
    const auto want = c.call == CallSpoil::kNone ? data_end_of(c.world, first, end) : std::nullopt;
    c.text = fmt::format("data end of chunks [{}, {}) (want {}): {} list spoil {} page {}", first, end,
                         want ? fmt::format("{}", *want) : "none", describe_call(c), static_cast<int>(c.list), c.page);
    auto shared = serve(std::move(c));
    auto r = bounded(chunks_.data_end(kIno, chain_, kChunkBytes, first, end), shared->text);
    note("data_end", r ? "ok" : code_label(r.error()));
    ASSERT_TRUE(r.has_value()) << r.error() << "\n  " << shared->text;
    EXPECT_EQ(*r, want) << shared->text;
  }
}

// The bodies sent as "unparsable" fail to parse as every reply the client
// reads, and those sent as another message parse as the one they stand in
// for (so the expectations above hold for what is sent).
TEST(HostileReplyBodies, UnparsableOnesFailAndWrongTypesParse) {
  Hostile h(hostile_seed() ^ 6);
  for (int i = 0; i < 200; ++i) {
    const std::string body = h.unparsable();
    EXPECT_FALSE(pb::BatchReadReply().ParseFromString(body)) << i;
    EXPECT_FALSE(pb::WriteReply().ParseFromString(body)) << i;
    EXPECT_FALSE(pb::RemoveReply().ParseFromString(body)) << i;
    EXPECT_FALSE(pb::RemoveRangeReply().ParseFromString(body)) << i;
    EXPECT_FALSE(pb::ListChunksReply().ParseFromString(body)) << i;
    pb::BatchReadReply read;
    ASSERT_TRUE(read.ParseFromString(read_wrong_type(h)));
    for (const auto& r : read.results()) {
      EXPECT_EQ(r.code(), 0u);
      EXPECT_GT(r.length(), 0u) << "a result of no bytes needs no payload";
    }
    pb::WriteReply update;
    EXPECT_TRUE(update.ParseFromString(update_wrong_type(h)));
    EXPECT_EQ(update.version(), 0u) << "refused for version 0 (want_update)";
    EXPECT_TRUE(pb::RemoveReply().ParseFromString(update_wrong_type(h)));
    pb::RemoveRangeReply range;
    ASSERT_TRUE(range.ParseFromString(range_wrong_type(h)));
    EXPECT_EQ(range.removed(), 0u);
    EXPECT_FALSE(range.more());
    pb::ListChunksReply list;
    ASSERT_TRUE(list.ParseFromString(list_wrong_type(h)));
    EXPECT_EQ(list.chunks_size(), 0);
    EXPECT_FALSE(list.more());
  }
}


// ---- Faults this test found, each answered as the first version of the
// client took it (now refused; see the KNOWN BUG notes of earlier sessions'
// commits): a listing or range removal that does not move on, entries out of
// order or past the chunk size, a failed listing, and reads of other than the
// bytes the chunk holds.

pb::ChunkMeta* add_listed(pb::ListChunksReply& r, uint64_t ino, uint64_t index, uint32_t length) {
  pb::ChunkMeta* m = r.add_chunks();
  m->mutable_chunk()->set_inode(ino);
  m->mutable_chunk()->set_index(index);
  m->set_length(length);
  return m;
}

TEST_F(HostileReplyTest, ListingsThatDoNotMoveOnOrBreakTheirOrderAreRefused) {
  using Page = std::function<void(pb::ListChunksReply&)>;
  const std::vector<std::pair<const char*, Page>> pages = {
      {"the same page for ever",
       [](auto& r) {
         add_listed(r, kIno, 4, 100);
         r.set_more(true);
       }},
      {"unsorted", [](auto& r) { add_listed(r, kIno, 5, 100), add_listed(r, kIno, 3, 100); }},
      {"below the range", [](auto& r) { add_listed(r, kIno, 2, 100), add_listed(r, kIno, 3, 100); }},
      {"past the chunk size", [](auto& r) { add_listed(r, kIno, 4, UINT32_MAX); }},
      {"a smaller inode first", [](auto& r) { add_listed(r, kIno - 1, 9, 100), add_listed(r, kIno, 5, 100); }},
      {"an empty page with more", [](auto& r) { r.set_more(true); }},
  };
  for (const auto& [what, fill] : pages) {
    SCOPED_TRACE(what);
    Case c;
    c.list_fn = [fill = fill](const pb::ListChunksRequest&) -> Result<pb::ListChunksReply> {
      pb::ListChunksReply r;
      fill(r);
      return r;
    };
    serve(std::move(c));
    auto r = bounded(chunks_.data_end(kIno, chain_, kChunkBytes, 4, 8), what);
    ASSERT_FALSE(r.has_value()) << "taken as the data end: " << (*r ? std::to_string(**r) : "none");
    EXPECT_EQ(r.error().code(), Code::kProtocol) << r.error();
  }
}

// g++ 12 destroyed the result of `ep ? co_await ... : ...` twice: the first
// failed listing aborted the process (double free).
TEST_F(HostileReplyTest, AFailedListingIsAnErrorNotACrash) {
  for (Code code : {Code::kNotFound, Code::kUnavailable, Code::kNotSupported}) {
    SCOPED_TRACE(std::string(code_name(code)));
    Case c;
    c.list_fn = [code](const pb::ListChunksRequest&) -> Result<pb::ListChunksReply> {
      return error(code, "test: refused");
    };
    serve(std::move(c));
    auto r = bounded(chunks_.data_end(kIno, chain_, kChunkBytes, 0, 8), "a refused listing");
    ASSERT_FALSE(r.has_value());
  }
}

TEST_F(HostileReplyTest, RangeRemovalsWhoseCursorDoesNotMoveOnAreRefused) {
  for (uint64_t next : {uint64_t{5}, uint64_t{0}, uint64_t{4}}) {  // stays, goes back to 0, goes back by one
    SCOPED_TRACE(next);
    Case c;
    std::atomic<int> asked{0};
    c.range_fn = [next, &asked](const pb::RemoveRangeRequest& q) -> Result<pb::RemoveRangeReply> {
      EXPECT_GE(q.first_index(), 5u) << "asked to remove chunks before the caller's first";
      ++asked;
      pb::RemoveRangeReply r;
      r.set_more(true);
      r.set_next_index(next);
      return r;
    };
    serve(std::move(c));
    auto r = bounded(chunks_.remove_from(kIno, chain_, 5, nullptr), "a cursor that does not move on");
    ASSERT_FALSE(r.has_value()) << "removed " << *r;
    EXPECT_EQ(r.error().code(), Code::kProtocol) << r.error();
    EXPECT_EQ(asked.load(), 1);
  }
}

// A read answered with fewer bytes than its own chunk_length says the chunk
// holds in the range (the rest would read as a hole), or with bytes past the
// chunk's end: refused, in every read path, with the CRC of what was sent right.
TEST_F(HostileReplyTest, ReadsOfOtherThanTheBytesTheChunkHoldsAreRefused) {
  struct Lie {
    const char* what;
    uint32_t sent, chunk_length;
  };
  for (const Lie& lie : {Lie{"fewer than held", 100, 65536}, Lie{"past the chunk's end", 4096, 1000}}) {
    SCOPED_TRACE(lie.what);
    Case c;
    c.read_fn = [lie](const pb::BatchReadRequest& q) {
      pb::BatchReadReply reply;
      std::vector<std::byte> payload;
      for (const auto& range : q.ranges()) {
        auto bytes = truth(range.chunk().index(), range.offset(), lie.sent);
        auto* rr = reply.add_results();
        rr->set_length(lie.sent);
        rr->set_crc32c(crc32c(bytes));
        rr->set_chunk_length(lie.chunk_length);
        rr->set_version(3);
        payload.insert(payload.end(), bytes.begin(), bytes.end());
      }
      return std::pair{reply, payload};
    };
    serve(std::move(c));
    std::vector<std::byte> dst(4096);
    for (Entry e : {Entry::kRead, Entry::kReadOnce, Entry::kReadBlocking}) {
      auto r = read_via(e, address(1), 0, dst, lie.what);
      ASSERT_FALSE(r.has_value()) << name(e) << ": " << *r << " bytes taken";
      EXPECT_EQ(r.error().code(), Code::kProtocol) << name(e) << ": " << r.error();
    }
    std::vector<GroupedRead> group(2);
    for (size_t i = 0; i < group.size(); ++i) group[i] = {.chunk = address(i + 1), .offset = 0, .dst = dst};
    (void)bounded(chunks_.read_group(group, {0, 1}), "a grouped read");
    for (const auto& g : group) EXPECT_TRUE(g.retry_alone) << "a grouped read took " << (g.result ? *g.result : 0u);
  }
}

// A grouped read whose payload has bytes past the last range's (no storage
// server sends them: batch_read.cc's payload is the ranges' bytes): every
// range is read alone, as for any reply broken as a whole. Each range's
// length and CRC were right, and read_group took them as good.
TEST_F(HostileReplyTest, GroupedReadsWithBytesPastTheLastRangesAreReadAlone) {
  const World world = {{1, kChunkBytes}, {2, 3000}};
  const std::vector<ReadAsk> asks = {{1, 0, 4096}, {2, 100, 4096}, {5, 0, 4096}};  // chunk 5: a hole
  for (uint64_t trailing : {uint64_t{0}, uint64_t{1}, uint64_t{4096}}) {
    SCOPED_TRACE(fmt::format("{} bytes past the last range's", trailing));
    Case c;
    c.read_fn = [world, trailing](const pb::BatchReadRequest& q) {
      std::pair<pb::BatchReadReply, std::vector<std::byte>> out;
      for (const auto& r : q.ranges()) {
        Piece p = honest_piece(world, r);
        *out.first.add_results() = p.result;
        out.second.insert(out.second.end(), p.bytes.begin(), p.bytes.end());
      }
      out.second.resize(out.second.size() + trailing, std::byte{0x5a});
      return out;
    };
    serve(std::move(c));
    Guarded buf({4096, 4096, 4096});
    std::vector<GroupedRead> group;
    for (size_t i = 0; i < asks.size(); ++i)
      group.push_back({.chunk = address(asks[i].index), .offset = asks[i].offset, .dst = buf.dst(i)});
    ASSERT_TRUE(bounded(chunks_.read_group(group, {0, 1, 2}), "a grouped read").has_value());
    EXPECT_FALSE(buf.overrun());
    for (size_t i = 0; i < group.size(); ++i) {
      const GroupedRead& g = group[i];
      const uint32_t n = held(world, asks[i].index, asks[i].offset, asks[i].size);
      if (trailing > 0) {
        EXPECT_TRUE(g.retry_alone) << "range " << i << " taken: " << (g.result ? *g.result : 0u) << " bytes";
        continue;
      }
      ASSERT_FALSE(g.retry_alone) << i;
      ASSERT_TRUE(g.result.has_value()) << g.result.error();
      EXPECT_EQ(*g.result, n) << i;
      EXPECT_TRUE(std::ranges::equal(g.dst.first(n), truth(asks[i].index, asks[i].offset, n))) << i;
    }
  }
}

pb::WriteReply write_reply(uint64_t version, uint32_t length, uint32_t crc) {
  pb::WriteReply w;
  w.set_version(version);
  w.set_chunk_length(length);
  w.set_chunk_crc32c(crc);
  return w;
}

// A Write or Truncate sent once, answered `reply`.
struct UpdateLie {
  const char* what;
  UpdateOp op;
  uint32_t offset;  // write: where; truncate: the length
  pb::WriteReply reply;
  bool good;        // an answer a head may send: the update succeeds
};

Result<void> HostileReplyTest::send_update(const UpdateLie& lie, std::span<const std::byte> data) {
  return bounded(lie.op == UpdateOp::kWrite ? chunks_.write(address(1), lie.offset, data)
                                            : chunks_.truncate(address(1), lie.offset),
                 lie.what);
}

// A good lie's update succeeds; any other fails, kProtocol.
void expect_taken_only_if_good(const UpdateLie& lie, const Result<void>& r) {
  if (lie.good) {
    EXPECT_TRUE(r.has_value()) << r.error();
  } else if (r) {
    ADD_FAILURE() << "taken as a success";
  } else {
    EXPECT_EQ(r.error().code(), Code::kProtocol) << r.error();
  }
}

// The fields of an update's success against what storage guarantees of a
// first send (ChunkIo::check_update_reply): a version (from 1), a length
// within the chunk size, at least a write's end, a truncate's own; where the
// reply's length says the chunk is exactly the bytes written from offset 0
// (or empty), their CRC. Each was taken as a success before.
TEST_F(HostileReplyTest, UpdateRepliesNoHeadSendsAreProtocolErrors) {
  const auto data = truth(1, 0, 1000);
  const uint32_t crc = crc32c(data);
  const std::vector<UpdateLie> lies = {
      {"write: version 0", UpdateOp::kWrite, 100, write_reply(0, 1100, 1), false},
      {"write: a length short of its end", UpdateOp::kWrite, 100, write_reply(3, 500, 1), false},
      {"write: a length past the chunk size", UpdateOp::kWrite, 100, write_reply(3, kChunkBytes + 1, 1), false},
      {"write from 0: another CRC", UpdateOp::kWrite, 0, write_reply(3, 1000, crc ^ 1), false},
      {"truncate: version 0", UpdateOp::kTruncate, 1000, write_reply(0, 1000, 1), false},
      {"truncate: another length", UpdateOp::kTruncate, 1000, write_reply(3, 2000, 1), false},
      {"truncate to 0: a CRC of bytes", UpdateOp::kTruncate, 0, write_reply(3, 0, 0x1234), false},
      // Answers a head may send: a chunk longer than the write, bytes before
      // the write's offset, a truncate's content: their CRC is not the client's to know.
      {"write from 0 of a longer chunk", UpdateOp::kWrite, 0, write_reply(3, 5000, 1), true},
      {"write from 0: its bytes", UpdateOp::kWrite, 0, write_reply(3, 1000, crc), true},
      {"write at 100", UpdateOp::kWrite, 100, write_reply(UINT64_MAX, kChunkBytes, 1), true},
      {"truncate", UpdateOp::kTruncate, 1000, write_reply(1, 1000, 1), true},
      {"truncate to 0", UpdateOp::kTruncate, 0, write_reply(2, 0, 0), true},
  };
  for (const UpdateLie& lie : lies) {
    SCOPED_TRACE(lie.what);
    Case c;
    c.update_fn = [reply = lie.reply](uint32_t) -> Result<pb::WriteReply> { return reply; };
    serve(std::move(c));
    expect_taken_only_if_good(lie, send_update(lie, data));
  }
}

// A retry may be answered with the outcome a head recorded for the first
// send, which a member whose chunk was replaced since (a resync) records as
// the replacement's: later updates of other writers in it, maybe a length
// short of the write's end or other than the truncate's. A success still,
// if within the chunk size.
TEST_F(HostileReplyTest, RetriesTakeTheOutcomeTheHeadRecorded) {
  const auto data = truth(1, 0, 1000);
  for (const UpdateLie& lie : {UpdateLie{"write", UpdateOp::kWrite, 100, write_reply(12, 50, 1), true},
                               UpdateLie{"truncate", UpdateOp::kTruncate, 1000, write_reply(12, 3000, 1), true},
                               UpdateLie{"past the chunk size", UpdateOp::kWrite, 100,
                                         write_reply(12, kChunkBytes + 1, 1), false},
                               UpdateLie{"version 0", UpdateOp::kWrite, 100, write_reply(0, 1100, 1), false}}) {
    SCOPED_TRACE(lie.what);
    Case c;
    std::array<std::atomic<int>, 3> sends{};  // of attempt 0, 1 and more
    c.update_fn = [reply = lie.reply, &sends](uint32_t attempt) -> Result<pb::WriteReply> {
      ++sends[std::min<uint32_t>(attempt, 2)];
      if (attempt == 0) return error(Code::kUnavailable, "test: the first send's answer was lost");
      return reply;
    };
    serve(std::move(c));
    auto r = send_update(lie, data);
    EXPECT_EQ(sends[0].load(), 1);
    EXPECT_EQ(sends[1].load(), 1);
    EXPECT_EQ(sends[2].load(), 0);
    expect_taken_only_if_good(lie, r);
  }
}

// A range's code no weft::Code has is kInternal, its value in the message.
TEST_F(HostileReplyTest, AnUndefinedRangeCodeIsNamedInTheError) {
  for (uint32_t code : {uint32_t{4242}, UINT32_MAX}) {
    SCOPED_TRACE(code);
    ASSERT_TRUE(undefined(code));
    Case c;
    c.read_fn = [code](const pb::BatchReadRequest& q) {
      std::pair<pb::BatchReadReply, std::vector<std::byte>> out;
      for (int i = 0; i < q.ranges_size(); ++i) {
        auto* rr = out.first.add_results();
        rr->set_code(code);
        rr->set_message("hostile");
      }
      return out;
    };
    serve(std::move(c));
    std::vector<std::byte> dst(4096);
    for (Entry e : {Entry::kRead, Entry::kReadOnce, Entry::kReadBlocking}) {
      auto r = read_via(e, address(1), 0, dst, "an undefined range code");
      ASSERT_FALSE(r.has_value()) << name(e);
      EXPECT_EQ(r.error().code(), Code::kInternal) << name(e) << ": " << r.error();
      EXPECT_NE(r.error().message().find(fmt::format("undefined code {}", code)), std::string::npos)
          << name(e) << ": " << r.error();
    }
  }
}

}  // namespace
}  // namespace weft::client
