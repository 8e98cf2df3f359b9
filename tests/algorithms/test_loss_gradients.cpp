// Every analytic dL/dlogp against central finite differences in double, on random
// ragged batches with masks, for every aggregation mode. Tokens within a small margin
// of a kink (a clip boundary, a clamp, |x| at 0) are skipped: there the loss is not
// differentiable and the one-sided conventions are tested by hand elsewhere.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "cascade_rl/algorithms/kl_estimators.hpp"
#include "cascade_rl/algorithms/policy_loss.hpp"
#include "cascade_rl/core/exec.hpp"
#include "support/random_batch.hpp"

namespace {
namespace loss_gradients_cases {  // this file's names, apart in the area's unity build

using cascade_rl::importance_sampling;
using cascade_rl::kl_estimator;
using cascade_rl::loss_aggregation;
using cascade_rl::loss_normalizer;
using cascade_rl::ppo_clip_options;
using cascade_rl::testing::all_aggregation_modes;
using cascade_rl::testing::make_random_batch;
using cascade_rl::testing::random_batch;
namespace exec = cascade_rl::exec;


constexpr double step = 1e-6;

// loss(log_probs, grad_out) -> value
using loss_fn = std::function<double(const std::vector<double>&, std::vector<double>&)>;
using skip_fn = std::function<bool(std::size_t token)>;

void expect_gradient_matches_differences(const random_batch<double>& batch, const loss_fn& loss,
                                         const skip_fn& near_kink, const std::string& context) {
  std::vector<double> grad(batch.tokens());
  (void)loss(batch.log_probs, grad);
  std::vector<double> lp = batch.log_probs;
  std::vector<double> scratch(batch.tokens());
  std::size_t checked = 0;
  for (std::size_t t = 0; t < batch.tokens(); ++t) {
    if (near_kink(t)) continue;
    lp[t] = batch.log_probs[t] + step;
    const double up = loss(lp, scratch);
    lp[t] = batch.log_probs[t] - step;
    const double down = loss(lp, scratch);
    lp[t] = batch.log_probs[t];
    const double numeric = (up - down) / (2 * step);
    EXPECT_NEAR(grad[t], numeric, 1e-7 + 1e-6 * std::abs(numeric))
        << context << " token " << t << (batch.mask[t] ? "" : " (masked)");
    ++checked;
  }
  EXPECT_GT(checked, batch.tokens() / 2) << context << ": too many tokens skipped";
}

// A log-ratio spread of 0.6 puts tokens in every clip regime, dual clip included.
random_batch<double> batch_for(std::uint64_t seed) {
  return make_random_batch<double>(
      seed, {.sequences = 24, .max_length = 12, .log_ratio_spread = 0.6});
}

loss_normalizer normalizer_of(const random_batch<double>& batch,
                              cascade_rl::loss_aggregation mode) {
  return cascade_rl::local_loss_counts(exec::seq, batch.layout()).normalizer(mode, 7.0);
}

bool near(double x, double kink) { return std::abs(x - kink) < 1e-4 * std::max(1.0, std::abs(kink)); }

// weighted: with given rollout_is_weights (a stop-gradient factor on each token's loss).
void check_ppo(const ppo_clip_options& options, std::uint64_t seed, const std::string& name,
               bool weighted = false) {
  const auto batch = batch_for(seed);
  const auto layout = batch.layout();
  const auto normalizer = normalizer_of(batch, options.aggregation);
  const std::vector<double> weights =
      weighted ? cascade_rl::testing::rollout_is_weights_of(batch) : std::vector<double>{};
  const auto ppo = [&](const std::vector<double>& lp, std::vector<double>& grad) {
    return cascade_rl::ppo_clip_loss(exec::seq, layout,
                                     {.log_probs = lp,
                                      .old_log_probs = batch.old_log_probs,
                                      .advantages = batch.advantages,
                                      .behaviour_log_probs = batch.behaviour_log_probs,
                                      .rollout_is_weights = weights},
                                     grad, normalizer, options);
  };
  const loss_fn loss = [&](const std::vector<double>& lp, std::vector<double>& grad) {
    return ppo(lp, grad).loss;
  };
  // The batch must reach the branches whose gradient is under test.
  std::vector<double> grad(batch.tokens());
  const auto metrics = ppo(batch.log_probs, grad).metrics;
  EXPECT_GT(metrics.clipped, 5u) << name;
  if (options.dual_clip) {
    EXPECT_GT(metrics.dual_clipped, 0u) << name;
  }
  if (options.importance.mode == importance_sampling::truncated) {
    EXPECT_GT(metrics.importance_truncated, 0u) << name;
  }
  if (options.importance.mode == importance_sampling::band_mask) {
    EXPECT_GT(metrics.importance_masked, 0u) << name;
  }
  const skip_fn near_kink = [&](std::size_t t) {
    const double log_ratio = batch.log_probs[t] - batch.old_log_probs[t];
    const double ratio = std::exp(log_ratio);
    return near(ratio, 1 - options.clip_low) || near(ratio, 1 + options.clip_high) ||
           (options.dual_clip && near(ratio, *options.dual_clip)) ||
           near(std::abs(log_ratio), options.log_ratio_clamp);
  };
  expect_gradient_matches_differences(batch, loss, near_kink, name);
}

TEST(LossGradients, PpoClipEveryModeMatchesFiniteDifferences) {
  std::uint64_t seed = 100;
  for (const auto mode : all_aggregation_modes) {
    const std::string name = "ppo " + std::string(cascade_rl::to_string(mode));
    check_ppo({.clip_low = 0.2, .clip_high = 0.28, .dual_clip = 1.5, .aggregation = mode},
              seed++, name);
    check_ppo({.clip_low = 0.1, .clip_high = 0.1, .aggregation = mode}, seed++,
              name + " narrow, no dual clip");
  }
}

TEST(LossGradients, PpoWithImportanceCorrectionMatchesFiniteDifferences) {
  check_ppo({.dual_clip = 2.0,
             .importance = {.mode = importance_sampling::truncated, .cap = 1.2}},
            200, "ppo truncated IS");
  check_ppo({.aggregation = loss_aggregation::seq_mean_token_mean,
             .importance = {.mode = importance_sampling::band_mask}},
            201, "ppo band mask");
}

// Given weights (veRL's vanilla rollout_is_weights, NeMo-RL's actor importance weights)
// scale each token's loss and gradient: alone, and under a truncated correction.
TEST(LossGradients, PpoWithGivenWeightsMatchesFiniteDifferences) {
  std::uint64_t seed = 250;
  for (const auto mode : all_aggregation_modes)
    check_ppo({.clip_high = 0.28, .dual_clip = 1.5, .aggregation = mode}, seed++,
              "weighted ppo " + std::string(cascade_rl::to_string(mode)), true);
  check_ppo({.dual_clip = 2.0, .importance = {.mode = importance_sampling::truncated, .cap = 1.2}},
            seed, "weighted ppo truncated IS", true);
}

// With the ratio surrogate REINFORCE's value does not move with logp (the ratio's
// stop-gradient is re-evaluated at each point); its textbook log-prob form does, and
// the two share the gradient.
TEST(LossGradients, ReinforceLogProbSurrogateMatchesFiniteDifferences) {
  std::uint64_t seed = 300;
  for (const auto mode : all_aggregation_modes) {
    const auto batch = batch_for(seed++);
    const auto layout = batch.layout();
    const auto normalizer = normalizer_of(batch, mode);
    const loss_fn loss = [&](const std::vector<double>& lp, std::vector<double>& grad) {
      return cascade_rl::reinforce_loss(
                 exec::seq, layout, {.log_probs = lp, .advantages = batch.advantages}, grad,
                 normalizer,
                 {.aggregation = mode, .surrogate = cascade_rl::reinforce_surrogate::log_prob})
          .loss;
    };
    expect_gradient_matches_differences(batch, loss, [](std::size_t) { return false; },
                                        "reinforce " + std::string(cascade_rl::to_string(mode)));
    // veRL's GPG / compute_policy_loss_reinforce: given weights scale l and dl/dlogp.
    const auto weights = cascade_rl::testing::rollout_is_weights_of(batch);
    const loss_fn weighted = [&](const std::vector<double>& lp, std::vector<double>& grad) {
      return cascade_rl::reinforce_loss(
                 exec::seq, layout,
                 {.log_probs = lp, .advantages = batch.advantages, .rollout_is_weights = weights},
                 grad, normalizer,
                 {.aggregation = mode, .surrogate = cascade_rl::reinforce_surrogate::log_prob})
          .loss;
    };
    expect_gradient_matches_differences(
        batch, weighted, [](std::size_t) { return false; },
        "weighted reinforce " + std::string(cascade_rl::to_string(mode)));

    std::vector<double> ratio_grad(batch.tokens()), log_prob_grad(batch.tokens());
    cascade_rl::reinforce_loss(exec::seq, layout,
                               {.log_probs = batch.log_probs, .advantages = batch.advantages},
                               ratio_grad, normalizer, {.aggregation = mode});
    (void)loss(batch.log_probs, log_prob_grad);
    EXPECT_EQ(ratio_grad, log_prob_grad);
  }
}

TEST(LossGradients, KlLossEveryEstimatorMatchesFiniteDifferences) {
  std::uint64_t seed = 400;
  for (const auto estimator :
       {kl_estimator::k1, kl_estimator::abs, kl_estimator::k2, kl_estimator::k3}) {
    for (const auto mode : all_aggregation_modes) {
      auto batch = batch_for(seed++);
      // Push some k3 tokens past the output clamp (gradient 0 there).
      for (std::size_t t = 0; t < batch.tokens(); t += 9) batch.ref_log_probs[t] += 4.0;
      const auto layout = batch.layout();
      const auto normalizer = normalizer_of(batch, mode);
      const cascade_rl::kl_loss_options options{
          .kl = {.estimator = estimator}, .coefficient = 0.7, .aggregation = mode};
      const loss_fn loss = [&](const std::vector<double>& lp, std::vector<double>& grad) {
        return cascade_rl::kl_loss(exec::seq, layout,
                                   {.log_probs = lp, .ref_log_probs = batch.ref_log_probs}, grad,
                                   normalizer, options);
      };
      const skip_fn near_kink = [&](std::size_t t) {
        const double x = batch.ref_log_probs[t] - batch.log_probs[t];
        return near(x, 0) || near(std::exp(x) - x - 1, 10) || near(std::abs(x), 20);
      };
      expect_gradient_matches_differences(
          batch, loss, near_kink,
          std::string(cascade_rl::to_string(estimator)) + " " +
              std::string(cascade_rl::to_string(mode)));
    }
  }
}

// CISPO's weight sg(clamp(r)) * A is a stop-gradient, so its dL/dlogp is not the slope of
// the loss in logp alone (the clip moves with logp). It is the slope along old_logp and
// logp moved together: r stays put and only the log-prob factor moves. That is the
// difference taken here, on tokens on either side of the clip and beyond the log-ratio
// clamp, with and without given weights.
TEST(LossGradients, CispoStopGradientMatchesFiniteDifferences) {
  std::uint64_t seed = 500;
  for (const auto mode : all_aggregation_modes) {
    for (const bool weighted : {false, true}) {
      auto batch = batch_for(seed++);
      for (std::size_t t = 0; t < batch.tokens(); t += 11) batch.old_log_probs[t] -= 25.0;
      const auto weights = cascade_rl::testing::rollout_is_weights_of(batch);
      const auto layout = batch.layout();
      const auto normalizer = normalizer_of(batch, mode);
      const cascade_rl::cispo_options options{
          .clip_low = 0.1, .clip_high = 0.28, .aggregation = mode};
      const auto cispo = [&](const std::vector<double>& lp, const std::vector<double>& old,
                             std::vector<double>& grad) {
        return cascade_rl::cispo_loss(
            exec::seq, layout,
            {.log_probs = lp,
             .old_log_probs = old,
             .advantages = batch.advantages,
             .rollout_is_weights =
                 weighted ? std::span<const double>(weights) : std::span<const double>{}},
            grad, normalizer, options);
      };
      std::vector<double> grad(batch.tokens());
      const auto metrics = cispo(batch.log_probs, batch.old_log_probs, grad).metrics;
      EXPECT_GT(metrics.clipped, 5u);
      std::vector<double> old = batch.old_log_probs;
      const loss_fn loss = [&](const std::vector<double>& lp, std::vector<double>& out) {
        // old_logp moved by the same step as logp (lp differs from the batch at one token).
        for (std::size_t t = 0; t < lp.size(); ++t)
          old[t] = batch.old_log_probs[t] + (lp[t] - batch.log_probs[t]);
        return cispo(lp, old, out).loss;
      };
      expect_gradient_matches_differences(
          batch, loss, [](std::size_t) { return false; },
          "cispo " + std::string(cascade_rl::to_string(mode)) + (weighted ? " weighted" : ""));
    }
  }
}

// DPPO's weight -A * sg(min(r, c)) * m is a stop-gradient too: the same difference as
// CISPO's, along old_logp and logp moved together, skipping tokens within reach of the
// trust region's edge (where the step itself could flip the mask). Some tokens carry a
// ratio beyond c.
TEST(LossGradients, DppoStopGradientMatchesFiniteDifferences) {
  std::uint64_t seed = 600;
  for (const auto divergence : {cascade_rl::dppo_divergence::total_variation,
                                cascade_rl::dppo_divergence::binary_kl}) {
    for (const auto mode : all_aggregation_modes) {
      auto batch = batch_for(seed++);
      const auto weights = cascade_rl::testing::rollout_is_weights_of(batch);
      const auto layout = batch.layout();
      const auto normalizer = normalizer_of(batch, mode);
      const cascade_rl::dppo_options options{.divergence = divergence,
                                             .clip_low = 0.05,
                                             .clip_high = 0.02,
                                             .truncation = 1.3,
                                             .aggregation = mode};
      const auto dppo = [&](const std::vector<double>& lp, const std::vector<double>& old,
                            std::vector<double>& grad) {
        return cascade_rl::dppo_loss(exec::seq, layout,
                                     {.log_probs = lp,
                                      .old_log_probs = old,
                                      .advantages = batch.advantages,
                                      .rollout_is_weights = weights},
                                     grad, normalizer, options);
      };
      std::vector<double> grad(batch.tokens());
      const auto metrics = dppo(batch.log_probs, batch.old_log_probs, grad).metrics;
      EXPECT_GT(metrics.clipped, 5u);
      EXPECT_GT(metrics.dual_clipped, 0u);
      std::vector<double> old = batch.old_log_probs;
      const loss_fn loss = [&](const std::vector<double>& lp, std::vector<double>& out) {
        for (std::size_t t = 0; t < lp.size(); ++t)
          old[t] = batch.old_log_probs[t] + (lp[t] - batch.log_probs[t]);
        return dppo(lp, old, out).loss;
      };
      const skip_fn near_kink = [&](std::size_t t) {
        const double p = std::exp(batch.log_probs[t]), q = std::exp(batch.old_log_probs[t]);
        const double kl = q * (batch.old_log_probs[t] - batch.log_probs[t]) +
                          (1 - q) * std::log((1 - q + 1e-8) / (1 - p + 1e-8));
        const double d =
            divergence == cascade_rl::dppo_divergence::total_variation ? p - q : kl;
        const double to =
            divergence == cascade_rl::dppo_divergence::total_variation ? -0.05 : 0.05;
        return near(d, 0.02) || near(d, to) || near(p, q);
      };
      expect_gradient_matches_differences(batch, loss, near_kink,
                                          "dppo " + std::string(cascade_rl::to_string(mode)));
    }
  }
}

// DRO has no stop-gradient and no clamp: its gradient is the loss's slope in logp.
TEST(LossGradients, DroMatchesFiniteDifferences) {
  std::uint64_t seed = 700;
  for (const auto mode : all_aggregation_modes) {
    auto batch = batch_for(seed++);
    for (std::size_t t = 0; t < batch.tokens(); t += 13) batch.old_log_probs[t] -= 25.0;
    const auto weights = cascade_rl::testing::rollout_is_weights_of(batch);
    const auto layout = batch.layout();
    const auto normalizer = normalizer_of(batch, mode);
    const loss_fn loss = [&](const std::vector<double>& lp, std::vector<double>& grad) {
      return cascade_rl::dro_loss(exec::seq, layout,
                                  {.log_probs = lp,
                                   .old_log_probs = batch.old_log_probs,
                                   .advantages = batch.advantages,
                                   .rollout_is_weights = weights},
                                  grad, normalizer, {.beta = 0.7, .aggregation = mode})
          .loss;
    };
    expect_gradient_matches_differences(
        batch, loss, [](std::size_t) { return false; },
        "dro " + std::string(cascade_rl::to_string(mode)));
  }
}

// SAPO's gate has no stop-gradient: its gradient is the loss's slope in logp, 0 beyond
// the log-ratio clamp (tokens near the clamp skipped).
TEST(LossGradients, SapoMatchesFiniteDifferences) {
  std::uint64_t seed = 800;
  for (const auto mode : all_aggregation_modes) {
    auto batch = batch_for(seed++);
    for (std::size_t t = 0; t < batch.tokens(); t += 13) batch.old_log_probs[t] -= 25.0;
    const auto weights = cascade_rl::testing::rollout_is_weights_of(batch);
    const auto layout = batch.layout();
    const auto normalizer = normalizer_of(batch, mode);
    const cascade_rl::sapo_options options{.tau_pos = 2.0, .tau_neg = 1.5, .aggregation = mode};
    const loss_fn loss = [&](const std::vector<double>& lp, std::vector<double>& grad) {
      return cascade_rl::sapo_loss(exec::seq, layout,
                                   {.log_probs = lp,
                                    .old_log_probs = batch.old_log_probs,
                                    .advantages = batch.advantages,
                                    .rollout_is_weights = weights},
                                   grad, normalizer, options)
          .loss;
    };
    const skip_fn near_kink = [&](std::size_t t) {
      return near(std::abs(batch.log_probs[t] - batch.old_log_probs[t]), 20.0);
    };
    expect_gradient_matches_differences(batch, loss, near_kink,
                                        "sapo " + std::string(cascade_rl::to_string(mode)));
  }
}

}  // namespace loss_gradients_cases
}  // namespace
