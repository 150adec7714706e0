// meta/proto_convert.h
// Conversions between the store's value types (meta/types.h) and the wire
// messages of meta.proto. Pure functions, thread-safe. Decoding never trusts
// the wire: an unknown inode type or flag is kProtocol.
#pragma once

#include "common/status.h"
#include "meta/types.h"
#include "proto/meta.pb.h"

namespace weft::meta {

namespace pb = ::weft::proto::meta;

void to_proto(const Cred& c, pb::Cred* out);
Cred from_proto(const pb::Cred& c);
void to_proto(const RequestId& r, pb::RequestId* out);
RequestId from_proto(const pb::RequestId& r);
void to_proto(const Layout& l, pb::Layout* out);
Layout from_proto(const pb::Layout& l);
void to_proto(const Inode& i, pb::Inode* out);
Result<Inode> from_proto(const pb::Inode& i);
void to_proto(const SetAttr& a, pb::SetAttr* out);
SetAttr from_proto(const pb::SetAttr& a);
void to_proto(const StatFs& s, pb::StatFs* out);
StatFs from_proto(const pb::StatFs& s);
void to_proto(const DirPage& p, pb::MetaReply* out);
Result<DirPage> dir_page_from(const pb::MetaReply& r);
void to_proto(const Reply& r, pb::MetaReply* out);
Result<Reply> reply_from(const pb::MetaReply& r);

// The caller context of a request: credentials and request id.
Context context_from(const pb::MetaRequest& req);
void set_context(const Context& ctx, pb::MetaRequest* req);

Result<InodeType> inode_type_from_wire(uint32_t v);
Result<RenameFlags> rename_flags_from_wire(uint32_t v);
Result<XattrFlags> xattr_flags_from_wire(uint32_t v);

}  // namespace weft::meta
