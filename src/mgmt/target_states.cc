#include "mgmt/target_states.h"

#include <algorithm>

#include "common/assert.h"

namespace weft::mgmt {
namespace {

using Entries = std::vector<ChainEntry>;

Entries::iterator find_entry(Entries& entries, TargetId target) {
  return std::find_if(entries.begin(), entries.end(),
                      [&](const ChainEntry& e) { return e.target_id == target; });
}

size_t count_state(const Entries& entries, TargetState s) {
  return static_cast<size_t>(std::count_if(entries.begin(), entries.end(),
                                           [&](const ChainEntry& e) { return e.state == s; }));
}

// Removes the entry at `it` and inserts `entry` at index `pos` of the remainder.
void move_entry(Entries& entries, Entries::iterator it, ChainEntry entry, size_t pos) {
  entries.erase(it);
  WEFT_ASSERT(pos <= entries.size());
  entries.insert(entries.begin() + static_cast<ptrdiff_t>(pos), entry);
}

void demote_syncing_to_offline(Entries& entries) {
  Entries head, offline;
  for (const ChainEntry& e : entries) {
    if (e.state == TargetState::kSyncing) offline.push_back({e.target_id, TargetState::kOffline});
    else if (e.state == TargetState::kOffline) offline.push_back(e);
    else head.push_back(e);
  }
  // Targets that lost their sync source go first among the offline ones: they
  // were the most recent members.
  head.insert(head.end(), offline.begin(), offline.end());
  entries = std::move(head);
}

}  // namespace

bool fail_target(ChainInfo& chain, TargetId target) {
  auto it = find_entry(chain.entries, target);
  if (it == chain.entries.end()) return false;
  switch (it->state) {
    case TargetState::kOffline:
    case TargetState::kLastServing:
      return false;
    case TargetState::kSyncing:
      move_entry(chain.entries, it, {target, TargetState::kOffline}, chain.entries.size() - 1);
      return true;
    case TargetState::kServing:
      if (count_state(chain.entries, TargetState::kServing) > 1) {
        move_entry(chain.entries, it, {target, TargetState::kOffline}, chain.entries.size() - 1);
      } else {
        it->state = TargetState::kLastServing;
        demote_syncing_to_offline(chain.entries);
      }
      return true;
  }
  return false;
}

bool return_target(ChainInfo& chain, TargetId target) {
  auto it = find_entry(chain.entries, target);
  if (it == chain.entries.end()) return false;
  if (it->state == TargetState::kLastServing) {
    it->state = TargetState::kServing;
    return true;
  }
  if (it->state != TargetState::kOffline) return false;
  if (count_state(chain.entries, TargetState::kServing) == 0) return false;  // waits
  size_t write_path = count_state(chain.entries, TargetState::kServing) +
                      count_state(chain.entries, TargetState::kSyncing);
  move_entry(chain.entries, it, {target, TargetState::kSyncing}, write_path);
  return true;
}

bool is_syncing(const ChainInfo& chain, TargetId target) {
  auto it = std::find_if(chain.entries.begin(), chain.entries.end(),
                         [&](const ChainEntry& e) { return e.target_id == target; });
  return it != chain.entries.end() && it->state == TargetState::kSyncing;
}

bool sync_done(ChainInfo& chain, TargetId target) {
  if (!is_syncing(chain, target)) return false;
  auto it = find_entry(chain.entries, target);
  size_t serving = count_state(chain.entries, TargetState::kServing);
  move_entry(chain.entries, it, {target, TargetState::kServing}, serving);
  return true;
}

bool lose_target_data(ChainInfo& chain, TargetId target) {
  bool changed = fail_target(chain, target);
  auto it = find_entry(chain.entries, target);
  if (it == chain.entries.end() || it->state != TargetState::kLastServing) return changed;
  move_entry(chain.entries, it, {target, TargetState::kOffline}, chain.entries.size() - 1);
  return true;
}

Result<void> promote_target(ChainInfo& chain, TargetId target) {
  auto it = find_entry(chain.entries, target);
  if (it == chain.entries.end())
    return error(Code::kNotFound, "promote target {}: not in chain {}", target, chain.id);
  if (!lost_last_copy(chain))
    return error(Code::kNotPermitted,
                 "promote target {}: chain {} still has a serving or last-serving target (promote only decides for a "
                 "chain that lost its last copy)", target, chain.id);
  if (it->state != TargetState::kOffline)
    return error(Code::kNotPermitted, "promote target {}: it is {} in chain {}", target, to_string(it->state),
                 chain.id);
  move_entry(chain.entries, it, {target, TargetState::kLastServing}, 0);
  return {};
}

bool rejoin_up_targets(ChainInfo& chain, const std::function<bool(TargetId)>& is_up) {
  std::vector<TargetId> waiting;  // the last-serving entry (if any) sorts before offline ones
  for (const ChainEntry& e : chain.entries)
    if ((e.state == TargetState::kOffline || e.state == TargetState::kLastServing) && is_up(e.target_id))
      waiting.push_back(e.target_id);
  bool changed = false;
  for (TargetId t : waiting) changed |= return_target(chain, t);
  return changed;
}

TargetState summarize_target(bool alive, std::span<const TargetState> states) {
  auto any = [&](TargetState s) { return std::find(states.begin(), states.end(), s) != states.end(); };
  if (any(TargetState::kLastServing)) return TargetState::kLastServing;
  if (!alive || any(TargetState::kOffline)) return TargetState::kOffline;
  if (any(TargetState::kSyncing)) return TargetState::kSyncing;
  return TargetState::kServing;
}

}  // namespace weft::mgmt
