// Hostile and broken peers: every malformed frame closes that one
// connection (or is answered with an error), a peer that stops reading its
// replies is closed after the write-stall timeout, one that sends no Hello
// after the Hello timeout, and the server keeps serving everyone else; a
// broken server gives the client an error, not a hang.
#include <gtest/gtest.h>

#include <asio/ip/tcp.hpp>
#include <asio/read.hpp>
#include <asio/write.hpp>
#include <algorithm>
#include <atomic>
#include <functional>
#include <future>
#include <thread>

#include "common/fault.h"
#include "proto/rpc.pb.h"
#include "rpc/client.h"
#include "rpc/echo_service.h"
#include "rpc/server.h"
#include "rpc/server_connection.h"
#include "rpc/test_util.h"

namespace weft::rpc {
namespace {

using testing::RawSocket;
using namespace std::chrono_literals;

// A server that accepts `connections` connections one after the other and,
// on its own thread, answers each one's Hello (unless `handshake` is false)
// and runs a script on it. hold() parks the script until the test is over.
class FakeServer {
 public:
  using Script = std::function<void(FakeServer&, asio::ip::tcp::socket&)>;
  explicit FakeServer(Script script, int connections = 1, bool handshake = true)
      : acceptor_(io_, asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)),
        port_(acceptor_.local_endpoint().port()),
        released_(release_.get_future().share()) {
    thread_ = std::thread([this, script = std::move(script), connections, handshake] {
      for (int i = 0; i < connections; ++i) {
        asio::ip::tcp::socket s(io_);
        asio::error_code ec;
        acceptor_.accept(s, ec);
        if (ec) return;  // the destructor shut the acceptor down
        if (handshake) {
          FrameHeader h = read_request(s);
          FrameHeader reply;
          reply.flags = kFlagResponse;
          reply.request_id = h.request_id;
          send(s, reply);
        }
        try {
          script(*this, s);
        } catch (const std::exception&) {  // the client closed the connection: the test says what went wrong
        }
      }
    });
  }
  ~FakeServer() {
    release_.set_value();
    ::shutdown(acceptor_.native_handle(), SHUT_RDWR);  // wakes an accept waiting for a connection that never comes
    thread_.join();
  }
  Endpoint ep() const { return Endpoint{"127.0.0.1", port_}; }

  // Reads a request's header and body (not its payload).
  static FrameHeader read_request(asio::ip::tcp::socket& s) {
    std::byte hdr[kFrameHeaderSize];
    asio::read(s, asio::buffer(hdr));
    FrameHeader h;
    EXPECT_EQ(decode_header(hdr, FrameLimits{}, &h), DecodeError::kOk);
    std::string body(h.body_len, '\0');
    asio::read(s, asio::buffer(body));
    return h;
  }
  // Sends a header as is (its lengths say what is to follow) and `bytes`.
  static void send(asio::ip::tcp::socket& s, const FrameHeader& h, const std::string& bytes = "") {
    std::byte hdr[kFrameHeaderSize];
    encode_header(h, hdr);
    asio::write(s, asio::buffer(hdr));
    if (!bytes.empty()) asio::write(s, asio::buffer(bytes));
  }
  static FrameHeader response_to(const FrameHeader& request) {
    FrameHeader r;
    r.flags = kFlagResponse;
    r.method = request.method;
    r.request_id = request.request_id;
    return r;
  }
  // Keeps the connection as it is until the test ends.
  void hold() { released_.wait_for(10s); }
  // Reads and drops whatever comes until the peer closes the connection.
  static void drain(asio::ip::tcp::socket& s) {
    asio::error_code ec;
    std::vector<char> sink(4096);
    while (!ec) s.read_some(asio::buffer(sink), ec);
  }

 private:
  asio::io_context io_;
  asio::ip::tcp::acceptor acceptor_;
  uint16_t port_;
  std::promise<void> release_;
  std::shared_future<void> released_;
  std::thread thread_;
};

// An echo call that owns its endpoint (call_raw only refers to it).
Task<Result<RawResponse>> echo_raw(Client& client, Endpoint ep, CallOptions opts, std::string body) {
  co_return co_await client.call_raw(ep, kEcho, std::move(body), std::move(opts));
}

// Starts a call on `client`'s first I/O thread; the future is ready when it completes.
std::future<Result<RawResponse>> start_call(IoPool& io, Client& client, Endpoint ep, CallOptions opts,
                                            std::string body = "") {
  return asio::co_spawn(io.at(0).get_executor(), echo_raw(client, std::move(ep), std::move(opts), std::move(body)),
                        asio::use_future);
}

class BadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions so;
    so.cluster_token = "tok";
    so.name = "bad-input-server";
    so.limits.body_max = 1 << 20;
    so.limits.payload_max = 8 << 20;
    so.queued_reply_bytes_max = 4 << 20;
    configure(so);
    server_ = std::make_unique<Server>(io_, so, registry_);
    register_echo_service(*server_);
    port_ = server_->listen("127.0.0.1", 0).value();
    ClientOptions co;
    co.cluster_token = "tok";
    client_ = std::make_unique<Client>(client_io_, co);
  }
  void TearDown() override {
    client_.reset();
    server_.reset();
  }
  virtual void configure(ServerOptions& /*so*/) {}
  // The server's counter `name` (weft_rpc_server_<name>_total) and open connections.
  uint64_t server_count(const std::string& name) {
    return registry_.counter("weft_rpc_server_" + name + "_total", "", {{"server", "bad-input-server"}}).value();
  }
  int64_t connections() {
    return registry_.gauge("weft_rpc_server_connections", "", {{"server", "bad-input-server"}}).value();
  }

  // The server still answers a well-behaved client.
  void expect_server_healthy() {
    proto::EchoRequest req;
    req.set_data("ok?");
    auto r = block_on(client_io_.at(0).get_executor(),
                      client_->call<proto::EchoReply>(Endpoint{"127.0.0.1", port_}, kEcho, req));
    ASSERT_TRUE(r) << r.error();
    EXPECT_EQ(r->data(), "ok?");
  }

  // A raw connection past its handshake still gets an echo answered.
  static ::testing::AssertionResult echoes(RawSocket& s) {
    proto::EchoRequest req;
    req.set_data("still there");
    FrameHeader h;
    h.method = kEcho.wire();
    h.request_id = 1;
    if (!s.send_frame(h, req.SerializeAsString())) return ::testing::AssertionFailure() << "send failed";
    FrameHeader rh;
    std::string body;
    if (!s.recv_frame(&rh, &body)) return ::testing::AssertionFailure() << "no reply";
    if (rh.status != 0) return ::testing::AssertionFailure() << "status " << rh.status;
    return ::testing::AssertionSuccess();
  }

  static std::string hello_body(const std::string& token) {
    proto::Hello h;
    h.set_cluster_token(token);
    return h.SerializeAsString();
  }

  // A raw connection past the handshake.
  std::unique_ptr<RawSocket> authenticated() {
    auto s = std::make_unique<RawSocket>(port_, local_);
    FrameHeader h;
    h.method = kHello.wire();
    EXPECT_TRUE(s->send_frame(h, hello_body("tok")));
    FrameHeader rh;
    std::string body;
    EXPECT_TRUE(s->recv_frame(&rh, &body));
    EXPECT_EQ(rh.status, 0);
    return s;
  }

  bool local_ = false;  // authenticated() connects through the server's Unix socket
  metrics::Registry registry_;
  IoPool io_{1, "srv"};
  IoPool client_io_{1, "cli"};
  std::unique_ptr<Server> server_;
  std::unique_ptr<Client> client_;
  uint16_t port_ = 0;
};

TEST_F(BadInput, WrongMagicClosesConnection) {
  RawSocket s(port_);
  std::string junk(64, 'Z');
  ASSERT_TRUE(s.send_bytes(junk.data(), junk.size()));
  EXPECT_TRUE(s.closed_by_peer());
  expect_server_healthy();
}

TEST_F(BadInput, WrongVersionAndCrcClose) {
  for (int which = 0; which < 2; ++which) {
    auto s = authenticated();
    FrameHeader h;
    h.method = kEcho.wire();
    std::byte hdr[kFrameHeaderSize];
    encode_header(h, hdr);
    if (which == 0) hdr[4] = std::byte{9};   // version
    else hdr[20] ^= std::byte{1};            // request id bit: CRC mismatch
    ASSERT_TRUE(s->send_bytes(hdr, sizeof(hdr)));
    EXPECT_TRUE(s->closed_by_peer()) << which;
  }
  expect_server_healthy();
}

TEST_F(BadInput, AbsurdLengthsClose) {
  auto s = authenticated();
  FrameHeader h;
  h.method = kEcho.wire();
  h.body_len = 0xfffffff0u;
  std::byte hdr[kFrameHeaderSize];
  encode_header(h, hdr);
  ASSERT_TRUE(s->send_bytes(hdr, sizeof(hdr)));
  EXPECT_TRUE(s->closed_by_peer());

  auto s2 = authenticated();
  h.body_len = 0;
  h.payload_len = 1u << 30;
  encode_header(h, hdr);
  ASSERT_TRUE(s2->send_bytes(hdr, sizeof(hdr)));
  EXPECT_TRUE(s2->closed_by_peer());
  expect_server_healthy();
}

TEST_F(BadInput, TruncatedFrameAndMidPayloadDisconnect) {
  {
    auto s = authenticated();
    std::byte hdr[kFrameHeaderSize];
    FrameHeader h;
    h.method = kEcho.wire();
    h.body_len = 10;
    encode_header(h, hdr);
    ASSERT_TRUE(s->send_bytes(hdr, 17));  // half a header, then gone
  }
  {
    auto s = authenticated();
    FrameHeader h;
    h.method = kEcho.wire();
    h.payload_len = 1 << 20;
    std::byte hdr[kFrameHeaderSize];
    encode_header(h, hdr);
    ASSERT_TRUE(s->send_bytes(hdr, sizeof(hdr)));
    std::string part(300000, 'p');
    ASSERT_TRUE(s->send_bytes(part.data(), part.size()));  // then disconnect mid-payload
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  expect_server_healthy();
}

// Before its Hello, a peer gets no large read buffer: a Hello announcing more
// than kHelloBodyMax closes the connection at its header (within the body
// limit, it would otherwise be read into a buffer of that size).
TEST_F(BadInput, AnOversizedHelloClosesAtItsHeader) {
  RawSocket s(port_);
  FrameHeader h;
  h.method = kHello.wire();
  h.body_len = kHelloBodyMax + 1;
  std::byte hdr[kFrameHeaderSize];
  encode_header(h, hdr);
  ASSERT_TRUE(s.send_bytes(hdr, sizeof(hdr)));
  EXPECT_TRUE(s.closed_by_peer());
  expect_server_healthy();
}

TEST_F(BadInput, FirstFrameMustBeHello) {
  RawSocket s(port_);
  FrameHeader h;
  h.method = kEcho.wire();
  ASSERT_TRUE(s.send_frame(h, ""));
  EXPECT_TRUE(s.closed_by_peer());

  RawSocket bad_body(port_);
  h.method = kHello.wire();
  ASSERT_TRUE(bad_body.send_frame(h, std::string("\xff\xff\xff\xff", 4)));
  FrameHeader rh;
  std::string body;
  ASSERT_TRUE(bad_body.recv_frame(&rh, &body));
  EXPECT_EQ(rh.status, static_cast<uint16_t>(Code::kProtocol));
  EXPECT_TRUE(bad_body.closed_by_peer());

  RawSocket wrong(port_);
  ASSERT_TRUE(wrong.send_frame(h, hello_body("nope")));
  ASSERT_TRUE(wrong.recv_frame(&rh, &body));
  EXPECT_EQ(rh.status, static_cast<uint16_t>(Code::kUnauthenticated));
  EXPECT_NE(body.find("wrong cluster token"), std::string::npos);
  EXPECT_TRUE(wrong.closed_by_peer());
  expect_server_healthy();
}

TEST_F(BadInput, UnparsableBodyAndUnknownMethodAreAnsweredNotFatal) {
  auto s = authenticated();
  FrameHeader h;
  h.method = kEcho.wire();
  h.request_id = 5;
  ASSERT_TRUE(s->send_frame(h, std::string("\x0a\xff\xff\xff\xff\x0f", 6)));
  FrameHeader rh;
  std::string body;
  ASSERT_TRUE(s->recv_frame(&rh, &body));
  EXPECT_EQ(rh.request_id, 5u);
  EXPECT_EQ(rh.status, static_cast<uint16_t>(Code::kProtocol));

  h.method = MethodId{77, 1}.wire();
  h.request_id = 6;
  ASSERT_TRUE(s->send_frame(h, ""));
  ASSERT_TRUE(s->recv_frame(&rh, &body));
  EXPECT_EQ(rh.request_id, 6u);
  EXPECT_EQ(rh.status, static_cast<uint16_t>(Code::kUnknownMethod));

  // The same connection still works.
  proto::EchoRequest req;
  req.set_data("still");
  h.method = kEcho.wire();
  h.request_id = 7;
  ASSERT_TRUE(s->send_frame(h, req.SerializeAsString(), "pay"));
  std::string payload;
  ASSERT_TRUE(s->recv_frame(&rh, &body, &payload));
  EXPECT_EQ(rh.status, 0);
  EXPECT_EQ(payload, "pay");
}

TEST_F(BadInput, ResponseFlagFromClientCloses) {
  auto s = authenticated();
  FrameHeader h;
  h.flags = kFlagResponse;
  ASSERT_TRUE(s->send_frame(h, ""));
  EXPECT_TRUE(s->closed_by_peer());
  expect_server_healthy();
}

// A peer that sends requests and never reads the replies: once its unwritten
// replies pass queued_reply_bytes_max (4 MiB here) the server stops reading
// that connection instead of answering (and holding) every request it sent,
// and goes on serving everyone else.
TEST_F(BadInput, APeerThatDoesNotReadItsRepliesIsNotReadEither) {
  auto s = authenticated();
  proto::EchoRequest req;
  req.set_reply_payload_bytes(1 << 20);
  FrameHeader h;
  h.method = kEcho.wire();
  for (uint64_t i = 1; i <= 200; ++i) {
    h.request_id = i;
    ASSERT_TRUE(s->send_frame(h, req.SerializeAsString()));  // ~50 bytes each: all fit in the socket buffers
  }
  auto& answered = registry_.counter("weft_rpc_server_requests_total", "",
                                     {{"server", "bad-input-server"}, {"method", "test.echo"}});
  // Serving began (a fixed 500 ms sleep alone could end before a loaded server answered any) ...
  for (int i = 0; i < 1000 && answered.value() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_GT(answered.value(), 0u);
  // ... and had time to go on answering, were it to.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  // What the kernel's socket buffers took (loopback: up to ~10 MiB) plus 4 MiB queued.
  EXPECT_LT(answered.value(), 40u) << "replies of 1 MiB answered for a peer that reads none";
  expect_server_healthy();
}

// A connection accepted while stop() runs, after stop() listed the
// connections to close, is closed too, not served by a stopped server.
TEST_F(BadInput, AConnectionAcceptedDuringStopIsClosed) {
  fault::Scope hold("rpc.server.accept.hold");  // the accept loop holds the next connection
  RawSocket s(port_);
  ASSERT_TRUE(s.connected());
  for (int i = 0; i < 1000 && hold.triggered() == 0; ++i) std::this_thread::sleep_for(2ms);
  ASSERT_GT(hold.triggered(), 0);
  std::thread stopper([&] { server_->stop(); });
  std::this_thread::sleep_for(200ms);  // stop() has marked the server stopped and listed its connections
  fault::disarm("rpc.server.accept.hold");
  stopper.join();
  FrameHeader h;
  h.method = kHello.wire();
  s.send_frame(h, hello_body("tok"));  // served, the connection would answer it
  EXPECT_TRUE(s.closed_by_peer(2000)) << "a connection accepted during stop() was served";
}

// The same server, closing connections whose replies wait kTimeout with the
// peer taking none of their bytes.
class WriteStall : public BadInput {
 protected:
  static constexpr auto kTimeout = std::chrono::milliseconds(400);

  void configure(ServerOptions& so) override { so.write_stall_timeout_ms = static_cast<uint32_t>(kTimeout.count()); }
  uint64_t stalls() {
    return server_count("write_stalls");
  }
  // Polls `done` for up to 5 s.
  template <class F>
  static bool eventually(F done) {
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!done() && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return done();
  }
  void stopped_reader_is_closed();
  void slow_reader_is_kept();
  // Asks for `n` echo replies of `bytes` payload each.
  static void request_replies(RawSocket& s, int n, uint32_t bytes) {
    proto::EchoRequest req;
    req.set_reply_payload_bytes(bytes);
    FrameHeader h;
    h.method = kEcho.wire();
    for (int i = 1; i <= n; ++i) {
      h.request_id = static_cast<uint64_t>(i);
      ASSERT_TRUE(s.send_frame(h, req.SerializeAsString()));
    }
  }
};

// A peer that sends requests and then stops reading (hung, SIGSTOPped,
// hostile): its replies (40 MiB asked for) fill the socket buffers, nothing
// more is written, and kTimeout (to 1.5 kTimeout) later the server closes
// that connection (its queued replies go with it) and counts it. Another
// client is served throughout.
TEST_F(WriteStall, APeerThatStopsReadingIsClosedAfterTheTimeout) { stopped_reader_is_closed(); }

// The same over the server's Unix socket: the writer's progress there is
// what the peer read (SIOCOUTQ), not what TCP acknowledged.
TEST_F(WriteStall, APeerThatStopsReadingOverTheLocalSocketIsClosedAfterTheTimeout) {
  local_ = true;
  stopped_reader_is_closed();
}

void WriteStall::stopped_reader_is_closed() {
  auto start = std::chrono::steady_clock::now();
  auto s = authenticated();
  ASSERT_NO_FATAL_FAILURE(request_replies(*s, 40, 1 << 20));
  expect_server_healthy();  // while the stalled peer is still connected
  EXPECT_TRUE(eventually([&] { return stalls() == 1; })) << "the stalled connection was not closed";
  EXPECT_GE(std::chrono::steady_clock::now() - start, kTimeout) << "closed before the timeout";
  EXPECT_TRUE(s->drain_until_closed()) << "the peer does not see the close";
  EXPECT_TRUE(eventually([&] { return connections() == 1; })) << "only the well-behaved client's connection is left";
  expect_server_healthy();
}

// A slow reader is not a stalled one: a reply of 6 MiB, read at about
// 2 MiB/s, takes several times kTimeout and arrives whole, because every
// stretch of kTimeout sees some of its bytes written or taken by the peer.
// (At this pace the kernel lets the server's writer in only about every
// 0.7 s, once a third of its send buffer is free: the bytes the peer
// acknowledges in between count too.)
TEST_F(WriteStall, ASlowReaderThatKeepsReadingIsNotClosed) { slow_reader_is_kept(); }

TEST_F(WriteStall, ASlowReaderOverTheLocalSocketIsNotClosed) {
  local_ = true;
  slow_reader_is_kept();
}

void WriteStall::slow_reader_is_kept() {
  auto s = authenticated();
  ASSERT_NO_FATAL_FAILURE(request_replies(*s, 1, 6 << 20));
  s->pace_reads(32 << 10, std::chrono::milliseconds(15));
  auto start = std::chrono::steady_clock::now();
  FrameHeader rh;
  std::string body, payload;
  ASSERT_TRUE(s->recv_frame(&rh, &body, &payload)) << "the slow reader was cut off";
  EXPECT_EQ(rh.status, 0);
  EXPECT_EQ(payload.size(), 6u << 20);
  EXPECT_GT(std::chrono::steady_clock::now() - start, 3 * kTimeout) << "read too fast to show anything";
  EXPECT_EQ(stalls(), 0u);
}

// A connection with nothing to write is never closed by the timeout, however
// long it stays quiet.
TEST_F(WriteStall, IdleConnectionsStayOpen) {
  auto s = authenticated();
  expect_server_healthy();
  std::this_thread::sleep_for(3 * kTimeout);
  EXPECT_TRUE(echoes(*s)) << "the idle raw connection was closed";
  expect_server_healthy();  // the client's connection was idle too
  EXPECT_EQ(stalls(), 0u);
  EXPECT_EQ(connections(), 2);
}

// The same server, closing connections whose request stops arriving in its
// middle for kTimeout.
class ReadStall : public BadInput {
 protected:
  static constexpr auto kTimeout = std::chrono::milliseconds(400);

  void configure(ServerOptions& so) override { so.read_stall_timeout_ms = static_cast<uint32_t>(kTimeout.count()); }
  uint64_t stalls() {
    return server_count("read_stalls");
  }
  // The header of an echo request of `body_len` body and `payload_len` payload bytes.
  static std::array<std::byte, kFrameHeaderSize> echo_header(uint32_t body_len, uint32_t payload_len) {
    FrameHeader h;
    h.method = kEcho.wire();
    h.request_id = 1;
    h.body_len = body_len;
    h.payload_len = payload_len;
    std::array<std::byte, kFrameHeaderSize> out;
    encode_header(h, out.data());
    return out;
  }
};

// A peer that announces a 4 MiB payload, sends part of it and stops (hung,
// its host gone without a reset, hostile) is closed after kTimeout (to 1.5
// kTimeout) and counted, which gives back the payload buffer; so is one that
// stops inside a request's body. Another client is served throughout.
TEST_F(ReadStall, APeerThatStopsInTheMiddleOfARequestIsClosed) {
  auto start = std::chrono::steady_clock::now();
  auto in_payload = authenticated();
  auto hdr = echo_header(0, 4 << 20);
  ASSERT_TRUE(in_payload->send_bytes(hdr.data(), hdr.size()));
  std::string part(300000, 'p');
  ASSERT_TRUE(in_payload->send_bytes(part.data(), part.size()));
  auto in_body = authenticated();
  hdr = echo_header(100, 0);
  ASSERT_TRUE(in_body->send_bytes(hdr.data(), hdr.size()));
  ASSERT_TRUE(in_body->send_bytes(part.data(), 10));
  expect_server_healthy();  // while both stalled peers are still connected
  EXPECT_TRUE(in_payload->closed_by_peer()) << "a peer stalled in its payload was kept";
  EXPECT_TRUE(in_body->closed_by_peer()) << "a peer stalled in its body was kept";
  EXPECT_GE(std::chrono::steady_clock::now() - start, kTimeout) << "closed before the timeout";
  EXPECT_EQ(stalls(), 2u);
  expect_server_healthy();
  EXPECT_EQ(connections(), 1);  // the well-behaved client's
}

// A slow sender is not a stalled one: a 1 MiB payload sent 64 KiB every
// kTimeout / 4 takes several timeouts and is answered; an idle connection
// between requests is never closed by the timeout.
TEST_F(ReadStall, ASlowSenderAndAnIdleConnectionAreNotClosed) {
  auto s = authenticated();
  std::this_thread::sleep_for(3 * kTimeout);  // idle after its Hello
  proto::EchoRequest req;
  std::string body = req.SerializeAsString();
  auto hdr = echo_header(static_cast<uint32_t>(body.size()), 1 << 20);
  ASSERT_TRUE(s->send_bytes(hdr.data(), hdr.size()));
  ASSERT_TRUE(s->send_bytes(body.data(), body.size()));
  std::string payload(1 << 20, 'x');
  auto start = std::chrono::steady_clock::now();
  for (size_t at = 0; at < payload.size(); at += 64 << 10) {
    std::this_thread::sleep_for(kTimeout / 4);
    ASSERT_TRUE(s->send_bytes(payload.data() + at, 64 << 10)) << "the slow sender was cut off at byte " << at;
  }
  EXPECT_GT(std::chrono::steady_clock::now() - start, 3 * kTimeout) << "sent too fast to show anything";
  FrameHeader rh;
  std::string rbody, rpayload;
  ASSERT_TRUE(s->recv_frame(&rh, &rbody, &rpayload)) << "no reply to the slow request";
  EXPECT_EQ(rh.status, 0);
  EXPECT_EQ(rpayload, payload);
  EXPECT_EQ(stalls(), 0u);
  EXPECT_EQ(connections(), 1);  // the slow sender's
}

// The same server, closing connections that send no Hello within kTimeout.
class HelloTimeout : public BadInput {
 protected:
  static constexpr auto kTimeout = std::chrono::milliseconds(1000);  // also the well-behaved client's: not tighter

  void configure(ServerOptions& so) override { so.hello_timeout_ms = static_cast<uint32_t>(kTimeout.count()); }
  uint64_t hello_timeouts() {
    return server_count("hello_timeouts");
  }
};

// A peer that connects and says nothing (a scanner, a stuck client, a
// client host that died right after connecting) is closed after kTimeout
// and counted; so is one that stops in the middle of its Hello.
TEST_F(HelloTimeout, APeerThatSendsNoHelloIsClosed) {
  auto start = std::chrono::steady_clock::now();
  RawSocket silent(port_);
  RawSocket half(port_);
  FrameHeader h;
  h.method = kHello.wire();
  h.body_len = 10;
  std::byte hdr[kFrameHeaderSize];
  encode_header(h, hdr);
  ASSERT_TRUE(half.send_bytes(hdr, sizeof(hdr)));  // a Hello header, and never its body
  EXPECT_TRUE(silent.closed_by_peer()) << "a silent connection was kept";
  EXPECT_TRUE(half.closed_by_peer()) << "a connection stuck in its Hello was kept";
  EXPECT_GE(std::chrono::steady_clock::now() - start, kTimeout) << "closed before the timeout";
  EXPECT_EQ(hello_timeouts(), 2u);
  expect_server_healthy();
  EXPECT_EQ(connections(), 1);  // the well-behaved client's
}

// Once it said Hello, a connection may stay idle as long as it likes
// (clients keep idle connections to their servers; keepalive finds the dead).
TEST_F(HelloTimeout, APeerThatSaidHelloMayStayIdle) {
  auto s = authenticated();
  std::this_thread::sleep_for(3 * kTimeout);
  EXPECT_TRUE(echoes(*s)) << "an idle connection past its Hello was closed";
  EXPECT_EQ(hello_timeouts(), 0u);
}

// A server that answers the handshake and then sends garbage: the client's
// calls fail with an error instead of hanging: kUnavailable, as no reply
// came yet (a wrong process on the address: callers with several addresses
// go on to the next).
TEST(BadServer, GarbageFromServerFailsCalls) {
  asio::io_context io;
  asio::ip::tcp::acceptor acceptor(io, asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  uint16_t port = acceptor.local_endpoint().port();
  std::thread fake([&] {
    asio::ip::tcp::socket s(io);
    acceptor.accept(s);
    std::byte hdr[kFrameHeaderSize];
    asio::read(s, asio::buffer(hdr));
    FrameHeader h;
    ASSERT_EQ(decode_header(hdr, FrameLimits{}, &h), DecodeError::kOk);
    std::string body(h.body_len, '\0');
    asio::read(s, asio::buffer(body));
    FrameHeader reply;
    reply.flags = kFlagResponse;
    encode_header(reply, hdr);
    asio::write(s, asio::buffer(hdr));
    std::byte req[kFrameHeaderSize];
    asio::read(s, asio::buffer(req));  // the echo call
    std::string junk(100, 'J');
    asio::write(s, asio::buffer(junk));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  });
  IoPool cio{1};
  Client client(cio, ClientOptions{});
  proto::EchoRequest req;
  auto r = block_on(cio.at(0).get_executor(),
                    client.call<proto::EchoReply>(Endpoint{"127.0.0.1", port}, kEcho, req));
  fake.join();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kUnavailable) << r.error();
  EXPECT_NE(r.error().message().find("malformed frame"), std::string::npos) << r.error();
}

// Something else than a Weft server on the address (it answers the Hello
// with an HTTP error): the call fails with kUnavailable, a transport error
// (callers with several addresses go on to the next), saying why.
TEST(BadServer, AProcessThatIsNoWeftServerIsUnavailable) {
  FakeServer http(
      [](FakeServer&, asio::ip::tcp::socket& s) {
        std::byte hello[kFrameHeaderSize];
        asio::read(s, asio::buffer(hello));
        asio::write(s, asio::buffer(std::string("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n") +
                                    std::string(40, 'x')));
        FakeServer::drain(s);
      },
      2, /*handshake=*/false);
  IoPool cio{1};
  Client client(cio, ClientOptions{});
  auto r = start_call(cio, client, http.ep(), {}).get();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kUnavailable) << r.error();
  EXPECT_NE(r.error().message().find("not a Weft server"), std::string::npos) << r.error();
  Client blocking(cio, ClientOptions{});  // the first one backs off from the address now
  auto b = blocking.call_blocking(http.ep(), kEcho, "");
  ASSERT_FALSE(b);
  EXPECT_EQ(b.error().code(), Code::kUnavailable) << b.error();
  EXPECT_NE(b.error().message().find("not a Weft server"), std::string::npos) << b.error();
}

// Garbage after the handshake: kUnavailable while no reply came on the
// connection, kProtocol once one did (the peer is a Weft server, and broken);
// for call_blocking too.
TEST(BadServer, GarbageIsUnavailableBeforeAnyReplyAndAProtocolErrorAfter) {
  std::atomic<int> connection{0};
  FakeServer fake(
      [&](FakeServer&, asio::ip::tcp::socket& s) {
        FrameHeader h = FakeServer::read_request(s);
        if (connection++ % 2 == 1) {  // the second of each pair answers one call first
          FakeServer::send(s, FakeServer::response_to(h));
          FakeServer::read_request(s);
        }
        asio::write(s, asio::buffer(std::string(100, 'J')));
        FakeServer::drain(s);
      },
      4);
  IoPool cio{1};
  Client client(cio, ClientOptions{});
  auto first = start_call(cio, client, fake.ep(), {}).get();
  ASSERT_FALSE(first);
  EXPECT_EQ(first.error().code(), Code::kUnavailable) << first.error();
  ASSERT_TRUE(start_call(cio, client, fake.ep(), {}).get());
  auto after = start_call(cio, client, fake.ep(), {}).get();
  ASSERT_FALSE(after);
  EXPECT_EQ(after.error().code(), Code::kProtocol) << after.error();

  auto b = client.call_blocking(fake.ep(), kEcho, "");
  ASSERT_FALSE(b);
  EXPECT_EQ(b.error().code(), Code::kUnavailable) << b.error();
  ASSERT_TRUE(client.call_blocking(fake.ep(), kEcho, ""));
  auto b_after = client.call_blocking(fake.ep(), kEcho, "");
  ASSERT_FALSE(b_after);
  EXPECT_EQ(b_after.error().code(), Code::kProtocol) << b_after.error();
}

// A reply to a call that already timed out stops in its middle: no live
// call is receiving it, so no deadline closes the connection; the read-stall
// bound does, and the calls behind it fail as disconnected (retryable), not
// each at its own deadline for as long as the connection lives.
TEST(BadServer, AStalledReplyToAnExpiredCallClosesItsConnection) {
  FakeServer fake([](FakeServer& f, asio::ip::tcp::socket& s) {
    FrameHeader expired = FakeServer::read_request(s);
    std::this_thread::sleep_for(400ms);  // past the first call's deadline
    FakeServer::read_request(s);         // the call behind it: never answered
    FrameHeader r = FakeServer::response_to(expired);
    r.payload_len = 1 << 20;
    FakeServer::send(s, r, std::string(10, 'x'));
    f.hold();
  });
  IoPool cio{1};
  ClientOptions o;
  o.read_stall_timeout_ms = 1000;
  Client client(cio, o);
  CallOptions short_call;
  short_call.timeout_ms = 200;
  auto a = start_call(cio, client, fake.ep(), std::move(short_call)).get();
  ASSERT_FALSE(a);
  EXPECT_EQ(a.error().code(), Code::kTimeout) << a.error();
  CallOptions behind;
  behind.timeout_ms = 20000;
  auto start = std::chrono::steady_clock::now();
  auto b = start_call(cio, client, fake.ep(), std::move(behind));
  ASSERT_EQ(b.wait_for(5s), std::future_status::ready) << "the stalled connection was kept";
  auto rb = b.get();
  ASSERT_FALSE(rb);
  EXPECT_EQ(rb.error().code(), Code::kDisconnected) << rb.error();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 4s);
}

// A server that sends a reply's header and the start of its payload, then
// nothing more: the call, whose payload was landing in the caller's buffer,
// still fails at its deadline, and another call on that connection fails as
// disconnected (retryable) once the reply stalled for read_stall_timeout_ms.
TEST(BadServer, AReplyPayloadThatStallsTimesOutTheCall) {
  FakeServer fake([](FakeServer& f, asio::ip::tcp::socket& s) {
    FrameHeader first = FakeServer::read_request(s);
    FakeServer::read_request(s);  // the other call: never answered
    FrameHeader r = FakeServer::response_to(first);
    r.payload_len = 1 << 20;
    FakeServer::send(s, r, std::string(1000, 'x'));
    f.hold();
  });
  std::vector<std::byte> dest(1 << 20);
  IoPool cio{1};
  ClientOptions co;
  co.read_stall_timeout_ms = 1000;
  Client client(cio, co);
  CallOptions stalls;
  stalls.timeout_ms = 300;
  stalls.response_payload = dest;
  auto start = std::chrono::steady_clock::now();
  auto a = start_call(cio, client, fake.ep(), std::move(stalls));
  CallOptions other;
  other.timeout_ms = 20000;
  auto b = start_call(cio, client, fake.ep(), std::move(other));
  ASSERT_EQ(a.wait_for(3s), std::future_status::ready) << "the call outlived its deadline by far";
  auto ra = a.get();
  auto took = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(ra);
  EXPECT_EQ(ra.error().code(), Code::kTimeout) << ra.error();
  EXPECT_LT(took, 1s);
  ASSERT_EQ(b.wait_for(3s), std::future_status::ready);
  auto rb = b.get();
  ASSERT_FALSE(rb);
  EXPECT_EQ(rb.error().code(), Code::kDisconnected) << rb.error();
}

// Starts `first` on `fake` and, behind it on the same connection, a call
// with 5 s to go. `first` must fail with kTimeout; then `caller_goes_on`
// runs (the caller reuses its memory and lets the server go on), and the
// call behind must succeed: the timeout did not cost the connection.
void expect_the_call_behind_a_timeout_succeeds(FakeServer& fake, CallOptions first,
                                               const std::function<void()>& caller_goes_on) {
  IoPool cio{1};
  Client client(cio, ClientOptions{});
  auto a = start_call(cio, client, fake.ep(), std::move(first));
  CallOptions behind;
  behind.timeout_ms = 5000;
  auto b = start_call(cio, client, fake.ep(), std::move(behind));
  ASSERT_EQ(a.wait_for(3s), std::future_status::ready) << "the call outlived its deadline by far";
  auto ra = a.get();
  ASSERT_FALSE(ra);
  EXPECT_EQ(ra.error().code(), Code::kTimeout) << ra.error();
  caller_goes_on();
  ASSERT_EQ(b.wait_for(5s), std::future_status::ready);
  auto rb = b.get();
  EXPECT_TRUE(rb) << "the call behind the one that timed out failed: " << rb.error();
}

// A reply whose payload is landing in the caller's buffer when its call
// times out: the call ends at its deadline, the rest of the payload is read
// and dropped (the caller's buffer is not written any more), and the
// connection goes on to answer the call behind it.
TEST(BadServer, AReplyLandingAfterItsCallTimedOutIsDroppedAndTheConnectionGoesOn) {
  std::promise<void> timed_out;
  auto go_on = timed_out.get_future();
  FakeServer fake([&](FakeServer& f, asio::ip::tcp::socket& s) {
    FrameHeader first = FakeServer::read_request(s);
    FrameHeader second = FakeServer::read_request(s);
    FrameHeader r = FakeServer::response_to(first);
    r.payload_len = 1 << 20;
    FakeServer::send(s, r, std::string(1000, 'x'));
    go_on.wait_for(10s);
    asio::write(s, asio::buffer(std::string(r.payload_len - 1000, 'y')));
    FakeServer::send(s, FakeServer::response_to(second));
    f.hold();
  });
  std::vector<std::byte> dest(1 << 20);
  CallOptions landing;
  landing.timeout_ms = 300;
  landing.response_payload = dest;
  expect_the_call_behind_a_timeout_succeeds(fake, std::move(landing), [&] {
    std::fill(dest.begin(), dest.end(), std::byte{0x5a});  // the caller has its buffer back
    timed_out.set_value();
  });
  EXPECT_EQ(std::count(dest.begin(), dest.end(), std::byte{0x5a}), static_cast<ptrdiff_t>(dest.size()))
      << "the rest of the reply landed in the buffer of a call that had ended";
}

// A request being written from the caller's memory when its call times out
// (the server stopped reading it midway): the call ends at its deadline, the
// rest of the request is written whole from a copy (the caller may reuse
// its memory at once), and the connection goes on to carry the call behind.
TEST(BadServer, ARequestWrittenWhenItsCallTimedOutIsWrittenWholeAndTheConnectionGoesOn) {
  constexpr size_t kPayload = 32 << 20;  // more than the socket buffers take
  std::promise<void> timed_out;
  auto go_on = timed_out.get_future();
  std::atomic<size_t> intact{0};
  FakeServer fake([&](FakeServer& f, asio::ip::tcp::socket& s) {
    FrameHeader first = FakeServer::read_request(s);
    std::vector<char> got(first.payload_len);
    asio::read(s, asio::buffer(got.data(), 65536));
    go_on.wait_for(10s);
    asio::read(s, asio::buffer(got.data() + 65536, got.size() - 65536));
    for (size_t i = 0; i < got.size(); ++i) intact += got[i] == static_cast<char>(i % 251);
    FrameHeader second = FakeServer::read_request(s);
    FakeServer::send(s, FakeServer::response_to(first));  // late: the client drops it
    FakeServer::send(s, FakeServer::response_to(second));
    f.hold();
  });
  std::vector<std::byte> payload(kPayload);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<std::byte>(i % 251);
  CallOptions writing;
  writing.timeout_ms = 300;
  writing.payload.push_back(payload);
  expect_the_call_behind_a_timeout_succeeds(fake, std::move(writing), [&] {
    std::fill(payload.begin(), payload.end(), std::byte{0});  // the caller reuses its memory
    timed_out.set_value();
  });
  EXPECT_EQ(intact.load(), kPayload) << "the request was not written as the caller had given it";
}

// A server that stops reading in the middle of a request's payload: the
// call fails at its deadline instead of waiting for the write to finish,
// and a call behind it fails as disconnected (retryable) once the write
// stalled for write_stall_timeout_ms.
TEST(BadServer, ARequestPayloadThatCannotBeWrittenTimesOutTheCall) {
  FakeServer fake([](FakeServer& f, asio::ip::tcp::socket&) { f.hold(); });
  std::vector<std::byte> payload(32 << 20);  // more than the socket buffers take
  IoPool cio{1};
  ClientOptions co;
  co.write_stall_timeout_ms = 1000;
  Client client(cio, co);
  CallOptions opts;
  opts.timeout_ms = 300;
  opts.payload.push_back(payload);
  auto start = std::chrono::steady_clock::now();
  auto f = start_call(cio, client, fake.ep(), std::move(opts));
  CallOptions behind;
  behind.timeout_ms = 20000;
  auto b = start_call(cio, client, fake.ep(), std::move(behind));
  ASSERT_EQ(f.wait_for(3s), std::future_status::ready) << "the call outlived its deadline by far";
  auto r = f.get();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kTimeout) << r.error();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
  ASSERT_EQ(b.wait_for(5s), std::future_status::ready) << "the stalled connection was kept";
  auto rb = b.get();
  ASSERT_FALSE(rb);
  EXPECT_EQ(rb.error().code(), Code::kDisconnected) << rb.error();
}

// A server that answers a call as soon as it has read a request's header:
// the request is not wholly written yet, so the answer cannot be a real one,
// and taking it would hand the request's memory back to the caller while the
// client still writes from it. The call answered (the one being written, or
// the one behind it) fails with kProtocol, the other as disconnected.
TEST(BadServer, AReplyBeforeTheRequestIsWrittenIsAProtocolError) {
  for (uint64_t answered : {1u, 2u}) {
    SCOPED_TRACE(answered);
    FakeServer fake([answered](FakeServer& f, asio::ip::tcp::socket& s) {
      std::byte hdr[kFrameHeaderSize];
      asio::read(s, asio::buffer(hdr));  // call 1's header; its body and payload are left unread
      FrameHeader h;
      EXPECT_EQ(decode_header(hdr, FrameLimits{}, &h), DecodeError::kOk);
      FrameHeader r = FakeServer::response_to(h);
      r.request_id = answered;
      FakeServer::send(s, r);
      f.hold();
    });
    std::vector<std::byte> big(32 << 20), small(4096);  // big: more than the socket buffers take
    IoPool cio{1};
    Client client(cio, ClientOptions{});
    CallOptions first, second;
    first.timeout_ms = second.timeout_ms = 5000;
    first.payload.push_back(big);
    second.payload.push_back(small);
    auto a = start_call(cio, client, fake.ep(), std::move(first));
    auto b = start_call(cio, client, fake.ep(), std::move(second));
    ASSERT_EQ(a.wait_for(3s), std::future_status::ready);
    ASSERT_EQ(b.wait_for(3s), std::future_status::ready);
    auto ra = a.get(), rb = b.get();
    auto& early = answered == 1 ? ra : rb;
    auto& other = answered == 1 ? rb : ra;
    ASSERT_FALSE(early) << "an answer to a request not yet written was taken";
    EXPECT_EQ(early.error().code(), Code::kProtocol) << early.error();
    ASSERT_FALSE(other);
    EXPECT_EQ(other.error().code(), Code::kDisconnected) << other.error();
  }
}

// A server out of descriptors (every accept fails with EMFILE while
// connections wait in its backlog) pauses before accepting again instead of
// spinning at full CPU, and logs the failure once a second, not each time.
TEST(Server, OutOfDescriptorsItPausesAcceptingAndLogsOnceASecond) {
  auto seen = testing::run_out_of_descriptors(
      [](const std::function<void(uint16_t)>& listening) -> int64_t {
        metrics::Registry registry;
        IoPool io{1};
        ServerOptions so;
        so.cluster_token = "tok";
        so.name = "fd-server";
        Server server(io, so, registry);
        listening(server.listen("127.0.0.1", 0).value());
        return static_cast<int64_t>(
            registry.counter("weft_rpc_server_accept_errors_total", "", {{"server", "fd-server"}}).value());
      },
      20, 1000ms);
  EXPECT_GE(seen.value, 1) << "no accept failed: the test did not run out of descriptors";
  // Two acceptors pause 100 ms after each failure: the TCP listener and its
  // Unix twin (accept(2) takes a descriptor number before it looks for a
  // connection, so the idle twin fails with EMFILE too): ~11 each in the
  // second the test holds, more than twice that only if a loop spins.
  EXPECT_LE(seen.value, 30) << "accept failures in 1 s: an accept loop spins";
  size_t lines = testing::lines_with(seen.log, "accept failed");
  EXPECT_GE(lines, 1u);
  EXPECT_LE(lines, 2u) << seen.log.substr(0, 2000);
}

// The handshake's answer and the expiry of its timer ready at once (the
// client's I/O thread was busy meanwhile): the answer is read first, and
// the timer's handler, already queued, must not close the connection that
// just completed its handshake.
TEST(BadServer, AHandshakeTimerFiringWithItsAnswerLeavesTheConnectionOpen) {
  constexpr auto kTimeout = 400ms;
  std::promise<std::chrono::steady_clock::time_point> hello_read;
  std::promise<void> client_busy;
  auto busy = client_busy.get_future();
  FakeServer fake(
      [&](FakeServer&, asio::ip::tcp::socket& s) {
        FrameHeader hello = FakeServer::read_request(s);
        hello_read.set_value(std::chrono::steady_clock::now());
        busy.wait();  // the client's I/O thread sleeps past the handshake timeout
        FrameHeader reply = FakeServer::response_to(hello);
        reply.body_len = 10;  // the client does not parse it
        FakeServer::send(s, reply, std::string(10, 'r'));
        FrameHeader call = FakeServer::read_request(s);
        FakeServer::send(s, FakeServer::response_to(call));
        FakeServer::drain(s);
      },
      1, /*handshake=*/false);
  IoPool cio{1};
  ClientOptions co;
  co.connect_timeout_ms = static_cast<uint32_t>(kTimeout.count());
  Client client(cio, co);
  auto call = start_call(cio, client, fake.ep(), {});
  auto hello_at = hello_read.get_future().get();
  asio::post(cio.at(0), [&, hello_at] {
    client_busy.set_value();
    std::this_thread::sleep_until(hello_at + kTimeout + 300ms);
  });
  ASSERT_EQ(call.wait_for(5s), std::future_status::ready);
  auto r = call.get();
  EXPECT_TRUE(r) << r.error();
}

// A peer that takes the connection and never answers the Hello (or stops
// in the middle of its answer): the call fails after connect_timeout_ms.
TEST(BadServer, AHandshakeNotAnsweredInTimeFailsTheCall) {
  for (bool half : {false, true}) {
    SCOPED_TRACE(half);
    FakeServer silent(
        [half](FakeServer& f, asio::ip::tcp::socket& s) {
          FrameHeader hello = FakeServer::read_request(s);
          if (half) {
            FrameHeader reply = FakeServer::response_to(hello);
            reply.body_len = 10;
            FakeServer::send(s, reply, "abc");  // 3 bytes of 10
          }
          f.hold();
        },
        1, /*handshake=*/false);
    IoPool cio{1};
    ClientOptions co;
    co.connect_timeout_ms = 300;
    Client client(cio, co);
    auto start = std::chrono::steady_clock::now();
    auto call = start_call(cio, client, silent.ep(), {});
    ASSERT_EQ(call.wait_for(3s), std::future_status::ready);
    auto r = call.get();
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code(), Code::kUnavailable) << r.error();
    EXPECT_NE(r.error().message().find("did not answer the handshake within 300 ms"), std::string::npos) << r.error();
    EXPECT_GE(std::chrono::steady_clock::now() - start, 300ms);
  }
}

}  // namespace
}  // namespace weft::rpc
