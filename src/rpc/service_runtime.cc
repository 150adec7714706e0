#include "rpc/service_runtime.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <thread>
#include <cstdlib>
#include <chrono>

#include "common/durable_file.h"
#include "common/fault.h"
#include "common/logging.h"
#include "rpc/echo_service.h"

namespace weft::rpc {
namespace {

int g_signal_fd = -1;  // write end of the running runtime's stop pipe

// SIGHUP asks for the log to be reopened ('h'); the others stop ('s').
void on_signal(int sig) {
  if (g_signal_fd >= 0) {
    char c = sig == SIGHUP ? 'h' : 's';
    [[maybe_unused]] ssize_t n = ::write(g_signal_fd, &c, 1);
  }
}

bool ip_literal(const std::string& host) {
  unsigned char bytes[16];
  return ::inet_pton(AF_INET, host.c_str(), bytes) == 1 || ::inet_pton(AF_INET6, host.c_str(), bytes) == 1;
}

}  // namespace

Result<ServiceConfig> ServiceConfig::from(const Config& config, const std::string& default_name) {
  ServiceConfig c;
  c.source = config.source();
  WEFT_TRY(Config s, config.table("server"));
  WEFT_TRY(std::string listen, s.get_string("listen", "127.0.0.1:0"));
  auto ep = Endpoint::parse(listen);
  if (!ep) return error(Code::kConfig, "{}: key 'server.listen': {}", config.source(), ep.error().message());
  // Checked here, not when listening, so that the message names the file and the key.
  if (!ip_literal(ep->host))
    return error(Code::kConfig, "{}: key 'server.listen': '{}' is not an IP address (a server listens on an IP: "
                 "\"10.0.0.1:7000\", \"[fd00::1]:7000\")", config.source(), ep->host);
  c.listen = *ep;
  WEFT_TRY(c.metrics_listen, s.get_string("metrics_listen", c.metrics_listen));
  if (!c.metrics_listen.empty()) {
    auto m = Endpoint::parse(c.metrics_listen);
    if (!m) return error(Code::kConfig, "{}: key 'server.metrics_listen': {}", config.source(), m.error().message());
    if (!ip_literal(m->host))
      return error(Code::kConfig, "{}: key 'server.metrics_listen': '{}' is not an IP address", config.source(),
                   m->host);
  }
  WEFT_TRY(c.cluster_token, s.get_string("cluster_token"));
  if (c.cluster_token.empty())
    return error(Code::kConfig, "{}: key 'server.cluster_token' must not be empty", config.source());
  WEFT_TRY(c.name, s.get_string("name", default_name));
  WEFT_TRY(int64_t io_threads, s.get_int_in("io_threads", 2, 1, 64));
  WEFT_TRY(int64_t blocking_threads, s.get_int_in("blocking_threads", 4, 1, 256));
  c.io_threads = static_cast<size_t>(io_threads);
  c.blocking_threads = static_cast<size_t>(blocking_threads);
  WEFT_TRY(int64_t stall_ms, s.get_int_in("write_stall_timeout_ms", c.write_stall_timeout_ms, 1000, 3600000));
  c.write_stall_timeout_ms = static_cast<uint32_t>(stall_ms);
  WEFT_TRY(int64_t hello_ms, s.get_int_off_or_in("hello_timeout_ms", c.hello_timeout_ms, 1000, 3600000));
  c.hello_timeout_ms = static_cast<uint32_t>(hello_ms);
  WEFT_TRY(int64_t read_stall_ms, s.get_int_off_or_in("read_stall_timeout_ms", c.read_stall_timeout_ms, 1000, 3600000));
  c.read_stall_timeout_ms = static_cast<uint32_t>(read_stall_ms);
  WEFT_TRY(c.tcp, tcp_liveness_from(s));
  WEFT_TRY(c.local_socket, s.get_bool("local_socket", c.local_socket));
  // The kernel would end a peer that stopped reading at the user timeout,
  // without the write-stall warning and metric: keep the stall check first.
  if (c.tcp.user_timeout_ms != 0 && c.write_stall_timeout_ms >= c.tcp.user_timeout_ms)
    return error(Code::kConfig,
                 "{}: key 'server.write_stall_timeout_ms' ({}) must be below 'server.tcp_user_timeout_ms' ({}), "
                 "or the kernel cuts a peer that stopped reading before the stall check sees it",
                 config.source(), c.write_stall_timeout_ms, c.tcp.user_timeout_ms);
  WEFT_TRY(c.log_level, s.get_string("log_level", "info"));
  // Checked here, not when the log starts, so that the message names the file and the key
  // (spdlog maps names it does not know to "off").
  if (spdlog::level::from_str(c.log_level) == spdlog::level::off && c.log_level != "off")
    return error(Code::kConfig, "{}: key 'server.log_level': unknown level '{}' (expected trace, debug, info, warn, "
                 "error, critical or off)", config.source(), c.log_level);
  WEFT_TRY(c.log_file, s.get_string("log_file", ""));
  WEFT_TRY(c.port_file, s.get_string("port_file", ""));
  return c;
}

ClientOptions ServiceConfig::client_options(std::string client_name) const {
  ClientOptions o = ClientOptions::in_cluster(cluster_token, std::move(client_name));
  o.tcp = tcp;
  o.local_socket = local_socket;
  return o;
}

Result<uint64_t> raise_open_files_limit() {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return errno_error(errno, "getrlimit(RLIMIT_NOFILE)");
  if (rl.rlim_cur == rl.rlim_max) return static_cast<uint64_t>(rl.rlim_cur);
  rlim_t was = rl.rlim_cur;
  rl.rlim_cur = rl.rlim_max;
  if (::setrlimit(RLIMIT_NOFILE, &rl) != 0)
    return errno_error(errno, fmt::format("setrlimit(RLIMIT_NOFILE) from {} to {}", was, rl.rlim_max));
  return static_cast<uint64_t>(rl.rlim_cur);
}

ServiceRuntime::ServiceRuntime(ServiceConfig config) : config_(std::move(config)) {}

ServiceRuntime::~ServiceRuntime() {
  if (g_signal_fd == stop_pipe_[1]) g_signal_fd = -1;
  metrics_.reset();
  server_.reset();
  io_.reset();
  for (int fd : stop_pipe_)
    if (fd >= 0) ::close(fd);
}

Result<void> ServiceRuntime::init() {
  if (auto logging = log_init({config_.log_level, config_.log_file, config_.name}); !logging)
    return error(config_.log_file.empty() ? logging.error() : in_config(logging.error(), "log_file"));
  std::string fault_error = fault::load_from_env();
  if (!fault_error.empty()) return error(Code::kConfig, "{}", fault_error);
  if (auto limit = raise_open_files_limit(); !limit)
    WEFT_LOG_WARN("{}: open descriptors stay limited: {}", config_.name, limit.error().message());
  if (::pipe2(stop_pipe_, O_CLOEXEC) != 0) return errno_error(errno, "pipe");
  io_ = std::make_unique<IoPool>(config_.io_threads, config_.name.substr(0, 8));
  ServerOptions so;
  so.cluster_token = config_.cluster_token;
  so.name = config_.name;
  so.blocking_threads = config_.blocking_threads;
  so.write_stall_timeout_ms = config_.write_stall_timeout_ms;
  so.hello_timeout_ms = config_.hello_timeout_ms;
  so.read_stall_timeout_ms = config_.read_stall_timeout_ms;
  so.tcp = config_.tcp;
  so.local_socket = config_.local_socket;
  server_ = std::make_unique<Server>(*io_, so);
  register_echo_service(*server_);  // lets any tool probe any server
  return {};
}

void ServiceRuntime::drain_or_exit(std::chrono::seconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (server_->active_calls() > 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (size_t left = server_->active_calls(); left > 0) {
    WEFT_LOG_ERROR("{}: {} request handler(s) still running {} s after the stop; exiting without releasing "
                   "their state",
                   config_.name, left, limit.count());
    spdlog::default_logger()->flush();
    std::_Exit(1);
  }
}

// "storage.toml: key 'server.listen': <why>": a setting that parsed but
// failed when used (a port in use, a log file that is a directory) names
// where it was set. No source (a config built in code): the error as is.
Status ServiceRuntime::in_config(const Status& s, std::string_view key) const {
  if (config_.source.empty()) return s;
  return s.with_context(fmt::format("{}: key 'server.{}'", config_.source, key));
}

void ServiceRuntime::request_stop() {
  char c = 's';
  [[maybe_unused]] ssize_t n = ::write(stop_pipe_[1], &c, 1);
}

Result<void> ServiceRuntime::run(std::function<void()> on_listening, std::function<void()> on_stopping) {
  // Before anything says the server is up (the port file, on_listening): a
  // stop signal sent as soon as it is must go through the stop pipe, not
  // take its default action.
  g_signal_fd = stop_pipe_[1];
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGHUP, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  auto rpc_port = server_->listen(config_.listen.host, config_.listen.port);
  if (!rpc_port) return error(in_config(rpc_port.error(), "listen"));
  rpc_port_ = *rpc_port;
  if (!config_.metrics_listen.empty()) {
    auto m = Endpoint::parse(config_.metrics_listen);
    metrics_ = std::make_unique<MetricsServer>(*io_);
    auto metrics_port = metrics_->listen(m->host, m->port);
    if (!metrics_port) return error(in_config(metrics_port.error(), "metrics_listen"));
    metrics_port_ = *metrics_port;
  }
  if (!config_.port_file.empty()) {
    // Whole or absent (a reader polls for it), and a write error (full disk) is reported.
    if (auto r = replace_file_durably(config_.port_file, fmt::format("{} {}\n", rpc_port_, metrics_port_)); !r)
      return error(in_config(r.error(), "port_file"));
  }
  WEFT_LOG_INFO("{} serving on {}:{} (metrics on port {})", config_.name, config_.listen.host, rpc_port_,
                metrics_port_);
  if (on_listening) on_listening();
  for (;;) {
    char c;
    ssize_t n = ::read(stop_pipe_[0], &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n != 1 || c != 'h') break;
    if (auto reopened = log_reopen(); !reopened)
      WEFT_LOG_ERROR("{}: SIGHUP: the log stays where it was: {}", config_.name, reopened.error().message());
    else
      WEFT_LOG_INFO("{}: log reopened (SIGHUP)", config_.name);
  }
  WEFT_LOG_INFO("{} stopping", config_.name);
  if (on_stopping) on_stopping();
  if (metrics_) metrics_->stop();
  server_->stop();
  spdlog::default_logger()->flush();
  return {};
}

}  // namespace weft::rpc
