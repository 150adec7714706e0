// cli/commands.h
// Each module adds its subcommands to the `weft` command line here. A
// command's callback returns the process exit code; errors are printed as
// one readable line ("weft: <what failed>: <why>").
#pragma once

#include <sys/types.h>

#include <CLI/CLI.hpp>

#include "common/config.h"
#include "common/owner_watch.h"
#include "common/status.h"

namespace weft::rpc {
class ServiceRuntime;
}  // namespace weft::rpc

namespace weft::cli {

// Set by a subcommand's callback; main() returns it.
int& exit_code();
// Prints "weft: <message>" to stderr and sets the exit code (1 unless given).
void fail(const std::string& message, int code = 1);
// `weft admin`: created by the first module asking for it, shared by all (main.cc).
CLI::App& admin_subcommand(CLI::App& app);

// A [cluster] member's advertised address ([cluster] advertise, else [server]
// listen) is what every peer dials: a wildcard (0.0.0.0, ::) would send each
// peer to itself, so it is a config error (cli/serve_commands.cc).
Result<void> check_advertised_address(const std::string& address, const std::string& source);

// A server's config with another role's section ([meta] given to mgmtd, ...)
// and none of its own is the wrong file: an error naming it
// (cli/serve_commands.cc).
Result<void> check_config_role(const Config& config, const std::string& role);

// `--owner-pid PID` on `cmd`: the command stops as on SIGTERM when process
// PID exits (common/owner_watch.h, docs/local-cluster.md). `pid` stays 0
// when not given; the command then asks owner_pid_or_env
// (cli/serve_commands.cc).
void add_owner_pid_option(CLI::App& cmd, pid_t& pid);
// The --owner-pid given (non-zero), else $WEFT_OWNER_PID; 0: none (unset,
// empty or "0"). Another value is an error naming the variable.
Result<pid_t> owner_pid_or_env(pid_t flag);
// An error of the owner's watch, saying where the pid came from.
inline std::string owner_pid_error(const Status& s) { return s.message() + " (--owner-pid, else $WEFT_OWNER_PID)"; }

// A server's watch of its owner `flag`, else $WEFT_OWNER_PID (none when 0): the runtime stops as on
// SIGTERM (request_stop) 5 s after the owner exits (a mount the same owner
// started stops first: it flushes through the servers). Call after runtime.init(),
// before run(), and declare the watch after the runtime (it goes first). An
// owner that is gone already is an error (cli/serve_commands.cc).
Result<OwnerWatch> watch_server_owner(pid_t flag, rpc::ServiceRuntime& runtime);

// Logs a warning for each key of a server's config that it did not read
// (Config::unread_keys: a misspelt or misplaced setting is otherwise silently
// ignored). Call once the role has read all of its settings.
void warn_unread_keys(const Config& config);

// `serve` is the `weft serve` subcommand: roles add themselves under it.
void add_serve_commands(CLI::App& app, CLI::App& serve);
void add_tool_commands(CLI::App& app);
void add_mgmt_commands(CLI::App& app, CLI::App& serve);     // cli/mgmt_commands.cc
void add_storage_commands(CLI::App& app, CLI::App& serve);  // cli/storage_commands.cc
void add_meta_commands(CLI::App& app, CLI::App& serve);     // cli/meta_commands.cc
// Registered in main.cc, one line per module; each lives in its module's *_commands.cc.


}  // namespace weft::cli
