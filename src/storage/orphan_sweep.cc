#include "storage/orphan_sweep.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/durable_file.h"
#include "common/logging.h"
#include "mgmt/cluster_state.h"

namespace weft::storage {
OrphanSweep::OrphanSweep(OrphanSweepOptions options, std::unique_ptr<InodeOracle> oracle, std::vector<Target> targets,
                         metrics::Registry& registry)
    : options_(std::move(options)), oracle_(std::move(oracle)), targets_(std::move(targets)) {
  for (const auto& t : targets_)
    removed_[t.id] = &registry.counter("weft_storage_orphan_chunks_removed_total",
                                       "Chunks removed because meta no longer has their file",
                                       {{"target", std::to_string(t.id)}});
}

OrphanSweep::~OrphanSweep() { stop(); }

OrphanSweepOptions OrphanSweep::from_grace(std::chrono::seconds grace) {
  OrphanSweepOptions o;
  o.grace = grace;
  o.interval = quarter_of_grace(grace, std::chrono::minutes(10));
  return o;
}

void OrphanSweep::start() {
  passes_.start(options_.interval, [this] { run_once(); });
}

void OrphanSweep::stop() { passes_.stop(); }

bool OrphanSweep::stopping() const { return passes_.stopping(); }

bool OrphanSweep::must_not_remove() const {
  return stopping() || (options_.write_fence && !options_.write_fence());
}

void OrphanSweep::pace(size_t count) {
  if (options_.inodes_per_s == 0) return;
  const auto due = pass_start_ + std::chrono::microseconds(asked_this_pass_ * 1000000 / options_.inodes_per_s);
  asked_this_pass_ += count;
  // Short slices: a stop must not wait for the pace.
  while (!stopping() && std::chrono::steady_clock::now() < due)
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(due - std::chrono::steady_clock::now(),
                                                                              std::chrono::milliseconds(20)));
}

std::optional<OrphanSweep::TimePoint> OrphanSweep::Orphans::first(uint64_t t, uint64_t ino) const {
  auto it = by_target.find(t);
  if (it == by_target.end()) return std::nullopt;
  auto at = std::ranges::lower_bound(it->second, ino, {}, &Orphan::ino);
  if (at == it->second.end() || at->ino != ino) return std::nullopt;
  return at->first;
}

void OrphanSweep::Orphans::forget(uint64_t t) {
  if (auto it = by_target.find(t); it != by_target.end()) {
    count -= it->second.size();
    by_target.erase(it);
  }
}

size_t OrphanSweep::orphans_timed() {
  std::lock_guard run(run_mu_);
  return since_.count;
}

uint64_t OrphanSweep::run_once() {
  std::lock_guard run(run_mu_);
  if (options_.write_fence && !options_.write_fence()) return 0;
  const auto now = std::chrono::steady_clock::now();
  pass_start_ = now;
  asked_this_pass_ = 0;
  persisted_this_pass_.clear();
  untracked_this_pass_ = 0;
  met_this_pass_ = 0;
  Orphans seen;
  uint64_t removed = 0;
  for (const Target& t : targets_) {
    std::vector<uint64_t> inos;  // ascending, distinct (an inode split across pages is taken once)
    std::optional<ChunkId> start = ChunkId{};
    while (start && !stopping()) {
      auto page = t.engine->list(start, options_.list_page);
      if (!page) {
        if (auto held = log_.admit())
          WEFT_LOG_WARN("{}: target {}: listing chunks for the orphan sweep: {}{}", options_.name, t.id, page.error(),
                        LogThrottle::held_back(*held));
        break;
      }
      for (const ChunkInfo& c : *page) {
        if (!inos.empty() && inos.back() == c.id.inode) continue;
        if (inos.size() == options_.batch) {  // a question never passes the batch (meta caps it)
          removed += judge(t, inos, now, seen);
          inos.clear();
        }
        inos.push_back(c.id.inode);
      }
      start = page->size() == options_.list_page ? page->back().id.successor() : std::nullopt;
    }
    if (!stopping()) removed += judge(t, inos, now, seen);
  }
  since_ = std::move(seen);  // an inode no longer orphaned (or gone) starts over
  if (untracked_this_pass_ > 0)
    WEFT_LOG_WARN("{}: orphan sweep: {} more inodes meta no longer has are left for later passes (at most {} are "
                  "timed at once)", options_.name, untracked_this_pass_, options_.tracked_max);
  return removed;
}

uint64_t OrphanSweep::judge(const Target& t, const std::vector<uint64_t>& inos, TimePoint now, Orphans& seen) {
  if (inos.empty()) return 0;
  pace(inos.size());
  if (stopping()) return 0;
  // The mark first: an inode made after it has an id at or above it, so a
  // file created while we ask is never judged by an answer from before. The
  // mark again after: the answers must come from that same store.
  auto before = oracle_->mark();
  auto exist = before ? oracle_->exist(inos) : Result<std::vector<bool>>(std::unexpected(before.error()));
  auto after = exist ? oracle_->mark() : Result<MetaMark>(std::unexpected(exist.error()));
  if (!after || exist->size() != inos.size()) {
    if (auto held = log_.admit())
      WEFT_LOG_WARN("{}: orphan sweep: cannot ask meta about {} inodes: {}{}", options_.name, inos.size(),
                    after ? Status(Code::kProtocol, "wrong answer count") : after.error(),
                    LogThrottle::held_back(*held));
    return 0;
  }
  if (before->ids_issued_below == 0 || before->store_id == 0) return 0;  // a meta that does not say
  if (after->store_id != before->store_id || after->ids_issued_below < before->ids_issued_below) {
    if (auto held = log_.admit())
      WEFT_LOG_WARN("{}: orphan sweep: two meta stores answered one question (ids {:x} and {:x}); nothing removed{}",
                    options_.name, before->store_id, after->store_id, LogThrottle::held_back(*held));
    return 0;
  }
  if (before->cluster_store_id != 0 && before->store_id != before->cluster_store_id) {
    if (auto held = log_.admit())
      WEFT_LOG_WARN("{}: orphan sweep: meta answers from store {:x}, but mgmtd records {:x} as the cluster's meta "
                    "store (a meta mgmtd fenced, or a routing not yet refreshed): nothing judged{}",
                    options_.name, before->store_id, before->cluster_store_id, LogThrottle::held_back(*held));
    return 0;
  }
  if (!same_store(t, *before, seen)) return 0;
  const uint64_t* below = &before->ids_issued_below;
  uint64_t removed = 0;
  std::vector<Orphan>& timed = seen.by_target[t.id];
  uint64_t fresh = 0, fresh_first = 0;  // orphans first seen now (logged below)
  for (size_t i = 0; i < inos.size(); ++i) {
    if ((*exist)[i] || inos[i] >= *below) continue;
    auto known = since_.first(t.id, inos[i]);
    if (known) {
      ++met_this_pass_;
    } else if (seen.count + (since_.count - met_this_pass_) >= options_.tracked_max) {  // met <= since_.count
      ++untracked_this_pass_;  // room kept for those timed before, which may come later in this pass
      continue;
    }
    const TimePoint first = known.value_or(now);
    timed.push_back(Orphan{inos[i], first});  // ascending: a target's inodes come so (Orphans::first searches)
    ++seen.count;
    if (!known && fresh++ == 0) fresh_first = inos[i];
    if (now - first < options_.grace) continue;
    if (must_not_remove()) break;
    bool all_gone = false;
    removed += remove_inode(t, inos[i], all_gone);
    if (all_gone) {  // nothing left to time
      timed.pop_back();
      --seen.count;
    }
  }
  if (fresh > 0)
    WEFT_LOG_INFO("{}: target {} holds chunks of {} inodes meta no longer has ({}{}): they go in {} s", options_.name,
                  t.id, fresh, fresh_first, fresh > 1 ? " and later ones" : "",
                  std::chrono::duration_cast<std::chrono::seconds>(options_.grace).count());
  return removed;
}

bool OrphanSweep::same_store(const Target& t, const MetaMark& m, Orphans& seen) {
  const std::filesystem::path file = std::filesystem::path(t.engine->dir()) / kStateFile;
  auto it = remembered_.find(t.id);
  if (it == remembered_.end()) {
    MetaMark known;
    if (std::ifstream in(file); in) {
      in >> std::hex >> known.store_id >> std::dec >> known.ids_issued_below;
      if (!in) {
        WEFT_LOG_ERROR("{}: target {}: {} is unreadable: orphan sweep stopped for this target", options_.name, t.id,
                       file.string());
        return false;
      }
    }
    it = remembered_.emplace(t.id, known).first;
  }
  MetaMark& known = it->second;
  // An accepted change: mgmtd records the new store, and meta raised its ids
  // past the old store's mark plus the margin before serving. mgmtd records
  // a store without an operator's word too (the first it hears when it has
  // no record, e.g. a lost state; one a restored mgmtd takes with
  // --accept-older-state): a fresh or foreign store's ids would stand below
  // what this target saw, and judging by it would remove live chunks. Half
  // the margin: the old meta may have issued ids past what mgmtd last heard.
  const bool raised_past = known.ids_issued_below <= UINT64_MAX - mgmt::kStoreChangeIdMargin / 2 &&
                           m.ids_issued_below >= known.ids_issued_below + mgmt::kStoreChangeIdMargin / 2;
  if (known.store_id != 0 && known.store_id != m.store_id && m.store_id == m.cluster_store_id && raised_past) {
    // mgmtd accepted the new store: the orphans judged so far (and their
    // first-seen times) were the old store's word.
    WEFT_LOG_WARN("{}: target {}: meta's store changed from {:x} to {:x}, which mgmtd records as the cluster's meta "
                  "store (an accepted `--accept-store-change`): the orphan sweep starts over with it",
                  options_.name, t.id, known.store_id, m.store_id);
    since_.forget(t.id);
    seen.forget(t.id);
    known = MetaMark{};
    persisted_this_pass_.erase(t.id);
  }
  if (known.store_id != 0 && known.store_id != m.store_id) {
    if (auto held = log_.admit())
      WEFT_LOG_ERROR("{}: target {}: meta answers from store {:x} (ids issued below {}), not {:x} as before (ids "
                     "below {}; a meta started on an empty or another store?), which mgmtd {}: orphan sweep stopped "
                     "for this target; remove {} if the new store is the one of record{}",
                     options_.name, t.id, m.store_id, m.ids_issued_below, known.store_id, known.ids_issued_below,
                     m.store_id == m.cluster_store_id
                         ? "records as the cluster's but whose ids were not raised past this target's mark (not an "
                           "accepted --accept-store-change)"
                         : "does not record as the cluster's",
                     file.string(), LogThrottle::held_back(*held));
    return false;
  }
  if (m.ids_issued_below < known.ids_issued_below) {
    if (auto held = log_.admit())
      WEFT_LOG_ERROR("{}: target {}: meta has handed out ids below {} only, fewer than the {} seen before (its store "
                     "restored from an older copy?): orphan sweep stopped for this target; remove {} if that store "
                     "is the one of record{}",
                     options_.name, t.id, m.ids_issued_below, known.ids_issued_below, file.string(),
                     LogThrottle::held_back(*held));
    return false;
  }
  if (known.store_id == m.store_id && known.ids_issued_below == m.ids_issued_below) return true;
  if (known.store_id == m.store_id && persisted_this_pass_.contains(t.id)) {
    known.ids_issued_below = m.ids_issued_below;  // the file lags until the next pass
    return true;
  }
  // Remembered before anything is removed on its word.
  if (auto r = replace_file_durably(file.string(), fmt::format("{:x} {}\n", m.store_id, m.ids_issued_below)); !r) {
    WEFT_LOG_WARN("{}: target {}: cannot write {}: {}", options_.name, t.id, file.string(), r.error());
    return false;
  }
  known = m;
  persisted_this_pass_.insert(t.id);
  return true;
}

uint64_t OrphanSweep::remove_inode(const Target& t, uint64_t ino, bool& all_gone) {
  all_gone = false;
  uint64_t removed = 0;
  bool kept = false;  // a chunk stayed (an update pending, or moved to another chain)
  std::optional<ChunkId> start = ChunkId{ino, 0};
  while (start && !must_not_remove()) {  // a huge orphan must not hold a stop, nor go on past the lease
    auto page = t.engine->list(start, options_.list_page);
    if (!page) break;
    for (const ChunkInfo& c : *page) {
      if (c.id.inode != ino) {
        start.reset();
        break;
      }
      // Only what is still as listed, with no update pending.
      auto r = t.engine->remove_if_in_chain(c.id, c.chain_id);
      if (!r) {
        if (auto held = log_.admit())
          WEFT_LOG_WARN("{}: target {}: removing orphan chunk {}: {}{}", options_.name, t.id, c.id, r.error(),
                        LogThrottle::held_back(*held));
        return removed;
      }
      if (*r) {
        ++removed;
        removed_.at(t.id)->inc();
      } else {
        kept = true;
      }
    }
    if (start) start = page->size() == options_.list_page ? page->back().id.successor() : std::nullopt;
  }
  all_gone = !start && !kept;  // listed to the end (not stopped), nothing stayed
  if (removed > 0)
    WEFT_LOG_INFO("{}: target {}: removed {} chunks of inode {}, which meta no longer has", options_.name, t.id,
                  removed, ino);
  return removed;
}

}  // namespace weft::storage
