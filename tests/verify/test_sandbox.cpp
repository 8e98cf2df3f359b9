// The sandbox on programs that behave: output, stdin, exit status, a clean
// environment, no inherited descriptors, a private scratch directory, and errors.

#include <fcntl.h>

#include <algorithm>
#include <sstream>

#include "verify/support.hpp"

namespace {
using namespace verify_test;

TEST(Sandbox, ReportsIsolationOfThisSystem) {
  const auto& s = v::probe_isolation();
  std::printf("isolation here: %s\n", s.describe().c_str());
  if (::geteuid() == 0) {
    EXPECT_TRUE(s.privilege_drop);
  }
}

TEST(Sandbox, RunsAProgramWithStdinAndCapturesBothStreams) {
  if (!python_available()) GTEST_SKIP() << "no /usr/bin/python3";
  const auto r = test_sandbox().run(
      python("import sys\nx = sys.stdin.read()\nprint(x.upper(), end='')\nprint('err', file=sys.stderr)", "hello\n"));
  EXPECT_EQ(r.reason, v::termination::exited);
  EXPECT_TRUE(r.succeeded());
  EXPECT_EQ(r.stdout_text, "HELLO\n");
  EXPECT_EQ(r.stderr_text, "err\n");
  EXPECT_FALSE(r.stdout_truncated);
  EXPECT_GT(r.wall_seconds, 0.0);
  EXPECT_GT(r.peak_memory_bytes, 1u << 20);
  EXPECT_LT(r.wall_seconds, 2.0);
}

TEST(Sandbox, ReportsExitCodesAndSignals) {
  const auto box = test_sandbox();
  const auto exited = box.run({.argv = {"sh", "-c", "exit 3"}});
  EXPECT_EQ(exited.reason, v::termination::exited);
  EXPECT_EQ(exited.exit_code, 3);
  EXPECT_FALSE(exited.succeeded());
  const auto aborted = box.run({.argv = {"sh", "-c", "kill -SEGV $$"}});
  EXPECT_EQ(aborted.reason, v::termination::signaled);
  EXPECT_EQ(aborted.signal, SIGSEGV);
}

TEST(Sandbox, StartsFromACleanEnvironmentInItsScratchDirectory) {
  ::setenv("CASCADE_RL_SECRET", "do-not-leak", 1);
  const auto box = test_sandbox();
  const auto scratch = box.make_scratch();
  const auto r = box.run({.argv = {"sh", "-c", "env; pwd"}, .environment = {"EXTRA=1"}}, scratch);
  ASSERT_TRUE(r.succeeded()) << r.stderr_text;
  EXPECT_EQ(r.stdout_text.find("CASCADE_RL_SECRET"), std::string::npos);
  EXPECT_NE(r.stdout_text.find("EXTRA=1"), std::string::npos);
  EXPECT_NE(r.stdout_text.find("HOME=" + scratch.path().string()), std::string::npos);
  EXPECT_NE(r.stdout_text.find("\n" + scratch.path().string() + "\n"), std::string::npos);
}

TEST(Sandbox, InheritsNoFileDescriptors) {
  const int leaked = ::open("/etc/hostname", O_RDONLY);  // not close-on-exec
  ASSERT_GE(leaked, 0);
  const auto r = test_sandbox().run({.argv = {"sh", "-c", "ls /proc/self/fd"}});
  ::close(leaked);
  ASSERT_TRUE(r.succeeded()) << r.stderr_text;
  // 0, 1, 2 and the descriptor ls opened to read the directory.
  EXPECT_EQ(r.stdout_text, "0\n1\n2\n3\n");
}

TEST(Sandbox, RunsAsAnUnprivilegedUserWhenStartedAsRoot) {
  if (::geteuid() != 0) GTEST_SKIP() << "not root: the program runs as the caller";
  const auto box = test_sandbox();
  const auto scratch = box.make_scratch();
  const auto r = box.run({.argv = {"sh", "-c", "id -u; id -g; grep CapEff /proc/self/status"}}, scratch);
  ASSERT_TRUE(r.succeeded()) << r.stderr_text;
  // The scratch directory's own id (issue 34), from sandbox_options::ids.
  ASSERT_TRUE(scratch.identity().has_value());
  const std::uint32_t id = *scratch.identity();
  EXPECT_GE(id, box.options().ids.first);
  EXPECT_LT(id - box.options().ids.first, box.options().ids.count);
  EXPECT_EQ(r.stdout_text, std::to_string(id) + "\n" + std::to_string(id) + "\nCapEff:\t0000000000000000\n");
}

TEST(Sandbox, RunsInAUserNamespaceWhenNotRoot) {
  if (::geteuid() == 0) GTEST_SKIP() << "root: the program runs as another uid (see above)";
  const auto box = test_sandbox();
  if (!box.isolation().user_namespace) GTEST_SKIP() << "no unprivileged user namespaces: " << box.isolation().describe();
  const auto r = box.run({.argv = {"sh", "-c", "id -u; id -g; grep CapEff /proc/self/status; cat /proc/self/uid_map"}});
  ASSERT_TRUE(r.succeeded()) << r.stderr_text;
  std::istringstream out(r.stdout_text);
  std::string uid, gid, caps, map_inside, map_outside, map_count;
  std::getline(out, uid);
  std::getline(out, gid);
  std::getline(out, caps);
  out >> map_inside >> map_outside >> map_count;
  EXPECT_EQ(uid, "65534");
  EXPECT_EQ(gid, "65534");
  EXPECT_EQ(caps, "CapEff:\t0000000000000000");
  // Only the caller's uid is mapped, to 65534.
  EXPECT_EQ(map_inside + " " + map_outside + " " + map_count, "65534 " + std::to_string(::geteuid()) + " 1");
  // The result says what this mode keeps and what it loses.
  const auto said = std::find_if(r.warnings.begin(), r.warnings.end(),
                                 [](const std::string& w) { return w.find("not root") != std::string::npos; });
  ASSERT_NE(said, r.warnings.end());
  EXPECT_NE(said->find("Kept:"), std::string::npos) << *said;
  EXPECT_NE(said->find("can read every file the caller can"), std::string::npos) << *said;
  // Refused unless the caller accepts the loss.
  v::sandbox_options refuse = test_options();
  refuse.on_missing_isolation = v::missing_isolation::refuse;
  EXPECT_THROW((void)v::sandbox(refuse), cascade_rl::error);
}

TEST(Sandbox, HidesRunWhereSocketsAndSecretsLive) {
  if (!v::probe_isolation().read_only_root) GTEST_SKIP() << "no mount namespace";
  std::error_code ec;
  if (!std::filesystem::is_directory("/run", ec) || std::filesystem::is_empty("/run", ec)) GTEST_SKIP() << "no /run here";
  const auto r = test_sandbox().run({.argv = {"sh", "-c", "ls -A /run | wc -l; touch /run/x 2>/dev/null || echo read-only"}});
  ASSERT_TRUE(r.succeeded()) << r.stderr_text;
  EXPECT_EQ(r.stdout_text, "0\nread-only\n");
}

TEST(Sandbox, KeepsFilesInTheScratchDirectoryAndRemovesItAfterwards) {
  const auto box = test_sandbox();
  std::filesystem::path where;
  {
    const auto scratch = box.make_scratch();
    where = scratch.path();
    const auto r = box.run({.argv = {"sh", "./run.sh"},
                            .files = {{.path = "run.sh", .contents = "cat data/in.txt > out.txt\n"},
                                      {.path = "data/in.txt", .contents = "payload"}}},
                           scratch);
    ASSERT_TRUE(r.succeeded()) << r.stderr_text;
    EXPECT_EQ(scratch.read("out.txt"), "payload");
    EXPECT_EQ(scratch.read("missing.txt"), std::nullopt);
  }
  EXPECT_FALSE(std::filesystem::exists(where));
}

TEST(Sandbox, ReportsAProgramThatCannotStart) {
  const auto box = test_sandbox();
  const auto missing = box.run({.argv = {"no-such-program-anywhere"}});
  EXPECT_EQ(missing.reason, v::termination::exec_failed);
  EXPECT_NE(missing.error.find("not found"), std::string::npos);
  const auto not_executable =
      box.run({.argv = {"./data.txt"}, .files = {{.path = "data.txt", .contents = "x"}}});
  EXPECT_EQ(not_executable.reason, v::termination::exec_failed);
  EXPECT_NE(not_executable.error.find("execve"), std::string::npos);
}

TEST(Sandbox, RefusesBadArguments) {
  EXPECT_THROW((void)test_sandbox().run({.argv = {}}), cascade_rl::error);
  auto bad = short_limits();
  bad.wall_time = 0s;
  try {
    (void)test_sandbox(bad);
    FAIL() << "no error";
  } catch (const cascade_rl::error& e) {
    EXPECT_NE(std::string(e.what()).find("sandbox_options.limits.wall_time"), std::string::npos);
  }
  const auto box = test_sandbox();
  EXPECT_THROW((void)box.run({.argv = {"true"}, .files = {{.path = "../escape"}}}), cascade_rl::error);
  EXPECT_THROW((void)box.run({.argv = {"true"}, .files = {{.path = "/etc/x"}}}), cascade_rl::error);
  EXPECT_THROW((void)v::sandbox({.on_missing_isolation = v::missing_isolation::warn, .uid = 0}), cascade_rl::error);
}

TEST(Sandbox, RefusesMissingIsolationUnlessToldToWarn) {
  const auto box = test_sandbox();
  v::sandbox_options refuse = test_options();
  refuse.on_missing_isolation = v::missing_isolation::refuse;
  if (box.warnings().empty()) {
    EXPECT_NO_THROW((void)v::sandbox(refuse));
  } else {
    try {
      (void)v::sandbox(refuse);
      FAIL() << "no error";
    } catch (const cascade_rl::error& e) {
      EXPECT_NE(std::string(e.what()).find(box.warnings().front()), std::string::npos) << e.what();
    }
  }
  // Here everything is there exactly when there is nothing to warn about.
  const auto& s = box.isolation();
  const bool complete = s.network_namespace && s.pid_namespace && s.read_only_root && !s.pids_cgroup.empty() &&
                        !s.memory_cgroup.empty() && !s.cpu_cgroup.empty() && s.tmpfs_scratch && s.syscall_filter &&
                        s.syscall_reports && s.privilege_drop;
  if (complete) {
    for (const auto& w : box.warnings()) EXPECT_NE(w.find("swap"), std::string::npos) << w;
  } else {
    EXPECT_FALSE(box.warnings().empty()) << s.describe();
  }
}

}  // namespace
