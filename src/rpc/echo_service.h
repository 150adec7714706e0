// rpc/echo_service.h
// The test service (service 15): Echo answers with the request's data and
// payload (or a payload of a requested size), optionally after a delay or
// with an error. Used by RPC tests and benchmarks; `weft serve` processes
// register it too, so `weft` tools can probe any server.
#pragma once

#include "rpc/server.h"

namespace weft::rpc {

void register_echo_service(Server& server);

}  // namespace weft::rpc
