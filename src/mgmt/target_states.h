// mgmt/target_states.h
// The target state machine, applied to one chain at a time. A target has one
// state per chain it belongs to (it may sync in one chain while serving in
// another); TargetInfo::state summarises them (summarize_target).
//
// Events: FAIL   - the target's node was declared dead, restarted with a new
//                  incarnation, or stopped listing the target.
//         RETURN - the target's node is up again and lists the target.
//         SYNCED - its node reported "sync done" for (chain, target).
//
// Transition table (S = another serving entry exists in the chain):
//   from          event   condition          to            position
//   serving       FAIL    S                  offline       moved to the end
//   serving       FAIL    not S              last-serving  stays; every syncing entry -> offline
//                                                          (their sync source is gone)
//   syncing       FAIL    -                  offline       moved to the end
//   syncing       SYNCED  -                  serving       after the last serving entry
//   offline       RETURN  chain has serving  syncing       tail of the write path (before offline)
//   offline       RETURN  chain last-serving offline       unchanged: waits for the last-serving one
//   last-serving  RETURN  -                  serving       stays (it has the newest data: no resync);
//                                                          then every offline entry whose target
//                                                          is up RETURNs (-> syncing)
//   offline       FAIL    -                  offline       no change
//   last-serving  FAIL    -                  last-serving  no change
//   serving       RETURN  -                  serving       no change
//   syncing       RETURN  -                  syncing       no change
//   any other     SYNCED  -                  unchanged     stale report, ignored
//
// LOST - the target came back without the data it held (a replaced disk, an
// emptied directory: its data id changed, cluster_ops.cc). It FAILs as above;
// if that leaves it last-serving (it held the chain's only copy), it turns
// offline and moves to the end: every entry is offline and the chain serves
// nothing (no copy is known to be whole) until an operator PROMOTEs one.
//   offline       PROMOTE no entry serving   last-serving  moved to the front; when up, RETURNs
//                         or last-serving                  (serves as it is, the others sync from it)
// Every change returns true; the caller bumps the chain version once per
// operation and the routing version once per operation (cluster_state.cc).
// Invariants kept: those of check_chain (mgmt/routing.h).
// Threading: pure functions on values.
#pragma once

#include <functional>
#include <span>

#include "mgmt/routing.h"

namespace weft::mgmt {

// Each returns true if the chain changed. A target not in the chain: false.
bool fail_target(ChainInfo& chain, TargetId target);
bool return_target(ChainInfo& chain, TargetId target);
bool sync_done(ChainInfo& chain, TargetId target);
// Whether sync_done would move `target`: it is syncing in the chain.
bool is_syncing(const ChainInfo& chain, TargetId target);
bool lose_target_data(ChainInfo& chain, TargetId target);
// kNotFound: not in the chain; kNotPermitted: the chain still has a serving
// or last-serving entry (nothing to decide), or the target is not offline.
Result<void> promote_target(ChainInfo& chain, TargetId target);

// RETURNs every last-serving or offline entry whose target is_up, in chain
// order (so a returning last-serving target serves before the offline ones
// rejoin behind it). Called after every change.
bool rejoin_up_targets(ChainInfo& chain, const std::function<bool(TargetId)>& is_up);

// The target-level summary: last-serving in any chain > not alive > offline in
// any chain > syncing in any chain > serving.
TargetState summarize_target(bool alive, std::span<const TargetState> states_in_chains);

}  // namespace weft::mgmt
