// Round trips of every wire conversion (meta/proto_convert.h).
#include "meta/proto_convert.h"

#include <climits>

#include <gtest/gtest.h>

namespace weft::meta {
namespace {

template <class T, class P>
T round_trip(const T& v) {
  P p;
  to_proto(v, &p);
  std::string wire;
  EXPECT_TRUE(p.SerializeToString(&wire));
  P back;
  EXPECT_TRUE(back.ParseFromString(wire));
  return from_proto(back);
}

Inode sample_inode() {
  Inode i;
  i.ino = 42;
  i.type = InodeType::kSymlink;
  i.mode = 04755;
  i.uid = 1000;
  i.gid = 100;
  i.nlink = 3;
  i.size = uint64_t{1} << 40;
  i.atime_ns = -5;
  i.mtime_ns = 1'700'000'000'000'000'000;
  i.ctime_ns = INT64_MAX;
  i.parent = 7;
  i.layout = Layout{1 << 22, 8, 3, 5, 0xdeadbeefcafeULL};
  i.symlink_target = std::string("a/b\0c", 5);
  return i;
}

// readdir sizes its pages with kDirEntryFixedBytesMax: every field but the
// name and the symlink target at its widest must fit in it.
TEST(ProtoConvert, DirEntryFixedBytesBoundTheEncoding) {
  Inode widest;
  widest.ino = widest.parent = UINT64_MAX;
  widest.size = UINT64_MAX;
  widest.rdev = UINT64_MAX;  // only devices carry one, but every field at its widest
  widest.xattrs = XattrPresence::kSome;
  widest.type = InodeType::kSymlink;
  widest.mode = widest.uid = widest.gid = widest.nlink = UINT32_MAX;
  widest.atime_ns = widest.mtime_ns = widest.ctime_ns = INT64_MIN;
  widest.layout = Layout{UINT32_MAX, UINT32_MAX, UINT32_MAX, UINT32_MAX, UINT64_MAX};
  for (size_t name : {size_t{1}, kNameBytesMax}) {
    for (size_t target : {size_t{0}, kSymlinkBytesMax}) {
      widest.symlink_target.assign(target, 't');
      DirPage page;
      page.entries.push_back(DirEntry{std::string(name, 'n'), UINT64_MAX, InodeType::kSymlink, widest});
      pb::MetaReply with, without;
      to_proto(page, &with);
      page.entries.clear();
      to_proto(page, &without);
      EXPECT_LE(with.ByteSizeLong() - without.ByteSizeLong(), name + target + kDirEntryFixedBytesMax);
    }
  }
}

TEST(ProtoConvert, CredAndRequestId) {
  Cred c{1000, 100, {4, 5, 6}};
  Cred back = round_trip<Cred, pb::Cred>(c);
  EXPECT_EQ(back.uid, 1000u);
  EXPECT_EQ(back.gid, 100u);
  EXPECT_EQ(back.groups, (std::vector<uint32_t>{4, 5, 6}));
  RequestId r{UINT64_MAX, 17};
  RequestId rb = round_trip<RequestId, pb::RequestId>(r);
  EXPECT_EQ(rb.client_id, UINT64_MAX);
  EXPECT_EQ(rb.seq, 17u);
}

TEST(ProtoConvert, ContextOnRequest) {
  pb::MetaRequest q;
  set_context(Context{Cred{7, 8, {9}}, RequestId{11, 12}}, &q);
  Context ctx = context_from(q);
  EXPECT_EQ(ctx.cred.uid, 7u);
  EXPECT_EQ(ctx.cred.groups, std::vector<uint32_t>{9});
  EXPECT_EQ(ctx.req.client_id, 11u);
  EXPECT_EQ(ctx.req.seq, 12u);
  pb::MetaRequest none;
  set_context(Context{}, &none);
  EXPECT_FALSE(context_from(none).req.valid());
}

TEST(ProtoConvert, LayoutAndInode) {
  Layout l{1 << 16, 4096, 9, 1, 3};
  EXPECT_EQ((round_trip<Layout, pb::Layout>(l)), l);
  Inode i = sample_inode();
  for (XattrPresence x : {XattrPresence::kUnknown, XattrPresence::kNone, XattrPresence::kSome}) {
    i.xattrs = x;
    pb::Inode p;
    to_proto(i, &p);
    auto back = from_proto(p);
    ASSERT_TRUE(back.has_value());
    EXPECT_EQ(*back, i);
  }
}

TEST(ProtoConvert, UnknownInodeTypeIsProtocolError) {
  pb::Inode p;
  to_proto(sample_inode(), &p);
  p.set_type(9);
  auto back = from_proto(p);
  ASSERT_FALSE(back.has_value());
  EXPECT_EQ(back.error().code(), Code::kProtocol);
  EXPECT_FALSE(rename_flags_from_wire(3).has_value());
  EXPECT_FALSE(xattr_flags_from_wire(3).has_value());
  EXPECT_EQ(*rename_flags_from_wire(2), RenameFlags::kExchange);
  EXPECT_EQ(*xattr_flags_from_wire(1), XattrFlags::kCreate);
}

TEST(ProtoConvert, SetAttrKeepsAbsentFieldsAbsent) {
  SetAttr a;
  a.mode = 0;
  a.size = 12;
  a.mtime_ns = SetAttr::kTimeNow;
  SetAttr back = round_trip<SetAttr, pb::SetAttr>(a);
  EXPECT_EQ(back.mode, std::optional<uint32_t>(0));
  EXPECT_EQ(back.size, std::optional<uint64_t>(12));
  EXPECT_EQ(back.mtime_ns, std::optional<int64_t>(SetAttr::kTimeNow));
  EXPECT_FALSE(back.uid || back.gid || back.atime_ns);
  EXPECT_FALSE(back.no_cut);
  a.no_cut = true;
  EXPECT_TRUE((round_trip<SetAttr, pb::SetAttr>(a).no_cut));
  SetAttr all{1, 2, 3, 4, 5, 6};
  SetAttr all_back = round_trip<SetAttr, pb::SetAttr>(all);
  EXPECT_EQ(all_back.uid, std::optional<uint32_t>(2));
  EXPECT_EQ(all_back.gid, std::optional<uint32_t>(3));
  EXPECT_EQ(all_back.atime_ns, std::optional<int64_t>(5));
}

TEST(ProtoConvert, StatFs) {
  StatFs s{1, 2, 3, 4};
  StatFs b = round_trip<StatFs, pb::StatFs>(s);
  EXPECT_EQ(b.capacity_bytes, 1u);
  EXPECT_EQ(b.used_bytes, 2u);
  EXPECT_EQ(b.inodes_used, 3u);
  EXPECT_EQ(b.inodes_max, 4u);
}

TEST(ProtoConvert, DirPageAndReply) {
  DirPage page;
  page.entries.push_back(DirEntry{"x", 42, InodeType::kSymlink, sample_inode()});
  page.entries.push_back(DirEntry{"dir", 43, InodeType::kDirectory, Inode{.ino = 43, .type = InodeType::kDirectory}});
  page.entries.push_back(DirEntry{"bare", 44, InodeType::kSymlink, Inode{}});  // attributes not given
  page.cookie = "dir";
  page.eof = true;
  pb::MetaReply r;
  to_proto(page, &r);
  EXPECT_FALSE(r.entries(2).has_attr());
  auto back = dir_page_from(r);
  ASSERT_TRUE(back.has_value());
  ASSERT_EQ(back->entries.size(), 3u);
  EXPECT_EQ(back->entries[2].ino, 44u);
  EXPECT_EQ(back->entries[2].type, InodeType::kSymlink);
  EXPECT_EQ(back->entries[2].attr, Inode{});
  EXPECT_EQ(back->entries[0].name, "x");
  EXPECT_EQ(back->entries[0].attr, sample_inode());
  EXPECT_EQ(back->entries[1].type, InodeType::kDirectory);
  EXPECT_EQ(back->cookie, "dir");
  EXPECT_TRUE(back->eof);

  Reply reply = reply_of(sample_inode(), 99);
  pb::MetaReply pr;
  to_proto(reply, &pr);
  auto rb = reply_from(pr);
  ASSERT_TRUE(rb.has_value());
  EXPECT_TRUE(rb->has_inode);
  EXPECT_EQ(rb->inode, sample_inode());
  EXPECT_EQ(rb->session_id, 99u);
  EXPECT_FALSE(rb->existed);
  reply.existed = true;
  to_proto(reply, &pr);
  EXPECT_TRUE(reply_from(pr)->existed);
  pb::MetaReply empty;
  to_proto(Reply{}, &empty);
  auto eb = reply_from(empty);
  ASSERT_TRUE(eb.has_value());
  EXPECT_FALSE(eb->has_inode);
}

}  // namespace
}  // namespace weft::meta
