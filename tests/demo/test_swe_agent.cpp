// The demo's SWE agent (swe_agent.hpp): its tools answer as documented, the warm start's
// script is exactly what the tools answer, the sandboxed workspace grades as the
// interpreter does, the Eigen policy takes part in episodes with a sampler/trainer drift
// of exactly 0, and the warm start trains on the actions only.

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include <cascade_rl/cascade/episode_driver.hpp>
#include <cascade_rl/cascade/log_prob_drift.hpp>

#include "demo_test_support.hpp"
#include "eigen_policy.hpp"
#include "sft.hpp"
#include "swe_agent.hpp"

namespace {

namespace cr = cascade_rl;

std::shared_ptr<const demo::swe_agent_host> in_memory() {
  return std::make_shared<const demo::swe_agent_host>(demo_test::interpreter());
}

// f(x) = (2x + 3) - 2 = 2x + 1; the file computes 2x - 3 - 2 (line 2 is wrong).
cr::prompt small_task() { return {7, "swe", "swe x * 2 + 3 then * 1 - 2", "dbl\nsub 3\nsub 2\n"}; }

TEST(DemoSweAgent, ToolsAnswerAsDocumented) {
  demo::swe_agent agent(in_memory());
  EXPECT_EQ(agent.reset(small_task()), "");
  EXPECT_EQ(agent.step("show").observation, "| dbl sub 3 sub 2");
  EXPECT_EQ(agent.step("test").observation, "fail");  // x = 0, 1, 2 give -5, -3, -1, not 1, 3, 5
  EXPECT_EQ(agent.step("@ 2 - add 3 + add 3").observation, "no");  // the hunk's context does not match
  EXPECT_EQ(agent.step("@ 4 - sub 2 + add 3").observation, "no");  // no line 4
  EXPECT_EQ(agent.step("2 - sub 3 + add 3").observation, "no");    // not a hunk
  EXPECT_EQ(agent.step("hello").observation, "no");
  EXPECT_EQ(agent.step("show").observation, "| dbl sub 3 sub 2");  // nothing changed
  EXPECT_EQ(agent.step("@ 3 - sub 2 + add 4").observation, "ok");  // another right fix: 2x - 3 + 4
  EXPECT_EQ(agent.step("show").observation, "| dbl sub 3 add 4");
  EXPECT_EQ(agent.step("test").observation, "pass");
  const cr::environment_step end = agent.step("submit");
  EXPECT_TRUE(end.done);
  EXPECT_EQ(agent.outcome(), 1.0);

  demo::swe_agent partial(in_memory());
  (void)partial.reset(small_task());
  EXPECT_EQ(partial.step("@ 1 - dbl + add 6").observation, "ok");  // x + 1: right at x = 0 only
  EXPECT_EQ(partial.step("test").observation, "fail");
  EXPECT_DOUBLE_EQ(partial.outcome(), 0.2);

  demo::swe_agent broken(in_memory());
  (void)broken.reset(small_task());
  EXPECT_EQ(broken.step("@ 2 - sub 3 + add").observation, "ok");  // applies; the program does not parse
  EXPECT_EQ(broken.step("test").observation, "fail");
  EXPECT_EQ(broken.outcome(), 0.0);

  demo::swe_agent untouched(in_memory());
  (void)untouched.reset(small_task());
  EXPECT_EQ(untouched.outcome(), 0.0);  // 2x - 5 is wrong on every input
  EXPECT_THROW((void)demo::swe_agent(in_memory()).reset({1, "swe", "swe x * 2 +", ""}), cr::error);  // no spec
}

// The actions (mask 1, each ending with <eos>) and observations (mask 0) of a
// demonstration, in order.
std::vector<std::pair<std::vector<std::int32_t>, bool>> runs_of(const demo::task& t) {
  std::vector<std::pair<std::vector<std::int32_t>, bool>> runs;
  for (std::size_t i = 0; i < t.demonstration.size(); ++i) {
    const bool action = t.demonstration_mask[i] != 0;
    if (runs.empty() || runs.back().second != action || (action && runs.back().first.back() == demo::eos))
      runs.emplace_back(std::vector<std::int32_t>{}, action);
    runs.back().first.push_back(t.demonstration[i]);
  }
  return runs;
}

TEST(DemoSweAgent, TheWarmStartsScriptIsWhatTheToolsAnswer) {
  for (const demo::task& t : demo::make_tasks("swe", 200, 3)) {
    ASSERT_EQ(t.demonstration_mask.size(), t.demonstration.size());
    demo::swe_agent agent(in_memory());
    (void)agent.reset(t.prompt);
    const auto runs = runs_of(t);
    ASSERT_EQ(runs.size(), 7u) << t.prompt.text;  // show, file, hunk, ok, test, pass, submit
    for (std::size_t k = 0; k < runs.size(); k += 2) {
      ASSERT_TRUE(runs[k].second);
      ASSERT_EQ(runs[k].first.back(), demo::eos);
      const cr::environment_step step = agent.step(demo::decode(runs[k].first));
      if (k + 1 == runs.size()) {
        EXPECT_TRUE(step.done);
      } else {
        EXPECT_FALSE(step.done);
        EXPECT_EQ(demo::encode(step.observation), runs[k + 1].first) << t.prompt.text;
      }
    }
    EXPECT_EQ(agent.outcome(), 1.0) << t.prompt.text;
    // The file before the fix fails the hidden tests somewhere.
    demo::swe_agent idle(in_memory());
    (void)idle.reset(t.prompt);
    EXPECT_LT(idle.outcome(), 1.0) << t.prompt.text;
  }
}

TEST(DemoSweAgent, TheSandboxedWorkspaceGradesAsTheInterpreter) {
  const auto python = std::make_shared<const demo::program_verifier>(true);
  if (!python->sandboxed()) GTEST_SKIP() << "python3 does not run in the sandbox here: " << python->description();
  std::filesystem::path root;
  {
    const auto sandboxed = std::make_shared<const demo::swe_agent_host>(python);
    root = sandboxed->root();
    ASSERT_TRUE(std::filesystem::is_directory(root));
    std::mt19937_64 rng(5);
    const std::vector<std::string> edits = {"add 1", "sub 2", "dbl", "inc", "add", "rep 2 dbl end", "wnz inc end", ""};
    std::size_t differ = 0;
    for (const demo::task& t : demo::make_tasks("swe", 30, 8)) {
      const demo::swe_file file = demo::swe_file_of(t.prompt.reference);
      // The script's fix, then random one-line edits of random lines.
      std::vector<std::vector<std::string>> scripts = {{demo::decode(runs_of(t)[2].first)}};
      for (int s = 0; s < 3; ++s) {
        std::vector<std::string> actions;
        for (int e = 0; e < 2; ++e) {
          const std::size_t line = rng() % file.size();
          actions.push_back("@ " + std::to_string(line + 1) + " - " + file[line] + " + " + edits[rng() % edits.size()]);
        }
        scripts.push_back(actions);
      }
      for (const auto& actions : scripts) {
        demo::swe_agent a(sandboxed), b(in_memory());
        (void)a.reset(t.prompt);
        (void)b.reset(t.prompt);
        for (const std::string& action : actions) {
          EXPECT_EQ(a.step(action).observation, b.step(action).observation) << action;
          EXPECT_EQ(a.step("show").observation, b.step("show").observation);
          EXPECT_EQ(a.step("test").observation, b.step("test").observation);
        }
        const double graded = a.outcome(), interpreted = b.outcome();
        EXPECT_EQ(graded, interpreted) << t.prompt.text << " / " << actions.back();
        differ += graded != 1.0;
      }
    }
    EXPECT_GT(differ, 20u);                         // most random edits break the program
    EXPECT_EQ(sandboxed->sandbox_grades(), 120u);   // every episode graded in the sandbox
    EXPECT_GT(sandboxed->grade_seconds(), 0.0);
  }
  EXPECT_FALSE(std::filesystem::exists(root));  // the repositories go with the host
  // A killed trainer's repositories (its process gone) go with the next host.
  const pid_t child = ::fork();
  if (child == 0) {
    const demo::swe_agent_host orphaned(python);
    (void)orphaned.repository(small_task());
    ::_exit(std::filesystem::exists(orphaned.root() / "7" / "program.txt") ? 9 : 1);  // no destructor runs
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 9);
  const std::string left = "cascade_demo_swe." + std::to_string(child) + ".";
  const auto leftovers = [&] {
    std::size_t n = 0;
    for (const auto& e : std::filesystem::directory_iterator(std::filesystem::temp_directory_path()))
      n += e.path().filename().string().rfind(left, 0) == 0;
    return n;
  };
  // (The child found its repository; another test's host may already have removed it.)
  const demo::swe_agent_host next(python);
  EXPECT_EQ(leftovers(), 0u);
}

TEST(DemoSweAgent, TheEigenPolicysEpisodesHaveNoDriftAndKeepObservationsOutOfTheLoss) {
  const demo::lm_shape shape{.vocab = demo::vocabulary_size(), .d = 16, .heads = 2, .ffn = 16};
  demo::eigen_policy one(shape, 4, {}, 1), two(shape, 4, {}, 2);
  // A short warm start, so that some actions are tools and some episodes end.
  const auto tasks = demo::make_tasks("swe", 64, 2);
  std::mt19937_64 rng(1);
  for (int s = 0; s < 40; ++s) (void)demo::sft_step(one, tasks, 16, 1e-2, rng);
  two.restore(one.snapshot());
  const auto prompts = demo::prompts_of(demo::make_tasks("swe", 6, 9));
  const cr::episode_options options{.max_turns = 6, .context_budget = 12 + 33, .max_turn_tokens = 10,
                                    .observation_token_cap = 12, .observation_text_cap = 256, .workers = 2};
  const demo::swe_agent_factory factory{in_memory()};
  const cr::episode_batch a = cr::run_episodes(one, factory, prompts, 4, {.temperature = 1.0}, options, 3);
  const cr::episode_batch b = cr::run_episodes(two, factory, prompts, 4, {.temperature = 1.0}, options, 3);
  EXPECT_EQ(a.batch.tokens, b.batch.tokens);  // one thread or two
  EXPECT_EQ(a.rewards, b.rewards);
  std::size_t observed = 0, acted = 0;
  for (const std::uint8_t m : a.batch.loss_mask) (m ? acted : observed) += 1;
  EXPECT_GT(observed, 0u);
  EXPECT_GT(acted, 0u);
  // The trainer scores every token with the sampler's bits, observations included.
  std::vector<float> trainer(a.batch.token_count());
  one.log_probs(a.batch, trainer);
  for (std::size_t t = 0; t < trainer.size(); ++t) {
    if (a.batch.loss_mask[t]) {
      EXPECT_EQ(trainer[t], a.batch.behaviour_log_probs[t]) << t;
    }
  }
  EXPECT_EQ(cr::log_prob_drift(a.batch, std::span<const float>(trainer)), 0.0);
  // A gradient seeded on observation tokens only changes nothing (mask 0); on the
  // actions it does. (A fresh policy: no Adam momentum to move it on its own.)
  std::vector<float> on_observations(a.batch.token_count(), 0.0f), on_actions(a.batch.token_count(), 0.0f);
  for (std::size_t t = 0; t < on_observations.size(); ++t) (a.batch.loss_mask[t] ? on_actions : on_observations)[t] = 1.0f;
  demo::eigen_policy fresh(shape, 11);
  const auto before = fresh.weights().params;
  fresh.apply_gradient(a.batch, on_observations, 1e-2);
  EXPECT_EQ(fresh.weights().params, before);
  fresh.apply_gradient(a.batch, on_actions, 1e-2);
  EXPECT_NE(fresh.weights().params, before);
}

TEST(DemoSweAgent, TheWarmStartTrainsOnTheActionsOnly) {
  const auto swe = demo::make_tasks("swe", 2, 4), code = demo::make_tasks("code", 1, 4);
  const cr::rollout_batch batch = demo::demonstration_batch({&swe[0], &code[0], &swe[1]});
  ASSERT_EQ(batch.loss_mask.size(), batch.token_count());
  std::size_t actions = 0;
  for (const auto* t : {&swe[0], &swe[1]})
    for (const std::uint8_t m : t->demonstration_mask) actions += m;
  EXPECT_EQ(demo::trained_tokens(batch), actions + code[0].demonstration.size());
  // The code demonstration is all trained; the SWE observations (the file, ok, pass) not.
  const auto offset = static_cast<std::size_t>(batch.token_offsets[1]);
  for (std::size_t t = 0; t < code[0].demonstration.size(); ++t) EXPECT_EQ(batch.loss_mask[offset + t], 1u);
  const demo::task& s = swe[0];
  EXPECT_EQ(demo::decode(std::span(s.demonstration).first(2)), "show");
  EXPECT_EQ(s.demonstration_mask[0], 1u);
  EXPECT_EQ(s.demonstration_mask[1], 1u);  // <eos> ends the action
  EXPECT_EQ(s.demonstration_mask[2], 0u);  // "|" begins the file
  EXPECT_EQ(s.demonstration.back(), demo::eos);
  EXPECT_EQ(s.demonstration_mask.back(), 1u);
}

}  // namespace
