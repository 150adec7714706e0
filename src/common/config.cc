#include "common/config.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <unordered_set>

#include <toml.hpp>

namespace weft {

struct Config::Node {
  toml::value value;
  // Every value a lookup reached (for unread_keys). Lookups may come from
  // several threads: guarded by mu.
  mutable std::mutex mu;
  mutable std::unordered_set<const void*> read;
};

namespace {

const toml::value* as_value(const void* p) { return static_cast<const toml::value*>(p); }

const char* type_name(const toml::value& v) {
  switch (v.type()) {
    case toml::value_t::boolean: return "a boolean";
    case toml::value_t::integer: return "an integer";
    case toml::value_t::floating: return "a float";
    case toml::value_t::string: return "a string";
    case toml::value_t::array: return "an array";
    case toml::value_t::table: return "a table";
    case toml::value_t::empty: return "nothing";
    default: return "a date/time";
  }
}

// toml11 parses nested arrays and inline tables by recursion: a few
// thousand levels (`a = [[[[...`) overflow the stack and kill the process
// before any message, and a dotted key thousands of levels deep takes
// seconds per thousand. No setting nests more than a few levels: refuse
// deeper text before parsing, outside strings and comments. (A dot between
// two digits is a float's or a date's, not a key's.)
constexpr int kNestingMax = 64;

std::optional<size_t> too_deep(std::string_view text) {
  int depth = 0, dots = 0;
  size_t line = 1;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') {
      ++line;
      dots = 0;
    } else if (c == '#') {
      while (i + 1 < text.size() && text[i + 1] != '\n') ++i;
    } else if (c == '"' || c == '\'') {
      const bool multi = text.substr(i, 3) == std::string(3, c);
      const std::string close(multi ? 3 : 1, c);
      for (i += close.size(); i < text.size() && text.substr(i, close.size()) != close; ++i) {
        if (c == '"' && text[i] == '\\') ++i;  // an escape: the next character is no quote
        if (i < text.size() && text[i] == '\n') ++line;
      }
      i += close.size() - 1;
      // A multi-line string may end in up to two more quotes of its own.
      while (multi && i + 1 < text.size() && text[i + 1] == c) ++i;
    } else if (c == '[' || c == '{') {
      if (++depth > kNestingMax) return line;
    } else if (c == ']' || c == '}') {
      depth = std::max(depth - 1, 0);
    } else if (c == '.') {
      const bool digits = i > 0 && i + 1 < text.size() && std::isdigit(static_cast<unsigned char>(text[i - 1])) &&
                          std::isdigit(static_cast<unsigned char>(text[i + 1]));
      if (!digits && ++dots > kNestingMax) return line;
    }
  }
  return std::nullopt;
}

// A TOML document is UTF-8 (the spec). toml11 3.7 reads out of bounds when
// a literal string ('...') holds an invalid sequence (it reports the error
// at an offset into the wrong buffer; found by fuzz/config_fuzz.cc): refuse
// such text before parsing. Returns the line of the first invalid sequence
// (RFC 3629: no overlong forms, no surrogates, nothing past U+10FFFF).
std::optional<size_t> invalid_utf8(std::string_view text) {
  size_t line = 1;
  for (size_t i = 0; i < text.size();) {
    const auto b = static_cast<unsigned char>(text[i]);
    if (b < 0x80) {
      line += b == '\n';
      ++i;
      continue;
    }
    size_t n = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte
    if (b >= 0xC2 && b <= 0xDF) {
      n = 1;
    } else if (b >= 0xE0 && b <= 0xEF) {
      n = 2;
      if (b == 0xE0) lo = 0xA0;  // overlong
      if (b == 0xED) hi = 0x9F;  // surrogates
    } else if (b >= 0xF0 && b <= 0xF4) {
      n = 3;
      if (b == 0xF0) lo = 0x90;  // overlong
      if (b == 0xF4) hi = 0x8F;  // past U+10FFFF
    } else {
      return line;
    }
    if (i + n >= text.size()) return line;  // cut short
    for (size_t k = 1; k <= n; ++k) {
      const auto c = static_cast<unsigned char>(text[i + k]);
      if (c < (k == 1 ? lo : 0x80) || c > (k == 1 ? hi : 0xBF)) return line;
    }
    i += n + 1;
  }
  return std::nullopt;
}

// toml11's messages span several lines (the file, the line quoted, a caret,
// hints); a server's error is one line: the problem and its line number.
std::string one_line(const std::string& what) {
  std::istringstream in(what);
  std::string first, l, at;
  std::getline(in, first);
  while (std::getline(in, l)) {
    size_t bar = l.find(" | ");
    if (bar == std::string::npos) continue;
    std::string num = l.substr(0, bar);
    num.erase(0, num.find_first_not_of(' '));
    const auto digit = [](char ch) { return std::isdigit(static_cast<unsigned char>(ch)) != 0; };
    if (!num.empty() && std::all_of(num.begin(), num.end(), digit))
      at = num;  // the last line quoted is the offending one (a duplicate's second definition)
  }
  if (first.starts_with("[error] ")) first.erase(0, 8);
  // "toml::parse_key: an invalid key appeared." -> "an invalid key appeared."
  if (size_t colon = first.find(": "); colon != std::string::npos && first.find(' ') > colon) first.erase(0, colon + 2);
  return at.empty() ? first : fmt::format("line {}: {}", at, first);
}

}  // namespace

Config::Config(std::shared_ptr<const Node> root, const void* node, std::string source, std::string prefix)
    : root_(std::move(root)), node_(node), source_(std::move(source)), prefix_(std::move(prefix)) {}

Result<Config> Config::parse(const std::string& text, const std::string& source) {
  if (auto line = invalid_utf8(text))
    return error(Code::kConfig, "{}: invalid TOML: line {}: not UTF-8", source, *line);
  if (auto line = too_deep(text))
    return error(Code::kConfig, "{}: invalid TOML: line {}: nested deeper than {} levels", source, *line, kNestingMax);
  auto node = std::make_shared<Node>();
  try {
    std::istringstream in(text);
    node->value = toml::parse(in, source);
  } catch (const std::exception& e) {
    return error(Code::kConfig, "{}: invalid TOML: {}", source, one_line(e.what()));
  }
  if (!node->value.is_table()) return error(Code::kConfig, "{}: top level is not a table", source);
  const void* root = &node->value;
  return Config(std::move(node), root, source, "");
}

Result<Config> Config::load_file(const std::string& path) {
  // An ifstream opens a directory and reads nothing from it: it passed for an empty file.
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    return error(Code::kConfig, "{}: cannot read config file: it is a directory", path);
  std::ifstream in(path);
  if (!in) return error(Code::kConfig, "{}: cannot read config file: {}", path, std::strerror(errno));
  std::stringstream ss;
  ss << in.rdbuf();
  return parse(ss.str(), path);
}

Result<const void*> Config::find(const std::string& key) const {
  const toml::value* cur = as_value(node_);
  size_t start = 0;
  while (true) {
    size_t dot = key.find('.', start);
    std::string part = key.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (!cur->is_table()) return error(Code::kConfig, "{}: key '{}': a parent is not a table", source_, prefix_ + key);
    const auto& table = cur->as_table();
    auto it = table.find(part);
    if (it == table.end()) return static_cast<const void*>(nullptr);
    cur = &it->second;
    {
      std::lock_guard lock(root_->mu);
      root_->read.insert(cur);
    }
    if (dot == std::string::npos) return static_cast<const void*>(cur);
    start = dot + 1;
  }
}

std::unexpected<Status> Config::type_error(const std::string& key, const void* value, const char* expected) const {
  const toml::value& v = *as_value(value);
  return error(Code::kConfig, "{}: key '{}' (line {}): expected {}, found {}", source_, prefix_ + key,
               v.location().line(), expected, type_name(v));
}

bool Config::has(const std::string& key) const {
  auto r = find(key);
  return r && *r != nullptr;
}

#define WEFT_CONFIG_GETTER(Type, Name, check, getter, expected)                                       \
  Result<Type> Config::Name(const std::string& key) const {                                            \
    WEFT_TRY(const void* p, find(key));                                                                \
    if (p == nullptr) return error(Code::kConfig, "{}: missing key '{}' ({})", source_, prefix_ + key, expected); \
    const toml::value& v = *as_value(p);                                                               \
    if (!v.check()) return type_error(key, p, expected);                                               \
    return static_cast<Type>(v.getter());                                                              \
  }                                                                                                    \
  Result<Type> Config::Name(const std::string& key, Type fallback) const {                   \
    WEFT_TRY(const void* p, find(key));                                                                \
    if (p == nullptr) return fallback;                                                                 \
    return Name(key);                                                                                  \
  }

WEFT_CONFIG_GETTER(bool, get_bool, is_boolean, as_boolean, "a boolean")
#undef WEFT_CONFIG_GETTER

namespace {

// toml11 reads an integer past int64 (2^63) as the largest one (or the
// smallest) without a word, and a range check then quoted a number the file
// does not have: the literal of a value at either end is read again.
bool out_of_int64(const toml::value& v) {
  const int64_t i = v.as_integer();
  if (i != INT64_MAX && i != INT64_MIN) return false;
  const toml::source_location loc = v.location();
  if (loc.column() == 0 || loc.column() - 1 + loc.region() > loc.line_str().size()) return false;
  std::string token = loc.line_str().substr(loc.column() - 1, loc.region());
  std::erase(token, '_');
  if (token.starts_with('+')) token.erase(0, 1);
  int base = 10;
  if (token.starts_with("0x") || token.starts_with("0o") || token.starts_with("0b")) {
    base = token[1] == 'x' ? 16 : token[1] == 'o' ? 8 : 2;
    token.erase(0, 2);
  }
  int64_t parsed = 0;
  return std::from_chars(token.data(), token.data() + token.size(), parsed, base).ec == std::errc::result_out_of_range;
}

// A NUL ("\u0000") would cut a path or an address short where the string
// reaches the system (data_dir = "/srv/a\u0000b" used /srv/a): no setting has one.
bool has_nul(const toml::value& v) { return v.as_string().str.find('\0') != std::string::npos; }

std::unexpected<Status> nul_error(const std::string& source, const std::string& key, const toml::value& v) {
  return error(Code::kConfig, "{}: key '{}' (line {}): a string with a NUL character", source, key,
               v.location().line());
}

}  // namespace

Result<int64_t> Config::get_int(const std::string& key) const {
  WEFT_TRY(const void* p, find(key));
  if (p == nullptr) return error(Code::kConfig, "{}: missing key '{}' (an integer)", source_, prefix_ + key);
  const toml::value& v = *as_value(p);
  if (!v.is_integer()) return type_error(key, p, "an integer");
  if (out_of_int64(v))
    return error(Code::kConfig, "{}: key '{}' (line {}): an integer beyond 64 bits", source_, prefix_ + key,
                 v.location().line());
  return static_cast<int64_t>(v.as_integer());
}

Result<int64_t> Config::get_int(const std::string& key, int64_t fallback) const {
  WEFT_TRY(const void* p, find(key));
  if (p == nullptr) return fallback;
  return get_int(key);
}

Result<std::string> Config::get_string(const std::string& key) const {
  WEFT_TRY(const void* p, find(key));
  if (p == nullptr) return error(Code::kConfig, "{}: missing key '{}' (a string)", source_, prefix_ + key);
  const toml::value& v = *as_value(p);
  if (!v.is_string()) return type_error(key, p, "a string");
  if (has_nul(v)) return nul_error(source_, prefix_ + key, v);
  return v.as_string().str;
}

Result<std::string> Config::get_string(const std::string& key, std::string fallback) const {
  WEFT_TRY(const void* p, find(key));
  if (p == nullptr) return fallback;
  return get_string(key);
}

Result<double> Config::get_double(const std::string& key) const {
  WEFT_TRY(const void* p, find(key));
  if (p == nullptr) return error(Code::kConfig, "{}: missing key '{}' (a number)", source_, prefix_ + key);
  const toml::value& v = *as_value(p);
  if (v.is_floating()) return v.as_floating();
  if (v.is_integer()) return static_cast<double>(v.as_integer());
  return type_error(key, p, "a number");
}

Result<double> Config::get_double(const std::string& key, double fallback) const {
  WEFT_TRY(const void* p, find(key));
  if (p == nullptr) return fallback;
  return get_double(key);
}

Result<int64_t> Config::get_int_in(const std::string& key, int64_t fallback, int64_t min, int64_t max) const {
  WEFT_TRY(int64_t v, get_int(key, fallback));
  return in_range(key, v, min, max);
}

Result<int64_t> Config::get_int_in(const std::string& key, int64_t min, int64_t max) const {
  WEFT_TRY(int64_t v, get_int(key));
  return in_range(key, v, min, max);
}

Result<int64_t> Config::in_range(const std::string& key, int64_t v, int64_t min, int64_t max) const {
  if (v < min || v > max)
    return error(Code::kConfig, "{}: key '{}': expected an integer in [{}, {}], found {}", source_, prefix_ + key, min,
                 max, v);
  return v;
}

Result<int64_t> Config::get_int_off_or_in(const std::string& key, int64_t fallback, int64_t min, int64_t max) const {
  WEFT_TRY(int64_t v, get_int_in(key, fallback, 0, max));
  if (v != 0 && v < min)
    return error(Code::kConfig, "{}: key '{}': expected 0 (off) or an integer in [{}, {}], found {}", source_,
                 prefix_ + key, min, max, v);
  return v;
}

Result<std::vector<std::string>> Config::get_strings(const std::string& key) const {
  WEFT_TRY(const void* p, find(key));
  if (p == nullptr) return std::vector<std::string>{};
  const toml::value& v = *as_value(p);
  if (!v.is_array()) return type_error(key, p, "an array of strings");
  std::vector<std::string> out;
  for (const auto& item : v.as_array()) {
    if (!item.is_string()) return type_error(key, &item, "an array of strings");
    if (has_nul(item)) return nul_error(source_, prefix_ + key, item);
    out.push_back(item.as_string());
  }
  return out;
}

Result<Config> Config::table(const std::string& key) const {
  WEFT_TRY(const void* p, find(key));
  if (p == nullptr) return error(Code::kConfig, "{}: missing table '{}'", source_, prefix_ + key);
  if (!as_value(p)->is_table()) return type_error(key, p, "a table");
  return Config(root_, p, source_, prefix_ + key + ".");
}

Result<std::vector<Config>> Config::tables(const std::string& key) const {
  WEFT_TRY(const void* p, find(key));
  std::vector<Config> out;
  if (p == nullptr) return out;
  const toml::value& v = *as_value(p);
  if (!v.is_array()) return type_error(key, p, "an array of tables");
  size_t i = 0;
  for (const auto& item : v.as_array()) {
    if (!item.is_table()) return type_error(key, &item, "an array of tables");
    out.push_back(Config(root_, &item, source_, fmt::format("{}{}[{}].", prefix_, key, i++)));
  }
  return out;
}

namespace {

// One key of a dotted path as TOML writes it: bare (A-Z a-z 0-9 _ -), else
// quoted ("a.b" = 1 is one key, not b under a; "" = 1 is a key too).
std::string key_part(const std::string& key) {
  const auto bare = [](unsigned char c) { return std::isalnum(c) || c == '_' || c == '-'; };
  if (!key.empty() && std::all_of(key.begin(), key.end(), bare)) return key;
  std::string quoted = "\"";
  for (char c : key) {
    if (c == '"' || c == '\\') quoted += '\\';
    quoted += c;
  }
  return quoted + "\"";
}

// Appends the keys under `v` (a table, or an array whose tables were handed
// out by tables()) that no lookup reached.
void collect_unread(const toml::value& v, const std::string& prefix, const std::unordered_set<const void*>& read,
                    std::vector<std::string>& out) {
  if (v.is_array()) {
    size_t i = 0;
    for (const auto& item : v.as_array()) {
      if (item.is_table()) collect_unread(item, fmt::format("{}[{}].", prefix.substr(0, prefix.size() - 1), i), read, out);
      ++i;
    }
    return;
  }
  if (!v.is_table()) return;
  for (const auto& [key, child] : v.as_table()) {
    if (!read.contains(&child)) {
      out.push_back(prefix + key_part(key));
    } else if (child.is_table() || child.is_array()) {
      collect_unread(child, prefix + key_part(key) + ".", read, out);
    }
  }
}

}  // namespace

std::vector<std::string> Config::unread_keys() const {
  std::vector<std::string> out;
  std::lock_guard lock(root_->mu);
  collect_unread(*as_value(node_), prefix_, root_->read, out);
  std::sort(out.begin(), out.end());  // toml11's tables are hash maps
  return out;
}

}  // namespace weft
