#include "meta/test_util.h"

namespace weft::meta::testing {
namespace {

using RenameTest = StoreTest;

TEST_F(RenameTest, MovesFileWithinAndAcrossDirectories) {
  Ino a = mkdir("a"), b = mkdir("b");
  Ino f = create("f", a);
  ASSERT_OK(s().rename(root(), a, "f", a, "g"));
  EXPECT_CODE(s().lookup(root(), a, "f"), Code::kNotFound);
  EXPECT_EQ(s().lookup(root(), a, "g")->ino, f);
  ASSERT_OK(s().rename(root(), a, "g", b, "h"));
  EXPECT_EQ(s().lookup(root(), b, "h")->ino, f);
  EXPECT_TRUE(s().readdir(root(), a, "", 10)->entries.empty());
  EXPECT_CODE(s().rename(root(), a, "missing", b, "x"), Code::kNotFound);
}

TEST_F(RenameTest, ReplacesFileAtomically) {
  Ino f = create("f"), g = create("g");
  ASSERT_OK(s().setattr(root(), g, SetAttr{.size = 1}));  // chunks to collect
  ASSERT_OK(s().rename(root(), kRootIno, "f", kRootIno, "g"));
  EXPECT_EQ(s().lookup(root(), kRootIno, "g")->ino, f);
  EXPECT_CODE(s().getattr(root(), g), Code::kNotFound);
  auto gc = s().gc_pending(10);
  ASSERT_EQ(gc->size(), 1u);
  EXPECT_EQ((*gc)[0].ino, g);
}

TEST_F(RenameTest, DirectoryReplacesOnlyEmptyDirectory) {
  Ino a = mkdir("a"), b = mkdir("b");
  create("x", b);
  EXPECT_CODE(s().rename(root(), kRootIno, "a", kRootIno, "b"), Code::kNotEmpty);
  ASSERT_OK(s().unlink(root(), b, "x"));
  ASSERT_OK(s().rename(root(), kRootIno, "a", kRootIno, "b"));
  EXPECT_EQ(s().lookup(root(), kRootIno, "b")->ino, a);
  EXPECT_CODE(s().getattr(root(), b), Code::kNotFound);
  EXPECT_EQ(s().getattr(root(), kRootIno)->nlink, 3u);
}

TEST_F(RenameTest, TypeMismatches) {
  mkdir("d");
  create("f");
  EXPECT_CODE(s().rename(root(), kRootIno, "d", kRootIno, "f"), Code::kNotDirectory);
  EXPECT_CODE(s().rename(root(), kRootIno, "f", kRootIno, "d"), Code::kIsDirectory);
}

TEST_F(RenameTest, NoDirectoryIntoItsOwnSubtree) {
  Ino a = mkdir("a");
  Ino b = mkdir("b", a);
  Ino c = mkdir("c", b);
  EXPECT_CODE(s().rename(root(), kRootIno, "a", c, "a2"), Code::kInvalidArgument);
  EXPECT_CODE(s().rename(root(), kRootIno, "a", a, "self"), Code::kInvalidArgument);
  EXPECT_CODE(s().rename(root(), a, "b", c, "x"), Code::kInvalidArgument);
  // Moving up is fine and fixes the parent pointer and link counts.
  ASSERT_OK(s().rename(root(), b, "c", kRootIno, "c"));
  EXPECT_EQ(s().getattr(root(), c)->parent, kRootIno);
  EXPECT_EQ(s().lookup(root(), c, "..")->ino, kRootIno);
  EXPECT_EQ(s().getattr(root(), b)->nlink, 2u);
  EXPECT_EQ(s().getattr(root(), kRootIno)->nlink, 4u);
}

// A directory whose link count is at the limit takes no more
// subdirectories: by mkdir, by rename, nor by an exchange that moves a
// directory into it in place of a file (EMLINK, as Linux's vfs_rename). An
// exchange of two directories changes no count and is fine.
TEST_F(RenameTest, AFullDirectoryTakesNoDirectoryByRenameOrExchange) {
  Ino full = mkdir("full");
  for (uint32_t i = 2; i < kLinkCountMax; ++i) mkdir("d" + std::to_string(i), full);
  ASSERT_EQ(s().getattr(root(), full)->nlink, kLinkCountMax);
  EXPECT_CODE(s().mkdir(root(), full, "more", 0755), Code::kTooManyLinks);
  mkdir("dir");
  create("file", full);
  EXPECT_CODE(s().rename(root(), kRootIno, "dir", full, "dir"), Code::kTooManyLinks);
  EXPECT_CODE(s().rename(root(), kRootIno, "dir", full, "file", RenameFlags::kExchange), Code::kTooManyLinks);
  EXPECT_CODE(s().rename(root(), full, "file", kRootIno, "dir", RenameFlags::kExchange), Code::kTooManyLinks);
  EXPECT_EQ(s().getattr(root(), full)->nlink, kLinkCountMax);
  EXPECT_EQ(s().lookup(root(), full, "file")->type, InodeType::kFile);
  ASSERT_OK(s().rename(root(), kRootIno, "dir", full, "d2", RenameFlags::kExchange));  // directory for directory
  EXPECT_EQ(s().getattr(root(), full)->nlink, kLinkCountMax);
  ASSERT_OK(s().rename(root(), full, "file", kRootIno, "file"));  // a file still moves out
}

TEST_F(RenameTest, RenameToItselfAndToHardLinkIsNoOp) {
  Ino f = create("f");
  ASSERT_OK(s().rename(root(), kRootIno, "f", kRootIno, "f"));
  ASSERT_OK(s().link(root(), f, kRootIno, "f2"));
  ASSERT_OK(s().rename(root(), kRootIno, "f", kRootIno, "f2"));
  EXPECT_EQ(s().lookup(root(), kRootIno, "f")->ino, f);  // POSIX: both names stay
  EXPECT_EQ(s().getattr(root(), f)->nlink, 2u);
  Ino d = mkdir("d");
  ASSERT_OK(s().rename(root(), kRootIno, "d", kRootIno, "d"));
  EXPECT_EQ(s().lookup(root(), kRootIno, "d")->ino, d);
}

TEST_F(RenameTest, NoReplace) {
  create("f");
  Ino g = create("g");
  EXPECT_CODE(s().rename(root(), kRootIno, "f", kRootIno, "g", RenameFlags::kNoReplace), Code::kExists);
  EXPECT_EQ(s().lookup(root(), kRootIno, "g")->ino, g);
  ASSERT_OK(s().rename(root(), kRootIno, "f", kRootIno, "h", RenameFlags::kNoReplace));
}

TEST_F(RenameTest, ExchangeSwapsEntriesOfAnyType) {
  Ino a = mkdir("a"), b = mkdir("b");
  Ino d = mkdir("d", a);
  Ino f = create("f", b);
  ASSERT_OK(s().rename(root(), a, "d", b, "f", RenameFlags::kExchange));
  EXPECT_EQ(s().lookup(root(), b, "f")->ino, d);
  EXPECT_EQ(s().lookup(root(), a, "d")->ino, f);
  EXPECT_EQ(s().getattr(root(), d)->parent, b);
  EXPECT_EQ(s().getattr(root(), a)->nlink, 2u);
  EXPECT_EQ(s().getattr(root(), b)->nlink, 3u);
  EXPECT_CODE(s().rename(root(), a, "d", b, "none", RenameFlags::kExchange), Code::kNotFound);
  // Exchanging a directory with one of its descendants would make a cycle.
  Ino inner = mkdir("inner", d);
  EXPECT_CODE(s().rename(root(), kRootIno, "b", d, "inner", RenameFlags::kExchange), Code::kInvalidArgument);
  EXPECT_NE(inner, 0u);
}

TEST_F(RenameTest, DotNamesAndPermissions) {
  Ino d = mkdir("d", kRootIno, 0777);
  EXPECT_CODE(s().rename(root(), kRootIno, ".", kRootIno, "x"), Code::kInvalidArgument);
  EXPECT_CODE(s().rename(root(), kRootIno, "d", d, ".."), Code::kInvalidArgument);
  Context alice = user(1000, 100);
  Ino ro = mkdir("ro", kRootIno, 0755);
  create("f", ro);
  EXPECT_CODE(s().rename(alice, ro, "f", d, "f"), Code::kPermissionDenied);
  // Moving a directory to another parent needs write permission on it ("..").
  Ino sub = mkdir("sub", d, 0755);
  Ino d2 = mkdir("d2", kRootIno, 0777);
  EXPECT_CODE(s().rename(alice, d, "sub", d2, "sub"), Code::kPermissionDenied);
  ASSERT_OK(s().rename(alice, d, "sub", d, "sub2"));  // same parent: fine
  EXPECT_NE(sub, 0u);
}

// Linux's order of errors (do_renameat2, vfs_rename): the subtree check
// (EINVAL) before any permission; the target's type (ENOTDIR, EISDIR) before
// write access to a directory that changes parent.
TEST_F(RenameTest, ErrorsComeInLinuxsOrder) {
  Context u = user(1000, 1000), other = user(3000, 3000);
  Ino a = mkdir("a", kRootIno, 0777), b = mkdir("b", kRootIno, 0777);
  mkdir("d", a, 0755, other);  // not writable by u
  create("f", b, 0644, u);
  EXPECT_CODE(s().rename(u, a, "d", b, "f"), Code::kNotDirectory);
  Ino top = mkdir("top", kRootIno, 0777);
  Ino ta = mkdir("a", top, 0777);
  Ino tb = mkdir("b", ta, 0777);
  Ino tc = mkdir("c", tb, 0755, other);  // not writable by u
  EXPECT_CODE(s().rename(u, top, "a", tc, "x"), Code::kInvalidArgument);
  create("g", a, 0644, u);
  mkdir("e", b, 0777, u);
  EXPECT_CODE(s().rename(u, a, "g", b, "e"), Code::kIsDirectory);
  // Onto an ancestor of the source: ENOTEMPTY for a file or a directory
  // (EINVAL for an exchange), as Linux.
  create("x", tb, 0644, u);
  EXPECT_CODE(s().rename(u, tb, "x", ta, "b"), Code::kNotEmpty);
  EXPECT_CODE(s().rename(u, tb, "x", top, "a"), Code::kNotEmpty);
  mkdir("y", tb, 0777, u);
  EXPECT_CODE(s().rename(u, tb, "y", top, "a"), Code::kNotEmpty);
  EXPECT_CODE(s().rename(u, tb, "x", top, "a", RenameFlags::kExchange), Code::kInvalidArgument);
}

// Nothing limits a directory's depth, so no depth limits rename: a move into
// a directory 5,000 levels down works (the ancestor walk only starts
// watching for a cycle of damaged parents past 4,096 levels).
TEST_F(RenameTest, MovesIntoVeryDeepDirectories) {
  Ino cur = kRootIno;
  for (int i = 0; i < 5000; ++i) cur = mkdir("d", cur);
  mkdir("o");
  ASSERT_OK(s().rename(root(), kRootIno, "o", cur, "o"));
  ASSERT_OK(s().rename(root(), cur, "o", kRootIno, "o"));
  EXPECT_CODE(s().rename(root(), kRootIno, "d", cur, "x"), Code::kInvalidArgument);  // into its own subtree
}

}  // namespace
}  // namespace weft::meta::testing
