#include "common/port_window.h"

#include <algorithm>
#include <fstream>

namespace weft {
namespace {

constexpr PortWindow kPreferred{20000, 32000};
constexpr int kUnprivileged = 1024;
constexpr int kPortMax = 65535;
// A stretch this small is as good as none: `weft up` probes ports at random.
constexpr uint32_t kUsableMin = 64;

PortWindow clip(int first, int last) {
  first = std::max(first, kUnprivileged);
  last = std::min(last, kPortMax);
  if (last < first) return {};
  return {static_cast<uint16_t>(first), static_cast<uint16_t>(last)};
}

}  // namespace

std::optional<PortWindow> listen_port_window(std::pair<int, int> ephemeral) {
  const auto [lo, hi] = ephemeral;
  PortWindow below = clip(kPreferred.first, std::min<int>(kPreferred.last, lo - 1));
  PortWindow above = clip(std::max<int>(kPreferred.first, hi + 1), kPreferred.last);
  PortWindow best = below.size() >= above.size() ? below : above;
  if (best.size() >= kUsableMin) return best;
  below = clip(kUnprivileged, lo - 1);
  above = clip(hi + 1, kPortMax);
  best = below.size() >= above.size() ? below : above;
  if (best.size() >= kUsableMin) return best;
  return std::nullopt;
}

std::optional<std::pair<int, int>> read_ephemeral_range(const std::string& path) {
  std::ifstream in(path);
  int lo = 0, hi = 0;
  if (!(in >> lo >> hi) || lo > hi) return std::nullopt;
  return std::pair{lo, hi};
}

}  // namespace weft
