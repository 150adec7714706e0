// fuse/fuse_server.h
// The FUSE mount of a Weft cluster: libfuse3's low-level API over
// weft::Client. FUSE inode numbers are Weft inode ids (the root, 1, is
// FUSE_ROOT_ID), so nothing is translated and nothing is kept per inode
// except the kernel's lookup counts. File handles are weft::File objects;
// directory handles keep a DirCursor (FUSE offsets -> Weft cookies).
// Semantics and options: docs/fuse.md.
// Threading: run() serves requests on libfuse's worker threads (up to 10),
// each blocking in Client calls; everything shared is under locks.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "fuse/mount_options.h"

namespace weft {
class Client;
}

namespace weft::fuse {

class FuseServer {
 public:
  // Creates the FUSE session and mounts it at `mountpoint` (an existing,
  // empty directory unless -o nonempty). `client` must outlive the server.
  static Result<std::unique_ptr<FuseServer>> mount(Client& client, const MountOptions& options,
                                                   const std::string& mountpoint);
  ~FuseServer();  // unmounts if still mounted; closes (flushes) files left open

  // Serves until the file system is unmounted (weft umount, fusermount3 -u)
  // or SIGINT/SIGTERM/SIGHUP arrives; then unmounts. Returns the signal that
  // stopped it, or 0. Call from the thread that should receive those signals.
  Result<int> run();
  // Unmounts now (idempotent).
  void unmount();

  const std::string& mountpoint() const;

  class Impl;

 private:
  explicit FuseServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Checks that `path` can be mounted on: exists, is a directory, is not a dead
// FUSE mount, and is empty unless `nonempty`. One readable line on error.
Result<void> check_mountpoint(const std::string& path, bool nonempty);

// Blocks SIGINT/SIGTERM/SIGHUP in the calling thread, so threads started
// afterwards (the Client's) never take them: call before Client::connect.
// run() unblocks them in its own thread.
void block_stop_signals();

}  // namespace weft::fuse
