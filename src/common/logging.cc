#include "common/logging.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <mutex>

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/dist_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>

namespace weft {
namespace {

// The log file of this process, behind a sink whose file can be swapped
// while other threads log (dist_sink locks around both).
struct LogFile {
  std::mutex mu;
  std::string path;
  std::shared_ptr<spdlog::sinks::dist_sink_mt> sink;
  // Descriptors (1, 2) that wrote to the same file when it was opened: a
  // server started by `weft up` has its stdout and stderr appended there.
  std::vector<int> std_fds;
};

LogFile& log_file() {
  static LogFile f;
  return f;
}

bool same_file(int fd, const std::string& path) {
  struct stat a {}, b {};
  return ::fstat(fd, &a) == 0 && ::stat(path.c_str(), &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

Result<std::shared_ptr<spdlog::sinks::sink>> open_file_sink(const std::string& path) {
  try {
    return std::make_shared<spdlog::sinks::basic_file_sink_mt>(path);
  } catch (const spdlog::spdlog_ex& e) {
    return error(Code::kConfig, "cannot open log {}: {}", path, e.what());
  }
}

}  // namespace

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
  const std::string name = options.name + "-" + std::to_string(reinterpret_cast<uintptr_t>(&options));
  if (options.file.empty()) {
    logger = spdlog::stderr_color_mt(name);
  } else {
    WEFT_TRY(auto file, open_file_sink(options.file));
    LogFile& f = log_file();
    std::lock_guard lock(f.mu);
    f.path = options.file;
    f.sink = std::make_shared<spdlog::sinks::dist_sink_mt>(std::vector<spdlog::sink_ptr>{file});
    f.std_fds.clear();
    for (int fd : {STDOUT_FILENO, STDERR_FILENO})
      if (same_file(fd, f.path)) f.std_fds.push_back(fd);
    logger = std::make_shared<spdlog::logger>(name, f.sink);
  }
  logger->set_pattern("%Y-%m-%d %H:%M:%S.%e %^%L%$ [" + options.name + " %t] %v");
  logger->flush_on(spdlog::level::warn);
  spdlog::set_default_logger(logger);
  spdlog::flush_every(std::chrono::seconds(1));
  return log_set_level(options.level);
}

Result<void> log_reopen() {
  LogFile& f = log_file();
  std::lock_guard lock(f.mu);
  if (!f.sink) return {};  // logging to stderr: nothing of ours to reopen
  WEFT_TRY(auto file, open_file_sink(f.path));
  spdlog::default_logger()->flush();
  f.sink->set_sinks({file});
  if (f.std_fds.empty()) return {};
  int fd = ::open(f.path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return errno_error(errno, fmt::format("reopen {} for stdout/stderr", f.path));
  for (int std_fd : f.std_fds) ::dup2(fd, std_fd);  // dup2 clears O_CLOEXEC on the copy
  ::close(fd);
  return {};
}

}  // namespace weft
