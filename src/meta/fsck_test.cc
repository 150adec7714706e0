#include "meta/fsck.h"

#include <rocksdb/db.h>

#include <algorithm>

#include "meta/codec.h"
#include "meta/test_util.h"

namespace weft::meta::testing {
namespace {

// Each test breaks one invariant behind the store's back and expects fsck to
// name it. TearDown's own fsck is skipped by dropping the store first.
class FsckTest : public StoreTest {
 protected:
  void TearDown() override { store_.reset(); }
  void put(const std::string& k, const std::string& v) {
    ASSERT_TRUE(s().db()->Put(rocksdb::WriteOptions(), k, v).ok());
  }
  void del(const std::string& k) { ASSERT_TRUE(s().db()->Delete(rocksdb::WriteOptions(), k).ok()); }
  std::string problems() {
    auto r = fsck(*s().db());
    EXPECT_TRUE(r.has_value());
    std::string all;
    for (auto& p : r->problems) all += p + "\n";
    return all;
  }
};

TEST_F(FsckTest, CleanStoreHasNoProblems) {
  Ino d = mkdir("d");
  create("f", d);
  ASSERT_OK(s().symlink(root(), d, "l", "f"));
  auto r = fsck(*s().db());
  ASSERT_OK(r);
  EXPECT_TRUE(r->ok()) << r->summary();
  EXPECT_EQ(r->inodes, 4u);
  EXPECT_EQ(r->dentries, 3u);
}

TEST_F(FsckTest, DanglingDentry) {
  Ino f = create("f");
  del(key::inode(f));
  EXPECT_NE(problems().find("names missing inode"), std::string::npos);
}

TEST_F(FsckTest, WrongLinkCountAndOrphan) {
  Ino f = create("f");
  Inode n = *s().getattr(root(), f);
  n.nlink = 2;
  put(key::inode(f), encode_inode(n));
  Inode orphan = n;
  orphan.ino = 999999;
  orphan.nlink = 1;
  put(key::inode(orphan.ino), encode_inode(orphan));
  std::string p = problems();
  EXPECT_NE(p.find("nlink 2 but 1 dentries"), std::string::npos) << p;
  EXPECT_NE(p.find("orphan inode 999999"), std::string::npos) << p;
  EXPECT_NE(p.find("inode counter"), std::string::npos) << p;
}

// A file longer than kFileBytesMax (meta before 5a3ab3e took one) and a
// file whose layout places no chunk are named.
TEST_F(FsckTest, FilesPastTheLengthBoundOrOfNoValidLayout) {
  Ino big = create("big");
  Inode n = *s().getattr(root(), big);
  n.size = kFileBytesMax + 1;
  put(key::inode(big), encode_inode(n));
  Ino bad = create("bad");
  Inode b = *s().getattr(root(), bad);
  b.layout.chunk_bytes = 3;
  put(key::inode(bad), encode_inode(b));
  create("fine");
  std::string p = problems();
  EXPECT_NE(p.find(fmt::format("file {}: {} bytes, past", big, kFileBytesMax + 1)), std::string::npos) << p;
  EXPECT_NE(p.find(fmt::format("file {}: chunk size 3", bad)), std::string::npos) << p;
  EXPECT_EQ(std::count(p.begin(), p.end(), '\n'), 2) << p;
}

// Symlink targets no readlink takes (meta stored one with a NUL byte for a
// while) are named. (One past kSymlinkBytesMax does not decode: a malformed
// inode, TypeMismatchBadParentAndGarbage.)
TEST_F(FsckTest, SymlinkTargetsNoReadlinkTakes) {
  ASSERT_OK(s().symlink(root(), kRootIno, "fine", "f"));
  std::vector<Ino> bad;
  for (std::string target : {std::string("a\0b", 3), std::string()}) {
    auto l = s().symlink(root(), kRootIno, "l" + std::to_string(bad.size()), "t");
    ASSERT_OK(l);
    Inode n = *l;
    n.symlink_target = target;
    n.size = target.size();
    put(key::inode(n.ino), encode_inode(n));
    bad.push_back(n.ino);
  }
  std::string p = problems();
  EXPECT_NE(p.find(fmt::format("symlink {}: a target of 3 bytes holding a NUL byte", bad[0])), std::string::npos) << p;
  EXPECT_NE(p.find(fmt::format("symlink {}: a target of 0 bytes", bad[1])), std::string::npos) << p;
  EXPECT_EQ(std::count(p.begin(), p.end(), '\n'), 2) << p;
}

// An inode whose record says it has no xattrs over xattrs it has (a mount
// would hide them) is named, and one recording some over none.
TEST_F(FsckTest, XattrPresenceMatchesTheXattrs) {
  Ino hidden = create("hidden");
  ASSERT_OK(s().setxattr(root(), hidden, "user.a", "1", XattrFlags::kAny));
  Inode h = *s().getattr(root(), hidden);
  h.xattrs = XattrPresence::kNone;
  put(key::inode(hidden), encode_inode(h));
  Ino claimed = create("claimed");
  Inode c = *s().getattr(root(), claimed);
  c.xattrs = XattrPresence::kSome;
  put(key::inode(claimed), encode_inode(c));
  Ino unknown = create("unknown");  // stored before the record: fine either way
  ASSERT_OK(s().setxattr(root(), unknown, "user.a", "1", XattrFlags::kAny));
  Inode u = *s().getattr(root(), unknown);
  u.xattrs = XattrPresence::kUnknown;
  put(key::inode(unknown), encode_inode(u));
  Ino with = create("with");
  ASSERT_OK(s().setxattr(root(), with, "user.a", "1", XattrFlags::kAny));
  std::string p = problems();
  EXPECT_NE(p.find(fmt::format("inode {} records no xattrs but has some", hidden)), std::string::npos) << p;
  EXPECT_NE(p.find(fmt::format("inode {} records xattrs but has none", claimed)), std::string::npos) << p;
  EXPECT_EQ(std::count(p.begin(), p.end(), '\n'), 2) << p;
}

TEST_F(FsckTest, DirectoryCycleIsUnreachable) {
  Ino a = mkdir("a");
  Ino b = mkdir("b", a);
  del(key::dentry(kRootIno, "a"));
  put(key::dentry(b, "a"), encode_dentry({a, InodeType::kDirectory}));
  std::string p = problems();
  EXPECT_NE(p.find(fmt::format("directory {} unreachable", a)), std::string::npos) << p;
  EXPECT_NE(p.find(fmt::format("directory {} unreachable", b)), std::string::npos) << p;
}

TEST_F(FsckTest, TypeMismatchBadParentAndGarbage) {
  Ino d = mkdir("d");
  Ino e = mkdir("e");
  put(key::dentry(kRootIno, "fake"), encode_dentry({d, InodeType::kFile}));
  Inode en = *s().getattr(root(), e);
  en.parent = d;
  en.nlink = 2;
  put(key::inode(e), encode_inode(en));
  put(key::inode(424242), "garbage");
  std::string p = problems();
  EXPECT_NE(p.find("type differs"), std::string::npos) << p;
  EXPECT_NE(p.find("'..' is"), std::string::npos) << p;
  EXPECT_NE(p.find("malformed inode"), std::string::npos) << p;
}

TEST_F(FsckTest, LiveInodeInGcQueueAndStraySession) {
  Ino f = create("f");
  put(key::gc(f), encode_inode(*s().getattr(root(), f)));
  put(key::session(777777, 1), encode_session({1, 1}));
  std::string p = problems();
  EXPECT_NE(p.find("queued for GC"), std::string::npos) << p;
  EXPECT_NE(p.find("session on missing inode 777777"), std::string::npos) << p;
}

// Sessions the reaper could never close (no client, unreadable), sessions on
// what is not a file, a GC item holding another inode, and ids at or above
// the high-water mark (handed out again after a restart) are problems.
TEST_F(FsckTest, SessionsTheReaperCannotCloseAndIdsPastTheHighWaterMark) {
  Ino f = create("f");
  Ino d = mkdir("d");
  put(key::session(f, 5), encode_session({0, 1}));
  put(key::session(f, 6), "garbage");
  put(key::session(d, 7), encode_session({3, 1}));
  Inode fi = *s().getattr(root(), f);
  put(key::gc(f + 1), encode_inode(fi));
  Inode far = fi;
  far.ino = uint64_t{1} << 40;
  put(key::inode(far.ino), encode_inode(far));
  std::string p = problems();
  EXPECT_NE(p.find(fmt::format("session 5 of inode {} has no client", f)), std::string::npos) << p;
  EXPECT_NE(p.find(fmt::format("session 6 of inode {} is unreadable", f)), std::string::npos) << p;
  EXPECT_NE(p.find(fmt::format("session 7 on inode {}, which is not a file", d)), std::string::npos) << p;
  EXPECT_NE(p.find(fmt::format("GC item of inode {} holds inode {}", f + 1, f)), std::string::npos) << p;
  EXPECT_NE(p.find(fmt::format("inode {} at or above the id high-water mark", far.ino)), std::string::npos) << p;
}

// fsck_store_at opens a store read-only, also while its server holds it
// open, and sees what that server committed; a missing store is a clear error.
TEST_F(FsckTest, StoreAtAPathIsCheckedReadOnly) {
  Ino d = mkdir("d");
  create("f", d);
  ASSERT_OK(s().mknod(root(), d, "p", InodeType::kFifo, 0644, 0));
  auto live = fsck_store_at(options().path);  // the store is open here (no lock taken)
  ASSERT_OK(live);
  EXPECT_TRUE(live->ok()) << live->summary();
  EXPECT_EQ(live->inodes, 4u);
  del(key::inode(s().lookup(root(), d, "f")->ino));
  store_.reset();
  auto broken = fsck_store_at(options().path);
  ASSERT_OK(broken);
  EXPECT_FALSE(broken->ok());
  EXPECT_CODE(fsck_store_at(dir_.path() + "/nothing-here"), Code::kNotFound);
}

}  // namespace
}  // namespace weft::meta::testing
