// A stage evaluated with a reward of its own (cr::with_eval_reward): evaluation scores
// come from the evaluation reward, training is the wrapped stage's bit for bit, and
// everything else (checkpoint state, MOPD's teachers, data-parallel support) passes
// through. And the progress line of a stage without a reward (pure MOPD) prints its own
// quantities instead of "reward 0.000".

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cascade_rl/cascade.hpp"
#include "support/test_cascade.hpp"
#include "support/test_policy.hpp"

namespace {

namespace cr = cascade_rl;
using cr::testing::domain_prompts;
using cr::testing::exact_answer_reward;
using cr::testing::tabular_policy;
using cr::testing::test_grpo_config;
using cr::testing::test_mopd_config;

// Scores every response a quarter, whatever it says.
struct quarter_reward {
  float operator()(const cr::response_view&) const { return 0.25f; }
};

// Counts its calls (evaluation must not use the training reward).
struct counting_reward {
  std::shared_ptr<std::atomic<int>> calls = std::make_shared<std::atomic<int>>(0);
  float operator()(const cr::response_view& r) const {
    ++*calls;
    return exact_answer_reward{}(r);
  }
};

cr::stage_config stage_a(std::size_t steps = 6) {
  return test_grpo_config("stage_a", "a", steps, 0.05, 8, 4, domain_prompts("a", 0, 4));
}

TEST(EvalReward, EvaluationScoresComeFromTheEvaluationReward) {
  const counting_reward training;
  auto cascade = cr::make_cascade(cr::with_eval_reward(
      cr::make_grpo_stage(stage_a(), cr::prompt_pool(domain_prompts("a", 0, 4)), training), quarter_reward{}));
  tabular_policy policy;
  const auto report = cr::run_cascade(cascade, policy, {.seed = 3});
  EXPECT_DOUBLE_EQ(report.forgetting.score(0, "a"), 0.25);  // before
  EXPECT_DOUBLE_EQ(report.forgetting.score(1, "a"), 0.25);  // after
  // Training scored 6 steps x 4 prompts x 8 responses, evaluation nothing.
  EXPECT_EQ(training.calls->load(), 6 * 4 * 8);
}

TEST(EvalReward, TrainingIsTheWrappedStagesBitForBit) {
  auto plain = cr::make_cascade(
      cr::make_grpo_stage(stage_a(), cr::prompt_pool(domain_prompts("a", 0, 4)), exact_answer_reward{}));
  auto wrapped = cr::make_cascade(cr::with_eval_reward(
      cr::make_grpo_stage(stage_a(), cr::prompt_pool(domain_prompts("a", 0, 4)), exact_answer_reward{}),
      quarter_reward{}));
  tabular_policy p1, p2;
  const auto r1 = cr::run_cascade(plain, p1, {.seed = 9});
  const auto r2 = cr::run_cascade(wrapped, p2, {.seed = 9});
  EXPECT_EQ(p1.snapshot(), p2.snapshot());
  EXPECT_EQ(r1.global_step, r2.global_step);
  EXPECT_GT(r1.forgetting.score(1, "a"), r1.forgetting.score(0, "a"));  // the plain stage learned
  EXPECT_DOUBLE_EQ(r2.forgetting.score(1, "a"), 0.25);
}

TEST(EvalReward, StatePassesThroughAndTheStageStaysDataParallel) {
  auto stage = cr::with_eval_reward(
      cr::make_grpo_stage(stage_a(), cr::prompt_pool(domain_prompts("a", 0, 4)), exact_answer_reward{}),
      quarter_reward{});
  static_assert(cr::data_parallel_stage<decltype(stage)>);
  static_assert(cr::Stage<decltype(stage), tabular_policy>);
  EXPECT_EQ(stage.state(), stage.stage().state());
  EXPECT_EQ(stage.config().name, "stage_a");
  stage.config().steps = 3;  // the config is the wrapped stage's
  EXPECT_EQ(stage.stage().config().steps, 3u);
  EXPECT_NO_THROW(stage.validate());
  stage.config().steps = 0;
  EXPECT_THROW(stage.validate(), cr::error);
}

TEST(EvalReward, AWrappedMopdStageStillNamesItsTeachers) {
  auto mopd = cr::with_eval_reward(cr::make_mopd_stage(test_mopd_config(4), cr::prompt_pool(domain_prompts("a", 0, 4))),
                                   quarter_reward{});
  static_assert(cr::needs_teachers<decltype(mopd)>);
  EXPECT_EQ(mopd.required_teachers(), std::vector<std::string>{"a"});
  auto a = cr::with_eval_reward(
      cr::make_grpo_stage(stage_a(), cr::prompt_pool(domain_prompts("a", 0, 4)), exact_answer_reward{}),
      exact_answer_reward{});
  auto cascade = cr::make_cascade(std::move(a), std::move(mopd));
  tabular_policy policy;
  const auto report = cr::run_cascade(cascade, policy, {.seed = 5});
  EXPECT_TRUE(report.finished);
  EXPECT_EQ(report.global_step, 10u);
}

TEST(ConsoleProgress, AStageWithoutARewardPrintsItsKlAndBandMask) {
  auto cascade = cr::testing::make_test_cascade(2, 2, 3);
  tabular_policy policy;
  std::ostringstream console, lines;
  cr::run_cascade(cascade, policy, {.seed = 3}, cr::console_progress(console), cr::jsonl_metrics(lines));
  std::istringstream in(console.str());
  std::string line;
  std::size_t mopd = 0, grpo = 0;
  while (std::getline(in, line)) {
    if (line.starts_with("[mopd ")) {
      ++mopd;
      EXPECT_EQ(line.find("reward"), std::string::npos) << line;
      EXPECT_EQ(line.find("acc "), std::string::npos) << line;
      EXPECT_NE(line.find("  kl "), std::string::npos) << line;
      EXPECT_NE(line.find("band-masked "), std::string::npos) << line;
    } else if (line.starts_with("[stage_")) {
      ++grpo;
      EXPECT_NE(line.find("  reward "), std::string::npos) << line;
      EXPECT_EQ(line.find("  kl "), std::string::npos) << line;
    }
  }
  EXPECT_EQ(mopd, 3u);
  EXPECT_EQ(grpo, 4u);
  // The metrics lines say which steps had a reward.
  std::istringstream json_lines(lines.str());
  std::size_t unrewarded = 0;
  while (std::getline(json_lines, line)) {
    const auto j = nlohmann::json::parse(line);
    if (j.at("event") != "step") continue;
    EXPECT_EQ(j.at("rewarded").get<bool>(), j.at("stage") != "mopd");
    unrewarded += !j.at("rewarded").get<bool>();
  }
  EXPECT_EQ(unrewarded, 3u);
}

TEST(ConsoleProgress, ALongStageNameIsNotCut) {
  std::ostringstream console;
  cr::step_metrics m;
  m.stage = std::string(400, 's');
  m.step = 1;
  m.steps = 2;
  cr::console_progress(console).on_step(m);
  EXPECT_NE(console.str().find(m.stage + " 1/2"), std::string::npos);
  EXPECT_NE(console.str().find("time gen"), std::string::npos);
}

}  // namespace
