// The `weft` binary: servers (`weft serve <role>`), cluster tools and file tools.
#include <cstdio>
#include <new>
#include <string>
#include <system_error>

#include <fmt/format.h>

#include "cli/commands.h"

namespace weft::cli {

void add_up_commands(CLI::App& app);  // cli/up_commands.cc (`weft up`, `weft down`)
void add_file_commands(CLI::App& app);  // cli/file_commands.cc (`weft ls|stat|mkdir|rm|mv|put|get|cat|layout`)
#ifdef WEFT_WITH_FUSE
void add_fuse_commands(CLI::App& app);  // cli/fuse_commands.cc (`weft mount`, `weft umount`)
#endif
#ifdef WEFT_WITH_BENCH
void add_bench_commands(CLI::App& app);  // cli/bench_commands.cc (`weft bench`)
#endif

int& exit_code() {
  static int code = 0;
  return code;
}

void fail(const std::string& message, int code) {
  std::fprintf(stderr, "weft: %s\n", message.c_str());
  exit_code() = code;
}

CLI::App& admin_subcommand(CLI::App& app) {
  auto named_admin = [](CLI::App* sub) { return sub->get_name() == "admin"; };
  if (auto found = app.get_subcommands(named_admin); !found.empty()) return *found.front();
  auto* admin = app.add_subcommand("admin", "Cluster administration");
  admin->require_subcommand(1);
  return *admin;
}

}  // namespace weft::cli

#ifdef WEFT_JEMALLOC
// jemalloc's control interface (declared here, not from <jemalloc/jemalloc.h>,
// which redeclares malloc and friends). The reference also keeps the library
// linked under --as-needed, so it is the process's malloc.
extern "C" int mallctl(const char* name, void* oldp, size_t* oldlenp, void* newp, size_t newlen);
#endif

namespace weft::cli {
namespace {

// "weft 0.1.0 (jemalloc 5.3.0-...)": the allocator is part of how a server
// performs (WEFT_JEMALLOC, cmake/WeftHelpers.cmake).
std::string version_text() {
  std::string text = "weft 0.1.0";
#ifdef WEFT_JEMALLOC
  const char* version = nullptr;
  size_t len = sizeof(version);
  if (mallctl("version", &version, &len, nullptr, 0) == 0 && version) text += fmt::format(" (jemalloc {})", version);
#endif
  return text;
}

}  // namespace
}  // namespace weft::cli

int main(int argc, char** argv) {
  CLI::App app{"weft: a parallel file system for AI training clusters"};
  app.require_subcommand(1);
  app.set_version_flag("--version", weft::cli::version_text());
  auto* serve = app.add_subcommand("serve", "Run a server process (one role per process)");
  serve->require_subcommand(1);
  weft::cli::add_serve_commands(app, *serve);
  weft::cli::add_tool_commands(app);
  weft::cli::add_mgmt_commands(app, *serve);
  weft::cli::add_storage_commands(app, *serve);
  weft::cli::add_meta_commands(app, *serve);
  weft::cli::add_up_commands(app);
  weft::cli::add_file_commands(app);
#ifdef WEFT_WITH_FUSE
  weft::cli::add_fuse_commands(app);
#endif
#ifdef WEFT_WITH_BENCH
  weft::cli::add_bench_commands(app);
#endif
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::system_error& e) {
    // What a command did not expect on its own thread (a thread the system
    // refused: EAGAIN at a process or memory limit; a filesystem_error):
    // one line, not std::terminate's abort. Callers that can go on catch
    // it themselves.
    weft::cli::fail(e.what());
    return weft::cli::exit_code();
  } catch (const std::bad_alloc&) {
    weft::cli::fail("out of memory");
    return weft::cli::exit_code();
  }
  // What was printed must have reached stdout (`weft status --json > f` on
  // a full disk): the buffered rest is written here, at the latest.
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) weft::cli::fail("writing the output failed (stdout)");
  return weft::cli::exit_code();
}
