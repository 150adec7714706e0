#include "client/chunk_gc.h"

#include <algorithm>

#include "client/core.h"
#include "client/placement.h"
#include "client/remove_chunks.h"
#include "common/assert.h"
#include "common/logging.h"

namespace weft::client {

// Files taken from meta per pass, and chunk removals in flight at once. A
// RemoveRange call counts as the removals its head runs at once (8, see
// storage/remove_range.cc): the GC is background work, and 128 range calls
// (up to 1,024 removals) starved the foreground reads and writes.
constexpr size_t kPendingBatch = 64;
constexpr size_t kRemovesInFlight = 128;
constexpr size_t kRemovesPerRangeCall = 8;
// Passes before the next one starts at the queue's front again (see collect_once).
constexpr size_t kPassesPerRound = 16;
// Files a pass looks at, those in back-off included: a pass takes further
// batches from meta while it has fewer than kPendingBatch files to try, so a
// file in back-off costs a look rather than a share of a pass (each of which
// waits a while when it finished nothing).
constexpr size_t kLookedAtMax = kPendingBatch * kPassesPerRound;
// Files held in back-off at most (under 100 bytes each): past that a file
// that fails gets no entry and is tried at its next turn, as without back-off.
constexpr size_t kBackoffFilesMax = size_t{1} << 16;
// A pass's warning about files that stay queued is logged when a file failed
// that was not in back-off, else at most this often: files that keep failing
// are not logged at every try.
constexpr Duration kWarnInterval = std::chrono::minutes(1);

namespace {

// Whether the chain has a serving target now: a removal sent to a chain
// without one only waits out ChunkIo's retries.
Result<void> chain_served(const mgmt::RoutingInfo& routing, mgmt::ChainId id) {
  WEFT_TRY(const mgmt::ChainInfo* chain, routing.chain(id));
  WEFT_RETURN_IF_ERROR(mgmt::route_chain(*chain));
  return {};
}

}  // namespace

struct ChunkGc::Batch {
  std::vector<meta::GcItem> items;  // the files to try: those not in back-off
  size_t looked_at = 0;             // files meta handed out that the pass looked at
  size_t held = 0;                  // of those, files hooks.may_collect kept
  std::optional<meta::Ino> last;    // the last of them
  bool queue_end = false;           // none is queued after `last`
};

// One RemoveRange call of a pass: file `file`'s chunks on `chain`.
struct ChunkGc::Call {
  size_t file = 0;
  mgmt::ChainId chain = 0;
  std::optional<uint64_t> index;  // one chunk's removal; none: RemoveRange of the chain from 0
};

namespace {

// One chunk's removal in the result type of a RemoveRange call
// (ChunkIo::remove already takes an absent chunk for removed).
Task<Result<uint64_t>> remove_one(ChunkIo& chunks, ChunkAddress c) {
  auto r = co_await chunks.remove(c);
  if (!r) co_return error(r.error());
  co_return uint64_t{1};
}

}  // namespace

struct ChunkGc::Outcome {
  uint64_t chunks = 0;             // the chunks removed (as RemoveRange counts them)
  std::optional<Status> failure;   // why they are not all gone
  bool no_route = false;           // it failed only for chains with no route (no storage call failed)
};

ChunkGc::ChunkGc(std::vector<rpc::Endpoint> mgmtd, rpc::ClientOptions rpc_options, ChunkGcHooks hooks,
                 ChunkGcOptions options, const Clock& clock)
    : storage_(std::make_unique<StorageClient>(std::move(mgmtd), std::move(rpc_options), "chunk-gc")),
      hooks_(std::move(hooks)),
      options_(options),
      clock_(clock) {
  WEFT_ASSERT_MSG(options_.backoff_first.count() > 0 && options_.backoff_max >= options_.backoff_first,
                  "chunk gc back-off needs 0 < backoff_first <= backoff_max");
}

ChunkGc::~ChunkGc() {
  stop();
}

void ChunkGc::start() {
  stopping_ = false;
  thread_.emplace(PeriodicThread::Wait::zero(), [this] { return tick(); });
}

void ChunkGc::stop() {
  stopping_ = true;  // the pass running ends at its next wave
  if (thread_) thread_->stop();
}

Result<ChunkGc::Pass> ChunkGc::collect_once() {
  if (hooks_.may_run && !hooks_.may_run()) return Pass{.queue_end = true};  // not now: the next pass asks again
  WEFT_RETURN_IF_ERROR(storage_->start());
  auto routing = storage_->routing().current();
  const TimePoint now = clock_.now();
  // A new routing version may have a chain serve again: the files that wait
  // for want of a route are tried at once (while their chain still has no
  // serving target, a try costs no storage call). Files that failed in
  // storage keep their wait: a new version says nothing of that failure.
  if (routing->version != backoff_routing_version_) {
    for (auto& [ino, b] : backoff_)
      if (b.no_route) b.next_try = std::min(b.next_try, now);
    backoff_routing_version_ = routing->version;
  }
  WEFT_TRY(Batch batch, take_batch(now));
  std::vector<Outcome> outcomes = remove_chunks(batch.items, *routing);
  const TimePoint end = clock_.now();
  const bool new_failure = note_outcomes(batch.items, outcomes, end);
  std::vector<meta::Ino> done;
  uint64_t chunks = 0;
  const Status* first_failure = nullptr;
  for (size_t k = 0; k < batch.items.size(); ++k) {
    if (outcomes[k].failure) {
      if (!first_failure) first_failure = &*outcomes[k].failure;
      continue;
    }
    done.push_back(batch.items[k].ino);
    chunks += outcomes[k].chunks;
  }
  if (!done.empty()) WEFT_RETURN_IF_ERROR(hooks_.done(done));  // one commit for the pass
  // The files the pass looked at and could not finish lie before the cursor
  // now, so the next pass takes new ones rather than the same failing head of
  // the queue again (after a failed done commit, the next pass starts where
  // this one did; the files that failed in it wait in back-off all the same).
  // A round ends at the queue's end, or after kPassesPerRound passes that
  // finished something: files are queued above the cursor (inode numbers only
  // grow), so under steady unlinks the cursor would chase the tail and never
  // come back to the files below it. Passes that finished nothing do not
  // count: more files failing for good at the queue's front than that many
  // passes take would otherwise end every round before the files behind them.
  if (!done.empty()) ++passes_this_round_;
  bool go_on = !batch.queue_end && passes_this_round_ < kPassesPerRound;
  resume_after_ = go_on ? batch.last : std::nullopt;
  if (!go_on) passes_this_round_ = 0;
  files_.fetch_add(done.size());
  chunks_.fetch_add(chunks);
  if (first_failure && (new_failure || !last_warning_ || end - *last_warning_ >= kWarnInterval)) {
    last_warning_ = end;
    WEFT_LOG_WARN("chunk gc: {} of {} files stay queued ({} files in back-off): {}", batch.items.size() - done.size(),
                  batch.items.size(), backoff_.size(), *first_failure);
  }
  return Pass{batch.looked_at, batch.looked_at - batch.items.size(), done.size(), batch.queue_end, batch.held};
}

Result<ChunkGc::Batch> ChunkGc::take_batch(TimePoint now) {
  Batch b;
  b.last = resume_after_;
  while (b.items.size() < kPendingBatch && b.looked_at < kLookedAtMax) {
    const std::optional<meta::Ino> after = b.last;
    WEFT_TRY(auto got, hooks_.pending(kPendingBatch, after));
    const bool to_end = got.size() < kPendingBatch;
    forget_unqueued(after, got, to_end);
    size_t k = 0;
    for (; k < got.size() && b.items.size() < kPendingBatch; ++k) {
      b.last = got[k].ino;
      ++b.looked_at;
      auto wait = backoff_.find(got[k].ino);
      if (wait != backoff_.end() && wait->second.next_try > now) continue;
      if (hooks_.may_collect && !hooks_.may_collect(got[k])) {
        ++b.held;
        continue;
      }
      b.items.push_back(std::move(got[k]));
    }
    if (to_end && k == got.size()) {
      b.queue_end = true;
      break;
    }
  }
  return b;
}

void ChunkGc::forget_unqueued(std::optional<meta::Ino> after, const std::vector<meta::GcItem>& got, bool to_end) {
  auto it = after ? backoff_.upper_bound(*after) : backoff_.begin();
  const auto end = to_end || got.empty() ? backoff_.end() : backoff_.upper_bound(got.back().ino);
  size_t k = 0;  // got is in inode order
  while (it != end) {
    while (k < got.size() && got[k].ino < it->first) ++k;
    if (k < got.size() && got[k].ino == it->first) {
      ++it;
    } else {
      it = backoff_.erase(it);
    }
  }
}

// The chunks of every file of a pass are removed together: one RemoveRange
// per chain of each file's stripe (it costs the chunks there are, not the
// file's length, and has no upper bound: chunks a crashed writer sent past
// the length meta knows go too), or for a file of fewer chunks than chains
// one removal per chunk, in waves of at most kRemovesInFlight removals
// (a pass of small files is one wave rather than a round trip per file).
// Chains with no serving target are not called (the file fails at once, its
// other chains are cleaned); a file one of whose calls failed gets no more
// this pass (what went stays gone: its next try costs what is left). A chain
// whose head predates RemoveRange gets per-index removals of the file's
// length instead (remove_chunks.h). stop() is heeded between waves.
std::vector<ChunkGc::Outcome> ChunkGc::remove_chunks(const std::vector<meta::GcItem>& items,
                                                     const mgmt::RoutingInfo& routing) {
  std::vector<Outcome> outcomes(items.size());
  std::vector<FileChunks> files(items.size());
  std::vector<Call> calls;  // in file order
  auto fail = [&](size_t k, const Status& why) {
    if (!outcomes[k].failure) outcomes[k].failure = why.with_context(fmt::format("gc of file {}", items[k].ino));
  };
  for (size_t k = 0; k < items.size(); ++k) {
    const meta::Layout& layout = items[k].inode.layout;
    // Meta queues no empty file (it never had a length to report); one handed out is done.
    if (items[k].inode.size == 0) continue;
    auto stripe = stripe_chains(layout, routing);
    if (!stripe) {
      fail(k, stripe.error());
      outcomes[k].no_route = true;
      continue;
    }
    files[k] = FileChunks{items[k].ino, layout.chunk_bytes, std::move(*stripe)};
    // A file of fewer chunks than its stripe has chains (a dataset's small
    // files): one removal per chunk meta knows, fewer calls than one
    // RemoveRange per chain. A file whose last writer died is queued by
    // meta's session reaper as reaching every chain (MetaStore::close_dead),
    // so what that writer stored past its reports goes by range too.
    const uint64_t known = meta::chunk_count(items[k].inode.size, layout.chunk_bytes);
    const std::vector<mgmt::ChainId> chains = distinct_chains(files[k].stripe);
    std::vector<Call> mine;
    if (known < chains.size()) {
      for (uint64_t i = 0; i < known; ++i) mine.push_back({k, chain_of_chunk(files[k].stripe, i), i});
    } else {
      for (mgmt::ChainId chain : chains) mine.push_back({k, chain, std::nullopt});
    }
    for (const Call& c : mine) {
      auto served = chain_served(routing, c.chain);
      if (served) {
        calls.push_back(c);
        continue;
      }
      fail(k, served.error());
      outcomes[k].no_route = true;
    }
  }
  std::vector<Call> fallback;  // chains whose head answered kUnknownMethod
  auto storage_failed = [&](size_t k, const Status& why) {
    fail(k, why);
    // Storage failed it: a new routing version says nothing of that, so the
    // file keeps its whole wait.
    outcomes[k].no_route = false;
  };
  for (size_t next = 0; next < calls.size();) {
    if (stopping_.load()) break;
    std::vector<Task<Result<uint64_t>>> tasks;
    std::vector<size_t> sent;  // indexes into calls
    for (size_t in_flight = 0; next < calls.size() && in_flight < kRemovesInFlight; ++next) {
      const Call& c = calls[next];
      if (outcomes[c.file].failure && !outcomes[c.file].no_route) continue;  // a call of it failed in storage
      if (c.index) {
        tasks.push_back(remove_one(storage_->chunks(), {items[c.file].ino, *c.index, c.chain, files[c.file].chunk_bytes}));
        in_flight += 1;
      } else {
        tasks.push_back(storage_->chunks().remove_from(items[c.file].ino, c.chain, 0, &stopping_));
        in_flight += kRemovesPerRangeCall;
      }
      sent.push_back(next);
    }
    auto results = run_parallel(storage_->io(), std::move(tasks));
    for (size_t j = 0; j < results.size(); ++j) {
      const Call& c = calls[sent[j]];
      if (results[j]) {
        outcomes[c.file].chunks += *results[j];
      } else if (results[j].error().code() == Code::kUnknownMethod) {
        fallback.push_back(c);
      } else {
        storage_failed(c.file, results[j].error());
      }
    }
  }
  for (const Call& c : fallback) {
    if (outcomes[c.file].failure && !outcomes[c.file].no_route) continue;
    const uint64_t end = meta::chunk_count(items[c.file].inode.size, files[c.file].chunk_bytes);
    auto r = remove_each(storage_->chunks(), files[c.file], c.chain, 0, end, [this] { return stopping_.load(); });
    if (!r) storage_failed(c.file, r.error());
  }
  // Files a stop left unfinished stay queued (their next pass finds what is left).
  if (stopping_.load())
    for (size_t k = 0; k < items.size(); ++k)
      if (!outcomes[k].failure) fail(k, Status(Code::kCancelled, "the chunk gc is stopping"));
  return outcomes;
}

bool ChunkGc::note_outcomes(const std::vector<meta::GcItem>& items, const std::vector<Outcome>& outcomes,
                            TimePoint now) {
  bool new_failure = false;
  for (size_t k = 0; k < items.size(); ++k) {
    if (!outcomes[k].failure) {
      backoff_.erase(items[k].ino);
      continue;
    }
    auto it = backoff_.find(items[k].ino);
    if (it == backoff_.end()) {
      if (backoff_.size() >= kBackoffFilesMax) continue;
      it = backoff_.try_emplace(items[k].ino).first;
      new_failure = true;
      it->second.delay = std::min<Duration>(options_.backoff_first, options_.backoff_max);
    } else {
      it->second.delay = std::min<Duration>(2 * it->second.delay, options_.backoff_max);
    }
    it->second.next_try = now + it->second.delay;
    it->second.no_route = outcomes[k].no_route;
  }
  backoff_files_.store(backoff_.size());
  return new_failure;
}

PeriodicThread::Wait ChunkGc::tick() {
  auto r = collect_once();
  // Meta or mgmtd failing fails every pass alike: a line a minute says so.
  if (!r)
    if (auto held = pass_errors_.admit()) WEFT_LOG_WARN("chunk gc: {}{}", r.error(), LogThrottle::held_back(*held));
  // More is queued and the pass got somewhere: go on at once. A pass that
  // finished nothing waits before going on past its files, which bounds the
  // work spent on a queue whose storage is unreachable; unless it only
  // passed over files (some that may not go yet: held, or queued just now):
  // those cost no storage call, and waiting at each 1,024 of them would
  // leave the files behind them waiting for minutes under a steady stream
  // of unlinks.
  bool more = r && !r->queue_end && (r->finished > 0 || (r->held > 0 && r->taken == r->waiting));
  return more ? PeriodicThread::Wait::zero() : PeriodicThread::Wait(options_.interval);
}

}  // namespace weft::client
