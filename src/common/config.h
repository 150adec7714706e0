// common/config.h
// TOML configuration (toml11 underneath, kept out of this header). Every
// error names the file, the key and what was expected, e.g.
//   /etc/weft/storage.toml: key 'server.port' (line 4): expected an integer, found a string
// Keys are dotted paths into nested tables. A Config is a cheap handle on a
// (sub)table of a parsed document; copies share the document.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace weft {

class Config {
 public:
  static Result<Config> load_file(const std::string& path);
  // `source` names the text in messages (a file name or "<inline>").
  static Result<Config> parse(const std::string& text, const std::string& source);

  bool has(const std::string& key) const;

  Result<std::string> get_string(const std::string& key) const;
  Result<int64_t> get_int(const std::string& key) const;
  Result<double> get_double(const std::string& key) const;
  Result<bool> get_bool(const std::string& key) const;
  Result<std::vector<std::string>> get_strings(const std::string& key) const;

  // Defaults apply when the key is absent; a present key of the wrong type is still an error.
  Result<std::string> get_string(const std::string& key, std::string fallback) const;
  Result<int64_t> get_int(const std::string& key, int64_t fallback) const;
  Result<double> get_double(const std::string& key, double fallback) const;
  Result<bool> get_bool(const std::string& key, bool fallback) const;
  // An integer within [min, max]; without a fallback the key must be there.
  Result<int64_t> get_int_in(const std::string& key, int64_t fallback, int64_t min, int64_t max) const;
  Result<int64_t> get_int_in(const std::string& key, int64_t min, int64_t max) const;
  // 0 (off), or an integer within [min, max].
  Result<int64_t> get_int_off_or_in(const std::string& key, int64_t fallback, int64_t min, int64_t max) const;

  Result<Config> table(const std::string& key) const;
  // An array of tables ([[targets]]); absent means empty.
  Result<std::vector<Config>> tables(const std::string& key) const;

  const std::string& source() const { return source_; }
  // The keys under this table that no lookup (has, get_*, table, tables) of
  // any handle on the document has reached, as dotted paths: settings this
  // process does not know, e.g. a misspelt name. Call once everything was read.
  std::vector<std::string> unread_keys() const;

  struct Node;

 private:
  Config(std::shared_ptr<const Node> root, const void* node, std::string source, std::string prefix);
  Result<const void*> find(const std::string& key) const;  // nullptr value when absent
  std::unexpected<Status> type_error(const std::string& key, const void* value, const char* expected) const;
  Result<int64_t> in_range(const std::string& key, int64_t v, int64_t min, int64_t max) const;

  std::shared_ptr<const Node> root_;
  const void* node_ = nullptr;  // const toml::value*
  std::string source_;
  std::string prefix_;  // dotted path of this table, for messages
};

}  // namespace weft
