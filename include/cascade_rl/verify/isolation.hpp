#pragma once
// What this system lets the sandbox use, found once per process by trying it: each
// namespace by cloning a child into it, the read-only root by running the sandbox's
// own setup in a child, the pids cgroup by making (and removing) one.

#include <sched.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>

#include "cascade_rl/verify/detail/sandbox_child.hpp"

namespace cascade_rl::verify {

struct isolation_support {
  bool network_namespace = false;  // CLONE_NEWNET: only a loopback device, down
  bool pid_namespace = false;      // CLONE_NEWPID: killing init kills every process
  bool mount_namespace = false;    // CLONE_NEWNS
  bool ipc_namespace = false;      // CLONE_NEWIPC
  bool uts_namespace = false;      // CLONE_NEWUTS
  bool read_only_root = false;     // every mount read-only and nosuid but the scratch dir
  bool privilege_drop = false;     // the caller is root: the program runs as another uid
  std::filesystem::path pids_cgroup{};  // where per-run pids cgroups are made; empty: none

  [[nodiscard]] std::string describe() const {
    const auto yn = [](bool b) { return b ? "yes" : "no"; };
    return std::string("network namespace: ") + yn(network_namespace) +
           ", PID namespace: " + yn(pid_namespace) + ", mount namespace: " + yn(mount_namespace) +
           ", read-only root: " + yn(read_only_root) + ", IPC namespace: " + yn(ipc_namespace) +
           ", UTS namespace: " + yn(uts_namespace) + ", privilege drop: " + yn(privilege_drop) +
           ", pids cgroup: " + (pids_cgroup.empty() ? std::string("none") : pids_cgroup.string());
  }
};

namespace detail {

inline bool clone_works(unsigned long flags) {
  const long pid = ::syscall(SYS_clone, flags | SIGCHLD, 0, 0, 0, 0);
  if (pid < 0) return false;
  if (pid == 0) ::_exit(0);
  int status = 0;
  while (::waitpid(static_cast<pid_t>(pid), &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

inline std::atomic<unsigned long>& cgroup_counter() {
  static std::atomic<unsigned long> counter{0};
  return counter;
}

inline std::filesystem::path new_cgroup_name(const std::filesystem::path& root) {
  return root / ("cascade_rl_verify_" + std::to_string(::getpid()) + "_" +
                 std::to_string(cgroup_counter().fetch_add(1)));
}

// A hierarchy where a child cgroup with a pids.max file can be made: cgroup v1's pids
// controller, or cgroup v2 with pids enabled for children of the root.
inline std::filesystem::path find_pids_cgroup() {
  for (const char* root : {"/sys/fs/cgroup/pids", "/sys/fs/cgroup"}) {
    std::error_code ec;
    if (!std::filesystem::is_directory(root, ec)) continue;
    const std::filesystem::path probe = new_cgroup_name(root);
    if (!std::filesystem::create_directory(probe, ec) || ec) continue;
    const bool usable = std::filesystem::exists(probe / "pids.max", ec) &&
                        static_cast<bool>(std::ofstream(probe / "pids.max") << "8" << std::flush);
    ::rmdir(probe.c_str());
    if (usable) return root;
  }
  return {};
}

// Runs the sandbox's mount setup in a child (mount namespace, read-only root, fresh
// /proc when the PID namespace works) and reports whether it all succeeded.
inline bool read_only_root_works(bool pid_namespace) {
  char pattern[] = "/tmp/cascade_rl_verify_probe_XXXXXX";
  if (::mkdtemp(pattern) == nullptr) return false;
  int status_pipe[2];
  if (::pipe2(status_pipe, O_CLOEXEC) != 0) {
    ::rmdir(pattern);
    return false;
  }
  child_plan plan;
  plan.scratch = pattern;
  plan.stdin_fd = plan.stdout_fd = plan.stderr_fd = plan.control_fd = status_pipe[1];
  plan.status_fd = status_pipe[1];
  plan.mount_namespace = plan.read_only_root = true;
  plan.pid_namespace = pid_namespace;
  plan.probe_only = true;
  const unsigned long flags = CLONE_NEWNS | (pid_namespace ? CLONE_NEWPID : 0);
  const long pid = ::syscall(SYS_clone, flags | SIGCHLD, 0, 0, 0, 0);
  if (pid == 0) run_init(plan);
  ::close(status_pipe[1]);
  status_record record;
  bool ok = false;
  if (pid > 0) {
    ok = ::read(status_pipe[0], &record, sizeof record) == static_cast<ssize_t>(sizeof record) &&
         record.kind == record_finished;
    int status = 0;
    while (::waitpid(static_cast<pid_t>(pid), &status, 0) < 0 && errno == EINTR) {
    }
  }
  ::close(status_pipe[0]);
  ::rmdir(pattern);
  return ok;
}

}  // namespace detail

// The probe, run once per process (thread-safe).
[[nodiscard]] inline const isolation_support& probe_isolation() {
  static const isolation_support support = [] {
    isolation_support s;
    s.network_namespace = detail::clone_works(CLONE_NEWNET);
    s.pid_namespace = detail::clone_works(CLONE_NEWPID);
    s.mount_namespace = detail::clone_works(CLONE_NEWNS);
    s.ipc_namespace = detail::clone_works(CLONE_NEWIPC);
    s.uts_namespace = detail::clone_works(CLONE_NEWUTS);
    s.read_only_root = s.mount_namespace && detail::read_only_root_works(s.pid_namespace);
    s.privilege_drop = ::geteuid() == 0;
    s.pids_cgroup = detail::find_pids_cgroup();
    return s;
  }();
  return support;
}

}  // namespace cascade_rl::verify
