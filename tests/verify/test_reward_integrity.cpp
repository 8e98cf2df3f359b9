// Issue 34: what a program may reach beyond its caps. Each test is an attack from the
// issue, asserting that it fails and that the host is unaffected.

#include <fcntl.h>
#include <pty.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "verify/support.hpp"

namespace {

using namespace verify_test;

// A world-readable directory beside the trainer holding a prompt's tests with their
// expected outputs, as a trainer's data set on disk would be.
class planted_tests : public host_directory {
 public:
  explicit planted_tests(const std::string& token) : host_directory("cascade_rl_planted") {
    if (!path().empty())
      put("tests.jsonl", "{\"input\": \"" + token + "\", \"output\": \"expected-" + token + "\"}\n");
  }
  [[nodiscard]] const std::filesystem::path& dir() const { return path(); }
  [[nodiscard]] std::string contents() const { return get("tests.jsonl"); }
};

// The program of the issue's reward hack: computes nothing, walks the file system for a
// JSONL line holding its own input and prints the stored output.
const std::string answer_search = R"(
import os, sys, json
want = sys.stdin.read().strip()
for root, dirs, files in os.walk('/'):
    # (the system directories, the host's own, are skipped to stay within the CPU cap)
    dirs[:] = [d for d in dirs if not (root == '/' and d in ('proc', 'sys', 'dev', 'usr'))]
    for f in files:
        if not f.endswith('.jsonl'):
            continue
        try:
            for line in open(os.path.join(root, f)):
                t = json.loads(line)
                if t.get('input') == want:
                    print(t['output'])
                    sys.exit(0)
        except Exception:
            pass
print('not found')
)";

bool minimal_view_here(const v::sandbox& box) {
  return box.isolation().minimal_view && python_available();
}

TEST(RewardIntegrity, TestDataBesideTheTrainerIsOutsideTheView) {
  const host_check host;
  const planted_tests planted(host.token());
  ASSERT_FALSE(planted.dir().empty());
  v::sandbox_options options = test_options(cpu_bound_limits());
  options.scratch_parent = host.scratch_parent();
  const v::sandbox box(options);
  if (!minimal_view_here(box)) GTEST_SKIP() << "no minimal file view or python3: " << box.isolation().describe();
  const std::string before = planted.contents();

  const auto r = box.run({.argv = {"python3", "-I", "-c", answer_search}, .stdin_data = host.token()});
  ASSERT_TRUE(r.succeeded()) << v::to_string(r.reason) << " " << r.stderr_text;
  EXPECT_EQ(r.stdout_text, "not found\n");
  // Not by path either, and the root holds only the view's entries.
  const auto direct = box.run({.argv = {"sh", "-c", "cat " + (planted.dir() / "tests.jsonl").string() +
                                                        " 2>/dev/null || echo unreadable; ls /"}});
  ASSERT_TRUE(direct.succeeded()) << direct.stderr_text;
  std::istringstream lines(direct.stdout_text);
  std::string line;
  std::getline(lines, line);
  EXPECT_EQ(line, "unreadable");
  const std::string scratch_top = *std::filesystem::path(host.scratch_parent()).relative_path().begin();
  const std::set<std::string> allowed = {"bin", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc",
                                         "sbin", "tmp", "usr", scratch_top};
  while (std::getline(lines, line)) EXPECT_TRUE(allowed.count(line)) << "the view shows /" << line;

  // The same program finds them when the caller lists the directory (the attack is
  // real), and cannot change them.
  options.read_only_paths = {planted.dir()};
  const v::sandbox listed(options);
  const auto found = listed.run({.argv = {"python3", "-I", "-c", answer_search}, .stdin_data = host.token()});
  ASSERT_TRUE(found.succeeded()) << found.stderr_text;
  EXPECT_EQ(found.stdout_text, "expected-" + host.token() + "\n");
  const auto write = listed.run({.argv = {"sh", "-c", "echo x >> " + (planted.dir() / "tests.jsonl").string() +
                                                          " 2>/dev/null || echo refused"}});
  EXPECT_EQ(write.stdout_text, "refused\n");
  EXPECT_EQ(planted.contents(), before);
  EXPECT_EQ(joined(host.leftovers()), "");
}

// The issue's reward hack end to end: a response that computes nothing but looks its
// answer up on disk earns 0 (it earned 1.0 before the minimal view).
TEST(RewardIntegrity, ARewardIsNotEarnedByReadingTheTestsFromDisk) {
  const host_check host;
  const planted_tests planted(host.token());
  ASSERT_FALSE(planted.dir().empty());
  v::sandbox_options options = test_options(cpu_bound_limits());
  options.scratch_parent = host.scratch_parent();
  const std::vector<v::test_case> tests = {{host.token(), "expected-" + host.token() + "\n"}};
  const v::unit_test_reward reward{v::sandbox(options)};
  if (!minimal_view_here(v::sandbox(options))) GTEST_SKIP() << "no minimal file view or python3";
  const auto report = reward.evaluate(answer_search, tests);
  EXPECT_EQ(report.reward, 0.0);
  ASSERT_EQ(report.runs.size(), 1u);
  EXPECT_EQ(report.runs[0].stdout_text, "not found\n");
  // Listed by the caller, the same files hand out the reward: the attack is real.
  options.read_only_paths = {planted.dir()};
  EXPECT_EQ(v::unit_test_reward{v::sandbox(options)}.evaluate(answer_search, tests).reward, 1.0);
  EXPECT_EQ(joined(host.leftovers()), "");
}

TEST(RewardIntegrity, DevHoldsOnlyItsOwnDevicesAndPtys) {
  const host_check host;
  v::sandbox_options options = test_options();
  options.scratch_parent = host.scratch_parent();
  const v::sandbox box(options);
  if (!minimal_view_here(box)) GTEST_SKIP() << "no minimal file view or python3: " << box.isolation().describe();
  const auto r = box.run({.argv = {"python3", "-I", "-c", R"(
import os
print(' '.join(sorted(os.listdir('/dev'))))
print(' '.join(sorted(os.listdir('/dev/pts'))))
held = []
try:
    while len(held) < 64:
        held.append(os.openpty())
except OSError as e:
    print(len(held), e.errno)
print(os.path.realpath('/dev/ptmx'))
)"}});
  ASSERT_TRUE(r.succeeded()) << r.stderr_text;
  std::istringstream out(r.stdout_text);
  std::string dev, pts, opened, ptmx;
  std::getline(out, dev);
  std::getline(out, pts);
  std::getline(out, opened);
  std::getline(out, ptmx);
  EXPECT_EQ(dev, "fd full null ptmx pts random shm stderr stdin stdout urandom zero");
  EXPECT_EQ(pts, "ptmx");  // none of the host's
  // The instance's own limit (max=16), not the machine's: ENOSPC at the 17th.
  EXPECT_EQ(opened, "16 " + std::to_string(ENOSPC));
  EXPECT_EQ(ptmx, "/dev/pts/ptmx");
  // The host's ptys are untouched and still usable.
  int master = -1, slave = -1;
  EXPECT_EQ(::openpty(&master, &slave, nullptr, nullptr, nullptr), 0) << std::strerror(errno);
  if (master >= 0) ::close(master);
  if (slave >= 0) ::close(slave);
  EXPECT_EQ(joined(host.leftovers()), "");
}

TEST(RewardIntegrity, InitShowsNothingOfTheTrainer) {
  const host_check host;
  v::sandbox_options options = test_options();
  options.scratch_parent = host.scratch_parent();
  const v::sandbox box(options);
  if (!minimal_view_here(box)) GTEST_SKIP() << "no minimal file view or python3: " << box.isolation().describe();
  // The trainer's command line holds this binary's name; init is a fork of it.
  const std::string trainer = program_invocation_short_name;
  ASSERT_FALSE(trainer.empty());
  const auto r = box.run({.argv = {"python3", "-I", "-c", R"(
import os, subprocess
for f in ('cmdline', 'environ', 'mem', 'maps', 'status'):
    try:
        print(f, len(open('/proc/1/' + f, 'rb').read(4096)))
    except OSError as e:
        print(f, 'errno', e.errno)
child = subprocess.Popen(['sleep', '5'])
seen = b''
for pid in os.listdir('/proc'):
    if pid.isdigit():
        for f in ('cmdline', 'environ'):
            try:
                seen += open('/proc/%s/%s' % (pid, f), 'rb').read()
            except OSError:
                pass
print('pids', sorted(int(p) for p in os.listdir('/proc') if p.isdigit()) == sorted([os.getpid(), child.pid]))
child.kill()
import sys
sys.stdout.flush()
os.write(1, seen)
)"}});
  ASSERT_TRUE(r.succeeded()) << r.stderr_text;
  for (const char* f : {"cmdline", "environ", "mem", "maps", "status"})
    EXPECT_NE(r.stdout_text.find(std::string(f) + " errno " + std::to_string(ENOENT) + "\n"), std::string::npos)
        << "/proc/1/" << f << " is readable:\n" << r.stdout_text;
  // Only the program's own processes are listed, and none of them is the trainer.
  EXPECT_NE(r.stdout_text.find("pids True\n"), std::string::npos) << r.stdout_text;
  EXPECT_EQ(r.stdout_text.find(trainer), std::string::npos) << r.stdout_text;
  EXPECT_EQ(r.stdout_text.find("gtest"), std::string::npos) << r.stdout_text;
  EXPECT_EQ(joined(host.leftovers()), "");
}

TEST(RewardIntegrity, SocketFamiliesOutsideTheAllowListAreRefused) {
  const auto box = test_sandbox();
  if (!box.filters_syscalls() || !python_available()) GTEST_SKIP() << "no syscall filter or python3";
  const auto r = box.run({.argv = {"python3", "-I", "-c", R"(
import socket, ctypes, errno
def try_family(family, kind):
    try:
        socket.socket(family, kind).close()
        return 'ok'
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
for name, family, kind in (('unix', 1, 1), ('inet', 2, 2), ('inet6', 10, 2), ('netlink', 16, 3),
                           ('vsock', 40, 1), ('bluetooth', 31, 1), ('alg', 38, 5), ('key', 15, 3),
                           ('rds', 21, 5), ('tipc', 30, 2)):
    print(name, try_family(family, kind))
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
# AF_NETLINK with high bits set (the kernel reads an int), and socketpair.
r = libc.syscall(41, ctypes.c_long((1 << 32) | 16), 3, 0)
print('high-bits', errno.errorcode.get(ctypes.get_errno(), '') if r < 0 else 'ok')
fds = (ctypes.c_int * 2)()
r = libc.socketpair(16, 3, 0, fds)
print('socketpair-netlink', errno.errorcode.get(ctypes.get_errno(), '') if r < 0 else 'ok')
r = libc.socketpair(1, 1, 0, fds)
print('socketpair-unix', 'ok' if r == 0 else 'failed')
)"}});
  ASSERT_TRUE(r.succeeded()) << r.stderr_text;
  EXPECT_EQ(r.stdout_text,
            "unix ok\ninet ok\ninet6 ok\nnetlink EAFNOSUPPORT\nvsock EAFNOSUPPORT\nbluetooth EAFNOSUPPORT\n"
            "alg EAFNOSUPPORT\nkey EAFNOSUPPORT\nrds EAFNOSUPPORT\ntipc EAFNOSUPPORT\nhigh-bits EAFNOSUPPORT\n"
            "socketpair-netlink EAFNOSUPPORT\nsocketpair-unix ok\n");
  // The host has netlink (so the refusal above is the filter's), and still has it.
  const int host_netlink = ::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, 0);
  EXPECT_GE(host_netlink, 0) << std::strerror(errno);
  if (host_netlink >= 0) ::close(host_netlink);
}

TEST(RewardIntegrity, ConcurrentRunsHaveTheirOwnUids) {
  if (::geteuid() != 0) GTEST_SKIP() << "not root: every run is the caller's uid (one user namespace can map no other)";
  const auto box = test_sandbox();
  const auto scratch_a = box.make_scratch();
  const auto scratch_b = box.make_scratch();
  // Both alive at once.
  std::string out_a, out_b;
  const v::command cmd{.argv = {"sh", "-c", "id -u; sleep 0.4"}};
  std::thread other([&] { out_b = box.run(cmd, scratch_b).stdout_text; });
  out_a = box.run(cmd, scratch_a).stdout_text;
  other.join();
  ASSERT_TRUE(scratch_a.identity() && scratch_b.identity());
  EXPECT_NE(*scratch_a.identity(), *scratch_b.identity());
  EXPECT_EQ(out_a.substr(0, out_a.find('\n')), std::to_string(*scratch_a.identity()));
  EXPECT_EQ(out_b.substr(0, out_b.find('\n')), std::to_string(*scratch_b.identity()));
  // A second run in one scratch keeps its uid (compile, then test).
  const auto again = box.run({.argv = {"id", "-u"}}, scratch_a);
  EXPECT_EQ(again.stdout_text, std::to_string(*scratch_a.identity()) + "\n");
  // Ids return to the range with their scratch directories.
  const std::uint32_t first = *scratch_a.identity();
  { const auto s = box.make_scratch(); EXPECT_NE(*s.identity(), first); }
}

TEST(RewardIntegrity, ADeepTreeLeftInScratchCostsTheNextRunNothing) {
  v::limits limits = cpu_bound_limits();
  limits.scratch_inodes = 20000;
  const host_check host;
  v::sandbox_options options = test_options(limits);
  options.scratch_parent = host.scratch_parent();
  const v::sandbox box(options);
  if (!box.isolation().tmpfs_scratch || !python_available()) GTEST_SKIP() << "no tmpfs scratch or python3";
  const auto scratch = box.make_scratch();
  const auto deep = box.run({.argv = {"python3", "-I", "-c", R"(
import os
for i in range(16000):
    os.mkdir('d')
    os.chdir('d')
open('leaf', 'w').write('x')
print('deep')
)"}}, scratch);
  ASSERT_EQ(deep.stdout_text, "deep\n") << deep.stderr_text;

  // The next run and the scratch's removal, with the trainer's descriptors watched.
  descriptor_watch watch;
  const auto start = std::chrono::steady_clock::now();
  const auto next = box.run({.argv = {"true"}}, scratch);
  const double next_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::size_t held = watch.stop();
  EXPECT_TRUE(next.succeeded()) << next.stderr_text;
  // Before issue 34 the hand-over walked the tree on the host: 24 to 32 s and 16005
  // descriptors. Now it is never walked: a trivial run's time and a run's descriptors.
  EXPECT_LT(next_seconds, 2.0);
  EXPECT_LT(held, 32u) << "descriptors opened by the trainer during the next run";
  std::printf("next run after a 16000-deep tree: %.3f s, %zu descriptors above the %zu before\n", next_seconds,
              held, watch.baseline());
}

// Where the scratch is a host directory (no tmpfs: the fallback, or turned off), the
// trainer removes what the program left: a 16000-deep chain, a wide directory and
// directories without permissions, under a descriptor limit that a walk holding one per
// level (std::filesystem::remove_all, before issue 34) exhausts, leaving the tree.
TEST(RewardIntegrity, AHostDirectoryScratchIsRemovedWithAFewDescriptorsAtAnyDepth) {
  const host_check host;
  v::limits limits = cpu_bound_limits();
  limits.cpu_time = std::chrono::seconds(10);  // 16000 directories on a disk: seconds of system time
  limits.wall_time = std::chrono::seconds(30);
  v::sandbox_options options = test_options(limits);
  options.scratch_parent = host.scratch_parent();
  options.tmpfs_scratch = false;
  const v::sandbox box(options);
  if (!python_available()) GTEST_SKIP() << "no python3";
  auto scratch = std::make_unique<v::scratch_directory>(box.make_scratch());
  ASSERT_FALSE(scratch->on_tmpfs());
  const auto left = box.run(python(R"(
import os
os.mkdir('wide')
for i in range(300):
    open('wide/f%d' % i, 'w').close()
for i in range(50):
    os.makedirs('wide/d%d/e' % i)
os.makedirs('locked/sub/deeper')
open('locked/sub/x', 'w').close()
os.chmod('locked/sub', 0)
os.chmod('locked', 0)
for i in range(16000):
    os.mkdir('d')
    os.chdir('d')
open('leaf', 'w').write('x')
print('left')
)"), *scratch);
  ASSERT_EQ(left.stdout_text, "left\n") << v::to_string(left.reason) << " " << left.stderr_text;

  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  rlimit low = saved;
  low.rlim_cur = 256;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  descriptor_watch watch;
  const auto start = std::chrono::steady_clock::now();
  scratch.reset();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::size_t held = watch.stop();
  ::setrlimit(RLIMIT_NOFILE, &saved);
  EXPECT_EQ(joined(host.leftovers()), "");
  EXPECT_LT(held, 8u) << "descriptors the removal held";
  std::printf("host-directory scratch with a 16000-deep chain removed in %.3f s, %zu descriptors above the %zu "
              "before\n", seconds, held, watch.baseline());
}

TEST(RewardIntegrity, InitsAnswersToDeniedCallsCountInTheRunsCpu) {
  const auto box = test_sandbox(cpu_bound_limits());
  if (!box.isolation().syscall_reports || !python_available()) GTEST_SKIP() << "no seccomp notification or python3";
  rusage before{}, after{};
  ::getrusage(RUSAGE_CHILDREN, &before);
  // Four threads calling a denied system call in a loop: each call is answered by init.
  const auto r = box.run({.argv = {"python3", "-I", "-c", R"(
import ctypes, threading
libc = ctypes.CDLL(None)
def spin():
    while True:
        libc.mount(b'none', b'/tmp', b'tmpfs', 0, None)
threads = [threading.Thread(target=spin) for _ in range(4)]
for t in threads: t.start()
for t in threads: t.join()
)"}});
  ::getrusage(RUSAGE_CHILDREN, &after);
  const auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6; };
  const double host_cpu = seconds(after.ru_utime) - seconds(before.ru_utime) + seconds(after.ru_stime) - seconds(before.ru_stime);
  EXPECT_EQ(r.reason, v::termination::cpu_time_limit) << v::to_string(r.reason) << " " << r.stderr_text;
  EXPECT_NE(std::find(r.denied_syscalls.begin(), r.denied_syscalls.end(), "mount"), r.denied_syscalls.end());
  // Before issue 34: 2.77 s of host CPU under a 1 s cap, 1.76 s of it not reported.
  EXPECT_LT(host_cpu, r.cpu_seconds + 0.25) << "host CPU " << host_cpu << " s, reported " << r.cpu_seconds << " s";
  EXPECT_LT(r.cpu_seconds, 1.5);
  std::printf("denied-call loop: %.2f s reported, %.2f s of host CPU, %llu denials\n", r.cpu_seconds, host_cpu,
              static_cast<unsigned long long>(r.denied_syscall_count));
}

TEST(RewardIntegrity, RunCgroupsAreNestedUnderTheTrainersOwn) {
  if (!test_cgroup_parent().empty()) GTEST_SKIP() << "the suite names a cgroup parent";
  const std::filesystem::path own = v::detail::own_cgroup("memory");
  const auto box = test_sandbox();
  if (v::detail::machine_cgroup_version() != 1 || box.isolation().memory_cgroup.empty() || own.empty() || own == "/")
    GTEST_SKIP() << "no cgroup v1 memory hierarchy with this process below its root: " << box.isolation().describe();
  // Where a container's (or a unit's) memory limit is: the runs' memory is charged there.
  EXPECT_EQ(box.isolation().memory_cgroup, std::filesystem::path("/sys/fs/cgroup/memory") / own.relative_path());
  const auto r = box.run({.argv = {"cat", "/proc/self/cgroup"}});
  ASSERT_TRUE(r.succeeded()) << r.stderr_text;
  const std::string expected = ":memory:" + own.string() + "/cascade_rl_verify_" + std::to_string(::getpid()) + "_";
  EXPECT_NE(r.stdout_text.find(expected), std::string::npos) << r.stdout_text;
}

}  // namespace
