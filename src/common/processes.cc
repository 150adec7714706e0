#include "common/processes.h"

#include <signal.h>

#include <cerrno>
#include <fstream>
#include <iterator>

namespace weft {
namespace {

std::string read_proc(pid_t pid, const char* what) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/" + what, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace

std::vector<std::string> proc_cmdline(pid_t pid) {
  std::string raw = read_proc(pid, "cmdline");
  std::vector<std::string> args;
  std::string cur;
  for (char c : raw) {
    if (c == '\0') {
      args.push_back(std::move(cur));
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) args.push_back(std::move(cur));
  return args;
}

bool pid_running(pid_t pid) {
  if (pid <= 0 || (::kill(pid, 0) != 0 && errno == ESRCH)) return false;
  std::string stat = read_proc(pid, "stat");
  auto close = stat.rfind(')');
  if (close == std::string::npos || close + 2 >= stat.size()) return false;
  char state = stat[close + 2];
  return state != 'Z' && state != 'X' && state != 'x';
}

bool is_server_process(pid_t pid, const std::string& kind, const std::string& config_path) {
  if (!pid_running(pid)) return false;
  auto args = proc_cmdline(pid);
  return args.size() == 5 && args[1] == "serve" && args[2] == kind && args[3] == "--config" && args[4] == config_path;
}

}  // namespace weft
