#pragma once
// What a sandboxed run may use, and what to do when the system cannot isolate it.

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace cascade_rl::verify {

// Resource limits of one run. The run-level caps hold for every process of the run
// together: memory (a memory cgroup, swap included where the kernel counts it; page
// cache and the scratch directory's files count too, they are memory), CPU time (a
// cgroup's CPU accounting, checked by the sandbox's init every few milliseconds; the
// run is stopped as at the wall clock), the scratch directory's bytes and inodes (a
// tmpfs of that size), the number of processes (a pids cgroup; the sandbox's own init
// is not counted). Each process also has RLIMIT_CPU (cpu_time rounded up to whole
// seconds), RLIMIT_AS and RLIMIT_FSIZE. Output beyond the caps is dropped and flagged;
// with kill_on_output_overflow the run is stopped at the first dropped byte.
struct limits {
  std::chrono::milliseconds wall_time{10'000};
  std::chrono::milliseconds cpu_time{10'000};        // summed over the run's processes
  std::uint64_t memory_bytes = 1ull << 30;           // the whole run
  std::uint64_t address_space_bytes = 1ull << 30;    // each process (RLIMIT_AS)
  std::uint64_t file_size_bytes = 16ull << 20;       // each file (RLIMIT_FSIZE)
  std::uint64_t scratch_bytes = 64ull << 20;         // the scratch directory, all files
  std::uint64_t scratch_inodes = 16384;              // files, directories and links in it
  std::uint64_t max_processes = 32;                  // the whole run
  std::uint64_t max_open_files = 256;                // each process (RLIMIT_NOFILE)
  std::size_t stdout_bytes = 1u << 20;
  std::size_t stderr_bytes = 64u << 10;
  bool kill_on_output_overflow = true;
};

// A mechanism the system refuses (no namespaces without privileges, no cgroup, no
// seccomp): refuse to build the sandbox (throws cascade_rl::error), or run without it,
// printing a warning to stderr once per process and listing it in every result's
// warnings.
enum class missing_isolation { refuse, warn };

// What a denied system call does: fail with EPERM (the program goes on, and the result
// lists the call), or end the run at once (termination::syscall_denied).
enum class syscall_denial { fail_call, end_run };

// The seccomp filter every program runs under (libseccomp). The default deny-list is
// detail::default_denied_syscalls() (see syscall_filter.hpp): debugging other
// processes, mounts and namespaces, kernel modules and kexec, bpf, perf_event_open, the
// key store, userfaultfd, io_uring, personality changes, raw and packet sockets, clock
// and swap administration. `extra_denied` adds system calls by name ("socket",
// "execve", ...); an unknown name is refused when the sandbox is built.
struct syscall_filter_options {
  bool enabled = true;
  std::vector<std::string> extra_denied{};
  syscall_denial on_denied = syscall_denial::fail_call;
};

struct sandbox_options {
  struct limits limits {};
  missing_isolation on_missing_isolation = missing_isolation::refuse;
  // Scratch directories are made here (mkdtemp); with a tmpfs scratch the directory is
  // only the mount point, empty on the host, and it is removed after the run.
  std::filesystem::path scratch_parent = std::filesystem::temp_directory_path();
  // When the caller is root each scratch directory (so each run that does not share
  // one) gets a uid, and the gid of the same number, of its own from id_range, with no
  // capabilities and no supplementary groups; runs at the same time never share one
  // (detail/identities.hpp). Give two trainers on one machine disjoint ranges.
  struct id_range {
    std::uint32_t first = 2'000'000'000;
    std::uint32_t count = 65536;
  } ids{};
  // A caller that is not root runs the program in a user namespace where the caller's
  // own uid/gid appear as these (the only ids such a namespace can map).
  std::uint32_t uid = 65534;
  std::uint32_t gid = 65534;
  // The program's environment: PATH, HOME=TMPDIR=<scratch>, LANG=C.UTF-8, then these
  // "NAME=value" entries. Nothing is inherited from the caller.
  std::vector<std::string> environment{};
  std::string path_variable = "/usr/local/bin:/usr/bin:/bin";
  // At most this many programs run at once through this sandbox and its copies, from
  // any number of threads (0: no bound beyond the callers' own threads).
  std::size_t max_concurrent_runs = 0;
  syscall_filter_options syscall_filter{};
  // The program's file view (detail/view.hpp): a fresh read-only root holding only
  // system_paths (bound read-only; links such as a merged /usr's /bin -> usr/bin kept as
  // links; missing ones skipped), /etc/<etc_files> from the host and a passwd, group,
  // hosts and hostname of the run's own, a private /dev (null, zero, full, random,
  // urandom, a devpts instance of its own, a small /dev/shm), the run's /proc, a small
  // private /tmp, read_only_paths (bound read-only; each must exist) and the scratch
  // directory. Test data and expected outputs must not be under any of them. Off (or
  // where the system has no PID namespace): the whole host file system read-only (its
  // /proc still hides init, with a PID namespace).
  bool minimal_view = true;
  // The view's host directories (system_paths, etc_files and read_only_paths that are
  // directories) seen through read-only overlays of their own: the same files, other
  // inodes, so a program's flock/fcntl locks and inotify watches on them are its own and
  // never block or watch the host's. A directory with mounts below it, and a listed
  // file, are bound instead (their locks reach the host's). Off, or where overlayfs is
  // refused (reported): bound.
  bool overlay_view = true;
  std::vector<std::filesystem::path> system_paths{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"};
  std::vector<std::string> etc_files{"ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime"};
  std::vector<std::filesystem::path> read_only_paths{};
  // Directories the program sees empty (an empty read-only tmpfs is mounted on each),
  // within the view: /run holds sockets (D-Bus, Docker, systemd) and secrets, for when
  // the whole host file system is shown. Paths that do not exist are skipped;
  // scratch_parent must not be inside one.
  std::vector<std::filesystem::path> hidden_paths{"/run"};
  // Where per-run cgroups are made, relative to each cgroup hierarchy (cgroup v1: under
  // /sys/fs/cgroup/<controller>/, cgroup v2: under /sys/fs/cgroup/). Empty: under the
  // trainer's own cgroup of each hierarchy, so that its container's limits hold the
  // runs (cgroup v2: after its processes move into a leaf of it, detail/cgroups.hpp's
  // find_cgroups), else the hierarchy's root. A caller that is not root passes a
  // directory delegated to its uid (chown'd by an administrator, or by systemd with
  // Delegate=yes).
  std::filesystem::path cgroup_parent{};
  // The run-level caps, each on by default; turning one off (to measure what it costs,
  // or where a system lacks it and the caller accepts that) leaves the per-process
  // rlimits alone and is not reported as missing isolation.
  bool memory_and_cpu_cgroups = true;  // limits.memory_bytes and the run's cpu_time
  bool tmpfs_scratch = true;           // limits.scratch_bytes and scratch_inodes
};

}  // namespace cascade_rl::verify
