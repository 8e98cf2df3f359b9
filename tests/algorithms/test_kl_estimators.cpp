// KL estimators k1, abs, k2, k3 with their derivatives, k3's clamps, the KL loss, the
// veRL name presets, and refused inputs.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "cascade_rl/algorithms/kl_estimators.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/presets/verl_losses.hpp"
#include "support/expect_error.hpp"

namespace {
namespace kl_estimators_cases {  // this file's names, apart in the area's unity build

using cascade_rl::kl_estimator;
using cascade_rl::kl_options;
using cascade_rl::loss_aggregation;
using cascade_rl::loss_normalizer;
using cascade_rl::token_layout;
using cascade_rl::testing::expect_error_naming;
namespace exec = cascade_rl::exec;
namespace verl = cascade_rl::presets::verl;

constexpr double nan = std::numeric_limits<double>::quiet_NaN();

struct kl_result {
  std::vector<double> values, grads;
  double sum = 0;
};

kl_result run(const std::vector<double>& log_probs, const std::vector<double>& ref,
              const kl_options& options, const std::vector<std::uint8_t>& mask = {}) {
  const std::vector<std::int64_t> offsets{0, static_cast<std::int64_t>(log_probs.size())};
  const token_layout layout(offsets, mask);
  kl_result r{std::vector<double>(log_probs.size(), -7.0),
              std::vector<double>(log_probs.size(), -7.0), 0};
  r.sum = cascade_rl::kl_penalty(exec::seq, layout, {.log_probs = log_probs, .ref_log_probs = ref},
                                 r.values, r.grads, options);
  return r;
}

// logp - ref = +1, -1, 0
const std::vector<double> log_probs{-1, -2, -1.5};
const std::vector<double> ref_log_probs{-2, -1, -1.5};

TEST(KlEstimators, K1) {
  const auto r = run(log_probs, ref_log_probs, {.estimator = kl_estimator::k1});
  EXPECT_EQ(r.values, (std::vector<double>{1, -1, 0}));
  EXPECT_EQ(r.grads, (std::vector<double>{1, 1, 1}));
  EXPECT_EQ(r.sum, 0.0);
}

TEST(KlEstimators, AbsHasZeroGradientAtZero) {
  const auto r = run(log_probs, ref_log_probs, {.estimator = kl_estimator::abs});
  EXPECT_EQ(r.values, (std::vector<double>{1, 1, 0}));
  EXPECT_EQ(r.grads, (std::vector<double>{1, -1, 0}));  // torch: sign(0) = 0
  EXPECT_EQ(r.sum, 2.0);
}

TEST(KlEstimators, K2) {
  const auto r = run(log_probs, ref_log_probs, {.estimator = kl_estimator::k2});
  EXPECT_EQ(r.values, (std::vector<double>{0.5, 0.5, 0}));
  EXPECT_EQ(r.grads, (std::vector<double>{1, -1, 0}));
}

TEST(KlEstimators, K3) {
  const auto r = run(log_probs, ref_log_probs, {.estimator = kl_estimator::k3});
  // x = ref - logp = -1, 1, 0: exp(x) - x - 1, derivative 1 - exp(x)
  EXPECT_NEAR(r.values[0], std::exp(-1.0), 1e-15);
  EXPECT_NEAR(r.values[1], std::exp(1.0) - 2, 1e-15);
  EXPECT_EQ(r.values[2], 0.0);
  EXPECT_NEAR(r.grads[0], 1 - std::exp(-1.0), 1e-15);
  EXPECT_NEAR(r.grads[1], 1 - std::exp(1.0), 1e-15);
  EXPECT_EQ(r.grads[2], 0.0);
  EXPECT_NEAR(r.sum, std::exp(-1.0) + std::exp(1.0) - 2, 1e-15);
}

TEST(KlEstimators, K3ClampsZeroTheGradient) {
  // x = -59 (input clamp to -20), x = 29 (input clamp to 20), x = 3 (output clamp only)
  const std::vector<double> lp{-1, -30, -4};
  const std::vector<double> ref{-60, -1, -1};
  const auto veRL = run(lp, ref, {.estimator = kl_estimator::k3});
  EXPECT_EQ(veRL.values, (std::vector<double>{10, 10, 10}));
  EXPECT_EQ(veRL.grads, (std::vector<double>{0, 0, 0}));

  const auto wide = run(lp, ref, {.estimator = kl_estimator::k3, .output_clamp = 1e12});
  EXPECT_NEAR(wide.values[0], std::exp(-20.0) + 19, 1e-12);
  EXPECT_NEAR(wide.values[1], std::exp(20.0) - 21, 1e-3);
  EXPECT_NEAR(wide.values[2], std::exp(3.0) - 4, 1e-12);
  EXPECT_EQ(wide.grads[0], 0.0);
  EXPECT_EQ(wide.grads[1], 0.0);
  EXPECT_NEAR(wide.grads[2], 1 - std::exp(3.0), 1e-12);
}

TEST(KlEstimators, MaskedTokensAreZeroAndMayHoldGarbage) {
  const std::vector<double> lp{-1, nan, -2};
  const std::vector<double> ref{-2, -1, nan};
  const auto r = run(lp, ref, {.estimator = kl_estimator::k2}, {1, 0, 0});
  EXPECT_EQ(r.values, (std::vector<double>{0.5, 0, 0}));
  EXPECT_EQ(r.grads, (std::vector<double>{1, 0, 0}));
  EXPECT_EQ(r.sum, 0.5);
}

TEST(KlLoss, CoefficientTimesAggregatedEstimate) {
  const std::vector<std::int64_t> offsets{0, 1, 3};
  const token_layout layout(offsets);
  std::vector<double> grad(3, -7.0);
  auto loss = [&](loss_aggregation mode, loss_normalizer normalizer) {
    normalizer.mode = mode;  // the divisors below, made for mode
    return cascade_rl::kl_loss(
        exec::seq, layout, {.log_probs = log_probs, .ref_log_probs = ref_log_probs}, grad,
        normalizer,
        {.kl = {.estimator = kl_estimator::k2}, .coefficient = 0.1, .aggregation = mode});
  };
  // k2 = 0.5, 0.5, 0 in sequences {0} and {1, 2}
  EXPECT_DOUBLE_EQ(loss(loss_aggregation::token_mean, {.tokens = 3}), 0.1 * 1.0 / 3);
  EXPECT_NEAR(grad[0], 0.1 / 3, 1e-17);
  EXPECT_NEAR(grad[1], -0.1 / 3, 1e-17);
  EXPECT_EQ(grad[2], 0.0);
  EXPECT_DOUBLE_EQ(loss(loss_aggregation::seq_mean_token_mean, {.sequences = 2}),
                   0.1 * (0.5 + 0.25) / 2);
  EXPECT_DOUBLE_EQ(grad[0], 0.1 * 1 / 2);
  EXPECT_DOUBLE_EQ(grad[1], 0.1 * -1 / 4);
}

// The "+" types: the estimator's value, k2's gradient logp - ref, also where k3's clamps
// zero the plain gradient (x = ref - logp = 30 is beyond the input clamp of 20).
TEST(KlEstimators, StraightThroughKeepsTheValueAndTakesK2sGradient) {
  const std::vector<double> log_probs{-1.0, -0.5, -31.0};
  const std::vector<double> ref_log_probs{-1.5, -0.25, -1.0};
  const std::vector<std::int64_t> offsets{0, 3};
  const cascade_rl::token_layout layout(offsets);
  for (const auto estimator :
       {kl_estimator::k1, kl_estimator::abs, kl_estimator::k2, kl_estimator::k3}) {
    std::vector<double> plain_values(3), plain_grad(3), values(3), grad(3);
    const cascade_rl::kl_options plain{.estimator = estimator};
    cascade_rl::kl_options plus = plain;
    plus.straight_through = true;
    const double plain_sum = cascade_rl::kl_penalty(
        cascade_rl::exec::seq, layout, {.log_probs = log_probs, .ref_log_probs = ref_log_probs},
        plain_values, plain_grad, plain);
    const double sum = cascade_rl::kl_penalty(
        cascade_rl::exec::seq, layout, {.log_probs = log_probs, .ref_log_probs = ref_log_probs},
        values, grad, plus);
    EXPECT_EQ(sum, plain_sum);
    EXPECT_EQ(values, plain_values);
    EXPECT_EQ(grad, (std::vector<double>{0.5, -0.25, -30.0})) << cascade_rl::to_string(estimator);
  }
  // k3 at the clamp: value 10 and plain gradient 0; the "+" gradient is still logp - ref.
  std::vector<double> grad(3), loss_grad(3);
  std::vector<double> values(3);
  cascade_rl::kl_penalty(cascade_rl::exec::seq, layout,
                         {.log_probs = log_probs, .ref_log_probs = ref_log_probs}, values, grad,
                         {.estimator = kl_estimator::k3});
  EXPECT_EQ(values[2], 10.0);
  EXPECT_EQ(grad[2], 0.0);
  // As a loss, coefficient * aggregate(k) with the straight-through gradient.
  const double loss = cascade_rl::kl_loss(cascade_rl::exec::seq, layout,
                                          {.log_probs = log_probs, .ref_log_probs = ref_log_probs},
                                          loss_grad, {.tokens = 3},
                                          {.kl = verl::kl_penalty("k1+"),
                                           .coefficient = 2.0,
                                           .aggregation = loss_aggregation::token_mean});
  EXPECT_DOUBLE_EQ(loss, 2.0 * ((0.5 - 0.25 - 30.0) / 3));
  EXPECT_DOUBLE_EQ(loss_grad[0], 2.0 * 0.5 / 3);
  EXPECT_DOUBLE_EQ(loss_grad[2], 2.0 * -30.0 / 3);
}

TEST(KlEstimators, VerlNamePresets) {
  EXPECT_EQ(verl::kl_penalty("kl").estimator, kl_estimator::k1);
  EXPECT_EQ(verl::kl_penalty("k1").estimator, kl_estimator::k1);
  EXPECT_EQ(verl::kl_penalty("abs").estimator, kl_estimator::abs);
  EXPECT_EQ(verl::kl_penalty("mse").estimator, kl_estimator::k2);
  EXPECT_EQ(verl::kl_penalty("k2").estimator, kl_estimator::k2);
  const auto k3 = verl::kl_penalty("low_var_kl");
  EXPECT_EQ(k3.estimator, kl_estimator::k3);
  EXPECT_EQ(k3.input_clamp, 20.0);
  EXPECT_EQ(k3.output_clamp, 10.0);
  EXPECT_EQ(verl::kl_penalty("k3").estimator, kl_estimator::k3);
  EXPECT_FALSE(k3.straight_through);
  for (const auto& entry : verl::kl_penalty_names) {
    const auto plus = verl::kl_penalty(std::string(entry.name) + "+");
    EXPECT_EQ(plus.estimator, entry.estimator) << entry.name;
    EXPECT_TRUE(plus.straight_through) << entry.name;
  }
  expect_error_naming([] { (void)verl::kl_penalty("full"); }, "kl_penalty", "refuses it too");
  expect_error_naming([] { (void)verl::kl_penalty("k4+"); }, "kl_penalty", "low_var_kl");
  expect_error_naming([] { (void)verl::kl_penalty("+"); }, "kl_penalty");
  const auto loss = verl::kl_loss();
  EXPECT_EQ(loss.kl.estimator, kl_estimator::k3);
  EXPECT_EQ(loss.coefficient, 0.001);
  EXPECT_EQ(loss.aggregation, loss_aggregation::token_mean);
  EXPECT_EQ(verl::loss_agg_mode("seq-mean-token-mean"), loss_aggregation::seq_mean_token_mean);
  expect_error_naming([] { (void)verl::loss_agg_mode("mean"); }, "loss_agg_mode");
}

TEST(KlEstimators, RefuseBadInputs) {
  const std::vector<std::int64_t> offsets{0, 3};
  const token_layout layout(offsets);
  std::vector<double> lp = log_probs;
  std::vector<double> ref = ref_log_probs;
  std::vector<double> values(3), grad(3);
  kl_options options{};
  auto penalty = [&] {
    cascade_rl::kl_penalty(exec::seq, layout, {.log_probs = lp, .ref_log_probs = ref}, values, grad,
                           options);
  };
  EXPECT_NO_THROW(penalty());
  ref[1] = nan;
  expect_error_naming(penalty, "ref_log_probs[1]");
  ref[1] = -1;
  lp[2] = -std::numeric_limits<double>::infinity();
  expect_error_naming(penalty, "log_probs[2]");
  lp[2] = -1.5;
  ref.push_back(0);
  expect_error_naming(penalty, "ref_log_probs");
  ref.pop_back();
  values.pop_back();
  expect_error_naming(penalty, "values_out");
  values.push_back(0);
  options.input_clamp = 0;
  expect_error_naming(penalty, "options.input_clamp");
  options = {.output_clamp = -1};
  expect_error_naming(penalty, "options.output_clamp");
  options = {.estimator = kl_estimator::k1, .output_clamp = -1};  // clamps are k3-only
  EXPECT_NO_THROW(penalty());

  cascade_rl::kl_loss_options loss_options{};
  loss_normalizer normalizer{.tokens = 3};
  auto loss = [&] {
    cascade_rl::kl_loss(exec::seq, layout, {.log_probs = lp, .ref_log_probs = ref}, grad,
                        normalizer, loss_options);
  };
  EXPECT_NO_THROW(loss());
  loss_options.coefficient = nan;
  expect_error_naming(loss, "options.coefficient");
  loss_options = {.kl = {.input_clamp = -2}};
  expect_error_naming(loss, "options.kl.input_clamp");
  loss_options = {};
  normalizer.tokens = 0;
  expect_error_naming(loss, "normalizer.tokens");
}

}  // namespace kl_estimators_cases
}  // namespace
