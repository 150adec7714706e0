// meta/gc_gate.h
// When a meta server's chunk GC may take files from its queue (`weft serve
// meta`, client::ChunkGcHooks::may_run):
//   - only under a valid lease from mgmtd: cut off from mgmtd a meta would
//     not learn that another meta's --accept-store-change replaced its store,
//     and its queue may name files the cluster's store still has;
//   - not before the meta serves (serve_from: mgmtd's serve_after, during
//     which every request, readers' hold renewals included, is refused);
//   - after the start of serving and after every lapse of the lease, only
//     once readers had a hold window to renew (ReadHolds::restart_window):
//     their holds lapsed here meanwhile (meta/read_holds.h).
// A pass already running finishes its batch. Refused passes keep the files'
// back-off. Threading: one caller at a time (the GC's thread).
#pragma once

#include <cstdint>

#include "common/clock.h"
#include "meta/read_holds.h"

namespace weft::meta {

class GcGate {
 public:
  // serve_from: when the meta serves (the epoch: it does already).
  GcGate(ReadHolds& holds, TimePoint serve_from) : holds_(holds), serve_from_(serve_from) {}

  // leased: the lease is valid now; lease_gaps: how many times it ran out or
  // was revoked (mgmt::LeaseKeeper::gaps()); now: on serve_from's clock.
  bool may_run(bool leased, uint64_t lease_gaps, TimePoint now);

 private:
  ReadHolds& holds_;
  const TimePoint serve_from_;
  bool serving_ = false;  // serve_from passed and the window restarted for it
  uint64_t gaps_ = 0;     // the lease gaps seen so far
};

}  // namespace weft::meta
