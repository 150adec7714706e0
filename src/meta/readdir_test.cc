#include <atomic>
#include <set>
#include <thread>

#include "meta/test_util.h"

namespace weft::meta::testing {
namespace {

using ReaddirTest = StoreTest;

std::vector<std::string> read_all(MetaStore& s, Ino dir, size_t page) {
  std::vector<std::string> names;
  std::string cookie;
  for (;;) {
    auto p = s.readdir(root(), dir, cookie, page);
    EXPECT_TRUE(p.has_value()) << p.error();
    if (!p) break;
    for (auto& e : p->entries) names.push_back(e.name);
    cookie = p->cookie;
    if (p->eof) break;
  }
  return names;
}

TEST_F(ReaddirTest, PagesWithAttributes) {
  Ino d = mkdir("d");
  for (int i = 0; i < 25; ++i) create(fmt::format("f{:02}", i), d);
  mkdir("sub", d);
  auto p = s().readdir(root(), d, "", 10);
  ASSERT_OK(p);
  ASSERT_EQ(p->entries.size(), 10u);
  EXPECT_FALSE(p->eof);
  EXPECT_EQ(p->entries[0].name, "f00");
  EXPECT_EQ(p->entries[0].attr.ino, p->entries[0].ino);
  EXPECT_TRUE(p->entries[0].attr.is_file());
  auto all = read_all(s(), d, 7);
  ASSERT_EQ(all.size(), 26u);
  EXPECT_EQ(all.back(), "sub");
  auto last = s().readdir(root(), d, "f24", 10);
  ASSERT_EQ(last->entries.size(), 1u);
  EXPECT_TRUE(last->entries[0].attr.is_dir());
  EXPECT_EQ(last->entries[0].attr.nlink, 2u);
  EXPECT_TRUE(last->eof);
  EXPECT_CODE(s().readdir(root(), d, "", 0), Code::kInvalidArgument);
  EXPECT_CODE(s().readdir(root(), create("plain"), "", 10), Code::kNotDirectory);
  auto exact = s().readdir(root(), mkdir("two"), "", 10);
  EXPECT_TRUE(exact->eof);
}

// Read permission on a directory without search permission lists it as
// getdents(2) does: names, inode numbers and types, no attributes (a stat of
// an entry is refused there, and a symlink's target is an attribute too).
TEST_F(ReaddirTest, ACallerWhoMayNotSearchTheDirectoryGetsNoAttributes) {
  Ino d = mkdir("readonly");
  Ino f = create("f", d);
  ASSERT_OK(s().symlink(root(), d, "link", "secret-target"));
  ASSERT_OK(s().setattr(root(), d, SetAttr{.mode = 0744}));
  Context bob = user(2000, 200);
  EXPECT_CODE(s().lookup(bob, d, "f"), Code::kPermissionDenied);
  auto p = s().readdir(bob, d, "", 10);
  ASSERT_OK(p);
  ASSERT_EQ(p->entries.size(), 2u);
  EXPECT_EQ(p->entries[0].name, "f");
  EXPECT_EQ(p->entries[0].ino, f);
  EXPECT_EQ(p->entries[0].type, InodeType::kFile);
  EXPECT_EQ(p->entries[1].type, InodeType::kSymlink);
  for (const auto& e : p->entries) {
    EXPECT_EQ(e.attr.ino, 0u) << e.name;
    EXPECT_EQ(e.attr.symlink_target, "") << e.name;
  }
  // The owner (root) may search it: attributes.
  auto mine = s().readdir(root(), d, "", 10);
  ASSERT_OK(mine);
  EXPECT_EQ(mine->entries[1].attr.symlink_target, "secret-target");
  // Search permission alone (0711) lists nothing.
  ASSERT_OK(s().setattr(root(), d, SetAttr{.mode = 0711}));
  EXPECT_CODE(s().readdir(bob, d, "", 10), Code::kPermissionDenied);
}

TEST_F(ReaddirTest, CookieSurvivesRemovalOfLastEntry) {
  Ino d = mkdir("d");
  for (auto n : {"a", "b", "c", "d"}) create(n, d);
  auto p = s().readdir(root(), d, "", 2);
  EXPECT_EQ(p->cookie, "b");
  ASSERT_OK(s().unlink(root(), d, "b"));
  ASSERT_OK(s().unlink(root(), d, "a"));
  create("bb", d);
  auto q = s().readdir(root(), d, p->cookie, 10);
  std::vector<std::string> names;
  for (auto& e : q->entries) names.push_back(e.name);
  EXPECT_EQ(names, (std::vector<std::string>{"bb", "c", "d"}));
}

// Surviving entries (never removed) are returned exactly once while other
// threads insert and remove entries.
TEST_F(ReaddirTest, NoSkipsOrRepeatsUnderConcurrentChanges) {
  Ino d = mkdir("d");
  std::set<std::string> stable;
  for (int i = 0; i < 300; ++i) {
    std::string n = fmt::format("s{:04}", i * 3);
    create(n, d);
    stable.insert(n);
  }
  std::atomic<bool> stop{false};
  std::vector<std::thread> writers;
  for (int t = 0; t < 2; ++t) {
    writers.emplace_back([&, t] {
      for (int i = 0; !stop.load(); ++i) {
        std::string n = fmt::format("s{:04}{}", (i * 7 + t) % 900, t ? "x" : "y");
        if (!s().create(root(), d, n, 0644, true, false)) continue;
        if (i % 2) (void)s().unlink(root(), d, n);
      }
    });
  }
  for (int round = 0; round < 10; ++round) {
    auto names = read_all(s(), d, 13);
    std::set<std::string> seen;
    for (auto& n : names) {
      EXPECT_TRUE(seen.insert(n).second) << "repeated " << n;
    }
    for (auto& n : stable) EXPECT_TRUE(seen.contains(n)) << "skipped " << n;
  }
  stop = true;
  for (auto& w : writers) w.join();
}

}  // namespace
}  // namespace weft::meta::testing
