// Hostile requests against the meta service: raw MetaRequests, sent through
// rpc::Client as MetaClient sends them but without its checks, to every
// method of service_methods.h on an in-process server. They mix a small
// valid tree (dirs, files, a symlink, a hard link, a FIFO, xattrs, a write
// session) with absent and extreme inode numbers, hostile names ("", ".",
// "..", '/', NUL, 255/256/5000 bytes, non-UTF-8), random modes, flags, node
// types, lengths, cookies, limits, layouts, session ids, xattrs, huge inode
// lists, random credentials, and missing or reused request ids. Meta is the
// one place that may trust no client: every request must get an answer
// within the call timeout, and every failure must be a deliberate code, not
// kInternal (an unforeseen path) nor a transport failure (a hung or broken
// server). Afterwards the server still answers, every name in the tree is a
// valid one, and fsck finds the store consistent.
// Seed: WEFT_HOSTILE_SEED (decimal or 0x hex) replaces the fixed one.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "common/hostile_draw.h"
#include "meta/proto_convert.h"
#include "meta/service.h"
#include "meta/service_methods.h"
#include "meta/test_util.h"
#include "rpc/client.h"
#include "rpc/server.h"

namespace weft::meta {
namespace {

using testing::TempDir;

constexpr uint64_t kDefaultSeed = 0x5eed'4057'11e0'0001;
constexpr int kRequestsPerMethod = 150;
constexpr uint32_t kCallTimeoutMs = 10000;
constexpr uint64_t kSetupClient = 0x5e7;   // request ids of the valid tree
constexpr uint64_t kStormClient = 0x570a;  // request ids of the storm
constexpr uint32_t kOwnerUid = 1000;       // owns /alice

struct Method {
  rpc::MethodId id;
  const char* name;
};

// Every method of service_methods.h.
constexpr Method kMethods[] = {
    {method::kLookup, "lookup"},        {method::kGetattr, "getattr"},
    {method::kReadlink, "readlink"},    {method::kReaddir, "readdir"},
    {method::kStatfs, "statfs"},        {method::kGetxattr, "getxattr"},
    {method::kListxattr, "listxattr"},  {method::kGetLayout, "get_layout"},
    {method::kBatchStat, "batch_stat"}, {method::kHoldReads, "hold_reads"},
    {method::kCreate, "create"},        {method::kMkdir, "mkdir"},
    {method::kSymlink, "symlink"},      {method::kLink, "link"},
    {method::kUnlink, "unlink"},        {method::kRmdir, "rmdir"},
    {method::kRename, "rename"},        {method::kSetattr, "setattr"},
    {method::kSetxattr, "setxattr"},    {method::kRemovexattr, "removexattr"},
    {method::kSetLayout, "set_layout"}, {method::kOpen, "open"},
    {method::kClose, "close"},          {method::kReportLength, "report_length"},
    {method::kOpenRead, "open_read"},   {method::kOpenReadAt, "open_read_at"},
    {method::kMknod, "mknod"},          {method::kCloseWithLength, "close_with_length"},
};

uint64_t storm_seed() { return weft::hostile_seed(kDefaultSeed); }

// Failures that no request may cause: an unforeseen path, a hung or broken
// server, a damaged store, or a reply that is not a MetaReply.
bool is_server_fault(Code c) {
  switch (c) {
    case Code::kInternal:
    case Code::kTimeout:
    case Code::kDisconnected:
    case Code::kUnavailable:
    case Code::kUnknownMethod:
    case Code::kProtocol:
    case Code::kCorruption:
    case Code::kIoError:
    case Code::kOutcomeUnknown:
      return true;
    default:
      return false;
  }
}

bool is_transport_failure(Code c) { return c == Code::kTimeout || c == Code::kDisconnected || c == Code::kUnavailable; }

// A name the store may hold: one path component.
bool storable_name(const std::string& n) {
  return !n.empty() && n.size() <= kNameBytesMax && n != "." && n != ".." && n.find('/') == std::string::npos &&
         n.find('\0') == std::string::npos;
}

bool is_dir(uint32_t wire_type) { return wire_type == static_cast<uint32_t>(InodeType::kDirectory); }

// Names no directory may hold (an overlong '/' among them), and xattr
// names of every namespace; kOddNameLengths gives names at the length limit.
using namespace std::string_view_literals;
constexpr std::string_view kOddNames[] = {""sv,           "."sv,
                                          ".."sv,         "/"sv,
                                          "a/b"sv,        "\0"sv,
                                          "a\0b"sv,       "\xff\xfe\x80"sv,
                                          "\xc0\xaf"sv,   "user."sv,
                                          "user.a"sv,     "trusted.t"sv,
                                          "security.x"sv, "system.posix_acl_access"sv};
constexpr size_t kOddNameLengths[] = {kNameBytesMax, kNameBytesMax + 1, 5000};

// The request as text, short enough for a failure message.
std::string describe(const Method& m, const pb::MetaRequest& q) {
  std::string text = q.ShortDebugString();
  if (text.size() > 1500) text = text.substr(0, 1500) + fmt::format("... ({} chars)", text.size());
  return fmt::format("meta.{} {{{}}}", m.name, text);
}

// Hostile field values, and pools of valid ones learnt from the tree and
// from the answers.
class Hostile {
 public:
  explicit Hostile(uint64_t seed) : rng_(seed) {}

  void add_ino(Ino ino, bool dir = false) { add_to(dir ? dirs_ : inos_, ino, 256); }
  void add_session(Ino ino, uint64_t id) { add_to(sessions_, {ino, id}, 128); }
  void add_name(const std::string& name) {
    if (storable_name(name)) add_to(names_, name, 256);
  }
  void add_cookie(const std::string& cookie) { add_to(cookies_, cookie, 64); }
  std::mt19937_64& rng() { return rng_; }

  pb::MetaRequest request() {
    wild_ = pick<int>({5, 30, 80});
    pb::MetaRequest q;
    cred(q.mutable_cred());
    request_id(q);
    q.set_ino(ino());
    q.set_name(name());
    q.set_new_parent(ino());
    q.set_new_name(name());
    if (chance(80)) q.set_mode(mode());
    if (chance(80)) q.set_flags(flags());
    if (chance(80)) q.set_value(value());
    if (chance(50)) q.set_limit(limit());
    if (chance(80)) session(q);
    if (chance(60)) q.set_length(big());
    if (chance(80)) layout(q.mutable_layout());
    if (chance(50)) attr(q.mutable_attr());
    q.set_exclusive(chance(50));
    q.set_open_write(chance(25));
    q.set_open_read(chance(60));
    if (chance(30)) inos(q);
    if (wild() && chance(30)) expect_parent(q.mutable_expect_parent());
    if (chance(85)) q.set_node_type(node_type());
    if (chance(40)) q.set_rdev(big());
    q.set_with_queued(chance(30));
    if (chance(30)) q.set_hold_seq(pick<uint64_t>({0, 1, UINT64_MAX, u64()}));
    if (chance(30)) q.set_ack_cut(pick<uint64_t>({0, 1, 2, UINT64_MAX, u64()}));
    q.set_answers_cuts(chance(50));
    q.set_abandon(chance(20));
    return q;
  }

 private:
  template <class T>
  void add_to(std::vector<T>& pool, T v, size_t cap) {
    if (pool.size() < cap) return pool.push_back(std::move(v));
    pool[below(cap)] = std::move(v);
  }
  uint64_t below(uint64_t n) { return std::uniform_int_distribution<uint64_t>(0, n - 1)(rng_); }
  bool chance(int percent) { return below(100) < static_cast<uint64_t>(percent); }
  // Whether a field gets a hostile value rather than a plausible one.
  bool wild() { return chance(wild_); }
  uint64_t u64() { return rng_(); }
  uint32_t u32() { return static_cast<uint32_t>(rng_()); }
  template <class T>
  T pick(std::initializer_list<T> options) {
    return options.begin()[below(options.size())];
  }
  template <class T>
  const T& pick_from(const std::vector<T>& pool) {
    return pool[below(pool.size())];
  }

  std::string garbage(size_t len_max) {
    std::string s(below(len_max + 1), '\0');
    for (char& ch : s) ch = static_cast<char>(rng_());
    return s;
  }

  Ino ino() {
    if (!dirs_.empty() && !wild() && chance(50)) return pick_from(dirs_);
    if (!inos_.empty() && !wild()) return pick_from(inos_);
    return pick<uint64_t>({0, 1, 2, UINT64_MAX, UINT64_MAX - 1, uint64_t{1} << 63, INT64_MAX, u64(), 1 + below(5000)});
  }

  std::string name() {
    if (!wild() && !names_.empty() && chance(50)) return pick_from(names_);
    if (!wild()) return fmt::format("{}{}", chance(70) ? "n" : "user.x", below(40));
    if (chance(60)) return std::string(kOddNames[below(std::size(kOddNames))]);
    if (chance(50)) return std::string(kOddNameLengths[below(std::size(kOddNameLengths))], 'n');
    return garbage(300);
  }

  uint32_t mode() {
    if (!wild()) return pick<uint32_t>({0644, 0755, 0600, 0777});
    return pick<uint32_t>({0, 07777, 010644, 0170777, UINT32_MAX, u32()});
  }
  // Rename and xattr flags: 0..2 are defined.
  uint32_t flags() {
    return wild() ? pick<uint32_t>({3, 4, 0x80000000u, UINT32_MAX, u32()}) : pick<uint32_t>({0, 1, 2});
  }
  uint32_t limit() {
    return wild() ? pick<uint32_t>({1, 4096, 4097, UINT32_MAX, u32()}) : pick<uint32_t>({0, 16, 1024});
  }
  uint32_t node_type() {
    if (!wild()) return pick<uint32_t>({4, 5, 6, 7});
    return pick<uint32_t>({0, 1, 2, 3, 8, 255, UINT32_MAX, u32()});
  }
  uint64_t big() {
    if (!wild()) return below(uint64_t{1} << 24);
    return pick<uint64_t>({0, 1, 4096, kFileBytesMax, kFileBytesMax + 1, INT64_MAX, uint64_t{INT64_MAX} + 1,
                           UINT64_MAX - 1, UINT64_MAX, u64()});
  }
  int64_t time() {
    if (!wild()) return pick<int64_t>({SetAttr::kTimeNow, 1'700'000'000'000'000'000});
    return pick<int64_t>({0, -1, INT64_MIN, INT64_MIN + 1, INT64_MAX, static_cast<int64_t>(u64())});
  }
  uint64_t session_id() { return pick<uint64_t>({0, 1, UINT64_MAX, u64()}); }
  // A write session and its inode, or a session id that does not exist.
  void session(pb::MetaRequest& q) {
    if (sessions_.empty() || wild()) return q.set_session_id(session_id());
    const auto& [ino, id] = pick_from(sessions_);
    if (chance(30)) q.set_ino(ino);
    q.set_session_id(id);
  }

  // Symlink targets, xattr values and readdir cookies.
  std::string value() {
    if (!cookies_.empty() && chance(15)) return pick_from(cookies_);
    if (!wild()) return name();
    if (chance(40)) return garbage(5000);
    return std::string(pick<size_t>({0, kSymlinkBytesMax, kSymlinkBytesMax + 1, 65536, 65537, 300000}), 'v');
  }

  void cred(pb::Cred* c) {
    if (!wild() && chance(70)) return;  // root
    if (!wild()) {
      c->set_uid(kOwnerUid);
      c->set_gid(kOwnerUid);
      return;
    }
    c->set_uid(pick<uint32_t>({1, 65534, UINT32_MAX, u32(), kOwnerUid + 1}));
    c->set_gid(pick<uint32_t>({0, 1, kOwnerUid, UINT32_MAX, u32()}));
    const size_t groups = pick<size_t>({0, 1, 16, 2000, 65536, below(64)});
    for (size_t i = 0; i < groups; ++i) c->add_groups(pick<uint32_t>({0, kOwnerUid, u32()}));
  }

  // None, a fresh one, an odd one, or one used before (with other content).
  void request_id(pb::MetaRequest& q) {
    const uint64_t roll = wild() ? below(50) : 50 + below(50);
    if (roll < 20 || roll >= 95) return;
    if (roll < 40 && !used_ids_.empty()) {
      *q.mutable_req() = pick_from(used_ids_);
      return;
    }
    pb::RequestId id;
    if (roll < 50) {
      id.set_client_id(pick<uint64_t>({0, 1, UINT64_MAX, kStormClient, kSetupClient}));
      id.set_seq(pick<uint64_t>({0, 1, UINT64_MAX, u64()}));
    } else {
      id.set_client_id(kStormClient);
      id.set_seq(++seq_);
    }
    add_to(used_ids_, id, 64);
    *q.mutable_req() = id;
  }

  void layout(pb::Layout* l) {
    if (!wild()) return to_proto(Layout{1 << 20, 1 + static_cast<uint32_t>(below(8)), 1, 0, u64()}, l);
    // chunk_bytes is 32 bits on the wire: 2^31 and UINT32_MAX stand for 2^40.
    l->set_chunk_bytes(pick<uint32_t>({0, 1, 2, 4096, 64 << 10, 1 << 20, 64 << 20, 128 << 20, 1u << 31, UINT32_MAX}));
    l->set_stripe_count(pick<uint32_t>({0, 1, 8, 9, 16, 1 << 20, UINT32_MAX}));
    l->set_chain_table_id(pick<uint32_t>({0, 1, 2, UINT32_MAX}));
    l->set_first_chain(pick<uint32_t>({0, 7, 8, UINT32_MAX}));
    l->set_shuffle_seed(u64());
  }

  void attr(pb::SetAttr* a) {
    if (chance(50)) a->set_has_mode(true), a->set_mode(mode());
    if (chance(30)) a->set_has_uid(true), a->set_uid(pick<uint32_t>({0, kOwnerUid, UINT32_MAX, u32()}));
    if (chance(30)) a->set_has_gid(true), a->set_gid(pick<uint32_t>({0, kOwnerUid, UINT32_MAX, u32()}));
    if (chance(40)) a->set_has_size(true), a->set_size(big());
    if (chance(30)) a->set_has_atime(true), a->set_atime_ns(time());
    if (chance(30)) a->set_has_mtime(true), a->set_mtime_ns(time());
    if (chance(30)) a->set_size_session(sessions_.empty() || wild() ? session_id() : pick_from(sessions_).second);
    if (chance(20)) a->set_has_expect_size(true), a->set_expect_size(big());
    if (chance(20)) a->set_has_expect_ctime(true), a->set_expect_ctime_ns(time());
    a->set_no_cut(chance(30));
  }

  void inos(pb::MetaRequest& q) {
    // batch_stat takes 4096, hold_reads 65536 (meta/read_holds.h).
    const size_t n = wild() ? pick<size_t>({0, 4096, 4097, 10000, 65536, 65537}) : pick<size_t>({1, 7, 100});
    for (size_t i = 0; i < n; ++i) q.add_inos(ino());
  }

  void expect_parent(pb::ParentCheck* p) {
    p->set_dir(ino());
    p->set_name(name());
    const size_t above = pick<size_t>({0, 1, 3, 300});
    for (size_t i = 0; i < above; ++i) {
      auto* a = p->add_above();
      a->set_dir(ino());
      a->set_name(name());
      a->set_ino(ino());
    }
  }

  std::mt19937_64 rng_;
  std::vector<Ino> inos_;
  std::vector<Ino> dirs_;
  std::vector<std::pair<Ino, uint64_t>> sessions_;
  std::vector<std::string> names_;
  std::vector<std::string> cookies_;
  std::vector<pb::RequestId> used_ids_;
  uint64_t seq_ = 0;
  int wild_ = 50;  // percent of hostile fields in the request being made
};

class HostileRequestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    StoreOptions so;
    so.path = dir_.path() + "/store";
    so.sync = false;
    so.chain_count = 8;
    so.registry = &registry_;
    so.reserve_bytes = 0;
    so.read_hold = std::chrono::milliseconds(4000);  // hold_reads keeps holds
    auto store = MetaStore::open(so);
    ASSERT_TRUE(store.has_value()) << store.error();
    store_ = std::move(*store);
    server_ = std::make_unique<rpc::Server>(io_, rpc::ServerOptions{.cluster_token = "t"}, registry_);
    register_meta_service(*server_, *store_);
    auto port = server_->listen("127.0.0.1", 0);
    ASSERT_TRUE(port.has_value()) << port.error();
    ep_ = rpc::Endpoint{"127.0.0.1", *port};
    rpc_ = std::make_unique<rpc::Client>(io_, rpc::ClientOptions{.cluster_token = "t"});
  }
  void TearDown() override {
    if (!server_) return;  // SetUp failed
    rpc_.reset();
    server_->stop();
    auto report = fsck(*store_->db());
    ASSERT_TRUE(report.has_value()) << report.error();
    EXPECT_TRUE(report->ok()) << report->summary();
  }

  Result<pb::MetaReply> call(rpc::MethodId m, const pb::MetaRequest& q) {
    return rpc_->call_blocking<pb::MetaReply>(ep_, m, q, {}, kCallTimeoutMs);
  }

  // A valid request of the tree's setup, as root or `uid`, with a fresh request id.
  pb::MetaRequest setup_request(Ino ino, std::string name = {}, uint32_t uid = 0) {
    pb::MetaRequest q;
    q.mutable_cred()->set_uid(uid);
    q.mutable_cred()->set_gid(uid);
    q.mutable_req()->set_client_id(kSetupClient);
    q.mutable_req()->set_seq(++setup_seq_);
    q.set_ino(ino);
    q.set_name(std::move(name));
    return q;
  }
  pb::MetaReply must(rpc::MethodId m, const pb::MetaRequest& q) {
    auto r = call(m, q);
    EXPECT_TRUE(r.has_value()) << "setup: " << q.ShortDebugString() << ": " << r.error();
    return r ? std::move(*r) : pb::MetaReply{};
  }
  Ino made(rpc::MethodId m, const pb::MetaRequest& q, Hostile& h) {
    const pb::Inode inode = must(m, q).inode();
    const Ino ino = inode.ino();
    h.add_ino(ino, is_dir(inode.type()));
    h.add_name(q.name());
    h.add_name(q.new_name());
    return ino;
  }

  void make_tree(Hostile& h);
  // Sends one hostile request; false once the server stopped answering.
  bool storm_one(const Method& m, Hostile& h, int index);
  void learn(const pb::MetaRequest& q, const pb::MetaReply& rep, Hostile& h);
  void expect_valid_names_below(Ino root);

  TempDir dir_;
  metrics::Registry registry_;
  rpc::IoPool io_{2};
  std::unique_ptr<MetaStore> store_;
  std::unique_ptr<rpc::Server> server_;
  rpc::Endpoint ep_;
  std::unique_ptr<rpc::Client> rpc_;
  uint64_t setup_seq_ = 0;
  uint64_t seed_ = storm_seed();
  std::map<std::string, HostileCodeCounts> outcomes_;  // method -> code name -> count
};

// /d (layout, trusted xattr) with sub/, f (4 KiB, open for writing, user
// xattr), s -> f and a FIFO; /hard (a second link of /d/f); /alice (0700,
// uid 1000) with g.
void HostileRequestTest::make_tree(Hostile& h) {
  auto with_mode = [](pb::MetaRequest q, uint32_t mode) {
    q.set_mode(mode);
    return q;
  };
  auto with_value = [](pb::MetaRequest q, std::string value) {
    q.set_value(std::move(value));
    return q;
  };
  h.add_ino(kRootIno, true);
  const Ino d = made(method::kMkdir, with_mode(setup_request(kRootIno, "d"), 0755), h);
  made(method::kMkdir, with_mode(setup_request(d, "sub"), 0755), h);
  auto open_f = with_mode(setup_request(d, "f"), 0644);
  open_f.set_open_read(true);
  open_f.set_open_write(true);
  const pb::MetaReply f = must(method::kCreate, open_f);
  h.add_ino(f.inode().ino());
  h.add_name("f");
  h.add_session(f.inode().ino(), f.session_id());
  auto report = setup_request(f.inode().ino());
  report.set_session_id(f.session_id());
  report.set_length(4096);
  must(method::kReportLength, report);
  made(method::kSymlink, with_value(setup_request(d, "s"), "f"), h);
  auto fifo = with_mode(setup_request(d, "fifo"), 0644);
  fifo.set_node_type(static_cast<uint32_t>(InodeType::kFifo));
  made(method::kMknod, fifo, h);
  auto link = setup_request(f.inode().ino());
  link.set_new_parent(kRootIno);
  link.set_new_name("hard");
  made(method::kLink, link, h);
  must(method::kSetxattr, with_value(setup_request(f.inode().ino(), "user.a"), "1"));
  must(method::kSetxattr, with_value(setup_request(d, "trusted.t"), "x"));
  auto layout = setup_request(d);
  to_proto(Layout{1 << 20, 2, 1, 0, 0}, layout.mutable_layout());
  must(method::kSetLayout, layout);
  const Ino alice = made(method::kMkdir, with_mode(setup_request(kRootIno, "alice"), 0700), h);
  auto own = setup_request(alice);
  own.mutable_attr()->set_has_uid(true);
  own.mutable_attr()->set_uid(kOwnerUid);
  own.mutable_attr()->set_has_gid(true);
  own.mutable_attr()->set_gid(kOwnerUid);
  must(method::kSetattr, own);
  made(method::kCreate, with_mode(setup_request(alice, "g", kOwnerUid), 0600), h);
}

// What a successful answer tells about valid inodes, names, sessions and cookies.
void HostileRequestTest::learn(const pb::MetaRequest& q, const pb::MetaReply& rep, Hostile& h) {
  if (rep.inode().ino() != 0) h.add_ino(rep.inode().ino(), is_dir(rep.inode().type()));
  if (rep.session_id() != 0) h.add_session(rep.inode_present() ? rep.inode().ino() : q.ino(), rep.session_id());
  for (const auto& e : rep.entries()) {
    h.add_ino(e.ino(), is_dir(e.type()));
    h.add_name(e.name());
  }
  if (!rep.value().empty()) h.add_cookie(rep.value());
  h.add_name(q.name());
  h.add_name(q.new_name());
}

bool HostileRequestTest::storm_one(const Method& m, Hostile& h, int index) {
  const pb::MetaRequest q = h.request();
  auto r = call(m.id, q);
  const Code code = r ? Code::kOk : r.error().code();
  ++outcomes_[m.name][std::string(code_name(code))];
  if (r) {
    learn(q, *r, h);
    return true;
  }
  EXPECT_FALSE(is_server_fault(code)) << "seed " << seed_ << ", request " << index << ": " << describe(m, q)
                                      << "\n  answered " << r.error();
  return !is_transport_failure(code);
}

// Every entry reachable from `root` has a name the store may hold (readdir
// as root, which no mode the storm set keeps out).
void HostileRequestTest::expect_valid_names_below(Ino root) {
  std::vector<Ino> dirs{root};
  for (size_t i = 0; i < dirs.size() && i < 4096; ++i) {
    std::string cookie;
    for (int page = 0; page < 1000; ++page) {
      pb::MetaRequest q;
      q.set_ino(dirs[i]);
      q.set_value(cookie);
      auto r = call(method::kReaddir, q);
      ASSERT_TRUE(r.has_value()) << "readdir of " << dirs[i] << ": " << r.error();
      for (const auto& e : r->entries()) {
        EXPECT_TRUE(storable_name(e.name())) << "entry of " << dirs[i] << ": " << e.ShortDebugString();
        if (is_dir(e.type())) dirs.push_back(e.ino());
      }
      if (r->eof()) break;
      cookie = r->value();
    }
  }
}

TEST_F(HostileRequestTest, EveryMethodAnswersHostileRequestsWithAClearError) {
  std::printf("hostile request seed: %llu (WEFT_HOSTILE_SEED overrides)\n", static_cast<unsigned long long>(seed_));
  Hostile h(seed_);
  ASSERT_NO_FATAL_FAILURE(make_tree(h));
  ASSERT_FALSE(HasFailure()) << "the valid tree could not be made";

  std::array<size_t, std::size(kMethods)> order;
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  const auto start = std::chrono::steady_clock::now();
  int sent = 0;
  for (int round = 0; round < kRequestsPerMethod; ++round) {
    std::shuffle(order.begin(), order.end(), h.rng());
    for (size_t i : order)
      ASSERT_TRUE(storm_one(kMethods[i], h, sent++)) << "the server stopped answering: the storm ends here";
  }
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
  std::printf("%d requests (%d per method) in %lld ms\n", sent, kRequestsPerMethod,
              static_cast<long long>(took.count()));
  for (const auto& [name, codes] : outcomes_) {
    const auto [line, total] = describe_counts(codes);
    std::printf("  meta.%s: %d:%s\n", name.c_str(), total, line.c_str());
  }

  pb::MetaRequest root;
  root.set_ino(kRootIno);
  auto attr = call(method::kGetattr, root);
  ASSERT_TRUE(attr.has_value()) << "getattr of the root after the storm: " << attr.error();
  EXPECT_EQ(attr->inode().ino(), kRootIno);
  EXPECT_TRUE(is_dir(attr->inode().type()));
  expect_valid_names_below(kRootIno);
}

// The storm reuses request ids without looking at the answers; here what a
// reused id must answer: the first outcome, never a second execution, and
// kInvalidArgument for another method.
TEST_F(HostileRequestTest, AReusedRequestIdNeverRunsAgain) {
  auto first = setup_request(kRootIno, "once");
  first.set_mode(0755);
  const pb::MetaReply made_once = must(method::kMkdir, first);
  auto other = first;
  other.set_name("other");
  other.set_mode(0700);
  auto again = call(method::kMkdir, other);
  ASSERT_TRUE(again.has_value()) << again.error();
  EXPECT_EQ(again->inode().ino(), made_once.inode().ino()) << "not the first outcome";
  auto looked = call(method::kLookup, other);
  ASSERT_FALSE(looked.has_value()) << "the reused id made 'other'";
  EXPECT_EQ(looked.error().code(), Code::kNotFound) << looked.error();
  auto unlink = call(method::kUnlink, first);
  ASSERT_FALSE(unlink.has_value()) << "an unlink under a mkdir's id ran";
  EXPECT_EQ(unlink.error().code(), Code::kInvalidArgument) << unlink.error();
}

}  // namespace
}  // namespace weft::meta
