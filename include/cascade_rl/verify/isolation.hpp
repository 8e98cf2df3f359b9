#pragma once
// What this system lets the sandbox use, found once per process by trying it: each
// namespace by cloning a child into it, the read-only root, the tmpfs scratch and the
// seccomp filter by running the sandbox's own setup in a child, the cgroups by making
// (and removing) one. A caller that is not root gets the same probes inside an
// unprivileged user namespace, when the kernel allows those.

#include <linux/seccomp.h>
#include <sched.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "cascade_rl/verify/detail/cgroups.hpp"
#include "cascade_rl/verify/detail/namespaces.hpp"
#include "cascade_rl/verify/detail/sandbox_child.hpp"
#include "cascade_rl/verify/detail/syscall_filter.hpp"
#include "cascade_rl/verify/detail/view.hpp"
#include "cascade_rl/verify/sandbox_options.hpp"
#include "cascade_rl/verify/scratch_directory.hpp"

namespace cascade_rl::verify {

struct isolation_support {
  bool network_namespace = false;  // CLONE_NEWNET: only a loopback device, down
  bool pid_namespace = false;      // CLONE_NEWPID: killing init kills every process
  bool mount_namespace = false;    // CLONE_NEWNS
  bool ipc_namespace = false;      // CLONE_NEWIPC
  bool uts_namespace = false;      // CLONE_NEWUTS
  bool read_only_root = false;     // every mount read-only and nosuid but the scratch dir
  bool minimal_view = false;       // a fresh root with only what programs need (detail/view.hpp)
  bool overlay_view = false;       // its directories are read-only overlays (locks, watches the run's own)
  bool privilege_drop = false;     // the caller is root: the program runs as another uid
  bool user_namespace = false;     // the caller is not root: runs in a user namespace
  bool tmpfs_scratch = false;      // scratch directories on a size- and inode-capped tmpfs
  bool syscall_filter = false;     // a seccomp filter loads (and libseccomp was linked)
  bool syscall_reports = false;    // denied calls are reported (seccomp user notification)
  int cgroup_version = 0;          // 0: no cgroup file system, 1 or 2
  std::filesystem::path pids_cgroup{};    // where per-run cgroups are made; empty: none
  std::filesystem::path memory_cgroup{};
  std::filesystem::path cpu_cgroup{};
  bool memory_swap_counted = false;  // the memory cap covers swap too

  [[nodiscard]] std::string describe() const {
    const auto yn = [](bool b) { return b ? "yes" : "no"; };
    const auto where = [](const std::filesystem::path& p) { return p.empty() ? std::string("none") : p.string(); };
    return std::string("network namespace: ") + yn(network_namespace) + ", PID namespace: " + yn(pid_namespace) +
           ", mount namespace: " + yn(mount_namespace) + ", read-only root: " + yn(read_only_root) +
           ", minimal file view: " + yn(minimal_view) + " (overlays: " + yn(overlay_view) + ")" +
           ", IPC namespace: " + yn(ipc_namespace) + ", UTS namespace: " + yn(uts_namespace) +
           ", privilege drop: " + yn(privilege_drop) + ", user namespace: " + yn(user_namespace) +
           ", tmpfs scratch: " + yn(tmpfs_scratch) + ", syscall filter: " + yn(syscall_filter) +
           " (denials reported: " + yn(syscall_reports) + "), cgroup v" + std::to_string(cgroup_version) +
           ": memory " + where(memory_cgroup) + (memory_swap_counted ? " (swap counted)" : "") + ", cpu " +
           where(cpu_cgroup) + ", pids " + where(pids_cgroup);
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

// Whether the kernel's seccomp notification structures fit init's buffers.
inline bool notification_sizes_fit() {
  seccomp_notif_sizes sizes{};
  if (::syscall(SYS_seccomp, SECCOMP_GET_NOTIF_SIZES, 0, &sizes) != 0) return false;
  return sizes.seccomp_notif <= notification_buffer && sizes.seccomp_notif_resp <= notification_buffer;
}

// Runs the sandbox's init setup in probe mode (namespaces, mounts, filter; no program)
// and reports whether it all succeeded.
struct probe_setup {
  unsigned long flags = 0;      // CLONE_NEW* for init
  int userns_fd = -1;           // caller not root
  const scratch_directory* scratch = nullptr;
  bool read_only_root = false;  // needs a mount namespace
  const filter_program* filter = nullptr;
  bool notify = false;
  const std::vector<view_entry>* view = nullptr;
};

inline bool probe_init(const probe_setup& setup) {
  int status_pipe[2];
  if (::pipe2(status_pipe, O_CLOEXEC) != 0) return false;
  fd_guard status_r(status_pipe[0]), status_w(status_pipe[1]);
  child_plan plan;
  const std::string scratch = setup.scratch != nullptr ? setup.scratch->path().string() : "/";
  plan.scratch = scratch.c_str();
  plan.stdin_fd = plan.stdout_fd = plan.stderr_fd = plan.control_fd = plan.status_fd = status_w.get();
  plan.pid_namespace = (setup.flags & CLONE_NEWPID) != 0;
  plan.mount_namespace = setup.read_only_root;
  plan.read_only_root = setup.read_only_root;
  const bool tmpfs = setup.scratch != nullptr && setup.scratch->on_tmpfs();
  plan.bind_scratch = !tmpfs;
  if (tmpfs && setup.userns_fd < 0) plan.scratch_ns_fd = setup.scratch->mount_namespace();
  if (setup.filter != nullptr) {
    plan.filter = setup.filter->data();
    plan.filter_length = static_cast<unsigned short>(setup.filter->size());
    plan.filter_notify = setup.notify;
  }
  if (setup.view != nullptr) {
    plan.view = setup.view->data();
    plan.view_count = static_cast<int>(setup.view->size());
  }
  plan.probe_only = true;
  launch_request request;
  request.flags = setup.flags | (setup.read_only_root && plan.scratch_ns_fd < 0 ? CLONE_NEWNS : 0UL);
  request.userns_fd = setup.userns_fd;
  request.mount_ns_fd = tmpfs && setup.userns_fd >= 0 ? setup.scratch->mount_namespace() : -1;
  const pid_t pid = launch_init(plan, request);
  status_w.reset();
  bool ok = false;
  if (pid > 0) {
    status_record record;
    ok = ::read(status_r.get(), &record, sizeof record) == static_cast<ssize_t>(sizeof record) &&
         record.kind == record_finished;
    wait_for(pid);
  }
  return ok;
}

}  // namespace detail

// The probe, run once per process (thread-safe).
[[nodiscard]] inline const isolation_support& probe_isolation() {
  static const isolation_support support = [] {
    isolation_support s;
    s.privilege_drop = ::geteuid() == 0;
    unsigned long base = 0;
    if (!s.privilege_drop) {
      s.user_namespace = detail::clone_works(CLONE_NEWUSER);
      base = s.user_namespace ? CLONE_NEWUSER : 0;
    }
    if (s.privilege_drop || s.user_namespace) {
      s.network_namespace = detail::clone_works(base | CLONE_NEWNET);
      s.pid_namespace = detail::clone_works(base | CLONE_NEWPID);
      s.mount_namespace = detail::clone_works(base | CLONE_NEWNS);
      s.ipc_namespace = detail::clone_works(base | CLONE_NEWIPC);
      s.uts_namespace = detail::clone_works(base | CLONE_NEWUTS);
    }
    const unsigned long pid_flag = s.pid_namespace ? CLONE_NEWPID : 0UL;
    detail::held_namespaces user;
    if (s.user_namespace) user = detail::hold_user_namespace(65534, 65534);
    const int userns_fd = user.user.get();
    if (s.user_namespace && userns_fd < 0) {  // namespaces exist, but not for the launcher
      s.network_namespace = s.pid_namespace = s.mount_namespace = s.ipc_namespace = s.uts_namespace = false;
      s.user_namespace = false;
    }
    if (s.mount_namespace) {
      try {
        const scratch_directory tmpfs(std::filesystem::temp_directory_path(),
                                      detail::tmpfs_request{.bytes = 1 << 20, .inodes = 64, .uid = 65534,
                                                            .gid = 65534, .userns_fd = userns_fd});
        s.tmpfs_scratch = detail::probe_init({.flags = pid_flag, .userns_fd = userns_fd, .scratch = &tmpfs,
                                              .read_only_root = true});
        s.read_only_root = s.tmpfs_scratch;
        // The view with overlays first, then (where the kernel refuses overlays) without.
        for (const bool overlay : {true, false}) {
          if (!s.tmpfs_scratch || !s.pid_namespace || s.minimal_view) break;
          const sandbox_options defaults;
          detail::file_view view = detail::base_view(defaults.system_paths, defaults.etc_files, {}, true, overlay);
          detail::add_run_entries(view, tmpfs.path().string(), 65534, 65534);
          const std::vector<detail::view_entry> raw = view.raw();
          s.minimal_view = detail::probe_init({.flags = pid_flag, .userns_fd = userns_fd, .scratch = &tmpfs,
                                               .read_only_root = true, .view = &raw});
          s.overlay_view = s.minimal_view && overlay && view.count(detail::view_overlay_directory) > 0;
        }
      } catch (const cascade_rl::error&) {
      }
      if (!s.read_only_root) {
        const scratch_directory host(std::filesystem::temp_directory_path());
        s.read_only_root = detail::probe_init({.flags = pid_flag, .userns_fd = userns_fd, .scratch = &host,
                                               .read_only_root = true});
      }
    }
    if (detail::have_seccomp_library()) {
      try {
        const bool notify = detail::notification_sizes_fit();
        const auto reporting = detail::build_syscall_filter({}, notify);
        const auto plain = notify ? detail::build_syscall_filter({}, false) : reporting;
        if (notify && detail::probe_init({.flags = pid_flag, .userns_fd = userns_fd, .filter = reporting.get(),
                                          .notify = true}))
          s.syscall_filter = s.syscall_reports = true;
        else
          s.syscall_filter = detail::probe_init({.flags = pid_flag, .userns_fd = userns_fd, .filter = plain.get()});
      } catch (const cascade_rl::error&) {
      }
    }
    const detail::cgroup_setup cgroups = detail::find_cgroups({});
    s.cgroup_version = cgroups.version;
    s.memory_cgroup = cgroups.memory;
    s.cpu_cgroup = cgroups.cpu;
    s.pids_cgroup = cgroups.pids;
    s.memory_swap_counted = cgroups.memory_swap;
    return s;
  }();
  return support;
}

}  // namespace cascade_rl::verify
