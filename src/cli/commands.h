// cli/commands.h
// Each module adds its subcommands to the `weft` command line here. A
// command's callback returns the process exit code; errors are printed as
// one readable line ("weft: <what failed>: <why>").
#pragma once

#include <CLI/CLI.hpp>

#include "common/config.h"
#include "common/status.h"

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
