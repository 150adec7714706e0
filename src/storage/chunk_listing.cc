#include "storage/chunk_listing.h"

#include "proto/storage.pb.h"
#include "storage/chunk_engine.h"
#include "storage/service_methods.h"

namespace weft::storage {
namespace {

struct ListJob {
  ChunkEngine* engine;
  uint32_t chain;
  std::optional<ChunkId> start;
  size_t count_max;
  Result<std::vector<ChunkInfo>> operator()() const { return engine->list_chain(chain, start, count_max); }
};

}  // namespace

Task<Result<void>> load_local_page(DiskPool& pool, ChunkEngine& engine, mgmt::ChainId chain, size_t batch,
                                   Cursor& c) {
  auto r = co_await pool.run(ListJob{&engine, chain, c.start, batch});
  if (!r) co_return error(r.error());
  std::vector<Seen> page;
  page.reserve(r->size());
  for (const auto& i : *r) page.push_back(Seen{i.id, i.version, i.chunk_crc, i.length, i.chain_id});
  const bool more = r->size() == batch;
  c.load(std::move(page), more);
  co_return Result<void>{};
}

Task<Result<void>> load_remote_page(rpc::Client& client, const rpc::Endpoint& ep, mgmt::TargetId target,
                                    mgmt::ChainId chain, size_t batch, Cursor& c) {
  proto::storage::ListChunksRequest req;
  req.set_target_id(target);
  req.set_chain_id(chain);
  req.set_count_max(static_cast<uint32_t>(batch));
  if (c.start) {
    req.mutable_start()->set_inode(c.start->inode);
    req.mutable_start()->set_index(c.start->index);
  }
  auto r = co_await client.call<proto::storage::ListChunksReply>(ep, methods::kListChunks, req);
  if (!r) co_return error(r.error());
  std::vector<Seen> page;
  page.reserve(r->chunks_size());
  for (const auto& m : r->chunks())
    page.push_back(Seen{ChunkId{m.chunk().inode(), m.chunk().index()}, m.version(), m.chunk_crc32c(), m.length(),
                        m.chain_id()});
  c.load(std::move(page), r->more());
  co_return Result<void>{};
}

}  // namespace weft::storage
