// Policy losses on hand-computed batches: REINFORCE, PPO clip (clip-higher, dual clip,
// log-ratio clamp), importance correction (truncated, MOPD band), and refused inputs.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "cascade_rl/algorithms/importance_weights.hpp"
#include "cascade_rl/algorithms/policy_loss.hpp"
#include "cascade_rl/core/exec.hpp"
#include "support/expect_error.hpp"

namespace {
namespace policy_loss_cases {  // this file's names, apart in the area's unity build

using cascade_rl::importance_sampling;
using cascade_rl::loss_aggregation;
using cascade_rl::loss_normalizer;
using cascade_rl::ppo_clip_options;
using cascade_rl::reinforce_options;
using cascade_rl::token_layout;
using cascade_rl::testing::expect_error_naming;
namespace exec = cascade_rl::exec;

constexpr double nan = std::numeric_limits<double>::quiet_NaN();
constexpr double inf = std::numeric_limits<double>::infinity();

std::span<const double> in(const std::vector<double>& v) { return v; }
std::span<double> out(std::vector<double>& v) { return v; }

// Two sequences: tokens {0, 1} and {2, 3, 4}; token 3 is masked and holds NaN.
struct reinforce_batch {
  std::vector<std::int64_t> offsets{0, 2, 5};
  std::vector<std::uint8_t> mask{1, 1, 1, 0, 1};
  std::vector<double> log_probs{-1, -2, -0.5, nan, -3};
  std::vector<double> advantages{2, 2, -1, nan, -1};
  token_layout layout() const { return token_layout(offsets, mask); }
};

TEST(ReinforceLoss, ValueIsMinusAdvantageAndGradientMinusAdvantage) {
  const reinforce_batch b;
  std::vector<double> grad(5, -7.0);
  const auto result = cascade_rl::reinforce_loss(
      exec::seq, b.layout(), {.log_probs = in(b.log_probs), .advantages = in(b.advantages)},
      out(grad), loss_normalizer{.tokens = 4});
  // (-2 - 2 + 1 + 1) / 4
  EXPECT_DOUBLE_EQ(result.loss, -0.5);
  EXPECT_EQ(grad, (std::vector<double>{-0.5, -0.5, 0.25, 0, 0.25}));
  EXPECT_EQ(result.metrics.valid_tokens, 4u);
  EXPECT_EQ(result.metrics.clipped, 0u);
  EXPECT_EQ(result.metrics.importance_masked, 0u);
}

TEST(ReinforceLoss, LogProbSurrogateChangesTheValueNotTheGradient) {
  const reinforce_batch b;
  std::vector<double> grad(5);
  const auto result = cascade_rl::reinforce_loss(
      exec::seq, b.layout(), {.log_probs = in(b.log_probs), .advantages = in(b.advantages)},
      out(grad), loss_normalizer{.tokens = 4},
      reinforce_options{.surrogate = cascade_rl::reinforce_surrogate::log_prob});
  // -A * logp: 2 + 4 - 0.5 - 3
  EXPECT_DOUBLE_EQ(result.loss, 2.5 / 4);
  EXPECT_EQ(grad, (std::vector<double>{-0.5, -0.5, 0.25, 0, 0.25}));
}

TEST(ReinforceLoss, SequenceMeanModes) {
  const reinforce_batch b;
  std::vector<double> grad(5);
  const auto result = cascade_rl::reinforce_loss(
      exec::seq, b.layout(), {.log_probs = in(b.log_probs), .advantages = in(b.advantages)},
      out(grad), loss_normalizer{.mode = loss_aggregation::seq_mean_token_mean, .sequences = 2},
      reinforce_options{.aggregation = loss_aggregation::seq_mean_token_mean});
  // ((-2 - 2) / 2 + (1 + 1) / 2) / 2
  EXPECT_DOUBLE_EQ(result.loss, -0.5);
  EXPECT_EQ(grad, (std::vector<double>{-0.5, -0.5, 0.25, 0, 0.25}));
}

TEST(ReinforceLoss, TruncatedImportanceWeightIsAConstantFactor) {
  const reinforce_batch b;
  // r = exp(logp - behaviour): 3 (truncated to 1.5), 0.5, 1, -, 1.2
  const std::vector<double> behaviour{-1 - std::log(3.0), -2 + std::log(2.0), -0.5, nan,
                                      -3 - std::log(1.2)};
  std::vector<double> grad(5);
  const auto result = cascade_rl::reinforce_loss(
      exec::seq, b.layout(),
      {.log_probs = in(b.log_probs),
       .advantages = in(b.advantages),
       .behaviour_log_probs = in(behaviour)},
      out(grad), loss_normalizer{.mode = loss_aggregation::token_sum},
      reinforce_options{.aggregation = loss_aggregation::token_sum,
                        .importance = {.mode = importance_sampling::truncated, .cap = 1.5}});
  // -2 * 1.5 - 2 * 0.5 + 1 * 1 + 1 * 1.2
  EXPECT_NEAR(result.loss, -1.8, 1e-12);
  EXPECT_NEAR(grad[0], -3.0, 1e-12);
  EXPECT_NEAR(grad[1], -1.0, 1e-12);
  EXPECT_EQ(grad[2], 1.0);
  EXPECT_EQ(grad[3], 0.0);
  EXPECT_NEAR(grad[4], 1.2, 1e-12);
  EXPECT_EQ(result.metrics.importance_truncated, 1u);
  EXPECT_EQ(result.metrics.importance_masked, 0u);
  EXPECT_DOUBLE_EQ(result.metrics.truncated_fraction(), 0.25);
}

TEST(ReinforceLoss, MopdBandMaskDropsTokensOutsideTheBand) {
  const std::vector<std::int64_t> offsets{0, 4};
  const std::vector<double> log_probs{-1, -2, -0.5, -0.7};
  // Distillation advantages a_t = teacher logp - student logp.
  const std::vector<double> advantages{0.5, -0.3, 0.2, 0.4};
  // r = 1 (kept, on the band's inside), 3 (dropped), 0.8 (kept), 0.25 (dropped)
  const std::vector<double> behaviour{-1, -2 - std::log(3.0), -0.5 - std::log(0.8),
                                      -0.7 - std::log(0.25)};
  std::vector<double> grad(4);
  const token_layout layout(offsets);
  const auto result = cascade_rl::reinforce_loss(exec::seq, layout,
                                                 {.log_probs = in(log_probs),
                                                  .advantages = in(advantages),
                                                  .behaviour_log_probs = in(behaviour)},
                                                 out(grad), loss_normalizer{.tokens = 4},
                                                 cascade_rl::mopd_options());
  // -(1/|V|) sum w a logp, |V| = 4 valid tokens (dropped ones included)
  EXPECT_NEAR(result.loss, -(1 * 0.5 * -1 + 0.8 * 0.2 * -0.5) / 4, 1e-12);
  EXPECT_NEAR(grad[0], -0.5 / 4, 1e-12);
  EXPECT_EQ(grad[1], 0.0);
  EXPECT_NEAR(grad[2], -0.8 * 0.2 / 4, 1e-12);
  EXPECT_EQ(grad[3], 0.0);
  EXPECT_EQ(result.metrics.importance_masked, 2u);
  EXPECT_DOUBLE_EQ(result.metrics.masked_fraction(), 0.5);
}

TEST(ReinforceLoss, BandBoundsAreInclusive) {
  const std::vector<std::int64_t> offsets{0, 1};
  const std::vector<double> log_probs{-1};
  const std::vector<double> advantages{2};
  std::vector<double> grad(1);
  const auto result = cascade_rl::reinforce_loss(exec::seq, token_layout(offsets),
                                                 {.log_probs = in(log_probs),
                                                  .advantages = in(advantages),
                                                  .behaviour_log_probs = in(log_probs)},
                                                 out(grad), loss_normalizer{.tokens = 1},
                                                 cascade_rl::mopd_options(1.0, 1.0));
  EXPECT_EQ(grad[0], -2.0);
  EXPECT_EQ(result.metrics.importance_masked, 0u);
}

// One token per clip regime. clip_low 0.2, clip_high 0.28 (DAPO), dual clip 3.
struct ppo_batch {
  std::vector<std::int64_t> offsets{0, 3, 8};
  std::vector<std::uint8_t> mask{1, 1, 1, 1, 1, 1, 1, 0};
  std::vector<double> old_log_probs{-1, -1, -1, -1, -1, -1, -1, nan};
  std::vector<double> log_ratio{std::log(1.1), std::log(1.5), std::log(0.5), std::log(4.0),
                                std::log(1.2), 25.0, -25.0, nan};
  std::vector<double> advantages{1, 1, -1, -1, -2, 0.5, -0.5, nan};
  std::vector<double> log_probs() const {
    std::vector<double> lp(old_log_probs.size());
    for (std::size_t t = 0; t < lp.size(); ++t) lp[t] = old_log_probs[t] + log_ratio[t];
    return lp;
  }
  token_layout layout() const { return token_layout(offsets, mask); }
};

TEST(PpoClipLoss, EveryClipRegimeHandComputed) {
  const ppo_batch b;
  const auto log_probs = b.log_probs();
  std::vector<double> grad(8, -7.0);
  const auto result =
      cascade_rl::ppo_clip_loss(exec::seq, b.layout(),
                                {.log_probs = in(log_probs),
                                 .old_log_probs = in(b.old_log_probs),
                                 .advantages = in(b.advantages)},
                                out(grad), loss_normalizer{.mode = loss_aggregation::token_sum},
                                ppo_clip_options{.clip_low = 0.2,
                                                 .clip_high = 0.28,
                                                 .dual_clip = 3.0,
                                                 .aggregation = loss_aggregation::token_sum});
  // t0 unclipped -1.1 | t1 upper clip -1.28 | t2 lower clip 0.8 | t3 dual clip 3 |
  // t4 inside (tie l1 == l2) 2.4 | t5 clamp + upper clip -0.64 | t6 clamp + lower clip 0.4
  EXPECT_NEAR(result.loss, -1.1 - 1.28 + 0.8 + 3 + 2.4 - 0.64 + 0.4, 1e-12);
  EXPECT_NEAR(grad[0], -1.1, 1e-12);
  EXPECT_EQ(grad[1], 0.0);
  EXPECT_EQ(grad[2], 0.0);
  EXPECT_EQ(grad[3], 0.0);
  EXPECT_NEAR(grad[4], 2.4, 1e-12);
  EXPECT_EQ(grad[5], 0.0);
  EXPECT_EQ(grad[6], 0.0);
  EXPECT_EQ(grad[7], 0.0);
  const auto& m = result.metrics;
  EXPECT_EQ(m.valid_tokens, 7u);
  EXPECT_EQ(m.clipped, 4u);       // t1, t2, t5, t6
  EXPECT_EQ(m.dual_clipped, 1u);  // t3
  // old - new after the +-20 clamp
  const double kl = -(std::log(1.1) + std::log(1.5) + std::log(0.5) + std::log(4.0) +
                      std::log(1.2) + 20.0 - 20.0);
  EXPECT_NEAR(m.approx_kl_sum, kl, 1e-12);
  EXPECT_NEAR(m.approx_kl(), kl / 7, 1e-12);
  EXPECT_DOUBLE_EQ(m.clip_fraction(), 4.0 / 7);
  EXPECT_DOUBLE_EQ(m.dual_clip_fraction(), 1.0 / 7);
}

TEST(PpoClipLoss, WithoutDualClipTheLossIsUnbounded) {
  const ppo_batch b;
  const auto log_probs = b.log_probs();
  std::vector<double> grad(8);
  const auto result =
      cascade_rl::ppo_clip_loss(exec::seq, b.layout(),
                                {.log_probs = in(log_probs),
                                 .old_log_probs = in(b.old_log_probs),
                                 .advantages = in(b.advantages)},
                                out(grad), loss_normalizer{.tokens = 7},
                                ppo_clip_options{.clip_low = 0.2, .clip_high = 0.28});
  EXPECT_NEAR(result.loss, (-1.1 - 1.28 + 0.8 + 4 + 2.4 - 0.64 + 0.4) / 7, 1e-12);
  EXPECT_NEAR(grad[3], 4.0 / 7, 1e-12);
  EXPECT_EQ(result.metrics.dual_clipped, 0u);
}

TEST(PpoClipLoss, LogRatioClampZeroesTheGradient) {
  const std::vector<std::int64_t> offsets{0, 2};
  const std::vector<double> old_log_probs{-30, -1};
  const std::vector<double> log_probs{-5, -2};  // log-ratios 25 (clamped to 20) and -1
  const std::vector<double> advantages{1, 1};
  std::vector<double> grad(2);
  const auto result = cascade_rl::ppo_clip_loss(
      exec::seq, token_layout(offsets),
      {.log_probs = in(log_probs),
       .old_log_probs = in(old_log_probs),
       .advantages = in(advantages)},
      out(grad), loss_normalizer{.mode = loss_aggregation::token_sum},
      ppo_clip_options{
          .clip_low = 0.9, .clip_high = 1e12, .aggregation = loss_aggregation::token_sum});
  EXPECT_NEAR(result.loss, -std::exp(20.0) - std::exp(-1.0), 1e-6);
  EXPECT_EQ(grad[0], 0.0);
  EXPECT_NEAR(grad[1], -std::exp(-1.0), 1e-15);
  EXPECT_EQ(result.metrics.clipped, 0u);
}

// Strictly on-policy (old == new) the ratio is 1, every clip is inert, and PPO is
// REINFORCE bit for bit: the reason Cascade RL needs no old log-probs.
TEST(PpoClipLoss, OnPolicyEqualsReinforce) {
  const reinforce_batch b;
  std::vector<double> ppo_grad(5), reinforce_grad(5);
  const loss_normalizer normalizer{.tokens = 4, .sequences = 2};
  const auto ppo =
      cascade_rl::ppo_clip_loss(exec::seq, b.layout(),
                                {.log_probs = in(b.log_probs),
                                 .old_log_probs = in(b.log_probs),
                                 .advantages = in(b.advantages)},
                                out(ppo_grad), normalizer, ppo_clip_options{.dual_clip = 3.0});
  const auto reinforce = cascade_rl::reinforce_loss(
      exec::seq, b.layout(), {.log_probs = in(b.log_probs), .advantages = in(b.advantages)},
      out(reinforce_grad), normalizer);
  EXPECT_EQ(ppo.loss, reinforce.loss);
  EXPECT_EQ(ppo_grad, reinforce_grad);
  EXPECT_EQ(ppo.metrics.clipped, 0u);
  EXPECT_EQ(ppo.metrics.approx_kl_sum, 0.0);
}

// veRL's truncated IS: w = min(exp(old - behaviour), cap) multiplies the clipped loss.
TEST(PpoClipLoss, TruncatedImportanceUsesOldLogProbs) {
  const std::vector<std::int64_t> offsets{0, 2};
  const std::vector<double> old_log_probs{-1, -2};
  const std::vector<double> log_probs{-1 + std::log(1.1), -2 + std::log(1.5)};
  const std::vector<double> behaviour{-1 - std::log(4.0), -2 - std::log(0.5)};
  const std::vector<double> advantages{1, 1};
  std::vector<double> grad(2);
  const auto result = cascade_rl::ppo_clip_loss(
      exec::seq, token_layout(offsets),
      {.log_probs = in(log_probs),
       .old_log_probs = in(old_log_probs),
       .advantages = in(advantages),
       .behaviour_log_probs = in(behaviour)},
      out(grad), loss_normalizer{.mode = loss_aggregation::token_sum},
      ppo_clip_options{.aggregation = loss_aggregation::token_sum,
                       .importance = {.mode = importance_sampling::truncated, .cap = 2.0}});
  // t0: w = min(4, 2) = 2, l = -1.1; t1: w = 0.5, upper clip l = -1.2
  EXPECT_NEAR(result.loss, 2 * -1.1 + 0.5 * -1.2, 1e-12);
  EXPECT_NEAR(grad[0], 2 * -1.1, 1e-12);
  EXPECT_EQ(grad[1], 0.0);
  EXPECT_EQ(result.metrics.importance_truncated, 1u);
}

// Given weights (veRL's vanilla rollout_is_weights, NeMo-RL's precomputed actor importance
// weights) scale the clipped token loss and its gradient, stop-gradient, before the
// importance correction: on TruncatedImportanceUsesOldLogProbs' batch with weights 3 and
// 0.25, t0: 3 * 2 * -1.1 (gradient 3 * 2 * -1.1); t1: 0.25 * 0.5 * -1.2 (gradient 0).
TEST(PpoClipLoss, GivenWeightsScaleTheClippedLoss) {
  const std::vector<std::int64_t> offsets{0, 2};
  const std::vector<double> old_log_probs{-1, -2};
  const std::vector<double> log_probs{-1 + std::log(1.1), -2 + std::log(1.5)};
  const std::vector<double> behaviour{-1 - std::log(4.0), -2 - std::log(0.5)};
  const std::vector<double> advantages{1, 1};
  const std::vector<double> weights{3.0, 0.25};
  std::vector<double> grad(2, -7.0);
  const auto result = cascade_rl::ppo_clip_loss(
      exec::seq, token_layout(offsets),
      {.log_probs = in(log_probs),
       .old_log_probs = in(old_log_probs),
       .advantages = in(advantages),
       .behaviour_log_probs = in(behaviour),
       .rollout_is_weights = in(weights)},
      out(grad), loss_normalizer{.mode = loss_aggregation::token_sum},
      ppo_clip_options{.aggregation = loss_aggregation::token_sum,
                       .importance = {.mode = importance_sampling::truncated, .cap = 2.0}});
  EXPECT_NEAR(result.loss, 3 * 2 * -1.1 + 0.25 * 0.5 * -1.2, 1e-12);
  EXPECT_NEAR(grad[0], 3 * 2 * -1.1, 1e-12);
  EXPECT_EQ(grad[1], 0.0);
  EXPECT_EQ(result.metrics.clipped, 1u);  // the weights do not change what the clip counts
  EXPECT_EQ(result.metrics.importance_truncated, 1u);
  // Without the correction the weight alone: 3 * -1.1 + 0.25 * -1.2 over 2 tokens.
  const auto plain =
      cascade_rl::ppo_clip_loss(exec::seq, token_layout(offsets),
                                {.log_probs = in(log_probs),
                                 .old_log_probs = in(old_log_probs),
                                 .advantages = in(advantages),
                                 .rollout_is_weights = in(weights)},
                                out(grad), loss_normalizer{.tokens = 2}, ppo_clip_options{});
  EXPECT_NEAR(plain.loss, (3 * -1.1 + 0.25 * -1.2) / 2, 1e-12);
  EXPECT_NEAR(grad[0], 3 * -1.1 / 2, 1e-12);
}

TEST(ImportanceWeights, WritesWeightsAndCounts) {
  const std::vector<std::int64_t> offsets{0, 4};
  const std::vector<std::uint8_t> mask{1, 1, 1, 0};
  const std::vector<double> target{0, 0, 0, nan};
  const std::vector<double> behaviour{-std::log(3.0), std::log(4.0), -std::log(1.5), 0};
  std::vector<double> w(4, -1.0);
  const token_layout layout(offsets, mask);
  auto counts = cascade_rl::importance_weights(
      exec::seq, layout, {.target_log_probs = in(target), .behaviour_log_probs = in(behaviour)},
      out(w), {.mode = importance_sampling::truncated, .cap = 2.0});
  EXPECT_NEAR(w[0], 2.0, 0);
  EXPECT_NEAR(w[1], 0.25, 1e-15);
  EXPECT_NEAR(w[2], 1.5, 1e-15);
  EXPECT_EQ(w[3], 0.0);
  EXPECT_EQ(counts.truncated, 1u);
  counts = cascade_rl::importance_weights(
      exec::seq, layout, {.target_log_probs = in(target), .behaviour_log_probs = in(behaviour)},
      out(w), {.mode = importance_sampling::band_mask});
  EXPECT_EQ(w[0], 0.0);
  EXPECT_EQ(w[1], 0.0);
  EXPECT_NEAR(w[2], 1.5, 1e-15);
  EXPECT_EQ(counts.masked, 2u);
  counts = cascade_rl::importance_weights(exec::seq, layout, {.target_log_probs = in(target)},
                                          out(w), {});
  EXPECT_EQ(w, (std::vector<double>{1, 1, 1, 0}));
  std::vector<double> bad_behaviour = behaviour;
  bad_behaviour[1] = nan;
  expect_error_naming(
      [&] {
        cascade_rl::importance_weights(
            exec::seq, layout,
            {.target_log_probs = in(target), .behaviour_log_probs = in(bad_behaviour)}, out(w),
            {.mode = importance_sampling::band_mask});
      },
      "behaviour_log_probs[1]");
  std::vector<double> bad_target = target;
  bad_target[2] = -inf;
  expect_error_naming(
      [&] {
        cascade_rl::importance_weights(
            exec::seq, layout,
            {.target_log_probs = in(bad_target), .behaviour_log_probs = in(behaviour)}, out(w),
            {.mode = importance_sampling::band_mask});
      },
      "target_log_probs[2]");
}

TEST(PolicyLosses, RefuseBadInputsNamingArgumentAndIndex) {
  const ppo_batch b;
  auto log_probs = b.log_probs();
  auto old_log_probs = b.old_log_probs;
  auto advantages = b.advantages;
  std::vector<double> behaviour = b.old_log_probs;
  std::vector<double> grad(8);
  ppo_clip_options options{.importance = {.mode = importance_sampling::truncated}};
  loss_normalizer normalizer{.tokens = 7};
  const auto layout = b.layout();
  std::vector<double> weights;  // empty: none
  auto ppo = [&] {
    cascade_rl::ppo_clip_loss(exec::seq, layout,
                              {.log_probs = in(log_probs),
                               .old_log_probs = in(old_log_probs),
                               .advantages = in(advantages),
                               .behaviour_log_probs = in(behaviour),
                               .rollout_is_weights = in(weights)},
                              out(grad), normalizer, options);
  };
  EXPECT_NO_THROW(ppo());

  log_probs[2] = nan;
  expect_error_naming(ppo, "log_probs[2]");
  log_probs[2] = -1;
  old_log_probs[1] = -inf;
  expect_error_naming(ppo, "old_log_probs[1]");
  old_log_probs[1] = -1;
  advantages[4] = inf;
  expect_error_naming(ppo, "advantages[4]");
  advantages[4] = 1;
  behaviour[6] = nan;
  expect_error_naming(ppo, "behaviour_log_probs[6]");
  behaviour[6] = -1;
  EXPECT_NO_THROW(ppo());  // NaN on the masked token 7 is fine

  // Given weights: one per token, finite where valid, checked after the advantages and
  // before the behaviour log-probs (the device report's order).
  weights.assign(7, 1.0);
  expect_error_naming(ppo, "rollout_is_weights", "one per token");
  weights.assign(8, 1.0);
  weights[7] = nan;  // masked: not read
  EXPECT_NO_THROW(ppo());
  weights[5] = inf;
  expect_error_naming(ppo, "rollout_is_weights[5]", "infinite");
  behaviour[3] = nan;
  expect_error_naming(ppo, "rollout_is_weights[5]");
  behaviour[3] = -1;
  advantages[6] = nan;
  expect_error_naming(ppo, "advantages[6]");
  advantages[6] = 1;
  weights.clear();

  advantages.push_back(0);
  expect_error_naming(ppo, "advantages");
  advantages.pop_back();
  grad.pop_back();
  expect_error_naming(ppo, "grad_out");
  grad.push_back(0);
  behaviour.clear();
  expect_error_naming(ppo, "behaviour_log_probs");
  behaviour = b.old_log_probs;

  normalizer.tokens = 0;
  expect_error_naming(ppo, "normalizer.tokens");
  normalizer.tokens = 7;

  auto refuse = [&](ppo_clip_options bad, const char* name) {
    options = bad;
    expect_error_naming(ppo, name);
  };
  refuse({.clip_low = 1.0}, "options.clip_low");
  refuse({.clip_low = -0.1}, "options.clip_low");
  refuse({.clip_low = nan}, "options.clip_low");
  refuse({.clip_high = -0.1}, "options.clip_high");
  refuse({.dual_clip = 1.0}, "options.dual_clip");
  refuse({.dual_clip = 0.5}, "options.dual_clip");
  refuse({.log_ratio_clamp = 0}, "options.log_ratio_clamp");
  refuse({.importance = {.mode = importance_sampling::truncated, .cap = 0}},
         "options.importance.cap");
  refuse({.importance = {.mode = importance_sampling::band_mask, .band_low = 2, .band_high = 1}},
         "options.importance.band_high");
  refuse({.importance = {.mode = importance_sampling::band_mask, .band_low = -1}},
         "options.importance.band_low");

  // REINFORCE: the same checks on its own arguments.
  const reinforce_batch r;
  auto r_log_probs = r.log_probs;
  auto r_advantages = r.advantages;
  std::vector<double> r_grad(5);
  reinforce_options r_options{};
  auto reinforce = [&] {
    cascade_rl::reinforce_loss(exec::seq, r.layout(),
                               {.log_probs = in(r_log_probs), .advantages = in(r_advantages)},
                               out(r_grad), loss_normalizer{.tokens = 4}, r_options);
  };
  EXPECT_NO_THROW(reinforce());
  r_advantages[4] = nan;
  expect_error_naming(reinforce, "advantages[4]");
  r_advantages[4] = 1;
  r_log_probs[0] = inf;
  expect_error_naming(reinforce, "log_probs[0]");
  r_log_probs[0] = -1;
  r_options.importance.mode = importance_sampling::band_mask;
  expect_error_naming(reinforce, "behaviour_log_probs");  // needed, not given
  const std::vector<double> short_behaviour{-1, -1};
  expect_error_naming(
      [&] {
        cascade_rl::reinforce_loss(exec::seq, r.layout(),
                                   {.log_probs = in(r_log_probs),
                                    .advantages = in(r_advantages),
                                    .behaviour_log_probs = in(short_behaviour)},
                                   out(r_grad), loss_normalizer{.tokens = 4});
      },
      "behaviour_log_probs");  // not read without a correction, but the wrong size
  r_options.importance = {.mode = importance_sampling::truncated, .cap = -1};
  expect_error_naming(reinforce, "options.importance.cap");
}

}  // namespace policy_loss_cases
}  // namespace
