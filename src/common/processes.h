// What /proc says of a process: whether it runs, and with which arguments.
// `weft up`/`down` and `weft bench` signal only servers they can prove are
// theirs: a pid file may name a reused pid by now.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace weft {

// Its arguments (/proc/PID/cmdline); empty when it is gone.
std::vector<std::string> proc_cmdline(pid_t pid);

// False for a zombie, a dead process or no such pid.
bool pid_running(pid_t pid);

// A running `<binary> serve KIND --config CONFIG_PATH`, exactly.
bool is_server_process(pid_t pid, const std::string& kind, const std::string& config_path);

}  // namespace weft
