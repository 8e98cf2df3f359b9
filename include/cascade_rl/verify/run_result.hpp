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
  cpu_time_limit,   // RLIMIT_CPU (SIGXCPU, or SIGKILL at the hard limit)
  wall_time_limit,  // still running at limits.wall_time: the whole process tree killed
  output_limit,     // printed more than the caps with kill_on_output_overflow
  file_size_limit,  // SIGXFSZ: wrote a file larger than limits.file_size_bytes
  exec_failed,      // the program could not be started (see error)
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
  }
  return "?";
}

struct run_result {
  termination reason = termination::exited;
  int exit_code = -1;       // when reason == exited
  int signal = 0;           // the signal that ended the program, if one did
  double wall_seconds = 0;  // from start to the end of the whole process tree
  double cpu_seconds = 0;   // user + system of the program and the children it reaped
  std::uint64_t peak_memory_bytes = 0;  // largest resident set of any of its processes
  std::string stdout_text{};
  std::string stderr_text{};
  bool stdout_truncated = false;
  bool stderr_truncated = false;
  std::string error{};                // why exec failed
  std::vector<std::string> warnings{};  // isolation that was missing (missing_isolation::warn)

  [[nodiscard]] bool succeeded() const { return reason == termination::exited && exit_code == 0; }
  [[nodiscard]] bool hit_limit() const {
    return reason == termination::cpu_time_limit || reason == termination::wall_time_limit ||
           reason == termination::output_limit || reason == termination::file_size_limit;
  }
};

}  // namespace cascade_rl::verify
