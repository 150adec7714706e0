// mgmt/refusal_reporter.h
// The peers' side of early failure detection (mgmt/refusal_probe.h): an
// rpc::RefusalListener, set as rpc::ClientOptions::refusals of the
// connections a storage server or a client makes to storage servers, that
// tells mgmtd (ReportRefusal) of every address whose host refused a
// connection. refused() only queues; a thread of its own sends. An address
// is reported at most once per `interval` (every retry of every caller meets
// the same refusal), at most kQueuedMax wait (more are dropped: the lease
// still finds the node), and mgmtd's own addresses are never reported.
// Threading: thread-safe; refused() never blocks.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "mgmt/mgmt_rpc.h"
#include "rpc/cancel.h"
#include "rpc/client.h"
#include "rpc/endpoint.h"

namespace weft::mgmt {

class RefusalReporter final : public rpc::RefusalListener {
 public:
  static constexpr size_t kQueuedMax = 64;

  explicit RefusalReporter(std::chrono::milliseconds interval = std::chrono::seconds(1)) : interval_(interval) {}
  ~RefusalReporter() override;
  RefusalReporter(const RefusalReporter&) = delete;
  RefusalReporter& operator=(const RefusalReporter&) = delete;

  void refused(const rpc::Endpoint& ep) override;
  // Starts sending over `rpc`, which must outlive stop(). Reports queued
  // before are sent then.
  void start(MgmtRpc& rpc);
  // Idempotent and final (a later start() does nothing); what is still
  // queued is dropped, a report under way cancelled.
  void stop();
  uint64_t sent() const;

 private:
  void run(MgmtRpc& rpc);

  const std::chrono::milliseconds interval_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<rpc::Endpoint> queue_;                                      // GUARDED_BY(mu_)
  std::map<rpc::Endpoint, std::chrono::steady_clock::time_point> last_;  // GUARDED_BY(mu_)
  bool stopping_ = false;                                                // GUARDED_BY(mu_)
  rpc::CancelSource cancel_;  // ends a report under way at stop()
  uint64_t sent_ = 0;                                                    // GUARDED_BY(mu_)
  std::thread thread_;
};

}  // namespace weft::mgmt
