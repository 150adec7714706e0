#include "client/cluster_config.h"

#include <cstdlib>
#include <filesystem>

#include "common/config.h"

namespace weft::client {

ClusterConfigQuery ClusterConfigQuery::from_flags(std::string config_path, std::string cluster) {
  ClusterConfigQuery q;
  q.config_path = std::move(config_path);
  q.cluster = std::move(cluster);
  const char* env = std::getenv(kClusterConfigEnv);
  if (env != nullptr) q.env_path = env;
  return q;
}

ConfigLocation locate_cluster_config(const ClusterConfigQuery& q) {
  if (!q.config_path.empty()) return {q.config_path, "--config"};
  if (!q.env_path.empty()) return {q.env_path, std::string("$") + kClusterConfigEnv};
  return {q.default_path, "default"};
}

namespace {

// A client config is small and read whole: a key it does not know (a
// misspelt tcp_* setting, a server's section) is an error, not ignored.
Result<void> no_unknown_keys(const Config& c) {
  auto unread = c.unread_keys();
  if (unread.empty()) return {};
  return error(Code::kConfig,
               "{}: key '{}' is not a client setting (mgmtd, cluster_token, meta, tcp_keepalive_idle_s, "
               "tcp_keepalive_interval_s, tcp_keepalive_count, tcp_user_timeout_ms)",
               c.source(), unread.front());
}

Result<ClusterConfig> from_config(const Config& c) {
  ClusterConfig out;
  out.source = c.source();
  if (!c.has("mgmtd")) return error(Code::kConfig, "{}: key 'mgmtd' is missing (a list of host:port)", c.source());
  WEFT_TRY(std::vector<std::string> addresses, c.get_strings("mgmtd"));
  if (addresses.empty()) return error(Code::kConfig, "{}: key 'mgmtd' lists no address", c.source());
  for (const std::string& a : addresses) {
    auto ep = rpc::Endpoint::parse(a);
    if (!ep) return error(Code::kConfig, "{}: key 'mgmtd': {}", c.source(), ep.error().message());
    out.mgmtd.push_back(*ep);
  }
  if (!c.has("cluster_token")) return error(Code::kConfig, "{}: key 'cluster_token' is missing", c.source());
  WEFT_TRY(out.cluster_token, c.get_string("cluster_token"));
  if (out.cluster_token.empty()) return error(Code::kConfig, "{}: key 'cluster_token' must not be empty", c.source());
  WEFT_TRY(std::vector<std::string> meta, c.get_strings("meta"));
  for (const std::string& a : meta) {
    auto ep = rpc::Endpoint::parse(a);
    if (!ep) return error(Code::kConfig, "{}: key 'meta': {}", c.source(), ep.error().message());
    out.meta.push_back(*ep);
  }
  WEFT_TRY(out.tcp, rpc::tcp_liveness_from(c));
  WEFT_TRY(out.local_socket, c.get_bool("local_socket", true));
  WEFT_RETURN_IF_ERROR(no_unknown_keys(c));
  return out;
}

}  // namespace

Result<ClusterConfig> parse_cluster_config(const std::string& text, const std::string& source) {
  WEFT_TRY(Config c, Config::parse(text, source));
  return from_config(c);
}

Result<ClusterConfig> load_cluster_config(const ClusterConfigQuery& query) {
  ConfigLocation where = locate_cluster_config(query);
  std::error_code ec;
  const auto status = std::filesystem::status(where.path, ec);
  if (status.type() == std::filesystem::file_type::not_found)
    return error(Code::kConfig,
                 "no cluster config at {} (from {}); pass --config FILE, set ${} or run from the directory "
                 "holding weft-data/client.toml{}",
                 where.path, where.origin, kClusterConfigEnv,
                 query.cluster.empty() ? "" : " (--cluster names the address; the token comes from the file)");
  if (ec) return error(Code::kConfig, "cluster config {} (from {}): {}", where.path, where.origin, ec.message());
  if (std::filesystem::is_directory(status))
    return error(Code::kConfig, "cluster config {} (from {}) is a directory", where.path, where.origin);
  WEFT_TRY(Config c, Config::load_file(where.path));
  if (!query.cluster.empty()) {
    auto ep = rpc::Endpoint::parse(query.cluster);
    if (!ep) return error(Code::kConfig, "--cluster {}: {}", query.cluster, ep.error().message());
    // The address list is replaced; the token still comes from the file.
    if (!c.has("cluster_token")) return error(Code::kConfig, "{}: key 'cluster_token' is missing", c.source());
    WEFT_TRY(std::string token, c.get_string("cluster_token"));
    if (token.empty()) return error(Code::kConfig, "{}: key 'cluster_token' must not be empty", c.source());
    WEFT_TRY(rpc::TcpLiveness tcp, rpc::tcp_liveness_from(c));
    WEFT_TRY(bool local_socket, c.get_bool("local_socket", true));
    (void)c.has("mgmtd");  // replaced by --cluster, and `meta` unused with it: both known keys
    (void)c.has("meta");
    WEFT_RETURN_IF_ERROR(no_unknown_keys(c));
    return ClusterConfig{
        .mgmtd = {*ep}, .cluster_token = token, .tcp = tcp, .local_socket = local_socket, .source = c.source()};
  }
  return from_config(c);
}

Result<void> check_tcp_user_timeout(const ClusterConfig& config, uint32_t call_timeout_ms) {
  const uint32_t user_timeout_ms = config.tcp.user_timeout_ms;
  if (user_timeout_ms == 0 || user_timeout_ms > call_timeout_ms) return {};
  return error(Code::kConfig,
               "{}: key 'tcp_user_timeout_ms' ({}) must be above the client's call timeout ({} ms) or 0, else the "
               "kernel cuts a connection to a server slow to take a request before the call times out",
               config.source, user_timeout_ms, call_timeout_ms);
}

}  // namespace weft::client
