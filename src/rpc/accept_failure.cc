#include "rpc/accept_failure.h"

#include <chrono>

#include <asio/steady_timer.hpp>

#include "common/logging.h"

namespace weft::rpc {

namespace {
constexpr auto kAcceptRetryDelay = std::chrono::milliseconds(100);
}  // namespace

Task<void> pause_after_accept_failure(const asio::any_io_executor& executor, const asio::error_code& ec,
                                      metrics::Counter& errors, LogThrottle& log, std::string_view who) {
  errors.inc();
  if (auto held = log.admit())
    WEFT_LOG_WARN("{}: accept failed: {} (accepting again in {} ms){}", who, ec.message(), kAcceptRetryDelay.count(),
                  LogThrottle::held_back(*held));
  asio::steady_timer pause(executor, kAcceptRetryDelay);
  co_await pause.async_wait(use_nothrow);
}

}  // namespace weft::rpc
