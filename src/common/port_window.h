// common/port_window.h
// Where a long-lived local server picks its listening port: away from the
// kernel's ephemeral range (net.ipv4.ip_local_port_range), from which any
// outgoing connection may take a port at any time; a server restarted on
// its recorded port would then find it taken.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

namespace weft {

struct PortWindow {
  uint16_t first = 0;  // inclusive
  uint16_t last = 0;   // inclusive
  uint32_t size() const { return last >= first ? uint32_t{last} - first + 1 : 0; }
  bool operator==(const PortWindow&) const = default;
};

// [20000, 32000] (below Linux's default ephemeral range 32768-60999) where
// it does not meet `ephemeral` (inclusive); else the part of it outside; else
// the larger stretch of unprivileged ports on either side of `ephemeral`.
// nullopt when every unprivileged port is ephemeral: no port is safe.
std::optional<PortWindow> listen_port_window(std::pair<int, int> ephemeral);

// The kernel's ephemeral range from `path`; nullopt if it cannot be read.
std::optional<std::pair<int, int>> read_ephemeral_range(
    const std::string& path = "/proc/sys/net/ipv4/ip_local_port_range");

}  // namespace weft
