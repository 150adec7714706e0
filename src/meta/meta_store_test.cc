#include "meta/meta_store.h"

#include <map>

#include <rocksdb/db.h>

#include "meta/codec.h"
#include "meta/test_util.h"

namespace weft::meta::testing {
namespace {

using MetaStoreTest = StoreTest;

TEST_F(MetaStoreTest, RootExistsAfterOpen) {
  auto r = s().getattr(root(), kRootIno);
  ASSERT_TRUE(r.has_value()) << r.error();
  EXPECT_TRUE(r->is_dir());
  EXPECT_EQ(r->mode, 0755u);
  EXPECT_EQ(r->uid, 0u);
  EXPECT_EQ(r->nlink, 2u);
  EXPECT_EQ(r->parent, kRootIno);
  EXPECT_EQ(r->layout.stripe_count, 16u);  // min(16, 32 chains)
  EXPECT_EQ(r->layout.chunk_bytes, 1u << 20);
}

TEST_F(MetaStoreTest, MkdirCreateLookupGetattr) {
  // The root directory is 0755 and owned by root.
  EXPECT_CODE(s().mkdir(user(1000, 100), kRootIno, "d", 0750), Code::kPermissionDenied);
  Ino d = mkdir("d");
  auto dir = s().getattr(root(), d);
  ASSERT_OK(dir);
  EXPECT_EQ(dir->nlink, 2u);
  EXPECT_EQ(dir->parent, kRootIno);
  EXPECT_EQ(s().getattr(root(), kRootIno)->nlink, 3u);
  Ino f = create("f", d, 0640);
  auto got = s().lookup(root(), d, "f");
  ASSERT_OK(got);
  EXPECT_EQ(got->ino, f);
  EXPECT_TRUE(got->is_file());
  EXPECT_EQ(got->mode, 0640u);
  EXPECT_EQ(got->nlink, 1u);
  EXPECT_EQ(s().lookup(root(), d, ".")->ino, d);
  EXPECT_EQ(s().lookup(root(), d, "..")->ino, kRootIno);
  EXPECT_CODE(s().lookup(root(), d, "missing"), Code::kNotFound);
  EXPECT_CODE(s().lookup(root(), f, "x"), Code::kNotDirectory);
  EXPECT_CODE(s().getattr(root(), 999999), Code::kNotFound);
}

// lookup reads the parent without its DirStat; a directory it returns must
// still carry the merged link count and times.
TEST_F(MetaStoreTest, LookupOfDirectoryMergesItsStats) {
  Ino d = mkdir("d");
  mkdir("sub", d);
  EXPECT_EQ(s().lookup(root(), kRootIno, "d")->nlink, 3u);
  EXPECT_EQ(s().lookup(root(), d, ".")->nlink, 3u);
  EXPECT_EQ(s().lookup(root(), d, "sub")->nlink, 2u);
  Ino f = create("f", d);
  auto dir = s().lookup(root(), kRootIno, "d");
  ASSERT_OK(dir);
  EXPECT_GE(dir->mtime_ns, s().getattr(root(), f)->ctime_ns);
}

// A dentry naming a missing inode is reported, never returned as not found.
TEST_F(MetaStoreTest, LookupOfDanglingDentryIsCorruption) {
  Ino d = mkdir("d");
  Ino f = create("f", d);
  ASSERT_TRUE(s().db()->Delete(rocksdb::WriteOptions(), key::inode(f)).ok());
  EXPECT_CODE(s().lookup(root(), d, "f"), Code::kCorruption);
  store_.reset();  // no fsck in TearDown: the store is broken on purpose
}

TEST_F(MetaStoreTest, NameValidation) {
  EXPECT_CODE(s().mkdir(root(), kRootIno, "", 0755), Code::kInvalidArgument);
  EXPECT_CODE(s().mkdir(root(), kRootIno, "a/b", 0755), Code::kInvalidArgument);
  EXPECT_CODE(s().create(root(), kRootIno, std::string("a\0b", 3), 0644, true, false), Code::kInvalidArgument);
  EXPECT_CODE(s().mkdir(root(), kRootIno, std::string(256, 'n'), 0755), Code::kNameTooLong);
  EXPECT_NE(mkdir(std::string(255, 'n')), 0u);
  EXPECT_CODE(s().mkdir(root(), kRootIno, ".", 0755), Code::kExists);
  EXPECT_CODE(s().mkdir(root(), kRootIno, "..", 0755), Code::kExists);
  EXPECT_CODE(s().create(root(), kRootIno, ".", 0644, true, false), Code::kExists);
  EXPECT_CODE(s().create(root(), kRootIno, ".", 0644, false, false), Code::kIsDirectory);
  EXPECT_CODE(s().rmdir(root(), kRootIno, "."), Code::kInvalidArgument);
  EXPECT_CODE(s().rmdir(root(), kRootIno, ".."), Code::kNotEmpty);
  EXPECT_CODE(s().unlink(root(), kRootIno, ".."), Code::kIsDirectory);
  EXPECT_CODE(s().symlink(root(), kRootIno, ".", "x"), Code::kExists);
}

TEST_F(MetaStoreTest, CreateExclusiveAndOpenExisting) {
  Ino f = create("f");
  EXPECT_CODE(s().create(root(), kRootIno, "f", 0644, true, false), Code::kExists);
  auto again = s().create(root(), kRootIno, "f", 0600, false, false);
  ASSERT_OK(again);
  EXPECT_EQ(again->inode.ino, f);
  EXPECT_EQ(again->inode.mode, 0644u);  // existing file opened, mode untouched
  EXPECT_TRUE(again->existed) << "an O_TRUNC create cuts what an existing file may hold";
  auto made = s().create(root(), kRootIno, "new", 0600, false, false);
  ASSERT_OK(made);
  EXPECT_FALSE(made->existed);
  Ino d = mkdir("d");
  EXPECT_CODE(s().create(root(), kRootIno, "d", 0644, false, false), Code::kIsDirectory);
  EXPECT_CODE(s().create(root(), kRootIno, "d", 0644, true, false), Code::kExists);
  EXPECT_CODE(s().create(root(), f, "x", 0644, true, false), Code::kNotDirectory);
  EXPECT_CODE(s().mkdir(root(), kRootIno, "f", 0755), Code::kExists);
  EXPECT_NE(d, 0u);
}

TEST_F(MetaStoreTest, PermissionsOnEntryOperations) {
  Ino d = mkdir("home");
  ASSERT_OK(s().setattr(root(), d, SetAttr{.uid = 1000, .gid = 100}));
  Context alice = user(1000, 100), bob = user(2000, 200);
  Ino f = create("a", d, 0600, alice);
  ASSERT_NE(f, 0u);
  EXPECT_CODE(s().create(bob, d, "b", 0644, true, false), Code::kPermissionDenied);
  EXPECT_CODE(s().unlink(bob, d, "a"), Code::kPermissionDenied);
  EXPECT_CODE(s().mkdir(bob, d, "x", 0755), Code::kPermissionDenied);
  EXPECT_CODE(s().create(bob, d, "a", 0644, false, false), Code::kPermissionDenied);  // no read on 0600
  ASSERT_OK(s().setattr(alice, d, SetAttr{.mode = 0700}));
  EXPECT_CODE(s().lookup(bob, d, "a"), Code::kPermissionDenied);  // no search permission
  ASSERT_OK(s().lookup(alice, d, "a"));
  EXPECT_CODE(s().readdir(bob, d, "", 10), Code::kPermissionDenied);
  ASSERT_OK(s().unlink(alice, d, "a"));
}

// Linux looks the name up before it checks write permission on the
// directory: a name that exists is EEXIST, a missing one ENOENT, a rename onto
// the same inode a no-op, for callers who may search the directory but not
// write it (mkdir -p of a path that exists under a root-owned directory).
TEST_F(MetaStoreTest, LookupErrorsComeBeforeWritePermission) {
  Ino d = mkdir("ro", kRootIno, 0755);
  Ino sub = mkdir("sub", d, 0755);
  Ino f = create("f", d, 0644);
  ASSERT_OK(s().link(root(), f, d, "f2"));
  Context bob = user(2000, 200);
  EXPECT_CODE(s().mkdir(bob, kRootIno, "ro", 0755), Code::kExists);
  EXPECT_CODE(s().mkdir(bob, d, "sub", 0755), Code::kExists);
  EXPECT_CODE(s().symlink(bob, d, "f", "x"), Code::kExists);
  EXPECT_CODE(s().mknod(bob, d, "f", InodeType::kFifo, 0644, 0), Code::kExists);
  EXPECT_CODE(s().link(bob, f, d, "sub"), Code::kExists);
  EXPECT_CODE(s().unlink(bob, d, "missing"), Code::kNotFound);
  EXPECT_CODE(s().rmdir(bob, d, "missing"), Code::kNotFound);
  EXPECT_CODE(s().rename(bob, d, "missing", d, "x"), Code::kNotFound);
  EXPECT_CODE(s().rename(bob, d, "f", d, "sub", RenameFlags::kNoReplace), Code::kExists);
  ASSERT_OK(s().rename(bob, d, "f", d, "f"));   // onto itself
  ASSERT_OK(s().rename(bob, d, "f", d, "f2"));  // onto a hard link of itself
  // What exists and needs a change is refused for want of write permission.
  EXPECT_CODE(s().mkdir(bob, d, "new", 0755), Code::kPermissionDenied);
  EXPECT_CODE(s().unlink(bob, d, "f"), Code::kPermissionDenied);
  EXPECT_CODE(s().unlink(bob, d, "sub"), Code::kPermissionDenied);  // before EISDIR, as Linux
  EXPECT_CODE(s().rmdir(bob, d, "f"), Code::kPermissionDenied);     // before ENOTDIR
  EXPECT_CODE(s().rename(bob, d, "f", d, "g"), Code::kPermissionDenied);
  // Without search permission nothing is told about the names.
  ASSERT_OK(s().setattr(root(), d, SetAttr{.mode = 0700}));
  EXPECT_CODE(s().mkdir(bob, d, "sub", 0755), Code::kPermissionDenied);
  EXPECT_CODE(s().unlink(bob, d, "missing"), Code::kPermissionDenied);
  EXPECT_NE(sub, 0u);
}

TEST_F(MetaStoreTest, StickyDirectoryRestrictsRemoval) {
  Ino tmp = mkdir("tmp", kRootIno, 01777);
  Context alice = user(1000, 100), bob = user(2000, 200);
  create("a", tmp, 0644, alice);
  EXPECT_CODE(s().unlink(bob, tmp, "a"), Code::kNotPermitted);
  EXPECT_CODE(s().rename(bob, tmp, "a", tmp, "b"), Code::kNotPermitted);
  ASSERT_OK(s().unlink(alice, tmp, "a"));
  create("c", tmp, 0644, alice);
  ASSERT_OK(s().unlink(root(), tmp, "c"));
}

// A mutation whose parent came from a client's cache names where that parent
// was found (ParentCheck); meta refuses it when the entry is gone or names
// another directory now, and checks search permission there.
TEST_F(MetaStoreTest, ParentCheckRefusesAParentMovedOrReplaced) {
  Ino a = mkdir("a");
  Ino sub = mkdir("sub", a);
  ParentCheck at_a{a, "sub"};
  ASSERT_OK(s().create(root(), sub, "f", 0644, true, false, at_a));
  ASSERT_OK(s().unlink(root(), sub, "f", at_a));
  ASSERT_OK(s().rename(root(), a, "sub", kRootIno, "moved"));
  EXPECT_CODE(s().create(root(), sub, "g", 0644, true, false, at_a), Code::kStaleHandle);
  EXPECT_CODE(s().lookup(root(), sub, "g"), Code::kNotFound);  // a refused create changes nothing
  Ino again = mkdir("sub", a);
  ASSERT_OK(s().create(root(), sub, "g", 0644, true, false));  // in the moved one, without a check
  EXPECT_CODE(s().create(root(), sub, "h", 0644, true, false, at_a), Code::kStaleHandle);  // replaced
  EXPECT_CODE(s().unlink(root(), sub, "g", at_a), Code::kStaleHandle);
  ASSERT_OK(s().lookup(root(), sub, "g"));
  mkdir("d", sub);
  EXPECT_CODE(s().rmdir(root(), sub, "d", at_a), Code::kStaleHandle);
  ASSERT_OK(s().lookup(root(), sub, "d"));  // a refused rmdir removes nothing
  mkdir("d", again);
  ASSERT_OK(s().rmdir(root(), again, "d", at_a));
  ASSERT_OK(s().setattr(root(), again, SetAttr{.mode = 0777}));
  ASSERT_OK(s().create(user(1000, 1000), again, "u", 0644, true, false, at_a));
  ASSERT_OK(s().setattr(root(), a, SetAttr{.mode = 0700}));
  // No search permission where the parent was found.
  EXPECT_CODE(s().create(user(1000, 1000), again, "v", 0644, true, false, at_a), Code::kPermissionDenied);
  ParentCheck missing{a, "nothing"};
  EXPECT_CODE(s().create(root(), again, "w", 0644, true, false, missing), Code::kStaleHandle);
}

// The levels above the parent (ParentCheck::above): a directory on the way
// moved away (its entry gone) or replaced (its entry names another one)
// refuses the mutation, which changes nothing; search permission is checked
// at each level.
TEST_F(MetaStoreTest, ParentCheckRefusesALevelAboveMovedOrReplaced) {
  Ino a = mkdir("a");
  Ino b = mkdir("b", a);
  Ino c = mkdir("c", b);
  ParentCheck way{b, "c", {EntryCheck{kRootIno, "a", a}, EntryCheck{a, "b", b}}};
  ASSERT_OK(s().create(root(), c, "f", 0644, true, false, way));
  ASSERT_OK(s().rename(root(), kRootIno, "a", kRootIno, "a.old"));
  EXPECT_CODE(s().create(root(), c, "g", 0644, true, false, way), Code::kStaleHandle);
  EXPECT_CODE(s().unlink(root(), c, "f", way), Code::kStaleHandle);
  ASSERT_OK(s().lookup(root(), c, "f"));  // a refused unlink removes nothing
  EXPECT_CODE(s().lookup(root(), c, "g"), Code::kNotFound);
  Ino a2 = mkdir("a");  // a new "a": its entry names another directory
  EXPECT_CODE(s().create(root(), c, "g", 0644, true, false, way), Code::kStaleHandle);
  ASSERT_OK(s().rename(root(), kRootIno, "a", kRootIno, "a.new"));
  ASSERT_OK(s().rename(root(), kRootIno, "a.old", kRootIno, "a"));
  ASSERT_OK(s().create(root(), c, "g", 0644, true, false, way));  // the way is as it was
  ASSERT_OK(s().mkdir(root(), c, "m", 0755, way));  // mkdir and symlink are checked too
  ASSERT_OK(s().symlink(root(), c, "s", "m", way));
  ASSERT_OK(s().rename(root(), kRootIno, "a", kRootIno, "a.old"));
  EXPECT_CODE(s().mkdir(root(), c, "m2", 0755, way), Code::kStaleHandle);
  EXPECT_CODE(s().symlink(root(), c, "s2", "m", way), Code::kStaleHandle);
  EXPECT_CODE(s().lookup(root(), c, "m2"), Code::kNotFound);
  ASSERT_OK(s().rename(root(), kRootIno, "a.old", kRootIno, "a"));
  ASSERT_OK(s().setattr(root(), c, SetAttr{.mode = 0777}));
  ASSERT_OK(s().setattr(root(), a, SetAttr{.mode = 0700}));  // no search above the parent for user 1000
  EXPECT_CODE(s().create(user(1000, 1000), c, "u", 0644, true, false, way), Code::kPermissionDenied);
  (void)a2;
}

TEST_F(MetaStoreTest, UnlinkAndRmdirErrors) {
  Ino d = mkdir("d");
  create("f", d);
  EXPECT_CODE(s().unlink(root(), kRootIno, "d"), Code::kIsDirectory);
  EXPECT_CODE(s().rmdir(root(), d, "f"), Code::kNotDirectory);
  EXPECT_CODE(s().rmdir(root(), kRootIno, "d"), Code::kNotEmpty);
  EXPECT_CODE(s().unlink(root(), kRootIno, "nope"), Code::kNotFound);
  EXPECT_CODE(s().rmdir(root(), kRootIno, "nope"), Code::kNotFound);
  ASSERT_OK(s().unlink(root(), d, "f"));
  ASSERT_OK(s().rmdir(root(), kRootIno, "d"));
  EXPECT_CODE(s().getattr(root(), d), Code::kNotFound);
  EXPECT_EQ(s().getattr(root(), kRootIno)->nlink, 2u);
  EXPECT_CODE(s().create(root(), d, "late", 0644, true, false), Code::kNotFound);
}

TEST_F(MetaStoreTest, HardLinks) {
  Ino d = mkdir("d");
  Ino f = create("f");
  ASSERT_OK(s().setattr(root(), f, SetAttr{.size = 1}));  // chunks to collect
  auto l = s().link(root(), f, d, "g");
  ASSERT_OK(l);
  EXPECT_EQ(l->nlink, 2u);
  EXPECT_EQ(s().lookup(root(), d, "g")->ino, f);
  EXPECT_CODE(s().link(root(), d, kRootIno, "dl"), Code::kNotPermitted);
  EXPECT_CODE(s().link(root(), f, d, "g"), Code::kExists);
  EXPECT_CODE(s().link(root(), f, f, "x"), Code::kNotDirectory);
  ASSERT_OK(s().unlink(root(), kRootIno, "f"));
  EXPECT_EQ(s().getattr(root(), f)->nlink, 1u);
  ASSERT_OK(s().unlink(root(), d, "g"));
  EXPECT_CODE(s().getattr(root(), f), Code::kNotFound);
  auto gc = s().gc_pending(10);
  ASSERT_OK(gc);
  ASSERT_EQ(gc->size(), 1u);
  EXPECT_EQ((*gc)[0].ino, f);
  EXPECT_CODE(s().link(root(), f, d, "again"), Code::kNotFound);
}

TEST_F(MetaStoreTest, Symlinks) {
  auto l = s().symlink(root(), kRootIno, "ln", "a/b/c");
  ASSERT_OK(l);
  EXPECT_TRUE(l->is_symlink());
  EXPECT_EQ(l->size, 5u);
  EXPECT_EQ(*s().readlink(root(), l->ino), "a/b/c");
  EXPECT_CODE(s().readlink(root(), kRootIno), Code::kInvalidArgument);
  EXPECT_CODE(s().symlink(root(), kRootIno, "ln", "x"), Code::kExists);
  EXPECT_CODE(s().symlink(root(), kRootIno, "e", ""), Code::kNotFound);
  EXPECT_CODE(s().symlink(root(), kRootIno, "long", std::string(4096, 'x')), Code::kNameTooLong);
  EXPECT_CODE(s().symlink(root(), kRootIno, "nul", std::string("a\0b", 3)), Code::kInvalidArgument);
  EXPECT_CODE(s().create(root(), kRootIno, "ln", 0644, false, false), Code::kLoop);
  ASSERT_OK(s().unlink(root(), kRootIno, "ln"));
  EXPECT_CODE(s().getattr(root(), l->ino), Code::kNotFound);
  EXPECT_TRUE(s().gc_pending(10)->empty());  // symlinks have no chunks
}

// FIFOs, sockets and devices: entries and attributes like any inode, opened
// by the kernel that opens them, never by Weft.
TEST_F(MetaStoreTest, SpecialFiles) {
  Context alice = user(1000, 100), bob = user(2000, 200);
  Ino d = mkdir("d");
  ASSERT_OK(s().setattr(root(), d, SetAttr{.uid = 1000}));  // alice's: bob may not add to it
  auto fifo = s().mknod(alice, d, "fifo", InodeType::kFifo, 0640, 1234);
  ASSERT_OK(fifo);
  EXPECT_EQ(fifo->type, InodeType::kFifo);
  EXPECT_EQ(fifo->mode, 0640u);
  EXPECT_EQ(fifo->uid, 1000u);
  EXPECT_EQ(fifo->nlink, 1u);
  EXPECT_EQ(fifo->rdev, 0u);  // meaningless for a FIFO: not kept
  ASSERT_OK(s().mknod(alice, d, "sock", InodeType::kSocket, 0777, 0));
  // Devices: root only, after the checks Linux makes first.
  EXPECT_CODE(s().mknod(alice, d, "tty", InodeType::kCharDevice, 0600, 0x0501), Code::kNotPermitted);
  EXPECT_CODE(s().mknod(alice, d, "fifo", InodeType::kCharDevice, 0600, 0x0501), Code::kExists);
  EXPECT_CODE(s().mknod(bob, d, "x", InodeType::kCharDevice, 0600, 0x0501), Code::kPermissionDenied);
  EXPECT_CODE(s().mknod(bob, d, "x", InodeType::kFifo, 0600, 0), Code::kPermissionDenied);
  auto chr = s().mknod(root(), d, "tty", InodeType::kCharDevice, 0620, 0x0501);
  ASSERT_OK(chr);
  const uint64_t big_dev = (uint64_t{0xabcde} << 32) | 0x12345678;  // every bit of a dev_t is kept
  auto blk = s().mknod(root(), d, "disk", InodeType::kBlockDevice, 0660, big_dev);
  ASSERT_OK(blk);
  // Neither regular files nor directories nor unknown kinds come from mknod.
  EXPECT_CODE(s().mknod(root(), d, "f", InodeType::kFile, 0644, 0), Code::kInvalidArgument);
  EXPECT_CODE(s().mknod(root(), d, "f", InodeType::kDirectory, 0755, 0), Code::kNotPermitted);  // as mknod(2)
  EXPECT_CODE(s().mknod(root(), d, ".", InodeType::kFifo, 0644, 0), Code::kExists);
  EXPECT_CODE(s().mknod(root(), d, "a/b", InodeType::kFifo, 0644, 0), Code::kInvalidArgument);

  // Kept across a restart, device numbers included; listed with their types.
  ASSERT_NO_FATAL_FAILURE(open());
  auto tty = s().lookup(root(), d, "tty");
  ASSERT_OK(tty);
  EXPECT_EQ(tty->type, InodeType::kCharDevice);
  EXPECT_EQ(tty->rdev, 0x0501u);
  EXPECT_EQ(s().getattr(root(), blk->ino)->rdev, big_dev);
  EXPECT_EQ(s().lookup(root(), d, "sock")->type, InodeType::kSocket);
  auto page = s().readdir(root(), d, "", 10);
  ASSERT_OK(page);
  std::map<std::string, InodeType> listed;
  for (auto& e : page->entries) listed[e.name] = e.type;
  EXPECT_EQ(listed, (std::map<std::string, InodeType>{{"disk", InodeType::kBlockDevice},
                                                      {"fifo", InodeType::kFifo},
                                                      {"sock", InodeType::kSocket},
                                                      {"tty", InodeType::kCharDevice}}));

  // Weft opens none of them, whatever the path to the open.
  EXPECT_CODE(s().open(alice, fifo->ino, OpenFlags{true, false}), Code::kNotSupported);
  EXPECT_CODE(s().open(on_connection(alice, 7), fifo->ino, OpenFlags{false, true}), Code::kNotSupported);
  EXPECT_CODE(s().open_read_at(alice, d, "fifo"), Code::kNotSupported);
  EXPECT_CODE(s().create(on_connection(alice, 7), d, "fifo", 0644, false, true), Code::kNotSupported);
  EXPECT_CODE(s().create(alice, d, "fifo", 0644, true, false), Code::kExists);
  // Attributes change as on any inode; there is no length to set.
  EXPECT_EQ(s().setattr(alice, fifo->ino, SetAttr{.mode = 0600})->mode, 0600u);
  EXPECT_CODE(s().setattr(alice, fifo->ino, SetAttr{.size = 0}), Code::kInvalidArgument);
  EXPECT_CODE(s().setxattr(alice, fifo->ino, "user.a", "v", XattrFlags::kAny), Code::kNotPermitted);  // as Linux
  // Links, renames and removal like any non-directory; nothing goes to the chunk GC.
  ASSERT_OK(s().link(alice, fifo->ino, d, "fifo2"));
  EXPECT_EQ(s().getattr(root(), fifo->ino)->nlink, 2u);
  ASSERT_OK(s().rename(alice, d, "fifo2", d, "sock"));  // replaces the socket
  EXPECT_EQ(s().lookup(root(), d, "sock")->ino, fifo->ino);
  ASSERT_OK(s().unlink(alice, d, "fifo"));
  ASSERT_OK(s().unlink(alice, d, "sock"));
  EXPECT_CODE(s().getattr(root(), fifo->ino), Code::kNotFound);
  ASSERT_OK(s().unlink(root(), d, "tty"));
  ASSERT_OK(s().unlink(root(), d, "disk"));
  EXPECT_TRUE(s().gc_pending(10)->empty());
  EXPECT_EQ(s().statfs(root())->inodes_used, 2u);  // root and d
}

// Set-id bits of special files follow Linux's rules for non-directories:
// chown clears setuid (and group-executable setgid), and a creator outside a
// setgid directory's group gets no group-executable setgid.
TEST_F(MetaStoreTest, SpecialFilesSetIdBits) {
  Ino d = mkdir("d", kRootIno, 02777);
  ASSERT_OK(s().setattr(root(), d, SetAttr{.gid = 500}));
  ASSERT_OK(s().setattr(root(), d, SetAttr{.mode = 02777}));
  auto outsider = s().mknod(user(1000, 100), d, "p1", InodeType::kFifo, 02750, 0);
  ASSERT_OK(outsider);
  EXPECT_EQ(outsider->gid, 500u);
  EXPECT_EQ(outsider->mode, 0750u);
  auto no_exec = s().mknod(user(1000, 100), d, "p2", InodeType::kFifo, 02740, 0);  // not group-executable: kept
  EXPECT_EQ(no_exec->mode, 02740u);
  auto member = s().mknod(user(1000, 100, {500}), d, "p3", InodeType::kFifo, 02750, 0);
  EXPECT_EQ(member->mode, 02750u);
  auto dev = s().mknod(root(), d, "dev", InodeType::kCharDevice, 06755, 7);
  ASSERT_OK(dev);
  auto chowned = s().setattr(root(), dev->ino, SetAttr{.uid = 1000});
  ASSERT_OK(chowned);
  EXPECT_EQ(chowned->mode, 0755u);
}

// As Linux, any chown of a non-directory clears setuid (and group-executable
// setgid), also one that keeps the ids; a directory keeps them.
TEST_F(MetaStoreTest, ChownToTheSameIdsClearsSetuidToo) {
  Context owner = user(1000, 500);
  Ino w = mkdir("w", kRootIno, 0777);
  Ino f = create("f", w, 06755, owner);
  auto same = s().setattr(owner, f, SetAttr{.uid = 1000, .gid = 500});
  ASSERT_OK(same);
  EXPECT_EQ(same->mode, 0755u);
  ASSERT_OK(s().setattr(owner, f, SetAttr{.mode = 04755}));
  auto group_only = s().setattr(owner, f, SetAttr{.gid = 500});
  ASSERT_OK(group_only);
  EXPECT_EQ(group_only->mode, 0755u);
  Ino d = mkdir("d", w, 0755, owner);
  ASSERT_OK(s().setattr(owner, d, SetAttr{.mode = 02755}));
  auto dir = s().setattr(owner, d, SetAttr{.uid = 1000});
  ASSERT_OK(dir);
  EXPECT_EQ(dir->mode, 02755u);
}

// A write by someone other than root drops setuid (and setgid when the group
// may execute), as Linux: through the mount the kernel asks for it with a
// setattr under the writer's credentials, which needs write access, not
// ownership; natively the length report after a write, or a truncate, does
// it. A write open that writes nothing leaves them (and ctime).
TEST_F(MetaStoreTest, WritersOtherThanRootDropSetuidAndSetgid) {
  Context bob = user(2000, 100), carol = user(3000, 300);
  Ino f = create("f", kRootIno, 0644);
  ASSERT_OK(s().setattr(root(), f, SetAttr{.uid = 1000, .gid = 100}));
  auto reset = [&] { ASSERT_OK(s().setattr(root(), f, SetAttr{.mode = 06775})); };
  auto mode = [&] { auto n = s().getattr(root(), f); return n ? n->mode : 0u; };
  reset();
  auto dropped = s().setattr(bob, f, SetAttr{.mode = 0775});
  ASSERT_OK(dropped);
  EXPECT_EQ(dropped->mode, 0775u);
  EXPECT_CODE(s().setattr(bob, f, SetAttr{.mode = 0777}), Code::kNotPermitted);  // more than dropping
  EXPECT_CODE(s().setattr(bob, f, SetAttr{.mode = 0775}), Code::kNotPermitted);  // nothing to drop
  reset();
  ASSERT_OK(s().setattr(bob, f, SetAttr{.mode = 02775}));
  EXPECT_EQ(mode(), 02775u);
  reset();
  EXPECT_CODE(s().setattr(carol, f, SetAttr{.mode = 0775}), Code::kPermissionDenied);  // may not write
  EXPECT_EQ(mode(), 06775u);
  // Only a regular file's: a directory's setgid (the group its new entries
  // take) is its owner's to change, whoever may write in it.
  Ino shared = mkdir("shared", kRootIno, 0777);
  ASSERT_OK(s().setattr(root(), shared, SetAttr{.uid = 1000, .gid = 100}));
  ASSERT_OK(s().setattr(root(), shared, SetAttr{.mode = 02777}));
  EXPECT_CODE(s().setattr(bob, shared, SetAttr{.mode = 0777}), Code::kNotPermitted);
  EXPECT_EQ(s().getattr(root(), shared)->mode, 02777u);
  ASSERT_OK(s().setattr(bob, f, SetAttr{.size = 0}));
  EXPECT_EQ(mode(), 0775u);
  reset();
  const int64_t ctime_before = s().getattr(root(), f)->ctime_ns;
  auto o = s().open(on_connection(bob, 7), f, OpenFlags{.read = false, .write = true});
  ASSERT_OK(o);
  auto c = s().create(on_connection(bob, 7), kRootIno, "f", 0644, false, OpenFlags{.read = false, .write = true});
  ASSERT_OK(c);
  EXPECT_EQ(mode(), 06775u);  // opened, nothing written yet
  EXPECT_EQ(s().getattr(root(), f)->ctime_ns, ctime_before);
  ASSERT_OK(s().close(on_connection(bob, 7), f, c->session_id));
  ASSERT_OK(s().report_length(on_connection(bob, 7), f, o->session_id, 1));  // after a write
  EXPECT_EQ(mode(), 0775u);
  ASSERT_OK(s().setattr(root(), f, SetAttr{.mode = 06765}));  // setgid without group execute stays
  ASSERT_OK(s().report_length(on_connection(bob, 7), f, o->session_id, 1));
  EXPECT_EQ(mode(), 02765u);
  ASSERT_OK(s().close(on_connection(bob, 7), f, o->session_id));
  reset();
  auto r = s().open(on_connection(root(), 7), f, OpenFlags{.read = false, .write = true});
  ASSERT_OK(r);
  ASSERT_OK(s().report_length(on_connection(root(), 7), f, r->session_id, 2));
  ASSERT_OK(s().setattr(root(), f, SetAttr{.size = 0}));
  EXPECT_EQ(mode(), 06775u);  // root keeps them (CAP_FSETID)
  ASSERT_OK(s().close(on_connection(root(), 7), f, r->session_id));
}

// As Linux since 6.2 (setattr_should_drop_sgid): a truncate, write or chown
// by a caller outside the file's group drops its setgid even when the group
// may not execute (a member's keeps it, and root's).
TEST_F(MetaStoreTest, ACallerOutsideTheFilesGroupDropsItsSetgid) {
  Context alice = user(1000, 100);
  Ino w = mkdir("w", kRootIno, 0777);
  Ino f = create("f", w, 0644, alice);
  auto mode = [&] { auto n = s().getattr(root(), f); return n ? n->mode : 0u; };
  auto reset = [&] {
    ASSERT_OK(s().setattr(root(), f, SetAttr{.gid = 500}));
    ASSERT_OK(s().setattr(root(), f, SetAttr{.mode = 02644}));
  };
  reset();
  ASSERT_OK(s().setattr(alice, f, SetAttr{.size = 0}));
  EXPECT_EQ(mode(), 0644u) << "truncate";
  reset();
  auto o = s().open(on_connection(alice, 7), f, OpenFlags{.read = false, .write = true});
  ASSERT_OK(o);
  ASSERT_OK(s().report_length(on_connection(alice, 7), f, o->session_id, 1));
  EXPECT_EQ(mode(), 0644u) << "write";
  ASSERT_OK(s().close(on_connection(alice, 7), f, o->session_id));
  reset();
  ASSERT_OK(s().setattr(alice, f, SetAttr{.gid = 100}));
  EXPECT_EQ(mode(), 0644u) << "chown by the owner, to her group, from one she is not in";
  reset();
  ASSERT_OK(s().setattr(user(1000, 100, {500}), f, SetAttr{.size = 0}));
  EXPECT_EQ(mode(), 02644u) << "a member's truncate keeps it";
  ASSERT_OK(s().setattr(root(), f, SetAttr{.gid = 500}));
  EXPECT_EQ(mode(), 02644u) << "root's chown keeps it";
}

// open(2) of an existing file checks what its access mode needs, with
// O_CREAT too: read and write for O_RDWR (the create request carries both).
TEST_F(MetaStoreTest, CreateOfAnExistingFileChecksTheOpensAccess) {
  Context alice = on_connection(user(1000, 1000), 7);
  create("wo", kRootIno, 0222);  // by root: -w--w--w-
  create("ro", kRootIno, 0444);
  const OpenFlags rdwr{.read = true, .write = true}, wronly{.read = false, .write = true};
  EXPECT_CODE(s().create(alice, kRootIno, "wo", 0644, false, rdwr), Code::kPermissionDenied);
  EXPECT_CODE(s().create(alice, kRootIno, "ro", 0644, false, rdwr), Code::kPermissionDenied);
  EXPECT_CODE(s().create(alice, kRootIno, "ro", 0644, false, wronly), Code::kPermissionDenied);
  auto w = s().create(alice, kRootIno, "wo", 0644, false, wronly);
  ASSERT_OK(w);
  EXPECT_NE(w->session_id, 0u);
  ASSERT_OK(s().close(alice, w->inode.ino, w->session_id));
  // Not for writing: for reading, whatever the flags say (an old client's create).
  EXPECT_CODE(s().create(alice, kRootIno, "wo", 0644, false, OpenFlags{.read = false, .write = false}),
              Code::kPermissionDenied);
  auto r = s().create(alice, kRootIno, "ro", 0644, false, OpenFlags{.read = false, .write = false});
  ASSERT_OK(r);
  EXPECT_EQ(r->session_id, 0u);
  // A new file is the creator's to open however it asks, whatever its mode.
  ASSERT_OK(s().setattr(root(), kRootIno, SetAttr{.mode = 0777}));
  auto made = s().create(alice, kRootIno, "new", 0000, false, rdwr);
  ASSERT_OK(made);
  ASSERT_OK(s().close(alice, made->inode.ino, made->session_id));
}

// mkdir takes no setuid or setgid from the requested mode (Linux masks it
// with S_IRWXUGO | S_ISVTX); setgid comes from a setgid parent only.
TEST_F(MetaStoreTest, MkdirTakesNoSetIdBitsFromTheMode) {
  Ino pub = mkdir("pub", kRootIno, 0777);
  auto d = s().mkdir(user(1000, 1000), pub, "d", 07755);
  ASSERT_OK(d);
  EXPECT_EQ(d->mode, 01755u);
  Ino sgid = mkdir("sgid", kRootIno, 0777);
  ASSERT_OK(s().setattr(root(), sgid, SetAttr{.mode = 02777}));
  auto inherits = s().mkdir(user(1000, 1000), sgid, "d", 04755);
  ASSERT_OK(inherits);
  EXPECT_EQ(inherits->mode, 02755u);
}

// A meta server with special files off refuses mknod as before they existed.
class NoSpecialFilesTest : public StoreTest {
 protected:
  StoreOptions options() override {
    StoreOptions o = StoreTest::options();
    o.special_files = false;
    return o;
  }
};

TEST_F(NoSpecialFilesTest, MknodIsRefused) {
  EXPECT_CODE(s().mknod(root(), kRootIno, "p", InodeType::kFifo, 0644, 0), Code::kNotPermitted);
  EXPECT_CODE(s().lookup(root(), kRootIno, "p"), Code::kNotFound);
}

TEST_F(MetaStoreTest, SetattrRules) {
  Context alice = user(1000, 100, {300}), bob = user(2000, 200);
  Ino d = mkdir("d", kRootIno, 0777);
  Ino f = create("f", d, 06755, alice);
  EXPECT_EQ(s().getattr(root(), f)->mode, 06755u);
  EXPECT_CODE(s().setattr(bob, f, SetAttr{.mode = 0777}), Code::kNotPermitted);
  EXPECT_CODE(s().setattr(alice, f, SetAttr{.uid = 2000}), Code::kNotPermitted);
  EXPECT_CODE(s().setattr(alice, f, SetAttr{.gid = 200}), Code::kNotPermitted);
  auto g = s().setattr(alice, f, SetAttr{.gid = 300});  // a group alice belongs to
  ASSERT_OK(g);
  EXPECT_EQ(g->gid, 300u);
  EXPECT_EQ(g->mode, 0755u);  // chown cleared setuid and (group-exec) setgid
  auto m = s().setattr(alice, f, SetAttr{.mode = 02755});
  EXPECT_EQ(m->mode, 02755u);
  auto m2 = s().setattr(user(1000, 100), f, SetAttr{.mode = 02755});  // no longer in group 300
  EXPECT_EQ(m2->mode, 0755u);
  auto o = s().setattr(root(), f, SetAttr{.uid = 2000});
  EXPECT_EQ(o->uid, 2000u);
  // size: needs write permission
  EXPECT_CODE(s().setattr(alice, f, SetAttr{.size = 10}), Code::kPermissionDenied);
  auto t = s().setattr(bob, f, SetAttr{.size = 12345});
  ASSERT_OK(t);
  EXPECT_EQ(t->size, 12345u);
  // A truncate's length applies only if the file is still as long as it read.
  EXPECT_CODE(s().setattr(bob, f, SetAttr{.size = 100, .expect_size = 99999}), Code::kStaleHandle);
  EXPECT_EQ(s().getattr(root(), f)->size, 12345u);
  const int64_t ctime = s().getattr(root(), f)->ctime_ns;
  EXPECT_CODE(s().setattr(bob, f, SetAttr{.size = 100, .expect_size = 12345, .expect_ctime_ns = ctime - 1}),
              Code::kStaleHandle);
  auto cut = s().setattr(bob, f, SetAttr{.size = 100, .expect_size = 12345, .expect_ctime_ns = ctime});
  ASSERT_OK(cut);
  EXPECT_EQ(cut->size, 100u);
  EXPECT_CODE(s().setattr(root(), d, SetAttr{.size = 1}), Code::kIsDirectory);
  // times: explicit only for the owner, "now" for writers too
  EXPECT_CODE(s().setattr(alice, f, SetAttr{.mtime_ns = 5}), Code::kNotPermitted);
  auto tm = s().setattr(bob, f, SetAttr{.atime_ns = 7, .mtime_ns = 5});
  EXPECT_EQ(tm->mtime_ns, 5);
  EXPECT_EQ(tm->atime_ns, 7);
  EXPECT_CODE(s().setattr(alice, f, SetAttr{.mtime_ns = SetAttr::kTimeNow}), Code::kPermissionDenied);
  ASSERT_OK(s().setattr(root(), f, SetAttr{.mode = 0666}));
  auto now = s().setattr(alice, f, SetAttr{.mtime_ns = SetAttr::kTimeNow});
  ASSERT_OK(now);
  EXPECT_GT(now->mtime_ns, 5);
}

TEST_F(MetaStoreTest, DirectoryTimesAndUtimesToThePast) {
  Ino d = mkdir("d");
  auto before = s().getattr(root(), d);
  auto past = s().setattr(root(), d, SetAttr{.mtime_ns = 1000});
  ASSERT_OK(past);
  EXPECT_EQ(past->mtime_ns, 1000);
  EXPECT_EQ(s().getattr(root(), d)->mtime_ns, 1000);
  create("f", d);
  EXPECT_GE(s().getattr(root(), d)->mtime_ns, before->mtime_ns);
  mkdir("sub", d);
  EXPECT_EQ(s().getattr(root(), d)->nlink, 3u);
  ASSERT_OK(s().setattr(root(), d, SetAttr{.mode = 0700}));
  EXPECT_EQ(s().getattr(root(), d)->nlink, 3u);  // chmod keeps the subdirectory count
  // Set to the future, then changed: "now", as Linux sets it (not frozen).
  const int64_t future = before->mtime_ns + int64_t{3600} * 1'000'000'000;
  ASSERT_OK(s().setattr(root(), d, SetAttr{.mtime_ns = future}));
  create("g", d);
  auto changed = s().getattr(root(), d);
  EXPECT_LT(changed->mtime_ns, future) << "a change in a directory dated ahead left its mtime there";
  EXPECT_GE(changed->mtime_ns, before->mtime_ns);
  EXPECT_LT(changed->ctime_ns, future);
}

TEST_F(MetaStoreTest, SetgidDirectoryGroupInheritance) {
  Ino d = mkdir("shared", kRootIno, 02777);
  ASSERT_OK(s().setattr(root(), d, SetAttr{.gid = 500}));
  ASSERT_OK(s().setattr(root(), d, SetAttr{.mode = 02777}));
  auto sub = s().mkdir(user(1000, 100), d, "sub", 0755);
  ASSERT_OK(sub);
  EXPECT_EQ(sub->gid, 500u);
  EXPECT_EQ(sub->mode & kModeSetGid, kModeSetGid);
  Ino f = create("f", d, 0644, user(1000, 100));
  EXPECT_EQ(s().getattr(root(), f)->gid, 500u);
}

TEST_F(MetaStoreTest, LayoutInheritanceAndValidation) {
  Ino d = mkdir("ckpt");
  Layout l;
  l.chunk_bytes = 4 << 20;
  l.stripe_count = 8;
  l.chain_table_id = 3;
  ASSERT_OK(s().set_layout(root(), d, l));
  EXPECT_EQ(s().get_layout(root(), d)->chunk_bytes, 4u << 20);
  Ino sub = mkdir("sub", d);
  auto sl = s().get_layout(root(), sub);
  EXPECT_EQ(sl->chunk_bytes, 4u << 20);
  EXPECT_EQ(sl->stripe_count, 8u);
  EXPECT_EQ(sl->chain_table_id, 3u);
  Ino f1 = create("f1", sub), f2 = create("f2", sub);
  auto a = s().getattr(root(), f1), b = s().getattr(root(), f2);
  EXPECT_EQ(a->layout.chunk_bytes, 4u << 20);
  EXPECT_EQ(a->layout.stripe_count, 8u);
  EXPECT_LT(a->layout.first_chain, 32u);
  EXPECT_NE(a->layout.shuffle_seed, b->layout.shuffle_seed);  // per-file seed
  // Changing the directory later does not touch existing files.
  l.chunk_bytes = 64 << 10;
  ASSERT_OK(s().set_layout(root(), sub, l));
  EXPECT_EQ(s().getattr(root(), f1)->layout.chunk_bytes, 4u << 20);
  EXPECT_EQ(s().getattr(root(), create("f3", sub))->layout.chunk_bytes, 64u << 10);
  Layout bad = l;
  bad.chunk_bytes = 3 << 20;
  EXPECT_CODE(s().set_layout(root(), d, bad), Code::kInvalidArgument);
  bad.chunk_bytes = 32 << 10;
  EXPECT_CODE(s().set_layout(root(), d, bad), Code::kInvalidArgument);
  bad.chunk_bytes = 128 << 20;
  EXPECT_CODE(s().set_layout(root(), d, bad), Code::kInvalidArgument);
  bad = l;
  bad.stripe_count = 0;
  EXPECT_CODE(s().set_layout(root(), d, bad), Code::kInvalidArgument);
  EXPECT_CODE(s().set_layout(root(), f1, l), Code::kNotDirectory);
  EXPECT_CODE(s().set_layout(user(1000, 100), d, l), Code::kNotPermitted);
}

// A directory on a chain table that does not exist holds files that can be
// neither written nor collected: with the cluster's routing (the server's
// check asks mgmtd) such a table is refused to everyone; without it only root
// may name a table meta cannot vouch for.
TEST_F(MetaStoreTest, LayoutsNameAnExistingChainTable) {
  Context alice = user(1000, 100);
  Ino d = mkdir("d");
  ASSERT_OK(s().setattr(root(), d, SetAttr{.uid = 1000, .gid = 100}));
  Layout l;
  l.chain_table_id = 9;
  EXPECT_CODE(s().set_layout(alice, d, l), Code::kNotPermitted);
  EXPECT_EQ(s().get_layout(root(), d)->chain_table_id, s().options().chain_table_id);
  l.chain_table_id = s().options().chain_table_id;
  l.stripe_count = 2;
  ASSERT_OK(s().set_layout(alice, d, l));
  l.chain_table_id = 9;
  ASSERT_OK(s().set_layout(root(), d, l));  // root's choice
  l.stripe_count = 3;
  ASSERT_OK(s().set_layout(alice, d, l));  // the directory's table stays usable to its owner
  EXPECT_EQ(s().get_layout(root(), d)->stripe_count, 3u);

  std::vector<uint32_t> asked;
  s().set_chain_table_check([&](uint32_t id) -> Result<void> {
    asked.push_back(id);
    if (id != 1 && id != 2) return error(Code::kInvalidArgument, "chain table {} does not exist", id);
    return {};
  });
  l.chain_table_id = 7;
  EXPECT_CODE(s().set_layout(root(), d, l), Code::kInvalidArgument);
  EXPECT_CODE(s().set_layout(alice, d, l), Code::kInvalidArgument);
  l.chain_table_id = 2;
  ASSERT_OK(s().set_layout(alice, d, l));
  EXPECT_EQ(s().get_layout(root(), d)->chain_table_id, 2u);
  EXPECT_EQ(asked, (std::vector<uint32_t>{7, 7, 2}));

  // mgmtd away: the directory's own table and the default need no asking (a
  // retry of one that committed answers from its record: retry_test); another table is kBusy
  // (retryable at this meta server, not a reason to fail over).
  s().set_chain_table_check([&](uint32_t id) -> Result<void> {
    asked.push_back(id);
    return error(Code::kUnavailable, "mgmtd unreachable");
  });
  l.stripe_count = 4;
  ASSERT_OK(s().set_layout(alice, d, l));
  l.chain_table_id = s().options().chain_table_id;
  ASSERT_OK(s().set_layout(alice, d, l));
  l.chain_table_id = 2;
  EXPECT_CODE(s().set_layout(alice, d, l), Code::kBusy);
  EXPECT_EQ(asked, (std::vector<uint32_t>{7, 7, 2, 2}));
}

TEST_F(MetaStoreTest, StatfsCountsInodesAndAsksCapacity) {
  auto st = s().statfs(root());
  ASSERT_OK(st);
  EXPECT_EQ(st->inodes_used, 1u);
  mkdir("a");
  create("b");
  ASSERT_OK(s().symlink(root(), kRootIno, "c", "b"));
  EXPECT_EQ(s().statfs(root())->inodes_used, 4u);
  ASSERT_OK(s().unlink(root(), kRootIno, "b"));
  EXPECT_EQ(s().statfs(root())->inodes_used, 3u);
}

// statfs tells the store's identity (random, made once, kept across
// restarts) and a mark that every id handed out is below and never goes down
// (storage/orphan_sweep.h relies on both).
TEST_F(MetaStoreTest, StatfsTellsTheStoreIdAndTheIssuedIdMark) {
  auto first = s().statfs(root());
  ASSERT_OK(first);
  EXPECT_NE(first->store_id, 0u);
  Ino f = create("f");
  auto second = s().statfs(root());
  EXPECT_GT(second->ids_issued_below, f);
  EXPECT_GE(second->ids_issued_below, first->ids_issued_below);
  ASSERT_NO_FATAL_FAILURE(open());
  auto again = s().statfs(root());
  EXPECT_EQ(again->store_id, first->store_id);
  EXPECT_GE(again->ids_issued_below, second->ids_issued_below);
}

// What meta reports to mgmtd: the persisted mark is above every id handed
// out, and an accepted store change raises the next id past a floor, durably
// (`weft serve meta --accept-store-change`, mgmt/cluster_state.h).
TEST_F(MetaStoreTest, RaisingTheNextIdSkipsEveryIdBelowTheFloorAcrossRestarts) {
  Ino f = create("f");
  EXPECT_GT(s().ids_reserved_below(), f);
  EXPECT_GE(s().ids_reserved_below(), s().statfs(root())->ids_issued_below);
  const uint64_t floor = (uint64_t{1} << 32) + 12345;
  ASSERT_OK(s().raise_next_id(floor));
  EXPECT_GE(s().ids_reserved_below(), floor);
  Ino g = create("g");
  EXPECT_EQ(g, floor) << "the next id is the floor itself";
  EXPECT_GT(s().statfs(root())->ids_issued_below, g);
  ASSERT_OK(s().raise_next_id(100));  // a lower floor changes nothing
  Ino h = create("h");
  EXPECT_GT(h, g);
  ASSERT_NO_FATAL_FAILURE(open());
  Ino i = create("i");
  EXPECT_GT(i, h) << "the raise survived the restart";
  const uint64_t store = s().store_id();
  EXPECT_EQ(s().statfs(root())->store_id, store);
}

// An accepted store change gives the store a new id (`weft serve meta
// --accept-store-change`): kept across restarts, told by statfs, and the
// namespace is the same.
TEST_F(MetaStoreTest, RenewingTheStoreIdKeepsTheNamespaceAndSurvivesARestart) {
  Ino f = create("f");
  const uint64_t old_id = s().store_id();
  ASSERT_OK(s().renew_store_id());
  const uint64_t new_id = s().store_id();
  EXPECT_NE(new_id, old_id);
  EXPECT_NE(new_id, 0u);
  EXPECT_EQ(s().statfs(root())->store_id, new_id);
  ASSERT_NO_FATAL_FAILURE(open());
  EXPECT_EQ(s().store_id(), new_id);
  EXPECT_EQ(s().lookup(root(), kRootIno, "f")->ino, f);
}

TEST_F(MetaStoreTest, StateSurvivesReopenAndIdsNeverRepeat) {
  Ino d = mkdir("d");
  Ino f = create("f", d);
  ASSERT_NO_FATAL_FAILURE(open());
  EXPECT_EQ(s().lookup(root(), d, "f")->ino, f);
  Ino g = create("g", d);
  EXPECT_GT(g, f);
  EXPECT_EQ(s().statfs(root())->inodes_used, 4u);
}

TEST_F(MetaStoreTest, MetricsCountOperations) {
  create("m");
  EXPECT_CODE(s().create(root(), kRootIno, "m", 0644, true, false), Code::kExists);
  auto& ops = registry_.counter("weft_meta_ops_total", "", {{"op", "create"}});
  auto& errs = registry_.counter("weft_meta_op_errors_total", "", {{"op", "create"}});
  EXPECT_EQ(ops.value(), 2u);
  EXPECT_EQ(errs.value(), 1u);
  EXPECT_NE(registry_.prometheus_text().find("weft_meta_op_latency_us"), std::string::npos);
}

}  // namespace
}  // namespace weft::meta::testing
