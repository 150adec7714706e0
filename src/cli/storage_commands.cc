// Commands of the storage module: `weft serve storage...` and its admin tools.
#include "cli/commands.h"

namespace weft::cli {

void add_storage_commands(CLI::App& /*app*/, CLI::App& /*serve*/) {}

}  // namespace weft::cli
