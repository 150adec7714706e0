#include "common/config.h"

#include <gtest/gtest.h>

namespace weft {
namespace {

const char* kText = R"(
cluster_token = "abc"
[server]
port = 7000
address = "127.0.0.1"
ratio = 0.5
verbose = true
peers = ["a:1", "b:2"]
[[targets]]
path = "/data/t0"
[[targets]]
path = "/data/t1"
)";

TEST(Config, ReadsTypedValues) {
  auto cfg = Config::parse(kText, "test.toml");
  ASSERT_TRUE(cfg) << cfg.error();
  EXPECT_EQ(cfg->get_string("cluster_token").value(), "abc");
  EXPECT_EQ(cfg->get_int("server.port").value(), 7000);
  EXPECT_EQ(cfg->get_double("server.ratio").value(), 0.5);
  EXPECT_EQ(cfg->get_double("server.port").value(), 7000.0);
  EXPECT_TRUE(cfg->get_bool("server.verbose").value());
  EXPECT_EQ(cfg->get_strings("server.peers").value().size(), 2u);
  EXPECT_EQ(cfg->get_int("server.missing", 3).value(), 3);
  auto targets = cfg->tables("targets");
  ASSERT_TRUE(targets);
  ASSERT_EQ(targets->size(), 2u);
  EXPECT_EQ((*targets)[1].get_string("path").value(), "/data/t1");
  auto server = cfg->table("server");
  ASSERT_TRUE(server);
  EXPECT_EQ(server->get_int("port").value(), 7000);
}

TEST(Config, ErrorsNameFileKeyAndExpectation) {
  auto cfg = Config::parse(kText, "test.toml");
  ASSERT_TRUE(cfg);
  auto wrong = cfg->get_int("server.address");
  ASSERT_FALSE(wrong);
  EXPECT_EQ(wrong.error().code(), Code::kConfig);
  const std::string& m = wrong.error().message();
  EXPECT_NE(m.find("test.toml"), std::string::npos) << m;
  EXPECT_NE(m.find("server.address"), std::string::npos) << m;
  EXPECT_NE(m.find("expected an integer"), std::string::npos) << m;
  EXPECT_NE(m.find("found a string"), std::string::npos) << m;
  EXPECT_NE(m.find("line 5"), std::string::npos) << m;

  // A default does not hide a wrongly typed key.
  EXPECT_FALSE(cfg->get_int("server.address", 1));

  auto missing = cfg->get_string("server.nothing");
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message().find("missing key 'server.nothing'"), std::string::npos);

  auto targets = cfg->tables("targets");
  auto bad = (*targets)[0].get_int("path");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message().find("targets[0].path"), std::string::npos) << bad.error().message();

  auto range = cfg->get_int_in("server.port", 0, 1, 1024);
  ASSERT_FALSE(range);
  EXPECT_NE(range.error().message().find("[1, 1024]"), std::string::npos);
  EXPECT_NE(cfg->get_int_in("server.port", 1, 1024).error().message().find("[1, 1024]"), std::string::npos);
  // Required and absent: said so (not "found 0", a value nobody wrote).
  auto absent = cfg->get_int_in("server.replicas", 1, 16);
  ASSERT_FALSE(absent);
  EXPECT_NE(absent.error().message().find("missing key 'server.replicas'"), std::string::npos)
      << absent.error().message();
}

// 0 means off; any other value is bounded, and the error names the key with its table.
TEST(Config, OffOrInRange) {
  auto cfg = Config::parse("[s]\noff = 0\nok = 5000\nlow = 999\nhigh = 4000\n", "t.toml");
  ASSERT_TRUE(cfg) << cfg.error();
  auto s = *cfg->table("s");
  EXPECT_EQ(s.get_int_off_or_in("off", 1500, 1000, 3000).value_or(-1), 0);
  EXPECT_EQ(s.get_int_off_or_in("absent", 1500, 1000, 3000).value_or(-1), 1500);
  EXPECT_EQ(s.get_int_off_or_in("ok", 1500, 1000, 5000).value_or(-1), 5000);
  for (const char* key : {"low", "high"}) {
    auto r = s.get_int_off_or_in(key, 0, 1000, 3000);
    ASSERT_FALSE(r) << key;
    EXPECT_NE(r.error().message().find(fmt::format("t.toml: key 's.{}'", key)), std::string::npos) << r.error();
  }
}

// unread_keys lists what no lookup reached: unknown top-level keys and
// sections, unknown keys inside read sections and inside [[arrays]] of tables.
TEST(Config, UnreadKeysAreTheOnesNothingAskedFor) {
  auto c = Config::parse(
      "a = 1\ntypo = 2\n[server]\nlisten = \"x\"\nlistn = \"y\"\n[other]\nk = 1\n"
      "[[targets]]\npath = \"p\"\n[[targets]]\npath = \"q\"\ncapacty = 3\n",
      "f.toml");
  ASSERT_TRUE(c) << c.error();
  EXPECT_EQ(c->unread_keys().size(), 5u) << "nothing read yet: every top-level key";
  ASSERT_TRUE(c->get_int("a"));
  ASSERT_TRUE(c->get_string("server.listen"));
  auto targets = c->tables("targets");
  ASSERT_TRUE(targets);
  for (const Config& t : *targets) ASSERT_TRUE(t.get_string("path"));
  EXPECT_EQ(c->unread_keys(), (std::vector<std::string>{"other", "server.listn", "targets[1].capacty", "typo"}));
  auto server = c->table("server");
  ASSERT_TRUE(server);
  EXPECT_EQ(server->unread_keys(), std::vector<std::string>{"server.listn"});
  // Keys that are not bare are named as TOML writes them: "a.b" is one key.
  auto quoted = Config::parse("\"a.b\" = 1\n\"\" = 2\n[server]\n\"x y\" = 3\n", "q.toml");
  ASSERT_TRUE(quoted) << quoted.error();
  EXPECT_EQ(quoted->unread_keys(), (std::vector<std::string>{"\"\"", "\"a.b\"", "server"}));
  ASSERT_TRUE(quoted->table("server"));
  EXPECT_EQ(quoted->unread_keys(), (std::vector<std::string>{"\"\"", "\"a.b\"", "server.\"x y\""}));
}

TEST(Config, SyntaxErrorsAndMissingFiles) {
  auto bad = Config::parse("a = \n[b", "broken.toml");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message().find("broken.toml"), std::string::npos);
  auto none = Config::load_file("/nonexistent/weft.toml");
  ASSERT_FALSE(none);
  EXPECT_NE(none.error().message().find("/nonexistent/weft.toml"), std::string::npos);
}

// TOML is UTF-8: other bytes are refused with their line, before toml11
// sees them (its literal-string error path read out of bounds on them).
TEST(Config, TextThatIsNotUtf8IsRefusedWithItsLine) {
  const std::string cases[] = {
      "a = 1\nb = '\xd4'\n",        // a lead byte and no continuation
      "a = 1\nb = \"\xc0\xaf\"\n",  // overlong '/'
      "a = 1\nb = '\xed\xa0\x80'\n",  // a surrogate
      "a = 1\nb = '\xf4\x90\x80\x80'\n",  // past U+10FFFF
      "a = 1\nb = '\xe2\x82",       // cut short at the end
      "a = 1\n# \xff\n",             // in a comment too
  };
  for (const std::string& text : cases) {
    auto r = Config::parse(text, "u.toml");
    ASSERT_FALSE(r.has_value()) << text;
    EXPECT_EQ(r.error().code(), Code::kConfig);
    EXPECT_NE(r.error().message().find("u.toml: invalid TOML: line 2: not UTF-8"), std::string::npos)
        << r.error().message();
  }
  auto fine = Config::parse("name = 'caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x92\xbe'\n", "u.toml");
  ASSERT_TRUE(fine.has_value()) << fine.error();
  EXPECT_EQ(*fine->get_string("name"), "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x92\xbe");
}

}  // namespace
}  // namespace weft
