#pragma once
// Shared by the sandbox tests: a watchdog that ends a test process stuck for a minute
// (nothing here may hang CI), a sandbox with short limits, and host-side checks.

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

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

// Where per-run cgroups go: the hierarchy's root, or (for the suite's unprivileged
// runs, see run_unprivileged.sh) a directory delegated to the test's uid.
inline std::filesystem::path test_cgroup_parent() {
  const char* parent = std::getenv("CASCADE_RL_TEST_CGROUP_PARENT");
  return parent != nullptr ? parent : "";
}

// Options for a sandbox that runs where the system lacks isolation (tests that need a
// mechanism check for it and skip, saying so).
inline v::sandbox_options test_options(v::limits limits = short_limits()) {
  return {.limits = limits, .on_missing_isolation = v::missing_isolation::warn, .cgroup_parent = test_cgroup_parent()};
}

inline v::sandbox test_sandbox(v::limits limits = short_limits()) { return v::sandbox(test_options(limits)); }

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

// A host directory that runs may read (mode 0755, files 0644), as a trainer's data,
// repository or checkpoint directory would be; removed afterwards.
class host_directory {
 public:
  explicit host_directory(const std::string& stem = "cascade_rl_host") {
    std::string pattern = (std::filesystem::temp_directory_path() / (stem + "_XXXXXX")).string();
    if (::mkdtemp(pattern.data()) == nullptr) return;
    dir_ = pattern;
    ::chmod(dir_.c_str(), 0755);
  }
  host_directory(const host_directory&) = delete;
  host_directory& operator=(const host_directory&) = delete;
  ~host_directory() {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  [[nodiscard]] const std::filesystem::path& path() const { return dir_; }
  // Writes `relative` (and its directories); `sync`: on disk, its cached pages clean.
  std::filesystem::path put(const std::string& relative, const std::string& contents, bool sync = false) const {
    const std::filesystem::path p = dir_ / relative;
    std::filesystem::create_directories(p.parent_path());
    ::chmod(p.parent_path().c_str(), 0755);
    const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) {
      EXPECT_EQ(::write(fd, contents.data(), contents.size()), static_cast<ssize_t>(contents.size()));
      if (sync) ::fsync(fd);
      ::close(fd);
    }
    ::chmod(p.c_str(), 0644);
    return p;
  }
  [[nodiscard]] std::string get(const std::string& relative) const {
    std::ifstream in(dir_ / relative);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }

 private:
  std::filesystem::path dir_;
};

// The largest number of descriptors this process held while it watched (sampled every
// millisecond on a thread of its own), above the number at its start.
inline std::size_t open_descriptors() {
  std::size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) (void)e, ++n;
  return n;
}
class descriptor_watch {
 public:
  descriptor_watch() : baseline_(open_descriptors()), peak_(baseline_), thread_([this] {
    while (!done_) {
      peak_ = std::max<std::size_t>(peak_, open_descriptors());
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }) {}
  descriptor_watch(const descriptor_watch&) = delete;
  descriptor_watch& operator=(const descriptor_watch&) = delete;
  ~descriptor_watch() { (void)stop(); }
  [[nodiscard]] std::size_t baseline() const { return baseline_; }
  // Stops watching; the peak above the baseline.
  std::size_t stop() {
    done_ = true;
    if (thread_.joinable()) thread_.join();
    return peak_ - baseline_;
  }

 private:
  std::size_t baseline_;
  std::atomic<std::size_t> peak_;
  std::atomic<bool> done_{false};
  std::thread thread_;
};

// A private parent for a test's scratch directories, and what runs left on the host:
// scratch directories under it, this process's per-run cgroups, mounts of scratch
// directories in this mount namespace, processes whose command line has `token`.
class host_check {
 public:
  host_check() {
    std::string pattern = (std::filesystem::temp_directory_path() / "cascade_rl_test_XXXXXX").string();
    if (::mkdtemp(pattern.data()) != nullptr) parent_ = pattern;
  }
  host_check(const host_check&) = delete;
  host_check& operator=(const host_check&) = delete;
  ~host_check() {
    std::error_code ignored;
    std::filesystem::remove_all(parent_, ignored);
  }
  [[nodiscard]] const std::filesystem::path& scratch_parent() const { return parent_; }
  [[nodiscard]] const std::string& token() const { return token_; }

  [[nodiscard]] std::vector<std::string> leftovers() const {
    std::vector<std::string> left;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(parent_, ec)) left.push_back("file " + e.path().string());
    const std::string mine = "cascade_rl_verify_" + std::to_string(::getpid()) + "_";
    // Where runs' cgroups go: the suite's parent, else (issue 34) under this process's
    // own cgroup of each hierarchy, or its root.
    const std::filesystem::path rel = test_cgroup_parent().relative_path();
    const std::pair<const char*, const char*> hierarchies[] = {
        {"/sys/fs/cgroup", ""}, {"/sys/fs/cgroup/memory", "memory"}, {"/sys/fs/cgroup/cpuacct", "cpuacct"},
        {"/sys/fs/cgroup/pids", "pids"}};
    for (const auto& [hierarchy, controller] : hierarchies) {
      std::vector<std::filesystem::path> places = {std::filesystem::path(hierarchy) / rel};
      if (rel.empty()) places.push_back(std::filesystem::path(hierarchy) / v::detail::own_cgroup(controller).relative_path());
      for (const auto& place : places)
        for (const auto& e : std::filesystem::directory_iterator(place, ec))
          if (e.path().filename().string().rfind(mine, 0) == 0) left.push_back("cgroup " + e.path().string());
    }
    std::ifstream mounts("/proc/self/mountinfo");
    for (std::string line; std::getline(mounts, line);)
      if (line.find("cascade_rl_verify_") != std::string::npos || line.find(parent_.string()) != std::string::npos)
        left.push_back("mount " + line);
    if (host_processes_with(token_) > 0) left.push_back("processes with " + token_);
    return left;
  }

 private:
  std::filesystem::path parent_;
  std::string token_ = unique_token();
};

// The leftovers, one a line ("" when none), for EXPECT messages.
inline std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

}  // namespace verify_test
