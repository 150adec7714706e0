// Commands of the storage module: `weft serve storage --config FILE`.
#include "cli/commands.h"
#include "common/config.h"
#include "common/logging.h"
#include "rpc/service_runtime.h"
#include "storage/storage_server.h"

namespace weft::cli {
namespace {

void serve_storage(const std::string& config_path) {
  auto config = Config::load_file(config_path);
  if (!config) return fail(config.error().message());
  auto sc = rpc::ServiceConfig::from(*config, "storage");
  if (!sc) return fail(sc.error().message());
  auto storage_config = storage::StorageConfig::from(*config);
  if (!storage_config) return fail(storage_config.error().message());
  rpc::ServiceRuntime runtime(*sc);
  if (auto r = runtime.init(); !r) return fail(r.error().message());
  auto service = storage::open_storage_service(runtime.io(), *storage_config, sc->name, sc->cluster_token);
  if (!service) return fail(service.error().message());
  (*service)->register_methods(runtime.server());
  WEFT_LOG_INFO("{}: serving {} targets", sc->name, storage_config->targets.size());
  auto r = runtime.run();
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
