#include "meta/permission.h"

#include <gtest/gtest.h>

namespace weft::meta {
namespace {

Inode node(uint32_t mode, uint32_t uid, uint32_t gid, InodeType type = InodeType::kFile) {
  Inode n;
  n.ino = 10;
  n.type = type;
  n.mode = mode;
  n.uid = uid;
  n.gid = gid;
  return n;
}

TEST(Permission, OwnerGroupOtherBits) {
  Inode f = node(0640, 1000, 100);
  EXPECT_TRUE(check_access(f, {1000, 1}, kAccessRead | kAccessWrite).has_value());
  EXPECT_FALSE(check_access(f, {1000, 1}, kAccessExec).has_value());
  EXPECT_TRUE(check_access(f, {2000, 100}, kAccessRead).has_value());
  EXPECT_FALSE(check_access(f, {2000, 100}, kAccessWrite).has_value());
  EXPECT_TRUE(check_access(f, {2000, 5, {7, 100}}, kAccessRead).has_value());  // supplementary
  EXPECT_EQ(check_access(f, {2000, 5}, kAccessRead).error().code(), Code::kPermissionDenied);
}

TEST(Permission, OwnerClassIsExclusive) {
  // The owner gets owner bits even if group bits would allow more.
  Inode f = node(0070, 1000, 100);
  EXPECT_FALSE(check_access(f, {1000, 100}, kAccessRead).has_value());
  EXPECT_TRUE(check_access(f, {2000, 100}, kAccessRead).has_value());
}

TEST(Permission, RootBypassesExceptExecOnFilesWithoutX) {
  Inode f = node(0000, 1000, 100);
  EXPECT_TRUE(check_access(f, Cred::root(), kAccessRead | kAccessWrite).has_value());
  EXPECT_FALSE(check_access(f, Cred::root(), kAccessExec).has_value());
  EXPECT_TRUE(check_access(node(0100, 1, 1), Cred::root(), kAccessExec).has_value());
  EXPECT_TRUE(check_access(node(0000, 1, 1, InodeType::kDirectory), Cred::root(), kAccessExec).has_value());
}

TEST(Permission, StickyDirectory) {
  Inode dir = node(01777, 0, 0, InodeType::kDirectory);
  Inode mine = node(0644, 1000, 100);
  EXPECT_TRUE(check_remove(dir, mine, {1000, 100}).has_value());
  EXPECT_EQ(check_remove(dir, mine, {2000, 100}).error().code(), Code::kNotPermitted);
  EXPECT_TRUE(check_remove(dir, mine, Cred::root()).has_value());
  Inode owned_dir = node(01777, 2000, 0, InodeType::kDirectory);
  EXPECT_TRUE(check_remove(owned_dir, mine, {2000, 100}).has_value());
  Inode plain = node(0777, 0, 0, InodeType::kDirectory);
  EXPECT_TRUE(check_remove(plain, mine, {2000, 100}).has_value());
  EXPECT_EQ(check_remove(node(0755, 0, 0, InodeType::kDirectory), mine, {1000, 100}).error().code(),
            Code::kPermissionDenied);
}

TEST(Permission, Names) {
  EXPECT_EQ(check_name("").error().code(), Code::kInvalidArgument);
  EXPECT_EQ(check_name("a/b").error().code(), Code::kInvalidArgument);
  EXPECT_EQ(check_name(std::string_view("a\0b", 3)).error().code(), Code::kInvalidArgument);
  EXPECT_EQ(check_name(std::string(256, 'x')).error().code(), Code::kNameTooLong);
  EXPECT_TRUE(check_name(std::string(255, 'x')).has_value());
  EXPECT_TRUE(check_name("..").has_value());
}

}  // namespace
}  // namespace weft::meta
