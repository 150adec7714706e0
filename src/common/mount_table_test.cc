#include "common/mount_table.h"

#include <gtest/gtest.h>

#include <sstream>

namespace weft {
namespace {

TEST(MountTable, UnescapesOctalEscapesOnly) {
  EXPECT_EQ(unescape_mount_field("/mnt/a\\040b"), "/mnt/a b");
  EXPECT_EQ(unescape_mount_field("/x\\011\\012\\134y"), "/x\t\n\\y");
  EXPECT_EQ(unescape_mount_field("/x\\9yz"), "/x\\9yz");  // not octal: kept
  EXPECT_EQ(unescape_mount_field("/x\\04"), "/x\\04");     // too short: kept
}

TEST(MountTable, FindsTheLastMountOnAPoint) {
  std::istringstream mounts(
      "/dev/vda / ext4 rw 0 0\n"
      "tmpfs /mnt/w\\040x tmpfs rw 0 0\n"
      "weft /mnt/w\\040x fuse.weft rw,nosuid 0 0\n"
      "weft /mnt/other fuse.weft rw 0 0\n");
  auto m = find_in_mounts(mounts, "/mnt/w x");
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->type, "fuse.weft");
  std::istringstream again("/dev/vda / ext4 rw 0 0\n");
  EXPECT_FALSE(find_in_mounts(again, "/mnt/w x").has_value());
}

TEST(MountTable, MountinfoGivesTheDevice) {
  std::istringstream info(
      "22 1 252:1 / / rw,relatime shared:1 - ext4 /dev/vda rw\n"
      "90 22 0:38 / /mnt/w\\040x rw,nosuid,nodev shared:50 master:2 - fuse.weft weft rw,user_id=0\n");
  auto m = find_in_mountinfo(info, "/mnt/w x");
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->device, "0:38");
  EXPECT_EQ(m->type, "fuse.weft");
}

TEST(MountTable, ThisProcessSeesItsRoot) {
  auto root = mount_at("/");
  ASSERT_TRUE(root.has_value());
  EXPECT_FALSE(root->type.empty());
  auto dev = mounted_device("/");
  ASSERT_TRUE(dev.has_value()) << dev.error();
  EXPECT_NE(dev->find(':'), std::string::npos);
  EXPECT_FALSE(mounted_device("/no/such/mount/point").has_value());
}

}  // namespace
}  // namespace weft
