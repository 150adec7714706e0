#include "common/logging.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>

namespace weft {

Result<void> log_set_level(const std::string& level) {
  auto parsed = spdlog::level::from_str(level);
  // from_str maps unknown names to "off"; only accept "off" when asked for.
  if (parsed == spdlog::level::off && level != "off")
    return error(Code::kConfig, "unknown log level '{}' (expected trace, debug, info, warn, error, critical or off)", level);
  spdlog::set_level(parsed);
  return {};
}

Result<void> log_init(const LogOptions& options) {
  std::shared_ptr<spdlog::logger> logger;
  try {
    if (options.file.empty()) {
      logger = spdlog::stderr_color_mt(options.name + "-" + std::to_string(reinterpret_cast<uintptr_t>(&options)));
    } else {
      logger = spdlog::basic_logger_mt(options.name + "-" + std::to_string(reinterpret_cast<uintptr_t>(&options)), options.file);
    }
  } catch (const spdlog::spdlog_ex& e) {
    return error(Code::kConfig, "cannot open log {}: {}", options.file, e.what());
  }
  logger->set_pattern("%Y-%m-%d %H:%M:%S.%e %^%L%$ [" + options.name + " %t] %v");
  logger->flush_on(spdlog::level::warn);
  spdlog::set_default_logger(logger);
  spdlog::flush_every(std::chrono::seconds(1));
  return log_set_level(options.level);
}

}  // namespace weft
