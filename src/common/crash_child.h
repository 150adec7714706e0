// common/crash_child.h (tests only)
// Durability tests with a real crash: this test binary runs again as a child
// (`--gtest_filter=<child_test>`) with the given environment, plus
// `<fd_env>` = the write end of a pipe on which the child writes the index
// (uint64_t, 0, 1, 2, ...) of each operation once it is acknowledged. The
// parent SIGKILLs the child after `kill_after` acks, keeps reading the acks
// already in the pipe, reaps the child and returns how many it read. A child
// test does nothing (GTEST_SKIP) when `<fd_env>` is not set. The child gets no
// GTEST_SHARD_* variables (it must run its one test whatever the sharding).
// Failures (out-of-order acks, a child that ended by itself) are gtest
// assertions: callers check HasFatalFailure().
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace weft::testing {

inline void run_child_until_killed(const std::string& child_test, const std::string& fd_env,
                                   const std::vector<std::pair<std::string, std::string>>& env, uint64_t kill_after,
                                   uint64_t* acked_out) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  // Everything the child needs is built before fork: the parent may have
  // threads (RocksDB's), so the child calls nothing but execve.
  std::vector<std::string> vars;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string_view var(*e);
    bool replaced = var.starts_with(fd_env + "=") || var.starts_with("GTEST_SHARD_");
    for (const auto& [k, v] : env) replaced = replaced || var.starts_with(k + "=");
    if (!replaced) vars.emplace_back(var);
  }
  for (const auto& [k, v] : env) vars.push_back(k + "=" + v);
  vars.push_back(fd_env + "=" + std::to_string(fds[1]));
  std::vector<char*> envp;
  for (std::string& v : vars) envp.push_back(v.data());
  envp.push_back(nullptr);
  std::string arg0 = "crash_child", filter = "--gtest_filter=" + child_test;
  char* argv[] = {arg0.data(), filter.data(), nullptr};
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(fds[0]);
    execve("/proc/self/exe", argv, envp.data());
    _exit(127);
  }
  ::close(fds[1]);
  uint64_t acked = 0, idx = 0;
  bool killed = false;
  while (read(fds[0], &idx, sizeof(idx)) == static_cast<ssize_t>(sizeof(idx))) {
    if (idx != acked) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      ::close(fds[0]);
      FAIL() << "child acknowledged op " << idx << " after " << acked << " others";
    }
    ++acked;
    if (!killed && acked >= kill_after) {
      kill(pid, SIGKILL);
      killed = true;  // keep reading: acks already in the pipe count too
    }
  }
  ::close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  *acked_out = acked;
  ASSERT_TRUE(killed) << "child ended by itself after " << acked << " acks, status " << status;
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
}

}  // namespace weft::testing
