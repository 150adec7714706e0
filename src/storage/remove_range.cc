// RemoveRange: every chunk of one inode in one chain from an index on, at the
// cost of the chunks that exist (truncate and the chunk GC, client/truncate.cc
// and client/chunk_gc.cc; a per-index removal would cost the file's length).
//   1. the head lists the chain's chunks of the inode from first_index (the
//      per-chain index, in (inode, index) order), at most count_max, and adds
//      the chunks of the inode in that range whose lock is held now (an
//      update on its way: the chunk may be committed on successors already
//      while it is only pending here) and those the other write-path members
//      list (ListChunks): a member may hold a chunk the head does not (the
//      head aborted its stage after a forward the member had applied failed,
//      and the writer never retried); left there, it would come back as the
//      content of a hole when the file grows again;
//   2. each is removed exactly as RemoveRequest removes one (head_update:
//      the same routing-version, write-fence and target-state checks, the
//      chunk's lock, UPDATE_REMOVE forwarded down the chain, resync sees it
//      like any removal), a few at a time, without a dedup entry (a retry
//      removes what is left) and skipped when, under its lock, the head has
//      neither a committed nor a pending version, or has it in another chain
//      (a held lock names a chunk id only; a target serves several chains),
//      unless a member listed it
//      (nothing is forwarded then);
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
#include "storage/service_methods.h"
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
    WEFT_TRY(auto listed, engine->list_chain(chain_id, ChunkId{inode, first}, count, ChunkId::past_inode(inode)));
    std::vector<ChunkId> out;
    out.reserve(listed.size());
    for (const auto& info : listed) out.push_back(info.id);
    return out;
  }
};

// Of a listing cut to `count`: the last index it covers (UINT64_MAX: all).
uint64_t cut_to(std::vector<ChunkId>& listed, size_t count) {
  if (listed.size() <= count) return UINT64_MAX;
  listed.resize(count);
  return listed.back().index;
}

}  // namespace

struct StorageService::RangePage {
  std::vector<ChunkId> ids;       // to remove, ascending
  std::vector<ChunkId> elsewhere;  // of ids, those another member listed (ascending): forwarded even when absent here
  size_t next = 0;           // the next one a worker takes
  uint64_t removed = 0;
  std::optional<Status> failure;  // the first removal that failed (the rest are not tried)
  bool more = false;
  uint64_t next_index = 0;  // with `more`
};

// The inode's chunks of the chain on write-path member `i` (not the head) from
// first_index up to `*last`, which it lowers to where its listing of `count`
// chunks ended (a full one: more may follow).
Task<Result<std::vector<ChunkId>>> StorageService::range_list_member(const Placement& p, size_t i,
                                                                     const pb::RemoveRangeRequest& req, size_t count,
                                                                     uint64_t* last) {
  const mgmt::TargetId member = p.route.write_path[i];
  WEFT_CO_TRY(std::string address, p.routing->target_address(member));
  WEFT_CO_TRY(rpc::Endpoint ep, rpc::Endpoint::parse(address));
  pb::ListChunksRequest list;
  list.set_target_id(member);
  list.set_chain_id(req.chain_id());
  list.set_count_max(static_cast<uint32_t>(count + 1));
  list.mutable_start()->set_inode(req.inode());
  list.mutable_start()->set_index(req.first_index());
  if (auto end = ChunkId::past_inode(req.inode())) {
    list.mutable_end()->set_inode(end->inode);
    list.mutable_end()->set_index(end->index);
  }
  auto r = co_await client_.call<pb::ListChunksReply>(ep, methods::kListChunks, list);
  if (!r) co_return error(r.error().with_context(fmt::format("list chunks of inode {} on target {}", req.inode(), member)));
  // The bound comes from the whole listing: a chunk of unknown chain (written
  // before chains were recorded) is listed too and counts toward the page,
  // though it is left alone (it may be another chain's).
  std::vector<std::pair<ChunkId, uint32_t>> listed;
  for (const auto& c : r->chunks()) {
    if (c.chunk().inode() != req.inode()) break;  // a member that predates `end` lists on
    listed.emplace_back(ChunkId{c.chunk().inode(), c.chunk().index()}, c.chain_id());
  }
  if (listed.size() > count) {
    listed.resize(count);
    *last = std::min(*last, listed.back().first.index);
  }
  std::vector<ChunkId> out;
  for (const auto& [id, chain] : listed)
    if (chain == req.chain_id() && id.index <= *last) out.push_back(id);
  co_return out;
}

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
  // The page covers [first_index, last]: up to where every listing is complete.
  uint64_t last = cut_to(listed, count);
  RangePage page;
  for (size_t i = 1; i < p.route.write_path.size(); ++i) {
    WEFT_CO_TRY(auto theirs, co_await range_list_member(p, i, req, count, &last));
    page.elsewhere.insert(page.elsewhere.end(), theirs.begin(), theirs.end());
  }
  if (last != UINT64_MAX) {
    page.more = true;
    page.next_index = last + 1;
  }
  auto beyond = [last](const ChunkId& id) { return id.index > last; };
  std::erase_if(page.elsewhere, beyond);
  std::sort(page.elsewhere.begin(), page.elsewhere.end());
  page.elsewhere.erase(std::unique(page.elsewhere.begin(), page.elsewhere.end()), page.elsewhere.end());
  page.ids = std::move(listed);
  page.ids.insert(page.ids.end(), held.begin(), held.end());
  page.ids.insert(page.ids.end(), page.elsewhere.begin(), page.elsewhere.end());
  std::erase_if(page.ids, beyond);
  std::sort(page.ids.begin(), page.ids.end());
  page.ids.erase(std::unique(page.ids.begin(), page.ids.end()), page.ids.end());
  co_return page;
}

// Takes the page's chunks one after the other until they are done or one failed.
Task<void> StorageService::range_worker(const pb::RemoveRangeRequest& req, RangePage& page) {
  while (!page.failure && page.next < page.ids.size()) {
    ChainUpdate u{pb::UPDATE_REMOVE, page.ids[page.next++], 0, 0, {}, 0, 0, 0};
    bool absent = false;
    bool listed_elsewhere = std::binary_search(page.elsewhere.begin(), page.elsewhere.end(), u.id);
    auto r = co_await head_update(req.chain_id(), req.chain_version(), Op::kRemove, u,
                                  listed_elsewhere ? nullptr : &absent);
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
  pb::RemoveRangeReply reply;
  reply.set_more(page.more);
  reply.set_next_index(page.next_index);
  // A truncate asks every chain of the stripe, most of which hold nothing of a small file.
  if (page.ids.empty()) co_return reply;
  // Eight removals in flight (each a chain round trip and a synced index
  // write, which concurrent ones share); the workers share the page on this
  // coroutine's executor (one thread).
  auto four = [&] {
    return (range_worker(req, page) && range_worker(req, page)) && (range_worker(req, page) && range_worker(req, page));
  };
  auto workers = four() && four();
  co_await std::move(workers);
  if (page.failure) co_return error(*page.failure);
  reply.set_removed(page.removed);
  co_return reply;
}

}  // namespace weft::storage
