// Issue 36: the workspace of an agentic episode. State persists across the tools' runs,
// the diff against the original tree round-trips, grading adds the hidden tests to a
// fresh copy and drops changes to tests (so tampering scores nothing), the oracle is
// never in the view, the episode budget ends runs, a pool counts live workspaces, and
// nothing is left when a workspace ends or its trainer is killed.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "verify/support.hpp"

namespace {

using namespace verify_test;

// The task: a one-line bug in calc.py, a visible test the agent may read (and try to
// weaken), and hidden tests that only grading sees.
void make_task(const host_directory& repo) {
  repo.put("calc.py", "def add(a, b):\n    return a - b\n");
  repo.put("tests/test_visible.py",
           "from calc import add\nassert add(1, 1) == 2, 'add(1, 1)'\nprint('visible tests pass')\n");
}
const std::vector<v::file> hidden_tests = {
    {.path = "test_hidden.py", .contents = "import sys\nsys.path.insert(0, '.')\nfrom calc import add\n"
                                           "assert add(2, 3) == 5, 'add(2, 3)'\nprint('hidden tests pass')\n"}};
const std::vector<std::string> test_command = {"python3", "test_hidden.py"};

v::workspace_options task_options() {
  v::workspace_options options;
  options.protected_paths = {"tests"};
  return options;
}

v::sandbox workspace_sandbox(const host_check& host) {
  v::sandbox_options options = test_options(cpu_bound_limits());
  options.scratch_parent = host.scratch_parent();
  return v::sandbox(options);
}

TEST(Workspace, KeepsStateAcrossRunsAndDiffsAgainstTheOriginal) {
  if (!python_available()) GTEST_SKIP() << "no python3";
  const host_check host;
  const host_directory repo("cascade_rl_repo");
  make_task(repo);
  const v::sandbox box = workspace_sandbox(host);
  {
    v::workspace ws(box, repo.path(), task_options());
    const auto edit = ws.run({.argv = {"sh", "-c",
                                       "sed -i 's/a - b/a + b/' calc.py && printf 'fixed\\n' > notes.txt && "
                                       "rm tests/test_visible.py"}});
    ASSERT_TRUE(edit.succeeded()) << edit.stderr_text;
    const auto look = ws.run({.argv = {"cat", "calc.py", "notes.txt"}});
    EXPECT_EQ(look.stdout_text, "def add(a, b):\n    return a + b\nfixed\n");  // the first run's files stayed
    EXPECT_EQ(repo.get("calc.py"), "def add(a, b):\n    return a - b\n");     // the original untouched

    const std::string diff = ws.diff();
    EXPECT_NE(diff.find("--- a/calc.py\n+++ b/calc.py\n"), std::string::npos) << diff;
    EXPECT_NE(diff.find("-    return a - b\n+    return a + b\n"), std::string::npos) << diff;
    EXPECT_NE(diff.find("--- /dev/null\n+++ b/notes.txt\n"), std::string::npos) << diff;
    EXPECT_NE(diff.find("--- a/tests/test_visible.py\n+++ /dev/null\n"), std::string::npos) << diff;
    // The diff turns a copy of the original into the workspace.
    const host_directory copy("cascade_rl_copy");
    make_task(copy);
    const auto applied = v::apply_unified_diff(v::parse_unified_diff(diff), copy.path());
    ASSERT_TRUE(applied.ok) << applied.error;
    EXPECT_EQ(copy.get("calc.py"), "def add(a, b):\n    return a + b\n");
    EXPECT_EQ(copy.get("notes.txt"), "fixed\n");
    EXPECT_FALSE(std::filesystem::exists(copy.path() / "tests" / "test_visible.py"));

    // Graded with the hidden tests: resolved, the test file's deletion dropped.
    const v::workspace_grade grade = ws.grade(hidden_tests, test_command);
    EXPECT_EQ(grade.report.outcome, v::patch_outcome::resolved) << grade.report.detail << grade.report.tests->stderr_text;
    EXPECT_EQ(grade.report.reward, 1.0);
    EXPECT_EQ(grade.report.tests->stdout_text, "hidden tests pass\n");
    EXPECT_EQ(grade.dropped_paths, std::vector<std::string>{"tests/test_visible.py"});
    EXPECT_EQ(ws.run({.argv = {"true"}}).reason, v::termination::exited);  // grading left the workspace alone
  }
  EXPECT_EQ(joined(host.leftovers()), "");  // the workspace is gone with it
}

TEST(Workspace, TamperingWithTestsOrSearchingForTheOracleScoresNothing) {
  if (!python_available()) GTEST_SKIP() << "no python3";
  const host_check host;
  const host_directory repo("cascade_rl_repo");
  make_task(repo);
  // The hidden tests also lie on the host beside the repository, as a data set would.
  const host_directory oracle("cascade_rl_oracle");
  oracle.put("test_hidden.py", hidden_tests[0].contents);
  const v::sandbox box = workspace_sandbox(host);
  v::workspace ws(box, repo.path(), task_options());
  // The agent does not fix calc.py. It writes its own "hidden" test that passes,
  // weakens the visible one, and searches every readable file for the real one.
  const auto tamper = ws.run(python(R"(
import os
open('test_hidden.py', 'w').write("print('hidden tests pass')\n")
open('tests/test_visible.py', 'w').write('pass\n')
found = []
for root, dirs, files in os.walk('/'):
    dirs[:] = [d for d in dirs if not (root == '/' and d in ('proc', 'sys', 'dev', 'usr'))]
    for f in files:
        try:
            if b'assert add(2, 3) == 5' in open(os.path.join(root, f), 'rb').read(1 << 16):
                found.append(os.path.join(root, f))
        except OSError:
            pass
print('oracle found' if found else 'oracle not found', found)
)"));
  ASSERT_TRUE(tamper.succeeded()) << tamper.stderr_text;
  EXPECT_EQ(tamper.stdout_text, "oracle not found []\n");
  const v::workspace_grade grade = ws.grade(hidden_tests, test_command);
  EXPECT_EQ(grade.report.outcome, v::patch_outcome::tests_failed);
  EXPECT_EQ(grade.report.reward, 0.0);
  EXPECT_NE(grade.report.tests->stderr_text.find("add(2, 3)"), std::string::npos) << grade.report.tests->stderr_text;
  EXPECT_EQ(std::set<std::string>(grade.dropped_paths.begin(), grade.dropped_paths.end()),
            (std::set<std::string>{"test_hidden.py", "tests/test_visible.py"}));
}

TEST(Workspace, ToolOutputIsTruncatedAndTheEpisodeBudgetEndsRuns) {
  const host_check host;
  const host_directory repo("cascade_rl_repo");
  make_task(repo);
  v::workspace_options options = task_options();
  options.episode_budget = std::chrono::milliseconds(1500);
  v::workspace ws(workspace_sandbox(host), repo.path(), options);
  // 4 MB of output past the 64 KiB cap: kept up to it, and the tool still finishes.
  const auto loud = ws.run({.argv = {"sh", "-c", "head -c 4000000 /dev/zero | tr '\\0' x; echo done >&2"}});
  EXPECT_EQ(loud.reason, v::termination::exited) << v::to_string(loud.reason);
  EXPECT_EQ(loud.exit_code, 0);
  EXPECT_TRUE(loud.stdout_truncated);
  EXPECT_EQ(loud.stdout_text.size(), 64u << 10);
  EXPECT_EQ(loud.stderr_text, "done\n");
  // A run longer than what is left of the budget is stopped where the budget ends.
  const auto before = ws.remaining();
  const auto slow = ws.run({.argv = {"sleep", "10"}});
  EXPECT_EQ(slow.reason, v::termination::wall_time_limit);
  EXPECT_LT(slow.wall_seconds, std::chrono::duration<double>(before).count() + 0.5);
  EXPECT_TRUE(ws.spent());
  EXPECT_THROW((void)ws.run({.argv = {"true"}}), cascade_rl::error);
  // Grading has its own time.
  if (python_available()) {
    EXPECT_EQ(ws.grade(hidden_tests, test_command).report.outcome, v::patch_outcome::tests_failed);
  }
}

TEST(Workspace, APoolCountsLiveWorkspacesAgainstItsMemory) {
  const host_check host;
  const host_directory repo("cascade_rl_repo");
  make_task(repo);
  const v::sandbox box = workspace_sandbox(host);
  const std::uint64_t cap = box.options().limits.memory_bytes, scratch = box.options().limits.scratch_bytes;
  // Room for one run beside two workspaces' scratch, not three.
  const v::verify_pool pool(box, 1, cap + 2 * scratch);
  auto first = std::make_unique<v::workspace>(v::open_workspace(pool, repo.path()));
  const v::workspace second = v::open_workspace(pool, repo.path());
  EXPECT_EQ(pool.budget()->held(), 2 * scratch);
  try {
    (void)v::open_workspace(pool, repo.path());
    ADD_FAILURE() << "a third workspace was opened";
  } catch (const cascade_rl::error& e) {
    EXPECT_NE(std::string(e.what()).find("verify_pool"), std::string::npos) << e.what();
  }
  EXPECT_EQ(pool.budget()->held(), 2 * scratch);  // the refusal held nothing
  first.reset();
  EXPECT_EQ(pool.budget()->held(), scratch);
  v::workspace third = v::open_workspace(pool, repo.path());
  EXPECT_EQ(pool.budget()->held(), 2 * scratch);
  // Runs of the pool and of the workspaces share what is left; a run whose cap cannot
  // fit beside the holds is refused rather than left waiting.
  EXPECT_TRUE(pool.run_all(std::vector<v::command>{{.argv = {"true"}}}).front().succeeded());
  EXPECT_TRUE(third.run({.argv = {"true"}}).succeeded());
  v::limits greedy = box.options().limits;
  greedy.memory_bytes = cap + scratch;
  EXPECT_THROW((void)third.run({.argv = {"true"}, .limits = greedy}), cascade_rl::error);
}

// An agent's edits are applied through the scratch: never through a link it planted,
// and the files stay its runs' own.
TEST(Workspace, ApplyWritesThroughNoLinkAndLeavesFilesTheRunsOwn) {
  const host_check host;
  const host_directory repo("cascade_rl_repo");
  make_task(repo);
  const host_directory outside("cascade_rl_outside");
  outside.put("target.txt", "host file\n");
  v::workspace ws(workspace_sandbox(host), repo.path(), task_options());
  const auto planted = ws.run({.argv = {"sh", "-c",
                                        "ln -s " + (outside.path() / "target.txt").string() + " evil.txt && ln -s " +
                                            outside.path().string() + " lib"}});
  ASSERT_TRUE(planted.succeeded()) << planted.stderr_text;
  const auto through_file = ws.apply("--- a/evil.txt\n+++ b/evil.txt\n@@ -1 +1 @@\n-host file\n+overwritten\n");
  EXPECT_FALSE(through_file.ok);
  // All or nothing: calc.py's hunk (first in the plan's order) is undone when lib/new.txt is refused.
  const auto through_directory = ws.apply(
      "--- a/calc.py\n+++ b/calc.py\n@@ -1 +1 @@\n-def add(a, b):\n+def plus(a, b):\n"
      "--- /dev/null\n+++ b/lib/new.txt\n@@ -0,0 +1 @@\n+planted\n");
  EXPECT_FALSE(through_directory.ok);
  EXPECT_EQ(ws.scratch().read("calc.py").value_or(""), "def add(a, b):\n    return a - b\n");
  EXPECT_EQ(outside.get("target.txt"), "host file\n");
  EXPECT_FALSE(std::filesystem::exists(outside.path() / "new.txt"));
  const auto fix = ws.apply("--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a - b\n+    return a + b\n");
  ASSERT_TRUE(fix.ok) << fix.error;
  const auto edit = ws.run({.argv = {"sh", "-c", "echo '# more' >> calc.py && cat calc.py"}});
  EXPECT_EQ(edit.stdout_text, "def add(a, b):\n    return a + b\n# more\n") << edit.stderr_text;
}

// The environment an agentic stage runs: the tools over a workspace, the hidden tests'
// verdict as the outcome.
v::swe_agent_task agent_task(const host_directory& repo) {
  return {.repository = repo.path(), .hidden_tests = hidden_tests, .test_command = test_command,
          .visible_test_command = {"sh", "-c", "PYTHONPATH=. python3 tests/test_visible.py"}};
}

TEST(SweEnvironment, AnAgentFixesTheBugWithTheTools) {
  if (!python_available()) GTEST_SKIP() << "no python3";
  const host_check host;
  const host_directory repo("cascade_rl_repo");
  make_task(repo);
  v::swe_environment env(workspace_sandbox(host), agent_task(repo), {.workspace = task_options()});
  const std::string first = env.reset(cascade_rl::prompt{});
  EXPECT_EQ(first.substr(0, first.find("tools:")), "files:\ncalc.py\ntests/test_visible.py\n");
  EXPECT_EQ(env.step("show calc.py").observation, "     1\tdef add(a, b):\n     2\t    return a - b\n");
  EXPECT_EQ(env.step("show calc.py 2 2").observation, "     2\t    return a - b\n");
  const auto failing = env.step("test");
  EXPECT_EQ(failing.observation.substr(0, 9), "exited 1\n") << failing.observation;
  EXPECT_NE(failing.observation.find("add(1, 1)"), std::string::npos);
  EXPECT_EQ(env.step("apply\n--- a/calc.py\n+++ b/calc.py\n@@ -2 +2 @@\n-    return a + c\n+    return a + b\n")
                .observation.substr(0, 12),
            "not applied:");
  EXPECT_EQ(env.step("apply\n--- a/calc.py\n+++ b/calc.py\n@@ -2 +2 @@\n-    return a - b\n+    return a + b\n")
                .observation,
            "applied\n");
  EXPECT_EQ(env.step("test").observation, "exited 0\nvisible tests pass\n");
  EXPECT_EQ(env.step("rm -rf /").observation, "unknown tool 'rm'\n");
  const auto end = env.step("submit");
  EXPECT_TRUE(end.done);
  EXPECT_EQ(env.outcome(), 1.0);
  EXPECT_EQ(env.grade()->report.outcome, v::patch_outcome::resolved);
}

TEST(SweEnvironment, TamperingThroughTheToolsScoresNothing) {
  if (!python_available()) GTEST_SKIP() << "no python3";
  const host_check host;
  const host_directory repo("cascade_rl_repo");
  make_task(repo);
  v::swe_environment env(workspace_sandbox(host), agent_task(repo), {.workspace = task_options()});
  (void)env.reset(cascade_rl::prompt{});
  // The visible test made to pass instead of the code fixed: the test tool agrees...
  EXPECT_EQ(env.step("apply\n--- a/tests/test_visible.py\n+++ b/tests/test_visible.py\n@@ -1,3 +1 @@\n"
                     "-from calc import add\n-assert add(1, 1) == 2, 'add(1, 1)'\n-print('visible tests pass')\n"
                     "+print('visible tests pass')\n")
                .observation,
            "applied\n");
  EXPECT_EQ(env.step("test").observation, "exited 0\nvisible tests pass\n");
  EXPECT_TRUE(env.step("submit").done);
  // ...the hidden tests do not.
  EXPECT_EQ(env.outcome(), 0.0);
  EXPECT_EQ(env.grade()->report.outcome, v::patch_outcome::tests_failed);
  EXPECT_EQ(env.grade()->dropped_paths, std::vector<std::string>{"tests/test_visible.py"});
}

// The scratch parent's entries that are not empty directories (a killed trainer leaves
// its runs' scratch mount points behind, empty: README, "Limits, honestly").
std::vector<std::string> non_empty_entries(const std::filesystem::path& parent) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(parent, ec))
    if (!e.is_directory() || !std::filesystem::is_empty(e.path())) out.push_back(e.path().string());
  return out;
}

TEST(Workspace, NothingIsLeftWhenItsTrainerIsKilledMidEpisode) {
  const host_check host;
  const host_directory repo("cascade_rl_repo");
  make_task(repo);
  const v::sandbox box = workspace_sandbox(host);
  const pid_t trainer = ::fork();
  if (trainer == 0) {
    v::workspace ws(box, repo.path(), task_options());
    (void)ws.run({.argv = {"sh", "-c", "echo partial > notes.txt; sleep 30 # " + host.token()}});
    ::_exit(3);  // never reached: killed first
  }
  ASSERT_GT(trainer, 0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (host_processes_with(host.token()) == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_GT(host_processes_with(host.token()), 0) << "the tool's run never started";
  ::kill(trainer, SIGKILL);
  int status = 0;
  ASSERT_EQ(::waitpid(trainer, &status, 0), trainer);
  EXPECT_TRUE(WIFSIGNALED(status));
  // The run's processes die with their init, which dies with its trainer; the tmpfs
  // and its files go with the last descriptor.
  const auto gone_by = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (host_processes_with(host.token()) > 0 && std::chrono::steady_clock::now() < gone_by)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(host_processes_with(host.token()), 0);
  EXPECT_EQ(joined(non_empty_entries(host.scratch_parent())), "");
  // Its run's cgroups stay, empty, until a sandbox removes those of dead makers (after a
  // minute; here at once).
  const v::isolation_support& s = box.isolation();
  const v::detail::cgroup_setup setup{s.cgroup_version, s.memory_cgroup, s.cpu_cgroup, s.pids_cgroup, false};
  // (A cgroup is removable once the kernel has released its last exiting process,
  // which may come a little after the processes are gone from /proc.)
  const std::string dead = "cascade_rl_verify_" + std::to_string(trainer) + "_";
  const auto left = [&] {
    std::vector<std::string> out;
    for (const std::filesystem::path& place : {s.memory_cgroup, s.cpu_cgroup, s.pids_cgroup}) {
      std::error_code ec;
      for (const auto& e : std::filesystem::directory_iterator(place, ec))
        if (e.path().filename().string().rfind(dead, 0) == 0) out.push_back(e.path().string());
    }
    return out;
  };
  const auto removed_by = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  do {
    v::detail::remove_stale_cgroups(setup, std::chrono::seconds(0));
    if (left().empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  } while (std::chrono::steady_clock::now() < removed_by);
  EXPECT_EQ(joined(left()), "");
}

}  // namespace
