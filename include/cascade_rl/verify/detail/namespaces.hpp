#pragma once
// The caller's side of the processes in sandbox_child.hpp: holders that make a user
// namespace or a scratch mount namespace and hand it over as descriptors, and the
// start of a run's init (directly, or through the launcher when the caller is not
// root).

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "cascade_rl/core/error.hpp"
#include "cascade_rl/verify/detail/sandbox_child.hpp"

namespace cascade_rl::verify::detail {

class fd_guard {
 public:
  explicit fd_guard(int fd = -1) : fd_(fd) {}
  fd_guard(const fd_guard&) = delete;
  fd_guard& operator=(const fd_guard&) = delete;
  fd_guard(fd_guard&& other) noexcept : fd_(other.release()) {}
  fd_guard& operator=(fd_guard&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  ~fd_guard() { reset(); }
  [[nodiscard]] int get() const { return fd_; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_;
};

[[noreturn]] inline void fail_errno(std::string_view what) {
  cascade_rl::detail::fail("sandbox", std::string(what) + ": " + std::strerror(errno));
}

inline void wait_for(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
}

// What a holder left behind: descriptors of its namespaces, and of the scratch tmpfs's
// root directory; `error` says why not, when it failed.
struct held_namespaces {
  fd_guard user{}, mount{}, root{};
  std::string error{};
};

// Runs a holder (cloned with `clone_flags`, CLONE_NEWUSER for a user namespace), opens
// its namespaces through /proc/<pid>/ns, and the tmpfs through /proc/<pid>/root, then
// kills and reaps it.
inline held_namespaces hold_namespaces(holder_plan plan, unsigned long clone_flags) {
  held_namespaces held;
  int ready[2];
  if (::pipe2(ready, O_CLOEXEC) != 0) {
    held.error = std::string("pipe: ") + std::strerror(errno);
    return held;
  }
  fd_guard ready_r(ready[0]), ready_w(ready[1]);
  plan.ready_fd = ready_w.get();
  const long pid = ::syscall(SYS_clone, clone_flags | SIGCHLD, 0, 0, 0, 0);
  if (pid == 0) run_holder(plan);
  ready_w.reset();
  if (pid < 0) {
    held.error = std::string("clone: ") + std::strerror(errno);
    return held;
  }
  std::int32_t message[2] = {-1, 0};
  ssize_t got;
  while ((got = ::read(ready_r.get(), message, sizeof message)) < 0 && errno == EINTR) {
  }
  if (got == static_cast<ssize_t>(sizeof message) && message[0] == 0) {
    const std::string proc = "/proc/" + std::to_string(pid);
    if (clone_flags & CLONE_NEWUSER) held.user.reset(::open((proc + "/ns/user").c_str(), O_RDONLY | O_CLOEXEC));
    if (plan.tmpfs_path != nullptr) {
      held.mount.reset(::open((proc + "/ns/mnt").c_str(), O_RDONLY | O_CLOEXEC));
      held.root.reset(::open((proc + "/root" + plan.tmpfs_path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    }
    if (((clone_flags & CLONE_NEWUSER) && held.user.get() < 0) ||
        (plan.tmpfs_path != nullptr && (held.mount.get() < 0 || held.root.get() < 0)))
      held.error = "opening " + proc + "'s namespaces: " + std::strerror(errno);
  } else if (got == static_cast<ssize_t>(sizeof message)) {
    held.error = std::string(setup_step_name(message[0])) + ": " + std::strerror(message[1]);
  } else {
    held.error = "the namespace holder died";
  }
  ::kill(static_cast<pid_t>(pid), SIGKILL);
  wait_for(static_cast<pid_t>(pid));
  return held;
}

// A user namespace in which the caller's uid and gid appear as `uid` and `gid` (the
// only ids mapped), for a caller that is not root.
inline held_namespaces hold_user_namespace(std::uint32_t uid, std::uint32_t gid) {
  const std::string uid_map = std::to_string(uid) + " " + std::to_string(::geteuid()) + " 1";
  const std::string gid_map = std::to_string(gid) + " " + std::to_string(::getegid()) + " 1";
  holder_plan plan;
  plan.uid_map = uid_map.c_str();
  plan.gid_map = gid_map.c_str();
  return hold_namespaces(plan, CLONE_NEWUSER);
}

// How to start a run's init.
struct launch_request {
  unsigned long flags = 0;  // CLONE_NEW* for init
  int userns_fd = -1;       // caller not root: through the launcher, into this namespace
  int mount_ns_fd = -1;     // with userns_fd: the scratch's mount namespace (or -1)
};

// Starts init with `plan`; returns its pid, or -1 (errno, or a setup_failed record on
// plan.status_fd, says why).
inline pid_t launch_init(const child_plan& plan, const launch_request& request) {
  if (request.userns_fd < 0) {
    const long pid = ::syscall(SYS_clone, request.flags | SIGCHLD, 0, 0, 0, 0);
    if (pid == 0) run_init(plan);
    return static_cast<pid_t>(pid);
  }
  int pid_pipe[2];
  if (::pipe2(pid_pipe, O_CLOEXEC) != 0) return -1;
  fd_guard pid_r(pid_pipe[0]), pid_w(pid_pipe[1]);
  launch_plan launch;
  launch.userns_fd = request.userns_fd;
  launch.mount_ns_fd = request.mount_ns_fd;
  launch.flags = request.flags;
  launch.pid_fd = pid_w.get();
  const long launcher = ::syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
  if (launcher == 0) run_launcher(plan, launch);
  pid_w.reset();
  if (launcher < 0) return -1;
  std::int64_t pid = -1;
  ssize_t got;
  while ((got = ::read(pid_r.get(), &pid, sizeof pid)) < 0 && errno == EINTR) {
  }
  wait_for(static_cast<pid_t>(launcher));
  return got == static_cast<ssize_t>(sizeof pid) ? static_cast<pid_t>(pid) : -1;
}

}  // namespace cascade_rl::verify::detail
