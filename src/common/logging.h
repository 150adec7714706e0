// common/logging.h
// Logging through spdlog. Call log_init once per process; afterwards use
// WEFT_LOG_INFO("...{}", x) etc. (fmt syntax). Thread-safe.
#pragma once

#include <string>

#include <spdlog/spdlog.h>

#include "common/status.h"

namespace weft {

struct LogOptions {
  std::string level = "info";  // trace, debug, info, warn, error, critical, off
  std::string file;            // empty: stderr
  std::string name = "weft";   // shows which role wrote a line
};

Result<void> log_init(const LogOptions& options);
// Opens the log file again by its path (after logrotate moved it away), and
// points stdout and stderr there too if they wrote to it. A process logging to
// stderr has nothing to reopen.
Result<void> log_reopen();
Result<void> log_set_level(const std::string& level);

}  // namespace weft

#define WEFT_LOG_TRACE(...) SPDLOG_TRACE(__VA_ARGS__)
#define WEFT_LOG_DEBUG(...) spdlog::debug(__VA_ARGS__)
#define WEFT_LOG_INFO(...) spdlog::info(__VA_ARGS__)
#define WEFT_LOG_WARN(...) spdlog::warn(__VA_ARGS__)
#define WEFT_LOG_ERROR(...) spdlog::error(__VA_ARGS__)
