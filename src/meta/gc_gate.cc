#include "meta/gc_gate.h"

namespace weft::meta {

bool GcGate::may_run(bool leased, uint64_t lease_gaps, TimePoint now) {
  if (!leased) return false;
  if (!serving_) {
    if (now < serve_from_) return false;
    serving_ = true;
    holds_.restart_window();
    gaps_ = lease_gaps;  // a gap before serving began is covered by this window
    return false;
  }
  if (lease_gaps != gaps_) {
    gaps_ = lease_gaps;
    holds_.restart_window();
    return false;
  }
  return true;
}

}  // namespace weft::meta
