#pragma once
// What a sandboxed run may use, and what to do when the system cannot isolate it.

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace cascade_rl::verify {

// Resource limits of one run. CPU time is per process (RLIMIT_CPU, whole seconds,
// rounded up); the address space (RLIMIT_AS) and file size (RLIMIT_FSIZE) are per
// process too; the process count is for the whole run (a pids cgroup where one can be
// made, else RLIMIT_NPROC of the sandbox uid). Output beyond the caps is dropped and
// flagged; with kill_on_output_overflow the run is stopped at the first dropped byte.
struct limits {
  std::chrono::milliseconds wall_time{10'000};
  std::chrono::milliseconds cpu_time{10'000};
  std::uint64_t address_space_bytes = 1ull << 30;
  std::uint64_t file_size_bytes = 16ull << 20;
  std::uint64_t max_processes = 32;
  std::uint64_t max_open_files = 256;
  std::size_t stdout_bytes = 1u << 20;
  std::size_t stderr_bytes = 64u << 10;
  bool kill_on_output_overflow = true;
};

// A mechanism the system refuses (no namespaces without privileges, no pids cgroup):
// refuse to build the sandbox (throws cascade_rl::error), or run without it, printing
// a warning to stderr once per process and listing it in every result's warnings.
enum class missing_isolation { refuse, warn };

struct sandbox_options {
  struct limits limits {};
  missing_isolation on_missing_isolation = missing_isolation::refuse;
  // Scratch directories are made here (mkdtemp) and removed after the run.
  std::filesystem::path scratch_parent = std::filesystem::temp_directory_path();
  // When the caller is root the program runs as this uid/gid (nobody by default), with
  // no capabilities and no supplementary groups.
  std::uint32_t uid = 65534;
  std::uint32_t gid = 65534;
  // The program's environment: PATH, HOME=TMPDIR=<scratch>, LANG=C.UTF-8, then these
  // "NAME=value" entries. Nothing is inherited from the caller.
  std::vector<std::string> environment{};
  std::string path_variable = "/usr/local/bin:/usr/bin:/bin";
  // At most this many programs run at once through this sandbox and its copies, from
  // any number of threads (0: no bound beyond the callers' own threads).
  std::size_t max_concurrent_runs = 0;
};

}  // namespace cascade_rl::verify
