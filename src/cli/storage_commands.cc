// Commands of the storage module: `weft serve storage --config FILE`.
#include "cli/commands.h"
#include "common/assert.h"
#include "common/config.h"
#include "common/logging.h"
#include "rpc/service_runtime.h"
#include "storage/mgmt_link.h"
#include "storage/routing_provider.h"
#include "storage/storage_server.h"

namespace weft::cli {
namespace {

// Registers with mgmtd (which assigns the target ids) when [cluster] is set.
Result<std::unique_ptr<storage::MgmtLink>> join_cluster(rpc::ServiceRuntime& runtime,
                                                         storage::StorageConfig& config) {
  const rpc::ServiceConfig& sc = runtime.config();
  if (sc.listen.port == 0)
    return error(Code::kConfig, "[server] listen needs a fixed port when [cluster] is set (it is the server's identity)");
  storage::MgmtLinkOptions o;
  for (const auto& a : config.mgmtd) {
    WEFT_TRY(rpc::Endpoint ep, rpc::Endpoint::parse(a));
    o.mgmtd.push_back(ep);
  }
  o.rpc = sc.client_options("storage-mgmt");
  o.address = config.advertise.empty() ? sc.listen.to_string() : config.advertise;
  WEFT_RETURN_IF_ERROR(check_advertised_address(o.address, "storage server"));
  for (const auto& t : config.targets) o.targets.push_back({t.path, t.capacity_bytes});
  WEFT_TRY(auto link, storage::MgmtLink::connect(runtime.io(), std::move(o)));
  std::vector<mgmt::TargetId> ids = link->target_ids();
  for (size_t i = 0; i < config.targets.size(); ++i) config.targets[i].id = ids.at(i);
  return link;
}

void serve_storage(const std::string& config_path) {
  auto config = Config::load_file(config_path);
  if (!config) return fail(config.error().message());
  auto sc = rpc::ServiceConfig::from(*config, "storage");
  if (!sc) return fail(sc.error().message());
  auto storage_config = storage::StorageConfig::from(*config, *sc);
  if (!storage_config) return fail(storage_config.error().message());
  rpc::ServiceRuntime runtime(*sc);
  if (auto r = runtime.init(); !r) return fail(r.error().message());
  std::unique_ptr<storage::MgmtLink> link;
  if (!storage_config->mgmtd.empty()) {
    auto joined = join_cluster(runtime, *storage_config);
    if (!joined) return fail(joined.error().message());
    link = std::move(*joined);
  }
  std::function<bool()> fence;
  if (link) fence = [l = link.get()] { return l->can_serve_writes(); };
  auto service =
      storage::open_storage_service(runtime.io(), *storage_config, *sc, metrics::Registry::global(), std::move(fence));
  if (!service) return fail(service.error().message());
  (*service)->register_methods(runtime.server());
  if (link) {
    auto* routing = dynamic_cast<storage::StaticRoutingProvider*>(&(*service)->routing());
    WEFT_ASSERT(routing != nullptr);
    link->attach(**service, *routing);
  }
  warn_unread_keys(*config);
  WEFT_LOG_INFO("{}: serving {} targets{}", sc->name, storage_config->targets.size(),
                link ? " (member of a cluster run by mgmtd)" : "");
  auto r = runtime.run();
  if (link) link->stop();
  (*service)->stop();
  if (!r) return fail(r.error().message());
}

}  // namespace

void add_storage_commands(CLI::App& /*app*/, CLI::App& serve) {
  static std::string config_path;
  auto* storage = serve.add_subcommand("storage", "Storage server: chunk targets with chain replication");
  storage->add_option("--config", config_path, "TOML config file")->required();
  storage->callback([] { serve_storage(config_path); });
}

}  // namespace weft::cli
