#pragma once
// Shared by the sandbox tests: a watchdog that ends a test process stuck for a minute
// (nothing here may hang CI), a sandbox with short limits, and host-side checks.

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include <cascade_rl/verify/verify.hpp>

namespace verify_test {

namespace v = cascade_rl::verify;
using namespace std::chrono_literals;

inline const bool watchdog_started = [] {
  std::thread([] {
    std::this_thread::sleep_for(60s);
    std::fprintf(stderr, "verify test watchdog: still running after 60 s, exiting\n");
    std::_Exit(124);
  }).detach();
  return true;
}();

inline v::limits short_limits() {
  return {.wall_time = 2s, .cpu_time = 1s, .address_space_bytes = 512ull << 20, .file_size_bytes = 1 << 20,
          .max_processes = 16, .max_open_files = 64, .stdout_bytes = 64 << 10, .stderr_bytes = 16 << 10};
}

// For tests that expect the CPU-time limit: a wall clock far above it, so that on a
// loaded machine (CI runs tests two at a time on 2 cores) the 1 s of CPU still comes
// first and the run ends by the limit under test.
inline v::limits cpu_bound_limits() {
  v::limits limits = short_limits();
  limits.wall_time = 15s;
  return limits;
}

// A sandbox that runs where the system lacks isolation (tests that need a mechanism
// check for it and skip, saying so).
inline v::sandbox test_sandbox(v::limits limits = short_limits()) {
  return v::sandbox({.limits = limits, .on_missing_isolation = v::missing_isolation::warn});
}

inline v::command python(std::string code, std::string stdin_data = {}) {
  return {.argv = {"python3", "-I", "-c", std::move(code)}, .stdin_data = std::move(stdin_data)};
}

// A token no other process has in its command line.
inline std::string unique_token() {
  std::random_device rd;
  return "cascade_rl_token_" + std::to_string(::getpid()) + "_" + std::to_string(rd());
}

// Host processes whose command line contains `token`.
// The command line of process `pid`, "" once it has gone. A process may exit between the
// listing of /proc and this read, which then fails with ESRCH: std::ifstream's buffer
// threw for that (and the directory was never closed), so plain read(2) it is.
inline std::string cmdline_of(const char* pid) {
  const int fd = ::open((std::string("/proc/") + pid + "/cmdline").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  std::string out;
  char buffer[4096];
  for (ssize_t n; (n = ::read(fd, buffer, sizeof buffer)) > 0;) out.append(buffer, static_cast<std::size_t>(n));
  ::close(fd);
  return out;
}

inline int host_processes_with(const std::string& token) {
  int count = 0;
  const std::unique_ptr<DIR, int (*)(DIR*)> proc(::opendir("/proc"), ::closedir);
  while (dirent* e = proc ? ::readdir(proc.get()) : nullptr) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    if (cmdline_of(e->d_name).find(token) != std::string::npos) ++count;
  }
  return count;
}

inline bool python_available() { return ::access("/usr/bin/python3", X_OK) == 0; }

}  // namespace verify_test
