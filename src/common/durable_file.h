// common/durable_file.h
// Small records a process must find again after a crash (incarnations,
// versions, a store's identity): written whole or not at all.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace weft {

// Replaces `path` with `text`: a temporary beside it, fdatasync, rename, and
// an fsync of the directory, so after a crash `path` holds the old or the new
// text, never a part. Creates the directory if missing.
Result<void> replace_file_durably(const std::string& path, std::string_view text);

}  // namespace weft
