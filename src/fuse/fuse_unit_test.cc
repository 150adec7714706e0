// Unit tests of the FUSE mount's pure parts: -o parsing, the mapping of
// FUSE directory offsets to Weft readdir cookies.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

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
  EXPECT_TRUE(m->hold_open_files);
  EXPECT_EQ(m->max_threads, 10u);
  EXPECT_EQ(m->max_idle_threads, 10u);
  EXPECT_EQ(m->fuse_option_string(), "fsname=weft,subtype=weft,max_read=1048576");
}

// Worker counts are Weft's (given to libfuse's loop, not to the kernel).
TEST(MountOptions, WorkerThreads) {
  auto m = parse_mount_options({"max_threads=128,max_idle_threads=4"});
  ASSERT_TRUE(m) << m.error();
  EXPECT_EQ(m->max_threads, 128u);
  EXPECT_EQ(m->max_idle_threads, 4u);
  EXPECT_EQ(m->fuse_option_string(), "fsname=weft,subtype=weft,max_read=1048576");
  EXPECT_FALSE(parse_mount_options({"max_threads=0"}));
  EXPECT_FALSE(parse_mount_options({"max_threads=many"}));
  auto low = parse_mount_options({"max_threads=8"});  // the default 10 idle come down to it
  ASSERT_TRUE(low) << low.error();
  EXPECT_EQ(low->max_idle_threads, 8u);
  auto idle_above = parse_mount_options({"max_threads=8,max_idle_threads=9"});
  ASSERT_FALSE(idle_above);
  EXPECT_NE(idle_above.error().message().find("max_idle_threads=9 exceeds max_threads=8"), std::string::npos)
      << idle_above.error().message();
  EXPECT_TRUE(parse_mount_options({"max_threads=8,max_idle_threads=8"}));
  auto idle_only = parse_mount_options({"max_idle_threads=20"});  // the default cap follows it
  ASSERT_TRUE(idle_only) << idle_only.error();
  EXPECT_EQ(idle_only->max_threads, 20u);
  EXPECT_EQ(idle_only->max_idle_threads, 20u);
}

// Read holds are Weft's (never passed to libfuse); the last word wins.
TEST(MountOptions, HoldOpenFiles) {
  auto off = parse_mount_options({"no_hold_open_files"});
  ASSERT_TRUE(off) << off.error();
  EXPECT_FALSE(off->hold_open_files);
  EXPECT_EQ(off->fuse_option_string(), "fsname=weft,subtype=weft,max_read=1048576");
  auto on = parse_mount_options({"no_hold_open_files", "hold_open_files"});
  ASSERT_TRUE(on) << on.error();
  EXPECT_TRUE(on->hold_open_files);
  EXPECT_FALSE(parse_mount_options({"no_hold_open_files=1"}));
  EXPECT_FALSE(parse_mount_options({"hold_open_files=0"}));
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
  EXPECT_FALSE(parse_mount_options({"attr_timeout=1e10"})) << "past a day (nanoseconds would overflow)";
  EXPECT_TRUE(parse_mount_options({"attr_timeout=86400"}));
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

// A directory served in pages of `page` entries as meta serves it: names in
// order, the cookie is the last name returned and a fetch resumes strictly
// after it, whether or not it still exists.
struct FakeDir {
  FakeDir(int n, size_t page_entries) : page(page_entries) {
    for (int i = 0; i < n; ++i) names.insert(name(i));
  }
  static std::string name(int i) { return fmt::format("f{:04}", i); }
  std::set<std::string> names;
  size_t page = 0;
  int calls = 0;
  uint64_t version = 0;  // every entry's attr.size: what changed since a page was fetched
  Result<meta::DirPage> fetch(std::string_view cookie) {
    ++calls;
    auto it = cookie.empty() ? names.begin() : names.upper_bound(std::string(cookie));
    meta::DirPage p;
    for (; it != names.end() && p.entries.size() < page; ++it) {
      meta::DirEntry e{*it, meta::Ino(100 + std::stoi(it->substr(1)))};
      e.attr.size = version;
      p.entries.push_back(std::move(e));
    }
    p.eof = it == names.end();
    p.cookie = p.entries.empty() ? std::string(cookie) : p.entries.back().name;
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
    EXPECT_EQ((*e)->name, FakeDir::name(i));
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
    EXPECT_EQ((*e)->name, FakeDir::name(i));
  }
  auto end = c.at(5000, fetch);
  ASSERT_TRUE(end);
  EXPECT_EQ(*end, nullptr);
}

// reload_page: the rest of the page in use is fetched again by the next
// lookup that falls in it, and only then.
TEST(DirCursor, ReloadsTheCurrentPage) {
  FakeDir d{100, 10};
  DirCursor c;
  auto fetch = [&](std::string_view k) { return d.fetch(k); };
  auto at = [&](uint64_t i) {
    auto e = c.at(i, fetch);
    return e && *e ? fmt::format("{}@{}", (*e)->name, (*e)->attr.size) : std::string("<none>");
  };
  EXPECT_EQ(at(25), "f0025@0");
  const int calls = d.calls;
  d.version = 1;
  EXPECT_EQ(at(26), "f0026@0");  // the page as fetched
  c.reload_page();
  EXPECT_EQ(at(27), "f0027@1");
  EXPECT_EQ(d.calls, calls + 1);
  EXPECT_EQ(at(28), "f0028@1");
  EXPECT_EQ(d.calls, calls + 1);
  c.reload_page();
  EXPECT_EQ(at(37), "f0037@1");  // past the page: only the next one is fetched
  EXPECT_EQ(d.calls, calls + 2);
  EXPECT_EQ(at(5), "f0005@1");  // seek back
  EXPECT_EQ(at(99), "f0099@1");
  EXPECT_EQ(at(100), "<none>");
}

// A reload whose first page comes back empty (not the last) and whose next
// fetch fails leaves the cursor where it was: the retry lists from the
// entry asked for, skipping none; failed fetches are not counted.
TEST(DirCursor, AFailedReloadAfterAnEmptyPageSkipsNothing) {
  FakeDir d{100, 10};
  DirCursor c;
  int script = 0;  // 2: an empty page next, 1: then a failure
  auto fetch = [&](std::string_view k) -> Result<meta::DirPage> {
    if (script == 2) {
      --script;
      meta::DirPage empty;
      empty.cookie = std::string(k) + "~";  // moves on, past no name
      return empty;
    }
    if (script == 1) {
      --script;
      return error(Code::kUnavailable, "meta away");
    }
    return d.fetch(k);
  };
  auto e = c.at(2, fetch);
  ASSERT_TRUE(e && *e);
  c.reload_page();
  script = 2;
  const size_t fetched = c.pages_fetched();
  EXPECT_FALSE(c.at(5, fetch));
  EXPECT_EQ(c.pages_fetched(), fetched) << "no page was fetched";
  e = c.at(5, fetch);
  ASSERT_TRUE(e) << e.error();
  ASSERT_NE(*e, nullptr);
  EXPECT_EQ((*e)->name, FakeDir::name(5));
  e = c.at(6, fetch);
  ASSERT_TRUE(e && *e);
  EXPECT_EQ((*e)->name, FakeDir::name(6));
}

// Reads a listing as the kernel does, `batch` entries per request, calling
// reload_page() before every request and `between` after it with the names
// it returned: what the listing returned, in order.
std::vector<std::string> list_in_batches(FakeDir& d, size_t batch,
                                         const std::function<void(const std::vector<std::string>&)>& between) {
  DirCursor c;
  auto fetch = [&](std::string_view k) { return d.fetch(k); };
  std::vector<std::string> all;
  for (uint64_t index = 0;;) {
    c.reload_page();
    std::vector<std::string> got;
    for (size_t i = 0; i < batch; ++i, ++index) {
      auto e = c.at(index, fetch);
      EXPECT_TRUE(e);
      if (!e || !*e) break;
      got.push_back((*e)->name);
    }
    if (got.empty()) return all;
    all.insert(all.end(), got.begin(), got.end());
    between(got);
  }
}

// rm -r's pattern (and os.scandir + unlink): every batch is removed once
// returned, and the next request reloads the page. Every entry is still
// returned once, and the directory ends empty.
TEST(DirCursor, DeleteAsYouIterateReturnsEveryEntryOnce) {
  FakeDir d{200, 50};
  auto all = list_in_batches(d, 10, [&](const std::vector<std::string>& got) {
    for (auto& n : got) d.names.erase(n);
  });
  EXPECT_EQ(all.size(), 200u);
  EXPECT_EQ(std::set<std::string>(all.begin(), all.end()).size(), 200u);
  EXPECT_TRUE(d.names.empty()) << d.names.size() << " left, first " << *d.names.begin();
}

// Names added during the listing (before and after the position) and
// removed ahead of it: every name present throughout is returned exactly
// once, none removed before it was reached is returned, nothing twice.
TEST(DirCursor, InsertWhileIteratingReturnsTheUnchangedEntriesOnce) {
  FakeDir d{300, 50};
  std::set<std::string> unchanged(d.names);
  std::set<std::string> removed_ahead;
  int round = 0;
  auto all = list_in_batches(d, 7, [&](const std::vector<std::string>& got) {
    ++round;
    // Before the position: a name sorting first, and one just before the last returned.
    d.names.insert(fmt::format("a{:04}", round));
    d.names.insert(got.back().substr(0, 4) + "0x" + std::to_string(round));
    // Ahead of it: one new name, one removed.
    auto next = d.names.upper_bound(got.back());
    if (next != d.names.end() && unchanged.count(*next)) {
      unchanged.erase(*next);
      removed_ahead.insert(*next);
      d.names.erase(next);
    }
    d.names.insert(got.back() + "+");
  });
  std::map<std::string, int> seen;
  for (auto& n : all) ++seen[n];
  for (auto& [n, count] : seen) EXPECT_EQ(count, 1) << n;
  for (auto& n : unchanged) EXPECT_EQ(seen.count(n), 1u) << n;
  for (auto& n : removed_ahead) EXPECT_EQ(seen.count(n), 0u) << n;
  EXPECT_GT(removed_ahead.size(), 10u);
}

// holds(): what at() answers without a fetch (readdir ends a reply there).
TEST(DirCursor, HoldsOnlyThePageInHand) {
  FakeDir d{25, 10};
  DirCursor c;
  auto fetch = [&](std::string_view k) { return d.fetch(k); };
  EXPECT_FALSE(c.holds(0));  // nothing fetched yet
  ASSERT_TRUE(c.at(12, fetch));
  EXPECT_FALSE(c.holds(9));
  EXPECT_TRUE(c.holds(10));
  EXPECT_TRUE(c.holds(19));
  EXPECT_FALSE(c.holds(20));  // the next page
  c.reload_page();
  EXPECT_FALSE(c.holds(13));  // stale: fetched again
  ASSERT_TRUE(c.at(22, fetch));
  EXPECT_TRUE(c.holds(24));
  EXPECT_TRUE(c.holds(25));  // the end, known from the last page
  EXPECT_TRUE(c.holds(1000));
  const int calls = d.calls;
  auto end = c.at(25, fetch);
  ASSERT_TRUE(end);
  EXPECT_EQ(*end, nullptr);
  EXPECT_EQ(d.calls, calls);
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
