// libFuzzer target for mgmtd's persisted state records (mgmt/state_codec.h):
// what mgmtd reads back from its RocksDB at start. Input: one byte giving
// the key's length, the key, then the value. Properties checked:
//  - decoding never crashes, reads out of bounds or trips UB;
//  - a refused record is Code::kCorruption (mgmtd names the key and stops);
//  - an accepted record, encoded again with the encoder mgmtd writes with,
//    decodes to the same state (nothing read is lost on the next write).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "mgmt/state_codec.h"

using namespace weft::mgmt;

namespace {

// Every record of `s`, encoded and decoded into a fresh state.
PersistedState reencoded(const PersistedState& s) {
  PersistedState out;
  auto put = [&](const std::string& key, const std::string& value) {
    if (!decode_record(key, value, out)) std::abort();
  };
  put(meta_key(), encode_meta(s.routing.version, s.ids));
  put(leases_key(), encode_leases(s.leases));
  put(meta_store_key(), encode_meta_store(s.meta_store));
  for (const auto& [id, n] : s.routing.nodes) put(node_key(id), encode_node(n));
  for (const auto& [id, t] : s.routing.targets) put(target_key(id), encode_target(t));
  for (const auto& [id, t] : s.routing.tables) put(table_key(id), encode_table(t));
  for (const auto& [id, c] : s.routing.chains) put(chain_key(id), encode_chain(c));
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t key_len = data[0] % size;  // at most size - 1 bytes follow
  std::string_view key(reinterpret_cast<const char*>(data) + 1, key_len);
  std::string_view value(reinterpret_cast<const char*>(data) + 1 + key_len, size - 1 - key_len);
  PersistedState state;
  auto r = decode_record(key, value, state);
  if (!r) {
    if (r.error().code() != weft::Code::kCorruption) std::abort();
    return 0;
  }
  PersistedState again = reencoded(state);
  if (again.routing.version != state.routing.version || !(again.ids == state.ids) ||
      !(again.leases == state.leases) || !(again.meta_store == state.meta_store) ||
      again.routing.nodes != state.routing.nodes || again.routing.targets != state.routing.targets ||
      again.routing.tables != state.routing.tables || again.routing.chains != state.routing.chains)
    std::abort();
  return 0;
}
