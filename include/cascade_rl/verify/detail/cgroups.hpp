#pragma once
// Per-run cgroups: the memory, CPU time and process count of every process of a run
// together. Both cgroup versions are handled; which one the machine runs is read from
// the file-system type of /sys/fs/cgroup:
//   v1: one hierarchy per controller, /sys/fs/cgroup/{memory,cpuacct,pids}; a run gets a
//       directory in each (memory.limit_in_bytes + memory.memsw.limit_in_bytes,
//       cpuacct.usage, pids.max);
//   v2: one hierarchy, /sys/fs/cgroup; a run gets one directory (memory.max +
//       memory.swap.max, cpu.stat, pids.max). The v2 code is only what differs: the
//       `if (version == 2)` branches below.
// The program joins the run's cgroups itself, before exec (see sandbox_child.hpp): the
// sandbox's init stays outside, so the kernel's OOM killer never picks it (it is a
// fork of the trainer and would look large); init adds its own CPU time to the run's.
// By default the per-run cgroups are made under the trainer's own (find_cgroups).

#include <fcntl.h>
#include <linux/magic.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "cascade_rl/core/error.hpp"

#ifndef CGROUP2_SUPER_MAGIC
#define CGROUP2_SUPER_MAGIC 0x63677270
#endif
#ifndef CGROUP_SUPER_MAGIC
#define CGROUP_SUPER_MAGIC 0x27e0eb
#endif

namespace cascade_rl::verify::detail {

// Where per-run cgroups are made, per controller (v2: the same directory thrice).
struct cgroup_setup {
  int version = 0;  // 0: no cgroup file system, else 1 or 2
  std::filesystem::path memory{}, cpu{}, pids{};
  bool memory_swap = false;  // swap is counted in the memory cap (memsw / memory.swap.max)
};

inline std::atomic<unsigned long>& cgroup_counter() {
  static std::atomic<unsigned long> counter{0};
  return counter;
}

inline std::string new_cgroup_leaf() {
  return "cascade_rl_verify_" + std::to_string(::getpid()) + "_" + std::to_string(cgroup_counter().fetch_add(1));
}

// A whole small file (cgroup files are read and written in one call each).
inline std::optional<std::string> read_cgroup_file(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string out;
  char buffer[4096];
  for (ssize_t n; (n = ::read(fd, buffer, sizeof buffer)) > 0;) out.append(buffer, static_cast<std::size_t>(n));
  ::close(fd);
  return out;
}

inline bool write_cgroup_file(const std::filesystem::path& path, std::string_view text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  return ok;
}

// The number after `key` ("oom_kill 3" in memory.events), or the first number of the
// file when key is empty ("123\n" in cpuacct.usage).
inline std::optional<std::uint64_t> cgroup_number(const std::optional<std::string>& text, std::string_view key = {}) {
  if (!text) return std::nullopt;
  std::size_t at = 0;
  if (!key.empty()) {
    for (at = text->find(key); at != std::string::npos; at = text->find(key, at + 1))
      if ((at == 0 || (*text)[at - 1] == '\n') && at + key.size() < text->size() && (*text)[at + key.size()] == ' ')
        break;
    if (at == std::string::npos) return std::nullopt;
    at += key.size() + 1;
  }
  if (at >= text->size() || (*text)[at] < '0' || (*text)[at] > '9') return std::nullopt;
  std::uint64_t value = 0;
  for (; at < text->size() && (*text)[at] >= '0' && (*text)[at] <= '9'; ++at) value = value * 10 + static_cast<std::uint64_t>((*text)[at] - '0');
  return value;
}

inline long filesystem_type(const char* path) {
  struct statfs s {};
  return ::statfs(path, &s) == 0 ? static_cast<long>(s.f_type) : 0;
}

inline int machine_cgroup_version() {
  if (filesystem_type("/sys/fs/cgroup") == CGROUP2_SUPER_MAGIC) return 2;
  for (const char* controller : {"/sys/fs/cgroup/memory", "/sys/fs/cgroup/pids", "/sys/fs/cgroup/cpuacct"})
    if (filesystem_type(controller) == CGROUP_SUPER_MAGIC) return 1;
  return 0;
}

// Makes a probe cgroup under `base`, runs `check` on it, removes it.
template <class Check>
bool try_cgroup(const std::filesystem::path& base, Check&& check) {
  const std::filesystem::path probe = base / new_cgroup_leaf();
  if (::mkdir(probe.c_str(), 0755) != 0) return false;
  const bool ok = check(probe);
  ::rmdir(probe.c_str());
  return ok;
}

// Where this process can make per-run cgroups in the hierarchies of `version` mounted
// at `mount` (v1: the directory of the per-controller mounts), under `parent`
// (relative to each hierarchy; empty: its root).
inline cgroup_setup find_cgroups_in(int version, const std::filesystem::path& mount,
                                    const std::filesystem::path& parent) {
  cgroup_setup s;
  s.version = version;
  const std::filesystem::path rel = parent.relative_path();
  if (s.version == 1) {
    const auto base = [&](const char* controller) { return rel.empty() ? mount / controller : mount / controller / rel; };
    if (try_cgroup(base("memory"), [&](const std::filesystem::path& p) {
          if (!write_cgroup_file(p / "memory.limit_in_bytes", "1073741824")) return false;
          s.memory_swap = write_cgroup_file(p / "memory.memsw.limit_in_bytes", "1073741824");
          return true;
        }))
      s.memory = base("memory");
    if (try_cgroup(base("cpuacct"), [](const std::filesystem::path& p) {
          return cgroup_number(read_cgroup_file(p / "cpuacct.usage")).has_value();
        }))
      s.cpu = base("cpuacct");
    if (try_cgroup(base("pids"), [](const std::filesystem::path& p) { return write_cgroup_file(p / "pids.max", "8"); }))
      s.pids = base("pids");
  } else if (s.version == 2) {
    const std::filesystem::path base = rel.empty() ? mount : mount / rel;
    // Children of `base` get the memory and pids controllers only if base hands them
    // down (cpu.stat, the CPU time, is there without the cpu controller).
    const auto controllers = read_cgroup_file(base / "cgroup.subtree_control").value_or("");
    if (controllers.find("memory") == std::string::npos || controllers.find("pids") == std::string::npos)
      (void)write_cgroup_file(base / "cgroup.subtree_control", "+memory +pids");
    (void)try_cgroup(base, [&](const std::filesystem::path& p) {
      if (write_cgroup_file(p / "memory.max", "1073741824")) {
        s.memory = base;
        s.memory_swap = write_cgroup_file(p / "memory.swap.max", "0");
      }
      if (cgroup_number(read_cgroup_file(p / "cpu.stat"), "usage_usec")) s.cpu = base;
      if (write_cgroup_file(p / "pids.max", "8")) s.pids = base;
      return true;
    });
  }
  return s;
}

// This process's own cgroup in the v1 hierarchy of `controller` (empty: v2's unified
// one), as /proc/self/cgroup names it; empty when it names none.
inline std::filesystem::path own_cgroup(std::string_view controller) {
  const std::string text = read_cgroup_file("/proc/self/cgroup").value_or("");
  for (std::size_t start = 0; start < text.size();) {
    const std::size_t end = std::min(text.find('\n', start), text.size());
    const std::string_view line(text.data() + start, end - start);
    start = end + 1;
    const std::size_t first = line.find(':'), second = first == std::string_view::npos ? first : line.find(':', first + 1);
    if (second == std::string_view::npos) continue;
    const std::string_view controllers = line.substr(first + 1, second - first - 1);
    const std::string_view path = line.substr(second + 1);
    if (controller.empty()) {
      if (line.substr(0, first) == "0" && controllers.empty()) return std::filesystem::path(path);
      continue;
    }
    for (std::size_t at = 0; at <= controllers.size();) {
      const std::size_t comma = std::min(controllers.find(',', at), controllers.size());
      if (controllers.substr(at, comma - at) == controller) return std::filesystem::path(path);
      at = comma + 1;
    }
  }
  return {};
}

// cgroup v2 hands no controllers down from a cgroup that has processes of its own (the
// root aside), so runs cannot nest under the trainer's own cgroup while the trainer is
// in it. The processes of `cgroup` move into a leaf child of it, trainer_leaf_name, and
// it keeps only children: the trainer's leaf and the runs' cgroups, all under its
// limits. Rounds repeat while processes fork meanwhile; true when none is left in it.
inline constexpr const char* trainer_leaf_name = "cascade_rl_trainer";
inline bool move_processes_to_leaf(const std::filesystem::path& cgroup) {
  const std::filesystem::path leaf = cgroup / trainer_leaf_name;
  if (::mkdir(leaf.c_str(), 0755) != 0 && errno != EEXIST) return false;
  for (int round = 0; round < 16; ++round) {
    const std::optional<std::string> procs = read_cgroup_file(cgroup / "cgroup.procs");
    if (!procs) return false;
    if (procs->empty()) return true;
    for (std::size_t start = 0; start < procs->size();) {
      const std::size_t end = std::min(procs->find('\n', start), procs->size());
      // A process that has exited meanwhile fails to move, harmlessly.
      (void)write_cgroup_file(leaf / "cgroup.procs", std::string_view(*procs).substr(start, end - start));
      start = end + 1;
    }
  }
  return read_cgroup_file(cgroup / "cgroup.procs").value_or("?").empty();
}

// The same on this machine's /sys/fs/cgroup. With no parent, under this process's own
// cgroup in each hierarchy, so that the limits of a container (or of a systemd unit)
// that holds the trainer hold its runs too. On cgroup v2, where the trainer's cgroup
// has processes and its parent hands it the memory and pids controllers, those
// processes first move into a leaf of it (move_processes_to_leaf; a process already in
// such a leaf nests its runs beside it). A hierarchy where nesting cannot be (a
// delegation that stops above, a cgroup file system this process may not change)
// falls back to its root.
inline cgroup_setup find_cgroups(const std::filesystem::path& parent) {
  const int version = machine_cgroup_version();
  cgroup_setup s = find_cgroups_in(version, "/sys/fs/cgroup", parent);
  if (!parent.empty()) return s;
  const auto nested = [&](std::string_view controller) {
    std::filesystem::path own = own_cgroup(controller);
    if (version == 2 && own.filename() == trainer_leaf_name) own = own.parent_path();
    return own.empty() || own == "/" ? cgroup_setup{} : find_cgroups_in(version, "/sys/fs/cgroup", own);
  };
  if (version == 1) {
    if (const cgroup_setup m = nested("memory"); !m.memory.empty()) {
      s.memory = m.memory;
      s.memory_swap = m.memory_swap;
    }
    if (const cgroup_setup c = nested("cpuacct"); !c.cpu.empty()) s.cpu = c.cpu;
    if (const cgroup_setup p = nested("pids"); !p.pids.empty()) s.pids = p.pids;
  } else if (version == 2) {
    const auto caps = [](const cgroup_setup& c) { return int{!c.memory.empty()} + int{!c.cpu.empty()} + int{!c.pids.empty()}; };
    cgroup_setup own = nested("");
    const std::filesystem::path own_path = std::filesystem::path("/sys/fs/cgroup") / own_cgroup("").relative_path();
    const std::string handed = read_cgroup_file(own_path / "cgroup.controllers").value_or("");
    if ((own.memory.empty() || own.pids.empty()) && own_path.filename() != trainer_leaf_name &&
        own_cgroup("") != "/" && handed.find("memory") != std::string::npos &&
        handed.find("pids") != std::string::npos && move_processes_to_leaf(own_path))
      own = nested("");
    if (caps(own) > 0 && caps(own) >= caps(s)) s = own;
  }
  return s;
}

// Removes the (empty) per-run cgroups that a process which no longer exists left
// behind, e.g. a trainer killed in the middle of a run. Names carry the maker's pid; a
// pid that is alive is left alone, and so is a cgroup younger than `min_age` (a trainer
// in another PID namespace may have just made it, its program not in it yet).
inline void remove_stale_cgroups(const cgroup_setup& setup, std::chrono::seconds min_age = std::chrono::seconds(60)) {
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  for (const std::filesystem::path& root : {setup.memory, setup.cpu, setup.pids}) {
    if (root.empty()) continue;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(root, ec)) {
      const std::string name = entry.path().filename().string();
      static constexpr std::string_view prefix = "cascade_rl_verify_";
      if (name.rfind(prefix, 0) != 0) continue;
      const std::size_t end = name.find('_', prefix.size());
      if (end == std::string::npos) continue;
      const long pid = std::strtol(name.c_str() + prefix.size(), nullptr, 10);
      struct stat st {};
      if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH && ::stat(entry.path().c_str(), &st) == 0 &&
          now.tv_sec - st.st_mtim.tv_sec >= min_age.count())
        ::rmdir(entry.path().c_str());  // fails, harmlessly, while processes are in it
    }
  }
}

// What a run used, read from its cgroups after it ended.
struct cgroup_usage {
  std::optional<std::uint64_t> cpu_ns{};
  std::optional<std::uint64_t> peak_memory_bytes{};
  std::uint64_t oom_kills = 0;
};

// One run's cgroups, made in the constructor and removed in the destructor (by then
// every process of the run is gone).
class run_cgroup {
 public:
  run_cgroup(const cgroup_setup& setup, bool memory, bool cpu, bool pids, std::uint64_t memory_bytes,
             std::uint64_t max_processes)
      : version_(setup.version) {
    const std::string leaf = new_cgroup_leaf();
    try {
      if (version_ == 2) {
        const std::filesystem::path& base = !setup.memory.empty() ? setup.memory : !setup.pids.empty() ? setup.pids : setup.cpu;
        if ((memory && !setup.memory.empty()) || (cpu && !setup.cpu.empty()) || (pids && !setup.pids.empty())) {
          const std::filesystem::path dir = make(base / leaf);
          if (memory && !setup.memory.empty()) {
            set(dir / "memory.max", std::to_string(memory_bytes));
            if (setup.memory_swap) set(dir / "memory.swap.max", "0");
            memory_ = dir;
          }
          if (cpu && !setup.cpu.empty()) cpu_ = dir;
          if (pids && !setup.pids.empty()) set(dir / "pids.max", std::to_string(max_processes));
        }
      } else if (version_ == 1) {
        if (memory && !setup.memory.empty()) {
          memory_ = make(setup.memory / leaf);
          set(memory_ / "memory.limit_in_bytes", std::to_string(memory_bytes));
          if (setup.memory_swap)
            set(memory_ / "memory.memsw.limit_in_bytes", std::to_string(memory_bytes));
          else
            (void)write_cgroup_file(memory_ / "memory.swappiness", "0");  // no swapping past the cap
        }
        if (cpu && !setup.cpu.empty()) cpu_ = make(setup.cpu / leaf);
        if (pids && !setup.pids.empty()) set(make(setup.pids / leaf) / "pids.max", std::to_string(max_processes));
      }
    } catch (...) {
      remove();
      throw;
    }
  }
  run_cgroup(const run_cgroup&) = delete;
  run_cgroup& operator=(const run_cgroup&) = delete;
  ~run_cgroup() { remove(); }

  // The files the program writes itself into ("0": the writer).
  [[nodiscard]] const std::vector<std::string>& procs_files() const { return procs_; }
  [[nodiscard]] bool has_memory() const { return !memory_.empty(); }
  [[nodiscard]] bool has_cpu() const { return !cpu_.empty(); }

  // A descriptor the sandbox's init reads the run's CPU time from (pread at 0), or -1.
  // v1: cpuacct.usage in nanoseconds; v2: cpu.stat, "usage_usec N".
  [[nodiscard]] int open_cpu_usage() const {
    if (cpu_.empty()) return -1;
    return ::open((cpu_ / (version_ == 2 ? "cpu.stat" : "cpuacct.usage")).c_str(), O_RDONLY | O_CLOEXEC);
  }

  [[nodiscard]] cgroup_usage usage() const {
    cgroup_usage u;
    if (!cpu_.empty()) {
      if (version_ == 2) {
        if (const auto us = cgroup_number(read_cgroup_file(cpu_ / "cpu.stat"), "usage_usec")) u.cpu_ns = *us * 1000;
      } else {
        u.cpu_ns = cgroup_number(read_cgroup_file(cpu_ / "cpuacct.usage"));
      }
    }
    if (!memory_.empty()) {
      if (version_ == 2) {
        u.peak_memory_bytes = cgroup_number(read_cgroup_file(memory_ / "memory.peak"));  // Linux >= 5.19
        u.oom_kills = cgroup_number(read_cgroup_file(memory_ / "memory.events"), "oom_kill").value_or(0);
      } else {
        u.peak_memory_bytes = cgroup_number(read_cgroup_file(memory_ / "memory.max_usage_in_bytes"));
        u.oom_kills = cgroup_number(read_cgroup_file(memory_ / "memory.oom_control"), "oom_kill").value_or(0);
      }
    }
    return u;
  }

 private:
  std::filesystem::path make(const std::filesystem::path& dir) {
    if (::mkdir(dir.c_str(), 0755) != 0)
      cascade_rl::detail::fail("sandbox", "cannot make cgroup " + dir.string() + ": " + std::strerror(errno));
    made_.push_back(dir);
    // v1: "tasks", which moves the writing thread alone (the program is one thread when
    // it writes) without the global threadgroup lock that cgroup.procs takes, whose
    // RCU grace period cost milliseconds per run on a loaded machine. v2 has no such
    // file for a process's cgroup: cgroup.procs.
    procs_.push_back((dir / (version_ == 2 ? "cgroup.procs" : "tasks")).string());
    return dir;
  }
  static void set(const std::filesystem::path& file, const std::string& value) {
    if (!write_cgroup_file(file, value))
      cascade_rl::detail::fail("sandbox", "cannot write " + value + " to " + file.string() + ": " + std::strerror(errno));
  }
  void remove() noexcept {
    for (const auto& dir : made_) {
      for (int attempt = 0; attempt < 400 && ::rmdir(dir.c_str()) != 0 && errno == EBUSY; ++attempt) {
        // Every process of the run is dead once its init is reaped; a v2 cgroup can be
        // emptied by the kernel should one have escaped the PID namespace (Linux >= 5.14).
        if (version_ == 2 && attempt == 100) (void)write_cgroup_file(dir / "cgroup.kill", "1");
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    }
    made_.clear();
  }

  int version_;
  std::filesystem::path memory_{}, cpu_{};
  std::vector<std::filesystem::path> made_{};
  std::vector<std::string> procs_{};
};

}  // namespace cascade_rl::verify::detail
