// Commands of the mgmt module: `weft serve mgmtd`, `weft status`,
// `weft admin chain-table create|list`, `weft admin target replace` and
// `weft admin node remove`. Client commands find the cluster
// through client/cluster_config.h (--config, $WEFT_CONFIG, ./weft-data/client.toml;
// --cluster ADDR overrides the mgmtd address).
#include <filesystem>
#include <memory>

#include "cli/commands.h"
#include "client/cluster_config.h"
#include "common/config.h"
#include "mgmt/client_list.h"
#include "mgmt/mgmt_rpc.h"
#include "mgmt/proto_convert.h"
#include "mgmt/render.h"
#include "mgmt/service.h"
#include "mgmt/service_methods.h"
#include "rpc/service_runtime.h"

namespace weft::cli {
namespace {

// `weft serve mgmtd --config FILE`: [server] (rpc/service_runtime.h) and [mgmtd] (mgmt/service.h).
// --accept-older-state: mgmt/cluster_state.h ("Behind"); a flag rather than a
// config key so that it applies to the one start the operator decided on.
void serve_mgmtd(const std::string& path, bool accept_older_state, pid_t owner_pid) {
  auto config = Config::load_file(path);
  if (!config) return fail(config.error().message());
  if (auto role = check_config_role(*config, "mgmtd"); !role) return fail(role.error().message());
  auto sc = rpc::ServiceConfig::from(*config, "mgmtd");
  if (!sc) return fail(sc.error().message());
  auto mc = mgmt::MgmtdConfig::from(*config);
  if (!mc) return fail(mc.error().message());
  mc->cluster.accept_older_state = accept_older_state;
  // Declared before the runtime: they outlive its I/O threads (long polls hold a reference).
  std::unique_ptr<mgmt::ClusterState> state;
  std::unique_ptr<mgmt::MgmtService> service;
  rpc::ServiceRuntime runtime(*sc);
  if (auto r = runtime.init(); !r) return fail(r.error().message());
  auto owner = watch_server_owner(owner_pid, runtime);
  if (!owner) return fail(owner_pid_error(owner.error()));
  std::error_code ec;
  std::filesystem::create_directories(mc->data_dir, ec);
  if (ec) return fail(fmt::format("{}: key 'mgmtd.data_dir': cannot create {}: {}", path, mc->data_dir, ec.message()));
  auto opened = mgmt::ClusterState::open(mc->cluster, SystemClock::instance());
  if (!opened) return fail(fmt::format("mgmtd: opening state in {}: {}", mc->cluster.db_dir, opened.error().message()));
  state = std::move(*opened);
  service = std::make_unique<mgmt::MgmtService>(*state, SystemClock::instance(), mc->service);
  service->register_methods(runtime.server());
  service->start();
  warn_unread_keys(*config);
  // The lease checker stops first: while the server drained its calls (long
  // polls, seconds) it declared every silent server dead and saved that.
  auto ran = runtime.run(nullptr, [&] { service->stop(); });
  service->stop();
  runtime.drain_or_exit();
  if (!ran) return fail(ran.error().message());
}

struct ClusterFlags {
  std::string config;
  std::string cluster;
};

void add_cluster_flags(CLI::App* cmd, ClusterFlags& flags) {
  cmd->add_option("--config", flags.config, "client config (default: $WEFT_CONFIG, else ./weft-data/client.toml)");
  cmd->add_option("--cluster", flags.cluster, "mgmtd host:port (overrides the config's mgmtd list)");
}

// Runs fn(MgmtRpc&) against the configured cluster; errors become one line.
template <class Fn>
void with_mgmtd(const ClusterFlags& flags, Fn fn) {
  auto cc = client::load_cluster_config(client::ClusterConfigQuery::from_flags(flags.config, flags.cluster));
  if (!cc) return fail(cc.error().message());
  rpc::IoPool io(1, "cli");
  rpc::ClientOptions co;
  co.cluster_token = cc->cluster_token;
  co.name = "weft cli";
  co.connect_timeout_ms = 2000;
  co.call_timeout_ms = 10000;
  co.tcp = cc->tcp;
  co.local_socket = cc->local_socket;
  rpc::Client client(io, co);
  mgmt::MgmtRpc rpc(io, client, cc->mgmtd, 10000);
  fn(rpc);
}

void status(const ClusterFlags& flags, bool json) {
  with_mgmtd(flags, [json](mgmt::MgmtRpc& rpc) {
    auto reply = rpc.call<mgmt::pb::StatusReply>(mgmt::kStatus, mgmt::pb::StatusRequest{});
    if (!reply) return fail(fmt::format("status: {}", reply.error().message()));
    auto routing = mgmt::from_proto(reply->routing());
    if (!routing) return fail(fmt::format("status: {}", routing.error().message()));
    TimePoint now = mgmt::from_ns(reply->now_ns());
    std::vector<mgmt::ClientInfo> clients;
    for (const auto& c : reply->clients()) clients.push_back(mgmt::from_proto(c));
    if (reply->clients_total() > clients.size() && !clients.empty()) {  // more than Status's first page
      auto rest = mgmt::list_all_clients(rpc, /*ids_only=*/false, clients.back().id);
      if (!rest) return fail(fmt::format("status: listing clients: {}", rest.error().message()));
      clients.insert(clients.end(), rest->clients.begin(), rest->clients.end());
    }
    const mgmt::MetaStoreRecord meta_store{.store_id = reply->meta_store_id(),
                                           .ids_issued_below = reply->meta_ids_issued_below()};
    std::string out = json ? mgmt::render_json(*routing, now, clients, meta_store) + "\n"
                           : mgmt::render_text(*routing, now, clients, meta_store);
    // mgmtd refuses every server (mgmt/cluster_state.h, "Behind"): say so first.
    if (!reply->behind().empty()) {
      if (json && out.starts_with("{"))
        out.insert(1, fmt::format("\"behind\":\"{}\",", mgmt::json_escape(reply->behind())));
      else if (!json)
        out = fmt::format("MGMTD IS BEHIND, servers are refused: {}\n\n", reply->behind()) + out;
    }
    std::fputs(out.c_str(), stdout);
  });
}

std::string chain_line(const mgmt::pb::Chain& c) {
  std::string members;
  for (const auto& e : c.entries()) {
    auto state = mgmt::target_state_from_wire(e.state());
    members += fmt::format("{}{}({})", members.empty() ? "" : " -> ", e.target_id(),
                           state ? mgmt::to_string(*state) : "?");
  }
  return fmt::format("  chain {} (version {}): {}\n", c.id(), c.version(), members);
}

struct CreateTableFlags {
  uint32_t replicas = 3;
  uint32_t chains_per_target = 0;
};

void create_table(const ClusterFlags& flags, const CreateTableFlags& t) {
  with_mgmtd(flags, [&t](mgmt::MgmtRpc& rpc) {
    mgmt::pb::CreateChainTableRequest req;
    req.set_replicas(t.replicas);
    req.set_chains_per_target(t.chains_per_target);
    auto reply = rpc.call<mgmt::pb::CreateChainTableReply>(mgmt::kCreateChainTable, req, 60000);
    if (!reply) return fail(fmt::format("chain-table create: {}", reply.error().message()));
    std::string out = fmt::format("created chain table {}: {} chains of {} replicas (routing version {})\n",
                                  reply->table().id(), reply->chains_size(), reply->table().replicas(),
                                  reply->routing_version());
    for (const auto& c : reply->chains()) out += chain_line(c);
    std::fputs(out.c_str(), stdout);
  });
}

void list_tables(const ClusterFlags& flags) {
  with_mgmtd(flags, [](mgmt::MgmtRpc& rpc) {
    auto reply = rpc.call<mgmt::pb::ListChainTablesReply>(mgmt::kListChainTables, mgmt::pb::ListChainTablesRequest{});
    if (!reply) return fail(fmt::format("chain-table list: {}", reply.error().message()));
    std::string out = fmt::format("{} chain table(s) (routing version {})\n", reply->tables_size(),
                                  reply->routing_version());
    for (const auto& table : reply->tables()) {
      out += fmt::format("chain table {}: {} replicas, {} chains\n", table.id(), table.replicas(), table.chains_size());
      for (const auto& c : reply->chains())
        if (c.table_id() == table.id()) out += chain_line(c);
    }
    std::fputs(out.c_str(), stdout);
  });
}

void replace_target(const ClusterFlags& flags, uint64_t old_target, uint64_t new_target, bool force) {
  with_mgmtd(flags, [&](mgmt::MgmtRpc& rpc) {
    mgmt::pb::ReplaceTargetRequest req;
    req.set_old_target(old_target);
    req.set_new_target(new_target);
    req.set_force(force);
    auto reply = rpc.call<mgmt::pb::ReplaceTargetReply>(mgmt::kReplaceTarget, req);
    if (!reply) return fail(fmt::format("target replace: {}", reply.error().message()));
    std::string out = fmt::format("target {} replaced by target {} in {} chain(s) (routing version {}); it syncs "
                                  "from each chain's serving targets, `weft status` shows when it serves\n",
                                  old_target, new_target, reply->chains_size(), reply->routing_version());
    for (const auto& c : reply->chains()) out += chain_line(c);
    std::fputs(out.c_str(), stdout);
  });
}

void promote_target(const ClusterFlags& flags, uint64_t chain, uint64_t target, bool force) {
  with_mgmtd(flags, [&](mgmt::MgmtRpc& rpc) {
    mgmt::pb::PromoteTargetRequest req;
    req.set_chain(chain);
    req.set_target(target);
    req.set_force(force);
    auto reply = rpc.call<mgmt::pb::PromoteTargetReply>(mgmt::kPromoteTarget, req);
    if (!reply) return fail(fmt::format("target promote: {}", reply.error().message()));
    std::string out = fmt::format("target {} is chain {}'s copy now (routing version {}): it serves what it holds once "
                                  "up, the chain's other targets sync from it\n",
                                  target, chain, reply->routing_version());
    out += chain_line(reply->chain());
    std::fputs(out.c_str(), stdout);
  });
}

void remove_node(const ClusterFlags& flags, uint32_t node) {
  with_mgmtd(flags, [&](mgmt::MgmtRpc& rpc) {
    mgmt::pb::RemoveNodeRequest req;
    req.set_node_id(node);
    auto reply = rpc.call<mgmt::pb::RemoveNodeReply>(mgmt::kRemoveNode, req);
    if (!reply) return fail(fmt::format("node remove: {}", reply.error().message()));
    std::fputs(fmt::format("node {} and its targets removed (routing version {})\n", node, reply->routing_version())
                   .c_str(),
               stdout);
  });
}

}  // namespace

void add_mgmt_commands(CLI::App& app, CLI::App& serve) {
  static std::string config_path;
  auto* mgmtd = serve.add_subcommand("mgmtd", "Run the cluster manager");
  mgmtd->add_option("--config", config_path, "TOML config file ([server] and [mgmtd])")->required();
  static bool accept_older_state = false;
  mgmtd->add_flag("--accept-older-state", accept_older_state,
                  "Proceed when servers hold a newer routing version than mgmtd's state (a restored backup): "
                  "raise mgmtd's versions above theirs and make the cluster take mgmtd's older view");
  static pid_t owner_pid = 0;
  add_owner_pid_option(*mgmtd, owner_pid);
  mgmtd->callback([] { serve_mgmtd(config_path, accept_older_state, owner_pid); });

  static ClusterFlags status_flags;
  static bool json = false;
  auto* st = app.add_subcommand("status", "Show nodes, targets and chains of the cluster");
  add_cluster_flags(st, status_flags);
  st->add_flag("--json", json, "machine-readable output");
  st->callback([] { status(status_flags, json); });

  CLI::App& admin = admin_subcommand(app);
  auto* tables = admin.add_subcommand("chain-table", "Chain tables: which targets replicate together");
  tables->require_subcommand(1);
  static ClusterFlags create_flags;
  static CreateTableFlags create_table_flags;
  auto* create = tables->add_subcommand("create", "Build a chain table over every up storage target");
  add_cluster_flags(create, create_flags);
  create->add_option("--replicas", create_table_flags.replicas, "targets per chain (on distinct nodes)")
      ->required()
      ->check(CLI::Range(1, 16));
  create->add_option("--chains-per-target", create_table_flags.chains_per_target,
                     "chains each target joins (default: automatic)")
      ->check(CLI::Range(0, 256));
  create->callback([] { create_table(create_flags, create_table_flags); });
  static ClusterFlags list_flags;
  auto* list = tables->add_subcommand("list", "Show the chain tables and their chains");
  add_cluster_flags(list, list_flags);
  list->callback([] { list_tables(list_flags); });

  auto* targets = admin.add_subcommand("target", "Storage targets in chains");
  targets->require_subcommand(1);
  static ClusterFlags replace_flags;
  static uint64_t old_target = 0, new_target = 0;
  static bool replace_force = false;
  auto* replace = targets->add_subcommand(
      "replace", "Put a spare target in the place of an offline one in every chain (it then syncs and serves)");
  add_cluster_flags(replace, replace_flags);
  replace->add_option("OLD", old_target, "the offline target (its id in `weft status`)")->required();
  replace->add_option("NEW", new_target, "an up target in no chain, on a node none of those chains uses")->required();
  replace->add_flag("--force", replace_force,
                    "also in a chain that lost its last copy, where OLD may hold the only data left (it is lost)");
  replace->callback([] { replace_target(replace_flags, old_target, new_target, replace_force); });
  static ClusterFlags promote_flags;
  static uint64_t promote_chain = 0, promote_target_id = 0;
  static bool promote_force = false;
  auto* promote = targets->add_subcommand(
      "promote", "Make an offline target the copy of a chain that lost its last one (it serves what it holds)");
  add_cluster_flags(promote, promote_flags);
  promote->add_option("CHAIN", promote_chain, "the chain (its id in `weft status`); every target of it is offline")
      ->required();
  promote->add_option("TARGET", promote_target_id, "the offline target with the newest data left")->required();
  promote->add_flag("--force", promote_force,
                    "also a target that came back without its data while another target of the chain did not "
                    "(the others then lose what they hold)");
  promote->callback([] { promote_target(promote_flags, promote_chain, promote_target_id, promote_force); });

  auto* nodes = admin.add_subcommand("node", "Servers mgmtd knows");
  nodes->require_subcommand(1);
  static ClusterFlags remove_flags;
  static uint32_t node_id = 0;
  auto* remove = nodes->add_subcommand("remove", "Forget a node that is down and whose targets are in no chain");
  add_cluster_flags(remove, remove_flags);
  remove->add_option("ID", node_id, "the node's id in `weft status`")->required();
  remove->callback([] { remove_node(remove_flags, node_id); });
}

}  // namespace weft::cli
