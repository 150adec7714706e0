// meta/service_methods.h
// Stable method numbers of the metadata service (service 2, rpc/method.h).
// Every method takes proto::meta::MetaRequest and answers MetaReply (meta.proto);
// the comment names the request fields it reads (besides cred) and the reply
// fields it fills. Mutations also read `req` (request id). Numbers are wire
// format: never reuse or renumber.
#pragma once

#include "rpc/method.h"

namespace weft::meta::method {

using rpc::MethodId;
inline constexpr uint16_t kSvc = rpc::service::kMeta;

// reads
inline constexpr MethodId kLookup{kSvc, 1};      // ino(parent), name -> inode
inline constexpr MethodId kGetattr{kSvc, 2};     // ino -> inode
inline constexpr MethodId kReadlink{kSvc, 3};    // ino -> value
// readdir and batch_stat replies stop at about kListReplyBytesMax (meta/types.h):
// a short reply is no end; readdir continues from the cookie, batch_stat with the rest.
inline constexpr MethodId kReaddir{kSvc, 4};     // ino, value(cookie), limit -> entries, value(cookie), eof
inline constexpr MethodId kStatfs{kSvc, 5};      // -> statfs
inline constexpr MethodId kGetxattr{kSvc, 6};    // ino, name -> value
inline constexpr MethodId kListxattr{kSvc, 7};   // ino -> names
inline constexpr MethodId kGetLayout{kSvc, 8};   // ino -> layout
inline constexpr MethodId kBatchStat{kSvc, 9};   // inos, with_queued -> inodes, codes (one per ino of a prefix of inos)
// The inodes the calling client (its connection's id) has open now, replacing
// its previous list; kept in memory only (meta/read_holds.h), written nowhere.
inline constexpr MethodId kHoldReads{kSvc, 10};  // inos -> renew_ms
// mutations
inline constexpr MethodId kCreate{kSvc, 20};     // ino, name, mode, exclusive, open_write, [expect_parent] -> inode, session_id
inline constexpr MethodId kMkdir{kSvc, 21};      // ino, name, mode -> inode
inline constexpr MethodId kSymlink{kSvc, 22};    // ino, name, value(target) -> inode
inline constexpr MethodId kLink{kSvc, 23};       // ino, new_parent, new_name -> inode
inline constexpr MethodId kUnlink{kSvc, 24};     // ino, name, [expect_parent]
inline constexpr MethodId kRmdir{kSvc, 25};      // ino, name, [expect_parent]
inline constexpr MethodId kRename{kSvc, 26};     // ino, name, new_parent, new_name, flags
inline constexpr MethodId kSetattr{kSvc, 27};    // ino, attr -> inode
inline constexpr MethodId kSetxattr{kSvc, 28};   // ino, name, value, flags
inline constexpr MethodId kRemovexattr{kSvc, 29};  // ino, name
inline constexpr MethodId kSetLayout{kSvc, 30};  // ino, layout
inline constexpr MethodId kOpen{kSvc, 31};       // ino, open_read, open_write -> inode?, session_id
inline constexpr MethodId kClose{kSvc, 32};      // ino, session_id
inline constexpr MethodId kReportLength{kSvc, 33};  // ino, session_id, length, ack_cut -> inode, cut_gen, cut_length
// A read-only open: a permission check that writes nothing, served inline.
inline constexpr MethodId kOpenRead{kSvc, 34};   // ino, open_read (open_write must be false) -> inode
// Lookup + read-only open in one round trip (the first-epoch open). A symlink's
// inode is returned unopened: the caller follows it and opens the target.
inline constexpr MethodId kOpenReadAt{kSvc, 35};  // ino (parent), name, open_read -> inode
// A FIFO, socket or device (node_type: meta::InodeType); rdev for devices.
inline constexpr MethodId kMknod{kSvc, 36};      // ino (parent), name, mode, node_type, rdev -> inode
// report_length and close in one commit (acknowledged once durable): the last
// report of a writer that closes. A meta without it answers kUnknownMethod.
// A report capped for a truncate (cut_gen != 0) leaves the session open.
inline constexpr MethodId kCloseWithLength{kSvc, 37};  // ino, session_id, length, ack_cut -> inode, cut_gen, cut_length

}  // namespace weft::meta::method
