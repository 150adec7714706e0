#include "mgmt/state_codec.h"


namespace weft::mgmt {
namespace {

constexpr size_t kStringMax = 4096;

class Writer {
 public:
  explicit Writer(uint8_t format) { out_.push_back(static_cast<char>(format)); }
  template <class T>
  Writer& fixed(T v) {
    uint64_t u = static_cast<uint64_t>(v);
    for (size_t i = 0; i < sizeof(T); ++i) out_.push_back(static_cast<char>((u >> (8 * i)) & 0xff));
    return *this;
  }
  Writer& str(std::string_view s) {
    fixed<uint32_t>(static_cast<uint32_t>(s.size()));
    out_.append(s);
    return *this;
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

// Reads fields; the first failure sticks and names the key.
class Reader {
 public:
  Reader(std::string_view key, std::string_view in) : key_(key), in_(in) {
    uint8_t format = 0;
    if (fixed(format) && format != kRecordFormat) fail("unknown record format");
  }
  template <class T>
  bool fixed(T& v) {
    if (!ok_ || in_.size() < sizeof(T)) return fail("truncated");
    uint64_t u = 0;
    for (size_t i = 0; i < sizeof(T); ++i) u |= static_cast<uint64_t>(static_cast<uint8_t>(in_[i])) << (8 * i);
    v = static_cast<T>(u);
    in_.remove_prefix(sizeof(T));
    return true;
  }
  bool str(std::string& s) {
    uint32_t n = 0;
    if (!fixed(n)) return false;
    if (n > kStringMax || n > in_.size()) return fail("bad string length");
    s.assign(in_.substr(0, n));
    in_.remove_prefix(n);
    return true;
  }
  // A count of items of at least `item_bytes` each that must fit in what is left.
  bool count(uint32_t& n, size_t item_bytes) {
    if (!fixed(n)) return false;
    if (static_cast<uint64_t>(n) * item_bytes > in_.size()) return n = 0, fail("bad count");
    return true;
  }
  bool fail(const char* what) {
    if (ok_) why_ = what;
    ok_ = false;
    return false;
  }
  // Fields added after a record type was first written: absent in old records.
  bool at_end() const { return ok_ && in_.empty(); }
  Result<void> finish() {
    if (ok_ && !in_.empty()) fail("trailing bytes");
    if (!ok_) return error(Code::kCorruption, "mgmt state record '{}': {}", printable(key_), why_);
    return {};
  }

 private:
  static std::string printable(std::string_view key) {
    std::string out;
    for (unsigned char c : key) out += (c >= 0x20 && c < 0x7f) ? std::string(1, static_cast<char>(c)) : fmt::format("\\x{:02x}", c);
    return out;
  }
  std::string_view key_, in_;
  bool ok_ = true;
  std::string why_;
};

template <class T>
std::string key_of(char prefix, T id) {
  std::string k(1, prefix);
  for (int i = sizeof(T) - 1; i >= 0; --i) k.push_back(static_cast<char>((static_cast<uint64_t>(id) >> (8 * i)) & 0xff));
  return k;
}

template <class T>
Result<T> id_of(std::string_view key) {
  if (key.size() != 1 + sizeof(T)) return error(Code::kCorruption, "mgmt state: bad key length {}", key.size());
  uint64_t v = 0;
  for (size_t i = 1; i < key.size(); ++i) v = (v << 8) | static_cast<uint8_t>(key[i]);
  return static_cast<T>(v);
}

bool valid_state(uint8_t s) { return s >= 1 && s <= 4; }

// Calls after a failure are no-ops, so fields are read as plain statements.
Result<NodeInfo> decode_node(Reader& r) {
  NodeInfo n;
  uint8_t kind = 0, state = 0;
  r.fixed(n.id), r.fixed(kind), r.str(n.address), r.fixed(n.incarnation), r.fixed(state);
  if (kind < 1 || kind > 3 || state < 1 || state > 2) r.fail("bad enum value");
  WEFT_RETURN_IF_ERROR(r.finish());
  n.kind = static_cast<NodeKind>(kind);
  n.state = static_cast<NodeState>(state);
  return n;
}

Result<TargetInfo> decode_target(Reader& r) {
  TargetInfo t;
  uint8_t reported = 0;
  r.fixed(t.id), r.fixed(t.node_id), r.str(t.name), r.fixed(reported), r.fixed(t.capacity_bytes),
      r.fixed(t.used_bytes);
  if (!r.at_end()) r.fixed(t.data_id);  // records written before it have none (0: not known)
  uint8_t lost = 0;
  if (!r.at_end()) r.fixed(lost);  // likewise (false)
  if (reported > 1 || lost > 1) r.fail("bad flag");
  t.lost_data = lost == 1;
  WEFT_RETURN_IF_ERROR(r.finish());
  t.reported = reported == 1;
  return t;
}

Result<ChainTableInfo> decode_table(Reader& r) {
  ChainTableInfo t;
  uint32_t n = 0;
  r.fixed(t.id), r.fixed(t.replicas), r.count(n, sizeof(ChainId));
  for (uint32_t i = 0; i < n; ++i) r.fixed(t.chains.emplace_back());
  WEFT_RETURN_IF_ERROR(r.finish());
  return t;
}

Result<ChainInfo> decode_chain(Reader& r) {
  ChainInfo c;
  uint32_t n = 0;
  r.fixed(c.id), r.fixed(c.table_id), r.fixed(c.version), r.count(n, sizeof(TargetId) + 1);
  for (uint32_t i = 0; i < n; ++i) {
    ChainEntry& e = c.entries.emplace_back();
    uint8_t state = 0;
    if (r.fixed(e.target_id) && r.fixed(state) && !valid_state(state)) r.fail("bad target state");
    e.state = static_cast<TargetState>(state);
  }
  WEFT_RETURN_IF_ERROR(r.finish());
  return c;
}

// Decodes a record whose key is prefix + big-endian id into `map`, checking the ids agree.
template <class Map, class Decode>
Result<void> decode_into(std::string_view key, std::string_view value, Map& map, Decode decode) {
  using Id = typename Map::key_type;
  WEFT_TRY(Id id, id_of<Id>(key));
  Reader r(key, value);
  WEFT_TRY(auto item, decode(r));
  if (item.id != id) return error(Code::kCorruption, "mgmt state: record {} stored under key id {}", item.id, id);
  map[id] = std::move(item);
  return {};
}

Result<void> decode_meta(std::string_view key, std::string_view value, PersistedState& out) {
  Reader r(key, value);
  r.fixed(out.routing.version), r.fixed(out.ids.next_node), r.fixed(out.ids.next_target),
      r.fixed(out.ids.next_chain), r.fixed(out.ids.next_table);
  return r.finish();
}

Result<void> decode_leases(std::string_view key, std::string_view value, PersistedState& out) {
  Reader r(key, value);
  int64_t server = 0, client = 0;
  r.fixed(server), r.fixed(client);
  if (server < 0 || client < 0) r.fail("negative lease");
  WEFT_RETURN_IF_ERROR(r.finish());
  out.leases = {.server = Duration(server), .client = Duration(client)};
  return {};
}

Result<void> decode_meta_store(std::string_view key, std::string_view value, PersistedState& out) {
  Reader r(key, value);
  r.fixed(out.meta_store.store_id), r.fixed(out.meta_store.ids_issued_below);
  return r.finish();
}

}  // namespace

std::string meta_key() { return "V"; }
std::string leases_key() { return "L"; }
std::string meta_store_key() { return "S"; }

std::string encode_meta_store(const MetaStoreRecord& m) {
  return Writer(kRecordFormat).fixed(m.store_id).fixed(m.ids_issued_below).take();
}

std::string encode_leases(const GrantedLeases& l) {
  return Writer(kRecordFormat).fixed(static_cast<int64_t>(l.server.count())).fixed(static_cast<int64_t>(l.client.count()))
      .take();
}
std::string node_key(NodeId id) { return key_of('N', id); }
std::string target_key(TargetId id) { return key_of('T', id); }
std::string table_key(ChainTableId id) { return key_of('B', id); }
std::string chain_key(ChainId id) { return key_of('C', id); }

std::string encode_meta(RoutingVersion version, const IdCounters& ids) {
  return Writer(kRecordFormat).fixed(version).fixed(ids.next_node).fixed(ids.next_target)
      .fixed(ids.next_chain).fixed(ids.next_table).take();
}

std::string encode_node(const NodeInfo& n) {
  return Writer(kRecordFormat).fixed(n.id).fixed(static_cast<uint8_t>(n.kind)).str(n.address)
      .fixed(n.incarnation).fixed(static_cast<uint8_t>(n.state)).take();
}

std::string encode_target(const TargetInfo& t) {
  return Writer(kRecordFormat).fixed(t.id).fixed(t.node_id).str(t.name).fixed(static_cast<uint8_t>(t.reported))
      .fixed(t.capacity_bytes).fixed(t.used_bytes).fixed(t.data_id).fixed(static_cast<uint8_t>(t.lost_data)).take();
}

std::string encode_table(const ChainTableInfo& t) {
  Writer w(kRecordFormat);
  w.fixed(t.id).fixed(t.replicas).fixed(static_cast<uint32_t>(t.chains.size()));
  for (ChainId c : t.chains) w.fixed(c);
  return w.take();
}

std::string encode_chain(const ChainInfo& c) {
  Writer w(kRecordFormat);
  w.fixed(c.id).fixed(c.table_id).fixed(c.version).fixed(static_cast<uint32_t>(c.entries.size()));
  for (const ChainEntry& e : c.entries) w.fixed(e.target_id).fixed(static_cast<uint8_t>(e.state));
  return w.take();
}

Result<void> decode_record(std::string_view key, std::string_view value, PersistedState& out) {
  if (key == meta_key()) return decode_meta(key, value, out);
  if (key == leases_key()) return decode_leases(key, value, out);
  if (key == meta_store_key()) return decode_meta_store(key, value, out);
  switch (key.empty() ? '\0' : key[0]) {
    case 'N': return decode_into(key, value, out.routing.nodes, decode_node);
    case 'T': return decode_into(key, value, out.routing.targets, decode_target);
    case 'B': return decode_into(key, value, out.routing.tables, decode_table);
    case 'C': return decode_into(key, value, out.routing.chains, decode_chain);
    default: return error(Code::kCorruption, "mgmt state: unknown key '{}'", key.substr(0, 1));
  }
}

}  // namespace weft::mgmt
