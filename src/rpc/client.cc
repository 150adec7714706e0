#include "rpc/client.h"

#include <algorithm>

#include <asio/dispatch.hpp>
#include <asio/post.hpp>

#include "common/assert.h"
#include "common/random.h"
#include "rpc/client_connection.h"
#include "rpc/sync_channel.h"

namespace weft::rpc {

Client::Client(IoPool& io, ClientOptions options) : io_(io), options_(std::move(options)) {
  if (options_.client_id == 0) options_.client_id = random_id();
  if (options_.connections_per_endpoint == 0) options_.connections_per_endpoint = 1;
  shared_options_ = std::make_shared<const ClientOptions>(options_);
}

Client::~Client() { close_all(); }

void Client::close_all() {
  generation_.fetch_add(1);
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

void Client::shut_down() {
  {
    // Under mu_: a connection made before the flag is in channels_ when
    // close_all() takes them, none is made after.
    std::lock_guard lock(mu_);
    shut_ = true;
  }
  close_all();
}

size_t Client::channel_count() {
  std::lock_guard lock(mu_);
  return channels_.size();
}

void Client::sweep_channels_locked() {
  if (channels_.size() < 2 * channels_after_sweep_ + 16) return;
  const auto now = std::chrono::steady_clock::now();
  std::erase_if(channels_, [&](const auto& entry) {
    const Channel& ch = entry.second;
    long connections = 0;  // each holds the backoff too
    for (const auto* list : {&ch.conns, &ch.local})
      for (const auto& c : *list) {
        if (c && !c->broken()) return false;
        connections += c != nullptr;
      }
    if (!ch.backoff) return true;
    // Any other holder (a blocking call connecting now) will record its outcome there: keep it.
    if (ch.backoff.use_count() > 1 + connections) return false;
    std::lock_guard backoff_lock(ch.backoff->mu);
    return now >= ch.backoff->retry_at;  // still backing off: keep failing fast
  });
  channels_after_sweep_ = channels_.size();
}

std::shared_ptr<ChannelBackoff> Client::backoff_for(const Endpoint& ep) {
  std::lock_guard lock(mu_);
  if (!channels_.contains(ep)) sweep_channels_locked();
  Channel& ch = channels_[ep];
  if (!ch.backoff) ch.backoff = std::make_shared<ChannelBackoff>();
  return ch.backoff;
}

Result<std::shared_ptr<ClientConnection>> Client::connection_for(const Endpoint& ep, std::optional<uint32_t> lane) {
  const size_t per = options_.connections_per_endpoint;
  const size_t here = io_.current_index();  // io_.size() outside the pool
  std::lock_guard lock(mu_);
  if (shut_) return error(Code::kDisconnected, "call to {}: the client is shut down", ep.to_string());
  if (!channels_.contains(ep)) sweep_channels_locked();
  Channel& ch = channels_[ep];
  if (ch.conns.empty()) {
    ch.conns.resize(per);
    ch.local.resize(io_.size() * per);
    if (!ch.backoff) ch.backoff = std::make_shared<ChannelBackoff>();
  }
  size_t k = lane ? *lane % per : ch.next++ % per;
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
  auto conn = connection_for(ep, options.lane);
  if (!conn) co_return std::unexpected(std::move(conn).error());
  if (options.cancel && options.cancel->cancelled()) co_return error(Code::kCancelled, "call cancelled");
  StartCall start{std::move(*conn), method, std::move(body), std::move(options)};
  co_return co_await asio::async_initiate<const asio::use_awaitable_t<>&, void(Result<RawResponse>)>(
      std::move(start), asio::use_awaitable);
}

namespace {

// The calling thread's blocking channels, most recently used last.
struct SyncSlot {
  const Client* owner;
  std::weak_ptr<int> alive;
  uint64_t generation;
  // Shared with a PendingCall: a slot dropped meanwhile leaves it its channel.
  std::shared_ptr<SyncChannel> channel;
};
thread_local std::vector<SyncSlot> t_sync_slots;

}  // namespace

Result<std::shared_ptr<SyncChannel>> Client::sync_channel_for(const Endpoint& ep) {
  WEFT_ASSERT_MSG(IoPool::current_context() == nullptr, "call_blocking on an I/O thread would stall its loop");
  if (shut_) return error(Code::kDisconnected, "call to {}: the client is shut down", ep.to_string());
  auto& slots = t_sync_slots;
  const uint64_t generation = generation_.load(std::memory_order_relaxed);
  auto it = std::find_if(slots.begin(), slots.end(), [&](const SyncSlot& s) {
    return s.owner == this && !s.alive.expired() && s.channel->endpoint() == ep;
  });
  if (it != slots.end() && (it->generation != generation || it->channel->broken())) {
    slots.erase(it);
    it = slots.end();
  }
  if (it == slots.end()) {
    std::erase_if(slots, [](const SyncSlot& s) { return s.alive.expired(); });
    auto backoff = backoff_for(ep);
    {
      std::lock_guard lock(backoff->mu);
      auto now = std::chrono::steady_clock::now();
      if (now < backoff->retry_at) {
        auto wait_ms = std::chrono::duration_cast<std::chrono::milliseconds>(backoff->retry_at - now).count();
        return error(Code::kUnavailable, "{} (next attempt in {} ms)", backoff->last_error.message(), wait_ms);
      }
    }
    auto channel = SyncChannel::open(ep, options_);
    if (!channel) {
      std::lock_guard lock(backoff->mu);
      backoff->backoff_ms = backoff->backoff_ms == 0 ? options_.backoff_min_ms
                                                     : std::min(backoff->backoff_ms * 2, options_.backoff_max_ms);
      backoff->retry_at = std::chrono::steady_clock::now() + std::chrono::milliseconds(backoff->backoff_ms);
      backoff->last_error = channel.error();
      return std::unexpected(std::move(channel).error());
    }
    {
      std::lock_guard lock(backoff->mu);
      backoff->backoff_ms = 0;
      backoff->retry_at = {};
    }
    if (slots.size() >= kSyncChannelsPerThreadMax) slots.erase(slots.begin());
    slots.push_back(SyncSlot{this, alive_, generation, std::move(*channel)});
    it = slots.end() - 1;
  } else if (it + 1 != slots.end()) {
    std::rotate(it, it + 1, slots.end());  // most recently used last
    it = slots.end() - 1;
  }
  return it->channel;
}

Result<RawResponse> Client::call_blocking(const Endpoint& ep, MethodId method, const std::string& body,
                                          std::span<std::byte> response_payload, uint32_t timeout_ms) {
  WEFT_TRY(std::shared_ptr<SyncChannel> channel, sync_channel_for(ep));
  return channel->call(method, body, response_payload, timeout_ms ? timeout_ms : options_.call_timeout_ms);
}

PendingCall::~PendingCall() {
  if (channel_) channel_->abandon();
}

PendingCall& PendingCall::operator=(PendingCall&& other) noexcept {
  if (this == &other) return *this;
  if (channel_) channel_->abandon();
  channel_ = std::move(other.channel_);
  ep_ = std::move(other.ep_);
  method_ = other.method_;
  request_id_ = other.request_id_;
  deadline_ = other.deadline_;
  return *this;
}

Result<PendingCall> Client::start_blocking(const Endpoint& ep, MethodId method, const std::string& body,
                                           uint32_t timeout_ms) {
  WEFT_TRY(std::shared_ptr<SyncChannel> channel, sync_channel_for(ep));
  WEFT_TRY(SyncChannel::Sent sent, channel->send(method, body, timeout_ms ? timeout_ms : options_.call_timeout_ms));
  PendingCall call;
  call.channel_ = std::move(channel);
  call.ep_ = ep;
  call.method_ = method;
  call.request_id_ = sent.request_id;
  call.deadline_ = sent.deadline;
  return call;
}

Result<RawResponse> Client::finish_blocking(PendingCall& call, std::span<std::byte> response_payload) {
  if (!call.channel_) return error(Code::kInternal, "no call to finish");
  auto channel = std::move(call.channel_);
  return channel->receive(SyncChannel::Sent{call.request_id_, call.deadline_}, response_payload);
}

}  // namespace weft::rpc
