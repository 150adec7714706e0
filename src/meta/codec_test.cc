#include "meta/codec.h"

#include <gtest/gtest.h>

#include "common/random.h"

namespace weft::meta {
namespace {

Inode sample_inode() {
  Inode n;
  n.ino = 0x0102030405060708;
  n.type = InodeType::kSymlink;
  n.mode = 04755;
  n.uid = 1000;
  n.gid = 100;
  n.nlink = 3;
  n.size = 1ull << 40;
  n.atime_ns = -5;
  n.mtime_ns = 1'700'000'000'000'000'000;
  n.ctime_ns = 42;
  n.parent = 7;
  n.layout = {1 << 20, 16, 2, 5, 0xdeadbeefcafef00d};
  n.symlink_target = "../some/where";
  return n;
}

TEST(Codec, InodeRoundTrips) {
  Inode n = sample_inode();
  auto back = decode_inode(encode_inode(n));
  ASSERT_TRUE(back.has_value()) << back.error();
  EXPECT_EQ(*back, n);
}

// A device keeps its number; other types store none (their encoding is the
// one from before special files, so stored inodes read back unchanged).
TEST(Codec, SpecialInodesRoundTrip) {
  for (InodeType t : {InodeType::kCharDevice, InodeType::kBlockDevice}) {
    Inode n = sample_inode();
    n.type = t;
    n.symlink_target.clear();
    n.rdev = 0xfedcba9876543210;
    auto back = decode_inode(encode_inode(n));
    ASSERT_TRUE(back.has_value()) << back.error();
    EXPECT_EQ(*back, n);
    std::string bytes = encode_inode(n);
    for (size_t k = 0; k < bytes.size(); ++k) EXPECT_FALSE(decode_inode(bytes.substr(0, k)).has_value());
  }
  for (InodeType t : {InodeType::kFifo, InodeType::kSocket, InodeType::kFile}) {
    Inode n = sample_inode();
    n.type = t;
    n.symlink_target.clear();
    Inode with_rdev = n;
    with_rdev.rdev = 5;
    EXPECT_EQ(encode_inode(with_rdev), encode_inode(n));
    EXPECT_EQ(*decode_inode(encode_inode(n)), n);
    EXPECT_EQ(*decode_dentry(encode_dentry({3, t})), (DentryValue{3, t}));
  }
}

TEST(Codec, OtherValuesRoundTrip) {
  DentryValue d{99, InodeType::kDirectory};
  EXPECT_EQ(*decode_dentry(encode_dentry(d)), d);
  DirStat s{1, 2, -3};
  EXPECT_EQ(*decode_dir_stat(encode_dir_stat(s)), s);
  SessionValue sv{7, 8};
  EXPECT_EQ(*decode_session(encode_session(sv)), sv);
  EXPECT_EQ(encode_session(sv).size(), 17u) << "a session never cut is stored as before cuts existed";
  SessionValue answers{7, 8, true};
  EXPECT_EQ(*decode_session(encode_session(answers)), answers);
  SessionValue cut{7, 8, true, 3, 2, 4096};
  EXPECT_EQ(*decode_session(encode_session(cut)), cut);
  EXPECT_TRUE(cut.cut_pending());
  std::string bad = encode_session(SessionValue{7, 8, true, 1, 0, 10});
  bad[26] = 2;  // acked_gen 2 > cut_gen 1 (after the format byte and the flags)
  EXPECT_FALSE(decode_session(bad).has_value());
  bad = encode_session(cut);
  bad[17] = 4;  // an unknown flag
  EXPECT_FALSE(decode_session(bad).has_value());
  for (SessionValue abandoned : {SessionValue{7, 8, false, 0, 0, 0, true}, SessionValue{7, 8, true, 3, 2, 4096, true}}) {
    auto back = decode_session(encode_session(abandoned));
    ASSERT_TRUE(back.has_value()) << back.error();
    EXPECT_EQ(*back, abandoned);
  }
  EXPECT_FALSE(decode_session(encode_session(cut).substr(0, 20)).has_value()) << "a cut record cut short";
  // Never cut, with a cut length (no meta writes it): the length means
  // nothing and is not kept, so the value read is the value written back
  // (found by fuzz/meta_codec_fuzz.cc).
  std::string stray = encode_session(SessionValue{7, 8, true, 0, 0, 0});
  stray[stray.size() - 1] = 5;  // the last byte of cut_length
  auto read = decode_session(stray);
  ASSERT_TRUE(read.has_value()) << read.error();
  EXPECT_EQ(read->cut_length, 0u);
  EXPECT_EQ(*decode_session(encode_session(*read)), *read);
  EXPECT_EQ(*decode_i64(encode_i64(-12345)), -12345);
  RequestRecord rec;
  rec.code = Code::kExists;
  rec.message = "exists";
  rec.reply = reply_of(sample_inode(), 77);
  rec.time_ns = 9;
  rec.op = 4;
  auto r = decode_request(encode_request(rec));
  ASSERT_TRUE(r.has_value()) << r.error();
  EXPECT_EQ(r->op, 4);
  EXPECT_EQ(r->code, Code::kExists);
  EXPECT_EQ(r->message, "exists");
  EXPECT_TRUE(r->reply.has_inode);
  EXPECT_EQ(r->reply.inode, sample_inode());
  EXPECT_EQ(r->reply.session_id, 77u);
  EXPECT_EQ(r->reply.cut, SessionCut{});
  rec.reply.cut = SessionCut{5, 1000};  // a capped length report
  r = decode_request(encode_request(rec));
  ASSERT_TRUE(r.has_value()) << r.error();
  EXPECT_EQ(r->reply.cut, (SessionCut{5, 1000}));
  EXPECT_EQ(r->op, 4);
  EXPECT_FALSE(r->reply.existed);
  rec.reply = reply_of(sample_inode(), 77);
  rec.reply.existed = true;  // a create that opened an existing file
  r = decode_request(encode_request(rec));
  ASSERT_TRUE(r.has_value()) << r.error();
  EXPECT_TRUE(r->reply.existed);
  EXPECT_TRUE(r->reply.has_inode);
  EXPECT_EQ(r->reply.inode, sample_inode());
}

TEST(Codec, RequestRecordsKeepABoundedMessage) {
  RequestRecord rec;
  rec.code = Code::kIoError;
  // 'é' is two bytes: the cut at kRecordMessageBytesMax falls inside one.
  rec.message = "x";
  for (int i = 0; i < 40'000; ++i) rec.message += "\xc3\xa9";
  auto r = decode_request(encode_request(rec));
  ASSERT_TRUE(r.has_value()) << r.error();
  EXPECT_EQ(r->code, Code::kIoError);
  EXPECT_EQ(r->message.size(), kRecordMessageBytesMax - 1);
  EXPECT_EQ(r->message, rec.message.substr(0, kRecordMessageBytesMax - 1));
}

// The xattr presence is one byte after the fields, in inode records only:
// an inode stored before it reads as unknown, a byte other than none or
// some is corruption, and the retry table's replies leave it out (a
// replayed reply's inode reads as unknown: a mount then asks meta).
TEST(Codec, XattrPresenceFollowsTheInodeFields) {
  const Inode unknown = sample_inode();
  const std::string old_bytes = encode_inode(unknown);
  for (XattrPresence p : {XattrPresence::kNone, XattrPresence::kSome}) {
    Inode n = unknown;
    n.xattrs = p;
    const std::string bytes = encode_inode(n);
    EXPECT_EQ(bytes, old_bytes + static_cast<char>(p));
    EXPECT_EQ(*decode_inode(bytes), n);
    auto rec = decode_request(encode_request({Code::kOk, "m", reply_of(n), 1, 3}));
    ASSERT_TRUE(rec.has_value()) << rec.error();
    EXPECT_EQ(rec->reply.inode, unknown);
  }
  EXPECT_EQ(decode_inode(old_bytes)->xattrs, XattrPresence::kUnknown);
  for (char bad : {'\0', '\3', '\xff'})
    EXPECT_EQ(decode_inode(old_bytes + bad).error().code(), Code::kCorruption) << int(bad);
}

TEST(Codec, EveryTruncationIsCorruption) {
  std::string bytes = encode_inode(sample_inode());
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto r = decode_inode(std::string_view(bytes).substr(0, n));
    ASSERT_FALSE(r.has_value()) << "prefix of " << n << " bytes decoded";
    EXPECT_EQ(r.error().code(), Code::kCorruption);
  }
  EXPECT_EQ(decode_inode(bytes + "x").error().code(), Code::kCorruption);
  std::string rec = encode_request({Code::kOk, "m", reply_of(sample_inode()), 1, 3});
  // The last byte (the op) is optional: a record from before it ends there.
  for (size_t n = 0; n + 1 < rec.size(); ++n) EXPECT_FALSE(decode_request(rec.substr(0, n)).has_value());
  auto old_record = decode_request(rec.substr(0, rec.size() - 1));
  ASSERT_TRUE(old_record.has_value()) << old_record.error();
  EXPECT_EQ(old_record->op, 0);
  EXPECT_EQ(decode_request(rec + "x").error().code(), Code::kCorruption);
  std::string d = encode_dentry({1, InodeType::kFile});
  for (size_t n = 0; n < d.size(); ++n) EXPECT_FALSE(decode_dentry(d.substr(0, n)).has_value());
}

TEST(Codec, BadVersionTypeAndModeAreCorruption) {
  std::string bytes = encode_inode(sample_inode());
  std::string v = bytes;
  v[0] = 2;
  EXPECT_EQ(decode_inode(v).error().code(), Code::kCorruption);
  std::string t = bytes;
  t[9] = 9;  // type byte after version + ino
  EXPECT_EQ(decode_inode(t).error().code(), Code::kCorruption);
  std::string d = encode_dentry({1, InodeType::kFile});
  d[1] = 0;
  EXPECT_EQ(decode_dentry(d).error().code(), Code::kCorruption);
}

TEST(Codec, RandomGarbageNeverCrashes) {
  Xoshiro256 rng(1234);
  int decoded = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string g(rng.uniform(120), '\0');
    for (char& c : g) c = static_cast<char>(rng.next_u64());
    if (!g.empty() && rng.uniform(2)) g[0] = static_cast<char>(kFormatVersion);
    decoded += decode_inode(g).has_value() + decode_request(g).has_value() + decode_dir_stat(g).has_value() +
               decode_session(g).has_value() + decode_dentry(g).has_value();
  }
  SUCCEED() << decoded << " random buffers happened to decode";
}

TEST(Codec, KeysSortByParentThenName) {
  EXPECT_LT(key::dentry(1, "zzz"), key::dentry(2, "a"));
  EXPECT_LT(key::dentry(256, "a"), key::dentry(257, ""));
  EXPECT_LT(key::dentry(5, "a"), key::dentry(5, "b"));
  EXPECT_TRUE(key::dentry(5, "abc").starts_with(key::dentry_prefix(5)));
  EXPECT_EQ(*key::u64_at(key::inode(0x1122334455667788), 1), 0x1122334455667788u);
  EXPECT_FALSE(key::u64_at("I123", 1).has_value());
  EXPECT_EQ(key::prefix_end("D\x01"), "D\x02");
  EXPECT_EQ(key::prefix_end(std::string("D\x01\xff\xff")), "D\x02");
  EXPECT_EQ(key::prefix_end(std::string("\xff")), "");
  EXPECT_LT(key::dentry(5, std::string(255, '\xff')), key::prefix_end(key::dentry_prefix(5)));
}

}  // namespace
}  // namespace weft::meta
