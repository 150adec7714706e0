#include "common/config.h"

#include <algorithm>
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

}  // namespace

Config::Config(std::shared_ptr<const Node> root, const void* node, std::string source, std::string prefix)
    : root_(std::move(root)), node_(node), source_(std::move(source)), prefix_(std::move(prefix)) {}

Result<Config> Config::parse(const std::string& text, const std::string& source) {
  auto node = std::make_shared<Node>();
  try {
    std::istringstream in(text);
    node->value = toml::parse(in, source);
  } catch (const std::exception& e) {
    // toml11 messages already carry the file name and line.
    return error(Code::kConfig, "{}: invalid TOML: {}", source, e.what());
  }
  if (!node->value.is_table()) return error(Code::kConfig, "{}: top level is not a table", source);
  const void* root = &node->value;
  return Config(std::move(node), root, source, "");
}

Result<Config> Config::load_file(const std::string& path) {
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

WEFT_CONFIG_GETTER(std::string, get_string, is_string, as_string, "a string")
WEFT_CONFIG_GETTER(int64_t, get_int, is_integer, as_integer, "an integer")
WEFT_CONFIG_GETTER(bool, get_bool, is_boolean, as_boolean, "a boolean")
#undef WEFT_CONFIG_GETTER

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
      out.push_back(prefix + key);
    } else if (child.is_table() || child.is_array()) {
      collect_unread(child, prefix + key + ".", read, out);
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
