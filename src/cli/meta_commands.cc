// Commands of the meta module: `weft serve meta --config FILE` runs the
// metadata service (meta/service.h) on a RocksDB store in [meta] data_dir.
#include <filesystem>

#include "cli/commands.h"
#include "common/config.h"
#include "meta/meta_store.h"
#include "meta/service.h"
#include "rpc/service_runtime.h"

namespace weft::cli {
namespace {

void serve_meta(const std::string& config_path) {
  auto config = Config::load_file(config_path);
  if (!config) return fail(config.error().message());
  auto sc = rpc::ServiceConfig::from(*config, "meta");
  if (!sc) return fail(sc.error().message());
  auto mc = meta::MetaServiceConfig::from(*config);
  if (!mc) return fail(mc.error().message());
  // Store calls block on WAL fsyncs: more threads let concurrent commits share one.
  if (!config->has("server.blocking_threads")) sc->blocking_threads = 16;
  rpc::ServiceRuntime runtime(*sc);
  if (auto r = runtime.init(); !r) return fail(r.error().message());
  std::error_code ec;
  std::filesystem::create_directories(mc->data_dir, ec);
  if (ec) return fail("cannot create meta.data_dir " + mc->data_dir + ": " + ec.message());
  auto store = meta::MetaStore::open(mc->store_options());
  if (!store) return fail("cannot open the metadata store in " + mc->data_dir + ": " + store.error().message());
  meta::register_meta_service(runtime.server(), **store);
  meta::RequestRecordExpirer expirer(**store, std::chrono::seconds(mc->request_record_age_s),
                                     std::chrono::seconds(60));
  if (auto r = runtime.run(); !r) return fail(r.error().message());
}

}  // namespace

void add_meta_commands(CLI::App& /*app*/, CLI::App& serve) {
  static std::string config_path;
  auto* meta = serve.add_subcommand("meta", "Metadata server (namespace, inodes, sessions)");
  meta->add_option("--config", config_path, "TOML config file")->required();
  meta->callback([] { serve_meta(config_path); });
}

}  // namespace weft::cli
