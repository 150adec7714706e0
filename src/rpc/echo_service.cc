#include "rpc/echo_service.h"

#include <cstring>
#include <thread>

#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>

#include "common/crc32c.h"
#include "proto/rpc.pb.h"
#include "rpc/service.h"

namespace weft::rpc {
namespace {

// Fills the reply payload: the request's own bytes, or `n` bytes of a pattern.
void fill_reply(const proto::EchoRequest& req, ServerCall& call) {
  if (req.discard_payload()) return;
  if (req.reply_payload_bytes() == 0) {
    if (call.payload.size() > 0) {
      auto payload = std::make_shared<Buffer>(std::move(call.payload));
      call.response_payload.push_back(payload->span());
      call.response_keepalive = payload;
    }
    return;
  }
  auto out = std::make_shared<Buffer>(Buffer::allocate(req.reply_payload_bytes()));
  for (size_t i = 0; i < out->size(); ++i) out->data()[i] = static_cast<std::byte>(i * 31 + 7);
  call.response_payload.push_back(out->span());
  call.response_keepalive = out;
}

Result<proto::EchoReply> answer(const proto::EchoRequest& req, ServerCall& call) {
  if (req.fail()) return error(Code::kNotFound, "echo asked to fail: {}", req.data());
  proto::EchoReply reply;
  reply.set_data(req.data());
  if (!req.discard_payload()) reply.set_payload_crc32c(crc32c(call.payload.span()));
  fill_reply(req, call);
  return reply;
}

}  // namespace

void register_echo_service(Server& server) {
  add_async_method<proto::EchoRequest, proto::EchoReply>(
      server, kEcho, "test.echo",
      [](const proto::EchoRequest& req, ServerCall& call) -> Task<Result<proto::EchoReply>> {
        if (req.sleep_ms() > 0) {
          asio::steady_timer t(co_await asio::this_coro::executor, std::chrono::milliseconds(req.sleep_ms()));
          co_await t.async_wait(use_nothrow);
        }
        co_return answer(req, call);
      });
  add_blocking_method<proto::EchoRequest, proto::EchoReply>(
      server, kEchoBlocking, "test.echo_blocking", [](const proto::EchoRequest& req, ServerCall& call) {
        if (req.sleep_ms() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(req.sleep_ms()));
        return answer(req, call);
      });
}

}  // namespace weft::rpc
