// The ready-made schedules: stage order, the published hyperparameters, the ordering
// check, and that a schedule's configs build runnable stages.

#include <gtest/gtest.h>

#include <string>
#include <variant>
#include <vector>

#include "cascade_rl/cascade.hpp"
#include "support/test_policy.hpp"

namespace {

namespace cr = cascade_rl;

std::vector<std::string> names(const std::vector<cr::stage_config>& configs) {
  std::vector<std::string> out;
  for (const auto& c : configs) out.push_back(c.name);
  return out;
}

TEST(Schedules, Cascade2OrderAndPublishedSettings) {
  const auto s = cr::nemotron_cascade2_schedule();
  EXPECT_EQ(names(s.configs()), (std::vector<std::string>{"if_rl", "multi_domain_rl", "mopd", "rlhf",
                                                          "long_context_rl", "code_rl", "swe_rl"}));
  // IF-RL: 128 prompts x 16 rollouts, lr 3e-6, about 180 steps, zero-variance filter,
  // strictly on-policy.
  EXPECT_EQ(s.if_rl.prompts_per_step, 128u);
  EXPECT_EQ(s.if_rl.group_size, 16u);
  EXPECT_EQ(s.if_rl.steps, 180u);
  EXPECT_EQ(s.if_rl.lr.at(0, 180), 3e-6);
  EXPECT_EQ(s.if_rl.lr.at(179, 180), 3e-6);
  EXPECT_TRUE(s.if_rl.filters.drop_zero_variance_groups);
  EXPECT_TRUE(std::holds_alternative<cr::on_policy_update>(s.if_rl.update.rule));
  // MOPD: 128 x 4, lr 2e-7 -> 2e-6 over 30 steps, about 50 steps, band [0.5, 2].
  EXPECT_EQ(s.mopd.kind, cr::stage_kind::mopd);
  EXPECT_EQ(s.mopd.prompts_per_step, 128u);
  EXPECT_EQ(s.mopd.group_size, 4u);
  EXPECT_EQ(s.mopd.steps, 50u);
  EXPECT_DOUBLE_EQ(s.mopd.lr.at(0, 50), 2e-7);
  EXPECT_DOUBLE_EQ(s.mopd.lr.at(30, 50), 2e-6);
  EXPECT_LT(s.mopd.lr.at(29, 50), 2e-6);
  EXPECT_EQ(s.mopd.mopd.band_low, 0.5);
  EXPECT_EQ(s.mopd.mopd.band_high, 2.0);
  EXPECT_EQ(s.mopd.mopd.outcome_weight, 0.0);
  EXPECT_TRUE(cr::check_ordering(s.configs()).empty());
}

TEST(Schedules, Cascade1OrderAndItsOrderingWarning) {
  const auto s = cr::nemotron_cascade1_schedule();
  EXPECT_EQ(names(s.configs()), (std::vector<std::string>{"rlhf", "if_rl", "math_rl", "code_rl", "swe_rl"}));
  const auto warnings = cr::check_ordering(s.configs());
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("'if_rl' (IF-RL) runs after stage 'rlhf' (RLHF)"), std::string::npos);
  EXPECT_NE(warnings[0].find("hurts human alignment"), std::string::npos);
}

TEST(Schedules, EditedConfigsBuildARunnableCascade) {
  auto s = cr::nemotron_cascade2_schedule();
  // Shrink IF-RL and MOPD to the test model.
  s.if_rl.prompts_per_step = 4;
  s.if_rl.group_size = 8;
  s.if_rl.steps = 10;
  s.if_rl.lr = cr::constant_lr(0.05);
  s.if_rl.sampling.max_response_length = 6;
  s.if_rl.evals = {{.domain = "instruction_following",
                    .prompts = cr::testing::domain_prompts("instruction_following", 0, 4)}};
  s.mopd.domains = {"instruction_following"};
  s.mopd.prompts_per_step = 4;
  s.mopd.steps = 5;
  s.mopd.lr = cr::linear_warmup_lr(0.005, 0.05, 3);
  s.mopd.sampling.max_response_length = 6;
  const auto prompts = cr::testing::domain_prompts("instruction_following", 0, 4);
  auto cascade = cr::make_cascade(
      cr::make_grpo_stage(s.if_rl, cr::prompt_pool(prompts), cr::testing::exact_answer_reward{}),
      cr::make_mopd_stage(s.mopd, cr::prompt_pool(prompts)));
  cr::testing::tabular_policy policy;
  const auto report = cr::run_cascade(cascade, policy, {.seed = 1});
  EXPECT_TRUE(report.finished);
  EXPECT_EQ(report.global_step, 15u);
}

}  // namespace
