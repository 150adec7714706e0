// rpc/service.h
// Typed registration of protobuf methods on a Server. The handler gets the
// parsed request and the ServerCall (payload in, payload out); a request
// that does not parse is answered with kProtocol without calling it.
#pragma once

#include <string>
#include <utility>

#include "rpc/server.h"

namespace weft::rpc {

// f: (const Req&, ServerCall&) -> Task<Result<Resp>>; runs on an I/O thread, must not block.
template <class Req, class Resp, class F>
void add_async_method(Server& server, MethodId id, std::string name, F f) {
  server.add_async(id, name, [f = std::move(f), name](ServerCall& call) -> Task<Status> {
    Req req;
    if (!req.ParseFromString(call.body)) co_return Status(Code::kProtocol, "cannot parse " + name + " request");
    Result<Resp> r = co_await f(req, call);
    if (!r) co_return r.error();
    r->SerializeToString(&call.response_body);
    co_return Status();
  });
}

// f: (const Req&, ServerCall&) -> Result<Resp>; runs on the bounded blocking pool.
template <class Req, class Resp, class F>
void add_blocking_method(Server& server, MethodId id, std::string name, F f) {
  server.add_blocking(id, name, [f = std::move(f), name](ServerCall& call) -> Status {
    Req req;
    if (!req.ParseFromString(call.body)) return Status(Code::kProtocol, "cannot parse " + name + " request");
    Result<Resp> r = f(req, call);
    if (!r) return r.error();
    r->SerializeToString(&call.response_body);
    return Status();
  });
}

}  // namespace weft::rpc
