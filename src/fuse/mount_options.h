// fuse/mount_options.h
// The `-o` options of `weft mount`: Weft's own (timeouts, caching) are parsed
// here, everything else is handed to libfuse (allow_other, default_permissions,
// ro, noatime, ...), which refuses what it does not know.
// Threading: pure functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace weft::fuse {

struct MountOptions {
  double attr_timeout_s = 1.0;       // kernel keeps attributes this long
  double entry_timeout_s = 1.0;      // kernel keeps name -> inode this long
  double negative_timeout_s = 0.0;   // kernel keeps "no such name" this long (0: not at all)
  bool writeback_cache = false;      // kernel buffers writes (FUSE_CAP_WRITEBACK_CACHE)
  bool direct_io = false;            // no kernel page cache for file data (checkpoints)
  bool keep_cache = false;           // keep the page cache across opens (read-only data sets)
  bool allow_other = false;          // other users may use the mount
  bool default_permissions = false;  // the kernel checks permissions from the attributes
  bool read_only = false;
  bool nonempty = false;           // allow mounting over a non-empty directory
  // Files open through the mount keep their data once unlinked or replaced
  // elsewhere (ClientOptions::hold_open_files). Off (no_hold_open_files):
  // no renewal calls to meta, and such a file's reads fail with ESTALE once
  // the chunk GC takes it.
  bool hold_open_files = true;
  // FUSE worker threads: at most max_threads requests are served at once
  // (each waits on the cluster in its thread); idle ones above
  // max_idle_threads exit. 10 is libfuse's default; 64 served W3 with 16
  // readers and W6 ~30% slower on 2 cores (docs/BENCHMARKS.md, session 31):
  // more threads pay where workers wait on remote servers, not on this CPU.
  unsigned max_threads = 10;
  unsigned max_idle_threads = 10;
  // Kernel read-ahead of this mount (its bdi's read_ahead_kb), 0: leave the
  // kernel's 128 KiB. The default lets the kernel ask for 1 MiB per request
  // with a few requests in flight per stream (restores, large files).
  unsigned read_ahead_kb = 4096;
  // Statahead (client/dir_ahead.h): lookups that keep missing in a directory of
  // at most this many entries list it once and are answered from the
  // listing for min(entry_timeout, attr_timeout). 0: off.
  unsigned statahead_entries = 4096;
  // libweft's own read-ahead per open file (ClientOptions::readahead_bytes_max),
  // on top of the kernel's; 0: none. Unset: none, except with direct_io
  // (no kernel read-ahead then) where libweft reads ahead 16 MiB. The
  // kernel's read-ahead already keeps several 1 MiB reads in flight per
  // stream, and its requests reach libweft on several FUSE threads slightly
  // out of order, which resets libweft's sequential detection (W2 through
  // the mount: 1.11 GiB/s without, 0.82 with, docs/BENCHMARKS.md).
  std::optional<unsigned> client_readahead_kb;
  unsigned client_readahead_kb_or_default() const { return client_readahead_kb.value_or(direct_io ? 16384 : 0); }
  std::string fsname = "weft";
  // Passed to libfuse as -o, in order (allow_other, default_permissions, ro included).
  std::vector<std::string> fuse_options;

  // "fsname=weft,subtype=weft,max_read=1048576,..." for fuse_session_new.
  std::string fuse_option_string() const;
};

inline constexpr unsigned kMaxIoBytes = 1u << 20;  // max_read / max_write

// Parses comma-separated options, as many -o as given. Errors name the option.
Result<MountOptions> parse_mount_options(const std::vector<std::string>& opt_lists);

}  // namespace weft::fuse
