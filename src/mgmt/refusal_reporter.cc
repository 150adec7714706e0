#include "mgmt/refusal_reporter.h"

#include <algorithm>

#include "common/logging.h"
#include "mgmt/service_methods.h"
#include "proto/mgmt.pb.h"

namespace weft::mgmt {

RefusalReporter::~RefusalReporter() { stop(); }

void RefusalReporter::refused(const rpc::Endpoint& ep) {
  const auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard lock(mu_);
    if (stopping_ || queue_.size() >= kQueuedMax) return;
    auto [it, added] = last_.try_emplace(ep, now);
    if (!added) {
      if (now < it->second + interval_) return;
      it->second = now;
    }
    // The map only needs entries younger than interval_: forget the rest
    // once it grows (a client meets many servers over its life).
    if (last_.size() > 4 * kQueuedMax)
      std::erase_if(last_, [&](const auto& kv) { return now >= kv.second + interval_; });
    queue_.push_back(ep);
  }
  cv_.notify_one();
}

void RefusalReporter::start(MgmtRpc& rpc) {
  std::lock_guard lock(mu_);
  if (thread_.joinable() || stopping_) return;  // not restartable: stop() cancelled for good
  thread_ = std::thread([this, &rpc] { run(rpc); });
}

void RefusalReporter::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    queue_.clear();
  }
  cancel_.cancel();
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

uint64_t RefusalReporter::sent() const {
  std::lock_guard lock(mu_);
  return sent_;
}

void RefusalReporter::run(MgmtRpc& rpc) {
  const auto& mgmtd = rpc.addresses();
  std::unique_lock lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (stopping_) return;
    rpc::Endpoint ep = std::move(queue_.front());
    queue_.pop_front();
    if (std::any_of(mgmtd.begin(), mgmtd.end(), [&](const rpc::Endpoint& m) { return m.same_address(ep); }))
      continue;  // mgmtd cannot judge itself
    lock.unlock();
    proto::mgmt::ReportRefusalRequest req;
    req.set_address(ep.to_string());
    // mgmtd's probe takes up to about a second when the address times out.
    auto r = rpc.call<proto::mgmt::ReportRefusalReply>(kReportRefusal, req, 3000, cancel_.token());
    // Only a declaration is news; the rest (mgmtd unreachable too, a node
    // already down) would fill a client's terminal while the cluster is down.
    if (r && r->outcome() == "declared")
      WEFT_LOG_INFO("{} refused a connection: reported to mgmtd, which declared it dead", ep.to_string());
    else if (r)
      WEFT_LOG_DEBUG("{} refused a connection: reported to mgmtd ({})", ep.to_string(), r->outcome());
    else
      WEFT_LOG_DEBUG("{} refused a connection: could not report it to mgmtd: {}", ep.to_string(), r.error());
    lock.lock();
    ++sent_;
  }
}

}  // namespace weft::mgmt
