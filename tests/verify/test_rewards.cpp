// The rewards on real programs: python3 and g++ solutions against unit tests, patches
// against a small repository's tests, both scored through the engine's score_rewards.

#include <cascade_rl/cascade/rewards.hpp>

#include "verify/support.hpp"

namespace {
using namespace verify_test;

const std::vector<v::test_case> sum_tests = {{"1 2\n", "3\n"}, {"10 -4\n", "6\n"}, {"0 0\n", "0\n"}};

TEST(UnitTestReward, PassesACorrectPythonProgramAndFailsWrongOnes) {
  if (!python_available()) GTEST_SKIP() << "no python3";
  const v::unit_test_reward reward(test_sandbox(cpu_bound_limits()));
  const auto right = reward.evaluate("a, b = map(int, input().split())\nprint(a + b)\n", sum_tests);
  EXPECT_EQ(right.reward, 1.0);
  EXPECT_EQ(right.passed_count, 3u);
  const auto wrong = reward.evaluate("a, b = map(int, input().split())\nprint(a * b if a else 0)\n", sum_tests);
  EXPECT_EQ(wrong.reward, 0.0);
  EXPECT_EQ(wrong.runs.size(), 1u);  // stopped at the first failure
  const auto crash = reward.evaluate("raise SystemExit(1)", sum_tests);
  EXPECT_EQ(crash.reward, 0.0);
  const auto loop = reward.evaluate("while True: pass", sum_tests);
  EXPECT_EQ(loop.reward, 0.0);
  EXPECT_EQ(loop.runs[0].reason, v::termination::cpu_time_limit);
}

TEST(UnitTestReward, ScoresTheFractionPassed) {
  if (!python_available()) GTEST_SKIP() << "no python3";
  const v::unit_test_reward reward(test_sandbox(), {.scoring = v::test_scoring::fraction_passed});
  const auto r = reward.evaluate("a, b = map(int, input().split())\nprint(a * b if a else 0)\n", sum_tests);
  EXPECT_NEAR(r.reward, 1.0 / 3.0, 1e-12);  // only 0 0 passes
  EXPECT_EQ(r.runs.size(), 3u);
}

TEST(UnitTestReward, CompilesCppOnceAndRunsEveryTest) {
  if (::access("/usr/bin/g++", X_OK) != 0) GTEST_SKIP() << "no g++";
  auto limits = short_limits();
  limits.wall_time = 20s;
  limits.cpu_time = 20s;
  limits.address_space_bytes = 2ull << 30;
  limits.file_size_bytes = 64 << 20;
  limits.max_processes = 16;
  const v::unit_test_reward reward(test_sandbox(), {.lang = v::language::cpp(), .compile_limits = limits});
  const auto right =
      reward.evaluate("#include <iostream>\nint main() { long a, b; std::cin >> a >> b; std::cout << a + b << '\\n'; }\n", sum_tests);
  ASSERT_TRUE(right.compile && right.compile->succeeded()) << right.compile->stderr_text;
  std::printf("g++ in the sandbox: %.2f s, peak %.0f MiB\n", right.compile->wall_seconds,
              static_cast<double>(right.compile->peak_memory_bytes) / (1 << 20));
  EXPECT_EQ(right.reward, 1.0);
  const auto broken = reward.evaluate("int main() { return undefined_name; }\n", sum_tests);
  EXPECT_FALSE(broken.compile->succeeded());
  EXPECT_TRUE(broken.runs.empty());
  EXPECT_EQ(broken.reward, 0.0);
}

TEST(UnitTestReward, IsAnEngineRewardReadingTestsFromThePrompt) {
  if (!python_available()) GTEST_SKIP() << "no python3";
  static_assert(cascade_rl::Reward<v::unit_test_reward>);
  const v::unit_test_reward reward(test_sandbox());
  cascade_rl::rollout_batch batch;
  batch.add_prompt({.id = 7, .domain = "code", .text = "add two numbers",
                    .reference = R"([{"input": "1 2\n", "output": "3\n"}, {"input": "5 5\n", "output": "10\n"}])"});
  const std::vector<std::string> texts = {
      "```python\na, b = map(int, input().split())\nprint(a + b)\n```", "print(3)",
      "Sure!\n```python\nimport os\nos.system('rm -rf /')\n```", "no code at all"};
  for (const auto& t : texts) batch.add_response(std::vector<std::int32_t>{1}, std::vector<float>{0.f},
                                                cascade_rl::finish_reason::stopped, t);
  const auto scored = cascade_rl::score_rewards(reward, batch, 2);
  EXPECT_EQ(scored.rewards, (std::vector<float>{1.f, 0.f, 0.f, 0.f}));

  cascade_rl::rollout_batch bad;
  bad.add_prompt({.id = 9, .reference = "not json"});
  bad.add_response(std::vector<std::int32_t>{1}, std::vector<float>{0.f}, cascade_rl::finish_reason::stopped, "x");
  try {
    (void)cascade_rl::score_rewards(reward, bad, 1);
    FAIL() << "no error";
  } catch (const cascade_rl::error& e) {
    EXPECT_NE(std::string(e.what()).find("prompt.reference"), std::string::npos) << e.what();
  }
}

// A two-file repository whose test fails until add() is fixed.
struct swe_repo {
  v::scratch_directory dir{std::filesystem::temp_directory_path()};
  swe_repo() {
    dir.write({.path = "calc.py", .contents = "def add(a, b):\n    return a - b\n"});
    dir.write({.path = "test_calc.py", .contents = "import calc\nassert calc.add(2, 3) == 5, 'add is wrong'\nprint('ok')\n"});
  }
  [[nodiscard]] v::swe_task task() const { return {.repository = dir.path(), .test_command = {"python3", "test_calc.py"}}; }
};

TEST(PatchTestReward, ScoresEachOutcomeWithItsOwnReward) {
  if (!python_available()) GTEST_SKIP() << "no python3";
  const swe_repo repo;
  const v::patch_test_reward reward(test_sandbox(), [&](const cascade_rl::prompt&) { return repo.task(); });
  const std::string fix = "--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a - b\n+    return a + b\n";
  const std::string wrong = "--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a - b\n+    return a * b\n";
  const std::string stale = "--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n def add(x, y):\n-    return x - y\n+    return x + y\n";
  const auto resolved = reward.evaluate(fix, repo.task());
  EXPECT_EQ(resolved.outcome, v::patch_outcome::resolved) << resolved.detail;
  EXPECT_EQ(resolved.reward, 1.0);
  const auto failed = reward.evaluate(wrong, repo.task());
  EXPECT_EQ(failed.outcome, v::patch_outcome::tests_failed);
  EXPECT_NE(failed.tests->stderr_text.find("add is wrong"), std::string::npos);
  EXPECT_EQ(failed.reward, 0.0);
  EXPECT_EQ(reward.evaluate(stale, repo.task()).outcome, v::patch_outcome::does_not_apply);
  const auto prose = reward.evaluate("I would change the minus to a plus.", repo.task());
  EXPECT_EQ(prose.outcome, v::patch_outcome::unparsable);
  EXPECT_EQ(prose.reward, -1.0);
  // The original repository is untouched.
  EXPECT_EQ(repo.dir.read("calc.py"), "def add(a, b):\n    return a - b\n");

  cascade_rl::rollout_batch batch;
  batch.add_prompt({.id = 1, .domain = "swe"});
  for (const std::string& t : {"```diff\n" + fix + "```", wrong, std::string("no patch")})
    batch.add_response(std::vector<std::int32_t>{1}, std::vector<float>{0.f}, cascade_rl::finish_reason::stopped, t);
  EXPECT_EQ(cascade_rl::score_rewards(reward, batch, 3).rewards, (std::vector<float>{1.f, 0.f, -1.f}));
}

TEST(PatchTestReward, APatchedTestThatAttacksTheHostIsStillSandboxed) {
  if (!python_available()) GTEST_SKIP() << "no python3";
  if (!v::probe_isolation().read_only_root) GTEST_SKIP() << "no read-only root";
  const swe_repo repo;
  const std::string token = unique_token();
  const v::patch_test_reward reward(test_sandbox(), [&](const cascade_rl::prompt&) { return repo.task(); });
  const std::string attack = "--- a/test_calc.py\n+++ b/test_calc.py\n@@ -1,3 +1,2 @@\n-import calc\n-assert calc.add(2, 3) == 5, 'add is wrong'\n+open('" +
                             repo.dir.path().string() + "/" + token + "', 'w').write('x')\n print('ok')\n";
  const auto r = reward.evaluate(attack, repo.task());
  EXPECT_EQ(r.outcome, v::patch_outcome::tests_failed);  // the write into the original repo failed
  EXPECT_FALSE(std::filesystem::exists(repo.dir.path() / token));
}

}  // namespace
