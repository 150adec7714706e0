#include "meta/proto_convert.h"

#include "meta/layout.h"

namespace weft::meta {

void to_proto(const Cred& c, pb::Cred* out) {
  out->set_uid(c.uid);
  out->set_gid(c.gid);
  for (uint32_t g : c.groups) out->add_groups(g);
}

Cred from_proto(const pb::Cred& c) {
  return Cred{c.uid(), c.gid(), std::vector<uint32_t>(c.groups().begin(), c.groups().end())};
}

void to_proto(const RequestId& r, pb::RequestId* out) {
  out->set_client_id(r.client_id);
  out->set_seq(r.seq);
}

RequestId from_proto(const pb::RequestId& r) { return RequestId{r.client_id(), r.seq()}; }

void to_proto(const Layout& l, pb::Layout* out) {
  out->set_chunk_bytes(l.chunk_bytes);
  out->set_stripe_count(l.stripe_count);
  out->set_chain_table_id(l.chain_table_id);
  out->set_first_chain(l.first_chain);
  out->set_shuffle_seed(l.shuffle_seed);
}

Layout from_proto(const pb::Layout& l) {
  return Layout{l.chunk_bytes(), l.stripe_count(), l.chain_table_id(), l.first_chain(), l.shuffle_seed()};
}

Result<InodeType> inode_type_from_wire(uint32_t v) {
  if (v < 1 || v > kInodeTypeMax) return error(Code::kProtocol, "unknown inode type {}", v);
  return static_cast<InodeType>(v);
}

Result<RenameFlags> rename_flags_from_wire(uint32_t v) {
  if (v > 2) return error(Code::kInvalidArgument, "unknown rename flags {}", v);
  return static_cast<RenameFlags>(v);
}

Result<XattrFlags> xattr_flags_from_wire(uint32_t v) {
  if (v > 2) return error(Code::kInvalidArgument, "unknown xattr flags {}", v);
  return static_cast<XattrFlags>(v);
}

void to_proto(const Inode& i, pb::Inode* out) {
  out->set_ino(i.ino);
  out->set_type(static_cast<uint32_t>(i.type));
  out->set_mode(i.mode);
  out->set_uid(i.uid);
  out->set_gid(i.gid);
  out->set_nlink(i.nlink);
  out->set_size(i.size);
  out->set_atime_ns(i.atime_ns);
  out->set_mtime_ns(i.mtime_ns);
  out->set_ctime_ns(i.ctime_ns);
  out->set_parent(i.parent);
  to_proto(i.layout, out->mutable_layout());
  out->set_symlink_target(i.symlink_target);
  out->set_rdev(i.rdev);
  out->set_xattrs(static_cast<uint32_t>(i.xattrs));
}

// An inode off the wire holds what meta holds of any inode (meta/types.h);
// one no meta could hold comes from a broken or hostile peer: kProtocol,
// never handed on to place chunks by (a chunk size of 0 divides by zero) or
// to show as a stat (mode bits past 07777 become other file types, a size
// past INT64_MAX a negative st_size).
Result<Inode> from_proto(const pb::Inode& i) {
  WEFT_TRY(InodeType type, inode_type_from_wire(i.type()));
  Inode r;
  r.ino = i.ino();
  r.type = type;
  r.mode = i.mode();
  r.uid = i.uid();
  r.gid = i.gid();
  r.nlink = i.nlink();
  r.size = i.size();
  r.atime_ns = i.atime_ns();
  r.mtime_ns = i.mtime_ns();
  r.ctime_ns = i.ctime_ns();
  r.parent = i.parent();
  r.layout = from_proto(i.layout());
  r.symlink_target = i.symlink_target();
  r.rdev = i.rdev();
  if (i.xattrs() > static_cast<uint32_t>(XattrPresence::kSome))
    return error(Code::kProtocol, "inode {} of xattr presence {}", r.ino, i.xattrs());
  r.xattrs = static_cast<XattrPresence>(i.xattrs());
  if (r.ino == 0) return error(Code::kProtocol, "an inode numbered 0");
  if ((r.mode & ~kModePermMask) != 0) return error(Code::kProtocol, "inode {} of mode {:o}", r.ino, r.mode);
  // What off_t holds (st_size), not kFileBytesMax: meta before 5a3ab3e took
  // longer files, and they must stay reachable (to read, cut or remove).
  if (r.size > uint64_t{INT64_MAX}) return error(Code::kProtocol, "inode {} of {} bytes", r.ino, r.size);
  if (r.symlink_target.size() > kSymlinkBytesMax)
    return error(Code::kProtocol, "inode {} of a {}-byte symlink target", r.ino, r.symlink_target.size());
  if (r.is_file())
    if (auto valid = validate_layout(r.layout); !valid)
      return error(Code::kProtocol, "file {}: {}", r.ino, valid.error().message());
  return r;
}

void to_proto(const SetAttr& a, pb::SetAttr* out) {
  if (a.mode) out->set_has_mode(true), out->set_mode(*a.mode);
  if (a.uid) out->set_has_uid(true), out->set_uid(*a.uid);
  if (a.gid) out->set_has_gid(true), out->set_gid(*a.gid);
  if (a.size) out->set_has_size(true), out->set_size(*a.size);
  if (a.atime_ns) out->set_has_atime(true), out->set_atime_ns(*a.atime_ns);
  if (a.mtime_ns) out->set_has_mtime(true), out->set_mtime_ns(*a.mtime_ns);
  out->set_size_session(a.size_session);
  if (a.expect_size) out->set_has_expect_size(true), out->set_expect_size(*a.expect_size);
  if (a.expect_ctime_ns) out->set_has_expect_ctime(true), out->set_expect_ctime_ns(*a.expect_ctime_ns);
  out->set_no_cut(a.no_cut);
}

SetAttr from_proto(const pb::SetAttr& a) {
  SetAttr r;
  if (a.has_mode()) r.mode = a.mode();
  if (a.has_uid()) r.uid = a.uid();
  if (a.has_gid()) r.gid = a.gid();
  if (a.has_size()) r.size = a.size();
  if (a.has_atime()) r.atime_ns = a.atime_ns();
  if (a.has_mtime()) r.mtime_ns = a.mtime_ns();
  r.size_session = a.size_session();
  if (a.has_expect_size()) r.expect_size = a.expect_size();
  if (a.has_expect_ctime()) r.expect_ctime_ns = a.expect_ctime_ns();
  r.no_cut = a.no_cut();
  return r;
}

void to_proto(const StatFs& s, pb::StatFs* out) {
  out->set_capacity_bytes(s.capacity_bytes);
  out->set_used_bytes(s.used_bytes);
  out->set_inodes_used(s.inodes_used);
  out->set_inodes_max(s.inodes_max);
  out->set_ids_issued_below(s.ids_issued_below);
  out->set_store_id(s.store_id);
}

StatFs from_proto(const pb::StatFs& s) {
  return StatFs{s.capacity_bytes(), s.used_bytes(), s.inodes_used(), s.inodes_max(), s.ids_issued_below(),
                s.store_id()};
}

void to_proto(const DirPage& p, pb::MetaReply* out) {
  for (const auto& e : p.entries) {
    auto* pe = out->add_entries();
    pe->set_name(e.name);
    pe->set_ino(e.ino);
    pe->set_type(static_cast<uint32_t>(e.type));
    if (e.attr.ino != 0) to_proto(e.attr, pe->mutable_attr());  // else not given (DirEntry::attr)
  }
  out->set_value(p.cookie);
  out->set_eof(p.eof);
}

Result<DirPage> dir_page_from(const pb::MetaReply& r) {
  DirPage page;
  page.entries.reserve(r.entries_size());
  for (const auto& pe : r.entries()) {
    WEFT_TRY(InodeType type, inode_type_from_wire(pe.type()));
    Inode attr;
    if (pe.has_attr()) {
      WEFT_TRY(attr, from_proto(pe.attr()));
    }
    page.entries.push_back(DirEntry{pe.name(), pe.ino(), type, std::move(attr)});
  }
  page.cookie = r.value();
  page.eof = r.eof();
  return page;
}

void to_proto(const Reply& r, pb::MetaReply* out) {
  out->set_inode_present(r.has_inode);
  if (r.has_inode) to_proto(r.inode, out->mutable_inode());
  out->set_session_id(r.session_id);
  out->set_cut_gen(r.cut.gen);
  out->set_cut_length(r.cut.length);
  out->set_existed(r.existed);
}

Result<Reply> reply_from(const pb::MetaReply& r) {
  Reply out;
  out.has_inode = r.inode_present();
  if (out.has_inode) {
    WEFT_TRY(out.inode, from_proto(r.inode()));
  }
  out.session_id = r.session_id();
  out.cut = SessionCut{r.cut_gen(), r.cut_length()};
  out.existed = r.existed();
  return out;
}

Context context_from(const pb::MetaRequest& req) { return Context{from_proto(req.cred()), from_proto(req.req())}; }

void set_context(const Context& ctx, pb::MetaRequest* req) {
  to_proto(ctx.cred, req->mutable_cred());
  if (ctx.req.valid()) to_proto(ctx.req, req->mutable_req());
}

}  // namespace weft::meta
