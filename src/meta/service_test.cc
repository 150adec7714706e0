// The meta service through RPC: every operation's success and main error
// paths via MetaClient against an in-process server (errno codes and
// credentials preserved), lost replies retried with the same request id,
// and failover across addresses.
#include "meta/service.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <thread>

#include <asio/post.hpp>
#include <rocksdb/db.h>

#include "common/fault.h"
#include "meta/codec.h"
#include "meta/meta_client.h"
#include "meta/proto_convert.h"
#include "meta/service_methods.h"
#include "meta/session_reaper.h"
#include "meta/test_util.h"
#include "rpc/client.h"
#include "rpc/server.h"

namespace weft::meta {
namespace {

using testing::TempDir;

const Cred kRoot{};
const Cred kAlice{1000, 1000, {}};
const Cred kBob{1001, 1001, {}};

class ServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    StoreOptions so;
    so.path = dir_.path() + "/store";
    so.sync = durable();
    so.chain_count = 8;
    so.request_window = request_window();
    so.registry = &registry_;
    auto store = MetaStore::open(so);
    ASSERT_TRUE(store.has_value()) << store.error();
    store_ = std::move(*store);
    rpc::ServerOptions opts;
    opts.cluster_token = "t";
    opts.blocking_threads = 8;
    server_ = std::make_unique<rpc::Server>(io_, opts, registry_);
    register_meta_service(*server_, *store_, [this]() -> Result<void> {
      if (checks_left_.load() >= 0 && checks_left_.fetch_sub(1) <= 0) fenced_ = true;
      if (fenced_) {
        refusals_.fetch_add(1);
        return error(Code::kUnavailable, "meta test: fenced by mgmtd: the reason");
      }
      return {};
    });
    auto port = server_->listen("127.0.0.1", 0);
    ASSERT_TRUE(port.has_value()) << port.error();
    port_ = *port;
    rpc_ = std::make_unique<rpc::Client>(io_, rpc::ClientOptions{.cluster_token = "t"});
    client_ = make_client({rpc::Endpoint{"127.0.0.1", port_}});
  }
  void TearDown() override {
    client_.reset();
    rpc_.reset();
    server_->stop();
    auto report = fsck(*store_->db());
    ASSERT_TRUE(report.has_value()) << report.error();
    EXPECT_TRUE(report->ok()) << report->summary();
  }
  std::unique_ptr<MetaClient> make_client(std::vector<rpc::Endpoint> addrs) {
    MetaClientOptions o;
    o.addresses = std::move(addrs);
    o.call_timeout_ms = 2000;
    o.retry_time_ms_max = 5000;
    return std::make_unique<MetaClient>(io_, *rpc_, o);
  }
  MetaClient& c() { return *client_; }
  virtual bool durable() const { return false; }
  virtual uint64_t request_window() const { return 1024; }

  TempDir dir_;
  metrics::Registry registry_;
  rpc::IoPool io_{2};
  std::unique_ptr<MetaStore> store_;
  std::unique_ptr<rpc::Server> server_;
  uint16_t port_ = 0;
  std::unique_ptr<rpc::Client> rpc_;
  std::unique_ptr<MetaClient> client_;
  std::atomic<bool> fenced_{false};  // what the service's check answers
  std::atomic<int> checks_left_{-1};  // >= 0: fenced_ is set once that many checks passed
  std::atomic<int> refusals_{0};
};

#define ASSERT_CODE(expr, want)                            \
  do {                                                     \
    auto r_ = (expr);                                      \
    ASSERT_FALSE(r_.has_value()) << #expr;                 \
    EXPECT_EQ(r_.error().code(), want) << r_.error();      \
  } while (0)

TEST_F(ServiceTest, NamespaceOperations) {
  auto d = c().mkdir(kRoot, kRootIno, "d", 0755);
  ASSERT_TRUE(d.has_value()) << d.error();
  EXPECT_TRUE(d->is_dir());
  ASSERT_CODE(c().mkdir(kRoot, kRootIno, "d", 0755), Code::kExists);

  auto f = c().create(kRoot, d->ino, "f", 0644, true, false);
  ASSERT_TRUE(f.has_value()) << f.error();
  EXPECT_TRUE(f->has_inode);
  EXPECT_EQ(f->inode.mode, 0644u);
  ASSERT_CODE(c().create(kRoot, d->ino, "f", 0644, true, false), Code::kExists);
  auto again = c().create(kRoot, d->ino, "f", 0644, false, false);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->inode.ino, f->inode.ino);

  auto looked = c().lookup(kRoot, d->ino, "f");
  ASSERT_TRUE(looked.has_value());
  EXPECT_EQ(looked->ino, f->inode.ino);
  ASSERT_CODE(c().lookup(kRoot, d->ino, "nope"), Code::kNotFound);
  ASSERT_CODE(c().lookup(kRoot, f->inode.ino, "x"), Code::kNotDirectory);
  auto attr = c().getattr(kRoot, d->ino);
  ASSERT_TRUE(attr.has_value());
  EXPECT_EQ(attr->nlink, 2u);
  ASSERT_CODE(c().getattr(kRoot, 999999), Code::kNotFound);

  auto s = c().symlink(kRoot, d->ino, "s", "f");
  ASSERT_TRUE(s.has_value()) << s.error();
  auto target = c().readlink(kRoot, s->ino);
  ASSERT_TRUE(target.has_value());
  EXPECT_EQ(*target, "f");
  ASSERT_CODE(c().readlink(kRoot, f->inode.ino), Code::kInvalidArgument);

  auto l = c().link(kRoot, f->inode.ino, kRootIno, "hard");
  ASSERT_TRUE(l.has_value()) << l.error();
  EXPECT_EQ(l->nlink, 2u);
  ASSERT_CODE(c().link(kRoot, d->ino, kRootIno, "dirlink"), Code::kNotPermitted);

  ASSERT_TRUE(c().rename(kRoot, d->ino, "f", d->ino, "g").has_value());
  ASSERT_CODE(c().lookup(kRoot, d->ino, "f"), Code::kNotFound);
  ASSERT_TRUE(c().create(kRoot, d->ino, "h", 0644, true, false).has_value());
  ASSERT_CODE(c().rename(kRoot, d->ino, "g", d->ino, "h", RenameFlags::kNoReplace), Code::kExists);
  ASSERT_TRUE(c().rename(kRoot, d->ino, "g", d->ino, "h", RenameFlags::kExchange).has_value());
  ASSERT_CODE(c().rename(kRoot, d->ino, "zz", d->ino, "h"), Code::kNotFound);

  ASSERT_CODE(c().rmdir(kRoot, kRootIno, "d"), Code::kNotEmpty);
  ASSERT_CODE(c().unlink(kRoot, kRootIno, "d"), Code::kIsDirectory);
  ASSERT_CODE(c().rmdir(kRoot, d->ino, "g"), Code::kNotDirectory);
  for (const char* n : {"g", "h", "s"}) ASSERT_TRUE(c().unlink(kRoot, d->ino, n).has_value()) << n;
  ASSERT_TRUE(c().unlink(kRoot, kRootIno, "hard").has_value());
  ASSERT_TRUE(c().rmdir(kRoot, kRootIno, "d").has_value());
  ASSERT_CODE(c().rmdir(kRoot, kRootIno, "d"), Code::kNotFound);
}

TEST_F(ServiceTest, ReaddirPagesAndBatchStat) {
  std::vector<Ino> inos;
  for (int i = 0; i < 25; ++i) {
    auto f = c().create(kRoot, kRootIno, fmt::format("f{:02}", i), 0644, true, false);
    ASSERT_TRUE(f.has_value());
    inos.push_back(f->inode.ino);
  }
  std::vector<std::string> names;
  std::string cookie;
  for (int pages = 0; pages < 10; ++pages) {
    auto page = c().readdir(kRoot, kRootIno, cookie, 10);
    ASSERT_TRUE(page.has_value()) << page.error();
    for (auto& e : page->entries) {
      names.push_back(e.name);
      EXPECT_EQ(e.attr.ino, e.ino);
    }
    cookie = page->cookie;
    if (page->eof) break;
  }
  ASSERT_EQ(names.size(), 25u);
  EXPECT_EQ(names.front(), "f00");
  EXPECT_EQ(names.back(), "f24");
  ASSERT_CODE(c().readdir(kRoot, inos[0], "", 10), Code::kNotDirectory);

  inos.push_back(123456789);
  auto stats = c().batch_stat(kRoot, inos);
  ASSERT_TRUE(stats.has_value()) << stats.error();
  ASSERT_EQ(stats->size(), 26u);
  EXPECT_EQ((*stats)[3]->ino, inos[3]);
  ASSERT_FALSE((*stats)[25].has_value());
  EXPECT_EQ((*stats)[25].error().code(), Code::kNotFound);
}

// Storage's orphan sweep asks with_queued: a removed file whose chunks wait
// in meta's GC queue (a reader may hold it for long) is meta's, not an orphan.
TEST_F(ServiceTest, BatchStatWithQueuedAnswersForFilesTheChunkGcHolds) {
  auto f = c().create(kRoot, kRootIno, "queued", 0644, true, false);
  ASSERT_TRUE(f.has_value()) << f.error();
  SetAttr grow;
  grow.size = 4096;  // a file with chunks is queued; an empty one is not
  ASSERT_TRUE(c().setattr(kRoot, f->inode.ino, grow).has_value());
  ASSERT_TRUE(c().unlink(kRoot, kRootIno, "queued").has_value());
  const std::vector<Ino> inos{f->inode.ino, 987654321};
  auto plain = c().batch_stat(kRoot, inos);
  ASSERT_TRUE(plain.has_value()) << plain.error();
  ASSERT_FALSE((*plain)[0].has_value());
  EXPECT_EQ((*plain)[0].error().code(), Code::kNotFound);
  auto queued = c().batch_stat(kRoot, inos, /*with_queued=*/true);
  ASSERT_TRUE(queued.has_value()) << queued.error();
  ASSERT_TRUE((*queued)[0].has_value()) << (*queued)[0].error();
  EXPECT_EQ((*queued)[0]->ino, f->inode.ino);
  EXPECT_EQ((*queued)[0]->size, 4096u);
  EXPECT_EQ((*queued)[1].error().code(), Code::kNotFound) << "never queued: gone";
}

TEST_F(ServiceTest, AttributesXattrsLayoutsAndStatfs) {
  auto f = c().create(kRoot, kRootIno, "f", 0644, true, false);
  ASSERT_TRUE(f.has_value());
  Ino ino = f->inode.ino;
  SetAttr a;
  a.mode = 0600;
  a.uid = 1000;
  auto after = c().setattr(kRoot, ino, a);
  ASSERT_TRUE(after.has_value()) << after.error();
  EXPECT_EQ(after->mode, 0600u);
  EXPECT_EQ(after->uid, 1000u);

  ASSERT_TRUE(c().setxattr(kRoot, ino, "user.k", "v1").has_value());
  ASSERT_CODE(c().setxattr(kRoot, ino, "user.k", "v2", XattrFlags::kCreate), Code::kExists);
  ASSERT_CODE(c().setxattr(kRoot, ino, "user.none", "v", XattrFlags::kReplace), Code::kNoData);
  auto v = c().getxattr(kRoot, ino, "user.k");
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(*v, "v1");
  auto names = c().listxattr(kRoot, ino);
  ASSERT_TRUE(names.has_value());
  EXPECT_EQ(*names, std::vector<std::string>{"user.k"});
  ASSERT_TRUE(c().removexattr(kRoot, ino, "user.k").has_value());
  ASSERT_CODE(c().getxattr(kRoot, ino, "user.k"), Code::kNoData);

  auto d = c().mkdir(kRoot, kRootIno, "d", 0755);
  ASSERT_TRUE(d.has_value());
  Layout l{1 << 20, 4, 1, 0, 0};
  ASSERT_TRUE(c().set_layout(kRoot, d->ino, l).has_value());
  auto got = c().get_layout(kRoot, d->ino);
  ASSERT_TRUE(got.has_value()) << got.error();
  EXPECT_EQ(got->stripe_count, 4u);
  ASSERT_CODE(c().set_layout(kRoot, d->ino, Layout{1000, 1, 1, 0, 0}), Code::kInvalidArgument);

  auto st = c().statfs(kRoot);
  ASSERT_TRUE(st.has_value()) << st.error();
  EXPECT_GE(st->inodes_used, 3u);
}

TEST_F(ServiceTest, SessionsAndLengths) {
  auto f = c().create(kRoot, kRootIno, "f", 0644, true, true);
  ASSERT_TRUE(f.has_value());
  ASSERT_NE(f->session_id, 0u);
  auto grown = c().report_length(kRoot, f->inode.ino, f->session_id, 4096);
  ASSERT_TRUE(grown.has_value()) << grown.error();
  EXPECT_EQ(grown->inode.size, 4096u);
  auto shrink = c().report_length(kRoot, f->inode.ino, f->session_id, 10);
  ASSERT_TRUE(shrink.has_value());
  EXPECT_EQ(shrink->inode.size, 4096u);
  ASSERT_CODE(c().report_length(kRoot, f->inode.ino, f->session_id + 1000, 1), Code::kBadHandle);
  ASSERT_TRUE(c().close(kRoot, f->inode.ino, f->session_id).has_value());

  auto ro = c().open(kRoot, f->inode.ino, OpenFlags{true, false});
  ASSERT_TRUE(ro.has_value()) << ro.error();
  EXPECT_EQ(ro->session_id, 0u);
  auto rw = c().open(kRoot, f->inode.ino, OpenFlags{true, true});
  ASSERT_TRUE(rw.has_value());
  EXPECT_NE(rw->session_id, 0u);
  ASSERT_TRUE(c().close(kRoot, f->inode.ino, rw->session_id).has_value());

  auto last = c().open(kRoot, f->inode.ino, OpenFlags{true, true});
  ASSERT_TRUE(last.has_value());
  auto closed = c().close_with_length(kRoot, f->inode.ino, last->session_id, 1 << 20);
  ASSERT_TRUE(closed.has_value()) << closed.error();
  EXPECT_EQ(closed->inode.size, 1u << 20);
  EXPECT_EQ(c().getattr(kRoot, f->inode.ino)->size, 1u << 20);
  ASSERT_CODE(c().close(kRoot, f->inode.ino, last->session_id), Code::kBadHandle);
}

// A write open without a request id belongs to the client id its connection
// announced: the session reaper closes it once that client holds no lease.
TEST_F(ServiceTest, WriteOpenWithoutARequestIdIsOwnedByItsConnection) {
  auto f = c().create(kRoot, kRootIno, "f", 0644, true, false);
  ASSERT_TRUE(f.has_value()) << f.error();
  pb::MetaRequest q;
  set_context(Context{kRoot, {}}, &q);
  q.set_ino(f->inode.ino);
  q.set_open_read(true);
  q.set_open_write(true);
  auto rep = rpc_->call_blocking<pb::MetaReply>(rpc::Endpoint{"127.0.0.1", port_}, method::kOpen, q, {}, 2000);
  ASSERT_TRUE(rep.has_value()) << rep.error();
  ASSERT_NE(rep->session_id(), 0u);
  std::string raw;
  ASSERT_TRUE(store_->db()->Get(rocksdb::ReadOptions(), key::session(f->inode.ino, rep->session_id()), &raw).ok());
  EXPECT_EQ(decode_session(raw)->client_id, rpc_->client_id());
  auto reaped = reap_sessions(*store_, [&](uint64_t id) { return id != rpc_->client_id(); }, INT64_MAX);
  ASSERT_TRUE(reaped.has_value()) << reaped.error();
  EXPECT_EQ(reaped->closed, 1u);
}

// Another client (its own request ids) may neither close nor report through
// a write session it did not open, whatever its credentials say.
TEST_F(ServiceTest, OnlyItsOwnerUsesASession) {
  auto d = c().mkdir(kRoot, kRootIno, "shared", 0777);
  ASSERT_TRUE(d.has_value()) << d.error();
  auto f = c().create(kAlice, d->ino, "f", 0666, true, true);
  ASSERT_TRUE(f.has_value()) << f.error();
  auto other = make_client({rpc::Endpoint{"127.0.0.1", port_}});
  ASSERT_CODE(other->close(kAlice, f->inode.ino, f->session_id), Code::kBadHandle);
  ASSERT_CODE(other->report_length(kAlice, f->inode.ino, f->session_id, 1), Code::kBadHandle);
  auto grown = c().report_length(kAlice, f->inode.ino, f->session_id, 4096);
  ASSERT_TRUE(grown.has_value()) << grown.error();
  EXPECT_EQ(grown->inode.size, 4096u);
  ASSERT_TRUE(c().close(kAlice, f->inode.ino, f->session_id).has_value());
}

// A create's access reaches meta: O_RDWR of an existing file needs read
// permission too. A request without open_read (a client from before it was
// sent for create) is checked as before: write only, or read when not for
// writing.
TEST_F(ServiceTest, CreateOfAnExistingFileChecksTheAccessItWasSent) {
  auto f = c().create(kRoot, kRootIno, "wo", 0222, true, false);
  ASSERT_TRUE(f.has_value()) << f.error();
  ASSERT_CODE(c().create(kAlice, kRootIno, "wo", 0644, false, OpenFlags{.read = true, .write = true}),
              Code::kPermissionDenied);
  ASSERT_CODE(c().create(kAlice, kRootIno, "wo", 0644, false, OpenFlags{.read = false, .write = false}),
              Code::kPermissionDenied);
  auto w = c().create(kAlice, kRootIno, "wo", 0644, false, OpenFlags{.read = false, .write = true});
  ASSERT_TRUE(w.has_value()) << w.error();
  ASSERT_TRUE(c().close(kAlice, w->inode.ino, w->session_id).has_value());
  // What an older client sends for any write open: open_write alone.
  pb::MetaRequest q;
  set_context(Context{kAlice, {}}, &q);
  q.set_ino(kRootIno);
  q.set_name("wo");
  q.set_open_write(true);
  auto old = rpc_->call_blocking<pb::MetaReply>(rpc::Endpoint{"127.0.0.1", port_}, method::kCreate, q, {}, 2000);
  ASSERT_TRUE(old.has_value()) << old.error();
  EXPECT_NE(old->session_id(), 0u);
  auto reaped = reap_sessions(*store_, [&](uint64_t id) { return id != rpc_->client_id(); }, INT64_MAX);
  ASSERT_TRUE(reaped.has_value()) << reaped.error();
}

// Replies are bounded by bytes, not only by entry count: 1100 symlinks with
// 4095-byte targets and 255-byte names are ~4.8 MB, and a page of 1024 of
// them (what libweft asks for) passed the 4 MiB RPC body limit.
TEST_F(ServiceTest, LongSymlinksStillList) {
  auto d = c().mkdir(kRoot, kRootIno, "links", 0755);
  ASSERT_TRUE(d.has_value()) << d.error();
  const std::string target(kSymlinkBytesMax, 't');
  constexpr int kLinks = 1100;
  std::vector<Ino> inos;
  for (int i = 0; i < kLinks; ++i) {
    std::string name = fmt::format("{:04}", i) + std::string(kNameBytesMax - 4, 'n');
    auto l = c().symlink(kRoot, d->ino, name, target);
    ASSERT_TRUE(l.has_value()) << l.error();
    inos.push_back(l->ino);
  }
  auto first = c().readdir(kRoot, d->ino, "", 1024);
  ASSERT_TRUE(first.has_value()) << first.error();
  EXPECT_FALSE(first->eof);
  EXPECT_GE(first->entries.size(), 1u);
  EXPECT_LT(first->entries.size(), 1024u) << "cut by bytes before the count";
  size_t listed = 0;
  std::string cookie;
  for (int pages = 0;; ++pages) {
    ASSERT_LT(pages, kLinks);
    auto page = c().readdir(kRoot, d->ino, cookie, 1024);
    ASSERT_TRUE(page.has_value()) << page.error();
    for (const auto& e : page->entries) {
      EXPECT_EQ(e.name.substr(0, 4), fmt::format("{:04}", listed));
      EXPECT_EQ(e.attr.symlink_target, target);
      ++listed;
    }
    if (page->eof) break;
    cookie = page->cookie;
  }
  EXPECT_EQ(listed, size_t{kLinks});
  auto stats = c().batch_stat(kRoot, inos);
  ASSERT_TRUE(stats.has_value()) << stats.error();
  ASSERT_EQ(stats->size(), inos.size());
  for (size_t i = 0; i < inos.size(); ++i) {
    ASSERT_TRUE((*stats)[i].has_value()) << (*stats)[i].error();
    EXPECT_EQ((*stats)[i]->ino, inos[i]);
  }
}

TEST_F(ServiceTest, CredentialsAreEnforced) {
  auto d = c().mkdir(kRoot, kRootIno, "alice", 0755);
  ASSERT_TRUE(d.has_value());
  SetAttr own;
  own.uid = kAlice.uid;
  own.gid = kAlice.gid;
  ASSERT_TRUE(c().setattr(kRoot, d->ino, own).has_value());
  ASSERT_CODE(c().mkdir(kAlice, kRootIno, "x", 0755), Code::kPermissionDenied);
  auto f = c().create(kAlice, d->ino, "private", 0600, true, false);
  ASSERT_TRUE(f.has_value()) << f.error();
  EXPECT_EQ(f->inode.uid, kAlice.uid);
  ASSERT_CODE(c().create(kBob, d->ino, "intruder", 0644, true, false), Code::kPermissionDenied);
  ASSERT_CODE(c().open(kBob, f->inode.ino, OpenFlags{true, false}), Code::kPermissionDenied);
  SetAttr chmod;
  chmod.mode = 0777;
  ASSERT_CODE(c().setattr(kBob, f->inode.ino, chmod), Code::kNotPermitted);
  ASSERT_CODE(c().unlink(kBob, d->ino, "private"), Code::kPermissionDenied);
  // A supplementary group grants access.
  SetAttr group;
  group.gid = 500;
  group.mode = 0770;
  ASSERT_TRUE(c().setattr(kRoot, d->ino, group).has_value());
  Cred bob_in_group{kBob.uid, kBob.gid, {500}};
  ASSERT_TRUE(c().create(bob_in_group, d->ino, "shared", 0644, true, false).has_value());
  ASSERT_TRUE(c().unlink(kRoot, d->ino, "shared").has_value());
  ASSERT_TRUE(c().unlink(kRoot, d->ino, "private").has_value());
}

TEST_F(ServiceTest, LostReplyIsRetriedWithTheSameRequestId) {
  fault::Scope drop("meta.service.drop_reply", {.probability = 1.0, .hits_max = 1});
  auto f = c().create(kRoot, kRootIno, "once", 0644, true, false);
  ASSERT_TRUE(f.has_value()) << f.error();  // not EEXIST: the retry got the original result
  EXPECT_EQ(drop.triggered(), 1);
  EXPECT_GE(c().retries(), 1u);
  auto looked = c().lookup(kRoot, kRootIno, "once");
  ASSERT_TRUE(looked.has_value());
  EXPECT_EQ(looked->ino, f->inode.ino);

  fault::Scope drop2("meta.service.drop_reply", {.probability = 1.0, .hits_max = 1});
  ASSERT_TRUE(c().unlink(kRoot, kRootIno, "once").has_value());  // not ENOENT on the retry
  EXPECT_EQ(drop2.triggered(), 1);
}

// Meta keeps a client's last request_window retry records: a mutation whose
// reply was lost must get its retry answered before that many newer ones of
// the same client went through, or its record is gone and the retry runs
// again (an exclusive create answering EEXIST for the file it made). The
// client holds new mutations back until the oldest unfinished one is less
// than the window behind.
class SmallWindowServiceTest : public ServiceTest {
  uint64_t request_window() const override { return 16; }
};

TEST_F(SmallWindowServiceTest, NewMutationsWaitForAnOldOneStillRetrying) {
  MetaClientOptions o;
  o.addresses = {rpc::Endpoint{"127.0.0.1", port_}};
  o.call_timeout_ms = 2000;
  o.backoff_min_ms = 300;  // the lost reply's retry comes late
  o.request_window = 16;
  MetaClient client(io_, *rpc_, o);
  fault::Scope drop("meta.service.drop_reply", {.probability = 1.0, .hits_max = 1});
  Result<Reply> slow = error(Code::kInternal, "not run");
  std::thread first([&] { slow = client.create(kRoot, kRootIno, "slow", 0644, true, false); });
  for (int i = 0; i < 400 && drop.triggered() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(drop.triggered(), 1);
  std::vector<std::thread> others;
  std::atomic<int> failed{0};
  for (int t = 0; t < 4; ++t)
    others.emplace_back([&, t] {
      for (int i = 0; i < 10; ++i)
        if (!client.mkdir(kRoot, kRootIno, fmt::format("d{}-{}", t, i), 0755)) ++failed;
    });
  for (auto& th : others) th.join();
  first.join();
  ASSERT_TRUE(slow.has_value()) << slow.error();  // the original result, not EEXIST
  EXPECT_EQ(failed.load(), 0);
  EXPECT_GE(client.retries(), 1u);
  EXPECT_EQ(client.mutations_sent(), 41u);
}

// A synchronous call from an I/O thread of the client's own pool once
// waited for a context of that pool, maybe its own (always, with one
// thread): a deadlock. It fails at once instead. From a thread of another
// pool it still waits for one of the client's.
TEST_F(ServiceTest, SyncCallsFromTheClientsOwnIoThreadsFailInsteadOfHanging) {
  // Leaked if a call hangs: a deadlocked pool cannot be joined.
  auto* own = new rpc::IoPool(1);
  auto* rpc = new rpc::Client(*own, rpc::ClientOptions{.cluster_token = "t"});
  auto* client = new MetaClient(*own, *rpc, MetaClientOptions{.addresses = {rpc::Endpoint{"127.0.0.1", port_}}});
  auto* other = new rpc::IoPool(1);
  auto call_on = [&](rpc::IoPool& pool) {
    auto done = std::make_shared<std::promise<Result<Inode>>>();
    auto result = done->get_future();
    asio::post(pool.at(0), [client, done] { done->set_value(client->getattr(kRoot, kRootIno)); });
    return result;
  };
  auto on_own = call_on(*own);
  auto on_other = call_on(*other);
  bool returned = on_own.wait_for(std::chrono::seconds(30)) == std::future_status::ready &&
                  on_other.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
  if (!returned) FAIL() << "a call still waiting after 30 s";
  auto r = on_own.get();
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code(), Code::kInternal) << r.error();
  auto ok = on_other.get();
  EXPECT_TRUE(ok.has_value()) << ok.error();
  // A mutation refused so (before it took a sequence number) is neither sent
  // nor done: the counts stay equal, or statahead (which lists only while
  // they are) would be off for good.
  auto mutated = std::make_shared<std::promise<Result<Inode>>>();
  auto mutated_result = mutated->get_future();
  asio::post(own->at(0), [client, mutated] { mutated->set_value(client->mkdir(kRoot, kRootIno, "refused", 0755)); });
  ASSERT_EQ(mutated_result.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  EXPECT_EQ(mutated_result.get().error().code(), Code::kInternal);
  EXPECT_EQ(client->mutations_sent(), client->mutations_done());
  delete other;
  delete client;
  delete rpc;
  delete own;
}

TEST_F(ServiceTest, PersistentErrorsAreNotRetried) {
  fault::Scope drop("meta.service.drop_reply", {.probability = 1.0, .hits_max = -1});
  auto f = c().create(kRoot, kRootIno, "f", 0644, true, false);
  ASSERT_FALSE(f.has_value());
  EXPECT_EQ(f.error().code(), Code::kTimeout);  // bounded: gives up after retry_time_ms_max
  ASSERT_CODE(c().lookup(kRoot, kRootIno, "missing"), Code::kNotFound);
}

TEST_F(ServiceTest, FailsOverToTheNextAddress) {
  // The first address refuses connections (nothing listens there).
  rpc::IoPool probe_io(1);
  uint16_t dead_port = 0;
  {
    rpc::Server dead(probe_io, rpc::ServerOptions{.cluster_token = "t"}, registry_);
    auto p = dead.listen("127.0.0.1", 0);
    ASSERT_TRUE(p.has_value());
    dead_port = *p;
    dead.stop();
  }
  auto client = make_client({rpc::Endpoint{"127.0.0.1", dead_port}, rpc::Endpoint{"127.0.0.1", port_}});
  auto d = client->mkdir(kRoot, kRootIno, "via-second", 0755);
  ASSERT_TRUE(d.has_value()) << d.error();
  EXPECT_GE(client->failovers(), 1u);
  ASSERT_TRUE(client->rmdir(kRoot, kRootIno, "via-second").has_value());
}

// A meta server mgmtd fenced (`weft serve meta`: its store is no longer the
// cluster's) answers every method, read or mutation, inline or on the pool,
// with the check's error, and changes nothing.
TEST_F(ServiceTest, EveryMethodAnswersTheServeChecksErrorWhileItFails) {
  auto d = c().mkdir(kRoot, kRootIno, "d", 0755);
  ASSERT_TRUE(d.has_value()) << d.error();
  fenced_ = true;
  MetaClientOptions o;
  o.addresses = {rpc::Endpoint{"127.0.0.1", port_}};
  o.call_timeout_ms = 2000;
  o.retry_time_ms_max = 100;  // kUnavailable is retried: not for long here
  MetaClient client(io_, *rpc_, o);
  auto expect_refused = [](const auto& r, const char* what) {
    ASSERT_FALSE(r.has_value()) << what;
    EXPECT_EQ(r.error().code(), Code::kUnavailable) << what << ": " << r.error();
    EXPECT_NE(r.error().message().find("fenced by mgmtd: the reason"), std::string::npos) << r.error();
  };
  expect_refused(client.getattr(kRoot, kRootIno), "getattr (inline read)");
  expect_refused(client.readdir(kRoot, kRootIno, "", 10), "readdir (pool read)");
  expect_refused(client.statfs(kRoot), "statfs");
  expect_refused(client.create(kRoot, kRootIno, "f", 0644, true, false), "create (inline mutation)");
  expect_refused(client.rename(kRoot, kRootIno, "d", kRootIno, "e"), "rename (pool mutation)");
  expect_refused(client.rmdir(kRoot, kRootIno, "d"), "rmdir (pool mutation)");
  fenced_ = false;
  EXPECT_TRUE(c().lookup(kRoot, kRootIno, "d").has_value()) << "nothing changed";
  ASSERT_CODE(c().lookup(kRoot, kRootIno, "f"), Code::kNotFound);
}

// The check runs again before a mutation is acknowledged: a server that lost
// the right to serve while the commit synced answers the check's error, and
// the client's retry (the same request id, once the server serves again)
// gets the original result, inline (create) or on the pool (rename).
TEST_F(ServiceTest, AMutationIsNotAcknowledgedOnceTheCheckFailsBeforeItsAnswer) {
  using namespace std::chrono_literals;
  ASSERT_TRUE(c().mkdir(kRoot, kRootIno, "d", 0755).has_value());
  for (const char* what : {"create", "rename"}) {
    refusals_ = 0;
    checks_left_ = 1;  // the check before the operation passes, the one before its answer refuses
    std::thread serve_again([this] {
      std::this_thread::sleep_for(300ms);
      fenced_ = false;
    });
    const bool create = std::string(what) == "create";
    Result<void> r;
    if (create) {
      auto made = c().create(kRoot, kRootIno, "f", 0644, /*exclusive=*/true, false);
      if (!made) r = std::unexpected(made.error());
    } else {
      r = c().rename(kRoot, kRootIno, "d", kRootIno, "e");
    }
    serve_again.join();
    ASSERT_TRUE(r.has_value()) << what << ": " << r.error() << " (a retry ran it twice?)";
    EXPECT_GE(refusals_.load(), 1) << what << ": acknowledged although the check refused before the answer";
  }
  EXPECT_TRUE(c().lookup(kRoot, kRootIno, "f").has_value());
  EXPECT_TRUE(c().lookup(kRoot, kRootIno, "e").has_value());
  ASSERT_CODE(c().lookup(kRoot, kRootIno, "d"), Code::kNotFound);
}

TEST_F(ServiceTest, TwoMetaClientsOnOneRpcClientDoNotShareRequestIds) {
  auto other = make_client({rpc::Endpoint{"127.0.0.1", port_}});
  EXPECT_NE(other->client_id(), c().client_id());
  auto a = c().create(kRoot, kRootIno, "a", 0644, true, false);
  auto b = other->create(kRoot, kRootIno, "b", 0644, true, false);  // seq 1 too
  ASSERT_TRUE(a.has_value() && b.has_value());
  EXPECT_NE(a->inode.ino, b->inode.ino);
  ASSERT_TRUE(c().lookup(kRoot, kRootIno, "b").has_value());
}

// A client's newest retry record is usually the request whose reply was
// lost: the age after which a client's records go must outlast its retries.
TEST(MetaServiceConfig, RetryRecordsLastAtLeastTenMinutes) {
  auto parse = [](const std::string& keys) -> Result<MetaServiceConfig> {
    WEFT_TRY(Config cfg, Config::parse("[meta]\ndata_dir = \"/nonexistent\"\n" + keys, "m.toml"));
    return MetaServiceConfig::from(cfg);
  };
  EXPECT_EQ(parse("")->request_record_age_s, 3600);
  EXPECT_EQ(parse("request_record_age_s = 600\n")->request_record_age_s, 600);
  auto short_age = parse("request_record_age_s = 5\n");
  ASSERT_FALSE(short_age.has_value()) << "records of a client retrying could go before its retry";
  EXPECT_EQ(short_age.error().code(), Code::kConfig);
}

TEST_F(ServiceTest, ExpirerDropsOldRetryRecords) {
  Context ctx{Cred{}, RequestId{77, 1}};
  ASSERT_TRUE(store_->create(ctx, kRootIno, "x", 0644, true, false).has_value());
  ASSERT_TRUE(store_->create(ctx, kRootIno, "x", 0644, true, false).has_value());  // replayed
  auto recorded = [&] {
    std::string raw;
    return store_->db()->Get(rocksdb::ReadOptions(), key::request(77, 1), &raw).ok();
  };
  ASSERT_TRUE(recorded());
  {
    // Until the record is gone, not a fixed 100 ms: a ticker thread held up
    // longer was stopped before its first tick.
    RequestRecordExpirer expirer(*store_, std::chrono::nanoseconds(0), std::chrono::milliseconds(5));
    for (int i = 0; i < 1000 && recorded(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_FALSE(recorded()) << "the expirer did not drop the record within 10 s";
  auto again = store_->create(ctx, kRootIno, "x", 0644, true, false);  // executes again now
  ASSERT_FALSE(again.has_value());
  EXPECT_EQ(again.error().code(), Code::kExists);
}

// A backlog larger than one call's budget (16,384 steps) drains at the
// catch-up pace, not one call per interval: done well before a second interval.
TEST_F(ServiceTest, ExpirerCatchesUpOnABacklog) {
  RequestRecord rec{.time_ns = 1};  // long gone
  for (uint64_t client = 1; client <= 20; ++client) {
    rocksdb::WriteBatch batch;
    for (uint64_t seq = 1; seq <= 1024; ++seq) batch.Put(key::request(client, seq), encode_request(rec));
    ASSERT_TRUE(store_->db()->Write(rocksdb::WriteOptions(), &batch).ok());
  }
  auto records_left = [&] {
    std::unique_ptr<rocksdb::Iterator> it(store_->db()->NewIterator(rocksdb::ReadOptions()));
    it->Seek("R");
    return it->Valid() && it->key().starts_with("R");
  };
  auto start = std::chrono::steady_clock::now();
  const auto interval = std::chrono::milliseconds(2000);
  RequestRecordExpirer expirer(*store_, std::chrono::hours(1), interval, std::chrono::milliseconds(20));
  while (records_left() && std::chrono::steady_clock::now() - start < 3 * interval)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_FALSE(records_left());
  // The first call comes an interval after the start; a second call that
  // waited for the interval would end past 2 intervals. Below that, the
  // two calls' work has a whole interval (it once had 1.5 s: tight on a
  // loaded machine).
  EXPECT_LT(took, 2 * interval) << "the second call waited for the interval";
}

TEST_F(ServiceTest, OpsAndLatenciesAreExported) {
  ASSERT_TRUE(c().create(kRoot, kRootIno, "m", 0644, true, false).has_value());
  ASSERT_TRUE(c().lookup(kRoot, kRootIno, "m").has_value());
  ASSERT_FALSE(c().lookup(kRoot, kRootIno, "none").has_value());
  std::string text = registry_.prometheus_text();
  EXPECT_NE(text.find("weft_rpc_server_requests_total{server=\"server\",method=\"meta.lookup\"} 2"), std::string::npos)
      << text;
  EXPECT_NE(text.find("weft_meta_ops_total{op=\"create\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("weft_meta_op_latency_us"), std::string::npos);
}

class DurableServiceTest : public ServiceTest {
 protected:
  bool durable() const override { return true; }
};

// Inline mutations commit on the I/O thread, but the reply waits for the WAL
// sync that covers the commit; close alone is acknowledged before it.
TEST_F(DurableServiceTest, MutationRepliesWaitForTheWalSyncButCloseDoesNot) {
  auto& syncs = registry_.counter("weft_meta_wal_syncs_total", "");
  uint64_t before = syncs.value();
  auto delay = std::make_unique<fault::Scope>("meta.wal_sync.delay", fault::Spec{.probability = 1.0, .hits_max = 5});
  auto start = std::chrono::steady_clock::now();
  auto f = c().create(kRoot, kRootIno, "f", 0644, true, true);
  ASSERT_TRUE(f.has_value()) << f.error();
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(45));
  EXPECT_EQ(syncs.value(), before + 1);

  delay = std::make_unique<fault::Scope>("meta.wal_sync.delay", fault::Spec{.probability = 1.0, .hits_max = 300});
  ASSERT_TRUE(c().close(kRoot, f->inode.ino, f->session_id).has_value());
  EXPECT_EQ(syncs.value(), before + 1);  // acked while its sync is held back for 3 s
  delay.reset();
  ASSERT_TRUE(c().unlink(kRoot, kRootIno, "f").has_value());  // synced: covers the close too
  EXPECT_GE(syncs.value(), before + 2);
}

// ... except a close of a file with no links left: lost in a crash, its
// session would come back and keep the file's chunks as long as the client
// lives (the session reaper drops only sessions of clients without a lease).
TEST_F(DurableServiceTest, CloseOfAnUnlinkedFileWaitsForTheWalSync) {
  auto& syncs = registry_.counter("weft_meta_wal_syncs_total", "");
  auto f = c().create(kRoot, kRootIno, "f", 0644, true, true);
  ASSERT_TRUE(f.has_value()) << f.error();
  ASSERT_TRUE(c().unlink(kRoot, kRootIno, "f").has_value());
  const uint64_t before = syncs.value();
  auto delay = std::make_unique<fault::Scope>("meta.wal_sync.delay", fault::Spec{.probability = 1.0, .hits_max = 30});
  auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(c().close(kRoot, f->inode.ino, f->session_id).has_value());
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(250));
  EXPECT_EQ(syncs.value(), before + 1) << "acknowledged once its sync was done";
  EXPECT_CODE(c().getattr(kRoot, f->inode.ino), Code::kNotFound);
}


}  // namespace
}  // namespace weft::meta
