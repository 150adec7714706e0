// Commands of the mgmt module: `weft serve mgmt...` and its admin tools.
#include "cli/commands.h"

namespace weft::cli {

void add_mgmt_commands(CLI::App& /*app*/, CLI::App& /*serve*/) {}

}  // namespace weft::cli
