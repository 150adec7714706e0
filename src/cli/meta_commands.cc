// Commands of the meta module: `weft serve meta...` and its admin tools.
#include "cli/commands.h"

namespace weft::cli {

void add_meta_commands(CLI::App& /*app*/, CLI::App& /*serve*/) {}

}  // namespace weft::cli
