// storage/service_methods.h
// Stable method numbers of the storage service (service 3); messages in
// proto/storage.proto. Numbers are wire format: never reuse or renumber.
#pragma once

#include <cstddef>
#include <cstdint>

#include "rpc/frame.h"
#include "rpc/method.h"

namespace weft::storage::methods {

using rpc::MethodId;
inline constexpr uint16_t kService = rpc::service::kStorage;

// Data path (clients).
inline constexpr MethodId kBatchRead{kService, 1};
inline constexpr MethodId kWrite{kService, 2};
inline constexpr MethodId kRemove{kService, 3};
inline constexpr MethodId kTruncate{kService, 4};
inline constexpr MethodId kGetChunkMeta{kService, 5};
inline constexpr MethodId kListChunks{kService, 6};
inline constexpr MethodId kRemoveRange{kService, 7};  // RemoveRangeRequest: an inode's chunks from an index on

// Chain-internal: the reply of kForward is the commit acknowledgement.
inline constexpr MethodId kForward{kService, 20};
inline constexpr MethodId kSyncDone{kService, 21};
inline constexpr MethodId kRepairChunk{kService, 22};  // to the head: repair a member's corrupt chunk

// Admin.
inline constexpr MethodId kSetRouting{kService, 40};
inline constexpr MethodId kTargetStatus{kService, 41};

}  // namespace weft::storage::methods

namespace weft::storage {

// Limits of one BatchRead (past them: kTooBig). At most kBatchReadRangesMax
// ranges, and buffers (the engine's block-aligned ones) of at most
// kBatchReadBytesMax in all: what one reply payload may carry (a receiver
// closes the connection on a larger frame). The reply body holds one result per
// range, its error message cut to kRangeMessageBytesMax (batch_read.cc checks
// that the largest body fits a frame).
inline constexpr int kBatchReadRangesMax = 4096;
inline constexpr uint64_t kBatchReadBytesMax = rpc::FrameLimits{}.payload_max;
inline constexpr size_t kRangeMessageBytesMax = 512;

}  // namespace weft::storage
