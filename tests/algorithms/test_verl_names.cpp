// presets/verl_names.hpp: veRL's config names give the presets' options, and an unknown
// or not-yet-implemented name is refused with the valid ones listed. The reference tests
// (test_verl_reference_losses.cpp, test_verl_reference_advantages.cpp) build their
// options through these names, so the names are also checked against veRL's own values.

#include <gtest/gtest.h>

#include <string>
#include <variant>

#include "cascade_rl/presets/verl.hpp"
#include "support/expect_error.hpp"

namespace {
namespace verl_names_cases {  // this file's names, apart in the area's unity build

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

TEST(VerlNames, CispoTakesTheClipBoundsAndAggregation) {
  const auto defaults = std::get<cascade_rl::cispo_options>(verl::policy_loss("cispo"));
  EXPECT_EQ(defaults.clip_low, 0.2);
  EXPECT_EQ(defaults.clip_high, 0.2);
  EXPECT_EQ(defaults.log_ratio_clamp, 20.0);
  EXPECT_EQ(defaults.aggregation, loss_aggregation::token_mean);
  const auto wide = std::get<cascade_rl::cispo_options>(verl::policy_loss(
      "cispo",
      {.loss_agg_mode = "seq-mean-token-sum-norm", .clip_ratio = 0.3, .clip_ratio_low = 1.0}));
  EXPECT_EQ(wide.clip_low, 1.0);
  EXPECT_EQ(wide.clip_high, 0.3);
  EXPECT_EQ(wide.aggregation, loss_aggregation::seq_mean_token_sum_norm);
}

TEST(VerlNames, GpgIsReinforceWithTheLogProbSurrogate) {
  const auto gpg = std::get<cascade_rl::reinforce_options>(
      verl::policy_loss("gpg", {.loss_agg_mode = "seq-mean-token-mean"}));
  EXPECT_EQ(gpg.surrogate, cascade_rl::reinforce_surrogate::log_prob);
  EXPECT_EQ(gpg.aggregation, loss_aggregation::seq_mean_token_mean);
  EXPECT_EQ(gpg.importance.mode, importance_sampling::none);
}

TEST(VerlNames, DppoTakesDivergenceThresholdsAndTheTruncation) {
  const auto tv = std::get<cascade_rl::dppo_options>(
      verl::policy_loss("dppo_tv", {.clip_ratio = 0.03, .clip_ratio_c = 20.0}));
  EXPECT_EQ(tv.divergence, cascade_rl::dppo_divergence::total_variation);
  EXPECT_EQ(tv.clip_low, 0.03);
  EXPECT_EQ(tv.clip_high, 0.03);
  EXPECT_EQ(tv.truncation, 20.0);
  const auto kl = std::get<cascade_rl::dppo_options>(verl::policy_loss("dppo_kl"));
  EXPECT_EQ(kl.divergence, cascade_rl::dppo_divergence::binary_kl);
  EXPECT_EQ(kl.truncation, 3.0);  // the actor's clip_ratio_c
  EXPECT_EQ(kl.log_ratio_clamp, 20.0);
}

TEST(VerlNames, DroNeedsAPositiveBeta) {
  const auto dro = std::get<cascade_rl::dro_options>(
      verl::policy_loss("dro", {.loss_agg_mode = "token-sum", .dro_beta = 0.25}));
  EXPECT_EQ(dro.beta, 0.25);
  EXPECT_EQ(dro.aggregation, loss_aggregation::token_sum);
  expect_error_naming([] { (void)verl::policy_loss("dro"); }, "policy_loss.dro_beta", "not set");
  expect_error_naming([] { (void)verl::policy_loss("dro", {.dro_beta = 0.0}); },
                      "policy_loss.dro_beta", "expected > 0");
}

TEST(VerlNames, SapoAlwaysAggregatesSeqMeanTokenMean) {
  const auto sapo = std::get<cascade_rl::sapo_options>(
      verl::policy_loss("sapo", {.loss_agg_mode = "token-sum", .tau_pos = 2.0}));
  EXPECT_EQ(sapo.tau_pos, 2.0);
  EXPECT_EQ(sapo.tau_neg, 1.05);
  EXPECT_EQ(sapo.aggregation, loss_aggregation::seq_mean_token_mean);
  EXPECT_EQ(cascade_rl::sapo_options{}.aggregation, loss_aggregation::token_mean);
}

// Every loss veRL registers is implemented: an unknown name is refused with their list,
// and none is refused as "not implemented yet".
TEST(VerlNames, UnknownLossesAreRefusedWithTheList) {
  expect_error_naming(
      [] { (void)verl::policy_loss("ppo"); }, "loss_mode", "\"ppo\"", "not a veRL name",
      "implemented: vanilla, dppo_tv, dppo_kl, sapo, dro, cispo, gspo, geo_mean, gpg, clip_cov, "
      "kl_cov, bypass_mode");
  EXPECT_TRUE(cascade_rl::presets::verl::registry::policy_losses_not_yet.empty());
  const std::string message = cascade_rl::testing::error_message([] {
    (void)verl::policy_loss("ppo");
  });
  EXPECT_EQ(message.find("not implement"), std::string::npos) << message;
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
  const auto otb = std::get<cascade_rl::optimal_token_baseline_options>(
      verl::adv_estimator("optimal_token_baseline"));
  EXPECT_TRUE(otb.handle_zero_tail);  // veRL's default since 8acd940f1
  EXPECT_FALSE(otb.multi_turn);
  EXPECT_EQ(otb.epsilon, 1e-8);
  const auto tir = std::get<cascade_rl::optimal_token_baseline_options>(
      verl::adv_estimator("tir_optimal_token_baseline"));
  EXPECT_TRUE(tir.handle_zero_tail);
  EXPECT_TRUE(tir.multi_turn);
  EXPECT_EQ(tir.epsilon, 1e-8);
  expect_error_naming([] { (void)verl::adv_estimator("optimal_baseline"); }, "adv_estimator",
                      "not a veRL name",
                      "grpo, rloo, reinforce_plus_plus, reinforce_plus_plus_baseline, gae, remax, "
                      "opo, gpg, grpo_vectorized, rloo_vectorized, gdpo, grpo_passk, "
                      "optimal_token_baseline, tir_optimal_token_baseline");
  expect_error_naming([] { (void)verl::adv_estimator("GRPO"); }, "adv_estimator",
                      "not a veRL name");
}

// bypass_mode: veRL's defaults (ppo_clip, no IS weights, no rejection) and its strings.
TEST(VerlNames, BypassModeReadsTheRolloutCorrectionConfig) {
  const auto defaults = std::get<cascade_rl::bypass_mode_options>(verl::policy_loss("bypass_mode"));
  EXPECT_EQ(defaults.loss, cascade_rl::bypass_loss::ppo_clip);
  EXPECT_EQ(defaults.correction.is_level, cascade_rl::rollout_is_level::none);
  EXPECT_EQ(defaults.correction.rejection_count, 0u);
  EXPECT_EQ(defaults.ppo.dual_clip, 3.0);
  const auto icepop = std::get<cascade_rl::bypass_mode_options>(
      verl::policy_loss("bypass_mode", {.loss_agg_mode = "seq-mean-token-sum",
                                        .rollout_correction_loss_type = "reinforce",
                                        .rollout_is = "token",
                                        .rollout_is_threshold = "0.5_5.0",
                                        .rollout_rs = "token_k1, seq_max_k3,token_k1",
                                        .rollout_rs_threshold = "2.0"}));
  EXPECT_EQ(icepop.loss, cascade_rl::bypass_loss::reinforce);
  EXPECT_EQ(icepop.reinforce.aggregation, loss_aggregation::seq_mean_token_sum);
  EXPECT_EQ(icepop.reinforce.surrogate, cascade_rl::reinforce_surrogate::log_prob);
  EXPECT_EQ(icepop.correction.is_upper, 5.0);
  EXPECT_EQ(icepop.correction.is_lower, 0.5);
  ASSERT_EQ(icepop.correction.rejection_count, 2u);
  EXPECT_EQ(cascade_rl::to_string(icepop.correction.rejection[0]), "token_k1");
  EXPECT_EQ(icepop.correction.rejection[0].lower, 0.5);  // a single k1 bound u: 1/u below
  EXPECT_EQ(icepop.correction.rejection[0].upper, 2.0);
  EXPECT_EQ(cascade_rl::to_string(icepop.correction.rejection[1]), "seq_max_k3");
  EXPECT_EQ(icepop.correction.rejection[1].upper, 2.0);
}

}  // namespace verl_names_cases
}  // namespace
