// libFuzzer target for the conversions of wire messages a client trusts
// least: meta's replies (meta/proto_convert.h: an inode, a listing page) and
// mgmtd's routing (mgmt/proto_convert.h), parsed from arbitrary bytes as
// protobuf. The first input byte picks the message. Properties checked:
//  - converting never crashes, reads out of bounds or trips UB;
//  - a refusal is Code::kProtocol (the caller treats the peer as broken, not
//    the request as wrong);
//  - what converts converts back to a message that converts to the same
//    value (the server side's encoder and the client's decoder agree).
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include <google/protobuf/stubs/logging.h>

#include "meta/proto_convert.h"
#include "mgmt/proto_convert.h"

namespace {

template <typename T>
bool refused_well(const weft::Result<T>& r) {
  if (r) return false;
  if (r.error().code() != weft::Code::kProtocol) std::abort();
  return true;
}

bool same(const weft::meta::Reply& a, const weft::meta::Reply& b) {
  return a.has_inode == b.has_inode && (!a.has_inode || a.inode == b.inode) && a.session_id == b.session_id &&
         a.cut == b.cut && a.existed == b.existed;
}

void meta_reply(const uint8_t* data, size_t size) {
  namespace pb = weft::proto::meta;
  pb::MetaReply msg;
  if (!msg.ParseFromArray(data, static_cast<int>(size))) return;
  auto reply = weft::meta::reply_from(msg);
  if (!refused_well(reply)) {
    pb::MetaReply back;
    weft::meta::to_proto(*reply, &back);
    auto again = weft::meta::reply_from(back);
    if (!again || !same(*again, *reply)) std::abort();
  }
  auto page = weft::meta::dir_page_from(msg);
  if (!refused_well(page)) {
    pb::MetaReply back;
    weft::meta::to_proto(*page, &back);
    auto again = weft::meta::dir_page_from(back);
    if (!again || again->cookie != page->cookie || again->eof != page->eof ||
        again->entries.size() != page->entries.size())
      std::abort();
    for (size_t i = 0; i < page->entries.size(); ++i) {
      const auto& x = page->entries[i];
      const auto& y = again->entries[i];
      if (x.name != y.name || x.ino != y.ino || x.type != y.type || !(x.attr == y.attr)) std::abort();
    }
  }
}

void routing(const uint8_t* data, size_t size) {
  namespace pb = weft::proto::mgmt;
  pb::Routing msg;
  if (!msg.ParseFromArray(data, static_cast<int>(size))) return;
  auto info = weft::mgmt::from_proto(msg);
  if (refused_well(info)) return;
  pb::Routing back;
  weft::mgmt::to_proto(*info, &back);
  auto again = weft::mgmt::from_proto(back);
  if (!again || again->version != info->version || again->nodes != info->nodes ||
      again->targets != info->targets || again->tables != info->tables || again->chains != info->chains ||
      again->meta_store_id != info->meta_store_id)
    std::abort();
}

}  // namespace

// protobuf logs every string field that is not UTF-8 (megabytes a run).
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  if (data[0] % 2 == 0)
    meta_reply(data + 1, size - 1);
  else
    routing(data + 1, size - 1);
  return 0;
}
