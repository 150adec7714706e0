// libFuzzer target for the server and client config parser (common/config.h:
// toml11 underneath, with our own guards before it, such as the nesting
// limit), and the client config on top of it (client/cluster_config.h).
// Every server and client reads a file someone typed. The first input byte
// picks the parser. Properties checked:
//  - parsing arbitrary text never crashes, overflows the stack or trips UB,
//    and never lets an exception out;
//  - a refusal is Code::kConfig with a message naming the source;
//  - what parses can be asked for its unread keys (what servers warn about);
//  - a client config accepted names at least one mgmtd and a token.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "client/cluster_config.h"
#include "common/config.h"

namespace {

void refused_well(const weft::Status& s) {
  if (s.code() != weft::Code::kConfig) std::abort();
  if (s.message().find("fuzz.toml") == std::string::npos) std::abort();
}

void client_config(const std::string& text) {
  auto c = weft::client::parse_cluster_config(text, "fuzz.toml");
  if (!c) return refused_well(c.error());
  if (c->mgmtd.empty() || c->cluster_token.empty()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 1) {
    client_config(text);
    return 0;
  }
  auto config = weft::Config::parse(text, "fuzz.toml");
  if (!config) {
    refused_well(config.error());
    return 0;
  }
  // Only that it runs: the keys are for the servers' warning, written as
  // TOML writes them ("a.b" = 1 as "a.b"), which no lookup takes back.
  (void)config->unread_keys();
  return 0;
}
