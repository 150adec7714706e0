#include "storage/stray_sweep.h"

#include <algorithm>
#include <string_view>

#include "common/fault.h"
#include "common/logging.h"

namespace weft::storage {
namespace {

bool holds(const mgmt::ChainInfo& chain, mgmt::TargetId target) {
  return std::any_of(chain.entries.begin(), chain.entries.end(),
                     [&](const mgmt::ChainEntry& e) { return e.target_id == target; });
}

constexpr size_t kPage = 256;

}  // namespace

StraySweep::StraySweep(StraySweepOptions options, RoutingProvider& routing, std::vector<Target> targets,
                       metrics::Registry& registry)
    : options_(std::move(options)), routing_(routing), targets_(std::move(targets)) {
  for (const auto& t : targets_)
    removed_[t.id] = &registry.counter("weft_storage_stray_chunks_removed_total",
                                       "Chunks removed because their target left their chain",
                                       {{"target", std::to_string(t.id)}});
}

StraySweep::~StraySweep() { stop(); }

StraySweepOptions StraySweep::from_grace(std::chrono::seconds grace) {
  StraySweepOptions o;
  o.grace = grace;
  o.interval = quarter_of_grace(grace, std::chrono::minutes(1));
  return o;
}

void StraySweep::start() {
  passes_.start(options_.interval, [this] { run_once(); });
}

void StraySweep::stop() { passes_.stop(); }

bool StraySweep::sweeping(mgmt::TargetId target, mgmt::ChainId chain) const {
  if (sweeping_count_.load() == 0) return false;
  std::lock_guard lock(mu_);
  return sweeping_.contains(Key{target, chain});
}

bool StraySweep::stray(mgmt::TargetId target, mgmt::ChainId chain) const {
  RoutingSnapshot routing = routing_.current();
  auto c = routing->chain(chain);
  return c && !holds(**c, target);
}

uint64_t StraySweep::run_once() {
  std::lock_guard run(run_mu_);
  if (options_.write_fence && !options_.write_fence()) return 0;
  RoutingSnapshot routing = routing_.current();
  if (routing->version == 0) return 0;  // no routing yet: every chain looks foreign
  auto now = std::chrono::steady_clock::now();
  std::set<Key> seen;
  uint64_t removed = 0;
  for (const auto& t : targets_) {
    auto chains = t.engine->chains();
    if (!chains) {
      if (auto held = error_log_.admit())
        WEFT_LOG_WARN("{}: target {}: listing its chains: {}{}", options_.name, t.id, chains.error(),
                      LogThrottle::held_back(*held));
      continue;
    }
    for (mgmt::ChainId chain : *chains) {
      auto c = routing->chain(chain);
      if (!c || holds(**c, t.id)) continue;
      Key key{t.id, chain};
      seen.insert(key);
      auto [since, fresh] = since_.try_emplace(key, now);
      if (fresh)
        WEFT_LOG_WARN("{}: target {} holds chunks of chain {}, which it is not in at routing version {}: they go in "
                      "{} s unless it rejoins the chain",
                      options_.name, t.id, chain, routing->version,
                      std::chrono::duration_cast<std::chrono::seconds>(options_.grace).count());
      if (now - since->second < options_.grace) continue;
      removed += sweep_chain(t, chain);
      if (passes_.stopping()) return removed;
    }
  }
  std::erase_if(since_, [&](const auto& e) { return !seen.contains(e.first); });
  return removed;
}

uint64_t StraySweep::sweep_chain(const Target& t, mgmt::ChainId chain) {
  Key key{t.id, chain};
  {
    std::lock_guard lock(mu_);
    sweeping_.insert(key);
    sweeping_count_.fetch_add(1);
  }
  struct Unmark {
    StraySweep* self;
    Key key;
    ~Unmark() {
      std::lock_guard lock(self->mu_);
      self->sweeping_.erase(key);
      self->sweeping_count_.fetch_sub(1);
    }
  } unmark{this, key};

  uint64_t removed = 0;
  const char* ended = "done";
  std::optional<ChunkId> start;
  for (bool more = true; more && !passes_.stopping();) {
    auto page = t.engine->list_chain(chain, start, kPage);
    if (!page) {
      if (auto held = error_log_.admit())
        WEFT_LOG_WARN("{}: target {}: listing chunks of chain {}: {}{}", options_.name, t.id, chain, page.error(),
                      LogThrottle::held_back(*held));
      ended = "interrupted";
      break;
    }
    more = page->size() == kPage;
    if (more) {
      start = page->back().id.successor();
      more = start.has_value();
    }
    for (const ChunkInfo& info : *page) {
      if (info.chain_id != chain) continue;  // unknown chain: may be anyone's
      // Read after the mark (see the header): a rejoin seen here stops the sweep.
      if (!stray(t.id, chain)) {
        ended = "stopped: the target is in the chain again";
        more = false;
        break;
      }
      // Tests: hold the sweep between its routing check and the removal.
      while (WEFT_FAULT("storage.stray_sweep.before_remove") && !passes_.stopping())
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      if (passes_.stopping() || (options_.write_fence && !options_.write_fence())) {
        ended = "interrupted";
        more = false;
        break;
      }
      auto r = t.engine->remove_if_in_chain(info.id, chain);
      if (!r) {
        if (auto held = error_log_.admit())
          WEFT_LOG_WARN("{}: target {}: removing chunk {} of chain {}, which it left: {}{}", options_.name, t.id,
                        info.id, chain, r.error(), LogThrottle::held_back(*held));
        ended = "interrupted";
        more = false;
        break;
      }
      if (*r) {
        ++removed;
        removed_.at(t.id)->inc();
      }
    }
  }
  if (removed > 0 || std::string_view(ended) != "done")
    WEFT_LOG_INFO("{}: target {}: {} chunks of chain {}, which it left, removed ({})", options_.name, t.id, removed,
                  chain, ended);
  return removed;
}

}  // namespace weft::storage
