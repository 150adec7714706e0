// `weft mount MOUNTPOINT` serves a Weft cluster through FUSE (fuse/fuse_server.h);
// `weft umount MOUNTPOINT` unmounts it. Options: docs/fuse.md.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "common/fault.h"
#include "common/mount_table.h"
#include "common/owner_watch.h"
#include "fuse/fuse_server.h"
#include "fuse/mount_options.h"
#include "weft/client.h"

namespace weft::cli {

void add_fuse_commands(CLI::App& app);

namespace {

struct MountArgs {
  std::string mountpoint;
  std::vector<std::string> options;
  std::string config;
  std::string cluster;
  bool background = false;
  std::string pid_file;
  std::string log_file;
  // --background waits this long for the daemon to serve; connecting alone
  // retries for up to a minute while the cluster is away.
  double ready_timeout_s = 90;
  // --owner-pid / WEFT_OWNER_PID: unmount and exit, as on SIGTERM, when this process exits (0: none).
  pid_t owner_pid = 0;
};

struct UmountArgs {
  std::string mountpoint;
  bool lazy = false;
};

std::string absolute_path(const std::string& p) {
  std::error_code ec;
  auto abs = std::filesystem::absolute(p, ec);
  return ec ? p : abs.lexically_normal().string();
}

void write_all(int fd, std::string_view s) {
  while (!s.empty()) {
    ssize_t n = ::write(fd, s.data(), s.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    s.remove_prefix(static_cast<size_t>(n));
  }
}

// Connects, mounts and serves. `ready_fd` >= 0 (background): told "ok" once
// the mount works, then stdin/stdout/stderr leave the terminal.
void serve_mount(const MountArgs& a, const fuse::MountOptions& options, const std::string& mountpoint, int ready_fd) {
  if (std::string e = fault::load_from_env(); !e.empty()) return fail(e);
  // The Client's threads must never take SIGINT/SIGTERM: they stop the loop.
  fuse::block_stop_signals();
  // Its owner gone, the mount stops as on SIGTERM: the signal waits (blocked
  // in every thread, the watch's too) until run() takes it in this thread,
  // whenever the owner went. A thread, so started in the daemon (after the
  // fork of --background).
  OwnerWatch owner;
  if (a.owner_pid != 0) {
    auto watch = watch_owner(a.owner_pid, [] { ::kill(::getpid(), SIGTERM); });
    if (!watch) return fail(owner_pid_error(watch.error()));
    owner = std::move(*watch);
  }
  ClientOptions co;
  co.config_path = a.config.empty() ? std::string() : absolute_path(a.config);
  co.cluster = a.cluster;
  co.name = "weft-mount";
  co.readahead_bytes_max = size_t{options.client_readahead_kb_or_default()} << 10;
  co.hold_open_files = options.hold_open_files;
  auto client = Client::connect(co);
  if (!client) return fail("cannot connect to the cluster: " + client.error().message());
  auto root = (*client)->getattr(Cred::root(), kRootIno);
  if (!root) {
    return fail(
        fmt::format("the cluster ({}) does not answer: {}", (*client)->cluster_description(), root.error().message()));
  }
  auto server = fuse::FuseServer::mount(**client, options, mountpoint);
  if (!server) return fail(server.error().message());

  if (ready_fd >= 0) {
    if (WEFT_FAULT("mount.stall_before_ready")) ::pause();  // tests: a daemon that never serves
    if (!a.pid_file.empty()) {
      std::ofstream out(a.pid_file, std::ios::trunc);
      out << ::getpid() << "\n";
      if (!out) {
        (*server)->unmount();
        return fail("cannot write the pid file " + a.pid_file);
      }
    }
    int null_fd = ::open("/dev/null", O_RDWR);
    int log_fd = a.log_file.empty() ? -1 : ::open(a.log_file.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    write_all(ready_fd, "ok\n");
    ::close(ready_fd);
    if (null_fd >= 0) ::dup2(null_fd, 0);
    int out_fd = log_fd >= 0 ? log_fd : null_fd;
    if (out_fd >= 0) {
      ::dup2(out_fd, 1);
      ::dup2(out_fd, 2);
    }
    if (null_fd > 2) ::close(null_fd);
    if (log_fd > 2) ::close(log_fd);
  } else {
    std::fprintf(stderr, "weft: mounted %s on %s (Ctrl-C or `weft umount %s` to unmount)\n",
                 (*client)->cluster_description().c_str(), mountpoint.c_str(), mountpoint.c_str());
  }
  auto r = (*server)->run();
  // No SIGTERM from the watch once run() is over: blocked first (a run()
  // that failed restored its default action), then the watch is joined.
  fuse::block_stop_signals();
  owner = OwnerWatch();
  server->reset();  // closes (flushes) what the kernel left open
  if (!r) return fail(r.error().message());
  exit_code() = 0;
}

int run_fusermount(const std::string& mountpoint, bool lazy);

void run_mount(const MountArgs& a) {
  auto options = fuse::parse_mount_options(a.options);
  if (!options) return fail(options.error().message(), 2);
  std::string mountpoint = absolute_path(a.mountpoint);
  // Report the common mistakes before connecting (and before forking).
  if (auto r = fuse::check_mountpoint(mountpoint, options->nonempty); !r) return fail(r.error().message());
  // As open(2) will check it: with the effective ids (a daemon started with
  // only its real uid set to the mount's user still opens it as root).
  if (::faccessat(AT_FDCWD, "/dev/fuse", R_OK | W_OK, AT_EACCESS) != 0) {
    return fail(fmt::format("cannot use /dev/fuse: {} (is the fuse module loaded?)", std::strerror(errno)));
  }
  if (!a.background) return serve_mount(a, *options, mountpoint, -1);
  // Checked here too, so that a gone owner is this command's one-line error;
  // the daemon watches it (a thread would not survive the fork).
  if (a.owner_pid != 0) {
    if (auto alive = check_owner(a.owner_pid); !alive) return fail(owner_pid_error(alive.error()));
  }

  // Fork before connecting: the Client starts threads, which a fork would lose.
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return fail(fmt::format("pipe: {}", std::strerror(errno)));
  std::fflush(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) return fail(fmt::format("fork: {}", std::strerror(errno)));
  if (pid == 0) {
    ::close(fds[0]);
    ::setsid();  // leave the terminal's process group: Ctrl-C there must not stop the mount
    serve_mount(a, *options, mountpoint, fds[1]);
    std::fflush(nullptr);
    ::_exit(exit_code());
  }
  ::close(fds[1]);
  std::string msg;
  char buf[64];
  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::milliseconds(static_cast<int64_t>(a.ready_timeout_s * 1000));
  bool timed_out = false;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd pfd{fds[0], POLLIN, 0};
    int ready = left.count() > 0 ? ::poll(&pfd, 1, static_cast<int>(left.count())) : 0;
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) {
      timed_out = true;
      break;
    }
    ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    msg.append(buf, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  if (msg.starts_with("ok")) return;  // the daemon serves the mount
  if (timed_out) {
    // A daemon stuck before serving would hold the mount point (and every
    // process that touches it) forever: stop it, then detach what it mounted.
    ::kill(pid, SIGKILL);
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    // Only a Weft mount: never detach something else that sits there.
    if (auto m = mount_at(mountpoint); m && m->type == "fuse.weft") (void)run_fusermount(mountpoint, true);
    return fail(fmt::format("the mount daemon was not serving {} after {} s: stopped it", mountpoint,
                            a.ready_timeout_s));
  }
  // The child failed and said why on stderr; pass its exit code on.
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  int code = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
  if (code == 0) code = 1;
  if (WIFSIGNALED(status)) {
    return fail(fmt::format("the mount daemon died with signal {}", WTERMSIG(status)));
  }
  exit_code() = code;
}

// Runs fusermount3 -u [-z]; returns its exit status (127: not found).
int run_fusermount(const std::string& mountpoint, bool lazy) {
  pid_t pid = ::fork();
  if (pid < 0) return 127;
  if (pid == 0) {
    std::vector<const char*> argv = {"fusermount3", lazy ? "-uz" : "-u", "--", mountpoint.c_str(), nullptr};
    ::execvp(argv[0], const_cast<char* const*>(argv.data()));
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

void run_umount(const UmountArgs& a) {
  std::string mountpoint = absolute_path(a.mountpoint);
  if (::geteuid() == 0) {
    // root unmounts directly (works whether or not the daemon is alive), a
    // Weft mount only: umount2 would detach whatever sits there.
    auto m = mount_at(mountpoint);
    if (m && m->type != "fuse.weft")
      return fail(fmt::format("{} is a {} mount, not a Weft mount: left alone", mountpoint, m->type));
    if (::umount2(mountpoint.c_str(), a.lazy ? MNT_DETACH : 0) == 0) return;
    int err = errno;
    if (err == EINVAL) return fail(fmt::format("{} is not a mount point", mountpoint));
    if (err == ENOENT) return fail(fmt::format("{} does not exist", mountpoint));
    if (err == EBUSY) {
      return fail(
          fmt::format("{} is busy (files open or a process inside it); use --lazy to detach it now", mountpoint));
    }
    return fail(fmt::format("cannot unmount {}: {}", mountpoint, std::strerror(err)));
  }
  int rc = run_fusermount(mountpoint, a.lazy);
  if (rc == 127) return fail("cannot run fusermount3 (is fuse3 installed?)");
  if (rc != 0) return fail(fmt::format("cannot unmount {} (fusermount3 said why above)", mountpoint));
}

}  // namespace

void add_fuse_commands(CLI::App& app) {
  static MountArgs mount_args;
  auto* mount = app.add_subcommand("mount", "Mount the cluster's file system with FUSE");
  mount->add_option("mountpoint", mount_args.mountpoint, "an existing empty directory")->required();
  mount
      ->add_option("-o", mount_args.options,
                   "mount options, comma-separated: attr_timeout=S, entry_timeout=S, negative_timeout=S, "
                   "writeback_cache, direct_io, keep_cache, allow_other, default_permissions, ro, nonempty, ...")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  mount->add_option("--config", mount_args.config, "client config (default: $WEFT_CONFIG, ./weft-data/client.toml)");
  mount->add_option("--cluster", mount_args.cluster, "mgmtd address host:port (replaces the config's list)");
  mount->add_flag("--background", mount_args.background, "return once mounted; a daemon keeps serving");
  mount->add_option("--pid-file", mount_args.pid_file, "with --background: write the daemon's pid here");
  mount->add_option("--log-file", mount_args.log_file, "with --background: the daemon's stderr goes here");
  mount->add_option("--ready-timeout", mount_args.ready_timeout_s,
                    "with --background: seconds to wait for the daemon to serve, then stop it (default 90)")
      ->check(CLI::Range(1.0, 3600.0));
  add_owner_pid_option(*mount, mount_args.owner_pid);
  mount->callback([] {
    auto owner = owner_pid_or_env(mount_args.owner_pid);
    if (!owner) return fail(owner.error().message());
    mount_args.owner_pid = *owner;
    run_mount(mount_args);
  });

  static UmountArgs umount_args;
  auto* umount = app.add_subcommand("umount", "Unmount a weft mount");
  umount->add_option("mountpoint", umount_args.mountpoint, "where it is mounted")->required();
  umount->add_flag("-l,--lazy", umount_args.lazy, "detach now, even if busy or its daemon is dead");
  umount->callback([] { run_umount(umount_args); });
}

}  // namespace weft::cli
