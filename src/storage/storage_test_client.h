// storage/storage_test_client.h
// A small synchronous client of the storage service for tests, tools and
// benchmarks (the real client with routing cache, striping and retries lives
// in src/client). Calls block the calling thread, which must not be an I/O
// thread of `io`.
#pragma once

#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/crc32c.h"
#include "mgmt/routing.h"
#include "proto/storage.pb.h"
#include "rpc/client.h"
#include "storage/chunk_id.h"
#include "storage/service_methods.h"

namespace weft::storage::testing {

struct ChainSpec {
  mgmt::ChainId id = 1;
  mgmt::ChainVersion version = 1;
  std::vector<std::pair<mgmt::TargetId, mgmt::TargetState>> entries;
};

struct ReadOut {
  proto::storage::RangeResult result;
  std::vector<std::byte> data;
};

class StorageTestClient {
 public:
  // `refusals`: told of refused connections, as a real client's (mgmt/refusal_reporter.h).
  StorageTestClient(rpc::IoPool& io, const std::string& token, uint64_t client_id = 0,
                    std::shared_ptr<rpc::RefusalListener> refusals = nullptr)
      : io_(io), client_(io, options(token, client_id, std::move(refusals))) {}

  rpc::Client& raw() { return client_; }

  template <class Resp, class Req>
  Result<Resp> call(const rpc::Endpoint& ep, rpc::MethodId m, const Req& req, rpc::CallOptions o = {},
                    rpc::RawResponse* raw = nullptr) {
    return block_on(io_.at(0).get_executor(), client_.call<Resp>(ep, m, req, std::move(o), raw));
  }

  Result<proto::storage::WriteReply> write(const rpc::Endpoint& ep, mgmt::ChainId chain, mgmt::ChainVersion cv,
                                           ChunkId id, uint32_t offset, std::span<const std::byte> data,
                                           uint64_t client_id = 0, uint64_t seq = 0, uint32_t chunk_size = 0) {
    proto::storage::WriteRequest req;
    req.set_chain_id(chain);
    req.set_chain_version(cv);
    req.mutable_chunk()->set_inode(id.inode);
    req.mutable_chunk()->set_index(id.index);
    req.set_offset(offset);
    req.set_length(static_cast<uint32_t>(data.size()));
    req.set_data_crc32c(crc32c(data));
    req.set_chunk_size(chunk_size);
    req.set_client_id(client_id);
    req.set_sequence(seq);
    rpc::CallOptions o;
    o.payload.push_back(data);
    return call<proto::storage::WriteReply>(ep, methods::kWrite, req, std::move(o));
  }

  // One range; the call itself failing is the outer error, the range's status is in result.code.
  Result<ReadOut> read(const rpc::Endpoint& ep, mgmt::ChainId chain, mgmt::ChainVersion cv, ChunkId id,
                       uint32_t offset, uint32_t length) {
    proto::storage::BatchReadRequest req;
    auto* r = req.add_ranges();
    r->set_chain_id(chain);
    r->set_chain_version(cv);
    r->mutable_chunk()->set_inode(id.inode);
    r->mutable_chunk()->set_index(id.index);
    r->set_offset(offset);
    r->set_length(length);
    rpc::RawResponse raw;
    auto reply = call<proto::storage::BatchReadReply>(ep, methods::kBatchRead, req, {}, &raw);
    if (!reply) return error(reply.error());
    ReadOut out;
    out.result = reply->results(0);
    auto bytes = raw.payload.span().first(raw.payload_len);
    out.data.assign(bytes.begin(), bytes.end());
    return out;
  }

  Result<proto::storage::RemoveReply> remove(const rpc::Endpoint& ep, mgmt::ChainId chain, mgmt::ChainVersion cv,
                                             ChunkId id) {
    proto::storage::RemoveRequest req;
    req.set_chain_id(chain);
    req.set_chain_version(cv);
    req.mutable_chunk()->set_inode(id.inode);
    req.mutable_chunk()->set_index(id.index);
    return call<proto::storage::RemoveReply>(ep, methods::kRemove, req);
  }

  // One RemoveRange call: `inode`'s chunks of the chain from `first` on, at most `count_max` (0: the server's default).
  Result<proto::storage::RemoveRangeReply> remove_range(const rpc::Endpoint& ep, mgmt::ChainId chain,
                                                        mgmt::ChainVersion cv, uint64_t inode, uint64_t first,
                                                        uint32_t count_max = 0) {
    proto::storage::RemoveRangeRequest req;
    req.set_chain_id(chain);
    req.set_chain_version(cv);
    req.set_inode(inode);
    req.set_first_index(first);
    req.set_count_max(count_max);
    return call<proto::storage::RemoveRangeReply>(ep, methods::kRemoveRange, req);
  }

  Result<proto::storage::ListChunksReply> list(const rpc::Endpoint& ep, mgmt::TargetId target) {
    proto::storage::ListChunksRequest req;
    req.set_target_id(target);
    req.set_count_max(65536);
    return call<proto::storage::ListChunksReply>(ep, methods::kListChunks, req);
  }

  Result<proto::storage::TargetStatusReply> status(const rpc::Endpoint& ep, mgmt::TargetId target) {
    proto::storage::TargetStatusRequest req;
    req.set_target_id(target);
    return call<proto::storage::TargetStatusReply>(ep, methods::kTargetStatus, req);
  }

  // Sends the routing (targets at their servers' addresses, `chains`) to `servers`.
  Result<void> set_routing(const std::vector<rpc::Endpoint>& servers,
                           const std::vector<std::pair<mgmt::TargetId, std::string>>& targets,
                           const std::vector<ChainSpec>& chains, uint64_t routing_version) {
    proto::storage::SetRoutingRequest req;
    auto* r = req.mutable_routing();
    r->set_version(routing_version);
    for (auto& [id, address] : targets) {
      auto* t = r->add_targets();
      t->set_id(id);
      t->set_address(address);
    }
    for (auto& c : chains) {
      auto* pc = r->add_chains();
      pc->set_id(c.id);
      pc->set_version(c.version);
      for (auto& [t, s] : c.entries) {
        auto* e = pc->add_entries();
        e->set_target_id(t);
        e->set_state(static_cast<uint32_t>(s));
      }
    }
    for (auto& ep : servers) {
      auto reply = call<proto::storage::SetRoutingReply>(ep, methods::kSetRouting, req);
      if (!reply) return error(reply.error().with_context("set routing on " + ep.to_string()));
    }
    return {};
  }

 private:
  static rpc::ClientOptions options(const std::string& token, uint64_t client_id,
                                    std::shared_ptr<rpc::RefusalListener> refusals) {
    rpc::ClientOptions o;
    o.refusals = std::move(refusals);
    o.cluster_token = token;
    o.client_id = client_id;
    o.call_timeout_ms = 10000;
    o.connect_timeout_ms = 1000;
    o.backoff_max_ms = 200;
    return o;
  }

  rpc::IoPool& io_;
  rpc::Client client_;
};

}  // namespace weft::storage::testing
