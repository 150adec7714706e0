// Unit tests of the FUSE mount's pure parts: -o parsing, the mapping of
// FUSE directory offsets to Weft readdir cookies.
#include <gtest/gtest.h>

#include <map>

#include "fuse/dir_cursor.h"
#include "fuse/mount_options.h"

namespace weft::fuse {
namespace {

TEST(MountOptions, Defaults) {
  auto m = parse_mount_options({});
  ASSERT_TRUE(m);
  EXPECT_DOUBLE_EQ(m->attr_timeout_s, 1.0);
  EXPECT_DOUBLE_EQ(m->entry_timeout_s, 1.0);
  EXPECT_DOUBLE_EQ(m->negative_timeout_s, 0.0);
  EXPECT_FALSE(m->writeback_cache);
  EXPECT_EQ(m->read_ahead_kb, 4096u);
  EXPECT_EQ(m->statahead_entries, 4096u);
  EXPECT_EQ(m->client_readahead_kb_or_default(), 0u);
  EXPECT_EQ(m->fuse_option_string(), "fsname=weft,subtype=weft,max_read=1048576");
}

TEST(MountOptions, OwnAndPassedThrough) {
  auto m = parse_mount_options({"attr_timeout=2.5,entry_timeout=0,negative_timeout=3", "writeback_cache,direct_io",
                                "allow_other,default_permissions,noatime,rw"});
  ASSERT_TRUE(m) << m.error();
  EXPECT_DOUBLE_EQ(m->attr_timeout_s, 2.5);
  EXPECT_DOUBLE_EQ(m->entry_timeout_s, 0.0);
  EXPECT_DOUBLE_EQ(m->negative_timeout_s, 3.0);
  EXPECT_TRUE(m->writeback_cache);
  EXPECT_TRUE(m->direct_io);
  EXPECT_TRUE(m->allow_other);
  EXPECT_TRUE(m->default_permissions);
  EXPECT_EQ(m->fuse_option_string(),
            "fsname=weft,subtype=weft,max_read=1048576,allow_other,default_permissions,noatime");
}

// Serving other users means the kernel checks permissions (it walks cached
// dentries without asking the daemon).
TEST(MountOptions, AllowOtherImpliesDefaultPermissions) {
  auto m = parse_mount_options({"allow_other,noatime"});
  ASSERT_TRUE(m) << m.error();
  EXPECT_TRUE(m->allow_other);
  EXPECT_TRUE(m->default_permissions);
  EXPECT_EQ(m->fuse_option_string(),
            "fsname=weft,subtype=weft,max_read=1048576,allow_other,noatime,default_permissions");
  auto alone = parse_mount_options({"ro"});
  ASSERT_TRUE(alone);
  EXPECT_FALSE(alone->default_permissions);
}

TEST(MountOptions, Errors) {
  EXPECT_FALSE(parse_mount_options({"attr_timeout=x"}));
  EXPECT_FALSE(parse_mount_options({"attr_timeout=-1"}));
  EXPECT_FALSE(parse_mount_options({"writeback_cache=1"}));
  EXPECT_FALSE(parse_mount_options({"max_read=4096"}));
  EXPECT_FALSE(parse_mount_options({"read_ahead_kb=lots"}));
  EXPECT_FALSE(parse_mount_options({"read_ahead_kb=2000000"}));
  EXPECT_FALSE(parse_mount_options({"statahead_entries=many"}));
  EXPECT_FALSE(parse_mount_options({"client_readahead_kb=-1"}));
  auto ra = parse_mount_options({"read_ahead_kb=0,statahead_entries=0,client_readahead_kb=16384"});
  ASSERT_TRUE(ra);
  EXPECT_EQ(ra->read_ahead_kb, 0u);
  EXPECT_EQ(ra->statahead_entries, 0u);
  EXPECT_EQ(ra->client_readahead_kb_or_default(), 16384u);
  auto dio = parse_mount_options({"direct_io"});
  ASSERT_TRUE(dio);
  EXPECT_EQ(dio->client_readahead_kb_or_default(), 16384u) << "no kernel read-ahead with direct_io";
  auto dio0 = parse_mount_options({"direct_io,client_readahead_kb=0"});
  ASSERT_TRUE(dio0);
  EXPECT_EQ(dio0->client_readahead_kb_or_default(), 0u);
  auto e = parse_mount_options({"entry_timeout=abc"});
  ASSERT_FALSE(e);
  EXPECT_NE(e.error().message().find("entry_timeout=abc"), std::string::npos);
}

// A directory of n entries served in pages of `page` entries; cookies are
// the index of the next entry as text.
struct FakeDir {
  int n = 0;
  int page = 0;
  int calls = 0;
  std::string suffix;  // added to every name: what changed since a page was fetched
  Result<meta::DirPage> fetch(std::string_view cookie) {
    ++calls;
    int start = cookie.empty() ? 0 : std::stoi(std::string(cookie));
    meta::DirPage p;
    for (int i = start; i < std::min(n, start + page); ++i)
      p.entries.push_back(meta::DirEntry{fmt::format("f{}{}", i, suffix), meta::Ino(i + 100)});
    int next = std::min(n, start + page);
    p.cookie = std::to_string(next);
    p.eof = next >= n;
    return p;
  }
};

TEST(DirCursor, SequentialOneFetchPerPage) {
  FakeDir d{1000, 64};
  DirCursor c;
  auto fetch = [&](std::string_view k) { return d.fetch(k); };
  for (int i = 0; i < 1000; ++i) {
    auto e = c.at(i, fetch);
    ASSERT_TRUE(e);
    ASSERT_NE(*e, nullptr);
    EXPECT_EQ((*e)->name, fmt::format("f{}", i));
  }
  auto end = c.at(1000, fetch);
  ASSERT_TRUE(end);
  EXPECT_EQ(*end, nullptr);
  EXPECT_EQ(d.calls, 16);
}

TEST(DirCursor, SeeksBackAndForth) {
  FakeDir d{300, 7};
  DirCursor c;
  auto fetch = [&](std::string_view k) { return d.fetch(k); };
  for (int i : {0, 299, 150, 3, 298, 151, 77, 0}) {
    auto e = c.at(i, fetch);
    ASSERT_TRUE(e);
    ASSERT_NE(*e, nullptr) << i;
    EXPECT_EQ((*e)->name, fmt::format("f{}", i));
  }
  auto end = c.at(5000, fetch);
  ASSERT_TRUE(end);
  EXPECT_EQ(*end, nullptr);
}

// reload_page: the page in use is fetched again (from its own cookie) by the
// next lookup that falls in it, and only then.
TEST(DirCursor, ReloadsTheCurrentPage) {
  FakeDir d{100, 10};
  DirCursor c;
  auto fetch = [&](std::string_view k) { return d.fetch(k); };
  auto name_at = [&](uint64_t i) {
    auto e = c.at(i, fetch);
    return e && *e ? (*e)->name : std::string("<none>");
  };
  EXPECT_EQ(name_at(25), "f25");
  const int calls = d.calls;
  d.suffix = "'";
  EXPECT_EQ(name_at(26), "f26");  // the page as fetched
  c.reload_page();
  EXPECT_EQ(name_at(27), "f27'");
  EXPECT_EQ(d.calls, calls + 1);
  EXPECT_EQ(name_at(28), "f28'");
  EXPECT_EQ(d.calls, calls + 1);
  c.reload_page();
  EXPECT_EQ(name_at(30), "f30'");  // past the page: only the next one is fetched
  EXPECT_EQ(d.calls, calls + 2);
  EXPECT_EQ(name_at(5), "f5'");  // seek back
  EXPECT_EQ(name_at(99), "f99'");
}

TEST(DirCursor, EmptyDirectory) {
  FakeDir d{0, 10};
  DirCursor c;
  auto e = c.at(0, [&](std::string_view k) { return d.fetch(k); });
  ASSERT_TRUE(e);
  EXPECT_EQ(*e, nullptr);
}

TEST(DirCursor, ErrorsSurface) {
  DirCursor c;
  auto e = c.at(0, [](std::string_view) -> Result<meta::DirPage> { return error(Code::kPermissionDenied, "no"); });
  ASSERT_FALSE(e);
  EXPECT_EQ(e.error().code(), Code::kPermissionDenied);
}

}  // namespace
}  // namespace weft::fuse
