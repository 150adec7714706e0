// End-to-end RPC behaviour over 127.0.0.1: round trips, payloads, many calls
// in flight, deadlines, cancellation, errors, token refusal, reconnects,
// overload and back-pressure; the [server] write-stall setting.
#include <gtest/gtest.h>

#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <future>
#include <mutex>
#include <thread>

#include "common/config.h"
#include "common/crc32c.h"
#include "common/fault.h"
#include "proto/rpc.pb.h"
#include "rpc/client.h"
#include "rpc/echo_service.h"
#include "rpc/endpoint.h"
#include "rpc/server.h"
#include "rpc/service_runtime.h"
#include "rpc/test_cluster.h"
#include "rpc/test_sockets.h"
#include "rpc/test_util.h"

namespace weft::rpc {
namespace {

using Cluster = testing::EchoCluster;
constexpr const char* kToken = testing::kTestToken;

proto::EchoRequest with_data(std::string data) {
  proto::EchoRequest r;
  r.set_data(std::move(data));
  return r;
}

// A port nobody listens on: bind one, then close it.
uint16_t closed_port(metrics::Registry& registry) {
  IoPool tmp{1};
  Server s(tmp, {}, registry);
  return s.listen("127.0.0.1", 0).value();
}

TEST(Endpoint, ParsesHostPortForms) {
  EXPECT_EQ(*Endpoint::parse("127.0.0.1:7000"), (Endpoint{"127.0.0.1", 7000}));
  EXPECT_EQ(*Endpoint::parse("[::1]:7000"), (Endpoint{"::1", 7000}));
  EXPECT_EQ(*Endpoint::parse("::1:7000"), (Endpoint{"::1", 7000}));
  EXPECT_EQ(Endpoint::parse("::1:7000")->to_string(), "[::1]:7000");
  EXPECT_FALSE(Endpoint::parse("host"));
  EXPECT_FALSE(Endpoint::parse("host:"));
  EXPECT_FALSE(Endpoint::parse("host:70000"));
  EXPECT_FALSE(Endpoint::parse("host:7x"));
}

// mgmtd matches a reported address to a registered one this way.
TEST(Endpoint, SameAddressHoweverWritten) {
  auto same = [](const std::string& a, const std::string& b) {
    return Endpoint::parse(a)->same_address(*Endpoint::parse(b));
  };
  EXPECT_TRUE(same("::1:7000", "[::1]:7000"));
  EXPECT_TRUE(same("[0:0:0:0:0:0:0:1]:7000", "[::1]:7000"));
  EXPECT_TRUE(same("[::ffff:10.0.0.5]:7000", "10.0.0.5:7000"));
  EXPECT_TRUE(same("Storage-1.example:7000", "storage-1.EXAMPLE:7000"));
  EXPECT_FALSE(same("10.0.0.5:7000", "10.0.0.5:7001"));
  EXPECT_FALSE(same("10.0.0.5:7000", "10.0.0.6:7000"));
  EXPECT_FALSE(same("localhost:7000", "127.0.0.1:7000")) << "names are not resolved";
  EXPECT_FALSE(same("[::1]:7000", "127.0.0.1:7000"));
}

TEST(Rpc, EchoRoundTrip) {
  Cluster c;
  auto r = c.echo(with_data("hello"));
  ASSERT_TRUE(r) << r.error();
  EXPECT_EQ(r->data(), "hello");
  r = c.echo(with_data("hello"), {}, nullptr, kEchoBlocking);
  ASSERT_TRUE(r) << r.error();
  EXPECT_EQ(r->data(), "hello");
}

// Payloads gathered from caller spans and scattered into a caller buffer,
// and one into an owned buffer, arrive whole.
void check_payloads(Cluster& c) {
  std::vector<std::byte> a(1 << 20), b(4097);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<std::byte>(i * 13);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<std::byte>(i * 7 + 1);
  std::vector<std::byte> dest(a.size() + b.size());
  CallOptions opts;
  opts.payload = {a, b};
  opts.response_payload = dest;
  RawResponse raw;
  auto r = c.echo(with_data("p"), std::move(opts), &raw);
  ASSERT_TRUE(r) << r.error();
  uint32_t crc = crc32c_extend(crc32c(a.data(), a.size()), b.data(), b.size());
  EXPECT_EQ(r->payload_crc32c(), crc);
  EXPECT_TRUE(raw.payload_in_destination);
  EXPECT_EQ(raw.payload_len, dest.size());
  EXPECT_EQ(std::memcmp(dest.data(), a.data(), a.size()), 0);
  EXPECT_EQ(std::memcmp(dest.data() + a.size(), b.data(), b.size()), 0);

  // No destination: the payload arrives in an owned buffer.
  proto::EchoRequest big;
  big.set_reply_payload_bytes(3 << 20);
  RawResponse owned;
  ASSERT_TRUE(c.echo(big, {}, &owned));
  EXPECT_FALSE(owned.payload_in_destination);
  ASSERT_EQ(owned.payload.size(), 3u << 20);
  EXPECT_EQ(owned.payload.data()[12345], static_cast<std::byte>(12345 * 31 + 7));
}

TEST(Rpc, PayloadsGatherAndScatterWithoutLoss) {
  Cluster c;  // on this host: through the server's Unix socket (rpc/local_socket.h)
  check_payloads(c);
}

// The same over TCP (the server without its Unix twin), as between hosts.
TEST(Rpc, PayloadsGatherAndScatterWithoutLossOverTcp) {
  Cluster c({.local_socket = false});
  check_payloads(c);
  EXPECT_EQ(testing::tcp_fds(c.port, /*peer=*/true).size(), 1u);
}

// A server connection whose read loop throws (an allocation for a payload
// fails) closes: the call fails at once instead of timing out on a
// connection nobody reads any more (asio::detached dropped the exception),
// and the next call reconnects.
TEST(Rpc, AConnectionWhoseReadLoopThrowsCloses) {
  Cluster c;
  ASSERT_TRUE(c.echo(with_data("before")).has_value());
  std::vector<std::byte> payload(4096, std::byte{7});
  CallOptions o;
  o.timeout_ms = 20000;
  o.payload.push_back(payload);
  auto start = std::chrono::steady_clock::now();
  Result<proto::EchoReply> r;
  {
    fault::Scope fail("rpc.server.payload_alloc.throw", {.hits_max = 1});
    r = c.echo(with_data("payload"), std::move(o));
  }
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().code(), Code::kTimeout) << r.error();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10)) << "waited for the call's timeout";
  auto after = c.echo(with_data("after"));
  ASSERT_TRUE(after.has_value()) << after.error();
  EXPECT_EQ(after->data(), "after");
}

TEST(Rpc, TenThousandConcurrentCallsOnOneConnection) {
  Cluster c;
  constexpr int kCalls = 10000;
  std::atomic<int> ok{0}, wrong{0};
  std::promise<void> all_done;
  std::atomic<int> remaining{kCalls};
  auto ex = c.client_io.at(0).get_executor();
  for (int i = 0; i < kCalls; ++i) {
    asio::co_spawn(
        ex,
        [&, i]() -> Task<void> {
          std::string data = "call-" + std::to_string(i);
          auto r = co_await c.client->call<proto::EchoReply>(c.ep, i % 2 ? kEcho : kEchoBlocking, with_data(data));
          if (r && r->data() == data)
            ok++;
          else
            wrong++;
          if (--remaining == 0) all_done.set_value();
        },
        asio::detached);
  }
  ASSERT_EQ(all_done.get_future().wait_for(std::chrono::seconds(60)), std::future_status::ready);
  EXPECT_EQ(ok.load(), kCalls);
  EXPECT_EQ(wrong.load(), 0);
}

TEST(Rpc, DeadlineExpiresAndConnectionStaysUsable) {
  Cluster c;
  proto::EchoRequest slow = with_data("slow");
  slow.set_sleep_ms(1000);
  CallOptions opts;
  opts.timeout_ms = 100;
  auto start = std::chrono::steady_clock::now();
  auto r = c.echo(slow, std::move(opts));
  auto took = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kTimeout);
  EXPECT_TRUE(r.error().retryable());
  EXPECT_LT(took, std::chrono::milliseconds(1500));
  EXPECT_GE(took, std::chrono::milliseconds(100));
  auto again = c.echo(with_data("fast"));
  ASSERT_TRUE(again) << again.error();
}

// The deadline sweep waits for the earliest deadline: a later call with a
// shorter deadline on the same connection must re-arm it.
TEST(Rpc, ShorterDeadlineBehindALongerOneStillExpiresOnTime) {
  Cluster c;
  proto::EchoRequest slow = with_data("slow");
  slow.set_sleep_ms(1500);
  CallOptions long_opts;
  long_opts.timeout_ms = 10000;
  CallOptions short_opts;
  short_opts.timeout_ms = 100;
  auto ex = c.client_io.at(0).get_executor();  // both calls from one I/O thread: one connection
  auto first = asio::co_spawn(ex, c.client->call<proto::EchoReply>(c.ep, kEcho, slow, std::move(long_opts)),
                              asio::use_future);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  auto start = std::chrono::steady_clock::now();
  auto second = asio::co_spawn(ex, c.client->call<proto::EchoReply>(c.ep, kEcho, slow, std::move(short_opts)),
                               asio::use_future);
  auto r = second.get();
  auto took = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kTimeout);
  EXPECT_LT(took, std::chrono::milliseconds(1000));
  auto long_result = first.get();
  EXPECT_TRUE(long_result) << long_result.error();
}

// A server answers a request as soon as it has read it, while the client
// may still be writing the requests batched behind it in the same writev:
// that answer is taken (all of its request went out before it could come).
TEST(Rpc, AnAnswerWhileLaterRequestsAreStillBeingWrittenIsTaken) {
  Cluster c;
  std::vector<std::byte> big(48 << 20);
  auto ex = c.client_io.at(0).get_executor();
  proto::EchoRequest small = with_data("small");
  proto::EchoRequest large = with_data("large");
  large.set_discard_payload(true);
  CallOptions large_opts;
  large_opts.payload.push_back(big);
  // Both start before the connection is ready: they go out in one writev, the small one first.
  auto first = asio::co_spawn(ex, c.client->call<proto::EchoReply>(c.ep, kEcho, small), asio::use_future);
  auto second = asio::co_spawn(ex, c.client->call<proto::EchoReply>(c.ep, kEcho, large, std::move(large_opts)),
                               asio::use_future);
  auto r1 = first.get();
  ASSERT_TRUE(r1) << r1.error();
  EXPECT_EQ(r1->data(), "small");
  auto r2 = second.get();
  ASSERT_TRUE(r2) << r2.error();
  EXPECT_EQ(r2->data(), "large");
}

// A request over the frame limits is refused by the client, alone: sent, it
// would make the server close the connection, failing every call on it. A
// reply over them is answered kInternal by the server, alone too.
TEST(Rpc, AnOversizedCallOrReplyFailsAloneNotItsConnection) {
  ServerOptions so;
  so.limits.body_max = 64 << 10;
  so.limits.payload_max = 1 << 20;
  ClientOptions co;
  co.limits = so.limits;
  Cluster c(so, co);
  proto::EchoRequest slow = with_data("slow");
  slow.set_sleep_ms(300);
  auto ex = c.client_io.at(0).get_executor();  // every call from one I/O thread: one connection
  auto in_flight = asio::co_spawn(ex, c.client->call<proto::EchoReply>(c.ep, kEcho, slow), asio::use_future);
  ASSERT_TRUE(c.echo(with_data("ready")));  // the connection is up, the slow call on it

  std::vector<std::byte> big((1 << 20) + 1);
  CallOptions big_payload;
  big_payload.payload.push_back(big);
  auto r = c.echo(with_data("payload"), std::move(big_payload));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kInvalidArgument) << r.error();
  r = c.echo(with_data(std::string(65 << 10, 'b')));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kInvalidArgument) << r.error();
  proto::EchoRequest big_reply = with_data("reply");
  big_reply.set_reply_payload_bytes((1 << 20) + 1);
  r = c.echo(big_reply);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kInternal) << r.error();

  auto slow_result = in_flight.get();
  EXPECT_TRUE(slow_result) << slow_result.error();
  EXPECT_TRUE(c.echo(with_data("after")));
  // The blocking form refuses it too, and its connection goes on.
  auto b = c.echo_blocking(with_data(std::string(65 << 10, 'b')));
  ASSERT_FALSE(b);
  EXPECT_EQ(b.error().code(), Code::kInvalidArgument) << b.error();
  auto b2 = c.echo_blocking(with_data("blocking after"));
  EXPECT_TRUE(b2) << b2.error();
  EXPECT_EQ(c.server_connections(), 2);  // neither connection was closed
}

TEST(Rpc, CancellationCompletesTheCallEarly) {
  Cluster c;
  proto::EchoRequest slow = with_data("slow");
  slow.set_sleep_ms(1000);
  CancelSource source;
  CallOptions opts;
  opts.cancel = source.token();
  auto fut = asio::co_spawn(c.client_io.at(0).get_executor(),
                            c.client->call<proto::EchoReply>(c.ep, kEcho, slow, std::move(opts)), asio::use_future);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  auto start = std::chrono::steady_clock::now();
  source.cancel();
  ASSERT_EQ(fut.wait_for(std::chrono::seconds(2)), std::future_status::ready);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(500));
  auto r = fut.get();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kCancelled);

  // A token cancelled before the call starts fails it at once.
  CallOptions pre;
  pre.cancel = source.token();
  auto r2 = c.echo(with_data("x"), std::move(pre));
  ASSERT_FALSE(r2);
  EXPECT_EQ(r2.error().code(), Code::kCancelled);
  EXPECT_TRUE(c.echo(with_data("after")));
}

// A long-lived token (a reporter's, a poller's) passed to every call keeps
// no callback of the calls that ended: they piled up for its whole life.
TEST(Rpc, CallsThatEndDropTheirCallbackFromTheToken) {
  Cluster c;
  CancelSource source;
  for (int i = 0; i < 50; ++i) {
    CallOptions opts;
    opts.cancel = source.token();
    ASSERT_TRUE(c.echo(with_data("x"), std::move(opts)));
  }
  proto::EchoRequest fail = with_data("boom");
  fail.set_fail(true);
  CallOptions failing;
  failing.cancel = source.token();
  EXPECT_FALSE(c.echo(fail, std::move(failing)));
  EXPECT_EQ(source.token()->registered(), 0u);
}

TEST(Rpc, HandlerErrorsAndUnknownMethods) {
  Cluster c;
  proto::EchoRequest fail = with_data("boom");
  fail.set_fail(true);
  auto r = c.echo(fail);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kNotFound);
  EXPECT_NE(r.error().message().find("boom"), std::string::npos);
  auto u = c.echo(with_data("x"), {}, nullptr, MethodId{service::kTest, 999});
  ASSERT_FALSE(u);
  EXPECT_EQ(u.error().code(), Code::kUnknownMethod);
  EXPECT_TRUE(c.echo(with_data("still fine")));
}

TEST(Rpc, WrongTokenIsRefusedClearly) {
  ClientOptions co;
  co.cluster_token = "not-the-token";
  Cluster c({}, co);
  auto r = c.echo(with_data("x"));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kUnauthenticated);
  EXPECT_NE(r.error().message().find("wrong cluster token"), std::string::npos) << r.error();
  EXPECT_EQ(c.registry.counter("weft_rpc_server_refused_total", "", {{"server", "test-server"}}).value(), 1u);

  ClientOptions empty;
  empty.cluster_token = "";
  Client no_token(c.client_io, empty);
  auto r2 = block_on(c.client_io.at(0).get_executor(), no_token.call<proto::EchoReply>(c.ep, kEcho, with_data("x")));
  ASSERT_FALSE(r2);
  EXPECT_EQ(r2.error().code(), Code::kUnauthenticated);
}

TEST(Rpc, ReconnectsAfterServerRestart) {
  Cluster c;
  ASSERT_TRUE(c.echo(with_data("before")));
  c.server.reset();  // server gone: connection closes
  auto down = c.echo(with_data("down"));
  ASSERT_FALSE(down);
  EXPECT_TRUE(down.error().retryable()) << down.error();

  ServerOptions so;
  so.cluster_token = kToken;
  c.server = std::make_unique<Server>(c.server_io, so, c.registry);
  register_echo_service(*c.server);
  ASSERT_TRUE(c.server->listen("127.0.0.1", c.port));
  Result<proto::EchoReply> r = error(Code::kInternal, "not tried");
  for (int i = 0; i < 100 && !r; ++i) {
    r = c.echo(with_data("after"));
    if (!r) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(r) << r.error();
  EXPECT_EQ(r->data(), "after");
}

TEST(Rpc, ConnectFailureBacksOff) {
  metrics::Registry registry;
  IoPool io{1};
  ClientOptions co;
  co.cluster_token = kToken;
  co.backoff_min_ms = 200;
  Client client(io, co);
  uint16_t port = closed_port(registry);
  Endpoint ep{"127.0.0.1", port};
  auto first = block_on(io.at(0).get_executor(), client.call<proto::EchoReply>(ep, kEcho, with_data("x")));
  ASSERT_FALSE(first);
  EXPECT_EQ(first.error().code(), Code::kUnavailable) << first.error();
  // Within the backoff window the client fails fast, saying when it retries.
  auto second = block_on(io.at(0).get_executor(), client.call<proto::EchoReply>(ep, kEcho, with_data("x")));
  ASSERT_FALSE(second);
  EXPECT_EQ(second.error().code(), Code::kUnavailable);
  EXPECT_NE(second.error().message().find("next attempt in"), std::string::npos) << second.error();
}

// Early failure detection hears of every refused connection (nothing listens:
// a dead server), from the asynchronous and the blocking path alike, and of
// nothing else.
TEST(Rpc, RefusedConnectionsAreToldToTheRefusalListener) {
  struct Heard final : RefusalListener {
    std::mutex mu;
    std::vector<Endpoint> eps;
    void refused(const Endpoint& ep) override {
      std::lock_guard lock(mu);
      eps.push_back(ep);
    }
    std::vector<Endpoint> get() {
      std::lock_guard lock(mu);
      return eps;
    }
  };
  auto heard = std::make_shared<Heard>();
  metrics::Registry registry;
  Cluster live;
  IoPool io{1};
  ClientOptions co;
  co.cluster_token = kToken;
  co.refusals = heard;
  Client client(io, co);
  auto ok = block_on(io.at(0).get_executor(), client.call<proto::EchoReply>(live.ep, kEcho, with_data("x")));
  ASSERT_TRUE(ok) << ok.error();
  auto ok_blocking = client.call_blocking<proto::EchoReply>(live.ep, kEcho, with_data("x"), {}, 0);
  ASSERT_TRUE(ok_blocking) << ok_blocking.error();
  EXPECT_TRUE(heard->get().empty()) << "a server that takes connections is not reported";

  Endpoint dead{"127.0.0.1", closed_port(registry)};
  auto r = block_on(io.at(0).get_executor(), client.call<proto::EchoReply>(dead, kEcho, with_data("x")));
  ASSERT_FALSE(r);
  ASSERT_EQ(heard->get().size(), 1u);
  EXPECT_EQ(heard->get()[0], dead);
  Endpoint dead2{"127.0.0.1", closed_port(registry)};
  auto b = client.call_blocking<proto::EchoReply>(dead2, kEcho, with_data("x"), {}, 0);
  ASSERT_FALSE(b);
  ASSERT_EQ(heard->get().size(), 2u);
  EXPECT_EQ(heard->get()[1], dead2);
}

// Endpoints that went away are not kept for ever: once their connections
// broke and their backoff ran out, the next new endpoint sweeps them (the
// map is swept when it doubles). 2 x 40 unreachable addresses; without the
// sweep all 80 stay.
TEST(Rpc, ChannelsOfEndpointsThatWentAwayAreDropped) {
  metrics::Registry registry;
  IoPool io{1};
  ClientOptions co;
  co.cluster_token = kToken;
  co.backoff_min_ms = 20;
  Client client(io, co);
  uint16_t port = closed_port(registry);
  auto call_each = [&](int first) {
    for (int i = first; i < first + 40; ++i) {
      Endpoint ep{fmt::format("127.0.0.{}", 2 + i), port};  // loopback, nobody listening
      auto r = block_on(io.at(0).get_executor(), client.call<proto::EchoReply>(ep, kEcho, with_data("x")));
      ASSERT_FALSE(r);
    }
  };
  call_each(0);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // their backoff runs out
  call_each(40);
  EXPECT_LE(client.channel_count(), 40u);
  // A live endpoint keeps working through it all.
  Cluster c;
  auto ok = block_on(io.at(0).get_executor(), client.call<proto::EchoReply>(c.ep, kEcho, with_data("live")));
  ASSERT_TRUE(ok) << ok.error();
}

TEST(Rpc, BlockingPoolOverloadIsRetryable) {
  ServerOptions so;
  so.blocking_threads = 1;
  so.blocking_queue_max = 2;
  Cluster c(so);
  proto::EchoRequest slow = with_data("slow");
  slow.set_sleep_ms(300);
  std::vector<std::future<Result<proto::EchoReply>>> futs;
  for (int i = 0; i < 8; ++i)
    futs.push_back(asio::co_spawn(c.client_io.at(0).get_executor(),
                                  c.client->call<proto::EchoReply>(c.ep, kEchoBlocking, slow), asio::use_future));
  int ok = 0, overloaded = 0;
  for (auto& f : futs) {
    auto r = f.get();
    if (r) ok++;
    else if (r.error().code() == Code::kOverloaded && r.error().retryable()) overloaded++;
  }
  EXPECT_EQ(ok + overloaded, 8);
  EXPECT_GE(ok, 2);
  EXPECT_GE(overloaded, 1);
}

TEST(Rpc, BackPressureStillCompletesEverything) {
  ServerOptions so;
  so.inflight_max = 4;
  Cluster c(so);
  proto::EchoRequest slow = with_data("bp");
  slow.set_sleep_ms(20);
  std::vector<std::future<Result<proto::EchoReply>>> futs;
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 40; ++i)
    futs.push_back(asio::co_spawn(c.client_io.at(0).get_executor(),
                                  c.client->call<proto::EchoReply>(c.ep, kEcho, slow), asio::use_future));
  for (auto& f : futs) ASSERT_TRUE(f.get());
  // 40 calls of 20 ms with at most 4 in progress take at least 10 rounds.
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(190));
}

// Method `m` on `server`: records the budget a request has left when its
// handler starts (ServerCall::deadline - now), in ms.
void add_budget_probe(Server& server, MethodId m, std::atomic<int64_t>& budget_ms) {
  server.add_async(m, "Budget", [&budget_ms](ServerCall& call) -> Task<Status> {
    budget_ms = std::chrono::duration_cast<std::chrono::milliseconds>(call.deadline - std::chrono::steady_clock::now())
                    .count();
    call.response_body = proto::EchoReply().SerializeAsString();
    co_return Status{};
  });
}

// The header's timeout is the caller's budget left when the request is
// written, not when it was queued: here it waits ~1.2 s for the handshake
// (the server's accept loop is held) of a 2 s call, and the server must see
// ~0.8 s left, or a chain member would commit after its sender gave up.
TEST(Rpc, ARequestsBudgetCountsFromWhenItIsWritten) {
  Cluster c;
  std::atomic<int64_t> budget_ms{-1};
  const MethodId m{service::kTest, 50};
  add_budget_probe(*c.server, m, budget_ms);
  fault::Scope hold("rpc.server.accept.hold");
  auto call = std::async(std::launch::async, [&] {
    CallOptions o;
    o.timeout_ms = 2000;
    return c.echo(proto::EchoRequest{}, std::move(o), nullptr, m);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  if (hold.triggered() == 0) GTEST_SKIP() << "fault injection compiled out";
  fault::disarm("rpc.server.accept.hold");
  auto r = call.get();
  ASSERT_TRUE(r.has_value()) << r.error();
  EXPECT_LE(budget_ms.load(), 850);
  EXPECT_GT(budget_ms.load(), 200);
}

// The same for a request that waited in the server's socket while it had
// stopped reading the connection (inflight_max): its budget counts from when
// reading stopped, not from when it was finally read.
TEST(Rpc, ARequestsBudgetDoesNotGrowWhileTheServerStoppedReading) {
  ServerOptions so;
  so.inflight_max = 1;
  Cluster c(so);
  std::atomic<int64_t> budget_ms{-1};
  const MethodId m{service::kTest, 52};
  add_budget_probe(*c.server, m, budget_ms);
  ASSERT_TRUE(c.echo(with_data("warm")).has_value());  // connected
  proto::EchoRequest slow;
  slow.set_sleep_ms(1200);  // holds the connection's one request in progress: reading stops
  auto first = std::async(std::launch::async, [&] { return c.echo(slow); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CallOptions o;
  o.timeout_ms = 2000;
  auto r = c.echo(proto::EchoRequest{}, std::move(o), nullptr, m);
  ASSERT_TRUE(r.has_value()) << r.error();
  ASSERT_TRUE(first.get().has_value());
  EXPECT_LE(budget_ms.load(), 950) << "read ~1.1 s after it was sent with 2 s";
  EXPECT_GT(budget_ms.load(), 300);
}

// A request's budget counts from when its header arrived, not from its last
// byte: a sender whose request went out slowly (its socket full) gives the
// receiver no more time than it has left itself. Here the payload's rest
// comes 800 ms after the header of a 2 s call.
TEST(Rpc, ARequestsBudgetCountsFromItsHeaderNotItsLastByte) {
  Cluster c;
  std::atomic<int64_t> budget_ms{-1};
  const MethodId m{service::kTest, 53};
  add_budget_probe(*c.server, m, budget_ms);
  testing::RawSocket s(c.port);
  FrameHeader hello;
  hello.method = kHello.wire();
  proto::Hello hi;
  hi.set_cluster_token(kToken);
  ASSERT_TRUE(s.send_frame(hello, hi.SerializeAsString()));
  FrameHeader rh;
  std::string rbody;
  ASSERT_TRUE(s.recv_frame(&rh, &rbody));
  FrameHeader h;
  h.method = m.wire();
  h.request_id = 1;
  h.timeout_ms = 2000;
  const std::string body = proto::EchoRequest().SerializeAsString();
  const std::string payload(1 << 20, 'p');
  h.body_len = static_cast<uint32_t>(body.size());
  h.payload_len = static_cast<uint32_t>(payload.size());
  std::byte hdr[kFrameHeaderSize];
  encode_header(h, hdr);
  ASSERT_TRUE(s.send_bytes(hdr, sizeof(hdr)));
  ASSERT_TRUE(s.send_bytes(body.data(), body.size()));
  ASSERT_TRUE(s.send_bytes(payload.data(), 1000));
  std::this_thread::sleep_for(std::chrono::milliseconds(800));
  ASSERT_TRUE(s.send_bytes(payload.data() + 1000, payload.size() - 1000));
  ASSERT_TRUE(s.recv_frame(&rh, &rbody));
  EXPECT_EQ(rh.status, 0);
  EXPECT_LE(budget_ms.load(), 1300) << "the budget counted from the request's last byte";
  EXPECT_GT(budget_ms.load(), 300);
}

// Three servers that call each other from their handlers, as chain members
// forward: Relay(n) calls the next server's Relay(n - 1), Relay(0) answers.
// With few requests in progress allowed per connection, a link fills with
// Relays waiting on the next link, and its server stops reading the Relay(0)s
// that would finish and free it: every server waits on another. On lanes by
// remaining hops (CallOptions::lane) a Relay(k) waits only on Relay(k - 1)s of
// their own connections, down to Relay(0)s that wait on nothing.
TEST(Rpc, ServersCallingEachOtherOnLanesByRemainingHopsDoNotDeadlock) {
  constexpr int kServers = 3, kCallsPerServer = 40;
  const MethodId relay{service::kTest, 51};
  metrics::Registry registry;
  IoPool io(2, "relay");
  ServerOptions so;
  so.cluster_token = testing::kTestToken;
  so.name = "relay";
  so.inflight_max = 4;
  ClientOptions co;
  co.cluster_token = testing::kTestToken;
  co.connections_per_endpoint = 2;
  co.call_timeout_ms = 3000;
  std::vector<std::unique_ptr<Server>> servers;
  std::vector<std::unique_ptr<Client>> clients;
  std::vector<Endpoint> eps(kServers);
  for (int i = 0; i < kServers; ++i) {
    servers.push_back(std::make_unique<Server>(io, so, registry));
    clients.push_back(std::make_unique<Client>(io, co));
  }
  for (int i = 0; i < kServers; ++i) {
    servers[i]->add_async(relay, "Relay", [&, i](ServerCall& call) -> Task<Status> {
      proto::EchoRequest req;
      if (!req.ParseFromString(call.body)) co_return Status(Code::kProtocol, "relay");
      const int n = std::stoi(req.data());
      // A moment's work first: the links fill before the first Relay(0) is sent.
      asio::steady_timer work(co_await asio::this_coro::executor, std::chrono::milliseconds(20));
      co_await work.async_wait(use_nothrow);
      if (n > 0) {
        proto::EchoRequest next;
        next.set_data(std::to_string(n - 1));
        CallOptions o;
        o.lane = static_cast<uint32_t>(n - 1);
        auto r = co_await clients[i]->call<proto::EchoReply>(eps[(i + 1) % kServers], relay, next, std::move(o));
        if (!r) co_return r.error();
      }
      call.response_body = proto::EchoReply().SerializeAsString();
      co_return Status{};
    });
    eps[i] = Endpoint{"127.0.0.1", servers[i]->listen("127.0.0.1", 0).value()};
  }
  ClientOptions tco = co;
  tco.call_timeout_ms = 8000;
  tco.connections_per_endpoint = 16;  // so that many Relay(2)s are in progress at each server
  IoPool test_io(1, "relay-cli");
  Client tester(test_io, tco);
  std::vector<std::future<Result<proto::EchoReply>>> calls;
  proto::EchoRequest two;
  two.set_data("2");
  for (int c = 0; c < kCallsPerServer; ++c)
    for (int i = 0; i < kServers; ++i)
      calls.push_back(std::async(std::launch::async, [&, i] {
        return block_on(test_io.at(0).get_executor(), tester.call<proto::EchoReply>(eps[i], relay, two));
      }));
  int failed = 0;
  std::string first_error;
  for (auto& f : calls) {
    auto r = f.get();
    if (!r && failed++ == 0) first_error = r.error().to_string();
  }
  EXPECT_EQ(failed, 0) << first_error;
  for (auto& s : servers) s->stop();
}

TEST(Rpc, ManyConnectionsPerEndpoint) {
  ClientOptions co;
  co.connections_per_endpoint = 4;
  Cluster c({}, co);
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(c.echo(with_data(std::to_string(i))));
  EXPECT_EQ(c.registry.gauge("weft_rpc_server_connections", "", {{"server", "test-server"}}).value(), 4);
}

// [server] write_stall_timeout_ms: 30 s unless set, and bounded (1 s .. 1 h).
// A server process holds a descriptor per connection: ServiceRuntime::init
// raises the soft limit (often 1024) to the hard one.
TEST(ServiceRuntime, RaisesTheOpenFilesLimitToTheHardLimit) {
  pid_t pid = ::fork();
  if (pid == 0) {  // in a child: the test process keeps its limit
    rlimit rl{};
    ::getrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_max <= 64) ::_exit(2);
    rl.rlim_cur = 64;
    if (::setrlimit(RLIMIT_NOFILE, &rl) != 0) ::_exit(3);
    auto raised = raise_open_files_limit();
    rlimit now{};
    ::getrlimit(RLIMIT_NOFILE, &now);
    ::_exit(raised && *raised == now.rlim_cur && now.rlim_cur == rl.rlim_max ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 2) GTEST_SKIP() << "the hard limit is too low to lower the soft one";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the soft limit was not raised to the hard one";
}

// A stop signal sent as soon as the port file appears (what `weft up` and
// the tests wait for) stops the server cleanly (on_stopping runs, exit 0),
// however long its on_listening takes: the handlers are in place before the
// port file is written.
TEST(ServiceRuntime, AStopSignalRightAfterThePortFileStopsCleanly) {
  char dir_template[] = "/tmp/weft-rpc-test-XXXXXX";
  ASSERT_NE(::mkdtemp(dir_template), nullptr);
  const std::string port_file = std::string(dir_template) + "/port";
  pid_t pid = ::fork();
  if (pid == 0) {
    ServiceConfig config;
    config.cluster_token = "t";
    config.name = "signal-test";
    config.metrics_listen.clear();
    config.io_threads = 1;
    config.blocking_threads = 1;
    config.port_file = port_file;
    ServiceRuntime runtime(config);
    if (!runtime.init()) ::_exit(2);
    bool stopped = false;
    auto r = runtime.run([] { std::this_thread::sleep_for(std::chrono::milliseconds(300)); },
                         [&] { stopped = true; });
    ::_exit(r && stopped ? 0 : 3);
  }
  ASSERT_GT(pid, 0);
  for (int i = 0; i < 1000 && ::access(port_file.c_str(), F_OK) != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ::kill(pid, SIGTERM);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ::unlink(port_file.c_str());
  ::rmdir(dir_template);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(ServiceConfig, WriteStallTimeoutIsReadAndBounded) {
  auto parse = [](const std::string& line) {
    auto cfg = Config::parse("[server]\ncluster_token = \"t\"\n" + line, "test.toml");
    EXPECT_TRUE(cfg) << cfg.error();
    return ServiceConfig::from(*cfg, "storage");
  };
  auto absent = parse("");
  ASSERT_TRUE(absent) << absent.error();
  EXPECT_EQ(absent->write_stall_timeout_ms, 30000u);
  auto set = parse("write_stall_timeout_ms = 5000\n");
  ASSERT_TRUE(set) << set.error();
  EXPECT_EQ(set->write_stall_timeout_ms, 5000u);
  for (const char* bad : {"write_stall_timeout_ms = 10\n", "write_stall_timeout_ms = 0\n",
                          "write_stall_timeout_ms = 3600001\n", "write_stall_timeout_ms = \"30s\"\n"}) {
    auto r = parse(bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_NE(r.error().message().find("write_stall_timeout_ms"), std::string::npos) << r.error();
  }
}

}  // namespace
}  // namespace weft::rpc
