// Commands of the meta module: `weft serve meta --config FILE` runs the
// metadata service (meta/service.h) on a RocksDB store in [meta] data_dir.
#include <filesystem>
#include <thread>
#include <unordered_set>

#include "cli/commands.h"
#include "common/config.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "meta/fsck.h"
#include "meta/gc_gate.h"
#include "meta/meta_store.h"
#include "meta/service.h"
#include "meta/session_reaper.h"
#include "mgmt/proto_convert.h"
#include "mgmt/service_methods.h"
#include "client/chunk_gc.h"
#include "client/truncate.h"
#include "mgmt/client_list.h"
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
  // Serving starts then (BootClock, as the lease; epoch: at once): another
  // meta, on a store this one replaces, may hold a lease until then.
  TimePoint serve_from{};
};

// Registers once before anything is served: mgmtd checks the store
// (mgmt/cluster_state.h, "Meta's store"). Waits while mgmtd is unreachable
// or behind (logged); any other refusal (the client fenced, a wrong cluster
// token, the address taken by another kind of node...) is the error to exit
// with, as storage's. With accept_store_change, raises the store's next id
// past the mark mgmtd had recorded, durably, before returning.
Result<void> register_store(mgmt::MgmtClient& client, meta::MetaStore& store, bool accept_store_change) {
  auto next_log = std::chrono::steady_clock::now();
  while (true) {
    auto registered = client.register_now();
    if (registered) break;
    const Code code = registered.error().code();
    const bool transient = mgmt::MgmtRpc::is_transport_error(code) || code == Code::kVersionMismatch;
    if (client.fenced() || !transient) return registered;
    if (std::chrono::steady_clock::now() >= next_log) {
      WEFT_LOG_WARN("meta: not serving until mgmtd accepts this meta's store (retrying): {}", registered.error());
      next_log = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  const mgmt::MgmtClient::MetaStoreCheck check = client.meta_store_check();
  if (!check.checked) {
    if (accept_store_change)
      return error(Code::kNotPermitted, "--accept-store-change: mgmtd is older than the meta store check and "
                   "cannot tell the highest inode id the cluster issued; upgrade mgmtd first");
    WEFT_LOG_WARN("meta: mgmtd does not check meta's store (an mgmtd older than the check)");
    return {};
  }
  if (!accept_store_change) return {};
  // mgmtd refuses the flag when it has no record (no mark to raise past); an
  // mgmtd from before that answers 0: the margin is all that is raised.
  const uint64_t floor = check.recorded_mark + mgmt::kStoreChangeIdMargin;
  if (floor < check.recorded_mark)
    return error(Code::kOutOfRange, "--accept-store-change: no inode ids left above {}", check.recorded_mark);
  if (auto raised = store.raise_next_id(floor); !raised)
    return std::unexpected(raised.error().with_context("--accept-store-change: raising the next inode id"));
  WEFT_LOG_WARN("meta: store {:016x} accepted as the cluster's meta store (--accept-store-change): inode ids "
                "continue from {} (the cluster had issued ids below {}); restart without the flag from now on",
                store.store_id(), floor, check.recorded_mark);
  return {};
}

Result<std::optional<ClusterMembership>> join_cluster(const Config& config, rpc::ServiceRuntime& runtime,
                                                      const std::string& data_dir, meta::MetaStore& store,
                                                      bool accept_store_change) {
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
  WEFT_RETURN_IF_ERROR(check_advertised_address(advertise, config.source()));
  std::vector<rpc::Endpoint> mgmtd;
  for (const auto& a : addresses) {
    auto ep = rpc::Endpoint::parse(a);
    if (!ep) return error(Code::kConfig, "{}: key 'cluster.mgmtd': {}", config.source(), ep.error().message());
    mgmtd.push_back(*ep);
  }
  ClusterMembership m;
  m.mgmtd = mgmtd;
  m.rpc = std::make_unique<rpc::Client>(runtime.io(), runtime.config().client_options("meta-mgmt"));
  m.mgmt_rpc = std::make_unique<mgmt::MgmtRpc>(runtime.io(), *m.rpc, mgmtd);
  mgmt::MgmtClientOptions mo;
  mo.registration.kind = mgmt::NodeKind::kMeta;
  mo.registration.address = advertise;
  // Recorded in data_dir: above the last one even after the wall clock stepped back.
  WEFT_TRY(mo.registration.incarnation, mgmt::next_incarnation({data_dir}));
  mo.state_dirs = {data_dir};  // the highest routing version installed, next to mgmt-incarnation
  if (accept_store_change) {
    // A store of its own for the change (meta/meta_store.h renew_store_id):
    // a meta still serving the store this one replaces (a copy of it too) is
    // another store to mgmtd from now on, and storage's orphan sweeps see it.
    const uint64_t before = store.store_id();
    WEFT_RETURN_IF_ERROR(store.renew_store_id());
    WEFT_LOG_WARN("meta: --accept-store-change: store {:016x} is store {:016x} from now on", before,
                  store.store_id());
  }
  mo.registration.meta_store.store_id = store.store_id();
  mo.registration.accept_store_change = accept_store_change;
  mo.meta_ids_mark = [&store] { return store.ids_reserved_below(); };
  m.client = std::make_unique<mgmt::MgmtClient>(*m.mgmt_rpc, mo);
  WEFT_RETURN_IF_ERROR(register_store(*m.client, store, accept_store_change));
  if (const Duration wait = m.client->meta_store_check().serve_after; wait > Duration::zero()) {
    // Timed from now, after mgmtd's reply: later than mgmtd's own reckoning.
    m.serve_from = BootClock::instance().now() + wait;
    WEFT_LOG_WARN("meta: serving in {} ms, once no other meta (one on a store this one replaces) can hold a lease "
                  "from mgmtd (requests are refused with kUnavailable until then)",
                  std::chrono::duration_cast<std::chrono::milliseconds>(wait).count());
  }
  // Fenced later (another meta's accepted store change replaced this store,
  // or a newer process took this address): the service refuses every request
  // (serve_check), the chunk GC and the session reaper stop.
  m.client->set_fence_listener([address = advertise](const Status& why) {
    WEFT_LOG_ERROR("meta {}: mgmtd fenced this meta server: refusing every request from now on (clients try their "
                   "next meta address), no chunk GC, no session reaping; restart it once the cause is fixed: {}",
                   address, why.message());
  });
  // The loop heartbeats (and re-registers, retrying while mgmtd is away).
  m.client->start();
  return std::optional<ClusterMembership>(std::move(m));
}

// The meta service's check (meta/service.h), kUnavailable (clients retry, on
// their next meta address too): once mgmtd fenced this server; while it holds
// no lease from mgmtd (cut off from mgmtd it would not learn that another
// meta's --accept-store-change replaced its store, and would acknowledge
// operations the cluster's store never sees: like a storage server, it
// serves nothing then, reads included); and until serve_from (mgmtd's
// serve_after: another meta, on a store this one replaces, may hold a lease
// until then). Null outside a cluster.
meta::ServeCheck serve_check(const std::optional<ClusterMembership>& membership) {
  if (!membership) return nullptr;
  return [client = membership->client.get(), serve_from = membership->serve_from]() -> Result<void> {
    if (client->fenced())
      return error(Code::kUnavailable, "this meta server was fenced by mgmtd and serves nothing: {}",
                   client->fence_reason());
    if (!client->lease().can_serve_writes())
      return error(Code::kUnavailable,
                   "this meta server holds no lease from mgmtd (its heartbeats are not answered) and serves nothing "
                   "until it does: another meta may have taken over its store meanwhile");
    if (serve_from != TimePoint{}) {  // the clock is read only after a wait was asked for
      if (const TimePoint now = BootClock::instance().now(); now < serve_from)
        return error(Code::kUnavailable,
                     "this meta server serves in {} ms, once no other meta (one on a store this one replaces, "
                     "--accept-store-change) can hold a lease from mgmtd",
                     std::chrono::duration_cast<std::chrono::milliseconds>(serve_from - now).count() + 1);
    }
    return {};
  };
}

// set_layout's check that a chain table exists: asks mgmtd for its routing
// each time (set_layout is rare, and a table created a moment ago is found).
// Blocks: set_layout runs on the server's blocking pool, never on an I/O thread.
meta::ChainTableCheck chain_table_check(mgmt::MgmtRpc& mgmt) {
  return [&mgmt](uint32_t id) -> Result<void> {
    mgmt::pb::GetRoutingRequest req;  // known_version 0: the whole routing, at once
    WEFT_TRY(auto reply, mgmt.call<mgmt::pb::GetRoutingReply>(mgmt::kGetRouting, req));
    WEFT_TRY(mgmt::RoutingInfo routing, mgmt::from_proto(reply.routing()));
    if (!routing.tables.contains(id))
      return error(Code::kInvalidArgument,
                   "chain table {} does not exist (routing version {}); `weft admin chain-table create` makes one", id,
                   routing.version);
    return {};
  };
}

// [meta] session_reap_interval_ms (10 s) and session_reap_min_age_s (120 s:
// younger sessions are always kept). Read (and checked) in every mode, though
// only a cluster member reaps.
struct ReaperSettings {
  std::chrono::milliseconds interval;
  std::chrono::seconds min_age;
};
Result<ReaperSettings> reaper_settings(const Config& config) {
  WEFT_TRY(int64_t interval_ms, config.get_int_in("meta.session_reap_interval_ms", 10'000, 100, 3'600'000));
  WEFT_TRY(int64_t min_age_s, config.get_int_in("meta.session_reap_min_age_s", 120, 1, 30 * 86'400));
  return ReaperSettings{std::chrono::milliseconds(interval_ms), std::chrono::seconds(min_age_s)};
}

// Write sessions of clients without a lease at mgmtd are closed (meta/session_reaper.h).
// Before a dead writer's session closes, storage is asked what it left past
// the file's length, through the chunk GC's storage access.
std::unique_ptr<meta::SessionReaper> start_session_reaper(const ReaperSettings& settings, meta::MetaStore& store,
                                                          mgmt::MgmtRpc& mgmt, meta::ServeCheck check,
                                                          client::StorageClient& storage) {
  auto live = [&mgmt, check = std::move(check)]() -> Result<std::optional<std::unordered_set<uint64_t>>> {
    WEFT_RETURN_IF_ERROR(check());  // fenced: reap nothing
    WEFT_TRY(mgmt::LeasedClients leased, mgmt::list_all_clients(mgmt, /*ids_only=*/true));
    if (!leased.tracked) return std::optional<std::unordered_set<uint64_t>>();
    std::unordered_set<uint64_t> ids;
    for (const auto& c : leased.clients) ids.insert(c.id);
    return std::optional<std::unordered_set<uint64_t>>(std::move(ids));
  };
  auto stored_end = [&storage](const meta::Inode& inode, uint64_t from) -> Result<uint64_t> {
    WEFT_RETURN_IF_ERROR(storage.start());
    return client::stored_end(storage.routing(), storage.chunks(), inode, from, meta::kFileBytesMax);
  };
  return std::make_unique<meta::SessionReaper>(store, SystemClock::instance(), live, settings.interval,
                                               settings.min_age, stored_end);
}

// What the chunk GC did and what readers keep from it, on meta's /metrics
// (why the space of removed files has not come back yet).
const char kGcMetricsOwnerTag = 0;
const void* const kGcMetricsOwner = &kGcMetricsOwnerTag;
void register_gc_metrics(const client::ChunkGc& gc, meta::MetaStore& store) {
  auto& reg = metrics::Registry::global();
  reg.gauge_fn("weft_meta_gc_files_collected", "Removed files whose chunks the chunk GC removed", {},
               [&gc] { return static_cast<double>(gc.files_collected()); }, kGcMetricsOwner);
  reg.gauge_fn("weft_meta_gc_chunks_removed", "Chunks the chunk GC removed", {},
               [&gc] { return static_cast<double>(gc.chunks_removed()); }, kGcMetricsOwner);
  reg.gauge_fn("weft_meta_gc_files_in_backoff", "Removed files whose chunk removal failed, waiting to be tried again",
               {}, [&gc] { return static_cast<double>(gc.files_in_backoff()); }, kGcMetricsOwner);
  reg.gauge_fn("weft_meta_read_holds_clients", "Clients that hold files open (meta/read_holds.h)", {},
               [&store] { return static_cast<double>(store.read_holds().clients()); }, kGcMetricsOwner);
  reg.gauge_fn("weft_meta_read_holds_files", "Files held open by clients: the chunk GC leaves them", {},
               [&store] { return static_cast<double>(store.read_holds().held()); }, kGcMetricsOwner);
}

void serve_meta(const std::string& config_path, bool accept_store_change, pid_t owner_pid) {
  auto config = Config::load_file(config_path);
  if (!config) return fail(config.error().message());
  if (auto role = check_config_role(*config, "meta"); !role) return fail(role.error().message());
  auto sc = rpc::ServiceConfig::from(*config, "meta");
  if (!sc) return fail(sc.error().message());
  auto mc = meta::MetaServiceConfig::from(*config);
  if (!mc) return fail(mc.error().message());
  auto reaping = reaper_settings(*config);
  if (!reaping) return fail(reaping.error().message());
  // Store calls block on WAL fsyncs: more threads let concurrent commits share one.
  if (!config->has("server.blocking_threads")) sc->blocking_threads = 16;
  rpc::ServiceRuntime runtime(*sc);
  if (auto r = runtime.init(); !r) return fail(r.error().message());
  // From here: an owner that exits while meta still joins the cluster stops it once joined.
  auto owner = watch_server_owner(owner_pid, runtime);
  if (!owner) return fail(owner_pid_error(owner.error()));
  std::error_code ec;
  std::filesystem::create_directories(mc->data_dir, ec);
  if (ec)
    return fail(fmt::format("{}: key 'meta.data_dir': cannot create {}: {}", config_path, mc->data_dir, ec.message()));
  meta::StoreOptions store_options = mc->store_options();
  // Outside a cluster there is no chunk GC: nothing to hold, clients are told so.
  if (!config->has("cluster")) store_options.read_hold = std::chrono::milliseconds(0);
  // Nor a session reaper: an abandoned write session is closed at once.
  store_options.sessions_reaped = config->has("cluster");
  auto store = meta::MetaStore::open(store_options);
  if (!store) return fail("cannot open the metadata store in " + mc->data_dir + ": " + store.error().message());
  if (accept_store_change && !config->has("cluster"))
    return fail("--accept-store-change: only a meta server in a cluster ([cluster] mgmtd) has its store checked");
  auto membership = join_cluster(*config, runtime, mc->data_dir, **store, accept_store_change);
  if (!membership) return fail(membership.error().message());
  // Before runtime.run(): nothing is served yet.
  meta::register_meta_service(runtime.server(), **store, serve_check(*membership));
  if (*membership) (*store)->set_chain_table_check(chain_table_check(*(*membership)->mgmt_rpc));
  // In a cluster, the chunks of unlinked files are removed from storage in the background.
  std::unique_ptr<client::ChunkGc> gc;
  if (*membership) {
    meta::MetaStore* s = store->get();
    client::ChunkGcHooks hooks;
    // Under a valid lease, once serving, after a window for readers' holds
    // (meta/gc_gate.h; a fence revokes the lease for good). (Refused passes
    // keep the files' back-off: an empty answer of `pending` would say the
    // queue was empty and drop it.)
    hooks.may_run = [client = (*membership)->client.get(),
                     gate = std::make_shared<meta::GcGate>(s->read_holds(), (*membership)->serve_from)] {
      const mgmt::LeaseKeeper& lease = client->lease();
      return gate->may_run(lease.can_serve_writes(), lease.gaps(), BootClock::instance().now());
    };
    hooks.pending = [s](size_t limit, std::optional<meta::Ino> after) { return s->gc_pending(limit, after); };
    // Not while a reader may still have the file open (meta/read_holds.h).
    hooks.may_collect = [s](const meta::GcItem& item) {
      return s->read_holds().may_collect(item.ino, item.inode.ctime_ns);
    };
    hooks.done = [s](std::span<const meta::Ino> inos) -> Result<void> {
      WEFT_TRY(size_t n, s->gc_done(meta::Context{meta::Cred::root(), {}}, inos));
      (void)n;  // files another pass finished already are no error
      return {};
    };
    gc = std::make_unique<client::ChunkGc>((*membership)->mgmtd, sc->client_options("chunk-gc"), std::move(hooks));
    // Clients can renew their holds only from now on (join_cluster may have
    // waited long for mgmtd; runtime.run() listens right after this).
    s->read_holds().restart_window();
    gc->start();
    register_gc_metrics(*gc, *s);
  }
  std::unique_ptr<meta::SessionReaper> reaper;
  if (*membership) {
    reaper = start_session_reaper(*reaping, **store, *(*membership)->mgmt_rpc, serve_check(*membership),
                                  gc->storage());
  }
  meta::RequestRecordExpirer expirer(**store, std::chrono::seconds(mc->request_record_age_s),
                                     std::chrono::seconds(60));
  warn_unread_keys(*config);
  auto r = runtime.run();
  reaper.reset();
  metrics::Registry::global().remove_callbacks(kGcMetricsOwner);
  if (gc) gc->stop();
  if (*membership) (*membership)->client->stop();
  runtime.drain_or_exit();
  if (!r) return fail(r.error().message());
}

// `weft admin meta-fsck`: the consistency checker (meta/fsck.h) on a meta
// server's store, from its data_dir or its config. Exit status 1 when the
// namespace has problems (each printed), 2 when it could not be checked.
void meta_fsck(const std::string& data_dir, const std::string& config_path) {
  std::string dir = data_dir;
  if (dir.empty()) {
    auto config = Config::load_file(config_path);
    if (!config) return fail(config.error().message(), 2);
    auto mc = meta::MetaServiceConfig::from(*config);
    if (!mc) return fail(mc.error().message(), 2);
    dir = mc->data_dir;
  }
  std::string store = meta::MetaServiceConfig{.data_dir = dir}.store_options().path;
  auto report = meta::fsck_store_at(store);
  if (!report) return fail(report.error().message(), 2);
  std::printf("%s: %llu inodes, %llu entries, %llu write sessions, %llu files queued for chunk GC\n", store.c_str(),
              static_cast<unsigned long long>(report->inodes), static_cast<unsigned long long>(report->dentries),
              static_cast<unsigned long long>(report->sessions), static_cast<unsigned long long>(report->gc_queued));
  for (const auto& p : report->problems) std::printf("problem: %s\n", p.c_str());
  if (!report->ok()) return fail(fmt::format("{} problems in the namespace", report->problems.size()), 1);
  std::printf("consistent\n");
}

}  // namespace

void add_meta_commands(CLI::App& app, CLI::App& serve) {
  static std::string config_path;
  auto* meta = serve.add_subcommand("meta", "Metadata server (namespace, inodes, sessions)");
  meta->add_option("--config", config_path, "TOML config file")->required();
  static bool accept_store_change = false;
  meta->add_flag("--accept-store-change", accept_store_change,
                 "Serve a store other than the one mgmtd recorded for the cluster, or one that issued fewer inode "
                 "ids (a restore from backup, a deliberately new namespace): the store gets a new id, mgmtd "
                 "records it, and meta first raises its next inode id past every id the cluster issued");
  static pid_t owner_pid = 0;
  add_owner_pid_option(*meta, owner_pid);
  meta->callback([] { serve_meta(config_path, accept_store_change, owner_pid); });

  static std::string fsck_dir, fsck_config;
  auto* fsck = admin_subcommand(app).add_subcommand(
      "meta-fsck", "Check a meta server's namespace (entries, link counts, orphans, cycles); read-only");
  auto* by_dir = fsck->add_option("--data-dir", fsck_dir, "the meta server's [meta] data_dir");
  auto* by_config = fsck->add_option("--config", fsck_config, "the meta server's config file (its [meta] data_dir)");
  by_dir->excludes(by_config);
  fsck->require_option(1);
  fsck->callback([] { meta_fsck(fsck_dir, fsck_config); });
}

}  // namespace weft::cli
