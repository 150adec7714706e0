// libFuzzer target for the server and client config parser (common/config.h:
// toml11 underneath, with our own guards before it, such as the nesting
// limit). Every server reads a file someone typed. Properties checked:
//  - parsing arbitrary text never crashes, overflows the stack or trips UB,
//    and never lets an exception out;
//  - a refusal is Code::kConfig with a message naming the source;
//  - what parses can be walked: every key reported unread is readable as a
//    value of some type or as a table.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "common/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto config = weft::Config::parse(text, "fuzz.toml");
  if (!config) {
    if (config.error().code() != weft::Code::kConfig) std::abort();
    if (config.error().message().find("fuzz.toml") == std::string::npos) std::abort();
    return 0;
  }
  for (const std::string& key : config->unread_keys()) {
    bool readable = config->get_string(key).has_value() || config->get_int(key).has_value() ||
                    config->get_double(key).has_value() || config->get_bool(key).has_value() ||
                    config->get_strings(key).has_value() || config->table(key).has_value() ||
                    config->tables(key).has_value() || config->has(key);
    if (!readable) std::abort();
  }
  return 0;
}
