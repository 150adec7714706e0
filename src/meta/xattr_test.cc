#include <rocksdb/db.h>

#include "meta/codec.h"
#include "meta/test_util.h"

namespace weft::meta::testing {
namespace {

using XattrTest = StoreTest;

TEST_F(XattrTest, SetGetListRemove) {
  Ino f = create("f");
  EXPECT_CODE(s().getxattr(root(), f, "user.a"), Code::kNoData);
  ASSERT_OK(s().setxattr(root(), f, "user.a", "1", XattrFlags::kAny));
  ASSERT_OK(s().setxattr(root(), f, "user.b", std::string("\0bin\xff", 5), XattrFlags::kAny));
  EXPECT_EQ(*s().getxattr(root(), f, "user.a"), "1");
  EXPECT_EQ(*s().getxattr(root(), f, "user.b"), std::string("\0bin\xff", 5));
  EXPECT_EQ(*s().listxattr(root(), f), (std::vector<std::string>{"user.a", "user.b"}));
  ASSERT_OK(s().removexattr(root(), f, "user.a"));
  EXPECT_CODE(s().removexattr(root(), f, "user.a"), Code::kNoData);
  EXPECT_EQ(*s().listxattr(root(), f), (std::vector<std::string>{"user.b"}));
  ASSERT_OK(s().setxattr(root(), f, "user.e", "", XattrFlags::kAny));
  EXPECT_EQ(*s().getxattr(root(), f, "user.e"), "");
}

// Meta records beside each inode whether it has xattrs (a mount answers
// "none" from it without asking): new inodes of every type have none, a set
// gives some, removing the last one none again; an inode stored before the
// record (unknown) gets it at its next set or remove.
TEST_F(XattrTest, PresenceFollowsTheInodesXattrs) {
  auto presence = [&](Ino ino) { return s().getattr(root(), ino)->xattrs; };
  Ino f = create("f");
  Ino d = mkdir("d");
  auto l = s().symlink(root(), kRootIno, "l", "f");
  ASSERT_OK(l);
  auto fifo = s().mknod(root(), kRootIno, "p", InodeType::kFifo, 0644, 0);
  ASSERT_OK(fifo);
  for (Ino ino : {f, d, l->ino, fifo->ino, kRootIno}) EXPECT_EQ(presence(ino), XattrPresence::kNone) << ino;
  EXPECT_EQ(l->xattrs, XattrPresence::kNone) << "as the creating call answers it";
  ASSERT_OK(s().setxattr(root(), f, "user.a", "1", XattrFlags::kAny));
  EXPECT_EQ(presence(f), XattrPresence::kSome);
  ASSERT_OK(s().setxattr(root(), f, "user.b", "2", XattrFlags::kAny));
  ASSERT_OK(s().removexattr(root(), f, "user.b"));
  EXPECT_EQ(presence(f), XattrPresence::kSome) << "user.a is left";
  ASSERT_OK(s().removexattr(root(), f, "user.a"));
  EXPECT_EQ(presence(f), XattrPresence::kNone);
  EXPECT_CODE(s().removexattr(root(), f, "user.a"), Code::kNoData);
  EXPECT_EQ(presence(f), XattrPresence::kNone);
  ASSERT_OK(s().setxattr(root(), l->ino, "security.x", "v", XattrFlags::kAny));
  EXPECT_EQ(presence(l->ino), XattrPresence::kSome);
  EXPECT_EQ(presence(f), XattrPresence::kNone) << "another inode's set changes nothing here";

  // An inode stored before the record: unknown, until its next change.
  Inode old = *s().getattr(root(), d);
  old.xattrs = XattrPresence::kUnknown;
  ASSERT_TRUE(s().db()->Put(rocksdb::WriteOptions(), key::inode(d), encode_inode(old)).ok());
  EXPECT_EQ(presence(d), XattrPresence::kUnknown);
  ASSERT_OK(s().setxattr(root(), d, "user.a", "1", XattrFlags::kAny));
  ASSERT_OK(s().removexattr(root(), d, "user.a"));
  EXPECT_EQ(presence(d), XattrPresence::kNone);
}

TEST_F(XattrTest, CreateAndReplaceFlags) {
  Ino f = create("f");
  EXPECT_CODE(s().setxattr(root(), f, "user.a", "x", XattrFlags::kReplace), Code::kNoData);
  ASSERT_OK(s().setxattr(root(), f, "user.a", "x", XattrFlags::kCreate));
  EXPECT_CODE(s().setxattr(root(), f, "user.a", "y", XattrFlags::kCreate), Code::kExists);
  ASSERT_OK(s().setxattr(root(), f, "user.a", "z", XattrFlags::kReplace));
  EXPECT_EQ(*s().getxattr(root(), f, "user.a"), "z");
}

TEST_F(XattrTest, LimitsLikeLinux) {
  Ino f = create("f");
  EXPECT_CODE(s().setxattr(root(), f, "user." + std::string(251, 'n'), "v", XattrFlags::kAny), Code::kOutOfRange);
  ASSERT_OK(s().setxattr(root(), f, "user." + std::string(250, 'n'), "v", XattrFlags::kAny));
  EXPECT_CODE(s().setxattr(root(), f, "", "v", XattrFlags::kAny), Code::kOutOfRange);
  EXPECT_CODE(s().setxattr(root(), f, "user.big", std::string(65537, 'v'), XattrFlags::kAny), Code::kTooBig);
  ASSERT_OK(s().setxattr(root(), f, "user.max", std::string(65536, 'v'), XattrFlags::kAny));
  EXPECT_EQ(Status(Code::kTooBig, "").posix_errno(), E2BIG);
  EXPECT_EQ(Status(Code::kNoData, "").posix_errno(), ENODATA);
  EXPECT_CODE(s().setxattr(root(), f, "bogus.ns", "v", XattrFlags::kAny), Code::kNotSupported);
  for (std::string ns : {"user.", "trusted.", "security."}) {  // EINVAL on Linux: a namespace, no name
    SCOPED_TRACE(ns);
    EXPECT_CODE(s().setxattr(root(), f, ns, "v", XattrFlags::kAny), Code::kInvalidArgument);
    EXPECT_CODE(s().getxattr(root(), f, ns), Code::kInvalidArgument);
    EXPECT_CODE(s().removexattr(root(), f, ns), Code::kInvalidArgument);
  }
  // The permission check comes first, as in Linux's vfs_setxattr/vfs_getxattr
  // (xattr_permission and the security hook, then xattr_resolve_name).
  Context alice = user(1000, 100);
  EXPECT_CODE(s().setxattr(alice, f, "trusted.", "v", XattrFlags::kAny), Code::kNotPermitted);
  EXPECT_CODE(s().getxattr(alice, f, "trusted."), Code::kNoData);
  EXPECT_CODE(s().setxattr(alice, f, "security.", "v", XattrFlags::kAny), Code::kNotPermitted);
  EXPECT_CODE(s().setxattr(alice, f, "user.", "v", XattrFlags::kAny), Code::kPermissionDenied);  // not her file
  auto link = s().symlink(root(), kRootIno, "l", "f");
  ASSERT_OK(link);
  EXPECT_CODE(s().setxattr(root(), link->ino, "user.", "v", XattrFlags::kAny), Code::kNotPermitted);
}

// Per inode at most 256 xattrs and 1 MiB of names and values (ENOSPC, as
// Linux when a filesystem's xattr space is full): an inode's removal and
// setxattr's check read them all, and the names must fit a listxattr reply.
TEST_F(XattrTest, PerInodeLimits) {
  Ino f = create("f");
  auto set = [&](Ino ino, const std::string& name, const std::string& value) {
    return s().setxattr(root(), ino, name, value, XattrFlags::kAny);
  };
  for (int i = 0; i < 256; ++i) ASSERT_OK(set(f, fmt::format("user.{:03}", i), "v"));
  EXPECT_CODE(set(f, "user.one-more", "v"), Code::kNoSpace);
  EXPECT_EQ(Status(Code::kNoSpace, "").posix_errno(), ENOSPC);
  ASSERT_OK(set(f, "user.000", "replaced"));  // no new name
  EXPECT_EQ(s().listxattr(root(), f)->size(), 256u);
  ASSERT_OK(s().removexattr(root(), f, "user.000"));
  ASSERT_OK(set(f, "user.one-more", "v"));

  Ino g = create("g");
  const std::string value(65536, 'v');
  for (int i = 0; i < 15; ++i) ASSERT_OK(set(g, fmt::format("user.v{:02}", i), value));  // 15 * 65543 bytes
  EXPECT_CODE(set(g, "user.v15", value), Code::kNoSpace);  // 16 * 65543 bytes pass 1 MiB
  ASSERT_OK(set(g, "user.small", std::string(1000, 's')));
  EXPECT_CODE(set(g, "user.small", std::string(65536, 's')), Code::kNoSpace);  // a replacement that grows counts
  ASSERT_OK(set(g, "user.v00", ""));
  ASSERT_OK(set(g, "user.v15", value));
  ASSERT_OK(s().unlink(root(), kRootIno, "g"));  // fsck in TearDown: none of its xattrs is left
}

// An inode that got more names than the limits allow (written before them)
// answers listxattr with E2BIG, as Linux does past XATTR_LIST_MAX, and is
// still removed whole.
TEST_F(XattrTest, OversizedListIsTooBig) {
  Ino f = create("f");
  for (int i = 0; i < 300; ++i) {
    std::string name = fmt::format("user.{:03}", i) + std::string(240, 'n');
    ASSERT_TRUE(s().db()->Put(rocksdb::WriteOptions(), key::xattr(f, name), "v").ok());
  }
  EXPECT_CODE(s().listxattr(root(), f), Code::kTooBig);
  EXPECT_CODE(s().setxattr(root(), f, "user.new", "v", XattrFlags::kAny), Code::kNoSpace);
  ASSERT_OK(s().removexattr(root(), f, "user.000" + std::string(240, 'n')));
  ASSERT_OK(s().unlink(root(), kRootIno, "f"));
}

TEST_F(XattrTest, Permissions) {
  Ino f = create("f", kRootIno, 0644);
  Context alice = user(1000, 100);
  ASSERT_OK(s().setxattr(root(), f, "user.a", "1", XattrFlags::kAny));
  EXPECT_EQ(*s().getxattr(alice, f, "user.a"), "1");
  EXPECT_CODE(s().setxattr(alice, f, "user.a", "2", XattrFlags::kAny), Code::kPermissionDenied);
  EXPECT_CODE(s().removexattr(alice, f, "user.a"), Code::kPermissionDenied);
  EXPECT_CODE(s().setxattr(alice, f, "trusted.t", "2", XattrFlags::kAny), Code::kNotPermitted);
  ASSERT_OK(s().setxattr(root(), f, "trusted.t", "2", XattrFlags::kAny));
  EXPECT_EQ(s().listxattr(alice, f)->size(), 1u);  // trusted.* hidden from non-root
  EXPECT_EQ(s().listxattr(root(), f)->size(), 2u);
  auto l = s().symlink(root(), kRootIno, "l", "f");
  EXPECT_CODE(s().setxattr(root(), l->ino, "user.a", "1", XattrFlags::kAny), Code::kNotPermitted);
}

// Linux's xattr_permission: what a caller may not read reads as absent, and
// in a sticky directory only its owner (or root) sets its user xattrs.
TEST_F(XattrTest, UnreadableNamesAreAbsentAndStickyDirectoriesKeepTheirOwners) {
  Ino f = create("f", kRootIno, 0644);
  Context alice = user(1000, 100);
  ASSERT_OK(s().setxattr(root(), f, "trusted.t", "2", XattrFlags::kAny));
  EXPECT_CODE(s().getxattr(alice, f, "trusted.t"), Code::kNoData);
  auto fifo = s().mknod(root(), kRootIno, "p", InodeType::kFifo, 0600, 0);
  ASSERT_OK(fifo);
  EXPECT_CODE(s().getxattr(alice, fifo->ino, "user.a"), Code::kNoData);  // not EACCES from its 0600
  Ino tmp = mkdir("tmp", kRootIno, 01777);
  EXPECT_CODE(s().setxattr(alice, tmp, "user.a", "1", XattrFlags::kAny), Code::kNotPermitted);
  ASSERT_OK(s().setxattr(root(), tmp, "user.a", "1", XattrFlags::kAny));
  EXPECT_CODE(s().removexattr(alice, tmp, "user.a"), Code::kNotPermitted);
  EXPECT_EQ(*s().getxattr(alice, tmp, "user.a"), "1");
  Ino own = mkdir("own", kRootIno, 01777);
  ASSERT_OK(s().setattr(root(), own, SetAttr{.uid = 1000}));
  ASSERT_OK(s().setxattr(alice, own, "user.a", "1", XattrFlags::kAny));
}

TEST_F(XattrTest, RemovedWithTheInode) {
  Ino f = create("f");
  Ino d = mkdir("d");
  ASSERT_OK(s().setxattr(root(), f, "user.a", "1", XattrFlags::kAny));
  ASSERT_OK(s().setxattr(root(), d, "user.a", "1", XattrFlags::kAny));
  ASSERT_OK(s().unlink(root(), kRootIno, "f"));
  ASSERT_OK(s().rmdir(root(), kRootIno, "d"));
  EXPECT_CODE(s().listxattr(root(), f), Code::kNotFound);
  // fsck in TearDown checks no xattr of a dead inode is left.
}

}  // namespace
}  // namespace weft::meta::testing
