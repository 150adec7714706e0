// `weft serve <role> --config FILE`: one server process per invocation.
#include <arpa/inet.h>

#include <array>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <limits>
#include <string_view>

#include "cli/commands.h"
#include "common/config.h"
#include "common/logging.h"
#include "mgmt/routing.h"
#include "rpc/service_runtime.h"

namespace weft::cli {
namespace {

// Loads the config and the [server] section shared by every role.
Result<rpc::ServiceConfig> load_service_config(const std::string& path, const std::string& role) {
  WEFT_TRY(Config config, Config::load_file(path));
  return rpc::ServiceConfig::from(config, role);
}

// `weft serve echo`: a server with only the diagnostic echo service. Useful
// to check tokens, ports and metrics scraping on a new machine.
void serve_echo(const std::string& config_path, pid_t owner_pid) {
  auto sc = load_service_config(config_path, "echo");
  if (!sc) return fail(sc.error().message());
  rpc::ServiceRuntime runtime(*sc);
  if (auto r = runtime.init(); !r) return fail(r.error().message());
  auto owner = watch_server_owner(owner_pid, runtime);
  if (!owner) return fail(owner_pid_error(owner.error()));
  if (auto r = runtime.run(); !r) return fail(r.error().message());
}

// How long a server whose owner exited serves on: the mount and the clients
// the same owner started stop at the same moment and flush through the
// servers (a mount whose cluster went first waits out its client's retries,
// close to a minute, before it can unmount).
constexpr std::chrono::seconds kOwnerGoneGrace{5};

}  // namespace

void add_owner_pid_option(CLI::App& cmd, pid_t& pid) {
  // $WEFT_OWNER_PID is read by owner_pid_or_env, not CLI11's envname: CLI11
  // 2.1 checks an option's variable for every subcommand, used or not (a
  // bad value failed `weft down` and `weft --help`), and later versions drop
  // a bad value without a word.
  cmd.add_option("--owner-pid", pid,
                 "stop as on SIGTERM when process PID exits (a server 5 s later); a PID that is gone already is "
                 "an error (default: $WEFT_OWNER_PID; unset, empty or 0: none)")
      ->check(CLI::Range(1, std::numeric_limits<pid_t>::max()));
}

Result<pid_t> owner_pid_or_env(pid_t flag) {
  if (flag != 0) return flag;
  const char* env = std::getenv("WEFT_OWNER_PID");
  const std::string_view text = env ? env : "";
  if (text.empty() || text == "0") return 0;
  int64_t pid = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), pid);
  if (ec != std::errc() || end != text.data() + text.size() || pid < 1 || pid > std::numeric_limits<pid_t>::max())
    return error(Code::kInvalidArgument, "$WEFT_OWNER_PID '{}' is not a process id (unset, empty or 0: no owner)",
                 text.substr(0, 64));
  return static_cast<pid_t>(pid);
}

Result<OwnerWatch> watch_server_owner(pid_t flag, rpc::ServiceRuntime& runtime) {
  WEFT_TRY(pid_t pid, owner_pid_or_env(flag));
  if (pid == 0) return OwnerWatch();
  const std::string name = runtime.config().name;
  auto stop = [&runtime, name, pid] {
    WEFT_LOG_INFO("{}: its owner, process {}, exited {} s ago (--owner-pid): stopping", name, pid,
                  kOwnerGoneGrace.count());
    runtime.request_stop();
  };
  WEFT_TRY(OwnerWatch watch, watch_owner(pid, std::move(stop), kOwnerGoneGrace));
  WEFT_LOG_INFO("{}: stops {} s after its owner, process {}, exits (--owner-pid / WEFT_OWNER_PID)", name,
                kOwnerGoneGrace.count(), pid);
  return watch;
}

void warn_unread_keys(const Config& config) {
  for (const std::string& key : config.unread_keys())
    WEFT_LOG_WARN("{}: key '{}' is not a setting of this server (ignored): misspelt, in the wrong section, or not used in this mode?",
                  config.source(), key);
}

Result<void> check_config_role(const Config& config, const std::string& role) {
  // mgmtd has a default for every setting: given a meta or storage server's
  // file it once started, with a data_dir under the working directory. A
  // file with a section of the role's own is its file: another role's
  // section there is a misplaced setting, named by warn_unread_keys.
  static constexpr std::array<std::pair<const char*, const char*>, 4> kSections = {
      {{"mgmtd", "mgmtd"}, {"meta", "meta"}, {"storage", "storage"}, {"targets", "storage"}}};
  for (const auto& [section, owner] : kSections)
    if (owner == role && config.has(section)) return {};
  for (const auto& [section, owner] : kSections)
    if (owner != role && config.has(section))
      return error(Code::kConfig, "{}: [{}] is a setting of a {} server, not of {}: is this the {} server's config?",
                   config.source(), section, owner, role, role);
  return {};
}

Result<void> check_advertised_address(const std::string& address, const std::string& source) {
  // mgmtd refuses to register an address it could not hand out: a server
  // advertising one would retry for ever.
  if (auto valid = mgmt::check_address(address); !valid)
    return error(Code::kConfig, "{}: key 'cluster.advertise': {}", source, valid.error().message());
  WEFT_TRY(rpc::Endpoint ep, rpc::Endpoint::parse(address));
  std::array<unsigned char, 16> bytes{};
  bool ip = ::inet_pton(AF_INET, ep.host.c_str(), bytes.data()) == 1 ||
            ::inet_pton(AF_INET6, ep.host.c_str(), bytes.data()) == 1;
  bool wildcard = ip && bytes == std::array<unsigned char, 16>{};
  if (wildcard)
    return error(Code::kConfig,
                 "{}: this server would advertise {} to its peers; set [cluster] advertise = \"<reachable host>:{}\"",
                 source, address, ep.port);
  return {};
}

void add_serve_commands(CLI::App& /*app*/, CLI::App& serve) {
  static std::string config_path;
  static pid_t owner_pid = 0;
  auto* echo = serve.add_subcommand("echo", "Diagnostic server answering only the echo service");
  echo->add_option("--config", config_path, "TOML config file")->required();
  add_owner_pid_option(*echo, owner_pid);
  echo->callback([] { serve_echo(config_path, owner_pid); });
}

}  // namespace weft::cli
