// common/wire_status.h
// A status as a peer sent it: its code value and message. A value no Code
// has (a broken peer, or a newer one) is kInternal, and the message names
// the value: "kInternal" alone would hide what the peer said.
// (Apart from status.h so that adding to it rebuilds only its users.)
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <string>

#include "common/status.h"

namespace weft {

inline Status status_from_wire(uint32_t value, std::string message) {
  const Code code = code_from_wire(value);
  if (code == Code::kInternal && value != static_cast<uint32_t>(Code::kInternal))
    return Status(code, fmt::format("undefined code {}: {}", value, message));
  return Status(code, std::move(message));
}

}  // namespace weft
