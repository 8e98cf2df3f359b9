#pragma once
// Runs an untrusted program (a binary, or an interpreter with a script) in a child
// process tree that cannot outlive the run, reach the network, write outside its
// scratch directory, make the system calls of the deny-list, or take more than its
// limits, per process and for the run as a whole; see detail/sandbox_child.hpp for the
// process layout and isolation.hpp for what the system is asked for. A sandbox is
// immutable after construction and run() may be called from many threads at once.

#include <fcntl.h>
#include <grp.h>
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
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cascade_rl/core/error.hpp"
#include "cascade_rl/verify/detail/cgroups.hpp"
#include "cascade_rl/verify/detail/identities.hpp"
#include "cascade_rl/verify/detail/namespaces.hpp"
#include "cascade_rl/verify/detail/sandbox_child.hpp"
#include "cascade_rl/verify/detail/syscall_filter.hpp"
#include "cascade_rl/verify/detail/view.hpp"
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

inline bool swap_configured() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  std::uint64_t kb = 0;
  while (meminfo >> key >> kb) {
    if (key == "SwapTotal:") return kb > 0;
    meminfo.ignore(256, '\n');
  }
  return false;
}

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

inline std::string mib(std::uint64_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

}  // namespace detail

class sandbox {
 public:
  explicit sandbox(sandbox_options options = {})
      : options_(std::move(options)),
        support_(probe_isolation()),
        slots_(options_.max_concurrent_runs ? std::make_shared<detail::run_slots>(options_.max_concurrent_runs)
                                            : nullptr) {
    validate_limits(options_.limits, "sandbox_options.limits");
    if (options_.uid == 0)
      cascade_rl::detail::fail("sandbox_options.uid", "is 0: the program must not run as root");
    if (options_.ids.first == 0 || options_.ids.count == 0 ||
        std::uint64_t{options_.ids.first} + options_.ids.count > 0xffffffffull)
      cascade_rl::detail::fail("sandbox_options.ids", "must be a non-empty range of ids from 1 below 4294967295");
    if (options_.hidden_paths.size() > static_cast<std::size_t>(detail::max_hidden_paths))
      cascade_rl::detail::fail("sandbox_options.hidden_paths",
                               "has more than " + std::to_string(detail::max_hidden_paths) + " entries");
    const std::filesystem::path scratch_parent = std::filesystem::absolute(options_.scratch_parent).lexically_normal();
    for (const auto& hidden : options_.hidden_paths) {
      if (!hidden.is_absolute() || hidden.lexically_normal() == "/")
        cascade_rl::detail::fail("sandbox_options.hidden_paths", "'" + hidden.string() + "' is not an absolute path below /");
      const auto rel = scratch_parent.lexically_relative(hidden.lexically_normal());
      if (!rel.empty() && *rel.begin() != "..")
        cascade_rl::detail::fail("sandbox_options.scratch_parent",
                                 "'" + scratch_parent.string() + "' is inside hidden path '" + hidden.string() + "'");
      hidden_.push_back(hidden.lexically_normal().string());
    }
    if (!options_.cgroup_parent.empty()) {
      const detail::cgroup_setup found = detail::find_cgroups(options_.cgroup_parent);
      support_.memory_cgroup = found.memory;
      support_.cpu_cgroup = found.cpu;
      support_.pids_cgroup = found.pids;
      support_.memory_swap_counted = found.memory_swap;
    }
    cgroups_ = {support_.cgroup_version, support_.memory_cgroup, support_.cpu_cgroup, support_.pids_cgroup,
                support_.memory_swap_counted};
    detail::remove_stale_cgroups(cgroups_);
    if (support_.user_namespace) {
      detail::held_namespaces user = detail::hold_user_namespace(options_.uid, options_.gid);
      if (user.user.get() < 0)
        cascade_rl::detail::fail("sandbox", "cannot make the sandbox's user namespace: " + user.error);
      userns_ = std::make_shared<detail::fd_guard>(std::move(user.user));
    }
    // Built whenever libseccomp is there, so that extra_denied is checked everywhere.
    if (options_.syscall_filter.enabled && detail::have_seccomp_library()) {
      auto filter = detail::build_syscall_filter(options_.syscall_filter.extra_denied, support_.syscall_reports);
      if (support_.syscall_filter) filter_ = std::move(filter);
    }
    if (options_.minimal_view && support_.minimal_view) {
      view_ = detail::base_view(options_.system_paths, options_.etc_files, options_.read_only_paths, true,
                                options_.overlay_view && support_.overlay_view);
      if (view_->size() + 3 > static_cast<std::size_t>(detail::max_view_entries))
        cascade_rl::detail::fail("sandbox_options.read_only_paths",
                                 "makes the file view more than " + std::to_string(detail::max_view_entries) +
                                     " entries long");
    }
    const std::vector<std::string> missing = missing_isolation_list();
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
  // What this sandbox uses: the system's (probe_isolation()), with the cgroups found
  // under sandbox_options::cgroup_parent.
  [[nodiscard]] const isolation_support& isolation() const { return support_; }
  [[nodiscard]] const std::vector<std::string>& warnings() const { return warnings_; }
  // Whether programs run under the seccomp filter.
  [[nodiscard]] bool filters_syscalls() const { return filter_ != nullptr; }

  // A fresh scratch directory for several runs that share files (compile, then test):
  // a tmpfs of limits.scratch_bytes and scratch_inodes (this sandbox's limits, or the
  // ones given) where the system allows it, else a host directory.
  [[nodiscard]] scratch_directory make_scratch() const { return make_scratch(options_.limits); }
  [[nodiscard]] scratch_directory make_scratch(const struct limits& lim) const {
    const bool root = support_.privilege_drop;
    auto id = root ? detail::lease_id(options_.ids.first, options_.ids.count) : nullptr;
    const std::uint32_t uid = id ? *id : options_.uid, gid = id ? *id : options_.gid;
    if (options_.tmpfs_scratch && support_.tmpfs_scratch) {
      scratch_directory scratch(options_.scratch_parent,
                                detail::tmpfs_request{.bytes = lim.scratch_bytes, .inodes = lim.scratch_inodes,
                                                      .uid = uid, .gid = gid,
                                                      .userns_fd = userns_ ? userns_->get() : -1,
                                                      .chown_writes = root});
      scratch.set_identity(std::move(id));
      return scratch;
    }
    scratch_directory scratch(options_.scratch_parent);
    if (root) scratch.hand_over(uid, gid);  // empty: nothing to walk
    scratch.set_identity(std::move(id));
    return scratch;
  }

  // Runs `cmd` in a fresh scratch directory, removed afterwards.
  [[nodiscard]] run_result run(const command& cmd) const {
    if (cmd.limits) validate_limits(*cmd.limits, "command.limits");
    const scratch_directory scratch = make_scratch(cmd.limits ? *cmd.limits : options_.limits);
    return run(cmd, scratch);
  }

  // Runs `cmd` in `scratch` (its files are written there first; the directory and
  // everything in it belong to the sandbox uid afterwards). Runs in one scratch
  // directory must not overlap in time.
  [[nodiscard]] run_result run(const command& cmd, const scratch_directory& scratch) const {
    if (cmd.argv.empty()) cascade_rl::detail::fail("command.argv", "is empty");
    const struct limits& lim = cmd.limits ? *cmd.limits : options_.limits;
    if (cmd.limits) validate_limits(lim, "command.limits");
    const bool root = support_.privilege_drop;
    if (root && !scratch.identity()) {
      // A directory the caller made: given an id at its first run, before any program
      // has written there (later runs never walk a tree a program left).
      auto id = detail::lease_id(options_.ids.first, options_.ids.count);
      scratch.hand_over(*id, *id);
      scratch.set_identity(std::move(id));
    }
    for (const file& f : cmd.files) scratch.write(f);
    const std::uint32_t run_uid = root ? *scratch.identity() : options_.uid;
    const std::uint32_t run_gid = root ? *scratch.identity() : options_.gid;

    const bool run_caps = options_.memory_and_cpu_cgroups;
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
    plan.pid_namespace = support_.pid_namespace;
    plan.mount_namespace = support_.read_only_root;
    plan.read_only_root = support_.read_only_root;
    plan.bind_scratch = !scratch.on_tmpfs();
    if (support_.read_only_root) {
      for (const std::string& hidden : hidden_) plan.hidden_paths[plan.hidden_count++] = hidden.c_str();
      if (root && scratch.on_tmpfs()) plan.scratch_ns_fd = scratch.mount_namespace();
    }
    std::optional<detail::file_view> view;
    std::vector<detail::view_entry> view_entries;
    if (view_) {
      view = *view_;
      detail::add_run_entries(*view, scratch_path, run_uid, run_gid);
      view_entries = view->raw();
      plan.view = view_entries.data();
      plan.view_count = static_cast<int>(view_entries.size());
    }
    plan.uts_namespace = support_.uts_namespace;
    plan.drop_privileges = root;
    plan.uid = run_uid;
    plan.gid = run_gid;
    if (support_.pids_cgroup.empty()) {
      plan.limit_nproc = true;
      plan.nproc = lim.max_processes + detail::processes_of(root ? run_uid : ::geteuid());
    }
    // Each process's RLIMIT_CPU, in whole seconds: the run's cap where there is no CPU
    // cgroup; a second more where the cgroup holds the run to the exact cap (the rlimit
    // is sampled at clock ticks, and runs ahead of the real time on a busy machine).
    const auto cpu_ms = static_cast<std::uint64_t>(lim.cpu_time.count());
    plan.cpu_seconds = (cpu_ms + 999) / 1000 + (run_caps && !cgroups_.cpu.empty() ? 1 : 0);
    plan.address_space = lim.address_space_bytes;
    plan.file_size = lim.file_size_bytes;
    plan.open_files = lim.max_open_files;
    plan.wall_ms = static_cast<long>(lim.wall_time.count());
    if (filter_) {
      plan.filter = filter_->data();
      plan.filter_length = static_cast<unsigned short>(filter_->size());
      plan.filter_notify = support_.syscall_reports;
      plan.end_run_on_denial = options_.syscall_filter.on_denied == syscall_denial::end_run;
    }

    detail::launch_request request;
    if (support_.network_namespace) request.flags |= CLONE_NEWNET;
    if (support_.pid_namespace) request.flags |= CLONE_NEWPID;
    if (support_.ipc_namespace) request.flags |= CLONE_NEWIPC;
    if (support_.uts_namespace) request.flags |= CLONE_NEWUTS;
    if (support_.read_only_root && plan.scratch_ns_fd < 0) request.flags |= CLONE_NEWNS;
    if (userns_) {
      request.userns_fd = userns_->get();
      if (scratch.on_tmpfs()) request.mount_ns_fd = scratch.mount_namespace();
    }

    struct slot_guard {
      detail::run_slots* slots;
      explicit slot_guard(detail::run_slots* s) : slots(s) { if (slots) slots->acquire(); }
      ~slot_guard() { if (slots) slots->release(); }
      slot_guard(const slot_guard&) = delete;
      slot_guard& operator=(const slot_guard&) = delete;
    } slot(slots_.get());
    const detail::run_cgroup cgroup(cgroups_, run_caps, run_caps, true, lim.memory_bytes, lim.max_processes);
    // The program writes itself into the cgroups through these (the file system is
    // read-only by then); init reads the CPU time through the last.
    std::vector<detail::fd_guard> procs;
    for (const std::string& file : cgroup.procs_files()) {
      procs.emplace_back(::open(file.c_str(), O_WRONLY | O_CLOEXEC));
      if (procs.back().get() < 0) detail::fail_errno("opening " + file);
      plan.cgroup_procs_fds[procs.size() - 1] = procs.back().get();
    }
    const detail::fd_guard cpu_usage(cgroup.open_cpu_usage());
    if (cpu_usage.get() >= 0) {
      plan.cpu_usage_fd = cpu_usage.get();
      plan.cpu_usage_v2 = cgroups_.version == 2;
    }
    plan.cpu_limit_ns = static_cast<std::int64_t>(lim.cpu_time.count()) * 1'000'000;
    const auto start = std::chrono::steady_clock::now();
    const pid_t init = detail::launch_init(plan, request);
    if (init < 0) {
      const int launch_errno = errno;
      status_w.reset();
      detail::status_record r;
      if (::read(status_r.get(), &r, sizeof r) == static_cast<ssize_t>(sizeof r) && r.kind == detail::record_setup_failed)
        cascade_rl::detail::fail("sandbox", std::string("setup failed while ") + detail::setup_step_name(r.step) +
                                                ": " + std::strerror(r.error));
      errno = launch_errno;
      detail::fail_errno("clone");
    }
    input.reset();
    out_w.reset();
    err_w.reset();
    status_w.reset();
    control_child.reset();
    procs.clear();

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
    classify(records, init_usage, lim, kill_sent, cgroup.usage(), scratch.usage(), result);
    return result;
  }

 private:
  static void validate_limits(const struct limits& l, const std::string& name) {
    if (l.wall_time.count() <= 0) cascade_rl::detail::fail(name + ".wall_time", "must be positive");
    if (l.cpu_time.count() <= 0) cascade_rl::detail::fail(name + ".cpu_time", "must be positive");
    if (l.memory_bytes == 0) cascade_rl::detail::fail(name + ".memory_bytes", "is 0");
    if (l.address_space_bytes == 0) cascade_rl::detail::fail(name + ".address_space_bytes", "is 0");
    if (l.scratch_bytes == 0) cascade_rl::detail::fail(name + ".scratch_bytes", "is 0");
    if (l.scratch_inodes < 2) cascade_rl::detail::fail(name + ".scratch_inodes", "is below 2");
    if (l.scratch_bytes >= l.memory_bytes)
      cascade_rl::detail::fail(name + ".scratch_bytes",
                               "is not below memory_bytes: the scratch directory's files are memory of the run");
    if (l.max_processes == 0) cascade_rl::detail::fail(name + ".max_processes", "is 0");
    if (l.max_open_files < 4) cascade_rl::detail::fail(name + ".max_open_files", "is below 4");
  }

  // What this sandbox lacks, one sentence each (empty: nothing).
  [[nodiscard]] std::vector<std::string> missing_isolation_list() const {
    const bool root = support_.privilege_drop;
    const std::string who = root ? std::string("the run's uid") : "uid " + std::to_string(::geteuid());
    std::vector<std::string> missing;
    if (!support_.network_namespace)
      missing.push_back("no network namespace (CLONE_NEWNET refused): the program can use the network");
    if (!support_.pid_namespace)
      missing.push_back("no PID namespace (CLONE_NEWPID refused): a background process that leaves "
                        "its process group (setsid) survives the run");
    if (!support_.read_only_root)
      missing.push_back("no mount namespace with a read-only root: the program can write wherever " + who + " may");
    else if (options_.minimal_view && !support_.minimal_view)
      missing.push_back("no minimal file view (it needs a PID namespace, pivot_root and open_tree): the "
                        "program can read every file of the host that " + who + " may, outside hidden_paths");
    else if (options_.minimal_view && options_.overlay_view && !support_.overlay_view)
      missing.push_back("no overlays in the file view (overlayfs refused): its directories are bind mounts of the "
                        "host's, so file locks and inotify watches a program takes on their files reach the host's");
    if (support_.user_namespace) {
      std::string groups;
      const int n = ::getgroups(0, nullptr);
      std::vector<gid_t> list(n > 0 ? static_cast<std::size_t>(n) : 0);
      if (n > 0 && ::getgroups(n, list.data()) == n)
        for (const gid_t g : list)
          if (g != ::getegid()) groups += (groups.empty() ? "" : ",") + std::to_string(g);
      missing.push_back(
          "not root, so the run is in an unprivileged user namespace: the program appears as uid " +
          std::to_string(options_.uid) + " but is " + who +
          " (the caller's) on the host, and can read every file the caller can " +
          (view_ ? std::string("within its file view (system_paths, read_only_paths)")
                 : std::string("outside hidden_paths")) +
          (groups.empty() ? std::string()
                          : ", with the caller's supplementary groups " + groups +
                                " (an unprivileged user namespace cannot drop them)") +
          ". Kept: its own PID, network, mount, IPC and UTS namespaces, the read-only root, the minimal file "
          "view, a private /proc, hidden_paths, no capabilities, NO_NEW_PRIVS, and the tmpfs scratch, syscall "
          "filter and cgroups where no other warning says otherwise; lost: a uid of its own per run");
    }
    if (support_.pids_cgroup.empty())
      missing.push_back("no pids cgroup: the process count is RLIMIT_NPROC of " + who +
                        ", shared with every other process of that uid");
    if (options_.memory_and_cpu_cgroups) {
      if (support_.memory_cgroup.empty())
        missing.push_back("no memory cgroup: a run's memory is capped only per process (address_space_bytes, " +
                          detail::mib(options_.limits.address_space_bytes) + ", times max_processes, " +
                          std::to_string(options_.limits.max_processes) + ")");
      else if (!support_.memory_swap_counted && detail::swap_configured())
        missing.push_back("the memory cgroup does not count swap (no memsw / memory.swap.max): a run may swap "
                          "beyond memory_bytes");
      if (support_.cpu_cgroup.empty())
        missing.push_back("no CPU cgroup: CPU time is limited per process (RLIMIT_CPU), a run's total only by "
                          "the wall clock");
    }
    if (options_.tmpfs_scratch && !support_.tmpfs_scratch)
      missing.push_back("no tmpfs scratch: the scratch directory is a host directory whose total size is not "
                        "capped (only each file, file_size_bytes)");
    if (options_.syscall_filter.enabled && !filter_)
      missing.push_back(std::string("no syscall filter (") +
                        (detail::have_seccomp_library() ? "seccomp refused" : "built without libseccomp") +
                        "): the kernel's whole system-call surface is exposed");
    else if (options_.syscall_filter.enabled && !support_.syscall_reports)
      missing.push_back("denied system calls fail with EPERM but are not reported (no seccomp user notification)");
    return missing;
  }

  void classify(const std::vector<detail::status_record>& records, const rusage& init_usage,
                const struct limits& lim, bool kill_sent, const detail::cgroup_usage& usage,
                const scratch_usage& disk, run_result& result) const {
    const detail::status_record* finished = nullptr;
    for (const auto& r : records) {
      if (r.kind == detail::record_setup_failed)
        cascade_rl::detail::fail("sandbox", std::string("setup failed while ") + detail::setup_step_name(r.step) +
                                                ": " + std::strerror(r.error));
      if (r.kind == detail::record_exec_failed) {
        result.reason = termination::exec_failed;
        result.error = std::string("execve: ") + std::strerror(r.error);
      }
      if (r.kind == detail::record_denied) result.denied_syscalls.push_back(detail::syscall_name(r.step));
      if (r.kind == detail::record_finished) finished = &r;
    }
    result.denied_syscall_count = finished ? static_cast<std::uint64_t>(finished->denied) : result.denied_syscalls.size();
    result.oom_kills = usage.oom_kills;
    result.scratch_bytes_used = disk.bytes_used;
    result.scratch_inodes_used = disk.inodes_used;
    result.scratch_full = disk.full;
    const auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6; };
    const double reaped_cpu = finished ? static_cast<double>(finished->cpu_us) * 1e-6
                                       : seconds(init_usage.ru_utime) + seconds(init_usage.ru_stime);
    const double init_cpu = finished ? static_cast<double>(finished->init_cpu_us) * 1e-6 : 0.0;
    result.cpu_seconds = (usage.cpu_ns ? static_cast<double>(*usage.cpu_ns) * 1e-9 : reaped_cpu) + init_cpu;
    result.peak_process_memory_bytes = finished ? static_cast<std::uint64_t>(finished->maxrss_kb) * 1024 : 0;
    result.peak_memory_bytes = usage.peak_memory_bytes.value_or(result.peak_process_memory_bytes);
    if (finished == nullptr) {  // init killed by the backstop (or died before reporting)
      if (result.reason != termination::exec_failed)
        result.reason = kill_sent ? termination::output_limit : termination::wall_time_limit;
      result.signal = SIGKILL;
      return;
    }
    if (result.reason == termination::exec_failed) return;
    const int status = finished->wait_status;
    if (WIFEXITED(status)) {
      result.exit_code = WEXITSTATUS(status);
      result.reason = termination::exited;
    } else if (WIFSIGNALED(status)) {
      result.signal = WTERMSIG(status);
      const double cpu_limit = std::ceil(static_cast<double>(lim.cpu_time.count()) / 1000.0);
      if (result.signal == SIGXCPU)
        result.reason = termination::cpu_time_limit;
      else if (result.signal == SIGXFSZ)
        result.reason = termination::file_size_limit;
      else if (result.signal == SIGSYS && filter_)
        result.reason = termination::syscall_denied;
      else if (result.signal == SIGKILL && usage.oom_kills > 0)
        result.reason = termination::memory_limit;
      else if (result.signal == SIGKILL && reaped_cpu >= cpu_limit)  // RLIMIT_CPU's hard limit
        result.reason = termination::cpu_time_limit;
      else
        result.reason = termination::signaled;
    }
    // The sandbox's own stops take precedence over the signal they sent.
    if (finished->ended == detail::ended_wall_time) result.reason = termination::wall_time_limit;
    if (finished->ended == detail::ended_cpu_time) result.reason = termination::cpu_time_limit;
    if (finished->ended == detail::ended_denied) result.reason = termination::syscall_denied;
    if (finished->ended == detail::ended_by_caller && kill_sent) result.reason = termination::output_limit;
    // A failure at a full run-level cap is put down to the cap.
    const bool failed = result.reason == termination::signaled ||
                        (result.reason == termination::exited && result.exit_code != 0);
    if (failed && usage.oom_kills > 0)
      result.reason = termination::memory_limit;
    else if (failed && disk.full)
      result.reason = termination::disk_limit;
  }

  sandbox_options options_;
  isolation_support support_;
  detail::cgroup_setup cgroups_{};
  std::shared_ptr<detail::fd_guard> userns_{};
  std::shared_ptr<const detail::filter_program> filter_{};
  std::vector<std::string> hidden_{};
  std::optional<detail::file_view> view_{};
  std::shared_ptr<detail::run_slots> slots_;
  std::vector<std::string> warnings_;
};

}  // namespace cascade_rl::verify
