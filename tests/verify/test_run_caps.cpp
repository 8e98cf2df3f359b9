// Caps for a whole run (issue 18): programs that stay under every per-process limit but
// together would take the machine's memory, disk or CPU. Each is stopped by a run-level
// cap, its reason is reported, and nothing is left on the host: no scratch directory,
// cgroup, mount or process. Sizes and times are printed for README's numbers.

#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/statfs.h>
#include <sys/wait.h>

#include <algorithm>
#include <csignal>
#include <sstream>
#include <vector>

#include "verify/support.hpp"

namespace {
using namespace verify_test;

#define REQUIRE_PYTHON() \
  if (!python_available()) GTEST_SKIP() << "no /usr/bin/python3"

// A sandbox whose scratch directories go under `host`'s private parent.
v::sandbox caps_sandbox(const host_check& host, v::limits limits) {
  v::sandbox_options options = test_options(limits);
  options.scratch_parent = host.scratch_parent();
  return v::sandbox(options);
}

std::string skip_reason(const v::sandbox& box, const char* what) {
  std::string why = std::string("no ") + what + " here";
  for (const auto& w : box.warnings()) why += "; " + w;
  return why;
}

TEST(RunCaps, ChildrenJustUnderTheAddressSpaceLimitMeetTheRunsMemoryCap) {
  REQUIRE_PYTHON();
  const host_check host;
  auto limits = short_limits();
  limits.wall_time = 20s;
  // The cap under test is memory: CPU gets room for eight children to fault in 150 MiB
  // each on a loaded machine (1 s ran out first at a load of 10, before any OOM kill).
  limits.cpu_time = 8s;
  limits.memory_bytes = 256ull << 20;
  limits.address_space_bytes = 192ull << 20;  // each child may hold 150 MiB...
  limits.scratch_bytes = 16ull << 20;
  const auto box = caps_sandbox(host, limits);
  if (box.isolation().memory_cgroup.empty()) GTEST_SKIP() << skip_reason(box, "memory cgroup");
  // ...and eight of them would hold 1.2 GiB. Each reports when it has its memory, then
  // waits; the parent fails if a child was killed.
  const auto r = box.run(python(
      "import os, sys, time\n# " + host.token() + "\nkids = []\nfor i in range(8):\n    pid = os.fork()\n"
      "    if pid == 0:\n        block = b'x' * (150 << 20)\n        print('child', i, 'holds', len(block) >> 20, 'MiB', flush=True)\n"
      "        time.sleep(1)\n        os._exit(0)\n    kids.append(pid)\n"
      "bad = [os.waitpid(k, 0)[1] for k in kids]\nsys.exit(1 if any(bad) else 0)\n"));
  std::printf("8 children x 150 MiB under a 256 MiB run cap: %s after %.3f s, %llu OOM kills, peak %.1f MiB "
              "(largest process %.1f MiB)\n%s",
              v::to_string(r.reason).data(), r.wall_seconds, static_cast<unsigned long long>(r.oom_kills),
              static_cast<double>(r.peak_memory_bytes) / (1 << 20),
              static_cast<double>(r.peak_process_memory_bytes) / (1 << 20), r.stdout_text.c_str());
  EXPECT_EQ(r.reason, v::termination::memory_limit) << r.stderr_text;
  EXPECT_TRUE(r.hit_limit());
  EXPECT_GE(r.oom_kills, 1u);
  EXPECT_LE(r.peak_memory_bytes, limits.memory_bytes);
  EXPECT_GT(r.peak_memory_bytes, 150ull << 20);
  EXPECT_LT(r.wall_seconds, 15.0);  // not the wall clock: the run ended when its children were killed
  EXPECT_EQ(joined(host.leftovers()), "");
}

TEST(RunCaps, ManySmallFilesFillTheScratchDirectoryNotTheHostsDisk) {
  REQUIRE_PYTHON();
  const host_check host;
  auto limits = short_limits();
  limits.wall_time = 10s;
  limits.scratch_bytes = 8ull << 20;
  const auto box = caps_sandbox(host, limits);
  if (!box.isolation().tmpfs_scratch) GTEST_SKIP() << skip_reason(box, "tmpfs scratch");
  {
    const auto scratch = box.make_scratch();
    // 300 files of 1 MiB in 0.5 s filled the host's disk before issue 18.
    const auto r = box.run(python("import errno, sys\nfor i in range(300):\n    try:\n"
                                  "        with open(f'f{i}', 'wb') as f: f.write(b'x' * (1 << 20))\n"
                                  "    except OSError as e:\n        print('file', i, 'errno', e.errno); sys.exit(1)\n"
                                  "print('all written')\n"),
                           scratch);
    std::printf("300 files of 1 MiB into an 8 MiB scratch: %s (%s), %.1f MiB used of it, %.3f s\n",
                v::to_string(r.reason).data(), r.stdout_text.substr(0, r.stdout_text.size() - 1).c_str(),
                static_cast<double>(r.scratch_bytes_used) / (1 << 20), r.wall_seconds);
    EXPECT_EQ(r.reason, v::termination::disk_limit);
    EXPECT_TRUE(r.hit_limit());
    EXPECT_TRUE(r.scratch_full);
    EXPECT_NE(r.stdout_text.find("errno 28"), std::string::npos);  // ENOSPC
    EXPECT_LE(r.scratch_bytes_used, limits.scratch_bytes);
    EXPECT_GT(r.scratch_bytes_used, limits.scratch_bytes / 2);
    // The files are in memory (tmpfs); the host's side of the scratch directory is an
    // empty mount point, so the host's disk got none of them.
    struct statfs where {};
    ASSERT_EQ(::statfs(scratch.host_path().c_str(), &where), 0);
    EXPECT_EQ(where.f_type, TMPFS_MAGIC);
    EXPECT_TRUE(std::filesystem::is_empty(scratch.path()));
    EXPECT_TRUE(scratch.read("f0").has_value());
  }
  EXPECT_EQ(joined(host.leftovers()), "");
}

TEST(RunCaps, OneLargeFileStopsAtTheScratchCapBelowTheFileSizeLimit) {
  const host_check host;
  auto limits = short_limits();
  limits.scratch_bytes = 4ull << 20;
  limits.file_size_bytes = 64ull << 20;
  const auto box = caps_sandbox(host, limits);
  if (!box.isolation().tmpfs_scratch) GTEST_SKIP() << skip_reason(box, "tmpfs scratch");
  const auto r = box.run({.argv = {"sh", "-c", "head -c 20000000 /dev/zero > big"}});
  std::printf("one 20 MB file into a 4 MiB scratch: %s, exit %d: %s", v::to_string(r.reason).data(), r.exit_code,
              r.stderr_text.c_str());
  EXPECT_EQ(r.reason, v::termination::disk_limit);
  EXPECT_TRUE(r.scratch_full);
  EXPECT_NE(r.stderr_text.find("No space left on device"), std::string::npos);
  EXPECT_EQ(joined(host.leftovers()), "");
}

TEST(RunCaps, MillionsOfEmptyFilesRunOutOfInodes) {
  REQUIRE_PYTHON();
  const host_check host;
  auto limits = short_limits();
  limits.wall_time = 10s;
  limits.scratch_inodes = 2000;
  const auto box = caps_sandbox(host, limits);
  if (!box.isolation().tmpfs_scratch) GTEST_SKIP() << skip_reason(box, "tmpfs scratch");
  const auto r = box.run(python("import os, sys\nfor i in range(10**6):\n    try:\n        os.close(os.open(f'e{i}', os.O_CREAT | os.O_WRONLY))\n"
                                "    except OSError as e:\n        print('made', i, 'errno', e.errno); sys.exit(1)\n"));
  std::printf("a million empty files, 2000 inodes: %s (%s), %llu inodes used, %.3f s\n", v::to_string(r.reason).data(),
              r.stdout_text.substr(0, r.stdout_text.size() - 1).c_str(),
              static_cast<unsigned long long>(r.scratch_inodes_used), r.wall_seconds);
  EXPECT_EQ(r.reason, v::termination::disk_limit);
  EXPECT_TRUE(r.scratch_full);
  EXPECT_NE(r.stdout_text.find("errno 28"), std::string::npos);
  EXPECT_EQ(r.scratch_inodes_used, limits.scratch_inodes);
  EXPECT_EQ(joined(host.leftovers()), "");
}

TEST(RunCaps, ACompileStepAndTestRunsShareOneScratchAndItsCap) {
  const host_check host;
  auto limits = short_limits();
  limits.scratch_bytes = 4ull << 20;
  limits.file_size_bytes = 16ull << 20;
  const auto box = caps_sandbox(host, limits);
  const auto scratch = box.make_scratch();
  EXPECT_EQ(scratch.on_tmpfs(), box.isolation().tmpfs_scratch);
  // "Compile": a script leaves a 3 MiB artifact and an executable.
  const auto build = box.run({.argv = {"sh", "build.sh"},
                              .files = {{.path = "build.sh",
                                         .contents = "head -c 3000000 /dev/zero > artifact\n"
                                                     "printf '#!/bin/sh\\necho ran with $(wc -c < artifact) bytes\\n' > prog\n"
                                                     "chmod +x prog\n"}}},
                             scratch);
  ASSERT_TRUE(build.succeeded()) << build.stderr_text;
  // Tests see it; inputs written before each run land next to it.
  const auto test = box.run({.argv = {"sh", "-c", "./prog; cat input.txt"}, .files = {{.path = "input.txt", .contents = "in\n"}}},
                            scratch);
  EXPECT_TRUE(test.succeeded()) << test.stderr_text;
  EXPECT_EQ(test.stdout_text, "ran with 3000000 bytes\nin\n");
  if (scratch.on_tmpfs()) {
    // What the compile left counts against the same cap.
    const auto more = box.run({.argv = {"sh", "-c", "head -c 2000000 /dev/zero > more"}}, scratch);
    EXPECT_EQ(more.reason, v::termination::disk_limit);
    // Inputs the caller writes are refused past the cap too.
    EXPECT_THROW(scratch.write({.path = "huge", .contents = std::string(8u << 20, 'x')}), cascade_rl::error);
  }
}

TEST(RunCaps, ProcessesThatOutliveTheProgramAreKilledWithTheRun) {
  if (!v::probe_isolation().pid_namespace) GTEST_SKIP() << "no PID namespace";
  const host_check host;
  const auto box = caps_sandbox(host, short_limits());
  // One sleeps past the run in the background; one forks after its parent has exited.
  const std::string t = host.token();
  const auto r = box.run({.argv = {"sh", "-c",
                                   "sh -c 'sleep 30; : " + t + "' &\n(sh -c 'sleep 0.2; sh -c \"sleep 30; : " + t +
                                       "\" & sleep 30; : " + t + "' &)\necho parent done\n"}});
  std::printf("sleepers and a late fork: %s after %.3f s\n", v::to_string(r.reason).data(), r.wall_seconds);
  EXPECT_TRUE(r.succeeded()) << r.stderr_text;
  EXPECT_LT(r.wall_seconds, 1.5);
  EXPECT_EQ(joined(host.leftovers()), "");
  // Shortly after, too (a process forked late would show up now).
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(host_processes_with(t), 0);
}

TEST(RunCaps, CpuTimeIsSummedOverEveryProcessOfTheRun) {
  REQUIRE_PYTHON();
  const host_check host;
  auto limits = cpu_bound_limits();  // 1 s of CPU for the run, 15 s of wall clock
  const auto box = caps_sandbox(host, limits);
  if (box.isolation().cpu_cgroup.empty()) GTEST_SKIP() << skip_reason(box, "CPU cgroup");
  // Four busy processes: each stays under its own RLIMIT_CPU (2 s here), together they
  // would burn 8 s.
  const auto r = box.run(python("import os\nfor i in range(3):\n    if os.fork() == 0: break\nwhile True: pass\n"));
  std::printf("4 busy processes, 1 s run cap: %s after %.3f s wall, %.3f s cpu\n", v::to_string(r.reason).data(),
              r.wall_seconds, r.cpu_seconds);
  EXPECT_EQ(r.reason, v::termination::cpu_time_limit);
  EXPECT_EQ(r.signal, SIGKILL);
  EXPECT_GE(r.cpu_seconds, 1.0);
  EXPECT_LT(r.cpu_seconds, 3.0);  // far below the 8 s the per-process limits allow
  EXPECT_LT(r.wall_seconds, 14.0);
  EXPECT_EQ(joined(host.leftovers()), "");
}

TEST(RunCaps, ReportsWhatARunUsed) {
  REQUIRE_PYTHON();
  const host_check host;
  const auto box = caps_sandbox(host, short_limits());
  const auto r = box.run(python("open('out', 'wb').write(b'x' * 100000)\nblock = b'y' * (40 << 20)\nprint(len(block))"));
  ASSERT_TRUE(r.succeeded()) << r.stderr_text;
  std::printf("used: peak %.1f MiB (largest process %.1f MiB), %.3f s cpu, scratch %llu bytes / %llu inodes\n",
              static_cast<double>(r.peak_memory_bytes) / (1 << 20),
              static_cast<double>(r.peak_process_memory_bytes) / (1 << 20), r.cpu_seconds,
              static_cast<unsigned long long>(r.scratch_bytes_used), static_cast<unsigned long long>(r.scratch_inodes_used));
  EXPECT_GE(r.peak_process_memory_bytes, 40ull << 20);
  EXPECT_GE(r.peak_memory_bytes, r.peak_process_memory_bytes / 2);
  EXPECT_GT(r.cpu_seconds, 0.0);
  EXPECT_EQ(r.oom_kills, 0u);
  EXPECT_FALSE(r.scratch_full);
  if (box.isolation().tmpfs_scratch) {
    EXPECT_GE(r.scratch_bytes_used, 100000u);
    EXPECT_GE(r.scratch_inodes_used, 2u);  // the root and out
  }
}

TEST(RunCaps, CgroupsLeftByADeadTrainerAreRemoved) {
  const auto probe = test_sandbox();
  if (probe.isolation().pids_cgroup.empty()) GTEST_SKIP() << skip_reason(probe, "pids cgroup");
  // A trainer killed in the middle of a run leaves its run's cgroups behind, empty.
  const pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  ASSERT_EQ(::waitpid(dead, nullptr, 0), dead);
  const auto stale = probe.isolation().pids_cgroup / ("cascade_rl_verify_" + std::to_string(dead) + "_0");
  const auto alive = probe.isolation().pids_cgroup / ("cascade_rl_verify_" + std::to_string(::getpid()) + "_999999");
  ASSERT_EQ(::mkdir(stale.c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(alive.c_str(), 0755), 0);
  const auto& s = probe.isolation();
  const v::detail::cgroup_setup setup{s.cgroup_version, s.memory_cgroup, s.cpu_cgroup, s.pids_cgroup, false};
  // What every sandbox does when it is made, for cgroups a minute old; these are new.
  v::detail::remove_stale_cgroups(setup);
  EXPECT_TRUE(std::filesystem::exists(stale));  // too young: its maker may be in another PID namespace
  v::detail::remove_stale_cgroups(setup, 0s);
  EXPECT_FALSE(std::filesystem::exists(stale));
  EXPECT_TRUE(std::filesystem::exists(alive));  // its process is alive: not stale
  ::rmdir(alive.c_str());
  ::rmdir(stale.c_str());
}

TEST(RunCaps, RefusesCapsThatCannotHold) {
  auto limits = short_limits();
  limits.memory_bytes = 0;
  EXPECT_THROW((void)test_sandbox(limits), cascade_rl::error);
  limits = short_limits();
  limits.scratch_bytes = limits.memory_bytes;  // scratch files are memory
  try {
    (void)test_sandbox(limits);
    FAIL() << "no error";
  } catch (const cascade_rl::error& e) {
    EXPECT_NE(std::string(e.what()).find("scratch_bytes"), std::string::npos) << e.what();
  }
  limits = short_limits();
  limits.scratch_inodes = 1;
  EXPECT_THROW((void)test_sandbox(limits), cascade_rl::error);
  v::sandbox_options hidden = test_options();
  hidden.hidden_paths = {std::filesystem::temp_directory_path()};
  EXPECT_THROW((void)v::sandbox(hidden), cascade_rl::error);  // the scratch parent would be hidden
  hidden.hidden_paths = {"relative/path"};
  EXPECT_THROW((void)v::sandbox(hidden), cascade_rl::error);
}

TEST(RunCaps, CanBeTurnedOffToMeasureThem) {
  v::sandbox_options options = test_options();
  options.memory_and_cpu_cgroups = false;
  options.tmpfs_scratch = false;
  options.syscall_filter.enabled = false;
  const v::sandbox box(options);
  EXPECT_FALSE(box.filters_syscalls());
  EXPECT_FALSE(box.make_scratch().on_tmpfs());
  for (const auto& w : box.warnings()) {
    if (w.rfind("no ", 0) != 0) continue;  // not a missing mechanism (e.g. the user namespace's summary)
    EXPECT_EQ(w.find("memory cgroup"), std::string::npos) << w;
    EXPECT_EQ(w.find("syscall filter"), std::string::npos) << w;
    EXPECT_EQ(w.find("tmpfs"), std::string::npos) << w;
  }
  const auto r = box.run({.argv = {"sh", "-c", "echo ok"}});
  EXPECT_TRUE(r.succeeded()) << r.stderr_text;
}

// The cgroup v2 code, where this machine has a v2 hierarchy besides its v1 ones (the
// "unified" mount of a hybrid layout, which carries no controllers but CPU time): a
// process moved into a per-run cgroup through cgroup.procs, its CPU time read from
// cpu.stat as the sandbox's init reads it, the directory removed.
TEST(Cgroups, VersionTwoMovesAProcessAndReadsItsCpuTime) {
  const std::filesystem::path unified = "/sys/fs/cgroup/unified";
  if (::geteuid() != 0 || v::detail::filesystem_type(unified.c_str()) != CGROUP2_SUPER_MAGIC)
    GTEST_SKIP() << "no cgroup v2 hierarchy at " << unified << " that this process may change";
  const auto setup = v::detail::find_cgroups_in(2, unified, {});
  ASSERT_EQ(setup.cpu, unified);
  std::filesystem::path made;
  {
    const v::detail::run_cgroup cgroup(setup, true, true, true, 1ull << 30, 8);
    ASSERT_EQ(cgroup.procs_files().size(), 1u);
    made = std::filesystem::path(cgroup.procs_files()[0]).parent_path();
    EXPECT_EQ(std::filesystem::path(cgroup.procs_files()[0]).filename(), "cgroup.procs");
    const int procs = ::open(cgroup.procs_files()[0].c_str(), O_WRONLY | O_CLOEXEC);
    ASSERT_GE(procs, 0);
    const pid_t child = ::fork();
    if (child == 0) {
      if (::write(procs, "0", 1) != 1) ::_exit(1);
      // 100 ms of its own CPU time, however long the machine takes to give it.
      timespec cpu{};
      do ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu);
      while (cpu.tv_sec == 0 && cpu.tv_nsec < 100'000'000);
      ::_exit(0);
    }
    ::close(procs);
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    const int usage = cgroup.open_cpu_usage();
    ASSERT_GE(usage, 0);
    const std::int64_t ns = v::detail::read_cpu_ns(usage, true);
    ::close(usage);
    std::printf("cgroup v2: %.3f s of CPU in cpu.stat\n", static_cast<double>(ns) * 1e-9);
    EXPECT_GE(ns, 90'000'000);  // the child's 100 ms busy loop, counted since it moved in
    EXPECT_EQ(cgroup.usage().cpu_ns.value_or(0) / 1000, static_cast<std::uint64_t>(ns) / 1000);
  }
  EXPECT_FALSE(std::filesystem::exists(made));
}

// v2's rule (no controllers handed below a cgroup with processes) is met by moving the
// trainer's cgroup's processes into a leaf of it. Shown on the unified hierarchy with
// two processes standing in for a trainer and a sibling it was started with (a
// launcher's workers): both move, the cgroup is left with children only, and a second
// move (another worker probing later) finds nothing to do.
TEST(Cgroups, VersionTwoTrainerProcessesMoveIntoALeaf) {
  const std::filesystem::path unified = "/sys/fs/cgroup/unified";
  if (::geteuid() != 0 || v::detail::filesystem_type(unified.c_str()) != CGROUP2_SUPER_MAGIC)
    GTEST_SKIP() << "no cgroup v2 hierarchy at " << unified << " that this process may change";
  const std::filesystem::path trainer = unified / ("cascade_rl_verify_" + std::to_string(::getpid()) + "_leaf_test");
  ASSERT_EQ(::mkdir(trainer.c_str(), 0755), 0) << std::strerror(errno);
  std::vector<pid_t> processes;
  for (int i = 0; i < 2; ++i) {
    const pid_t child = ::fork();
    if (child == 0) {
      ::pause();
      ::_exit(0);
    }
    processes.push_back(child);
    EXPECT_TRUE(v::detail::write_cgroup_file(trainer / "cgroup.procs", std::to_string(child)));
  }
  const auto members = [](const std::filesystem::path& cgroup) {
    std::vector<pid_t> out;
    std::istringstream in(v::detail::read_cgroup_file(cgroup / "cgroup.procs").value_or(""));
    for (pid_t pid = 0; in >> pid;) out.push_back(pid);
    std::sort(out.begin(), out.end());
    return out;
  };
  std::sort(processes.begin(), processes.end());
  EXPECT_EQ(members(trainer), processes);
  EXPECT_TRUE(v::detail::move_processes_to_leaf(trainer));
  const std::filesystem::path leaf = trainer / v::detail::trainer_leaf_name;
  EXPECT_TRUE(members(trainer).empty());
  EXPECT_EQ(members(leaf), processes);
  EXPECT_TRUE(v::detail::move_processes_to_leaf(trainer));  // again: nothing to move, the same leaf
  EXPECT_EQ(members(leaf), processes);
  for (const pid_t pid : processes) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
  EXPECT_EQ(::rmdir(leaf.c_str()), 0) << std::strerror(errno);
  EXPECT_EQ(::rmdir(trainer.c_str()), 0) << std::strerror(errno);
}

TEST(Cgroups, ReadNumbersAsTheKernelWritesThem) {
  using v::detail::cgroup_number;
  EXPECT_EQ(cgroup_number(std::string("123456\n")), 123456u);
  EXPECT_EQ(cgroup_number(std::string("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n"), "oom_kill"), 3u);
  EXPECT_EQ(cgroup_number(std::string("low 0\nhigh 0\nmax 7\noom 2\noom_kill 1\n"), "oom_kill"), 1u);
  EXPECT_EQ(cgroup_number(std::string("usage_usec 42\nuser_usec 40\n"), "usage_usec"), 42u);
  EXPECT_EQ(cgroup_number(std::string("max\n")), std::nullopt);
  EXPECT_EQ(cgroup_number(std::nullopt), std::nullopt);
  const int fd = ::memfd_create("cpu.stat", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, "usage_usec 1500\nuser_usec 1000\nsystem_usec 500\n", 46), 46);
  EXPECT_EQ(v::detail::read_cpu_ns(fd, true), 1'500'000);
  ASSERT_EQ(::ftruncate(fd, 0), 0);
  ASSERT_EQ(::pwrite(fd, "987654321\n", 10, 0), 10);
  EXPECT_EQ(v::detail::read_cpu_ns(fd, false), 987'654'321);
  ::close(fd);
}

}  // namespace
