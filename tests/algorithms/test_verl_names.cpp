// presets/verl_names.hpp: veRL's config names give the presets' options, and an unknown
// or not-yet-implemented name is refused with the valid ones listed. The reference tests
// (test_verl_reference_losses.cpp, test_verl_reference_advantages.cpp) build their
// options through these names, so the names are also checked against veRL's own values.

#include <gtest/gtest.h>

#include <variant>

#include "cascade_rl/presets/verl.hpp"
#include "support/expect_error.hpp"

namespace {

namespace verl = cascade_rl::presets::verl;
using cascade_rl::importance_sampling;
using cascade_rl::loss_aggregation;
using cascade_rl::testing::expect_error_naming;

TEST(VerlNames, LossAggModeNamesEveryModeAndListsThemWhenUnknown) {
  EXPECT_EQ(verl::loss_agg_mode("token-mean"), loss_aggregation::token_mean);
  EXPECT_EQ(verl::loss_agg_mode("token-sum"), loss_aggregation::token_sum);
  EXPECT_EQ(verl::loss_agg_mode("seq-mean-token-sum"), loss_aggregation::seq_mean_token_sum);
  EXPECT_EQ(verl::loss_agg_mode("seq-mean-token-mean"), loss_aggregation::seq_mean_token_mean);
  EXPECT_EQ(verl::loss_agg_mode("seq-mean-token-sum-norm"),
            loss_aggregation::seq_mean_token_sum_norm);
  expect_error_naming([] { (void)verl::loss_agg_mode("token_mean"); }, "loss_agg_mode",
                      "token_mean",
                      "token-mean, token-sum, seq-mean-token-sum, "
                      "seq-mean-token-mean, seq-mean-token-sum-norm");
}

TEST(VerlNames, VanillaIsPpoClipWithTheActorsFields) {
  const auto defaults = std::get<cascade_rl::ppo_clip_options>(verl::policy_loss("vanilla"));
  EXPECT_EQ(defaults.clip_low, 0.2);
  EXPECT_EQ(defaults.clip_high, 0.2);
  EXPECT_EQ(defaults.dual_clip, 3.0);
  EXPECT_EQ(defaults.log_ratio_clamp, 20.0);
  EXPECT_EQ(defaults.aggregation, loss_aggregation::token_mean);
  EXPECT_EQ(defaults.importance.mode, importance_sampling::none);

  // clip_ratio is the fallback of both bounds; clip_ratio_high alone overrides its side.
  const auto dapo = std::get<cascade_rl::ppo_clip_options>(
      verl::policy_loss("vanilla", {.loss_agg_mode = "seq-mean-token-sum",
                                    .clip_ratio = 0.25,
                                    .clip_ratio_high = 0.28,
                                    .clip_ratio_c = 10.0,
                                    .tis_imp_ratio_cap = 2.0}));
  EXPECT_EQ(dapo.clip_low, 0.25);
  EXPECT_EQ(dapo.clip_high, 0.28);
  EXPECT_EQ(dapo.dual_clip, 10.0);
  EXPECT_EQ(dapo.aggregation, loss_aggregation::seq_mean_token_sum);
  EXPECT_EQ(dapo.importance.mode, importance_sampling::truncated);
  EXPECT_EQ(dapo.importance.cap, 2.0);
  expect_error_naming([] { (void)verl::policy_loss("vanilla", {.loss_agg_mode = "mean"}); },
                      "loss_agg_mode", "mean");
}

TEST(VerlNames, UnknownAndNotYetImplementedLossesAreRefusedWithTheList) {
  expect_error_naming([] { (void)verl::policy_loss("ppo"); }, "loss_mode", "\"ppo\"",
                      "not a veRL name", "implemented: vanilla", "gspo");
  expect_error_naming([] { (void)verl::policy_loss("gspo"); }, "loss_mode",
                      "does not implement yet", "implemented: vanilla");
}

TEST(VerlNames, AdvantageEstimatorsByName) {
  const auto grpo = std::get<cascade_rl::grpo_options>(verl::adv_estimator("grpo"));
  EXPECT_TRUE(grpo.scale_by_std);
  EXPECT_EQ(grpo.epsilon, 1e-6);
  EXPECT_EQ(grpo.singleton, cascade_rl::singleton_rule::raw_score);
  EXPECT_EQ(grpo.accumulation, cascade_rl::mean_accumulation::float32_sequential);
  const auto dr_grpo = std::get<cascade_rl::grpo_options>(
      verl::adv_estimator("grpo", {.norm_adv_by_std_in_grpo = false}));
  EXPECT_FALSE(dr_grpo.scale_by_std);
  EXPECT_TRUE(std::holds_alternative<cascade_rl::rloo_options>(verl::adv_estimator("rloo")));
  const auto rpp = std::get<cascade_rl::reinforce_plus_plus_options>(
      verl::adv_estimator("reinforce_plus_plus", {.gamma = 0.99}));
  EXPECT_EQ(rpp.gamma, 0.99);
  EXPECT_EQ(rpp.whitening.epsilon, 1e-8);
  const auto baseline = std::get<cascade_rl::reinforce_plus_plus_baseline_options>(
      verl::adv_estimator("reinforce_plus_plus_baseline"));
  EXPECT_EQ(baseline.singleton, cascade_rl::singleton_rule::raw_score);
  const auto gae =
      std::get<cascade_rl::gae_options>(verl::adv_estimator("gae", {.gamma = 0.99, .lam = 0.95}));
  EXPECT_EQ(gae.gamma, 0.99);
  EXPECT_EQ(gae.lambda, 0.95);
  EXPECT_EQ(gae.whitening.accumulation, cascade_rl::mean_accumulation::float32_rounded_sum);
  const auto gae_defaults = std::get<cascade_rl::gae_options>(verl::adv_estimator("gae"));
  EXPECT_EQ(gae_defaults.gamma, 1.0);
  EXPECT_EQ(gae_defaults.lambda, 1.0);
  EXPECT_TRUE(std::holds_alternative<cascade_rl::remax_options>(verl::adv_estimator("remax")));
  EXPECT_EQ(std::get<cascade_rl::opo_options>(verl::adv_estimator("opo")).singleton,
            cascade_rl::singleton_rule::raw_score);
  const auto gpg = std::get<cascade_rl::gpg_options>(verl::adv_estimator("gpg"));
  EXPECT_EQ(gpg.f_norm, 1.0);
  const auto passk = std::get<cascade_rl::grpo_passk_options>(
      verl::adv_estimator("grpo_passk", {.norm_adv_by_std_in_grpo = false}));
  EXPECT_FALSE(passk.scale_by_std);
  // veRL's trainer never passes norm_adv_by_std_in_grpo to grpo_vectorized.
  EXPECT_TRUE(std::get<cascade_rl::grpo_options>(
                  verl::adv_estimator("grpo_vectorized", {.norm_adv_by_std_in_grpo = false}))
                  .scale_by_std);
  EXPECT_EQ(std::get<cascade_rl::rloo_options>(verl::adv_estimator("rloo_vectorized")).singleton,
            cascade_rl::singleton_rule::zero_advantage);
  EXPECT_EQ(passk.singleton, cascade_rl::singleton_rule::error);
  EXPECT_EQ(gpg.singleton, cascade_rl::singleton_rule::raw_score);
  EXPECT_FALSE(std::get<cascade_rl::gdpo_options>(
                   verl::adv_estimator("gdpo", {.norm_adv_by_std_in_grpo = false}))
                   .grpo.scale_by_std);
  expect_error_naming([] { (void)verl::adv_estimator("optimal_token_baseline"); }, "adv_estimator",
                      "does not implement yet",
                      "grpo, rloo, reinforce_plus_plus, reinforce_plus_plus_baseline, gae, remax, "
                      "opo, gpg, grpo_vectorized, rloo_vectorized, gdpo, grpo_passk");
  expect_error_naming([] { (void)verl::adv_estimator("GRPO"); }, "adv_estimator",
                      "not a veRL name");
}

}  // namespace
