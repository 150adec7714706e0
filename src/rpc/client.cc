#include "rpc/client.h"

#include <asio/dispatch.hpp>
#include <asio/post.hpp>

#include "common/random.h"
#include "rpc/client_connection.h"

namespace weft::rpc {

Client::Client(IoPool& io, ClientOptions options) : io_(io), options_(std::move(options)) {
  if (options_.client_id == 0) options_.client_id = thread_random().next_u64() | 1;
  if (options_.connections_per_endpoint == 0) options_.connections_per_endpoint = 1;
  shared_options_ = std::make_shared<const ClientOptions>(options_);
}

Client::~Client() { close_all(); }

void Client::close_all() {
  std::map<Endpoint, Channel> channels;
  {
    std::lock_guard lock(mu_);
    channels.swap(channels_);
  }
  auto close_one = [](const std::shared_ptr<ClientConnection>& conn) {
    if (conn) asio::post(conn->executor(), [conn] { conn->close(Status(Code::kDisconnected, "client closed")); });
  };
  for (auto& [ep, ch] : channels) {
    for (auto& conn : ch.conns) close_one(conn);
    for (auto& conn : ch.local) close_one(conn);
  }
}

Result<std::shared_ptr<ClientConnection>> Client::connection_for(const Endpoint& ep) {
  const size_t per = options_.connections_per_endpoint;
  const size_t here = io_.current_index();  // io_.size() outside the pool
  std::lock_guard lock(mu_);
  Channel& ch = channels_[ep];
  if (ch.conns.empty()) {
    ch.conns.resize(per);
    ch.local.resize(io_.size() * per);
    ch.backoff = std::make_shared<ChannelBackoff>();
  }
  size_t k = ch.next++ % per;
  bool on_pool = here < io_.size();
  auto& conn = on_pool ? ch.local[here * per + k] : ch.conns[k];
  if (conn && !conn->broken()) return conn;
  {
    std::lock_guard backoff_lock(ch.backoff->mu);
    auto now = std::chrono::steady_clock::now();
    if (now < ch.backoff->retry_at) {
      auto wait_ms = std::chrono::duration_cast<std::chrono::milliseconds>(ch.backoff->retry_at - now).count();
      return error(Code::kUnavailable, "{} (next attempt in {} ms)", ch.backoff->last_error.message(), wait_ms);
    }
  }
  conn = std::make_shared<ClientConnection>(on_pool ? io_.at(here) : io_.next(), ep, shared_options_, ch.backoff);
  conn->connect();
  return conn;
}

namespace {

// The initiation of a call, as a named type: GCC 12 miscompiles a lambda
// with captures inside a co_await expression (double free).
struct StartCall {
  std::shared_ptr<ClientConnection> conn;
  MethodId method;
  std::string body;
  CallOptions options;

  template <class Handler>
  void operator()(Handler handler) {
    auto ex = asio::get_associated_executor(handler);
    Completion done = [handler = std::move(handler), ex](Result<RawResponse> r) mutable {
      asio::post(ex, [handler = std::move(handler), r = std::move(r)]() mutable { std::move(handler)(std::move(r)); });
    };
    auto target = conn->executor();
    // dispatch: runs inline when the caller already is on the connection's thread.
    asio::dispatch(target, [conn = std::move(conn), method = method, body = std::move(body), options = std::move(options),
                        done = std::move(done)]() mutable {
      conn->start_call(method, std::move(body), std::move(options), std::move(done));
    });
  }
};

}  // namespace

Task<Result<RawResponse>> Client::call_raw(const Endpoint& ep, MethodId method, std::string body,
                                           CallOptions options) {
  auto conn = connection_for(ep);
  if (!conn) co_return std::unexpected(std::move(conn).error());
  if (options.cancel && options.cancel->cancelled()) co_return error(Code::kCancelled, "call cancelled");
  StartCall start{std::move(*conn), method, std::move(body), std::move(options)};
  co_return co_await asio::async_initiate<const asio::use_awaitable_t<>&, void(Result<RawResponse>)>(
      std::move(start), asio::use_awaitable);
}

}  // namespace weft::rpc
