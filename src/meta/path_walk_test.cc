#include "meta/path_walk.h"

#include "meta/test_util.h"

namespace weft::meta::testing {
namespace {

using PathWalkTest = StoreTest;

TEST_F(PathWalkTest, ResolvesComponentsDotsAndSymlinks) {
  Ino a = mkdir("a");
  Ino b = mkdir("b", a);
  Ino f = create("f", b);
  EXPECT_EQ(resolve_path(s(), root(), "/")->ino, kRootIno);
  EXPECT_EQ(resolve_path(s(), root(), "/a/b/f")->ino, f);
  EXPECT_EQ(resolve_path(s(), root(), "//a/./b/../b//f")->ino, f);
  EXPECT_EQ(resolve_path(s(), root(), "/..")->ino, kRootIno);
  ASSERT_OK(s().symlink(root(), a, "rel", "b/f"));
  ASSERT_OK(s().symlink(root(), kRootIno, "abs", "/a/b"));
  EXPECT_EQ(resolve_path(s(), root(), "/a/rel")->ino, f);
  EXPECT_EQ(resolve_path(s(), root(), "/abs/f")->ino, f);
  auto nofollow = resolve_path(s(), root(), "/a/rel", false);
  ASSERT_OK(nofollow);
  EXPECT_TRUE(nofollow->is_symlink());
  EXPECT_EQ(resolve_path(s(), root(), "/abs/", false)->ino, b);  // trailing slash follows
}

TEST_F(PathWalkTest, Errors) {
  Ino a = mkdir("a", kRootIno, 0700);
  create("f", a);
  EXPECT_CODE(resolve_path(s(), root(), "/a/missing"), Code::kNotFound);
  EXPECT_CODE(resolve_path(s(), root(), "/a/f/x"), Code::kNotDirectory);
  EXPECT_CODE(resolve_path(s(), root(), "/a/f/"), Code::kNotDirectory);
  EXPECT_CODE(resolve_path(s(), user(1000, 100), "/a/f"), Code::kPermissionDenied);
  EXPECT_CODE(resolve_path(s(), root(), "/" + std::string(256, 'x')), Code::kNameTooLong);
  EXPECT_CODE(resolve_path(s(), root(), std::string(4096, '/')), Code::kNameTooLong);
  EXPECT_CODE(resolve_path(s(), root(), ""), Code::kNotFound);
  EXPECT_CODE(resolve_path(s(), root(), "a"), Code::kInvalidArgument);
}

TEST_F(PathWalkTest, SymlinkLoopsStopAtForty) {
  ASSERT_OK(s().symlink(root(), kRootIno, "x", "y"));
  ASSERT_OK(s().symlink(root(), kRootIno, "y", "x"));
  EXPECT_CODE(resolve_path(s(), root(), "/x"), Code::kLoop);
  // A chain of exactly 40 links resolves; 41 does not.
  Ino target = create("t");
  for (int i = 0; i < 41; ++i)
    ASSERT_OK(s().symlink(root(), kRootIno, fmt::format("l{}", i), i == 0 ? std::string("t") : fmt::format("l{}", i - 1)));
  EXPECT_EQ(resolve_path(s(), root(), "/l39")->ino, target);
  EXPECT_CODE(resolve_path(s(), root(), "/l40"), Code::kLoop);
}

}  // namespace
}  // namespace weft::meta::testing
