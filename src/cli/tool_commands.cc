// Cluster tools that need no cluster state: `weft ping`.
#include <chrono>

#include "cli/commands.h"
#include "common/metrics.h"
#include "proto/rpc.pb.h"
#include "rpc/client.h"
#include "rpc/io_pool.h"

namespace weft::cli {
namespace {

struct PingOptions {
  std::string address;
  std::string token;
  int count = 3;
};

// Sends echo calls to any weft server and prints the round-trip times.
void ping(const PingOptions& o) {
  auto ep = rpc::Endpoint::parse(o.address);
  if (!ep) return fail(ep.error().message());
  rpc::IoPool io(1, "ping");
  rpc::ClientOptions co;
  co.cluster_token = o.token;
  co.name = "weft ping";
  co.call_timeout_ms = 3000;
  rpc::Client client(io, co);
  for (int i = 0; i < o.count; ++i) {
    proto::EchoRequest req;
    req.set_data("ping");
    auto start = std::chrono::steady_clock::now();
    auto r = block_on(io.at(0).get_executor(), client.call<proto::EchoReply>(*ep, rpc::kEcho, req));
    if (!r) return fail(fmt::format("ping {}: {}", o.address, r.error().message()));
    std::printf("reply from %s: time=%.3f ms\n", o.address.c_str(),
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
}

}  // namespace

void add_tool_commands(CLI::App& app) {
  static PingOptions ping_options;
  auto* p = app.add_subcommand("ping", "Check that a weft server answers (and accepts the token)");
  p->add_option("address", ping_options.address, "host:port of any weft server")->required();
  p->add_option("--token", ping_options.token, "cluster token")->envname("WEFT_CLUSTER_TOKEN");
  p->add_option("-c,--count", ping_options.count, "number of pings")->check(CLI::Range(1, 1000000));
  p->callback([] { ping(ping_options); });
}

}  // namespace weft::cli
