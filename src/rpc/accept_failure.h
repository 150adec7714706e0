// rpc/accept_failure.h (internal to rpc)
// What an accept loop does when accept() fails: out of descriptors or memory
// (EMFILE, ENFILE, ENOBUFS, ENOMEM), the next accept fails the same way at
// once, so without a pause the loop spins at full CPU, logging each failure.
#pragma once

#include <string_view>

#include <asio/any_io_executor.hpp>

#include "common/log_throttle.h"
#include "common/metrics.h"
#include "rpc/task.h"

namespace weft::rpc {

// Counts the failure, logs it (at most once a second through `log`, naming
// `who`) and waits kAcceptRetryDelay on the acceptor's executor `executor`.
Task<void> pause_after_accept_failure(const asio::any_io_executor& executor, const asio::error_code& ec,
                                      metrics::Counter& errors, LogThrottle& log, std::string_view who);

}  // namespace weft::rpc
