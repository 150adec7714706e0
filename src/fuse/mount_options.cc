#include "fuse/mount_options.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>

namespace weft::fuse {
namespace {

std::vector<std::string> split_commas(std::string_view s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t comma = s.find(',', start);
    if (comma == std::string_view::npos) comma = s.size();
    if (comma > start) out.emplace_back(s.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

// Cache timeouts: at most a day (converted to nanoseconds and compared with
// clocks; a day is "forever" for a training job's dataset).
constexpr double kTimeoutSecondsMax = 86400;

Result<double> parse_seconds(std::string_view key, std::string_view value) {
  double v = 0;
  auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || p != value.data() + value.size() || !std::isfinite(v) || v < 0 || v > kTimeoutSecondsMax) {
    return error(Code::kInvalidArgument, "mount option {}={}: expected a number of seconds from 0 to {}", key, value,
                 kTimeoutSecondsMax);
  }
  return v;
}

Result<unsigned> parse_count(std::string_view key, std::string_view value, unsigned min, unsigned max) {
  unsigned v = 0;
  auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || p != value.data() + value.size() || v < min || v > max) {
    return error(Code::kInvalidArgument, "mount option {}={}: expected an integer in [{}, {}]", key, value, min, max);
  }
  return v;
}

}  // namespace

std::string MountOptions::fuse_option_string() const {
  std::string s = fmt::format("fsname={},subtype=weft,max_read={}", fsname, kMaxIoBytes);
  for (const auto& o : fuse_options) {
    s += ',';
    s += o;
  }
  return s;
}

Result<MountOptions> parse_mount_options(const std::vector<std::string>& opt_lists) {
  MountOptions m;
  bool idle_given = false, threads_given = false;
  for (const auto& list : opt_lists) {
    for (const auto& opt : split_commas(list)) {
      auto eq = opt.find('=');
      std::string key = opt.substr(0, eq);
      std::string value = eq == std::string::npos ? std::string() : opt.substr(eq + 1);
      bool has_value = eq != std::string::npos;
      auto flag = [&](bool& field, bool to = true) -> Result<void> {
        if (has_value) return error(Code::kInvalidArgument, "mount option {} takes no value", key);
        field = to;
        return {};
      };
      Result<void> r;
      if (key == "attr_timeout" || key == "entry_timeout" || key == "negative_timeout") {
        WEFT_TRY(double v, parse_seconds(key, value));
        (key == "attr_timeout"    ? m.attr_timeout_s
         : key == "entry_timeout" ? m.entry_timeout_s
                                  : m.negative_timeout_s) = v;
      } else if (key == "writeback_cache") {
        r = flag(m.writeback_cache);
      } else if (key == "no_writeback_cache") {
        m.writeback_cache = false;
      } else if (key == "direct_io") {
        r = flag(m.direct_io);
      } else if (key == "keep_cache" || key == "kernel_cache") {
        r = flag(m.keep_cache);
      } else if (key == "nonempty") {
        r = flag(m.nonempty);
      } else if (key == "hold_open_files" || key == "no_hold_open_files") {
        r = flag(m.hold_open_files, key == "hold_open_files");
      } else if (key == "max_idle_threads") {
        WEFT_TRY(m.max_idle_threads, parse_count(key, value, 1, 1024));
        idle_given = true;
      } else if (key == "max_threads") {
        WEFT_TRY(m.max_threads, parse_count(key, value, 1, 1024));
        threads_given = true;
      } else if (key == "read_ahead_kb") {
        WEFT_TRY(m.read_ahead_kb, parse_count(key, value, 0, 1u << 20));
      } else if (key == "client_readahead_kb") {
        WEFT_TRY(unsigned kb, parse_count(key, value, 0, 1u << 20));
        m.client_readahead_kb = kb;
      } else if (key == "statahead_entries") {
        WEFT_TRY(m.statahead_entries, parse_count(key, value, 0, 1u << 20));
      } else if (key == "fsname") {
        if (value.empty()) return error(Code::kInvalidArgument, "mount option fsname needs a value");
        m.fsname = value;
      } else if (key == "subtype" || key == "max_read") {
        return error(Code::kInvalidArgument, "mount option {} is set by weft and cannot be changed", key);
      } else if (key == "rw" || key == "defaults" || key == "_netdev" || key == "auto" || key == "noauto" ||
                 key == "user" || key == "nouser" || key == "users") {
        // fstab words: meaningless here.
      } else {
        if (key == "allow_other") m.allow_other = true;
        if (key == "default_permissions") m.default_permissions = true;
        if (key == "ro") m.read_only = true;
        m.fuse_options.push_back(opt);
      }
      if (!r) return std::unexpected(r.error());
    }
  }
  // One given, the other's default follows it (so max_idle_threads=20 alone
  // still mounts, as before max_threads existed); both given, they must agree.
  if (!idle_given) m.max_idle_threads = std::min(m.max_idle_threads, m.max_threads);
  if (idle_given && !threads_given) m.max_threads = std::max(m.max_threads, m.max_idle_threads);
  if (m.max_idle_threads > m.max_threads) {
    return error(Code::kInvalidArgument, "mount option max_idle_threads={} exceeds max_threads={}", m.max_idle_threads,
                 m.max_threads);
  }
  // Serving other users, the mount has the kernel check permissions: it
  // walks paths through cached dentries without asking the daemon (a user
  // would reach a file through a directory it may not search) and, for
  // exec, only checks that some x bit is set.
  if (m.allow_other && !m.default_permissions) {
    m.default_permissions = true;
    m.fuse_options.push_back("default_permissions");
  }
  return m;
}

}  // namespace weft::fuse
