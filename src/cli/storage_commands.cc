// Commands of the storage module: `weft serve storage --config FILE`.
#include <chrono>
#include <thread>

#include "cli/commands.h"
#include "common/assert.h"
#include "common/config.h"
#include "common/fault.h"
#include "common/logging.h"
#include "rpc/service_runtime.h"
#include "meta/meta_client.h"
#include "rpc/client.h"
#include "storage/chunk_engine.h"
#include "storage/mgmt_link.h"
#include "storage/orphan_sweep.h"
#include "storage/routing_provider.h"
#include "storage/storage_server.h"

namespace weft::cli {
namespace {

// The orphan sweep's questions, as root, to the meta servers the routing
// lists (registered with mgmtd; asked again when that list changes).
class MetaOracle final : public storage::InodeOracle {
 public:
  MetaOracle(rpc::IoPool& io, rpc::ClientOptions options, storage::RoutingProvider& routing)
      : io_(io), rpc_(io, std::move(options)), routing_(routing) {}

  Result<std::vector<bool>> exist(const std::vector<uint64_t>& inos) override {
    WEFT_TRY(meta::MetaClient * c, client());
    // A file queued for meta's chunk GC is meta's to remove (a reader may
    // hold it for long: meta/read_holds.h), not an orphan.
    WEFT_TRY(auto stats, c->batch_stat(meta::Cred::root(), inos, /*with_queued=*/true));
    std::vector<bool> out;
    for (const auto& s : stats) {
      if (!s && s.error().code() != Code::kNotFound) return std::unexpected(s.error());
      out.push_back(s.has_value());
    }
    return out;
  }
  Result<storage::MetaMark> mark() override {
    WEFT_TRY(meta::MetaClient * c, client());
    WEFT_TRY(meta::StatFs s, c->statfs(meta::Cred::root()));
    return storage::MetaMark{.ids_issued_below = s.ids_issued_below,
                             .store_id = s.store_id,
                             .cluster_store_id = routing_.current()->meta_store_id};
  }

 private:
  Result<meta::MetaClient*> client() {
    std::vector<rpc::Endpoint> addresses;
    for (const auto& [id, node] : routing_.current()->nodes) {
      if (node.kind != mgmt::NodeKind::kMeta) continue;
      WEFT_TRY(rpc::Endpoint ep, rpc::Endpoint::parse(node.address));
      addresses.push_back(ep);
    }
    if (addresses.empty()) return error(Code::kUnavailable, "no metadata server has registered with mgmtd");
    if (!client_ || addresses != addresses_) {
      addresses_ = addresses;
      meta::MetaClientOptions o;
      o.addresses = std::move(addresses);
      o.retry_time_ms_max = 5000;
      client_ = std::make_unique<meta::MetaClient>(io_, rpc_, std::move(o));
    }
    return client_.get();
  }

  rpc::IoPool& io_;
  rpc::Client rpc_;
  storage::RoutingProvider& routing_;
  std::vector<rpc::Endpoint> addresses_;
  std::unique_ptr<meta::MetaClient> client_;
};

// With [cluster]: removes the chunks of files meta no longer has (none in a
// standalone server: no meta to ask).
std::unique_ptr<storage::OrphanSweep> start_orphan_sweep(rpc::ServiceRuntime& runtime,
                                                          const storage::StorageConfig& config,
                                                          storage::StorageService& service, std::function<bool()> fence) {
  if (!config.orphan_grace) return nullptr;
  storage::OrphanSweepOptions o = storage::OrphanSweep::from_grace(*config.orphan_grace);
  o.name = runtime.config().name;
  o.write_fence = std::move(fence);
  o.inodes_per_s = config.orphan_sweep_inodes_per_s;
  std::vector<storage::OrphanSweep::Target> targets;
  for (const auto& t : config.targets) targets.push_back({t.id, &service.target(t.id)->engine()});
  auto oracle =
      std::make_unique<MetaOracle>(runtime.io(), runtime.config().client_options(runtime.config().name + "-meta"),
                                   service.routing());
  auto sweep = std::make_unique<storage::OrphanSweep>(std::move(o), std::move(oracle), std::move(targets),
                                                      metrics::Registry::global());
  sweep->start();
  return sweep;
}

// Registers with mgmtd (which assigns the target ids) when [cluster] is set.
Result<std::unique_ptr<storage::MgmtLink>> join_cluster(rpc::ServiceRuntime& runtime,
                                                         storage::StorageConfig& config, const std::string& source) {
  const rpc::ServiceConfig& sc = runtime.config();
  if (sc.listen.port == 0)
    return error(Code::kConfig,
                 "{}: key 'server.listen' needs a fixed port when [cluster] is set (it is the server's identity)",
                 source);
  storage::MgmtLinkOptions o;
  for (const auto& a : config.mgmtd) {
    auto ep = rpc::Endpoint::parse(a);
    if (!ep) return error(Code::kConfig, "{}: key 'cluster.mgmtd': {}", source, ep.error().message());
    o.mgmtd.push_back(*ep);
  }
  o.rpc = sc.client_options("storage-mgmt");
  o.address = config.advertise.empty() ? sc.listen.to_string() : config.advertise;
  WEFT_RETURN_IF_ERROR(check_advertised_address(o.address, source));
  for (const auto& t : config.targets) {
    // Before registering: mgmtd must learn whether the target still holds its data.
    WEFT_TRY(uint64_t data_id, storage::ChunkEngine::ensure_data_id(t.path));
    o.targets.push_back({t.path, t.capacity_bytes, data_id});
  }
  WEFT_TRY(auto link, storage::MgmtLink::connect(runtime.io(), std::move(o)));
  std::vector<mgmt::TargetId> ids = link->target_ids();
  for (size_t i = 0; i < config.targets.size(); ++i) config.targets[i].id = ids.at(i);
  return link;
}

void serve_storage(const std::string& config_path, pid_t owner_pid) {
  auto config = Config::load_file(config_path);
  if (!config) return fail(config.error().message());
  if (auto role = check_config_role(*config, "storage"); !role) return fail(role.error().message());
  auto sc = rpc::ServiceConfig::from(*config, "storage");
  if (!sc) return fail(sc.error().message());
  auto storage_config = storage::StorageConfig::from(*config, *sc);
  if (!storage_config) return fail(storage_config.error().message());
  rpc::ServiceRuntime runtime(*sc);
  if (auto r = runtime.init(); !r) return fail(r.error().message());
  // From here: an owner that exits while the server joins stops it once joined.
  auto owner = watch_server_owner(owner_pid, runtime);
  if (!owner) return fail(owner_pid_error(owner.error()));
  std::unique_ptr<storage::MgmtLink> link;
  if (!storage_config->mgmtd.empty()) {
    auto joined = join_cluster(runtime, *storage_config, config_path);
    if (!joined) return fail(joined.error().message());
    link = std::move(*joined);
  }
  // Tests: targets that take long to open (a large chunk index rebuilt),
  // while mgmtd already counts this server registered.
  if (WEFT_FAULT("storage.serve.slow_open")) std::this_thread::sleep_for(std::chrono::seconds(3));
  std::function<bool()> fence;
  if (link) fence = [l = link.get()] { return l->can_serve_writes(); };
  auto service = storage::open_storage_service(runtime.io(), *storage_config, *sc, metrics::Registry::global(),
                                               std::move(fence), link ? link->refusals() : nullptr);
  if (!service) return fail(service.error().message());
  (*service)->register_methods(runtime.server());
  if (link) {
    auto* routing = dynamic_cast<storage::StaticRoutingProvider*>(&(*service)->routing());
    WEFT_ASSERT(routing != nullptr);
    link->attach(**service, *routing);
  }
  std::unique_ptr<storage::OrphanSweep> orphans;
  if (link) {
    orphans = start_orphan_sweep(runtime, *storage_config, **service,
                                 [l = link.get()] { return l->can_serve_writes(); });
  }
  warn_unread_keys(*config);
  WEFT_LOG_INFO("{}: serving {} targets{}", sc->name, storage_config->targets.size(),
                link ? " (member of a cluster run by mgmtd)" : "");
  // Heartbeats stop before the listener closes: a server that no longer
  // listens is declared dead on the first refused connection
  // (mgmt/refusal_probe.h), and a heartbeat in between would revive it.
  auto r = runtime.run(nullptr, [&link] {
    if (link) link->stop();
  });
  if (orphans) orphans->stop();
  if (link) link->stop();
  (*service)->stop();
  runtime.drain_or_exit();
  if (!r) return fail(r.error().message());
}

}  // namespace

void add_storage_commands(CLI::App& /*app*/, CLI::App& serve) {
  static std::string config_path;
  auto* storage = serve.add_subcommand("storage", "Storage server: chunk targets with chain replication");
  storage->add_option("--config", config_path, "TOML config file")->required();
  static pid_t owner_pid = 0;
  add_owner_pid_option(*storage, owner_pid);
  storage->callback([] { serve_storage(config_path, owner_pid); });
}

}  // namespace weft::cli
