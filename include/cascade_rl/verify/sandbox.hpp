#pragma once
// Runs an untrusted program (a binary, or an interpreter with a script) in a child
// process tree that cannot outlive the run, reach the network, write outside its
// scratch directory or take more than its limits; see detail/sandbox_child.hpp for the
// process layout and isolation.hpp for what the system is asked for. A sandbox is
// immutable after construction and run() may be called from many threads at once.

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <condition_variable>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cascade_rl/core/error.hpp"
#include "cascade_rl/verify/detail/sandbox_child.hpp"
#include "cascade_rl/verify/isolation.hpp"
#include "cascade_rl/verify/run_result.hpp"
#include "cascade_rl/verify/sandbox_options.hpp"
#include "cascade_rl/verify/scratch_directory.hpp"

namespace cascade_rl::verify {

// One program run: argv[0] is a path (relative paths with a '/' are relative to the
// scratch directory) or a name looked up in sandbox_options::path_variable.
struct command {
  std::vector<std::string> argv;
  std::string stdin_data{};
  std::vector<file> files{};               // written into the scratch directory first
  std::vector<std::string> environment{};  // extra "NAME=value" entries
  std::optional<struct limits> limits{};   // overrides sandbox_options::limits
};

namespace detail {

class fd_guard {
 public:
  explicit fd_guard(int fd = -1) : fd_(fd) {}
  fd_guard(const fd_guard&) = delete;
  fd_guard& operator=(const fd_guard&) = delete;
  ~fd_guard() { reset(); }
  [[nodiscard]] int get() const { return fd_; }
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

inline void write_small_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path);
  out << text << std::flush;
  if (!out) cascade_rl::detail::fail("sandbox", "cannot write '" + path.string() + "'");
}

// Processes of `uid` now (RLIMIT_NPROC counts them all).
inline std::uint64_t processes_of(std::uint32_t uid) {
  std::uint64_t n = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    struct stat st {};
    if (::stat(entry.path().c_str(), &st) == 0 && st.st_uid == uid) ++n;
  }
  return n;
}

// A per-run pids cgroup, removed when the run is over (it is empty by then).
class pids_cgroup {
 public:
  pids_cgroup(const std::filesystem::path& root, std::uint64_t max_processes) {
    if (root.empty()) return;
    path_ = new_cgroup_name(root);
    if (::mkdir(path_.c_str(), 0755) != 0) fail_errno("cannot make cgroup " + path_.string());
    write_small_file(path_ / "pids.max", std::to_string(max_processes));
  }
  pids_cgroup(const pids_cgroup&) = delete;
  pids_cgroup& operator=(const pids_cgroup&) = delete;
  ~pids_cgroup() {
    if (path_.empty()) return;
    for (int attempt = 0; attempt < 200 && ::rmdir(path_.c_str()) != 0 && errno == EBUSY; ++attempt)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  void add(pid_t pid) const {
    if (!path_.empty()) write_small_file(path_ / "cgroup.procs", std::to_string(pid));
  }

 private:
  std::filesystem::path path_;
};

inline std::optional<std::string> resolve_executable(const std::string& name,
                                                     const std::filesystem::path& scratch,
                                                     const std::string& path_variable) {
  if (name.find('/') != std::string::npos) {
    const std::filesystem::path p(name);
    return (p.is_absolute() ? p : scratch / p).string();
  }
  std::size_t start = 0;
  while (start <= path_variable.size()) {
    const std::size_t end = std::min(path_variable.find(':', start), path_variable.size());
    const std::filesystem::path candidate = std::filesystem::path(path_variable.substr(start, end - start)) / name;
    struct stat st {};
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0111)) return candidate.string();
    start = end + 1;
  }
  return std::nullopt;
}

// A counting semaphore whose bound is chosen at run time.
class run_slots {
 public:
  explicit run_slots(std::size_t n) : free_(n) {}
  void acquire() {
    std::unique_lock lock(mutex_);
    available_.wait(lock, [&] { return free_ > 0; });
    --free_;
  }
  void release() {
    { const std::lock_guard lock(mutex_); ++free_; }
    available_.notify_one();
  }

 private:
  std::mutex mutex_;
  std::condition_variable available_;
  std::size_t free_;
};

}  // namespace detail

class sandbox {
 public:
  explicit sandbox(sandbox_options options = {})
      : options_(std::move(options)),
        support_(&probe_isolation()),
        slots_(options_.max_concurrent_runs ? std::make_shared<detail::run_slots>(options_.max_concurrent_runs)
                                            : nullptr) {
    validate_limits(options_.limits, "sandbox_options.limits");
    const bool root = support_->privilege_drop;
    if (root && options_.uid == 0)
      cascade_rl::detail::fail("sandbox_options.uid", "is 0: the program must not run as root");
    std::vector<std::string> missing;
    if (!support_->network_namespace)
      missing.push_back("no network namespace (CLONE_NEWNET refused): the program can use the network");
    if (!support_->pid_namespace)
      missing.push_back("no PID namespace (CLONE_NEWPID refused): a background process that leaves "
                        "its process group (setsid) survives the run");
    if (!support_->read_only_root)
      missing.push_back("no mount namespace with a read-only root: the program can write wherever uid " +
                        std::to_string(root ? options_.uid : ::geteuid()) + " may");
    if (support_->pids_cgroup.empty())
      missing.push_back(std::string("no pids cgroup: the process count is RLIMIT_NPROC of uid ") +
                        std::to_string(root ? options_.uid : ::geteuid()) +
                        ", shared with every other process of that uid");
    if (!missing.empty()) {
      if (options_.on_missing_isolation == missing_isolation::refuse) {
        std::string all;
        for (const auto& m : missing) all += (all.empty() ? "" : "; ") + m;
        cascade_rl::detail::fail("sandbox_options.on_missing_isolation",
                                 "is refuse, and this system lacks isolation: " + all);
      }
      warnings_ = missing;
      static std::once_flag warned;
      std::call_once(warned, [&] {
        for (const auto& m : missing) std::fprintf(stderr, "cascade_rl verify: WARNING: %s\n", m.c_str());
      });
    }
  }

  [[nodiscard]] const sandbox_options& options() const { return options_; }
  [[nodiscard]] const isolation_support& isolation() const { return *support_; }
  [[nodiscard]] const std::vector<std::string>& warnings() const { return warnings_; }

  // A fresh scratch directory for several runs that share files (compile, then test).
  [[nodiscard]] scratch_directory make_scratch() const { return scratch_directory(options_.scratch_parent); }

  // Runs `cmd` in a fresh scratch directory, removed afterwards.
  [[nodiscard]] run_result run(const command& cmd) const {
    const scratch_directory scratch = make_scratch();
    return run(cmd, scratch);
  }

  // Runs `cmd` in `scratch` (its files are written there first; the directory and
  // everything in it belong to the sandbox uid afterwards).
  [[nodiscard]] run_result run(const command& cmd, const scratch_directory& scratch) const {
    if (cmd.argv.empty()) cascade_rl::detail::fail("command.argv", "is empty");
    const struct limits& lim = cmd.limits ? *cmd.limits : options_.limits;
    if (cmd.limits) validate_limits(lim, "command.limits");
    for (const file& f : cmd.files) scratch.write(f);
    if (support_->privilege_drop) scratch.hand_over(options_.uid, options_.gid);

    run_result result;
    result.warnings = warnings_;
    const std::string scratch_path = scratch.path().string();
    const auto resolved = detail::resolve_executable(cmd.argv[0], scratch.path(), options_.path_variable);
    if (!resolved) {
      result.reason = termination::exec_failed;
      result.error = "'" + cmd.argv[0] + "' not found in " + options_.path_variable;
      return result;
    }

    // Everything the child reads, built before the clone.
    std::vector<std::string> env = {"PATH=" + options_.path_variable, "HOME=" + scratch_path,
                                    "TMPDIR=" + scratch_path, "LANG=C.UTF-8", "PWD=" + scratch_path};
    env.insert(env.end(), options_.environment.begin(), options_.environment.end());
    env.insert(env.end(), cmd.environment.begin(), cmd.environment.end());
    std::vector<char*> argv_ptrs, env_ptrs;
    for (const auto& a : cmd.argv) argv_ptrs.push_back(const_cast<char*>(a.c_str()));
    for (const auto& e : env) env_ptrs.push_back(const_cast<char*>(e.c_str()));
    argv_ptrs.push_back(nullptr);
    env_ptrs.push_back(nullptr);

    // stdin from a memfd: no writer to block on, no SIGPIPE.
    detail::fd_guard input(::memfd_create("cascade_rl_stdin", MFD_CLOEXEC));
    if (input.get() < 0) detail::fail_errno("memfd_create");
    for (std::size_t done = 0; done < cmd.stdin_data.size();) {
      const ssize_t n = ::write(input.get(), cmd.stdin_data.data() + done, cmd.stdin_data.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) detail::fail_errno("writing stdin");
      done += static_cast<std::size_t>(n);
    }
    ::lseek(input.get(), 0, SEEK_SET);
    int out_pipe[2], err_pipe[2], status_pipe[2], control[2];
    if (::pipe2(out_pipe, O_CLOEXEC) != 0) detail::fail_errno("pipe");
    detail::fd_guard out_r(out_pipe[0]), out_w(out_pipe[1]);
    if (::pipe2(err_pipe, O_CLOEXEC) != 0) detail::fail_errno("pipe");
    detail::fd_guard err_r(err_pipe[0]), err_w(err_pipe[1]);
    if (::pipe2(status_pipe, O_CLOEXEC) != 0) detail::fail_errno("pipe");
    detail::fd_guard status_r(status_pipe[0]), status_w(status_pipe[1]);
    // A socket, not a pipe: send(MSG_NOSIGNAL) to a dead init cannot raise SIGPIPE.
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, control) != 0) detail::fail_errno("socketpair");
    detail::fd_guard control_parent(control[0]), control_child(control[1]);

    const bool root = support_->privilege_drop;
    detail::child_plan plan;
    plan.path = resolved->c_str();
    plan.argv = argv_ptrs.data();
    plan.envp = env_ptrs.data();
    plan.scratch = scratch_path.c_str();
    plan.stdin_fd = input.get();
    plan.stdout_fd = out_w.get();
    plan.stderr_fd = err_w.get();
    plan.status_fd = status_w.get();
    plan.control_fd = control_child.get();
    plan.pid_namespace = support_->pid_namespace;
    plan.mount_namespace = support_->read_only_root;
    plan.read_only_root = support_->read_only_root;
    plan.uts_namespace = support_->uts_namespace;
    plan.drop_privileges = root;
    plan.uid = options_.uid;
    plan.gid = options_.gid;
    if (support_->pids_cgroup.empty()) {
      plan.limit_nproc = true;
      plan.nproc = lim.max_processes + (root ? 0 : detail::processes_of(::geteuid()));
    }
    const auto cpu_ms = static_cast<std::uint64_t>(lim.cpu_time.count());
    plan.cpu_seconds = (cpu_ms + 999) / 1000;
    plan.address_space = lim.address_space_bytes;
    plan.file_size = lim.file_size_bytes;
    plan.open_files = lim.max_open_files;
    plan.wall_ms = static_cast<long>(lim.wall_time.count());

    unsigned long flags = SIGCHLD;
    if (support_->network_namespace) flags |= CLONE_NEWNET;
    if (support_->pid_namespace) flags |= CLONE_NEWPID;
    if (support_->read_only_root) flags |= CLONE_NEWNS;
    if (support_->ipc_namespace) flags |= CLONE_NEWIPC;
    if (support_->uts_namespace) flags |= CLONE_NEWUTS;

    struct slot_guard {
      detail::run_slots* slots;
      explicit slot_guard(detail::run_slots* s) : slots(s) { if (slots) slots->acquire(); }
      ~slot_guard() { if (slots) slots->release(); }
      slot_guard(const slot_guard&) = delete;
      slot_guard& operator=(const slot_guard&) = delete;
    } slot(slots_.get());
    const detail::pids_cgroup cgroup(support_->pids_cgroup, lim.max_processes);
    const auto start = std::chrono::steady_clock::now();
    const long pid = ::syscall(SYS_clone, flags, 0, 0, 0, 0);
    if (pid < 0) detail::fail_errno("clone");
    if (pid == 0) detail::run_init(plan);
    const auto init = static_cast<pid_t>(pid);
    input.reset();
    out_w.reset();
    err_w.reset();
    status_w.reset();
    control_child.reset();
    try {
      cgroup.add(init);
    } catch (...) {
      ::kill(init, SIGKILL);
      ::waitpid(init, nullptr, 0);
      throw;
    }
    ::send(control_parent.get(), "g", 1, MSG_NOSIGNAL);

    // Collect output and status records until init is gone.
    std::vector<detail::status_record> records;
    const auto backstop = start + lim.wall_time + std::chrono::seconds(2);
    bool kill_sent = false, init_killed = false;
    std::optional<std::chrono::steady_clock::time_point> init_gone;
    struct stream {
      int fd;
      std::string* text;
      std::size_t cap;
      bool* truncated;
      bool open = true;
    };
    stream streams[2] = {{out_r.get(), &result.stdout_text, lim.stdout_bytes, &result.stdout_truncated},
                         {err_r.get(), &result.stderr_text, lim.stderr_bytes, &result.stderr_truncated}};
    bool status_open = true;
    char buffer[65536];
    while (streams[0].open || streams[1].open || status_open) {
      const auto now = std::chrono::steady_clock::now();
      if (now >= backstop && !init_killed) {  // init itself stuck: kill the namespace
        ::kill(-init, SIGKILL);
        ::kill(init, SIGKILL);
        init_killed = true;
      }
      // Without a PID namespace a background process may hold the pipes: stop
      // reading shortly after init is gone.
      if (init_gone && now - *init_gone > std::chrono::milliseconds(200)) break;
      if (init_killed && now - backstop > std::chrono::seconds(1)) break;
      pollfd fds[3];
      int map[3], n = 0;
      for (int s = 0; s < 2; ++s)
        if (streams[s].open) {
          fds[n] = {streams[s].fd, POLLIN, 0};
          map[n++] = s;
        }
      if (status_open) {
        fds[n] = {status_r.get(), POLLIN, 0};
        map[n++] = 2;
      }
      const auto wait_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                               (init_killed || init_gone ? now + std::chrono::milliseconds(50) : backstop) - now)
                               .count();
      const int ready = ::poll(fds, static_cast<nfds_t>(n), static_cast<int>(std::max<long long>(wait_ms, 1)));
      if (ready < 0 && errno != EINTR) detail::fail_errno("poll");
      for (int k = 0; ready > 0 && k < n; ++k) {
        if (!(fds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        if (map[k] == 2) {
          detail::status_record r;
          const ssize_t got = ::read(status_r.get(), &r, sizeof r);
          if (got == static_cast<ssize_t>(sizeof r)) {
            records.push_back(r);
          } else if (got == 0 || (got < 0 && errno != EINTR)) {
            status_open = false;
            init_gone = std::chrono::steady_clock::now();
          }
          continue;
        }
        stream& s = streams[map[k]];
        const ssize_t got = ::read(s.fd, buffer, sizeof buffer);
        if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN)) {
          s.open = false;
          continue;
        }
        if (got < 0) continue;
        const auto size = static_cast<std::size_t>(got);
        const std::size_t room = s.cap - std::min(s.cap, s.text->size());
        s.text->append(buffer, std::min(room, size));
        if (size > room) {
          *s.truncated = true;
          if (lim.kill_on_output_overflow && !kill_sent) {
            ::send(control_parent.get(), "k", 1, MSG_NOSIGNAL);
            kill_sent = true;
          }
        }
      }
    }
    if (status_open) {  // gave up waiting: make sure init is dead
      ::kill(-init, SIGKILL);
      ::kill(init, SIGKILL);
    }
    int init_status = 0;
    rusage init_usage{};
    while (::wait4(init, &init_status, 0, &init_usage) < 0 && errno == EINTR) {
    }
    result.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    classify(records, init_usage, lim, kill_sent, init_killed, result);
    return result;
  }

 private:
  static void validate_limits(const struct limits& l, const std::string& name) {
    if (l.wall_time.count() <= 0) cascade_rl::detail::fail(name + ".wall_time", "must be positive");
    if (l.cpu_time.count() <= 0) cascade_rl::detail::fail(name + ".cpu_time", "must be positive");
    if (l.address_space_bytes == 0) cascade_rl::detail::fail(name + ".address_space_bytes", "is 0");
    if (l.max_processes == 0) cascade_rl::detail::fail(name + ".max_processes", "is 0");
    if (l.max_open_files < 4) cascade_rl::detail::fail(name + ".max_open_files", "is below 4");
  }

  static void classify(const std::vector<detail::status_record>& records, const rusage& init_usage,
                       const struct limits& lim, bool kill_sent, bool init_killed, run_result& result) {
    const detail::status_record* finished = nullptr;
    for (const auto& r : records) {
      if (r.kind == detail::record_setup_failed)
        cascade_rl::detail::fail("sandbox", std::string("setup failed while ") + detail::setup_step_name(r.step) +
                                                ": " + std::strerror(r.error));
      if (r.kind == detail::record_exec_failed) {
        result.reason = termination::exec_failed;
        result.error = std::string("execve: ") + std::strerror(r.error);
      }
      if (r.kind == detail::record_finished) finished = &r;
    }
    if (finished == nullptr) {  // init killed by the backstop (or died before reporting)
      result.cpu_seconds = static_cast<double>(init_usage.ru_utime.tv_sec + init_usage.ru_stime.tv_sec) +
                           static_cast<double>(init_usage.ru_utime.tv_usec + init_usage.ru_stime.tv_usec) * 1e-6;
      if (result.reason != termination::exec_failed)
        result.reason = kill_sent ? termination::output_limit : termination::wall_time_limit;
      result.signal = SIGKILL;
      (void)init_killed;
      return;
    }
    result.cpu_seconds = static_cast<double>(finished->cpu_us) * 1e-6;
    result.peak_memory_bytes = static_cast<std::uint64_t>(finished->maxrss_kb) * 1024;
    if (result.reason == termination::exec_failed) return;
    const int status = finished->wait_status;
    if (WIFEXITED(status)) {
      result.exit_code = WEXITSTATUS(status);
      result.reason = termination::exited;
    } else if (WIFSIGNALED(status)) {
      result.signal = WTERMSIG(status);
      const double cpu_limit = std::ceil(static_cast<double>(lim.cpu_time.count()) / 1000.0);
      if (result.signal == SIGXCPU || (result.signal == SIGKILL && result.cpu_seconds >= cpu_limit))
        result.reason = termination::cpu_time_limit;
      else if (result.signal == SIGXFSZ)
        result.reason = termination::file_size_limit;
      else
        result.reason = termination::signaled;
    }
    // The caller's kill and the wall clock take precedence over the signal they sent.
    if (finished->ended == detail::ended_wall_time) result.reason = termination::wall_time_limit;
    if (finished->ended == detail::ended_by_caller && kill_sent) result.reason = termination::output_limit;
  }

  sandbox_options options_;
  const isolation_support* support_;
  std::shared_ptr<detail::run_slots> slots_;
  std::vector<std::string> warnings_;
};

}  // namespace cascade_rl::verify
