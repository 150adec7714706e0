// Commands of the meta module: `weft serve meta --config FILE` runs the
// metadata service (meta/service.h) on a RocksDB store in [meta] data_dir.
#include <filesystem>

#include "cli/commands.h"
#include "common/config.h"
#include "meta/meta_store.h"
#include "meta/service.h"
#include "client/chunk_gc.h"
#include "mgmt/mgmt_client.h"
#include "mgmt/mgmt_rpc.h"
#include "rpc/client.h"
#include "rpc/service_runtime.h"

namespace weft::cli {
namespace {

// A meta server in a cluster registers with mgmtd ([cluster] mgmtd = [...]),
// which is how clients find it (routing lists it as a meta node).
struct ClusterMembership {
  std::vector<rpc::Endpoint> mgmtd;
  std::unique_ptr<rpc::Client> rpc;
  std::unique_ptr<mgmt::MgmtRpc> mgmt_rpc;
  std::unique_ptr<mgmt::MgmtClient> client;
};

Result<std::optional<ClusterMembership>> join_cluster(const Config& config, rpc::ServiceRuntime& runtime) {
  if (!config.has("cluster")) return std::optional<ClusterMembership>();
  WEFT_TRY(Config c, config.table("cluster"));
  WEFT_TRY(std::vector<std::string> addresses, c.get_strings("mgmtd"));
  if (addresses.empty()) return error(Code::kConfig, "{}: [cluster] mgmtd is empty", config.source());
  std::string advertise = runtime.config().listen.to_string();
  if (c.has("advertise")) {
    WEFT_TRY(advertise, c.get_string("advertise"));
  }
  if (runtime.config().listen.port == 0)
    return error(Code::kConfig, "{}: [server] listen needs a fixed port when [cluster] is set", config.source());
  std::vector<rpc::Endpoint> mgmtd;
  for (const auto& a : addresses) {
    WEFT_TRY(rpc::Endpoint ep, rpc::Endpoint::parse(a));
    mgmtd.push_back(ep);
  }
  ClusterMembership m;
  m.mgmtd = mgmtd;
  m.rpc = std::make_unique<rpc::Client>(runtime.io(),
                                        rpc::ClientOptions::in_cluster(runtime.config().cluster_token, "meta-mgmt"));
  m.mgmt_rpc = std::make_unique<mgmt::MgmtRpc>(runtime.io(), *m.rpc, mgmtd);
  mgmt::MgmtClientOptions mo;
  mo.registration.kind = mgmt::NodeKind::kMeta;
  mo.registration.address = advertise;
  mo.registration.incarnation = mgmt::new_incarnation();
  m.client = std::make_unique<mgmt::MgmtClient>(*m.mgmt_rpc, mo);
  // The loop registers (and keeps retrying while mgmtd is away).
  m.client->start();
  return std::optional<ClusterMembership>(std::move(m));
}

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
  auto membership = join_cluster(*config, runtime);
  if (!membership) return fail(membership.error().message());
  // In a cluster, the chunks of unlinked files are removed from storage in the background.
  std::unique_ptr<client::ChunkGc> gc;
  if (*membership) {
    meta::MetaStore* s = store->get();
    client::ChunkGcHooks hooks;
    hooks.pending = [s](size_t limit) { return s->gc_pending(limit); };
    hooks.done = [s](meta::Ino ino) { return s->gc_done(meta::Context{meta::Cred::root(), {}}, ino); };
    gc = std::make_unique<client::ChunkGc>((*membership)->mgmtd, sc->cluster_token, std::move(hooks));
    gc->start();
  }
  meta::RequestRecordExpirer expirer(**store, std::chrono::seconds(mc->request_record_age_s),
                                     std::chrono::seconds(60));
  auto r = runtime.run();
  if (gc) gc->stop();
  if (*membership) (*membership)->client->stop();
  if (!r) return fail(r.error().message());
}

}  // namespace

void add_meta_commands(CLI::App& /*app*/, CLI::App& serve) {
  static std::string config_path;
  auto* meta = serve.add_subcommand("meta", "Metadata server (namespace, inodes, sessions)");
  meta->add_option("--config", config_path, "TOML config file")->required();
  meta->callback([] { serve_meta(config_path); });
}

}  // namespace weft::cli
