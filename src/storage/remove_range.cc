// RemoveRange: every chunk of one inode in one chain from an index on, at the
// cost of the chunks that exist (truncate and the chunk GC, client/truncate.cc
// and client/chunk_gc.cc; a per-index removal would cost the file's length).
//   1. the head lists the chain's chunks of the inode from first_index (the
//      per-chain index, in (inode, index) order), at most count_max, and adds
//      the chunks of the inode in that range whose lock is held now (an
//      update on its way: the chunk may be committed on successors already
//      while it is only pending here);
//   2. each is removed exactly as RemoveRequest removes one (head_update:
//      the same routing-version, write-fence and target-state checks, the
//      chunk's lock, UPDATE_REMOVE forwarded down the chain, resync sees it
//      like any removal), a few at a time, without a dedup entry (a retry
//      removes what is left) and skipped when, under its lock, the head has
//      neither a committed nor a pending version (nothing is forwarded then);
//   3. the reply says whether more may remain (the listing was full) and from
//      which index the next call goes on (no lock is held across calls).
// The chain's protocol is unchanged (no new forward kind): servers of one
// chain may run different versions; only the head must know RemoveRange.
// g++ 12 reports a false -Wmismatched-new-delete on asio's awaitable frame
// operator delete for some coroutine bodies.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

#include <algorithm>

#include <asio/experimental/awaitable_operators.hpp>

#include "proto/storage.pb.h"
#include "storage/storage_service.h"

namespace weft::storage {
namespace {

using namespace asio::experimental::awaitable_operators;

// Chunks a call removes at most: the default, and the largest a request may ask.
// 256: with a few removals in flight (their index writes share syncs) a page
// ends well within a client's call timeout even on a slow disk.
constexpr size_t kRangeCountDefault = 256;
constexpr size_t kRangeCountMax = 4096;

// The chain's committed chunks of `inode` from `first` on: at most `count`.
struct InodeListJob {
  ChunkEngine* engine;
  uint32_t chain_id;
  uint64_t inode;
  uint64_t first;
  size_t count;
  Result<std::vector<ChunkId>> operator()() const {
    WEFT_TRY(auto listed, engine->list_chain(chain_id, ChunkId{inode, first}, count));
    std::vector<ChunkId> out;
    // Ordered by (inode, index): the inode's chunks come first, then others.
    for (const auto& info : listed) {
      if (info.id.inode != inode) break;
      out.push_back(info.id);
    }
    return out;
  }
};

}  // namespace

struct StorageService::RangePage {
  std::vector<ChunkId> ids;  // to remove, ascending
  size_t next = 0;           // the next one a worker takes
  uint64_t removed = 0;
  std::optional<Status> failure;  // the first removal that failed (the rest are not tried)
  bool more = false;
  uint64_t next_index = 0;  // with `more`
};

Task<Result<StorageService::RangePage>> StorageService::range_page(const Placement& p,
                                                                    const pb::RemoveRangeRequest& req) {
  const size_t count = req.count_max() == 0 ? kRangeCountDefault : std::min<size_t>(req.count_max(), kRangeCountMax);
  // The chunks whose lock is held (an update on its way) BEFORE the listing:
  // one that commits and lets go between the two is then in one or the other.
  std::vector<ChunkId> held;
  for (const ChunkId& id : p.target->locks().held_ids())
    if (id.inode == req.inode() && id.index >= req.first_index()) held.push_back(id);
  InodeListJob job{&p.target->engine(), req.chain_id(), req.inode(), req.first_index(), count + 1};
  WEFT_CO_TRY(auto listed, co_await pool_.run(job));
  RangePage page;
  uint64_t last = UINT64_MAX;  // the page covers [first_index, last]
  if (listed.size() > count) {
    listed.resize(count);
    last = listed.back().index;
    page.more = last != UINT64_MAX;
    page.next_index = last + 1;
  }
  page.ids = std::move(listed);
  for (const ChunkId& id : held)
    if (id.index <= last) page.ids.push_back(id);
  std::sort(page.ids.begin(), page.ids.end());
  page.ids.erase(std::unique(page.ids.begin(), page.ids.end()), page.ids.end());
  co_return page;
}

// Takes the page's chunks one after the other until they are done or one failed.
Task<void> StorageService::range_worker(const pb::RemoveRangeRequest& req, RangePage& page) {
  while (!page.failure && page.next < page.ids.size()) {
    ChainUpdate u{pb::UPDATE_REMOVE, page.ids[page.next++], 0, 0, {}, 0, 0, 0};
    bool absent = false;
    auto r = co_await head_update(req.chain_id(), req.chain_version(), Op::kRemove, u, &absent);
    if (r) {
      ++page.removed;
    } else if (!absent) {
      page.failure = r.error();
    }
  }
}

Task<Result<pb::RemoveRangeReply>> StorageService::remove_range(const pb::RemoveRangeRequest& req) {
  WEFT_CO_RETURN_IF_ERROR(check_write_fence());
  WEFT_CO_TRY(Placement p, locate(req.chain_id(), req.chain_version()));
  if (p.index != 0)
    co_return error(Code::kNotChainHead, "target {} is not the head of chain {}", p.target->id(), req.chain_id());
  WEFT_CO_TRY(RangePage page, co_await range_page(p, req));
  // Eight removals in flight (each a chain round trip and a synced index
  // write, which concurrent ones share); the workers share the page on this
  // coroutine's executor (one thread).
  auto four = [&] {
    return (range_worker(req, page) && range_worker(req, page)) && (range_worker(req, page) && range_worker(req, page));
  };
  auto workers = four() && four();
  co_await std::move(workers);
  if (page.failure) co_return error(*page.failure);
  pb::RemoveRangeReply reply;
  reply.set_removed(page.removed);
  reply.set_more(page.more);
  reply.set_next_index(page.next_index);
  co_return reply;
}

}  // namespace weft::storage
