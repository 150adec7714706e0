#include "client/storage_client.h"

namespace weft::client {
namespace {

ChunkIoOptions background_options() {
  ChunkIoOptions o;
  o.retry_time_ms_max = 2000;
  o.call_timeout_ms = 3000;  // a hung head, too, holds a pass only this long
  return o;
}

}  // namespace

StorageClient::StorageClient(std::vector<rpc::Endpoint> mgmtd, rpc::ClientOptions rpc_options,
                             std::string thread_name)
    : io_(1, std::move(thread_name)),
      rpc_(io_, std::move(rpc_options)),
      routing_(io_, rpc_, std::move(mgmtd)),
      chunks_(io_, rpc_, routing_, background_options()) {}

StorageClient::~StorageClient() {
  routing_.stop();
  io_.stop();
}

Result<void> StorageClient::start() {
  std::lock_guard lock(start_mu_);
  if (started_) return {};
  WEFT_RETURN_IF_ERROR(routing_.start());
  started_ = true;
  return {};
}

}  // namespace weft::client
