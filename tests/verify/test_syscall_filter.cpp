// The seccomp filter (issue 18): every system call on the deny-list fails with EPERM
// and is reported by name, calls the list allows with other arguments still work, and a
// program that tries to remount, unshare or answer its own notifications gets nowhere.
// The programs are python3 with ctypes, which makes any system call by number.

#include <sched.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstring>
#include <map>
#include <sstream>

#include "verify/support.hpp"

namespace {
using namespace verify_test;

#define REQUIRE_FILTER(box)                                                                   \
  if (!python_available()) GTEST_SKIP() << "no /usr/bin/python3";                             \
  if (!(box).filters_syscalls() || !(box).isolation().syscall_reports)                        \
  GTEST_SKIP() << "no reporting syscall filter here: " << (box).isolation().describe()

// A python3 program that makes each call of `calls` ("name", "arguments") and prints
// "name errno" for each (0 when the call succeeded).
v::command calls_program(const std::vector<std::pair<std::string, std::string>>& calls) {
  std::string code =
      "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.syscall.restype = ctypes.c_long\n"
      "L = ctypes.c_long\ndef call(name, nr, *args):\n    ctypes.set_errno(0)\n"
      "    r = libc.syscall(L(nr), *[L(a) for a in args])\n    if r == 0 and name == 'clone': os._exit(0)\n"
      "    print(name, ctypes.get_errno() if r == -1 else 0, flush=True)\n";
  for (const auto& [name, args] : calls) {
    const int nr = v::detail::syscall_number(name);
    if (nr >= 0) code += "call('" + name + "', " + std::to_string(nr) + (args.empty() ? "" : ", " + args) + ")\n";
  }
  return python(code);
}

std::map<std::string, int> errnos(const std::string& out) {
  std::map<std::string, int> m;
  std::istringstream in(out);
  std::string name;
  int e = 0;
  while (in >> name >> e) m[name] = e;
  return m;
}

TEST(SyscallFilter, EveryDeniedSystemCallFailsWithEpermAndIsReported) {
  const auto box = test_sandbox();
  REQUIRE_FILTER(box);
  std::vector<std::pair<std::string, std::string>> calls;
  for (const auto name : v::detail::default_denied_syscalls()) calls.emplace_back(std::string(name), "0, 0, 0, 0, 0, 0");
  const auto r = box.run(calls_program(calls));
  ASSERT_TRUE(r.succeeded()) << r.stderr_text;
  const auto got = errnos(r.stdout_text);
  std::size_t checked = 0;
  for (const auto& [name, args] : calls) {
    if (v::detail::syscall_number(name) < 0) continue;  // not on this architecture
    ++checked;
    ASSERT_TRUE(got.count(name)) << name << " not called:\n" << r.stdout_text;
    EXPECT_EQ(got.at(name), EPERM) << name;
    EXPECT_NE(std::find(r.denied_syscalls.begin(), r.denied_syscalls.end(), name), r.denied_syscalls.end())
        << name << " not reported";
  }
  std::printf("%zu system calls denied and reported; the run went on (%s)\n", checked, v::to_string(r.reason).data());
  EXPECT_GE(checked, 50u);
  EXPECT_EQ(r.denied_syscall_count, checked);
  EXPECT_EQ(r.reason, v::termination::exited);  // a denial fails the call, not the run
}

TEST(SyscallFilter, DeniesByArgumentWhereOnlySomeUsesAreDangerous) {
  const auto box = test_sandbox();
  REQUIRE_FILTER(box);
  const std::string sig = std::to_string(SIGCHLD);
  const auto r = box.run(calls_program({
      {"socket", std::to_string(AF_PACKET) + ", " + std::to_string(SOCK_RAW) + ", 0"},
      {"socket", std::to_string(AF_INET) + ", " + std::to_string(SOCK_RAW) + ", 1"},
      {"socket", std::to_string(AF_INET6) + ", " + std::to_string(SOCK_RAW | SOCK_CLOEXEC) + ", 58"},
      {"socket", std::to_string(AF_INET) + ", " + std::to_string(SOCK_PACKET) + ", 0"},
      {"clone", std::to_string(CLONE_NEWUSER) + " | " + sig + ", 0, 0, 0, 0"},
      {"clone", std::to_string(CLONE_NEWNS) + " | " + sig + ", 0, 0, 0, 0"},
      {"clone", std::to_string(CLONE_NEWNET) + " | " + sig + ", 0, 0, 0, 0"},
      {"personality", "0x0040000"},  // ADDR_NO_RANDOMIZE
      {"personality", "8"},          // PER_LINUX32
      {"seccomp", "1, 8, 0"},         // SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER
  }));
  ASSERT_TRUE(r.succeeded()) << r.stderr_text;
  std::istringstream lines(r.stdout_text);
  int denied = 0;
  for (std::string name; lines >> name;) {
    int e = 0;
    lines >> e;
    EXPECT_EQ(e, EPERM) << name;
    denied += e == EPERM;
  }
  EXPECT_EQ(denied, 10) << r.stdout_text;
  for (const char* name : {"socket", "clone", "personality", "seccomp"})
    EXPECT_NE(std::find(r.denied_syscalls.begin(), r.denied_syscalls.end(), name), r.denied_syscalls.end()) << name;
  EXPECT_EQ(r.denied_syscall_count, 10u);

  // The same calls with harmless arguments, and what every program does, still work:
  // the personality query, TCP and Unix sockets (netlink is refused by the family
  // allow-list: RewardIntegrity's test), fork, threads (clone3 says ENOSYS, unreported,
  // and the C library falls back to clone).
  const auto ok = box.run(python(
      "import ctypes, os, socket, threading\nlibc = ctypes.CDLL(None, use_errno=True)\n"
      "print('persona', libc.personality(ctypes.c_ulong(0xffffffff)) >= 0)\n"
      "socket.socket(socket.AF_INET, socket.SOCK_STREAM).close()\n"
      "socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).close()\n"
      "pid = os.fork()\nif pid == 0: os._exit(7)\nprint('child', os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))\n"
      "out = []\nt = threading.Thread(target=lambda: out.append(1))\nt.start(); t.join()\nprint('thread', out)\n"));
  EXPECT_TRUE(ok.succeeded()) << ok.stderr_text;
  EXPECT_EQ(ok.stdout_text, "persona True\nchild 7\nthread [1]\n");
  EXPECT_TRUE(ok.denied_syscalls.empty()) << ok.denied_syscalls.front();
}

// Writeback and page-cache advice return 0 without running: each is called with
// arguments the kernel itself refuses (a bad descriptor, an unaligned address), so a 0
// shows the call never reached it. madvise's other advice still runs.
TEST(SyscallFilter, WritebackAndCacheAdviceReturnWithoutRunning) {
  const auto box = test_sandbox();
  REQUIRE_FILTER(box);
  const std::string bad_fd = "-1, 0, 0, 0";
  const auto r = box.run(calls_program({
      {"fsync", "-1"}, {"fdatasync", "-1"}, {"syncfs", "-1"}, {"sync_file_range", bad_fd},
      {"fadvise64", bad_fd}, {"sync", ""},
      {"msync", "1, 4096, " + std::to_string(MS_SYNC)},  // unaligned: EINVAL from the kernel
      {"madvise", "1, 4096, 21"},                        // MADV_PAGEOUT
  }));
  ASSERT_TRUE(r.succeeded()) << r.stderr_text;
  const auto got = errnos(r.stdout_text);
  std::size_t skipped = 0;
  for (const auto name : v::detail::skipped_syscalls()) {
    if (!got.count(std::string(name))) continue;  // not on this architecture, or not called
    ++skipped;
    EXPECT_EQ(got.at(std::string(name)), 0) << name;
  }
  EXPECT_GE(skipped, 7u) << r.stdout_text;
  ASSERT_TRUE(got.count("madvise"));
  EXPECT_EQ(got.at("madvise"), 0);
  EXPECT_TRUE(r.denied_syscalls.empty()) << r.denied_syscalls.front();
  // The kernel still answers the rest: MADV_DONTNEED on the same unaligned address.
  const auto other = box.run(calls_program({{"madvise", "1, 4096, " + std::to_string(MADV_DONTNEED)}}));
  EXPECT_EQ(other.stdout_text, "madvise " + std::to_string(EINVAL) + "\n");
}

TEST(SyscallFilter, RemountingAndUnsharingGetNowhere) {
  const auto box = test_sandbox();
  REQUIRE_FILTER(box);
  if (!box.isolation().read_only_root) GTEST_SKIP() << "no read-only root";
  const auto r = box.run({.argv = {"sh", "-c",
                                   "unshare -Ur sh -c 'mount -t tmpfs none /mnt && touch /mnt/x && echo MOUNTED'; "
                                   "unshare -m true && echo UNSHARED; mount -o remount,rw / && echo REMOUNTED; "
                                   "umount /proc && echo UNMOUNTED; touch /escape 2>/dev/null && echo WROTE; echo end"}});
  std::printf("remount and unshare: denied %zu calls:", r.denied_syscalls.size());
  for (const auto& n : r.denied_syscalls) std::printf(" %s", n.c_str());
  std::printf("\n");
  EXPECT_TRUE(r.succeeded()) << r.stderr_text;
  EXPECT_EQ(r.stdout_text, "end\n");
  for (const char* name : {"unshare", "mount"})
    EXPECT_NE(std::find(r.denied_syscalls.begin(), r.denied_syscalls.end(), name), r.denied_syscalls.end()) << name;
}

TEST(SyscallFilter, EndRunStopsAtTheFirstDenial) {
  v::sandbox_options options = test_options();
  options.syscall_filter.on_denied = v::syscall_denial::end_run;
  const v::sandbox box(options);
  REQUIRE_FILTER(box);
  const auto r = box.run(python("import ctypes, time\nctypes.CDLL(None).syscall(ctypes.c_long(" +
                                std::to_string(v::detail::syscall_number("ptrace")) +
                                "), 0, 0, 0, 0)\ntime.sleep(1)\nprint('survived')\n"));
  EXPECT_EQ(r.reason, v::termination::syscall_denied);
  EXPECT_EQ(r.signal, SIGKILL);
  EXPECT_EQ(r.stdout_text, "");  // killed at the call, not a second later
  EXPECT_EQ(r.denied_syscalls, std::vector<std::string>{"ptrace"});
}

TEST(SyscallFilter, ExtraNamesAreDeniedAndUnknownOnesRefused) {
  v::sandbox_options options = test_options();
  options.syscall_filter.extra_denied = {"socket"};
  const v::sandbox box(options);
  REQUIRE_FILTER(box);
  const auto r = box.run(python("import socket\ntry:\n    socket.socket()\nexcept OSError as e:\n    print('socket', e.errno)\n"));
  EXPECT_EQ(r.stdout_text, "socket 1\n") << r.stderr_text;
  EXPECT_NE(std::find(r.denied_syscalls.begin(), r.denied_syscalls.end(), "socket"), r.denied_syscalls.end());
  options.syscall_filter.extra_denied = {"no_such_system_call"};
  try {
    (void)v::sandbox(options);
    FAIL() << "no error";
  } catch (const cascade_rl::error& e) {
    EXPECT_NE(std::string(e.what()).find("no_such_system_call"), std::string::npos) << e.what();
  }
}

#if defined(__x86_64__)
// Whether this kernel answers i386 system calls at all: a child outside any sandbox runs
// getpid through int 0x80. A kernel built or booted without ia32 emulation (Linux 6.7's
// ia32_emulation=0, the default of some distributions' kernels) kills it with SIGSEGV;
// there is then no 32-bit entry for a program to slip through, and nothing to filter.
bool kernel_answers_i386_calls() {
  const pid_t child = fork();
  if (child == 0) {
    std::signal(SIGSEGV, SIG_DFL);  // a sanitizer's handler would turn the fault into an exit
    static const unsigned char code[] = {0xb8, 20, 0, 0, 0, 0xcd, 0x80, 0xc3};
    void* page = mmap(nullptr, 4096, PROT_READ | PROT_WRITE | PROT_EXEC,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED) _exit(2);
    std::memcpy(page, code, sizeof code);
    (void)reinterpret_cast<int (*)()>(page)();
    _exit(0);
  }
  int status = 0;
  if (child < 0 || waitpid(child, &status, 0) != child) return true;  // assume it does
  return !(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV);
}
#endif

TEST(SyscallFilter, SystemCallsOfAnotherArchitectureKillTheProgram) {
#if defined(__x86_64__)
  if (!kernel_answers_i386_calls())
    GTEST_SKIP() << "this kernel has no i386 system call entry (int 0x80 faults outside "
                    "any sandbox: ia32 emulation is off), so there is none to filter";
  const auto box = test_sandbox();
  REQUIRE_FILTER(box);
  // i386's getpid through int 0x80, from executable memory: the filter lists x86-64 and
  // x32 calls only, so this one ends the program (SIGSYS) instead of slipping past.
  const auto r = box.run(python(
      "import ctypes, mmap\ncode = bytes([0xb8, 20, 0, 0, 0, 0xcd, 0x80, 0xc3])\n"
      "m = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)\nm.write(code)\n"
      "f = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(m)))\n"
      "print('before', flush=True)\nprint('after', f(), flush=True)\n"));
  EXPECT_EQ(r.reason, v::termination::syscall_denied) << r.stderr_text;
  EXPECT_EQ(r.signal, SIGSYS);
  EXPECT_EQ(r.stdout_text, "before\n");
#else
  GTEST_SKIP() << "x86-64 only";
#endif
}

}  // namespace
