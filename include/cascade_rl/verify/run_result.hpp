#pragma once
// What one sandboxed run did: how it ended, what it used, what it printed.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace cascade_rl::verify {

enum class termination : std::uint8_t {
  exited,           // returned from main / called exit: see exit_code
  signaled,         // killed by a signal it raised or received (SIGSEGV, SIGABRT, ...)
  cpu_time_limit,   // the run's CPU time (all its processes), or RLIMIT_CPU of one
  wall_time_limit,  // still running at limits.wall_time: the whole process tree killed
  output_limit,     // printed more than the caps with kill_on_output_overflow
  file_size_limit,  // SIGXFSZ: wrote a file larger than limits.file_size_bytes
  exec_failed,      // the program could not be started (see error)
  memory_limit,     // the run's memory cgroup was full and the kernel killed a process
                    // of it (see oom_kills), and the program did not succeed
  disk_limit,       // the scratch directory was full (bytes or inodes) at the end and
                    // the program did not succeed (writes past the cap fail: ENOSPC)
  syscall_denied,   // a denied system call with syscall_denial::end_run (see
                    // denied_syscalls), or SIGSYS from the filter (another architecture)
};

[[nodiscard]] constexpr std::string_view to_string(termination t) {
  switch (t) {
    case termination::exited: return "exited";
    case termination::signaled: return "signaled";
    case termination::cpu_time_limit: return "cpu_time_limit";
    case termination::wall_time_limit: return "wall_time_limit";
    case termination::output_limit: return "output_limit";
    case termination::file_size_limit: return "file_size_limit";
    case termination::exec_failed: return "exec_failed";
    case termination::memory_limit: return "memory_limit";
    case termination::disk_limit: return "disk_limit";
    case termination::syscall_denied: return "syscall_denied";
  }
  return "?";
}

struct run_result {
  termination reason = termination::exited;
  int exit_code = -1;       // when reason == exited
  int signal = 0;           // the signal that ended the program, if one did
  double wall_seconds = 0;  // from start to the end of the whole process tree
  // CPU time of every process of the run (its cgroup); without a CPU cgroup, of the
  // program and the children it reaped.
  double cpu_seconds = 0;
  // The run's peak memory: its memory cgroup's high-water mark (every process, their
  // page cache and the scratch files they wrote); without one, peak_process_memory_bytes.
  std::uint64_t peak_memory_bytes = 0;
  std::uint64_t peak_process_memory_bytes = 0;  // largest resident set of one process
  std::uint64_t oom_kills = 0;  // processes the kernel killed at the memory cap
  // The scratch directory after the run (tmpfs scratch only): bytes and inodes in use,
  // and whether either was at its cap.
  std::uint64_t scratch_bytes_used = 0;
  std::uint64_t scratch_inodes_used = 0;
  bool scratch_full = false;
  // System calls the filter denied, by name, in the order first seen; and how many
  // denials there were in all.
  std::vector<std::string> denied_syscalls{};
  std::uint64_t denied_syscall_count = 0;
  std::string stdout_text{};
  std::string stderr_text{};
  bool stdout_truncated = false;
  bool stderr_truncated = false;
  std::string error{};                  // why exec failed
  std::vector<std::string> warnings{};  // isolation that was missing (missing_isolation::warn)

  [[nodiscard]] bool succeeded() const { return reason == termination::exited && exit_code == 0; }
  [[nodiscard]] bool hit_limit() const {
    return reason == termination::cpu_time_limit || reason == termination::wall_time_limit ||
           reason == termination::output_limit || reason == termination::file_size_limit ||
           reason == termination::memory_limit || reason == termination::disk_limit;
  }
};

}  // namespace cascade_rl::verify
