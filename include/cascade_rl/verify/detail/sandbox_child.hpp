#pragma once
// The code that runs between clone and exec. The parent is multithreaded (a worker
// pool), so after a raw clone only system calls are safe: no allocation, no locks, no
// glibc wrapper that talks to other threads (setuid and friends do, so they are called
// as raw syscalls). Everything the child needs is prepared by the parent in a
// child_plan before the clone.
//
// Process layout, with every namespace available:
//   caller (host)  --clone(NEWPID|NEWNET|NEWNS|NEWIPC|NEWUTS)-->  init (PID 1, root)
//   init  --clone-->  program (PID 2, uid nobody, rlimits, exec)
// init reaps every process of the namespace, enforces the wall-clock limit, kills all
// of them (kill(-1) inside the namespace) when the program ends, on timeout or when the
// caller asks, and reports the program's status and resource use on a pipe. When init
// exits the kernel kills whatever is left in the PID namespace.

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

#ifndef __NR_mount_setattr
#define __NR_mount_setattr 442
#endif
#ifndef __NR_close_range
#define __NR_close_range 436
#endif

namespace cascade_rl::verify::detail {

struct child_plan {
  const char* path = nullptr;  // executable, resolved by the parent
  char* const* argv = nullptr;
  char* const* envp = nullptr;
  const char* scratch = nullptr;  // absolute path; the program's working directory
  int stdin_fd = -1, stdout_fd = -1, stderr_fd = -1, status_fd = -1, control_fd = -1;
  bool pid_namespace = false;     // init is PID 1: kill(-1) reaches exactly the sandbox
  bool mount_namespace = false;
  bool read_only_root = false;    // needs mount_namespace
  bool uts_namespace = false;
  bool drop_privileges = false;   // setresuid/setresgid to uid/gid (caller is root)
  unsigned uid = 65534, gid = 65534;
  bool limit_nproc = false;       // RLIMIT_NPROC (only meaningful for a non-root uid)
  rlim_t nproc = 0;
  rlim_t cpu_seconds = 0, address_space = 0, file_size = 0, open_files = 0;
  long wall_ms = 0;
  bool probe_only = false;        // set up, report, exit (the isolation probe)
};

// Records on the status pipe; each is far below PIPE_BUF, so writes are atomic.
enum : std::int32_t { record_setup_failed = 1, record_exec_failed = 2, record_finished = 3 };
enum : std::int32_t { ended_naturally = 0, ended_wall_time = 1, ended_by_caller = 2 };

struct status_record {
  std::int32_t kind = 0;
  std::int32_t step = 0;         // setup step that failed
  std::int32_t error = 0;        // errno
  std::int32_t wait_status = 0;  // the program's, from wait4
  std::int32_t ended = ended_naturally;
  std::int32_t pad = 0;
  std::int64_t cpu_us = 0;
  std::int64_t maxrss_kb = 0;
};

// Setup steps, named in error messages.
enum : std::int32_t {
  step_fds = 1, step_setsid, step_mount_private, step_bind_scratch, step_read_only,
  step_scratch_writable, step_mount_proc, step_chdir, step_signals, step_fork,
  step_rlimits, step_groups, step_gid, step_uid, step_no_new_privs, step_exec,
};

inline const char* setup_step_name(std::int32_t step) {
  switch (step) {
    case step_fds: return "moving file descriptors";
    case step_setsid: return "setsid";
    case step_mount_private: return "making mounts private";
    case step_bind_scratch: return "bind-mounting the scratch directory";
    case step_read_only: return "making the root read-only (mount_setattr)";
    case step_scratch_writable: return "making the scratch directory writable";
    case step_mount_proc: return "mounting /proc";
    case step_chdir: return "chdir to the scratch directory";
    case step_signals: return "signal setup";
    case step_fork: return "forking the program";
    case step_rlimits: return "setting rlimits";
    case step_groups: return "setgroups";
    case step_gid: return "setresgid";
    case step_uid: return "setresuid";
    case step_no_new_privs: return "PR_SET_NO_NEW_PRIVS";
    case step_exec: return "execve";
  }
  return "?";
}

inline void write_record(int fd, const status_record& r) {
  while (::write(fd, &r, sizeof r) < 0 && errno == EINTR) {
  }
}

[[noreturn]] inline void setup_failed(int fd, std::int32_t step) {
  status_record r;
  r.kind = record_setup_failed;
  r.step = step;
  r.error = errno;
  write_record(fd, r);
  ::_exit(126);
}

struct mount_attr_args {
  std::uint64_t attr_set, attr_clr, propagation, userns_fd;
};
inline int set_mount_attr(const char* path, unsigned flags, std::uint64_t set, std::uint64_t clear) {
  mount_attr_args a{set, clear, 0, 0};
  return static_cast<int>(::syscall(__NR_mount_setattr, AT_FDCWD, path, flags, &a, sizeof a));
}
constexpr std::uint64_t attr_rdonly = 0x1, attr_nosuid = 0x2;
constexpr unsigned at_recursive = 0x8000;

// Closes every descriptor >= first (close_range, or a loop up to RLIMIT_NOFILE).
inline void close_from(int first) {
  if (::syscall(__NR_close_range, first, ~0u, 0) == 0) return;
  rlimit r{};
  ::getrlimit(RLIMIT_NOFILE, &r);
  const long top = r.rlim_cur == RLIM_INFINITY ? 65536 : static_cast<long>(r.rlim_cur);
  for (long fd = first; fd < top; ++fd) ::close(static_cast<int>(fd));
}

inline long monotonic_ms() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000 + ts.tv_nsec / 1'000'000;
}

// The program: limits, identity, exec. fd 3 is the status pipe (close-on-exec).
[[noreturn]] inline void exec_program(const child_plan& p) {
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::setpgid(0, 0);
  const auto limit = [](int resource, rlim_t soft, rlim_t hard) {
    rlimit r{soft, hard};
    if (::setrlimit(resource, &r) != 0) setup_failed(3, step_rlimits);
  };
  limit(RLIMIT_CPU, p.cpu_seconds, p.cpu_seconds + 1);
  limit(RLIMIT_AS, p.address_space, p.address_space);
  limit(RLIMIT_FSIZE, p.file_size, p.file_size);
  limit(RLIMIT_NOFILE, p.open_files, p.open_files);
  limit(RLIMIT_CORE, 0, 0);
  if (p.limit_nproc) limit(RLIMIT_NPROC, p.nproc, p.nproc);
  if (p.drop_privileges) {
    // Raw syscalls: glibc's wrappers broadcast to threads that do not exist here.
    if (::syscall(SYS_setgroups, 0, nullptr) != 0) setup_failed(3, step_groups);
    if (::syscall(SYS_setresgid, p.gid, p.gid, p.gid) != 0) setup_failed(3, step_gid);
    if (::syscall(SYS_setresuid, p.uid, p.uid, p.uid) != 0) setup_failed(3, step_uid);
  }
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) setup_failed(3, step_no_new_privs);
  ::execve(p.path, p.argv, p.envp);
  status_record r;
  r.kind = record_exec_failed;
  r.step = step_exec;
  r.error = errno;
  write_record(3, r);
  ::_exit(127);
}

// init: see the header comment. Never returns.
[[noreturn]] inline void run_init(const child_plan& p) {
  // fds: stdin/stdout/stderr of the program at 0-2, status pipe at 3, control socket
  // at 4; nothing else survives (another worker's pipes included).
  int hi[5] = {p.stdin_fd, p.stdout_fd, p.stderr_fd, p.status_fd, p.control_fd};
  for (int& fd : hi) {
    fd = ::fcntl(fd, F_DUPFD_CLOEXEC, 5);
    if (fd < 0) ::_exit(126);
  }
  for (int i = 0; i < 5; ++i)
    if (::dup2(hi[i], i) < 0) ::_exit(126);
  close_from(5);
  ::fcntl(3, F_SETFD, FD_CLOEXEC);
  ::fcntl(4, F_SETFD, FD_CLOEXEC);

  // Default dispositions (SIG_IGN would survive exec), SIGCHLD blocked for signalfd.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int s = 1; s < NSIG; ++s) ::sigaction(s, &dfl, nullptr);
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  if (::sigprocmask(SIG_BLOCK, &chld, nullptr) != 0) setup_failed(3, step_signals);

  if (::setsid() < 0) setup_failed(3, step_setsid);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  if (!p.pid_namespace) ::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);

  if (p.mount_namespace) {
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
      setup_failed(3, step_mount_private);
    if (p.read_only_root) {
      if (::mount(p.scratch, p.scratch, nullptr, MS_BIND | MS_REC, nullptr) != 0)
        setup_failed(3, step_bind_scratch);
      if (set_mount_attr("/", at_recursive, attr_rdonly | attr_nosuid, 0) != 0)
        setup_failed(3, step_read_only);
      if (set_mount_attr(p.scratch, at_recursive, 0, attr_rdonly) != 0)
        setup_failed(3, step_scratch_writable);
    }
    // A /proc of this PID namespace: the host's processes are not visible.
    if (p.pid_namespace &&
        ::mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY, nullptr) != 0)
      setup_failed(3, step_mount_proc);
  }
  if (p.uts_namespace) ::sethostname("sandbox", 7);
  if (::chdir(p.scratch) != 0) setup_failed(3, step_chdir);

  if (p.probe_only) {
    status_record r;
    r.kind = record_finished;
    write_record(3, r);
    ::_exit(0);
  }
  // Wait for the caller to put us in the cgroup.
  char go = 0;
  if (::read(4, &go, 1) != 1 || go != 'g') ::_exit(125);

  const int sfd = ::signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sfd < 0) setup_failed(3, step_signals);
  const long deadline = monotonic_ms() + p.wall_ms;

  const long program = ::syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
  if (program < 0) setup_failed(3, step_fork);
  if (program == 0) exec_program(p);
  ::close(0);
  ::close(1);
  ::close(2);

  const auto kill_all = [&] {
    if (p.pid_namespace)
      ::kill(-1, SIGKILL);  // every process of the namespace but init
    else
      ::kill(static_cast<pid_t>(-program), SIGKILL);  // its process group only
  };
  status_record done;
  done.kind = record_finished;
  bool program_done = false, killed = false;
  std::int64_t cpu_us = 0, maxrss = 0;
  const auto reap = [&](int options) {
    int status = 0;
    rusage ru{};
    for (;;) {
      const pid_t pid = ::wait4(-1, &status, options, &ru);
      if (pid <= 0) return;
      cpu_us += (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1'000'000LL + ru.ru_utime.tv_usec +
                ru.ru_stime.tv_usec;
      if (ru.ru_maxrss > maxrss) maxrss = ru.ru_maxrss;
      if (pid == program) {
        done.wait_status = status;
        program_done = true;
      }
    }
  };
  while (!program_done) {
    const long left = deadline - monotonic_ms();
    if (left <= 0 && !killed) {
      kill_all();
      killed = true;
      done.ended = ended_wall_time;
    }
    pollfd fds[2] = {{sfd, POLLIN, 0}, {4, POLLIN, 0}};
    const int n = ::poll(fds, killed ? 1 : 2, killed ? 100 : static_cast<int>(left > 0 ? left : 0));
    if (n > 0 && !killed && (fds[1].revents & (POLLIN | POLLHUP | POLLERR))) {
      kill_all();  // the caller asked ('k'), or it is gone (EOF)
      killed = true;
      done.ended = ended_by_caller;
    }
    signalfd_siginfo info;
    while (::read(sfd, &info, sizeof info) > 0) {
    }
    reap(WNOHANG);
  }
  kill_all();  // background children
  reap(WNOHANG);
  done.cpu_us = cpu_us;
  done.maxrss_kb = maxrss;
  write_record(3, done);
  ::_exit(0);
}

}  // namespace cascade_rl::verify::detail
