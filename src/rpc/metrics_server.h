// rpc/metrics_server.h
// Serves the Prometheus text format over HTTP/1.1 (GET /metrics; GET /health
// answers "ok"). Every `weft serve ...` process runs one on its configured
// port. Requests are tiny and answered on an I/O thread; anything else gets
// 404/405, and oversized or slow requests are cut off. A reply not taken
// within `reply_timeout` is cut off too (a peer that never reads holds a
// descriptor and the reply), and at most `connections_max` are served at
// once: more are closed as soon as accepted (gauge
// weft_metrics_server_connections, counter ..._refused_total).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "common/metrics.h"
#include "common/status.h"
#include "rpc/io_pool.h"

namespace weft::rpc {

class MetricsServer {
 public:
  struct Options {
    std::chrono::milliseconds reply_timeout{10000};
    int connections_max = 32;
  };
  MetricsServer(IoPool& io, metrics::Registry& registry = metrics::Registry::global());
  MetricsServer(IoPool& io, metrics::Registry& registry, Options options);
  ~MetricsServer();
  // Port 0 picks a free port; returns the bound one.
  Result<uint16_t> listen(const std::string& host, uint16_t port);
  void stop();

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace weft::rpc
