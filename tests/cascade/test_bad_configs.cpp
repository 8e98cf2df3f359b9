// Bad configurations are refused before anything happens: a clear cascade_rl::error,
// the policy untouched (no generation, no update), no checkpoint written.

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "cascade_rl/cascade.hpp"
#include "support/expect_error.hpp"
#include "support/test_cascade.hpp"
#include "support/test_policy.hpp"

namespace {

namespace cr = cascade_rl;
namespace fs = std::filesystem;
using cr::testing::domain_prompts;
using cr::testing::exact_answer_reward;
using cr::testing::tabular_policy;
using cr::testing::test_grpo_config;

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("cascade_rl_bad_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir;
}

// Runs the cascade with checkpoints on; checks the refusal and that nothing changed.
template <class Cascade, class... Needles>
void expect_refused(Cascade& cascade, const std::string& needle, const Needles&... more) {
  tabular_policy policy;
  const auto before = policy.snapshot();
  const fs::path dir = scratch(needle.substr(0, 8) == "stage '" ? "stage" : "other");
  auto runner = cr::make_runner(cascade, policy, {.checkpoint_dir = dir});
  cr::testing::expect_error_naming([&] { runner.run(); }, needle, more...);
  EXPECT_TRUE(policy.generate_calls.empty());
  EXPECT_TRUE(policy.update_calls.empty());
  EXPECT_TRUE(policy.snapshot() == before);
  EXPECT_FALSE(fs::exists(dir));
  EXPECT_EQ(runner.forgetting().rows(), 0u);
}

auto grpo(cr::stage_config config) {
  return cr::make_grpo_stage(std::move(config), cr::prompt_pool(domain_prompts("a", 0, 4)),
                             exact_answer_reward{});
}

cr::stage_config good(std::string name = "s") {
  return test_grpo_config(std::move(name), "a", 3, 0.05, 4, 2, domain_prompts("a", 0, 4));
}

TEST(BadConfig, ZeroSteps) {
  auto config = good();
  config.steps = 0;
  auto cascade = cr::make_cascade(grpo(config));
  expect_refused(cascade, "stage 's'.steps", "is 0");
}

TEST(BadConfig, GroupSizeOneUnderGrpo) {
  auto config = good();
  config.group_size = 1;
  auto cascade = cr::make_cascade(grpo(config));
  expect_refused(cascade, "stage 's'.group_size", "is 1", "GRPO");
}

TEST(BadConfig, MopdDomainWithoutTeacher) {
  // The MOPD stage distils "c", which nobody assigned and no evaluation set measures.
  auto config = cr::testing::test_mopd_config(5);
  config.domains = {"a", "c"};
  auto cascade = cr::make_cascade(grpo(good()), cr::make_mopd_stage(config, cr::prompt_pool(domain_prompts("a", 0, 4))));
  expect_refused(cascade, "stage 'mopd'.domains", "domain 'c'", "without a teacher");
}

TEST(BadConfig, MopdPromptOutsideTheStageDomains) {
  auto prompts = domain_prompts("a", 0, 4);
  prompts[2].domain = "z";
  auto cascade = cr::make_cascade(
      grpo(good()), cr::make_mopd_stage(cr::testing::test_mopd_config(5), cr::prompt_pool(prompts)));
  expect_refused(cascade, "stage 'mopd' prompts[2]", "domain 'z'");
}

TEST(BadConfig, MopdOutcomeMixWithoutReward) {
  auto config = cr::testing::test_mopd_config(5);
  config.mopd.outcome_weight = 0.5;
  auto cascade = cr::make_cascade(grpo(good()), cr::make_mopd_stage(config, cr::prompt_pool(domain_prompts("a", 0, 4))));
  expect_refused(cascade, "stage 'mopd'.mopd.outcome_weight", "no reward");
}

// Epochs and mini-batches exist only under the PPO-clip rule, so several epochs under
// the on-policy rule cannot be written; PPO's own counts are checked.
template <class Rule>
concept has_epochs = requires(Rule r) { r.epochs; };
static_assert(has_epochs<cr::ppo_clip_update> && !has_epochs<cr::on_policy_update>);

TEST(BadConfig, PpoEpochsAndMiniBatches) {
  auto config = good();
  config.update.rule = cr::ppo_clip_update{.epochs = 0};
  auto c1 = cr::make_cascade(grpo(config));
  expect_refused(c1, "stage 's'.update.rule.ppo_clip.epochs", "is 0");
  config.update.rule = cr::ppo_clip_update{.mini_batches = config.prompts_per_step + 1};
  auto c2 = cr::make_cascade(grpo(config));
  expect_refused(c2, "stage 's'.update.rule.ppo_clip.mini_batches", "more than prompts_per_step");
}

TEST(BadConfig, PpoClipOptionsOfTheOnPolicyRule) {
  const cr::update_options on_policy{};
  cr::testing::expect_error_naming([&] { (void)on_policy.ppo_clip(); }, "update.rule",
                                   "ppo_clip_update");
  const cr::update_options ppo{.aggregation = cr::loss_aggregation::token_sum,
                               .rule = cr::ppo_clip_update{.loss = {.clip_high = 0.28}}};
  EXPECT_EQ(ppo.ppo_clip().aggregation, cr::loss_aggregation::token_sum);
  EXPECT_EQ(ppo.ppo_clip().clip_high, 0.28);
}

TEST(BadConfig, MopdUnderThePpoRule) {
  auto config = cr::testing::test_mopd_config(5);
  config.update.rule = cr::ppo_clip_update{};
  auto cascade = cr::make_cascade(
      grpo(good()), cr::make_mopd_stage(config, cr::prompt_pool(domain_prompts("a", 0, 4))));
  expect_refused(cascade, "stage 'mopd'.update.rule", "on_policy");
}

TEST(BadConfig, StopCriterionWithoutEvaluation) {
  auto config = good();
  config.stop.target_score = 0.5;
  auto cascade = cr::make_cascade(grpo(config));
  expect_refused(cascade, "stage 's'.stop", "eval_every");
}

TEST(BadConfig, DuplicateStageNamesAndEvaluationDomains) {
  auto twice = cr::make_cascade(grpo(good("s")), grpo(good("s")));
  expect_refused(twice, "stage 's'.name", "two stages");
  auto same_domain = cr::make_cascade(grpo(good("s")), grpo(good("t")));
  expect_refused(same_domain, "stage 't'.evals[0].domain", "domain 'a'");
}

TEST(BadConfig, BadSamplingAndLearningRate) {
  auto config = good();
  config.sampling.top_p = 0;
  auto c1 = cr::make_cascade(grpo(config));
  expect_refused(c1, "stage 's'.sampling.top_p");
  config = good();
  config.lr = cr::linear_warmup_lr(1e-7, 1e-6, 0);
  auto c2 = cr::make_cascade(grpo(config));
  expect_refused(c2, "stage 's'.lr.warmup_steps");
  config = good();
  config.lr = cr::constant_lr(-1);
  auto c3 = cr::make_cascade(grpo(config));
  expect_refused(c3, "stage 's'.lr.peak");
}

TEST(BadConfig, OverlongFilterWithoutLimit) {
  auto config = good();
  config.filters.overlong = cr::overlong_options{.mode = cr::overlong_mode::drop, .max_length = 0};
  auto cascade = cr::make_cascade(grpo(config));
  expect_refused(cascade, "stage 's'.filters.overlong.max_length");
}

TEST(BadConfig, BadOptionsOfTheUpdateRuleInUse) {
  // Checked with the config, not first at the loss after a whole generation.
  auto config = good();
  config.update = {.rule = cr::ppo_clip_update{.epochs = 2, .loss = {.clip_low = 1.0}}};
  auto c1 = cr::make_cascade(grpo(config));
  expect_refused(c1, "stage 's'.update.rule.ppo_clip.clip_low", "clip_low < 1");
  config = good();
  config.update.rule =
      cr::on_policy_update{.importance = {.mode = cr::importance_sampling::truncated, .cap = 0.0}};
  auto c2 = cr::make_cascade(grpo(config));
  expect_refused(c2, "stage 's'.update.rule.on_policy.importance.cap", "cap > 0");
  config = good();
  config.update.rule = cr::ppo_clip_update{
      .loss = {.importance = {.mode = cr::importance_sampling::band_mask, .band_low = -1}}};
  auto c3 = cr::make_cascade(grpo(config));
  expect_refused(c3, "stage 's'.update.rule.ppo_clip.importance.band_low", ">= 0");
  config = good();
  config.update.rule = cr::dro_update{.loss = {.beta = -2}};
  auto c4 = cr::make_cascade(grpo(config));
  expect_refused(c4, "stage 's'.update.rule.dro.beta", "> 0");
}

// A rule holds its loss's whole options, aggregation included, but a stage has one
// aggregation for every rule (update.aggregation): a loss aggregation set to anything
// else is refused rather than silently replaced; left at its default it takes the
// stage's.
TEST(BadConfig, LossAggregationOfTheRuleOtherThanTheStages) {
  auto config = good();
  config.update = {.aggregation = cr::loss_aggregation::token_mean,
                   .rule = cr::cispo_update{
                       .loss = {.aggregation = cr::loss_aggregation::seq_mean_token_mean}}};
  auto c1 = cr::make_cascade(grpo(config));
  expect_refused(c1, "stage 's'.update.rule.cispo.loss.aggregation",
                 "update.aggregation (token-mean)");
  config.update.aggregation = cr::loss_aggregation::seq_mean_token_mean;
  EXPECT_NO_THROW(cr::detail::validate_grpo_config(config));
  config.update.rule = cr::cispo_update{};
  EXPECT_NO_THROW(cr::detail::validate_grpo_config(config));
  EXPECT_EQ(std::get<cr::cispo_update>(config.update.rule)
                .loss_options(config.update.aggregation)
                .aggregation,
            cr::loss_aggregation::seq_mean_token_mean);
}

TEST(BadConfig, PolicyReturningAMalformedBatchIsNamed) {
  // A policy that drops one response of the last group.
  struct short_policy : tabular_policy {
    cr::rollout_batch generate(std::span<const cr::prompt> prompts, const cr::generation_request& r) {
      auto b = tabular_policy::generate(prompts, r);
      b.group_offsets.back() -= 1;
      return b;
    }
  };
  static_assert(cr::Policy<short_policy>);
  auto cascade = cr::make_cascade(grpo(good()));
  short_policy policy;
  cr::testing::expect_error_naming([&] { cr::run_cascade(cascade, policy, {}); }, "policy.generate");
}

TEST(BadConfig, NonFiniteRewardIsNamed) {
  auto stage = cr::make_grpo_stage(good(), cr::prompt_pool(domain_prompts("a", 0, 4)),
                                   [](const cr::response_view& r) { return r.index == 5 ? std::nan("") : 1.0; });
  auto cascade = cr::make_cascade(std::move(stage));
  tabular_policy policy;
  cr::testing::expect_error_naming([&] { cr::run_cascade(cascade, policy, {}); }, "reward[5]", "NaN", "domain 'a'");
}

}  // namespace
