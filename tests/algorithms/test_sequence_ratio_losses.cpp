// The sequence-level ratio losses (algorithms/sequence_ratio_losses.hpp): GSPO and GMPO
// against every v2 case of veRL's compute_policy_loss_gspo / _geo_mean (sequence SAPO
// against TRL's in test_trl_reference.cpp), hand-computed
// batches, finite differences of the loss's own forward value, veRL's local forms' lack
// of partition invariance, and refusals naming argument and index. The global forms'
// partition invariance and exec::par against exec::seq are rows of the ratio-loss tables
// (test_partition_invariance.cpp, test_loss_executors.cpp).

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "cascade_rl/algorithms/loss_aggregation.hpp"
#include "cascade_rl/algorithms/policy_loss_entry.hpp"
#include "cascade_rl/algorithms/sequence_ratio_losses.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/presets/verl_losses.hpp"
#include "cascade_rl/presets/verl_names.hpp"
#include "support/expect_error.hpp"
#include "support/random_batch.hpp"
#include "support/reference.hpp"
#include "support/verl_v2_case.hpp"

namespace {
namespace sequence_ratio_losses_cases {  // this file's names, apart in the area's unity build

namespace cr = cascade_rl;
namespace verl = cascade_rl::presets::verl;
namespace exec = cascade_rl::exec;
using cr::testing::expect_all_close;
using cr::testing::expect_close;
using cr::testing::flatten;
using cr::testing::load_reference;
using cr::testing::padded_from_mask;

// ---- v2 reference ----------------------------------------------------------------------

template <class T>
using v2_case = cr::testing::verl_v2_case<T>;
using cr::testing::for_each_verl_v2_case;

// veRL's GSPO aggregates seq-mean-token-mean whatever loss_agg_mode says: the preset
// reproduces it (token-mean, token-sum and seq-mean-token-sum-norm cases give veRL's
// value), clip_ratio_low / high falling back on clip_ratio.
TEST(GspoLoss, VerlV2EveryCase) {
  std::size_t global = 0, weighted = 0;
  for_each_verl_v2_case("gspo", [&](const auto& c) {
    const auto options = std::get<cr::gspo_options>(verl::policy_loss("gspo", c.actor()));
    EXPECT_EQ(options.aggregation, cr::loss_aggregation::seq_mean_token_mean) << c.context;
    const auto layout = c.batch.layout();
    std::vector<typename decltype(c.log_probs)::value_type> grad(layout.tokens(), -7);
    const auto result = cr::gspo_loss(exec::seq, layout, c.ratio_inputs(), grad,
                                      c.normalizer(options.aggregation), options);
    c.expect_loss_and_gradient(result.loss, grad);
    c.expect_reported_metrics(result.metrics);
    global += c.dp_size() != 1.0;
    weighted += !c.rollout_is_weights.empty();
  });
  EXPECT_GT(global, 0u);
  EXPECT_GT(weighted, 0u);
}

// The shipped reference exercises the bound at 10 (P4); another draw may not, and is
// reported (BoundStopsTheGradient builds the case by hand).
TEST(GspoLoss, VerlV2ExercisesTheBound) {
  const auto reference = load_reference("verl_core_algos_v2.json");
  bool bounded = false;
  for (const auto& item : reference["policy_loss_batches"].items()) {
    const auto& batch = item.value();
    const auto layout = padded_from_mask(batch["response_mask"]);
    const auto lp = flatten<double>(batch["log_prob"]);
    const auto old = flatten<double>(batch["old_log_prob"]);
    for (std::size_t s = 0; s < layout.rows; ++s)
      bounded |= cr::terms::sequence_mean_log_ratio(lp.data(), old.data(), layout.mask.data(),
                                                    layout.layout().begin(s),
                                                    layout.layout().end(s)) > 10;
  }
  cr::testing::expect_reference_exercises(bounded, "GSPO's bound on the mean log-ratio (10)");
}

// ---- hand-computed ---------------------------------------------------------------------

// Two sequences: [0.1, 0.3] (mean 0.2 -> s = e^0.2 > 1.2, clipped for A > 0) and
// [-0.05, masked, 0.05] (mean 0 -> s = 1, unclipped).
TEST(GspoLoss, HandComputedTwoSequences) {
  const std::vector<std::int64_t> offsets{0, 2, 5};
  const std::vector<std::uint8_t> mask{1, 1, 1, 0, 1};
  const cr::token_layout layout(offsets, mask);
  const std::vector<double> old{-1.0, -2.0, -1.0, -3.0, -2.0};
  const std::vector<double> lp{-0.9, -1.7, -1.05, 5.0, -1.95};
  const std::vector<double> adv{1.0, 2.0, -1.0, 4.0, 0.5};
  std::vector<double> grad(5, -7);
  const auto counts = cr::local_loss_counts(exec::seq, layout);
  const auto normalizer = counts.normalizer(cr::loss_aggregation::token_sum, 1.0);
  const auto r = cr::gspo_loss(
      exec::seq, layout, {.log_probs = lp, .old_log_probs = old, .advantages = adv}, grad,
      normalizer, cr::gspo_options{.aggregation = cr::loss_aggregation::token_sum});
  const double s0 = std::exp((0.1 + 0.3) / 2);
  ASSERT_GT(s0, 1.2);
  // Sequence 0: A > 0 and s > 1.2: l = -A * 1.2, gradient 0. Sequence 1: s = e^0 = 1.
  const double s1 = std::exp((-0.05 + 0.05) / 2);
  const double expected = -1.0 * 1.2 - 2.0 * 1.2 + 1.0 * s1 - 0.5 * s1;
  EXPECT_NEAR(r.loss, expected, 1e-15);
  EXPECT_EQ(grad[0], 0.0);
  EXPECT_EQ(grad[1], 0.0);
  EXPECT_NEAR(grad[2], 1.0 * s1, 1e-15);
  EXPECT_EQ(grad[3], 0.0);
  EXPECT_NEAR(grad[4], -0.5 * s1, 1e-15);
  EXPECT_EQ(r.metrics.valid_tokens, 4u);
  EXPECT_EQ(r.metrics.clipped, 2u);
  EXPECT_EQ(r.metrics.dual_clipped, 0u);
  EXPECT_NEAR(r.metrics.approx_kl(), -(0.1 + 0.3 - 0.05 + 0.05) / 4, 1e-15);
}

// Above the bound the ratio is e^bound and the gradient 0 (torch.clamp's).
TEST(GspoLoss, BoundStopsTheGradient) {
  const std::vector<std::int64_t> offsets{0, 2};
  const cr::token_layout layout(offsets);
  const std::vector<double> old{-30.0, -20.0}, lp{-1.0, -1.0}, adv{-1.0, -1.0};
  std::vector<double> grad(2, -7);
  const auto r =
      cr::gspo_loss(exec::seq, layout, {.log_probs = lp, .old_log_probs = old, .advantages = adv},
                    grad, cr::loss_normalizer{.mode = cr::loss_aggregation::token_sum},
                    cr::gspo_options{.aggregation = cr::loss_aggregation::token_sum});
  EXPECT_DOUBLE_EQ(r.loss, 2 * std::exp(10.0));
  EXPECT_EQ(grad[0], 0.0);
  EXPECT_EQ(grad[1], 0.0);
}

// ---- finite differences ----------------------------------------------------------------

// With one advantage (and one given weight) per sequence, the token gradient of GSPO's
// stop-gradient form equals the gradient of the loss's own forward value, the mean
// log-ratio included: every token of a row has the same loss l(m) and weight c, and
// sum_u c * dl/dm * (1/n) = c * dl/dm = c * (-A s) (ds/dm = s). So central differences of
// gspo_loss itself, in double, every mode, with and without weights. A step moves m by
// h / n; tokens whose s is within 1e-4 of a clip edge are skipped (the difference would
// straddle the kink). Tolerance: central differences err by h^2 |f'''| / 6 ~ 1e-12 and
// by 2 ulp(|L|) / (2h) ~ 1e-10 of rounding; 1e-7 covers both with room.
TEST(GspoLoss, FiniteDifferencesOfTheForwardValueEveryMode) {
  std::uint64_t seed = 7;
  for (const auto mode : cr::testing::all_aggregation_modes) {
    for (const bool weighted : {false, true}) {
      auto batch = cr::testing::make_random_batch<double>(seed++, {.sequences = 12});
      const auto layout = batch.layout();
      std::mt19937_64 rng(seed);
      std::normal_distribution<double> normal(0.0, 1.0);
      std::uniform_real_distribution<double> unit(0.5, 1.5);
      std::vector<double> weights(weighted ? batch.tokens() : 0);
      for (std::size_t s = 0; s < layout.sequences(); ++s) {
        const double a = normal(rng), w = unit(rng);
        for (std::size_t t = layout.begin(s); t < layout.end(s); ++t) {
          batch.advantages[t] = a;
          if (weighted) weights[t] = w;
        }
      }
      const auto counts = cr::local_loss_counts(exec::seq, layout);
      const auto normalizer = counts.normalizer(mode, 9.0);
      const cr::gspo_options options{.clip_low = 0.1, .clip_high = 0.15, .aggregation = mode};
      const auto loss_at = [&](const std::vector<double>& lp, std::vector<double>& grad) {
        return cr::gspo_loss(exec::seq, layout,
                             {.log_probs = lp,
                              .old_log_probs = batch.old_log_probs,
                              .advantages = batch.advantages,
                              .rollout_is_weights = weights},
                             grad, normalizer, options)
            .loss;
      };
      std::vector<double> grad(batch.tokens()), scratch(batch.tokens());
      (void)loss_at(batch.log_probs, grad);
      const double h = 1e-6;
      std::size_t checked = 0;
      for (std::size_t s = 0; s < layout.sequences(); ++s) {
        const double m =
            cr::terms::sequence_mean_log_ratio(batch.log_probs.data(), batch.old_log_probs.data(),
                                               batch.mask.data(), layout.begin(s), layout.end(s));
        const double ratio = std::exp(m);
        if (std::abs(ratio - 0.9) < 1e-4 || std::abs(ratio - 1.15) < 1e-4) continue;
        for (std::size_t t = layout.begin(s); t < layout.end(s); ++t) {
          if (!layout.valid(t)) continue;
          auto up = batch.log_probs, down = batch.log_probs;
          up[t] += h;
          down[t] -= h;
          const double fd = (loss_at(up, scratch) - loss_at(down, scratch)) / (2 * h);
          EXPECT_NEAR(grad[t], fd, 1e-7) << cr::to_string(mode) << " token " << t;
          ++checked;
        }
      }
      EXPECT_GT(checked, 20u);
    }
  }
}

// ---- partition invariance --------------------------------------------------------------

// veRL's form without global_batch_info divides each micro-batch by its own count of
// sequences (agg_loss's local seq-mean-token-mean, which GSPO always uses): micro-batches
// of different sizes, averaged as gradient accumulation averages them, do not give the
// whole batch's loss. The same slices with the step's normaliser do
// (test_partition_invariance.cpp's ratio-loss table).
TEST(GspoLoss, VerlLocalNormalisationIsNotPartitionInvariant) {
  const auto batch = cr::testing::make_random_batch<double>(
      3, {.sequences = 8, .max_length = 10, .masked_probability = 0, .empty_probability = 0});
  const auto layout = batch.layout();
  const auto options = verl::gspo();
  const auto run = [&](const cr::token_layout& l, std::span<const double> lp,
                       std::span<const double> old, std::span<const double> adv) {
    std::vector<double> grad(l.tokens());
    return cr::gspo_loss(exec::seq, l, {.log_probs = lp, .old_log_probs = old, .advantages = adv},
                         grad, verl::single_rank_normalizer(exec::seq, l, options.aggregation, 10),
                         options)
        .loss;
  };
  const double whole = run(layout, batch.log_probs, batch.old_log_probs, batch.advantages);
  const auto first = cr::testing::slice_sequences(layout, 0, 1);
  const auto rest = cr::testing::slice_sequences(layout, 1, 8);
  const double accumulated = (run(first.layout(), first.of(batch.log_probs),
                                  first.of(batch.old_log_probs), first.of(batch.advantages)) +
                              run(rest.layout(), rest.of(batch.log_probs),
                                  rest.of(batch.old_log_probs), rest.of(batch.advantages))) /
                             2;
  EXPECT_GT(std::abs(accumulated - whole), 1e-3 * (1 + std::abs(whole)));
}

// ---- refusals --------------------------------------------------------------------------

TEST(GspoLoss, RefusesBadOptionsAndInputsNamingArgumentAndIndex) {
  const std::vector<std::int64_t> offsets{0, 3, 5};
  const std::vector<std::uint8_t> mask{1, 1, 0, 1, 1};
  const cr::token_layout layout(offsets, mask);
  const std::vector<double> lp{-1, -1, -1, -1, -1}, old{-1.1, -0.9, -1, -1, -1.2},
      adv{1, 1, 1, -1, -1};
  std::vector<double> grad(5);
  const auto normalizer =
      cr::local_loss_counts(exec::seq, layout).normalizer(cr::loss_aggregation::token_mean);
  const auto run = [&](const cr::policy_ratio_inputs<double>& inputs,
                       const cr::gspo_options& options = {}) {
    (void)cr::gspo_loss(exec::seq, layout, inputs, grad, normalizer, options);
  };
  const cr::policy_ratio_inputs<double> good{
      .log_probs = lp, .old_log_probs = old, .advantages = adv};
  using cr::testing::expect_error_naming;
  expect_error_naming([&] { run(good, {.clip_low = 1.0}); }, "options.clip_low");
  expect_error_naming([&] { run(good, {.clip_high = -0.1}); }, "options.clip_high");
  expect_error_naming([&] { run(good, {.log_ratio_bound = NAN}); }, "options.log_ratio_bound");
  const std::vector<double> short_lp{-1, -1};
  expect_error_naming(
      [&] { run({.log_probs = short_lp, .old_log_probs = old, .advantages = adv}); }, "log_probs",
      "one per token");
  expect_error_naming([&] { run({.log_probs = lp, .old_log_probs = short_lp, .advantages = adv}); },
                      "old_log_probs", "one per token");
  expect_error_naming([&] { run({.log_probs = lp, .old_log_probs = old, .advantages = short_lp}); },
                      "advantages", "one per token");
  auto bad = lp;
  bad[3] = NAN;
  expect_error_naming([&] { run({.log_probs = bad, .old_log_probs = old, .advantages = adv}); },
                      "log_probs[3]", "NaN");
  bad = old;
  bad[4] = INFINITY;
  expect_error_naming([&] { run({.log_probs = lp, .old_log_probs = bad, .advantages = adv}); },
                      "old_log_probs[4]", "infinite");
  bad = adv;
  bad[1] = NAN;
  expect_error_naming([&] { run({.log_probs = lp, .old_log_probs = old, .advantages = bad}); },
                      "advantages[1]", "NaN");
  bad = std::vector<double>(5, 1.0);
  bad[0] = NAN;
  expect_error_naming(
      [&] {
        run({.log_probs = lp, .old_log_probs = old, .advantages = adv, .rollout_is_weights = bad});
      },
      "rollout_is_weights[0]", "NaN");
  // A NaN on a masked token is never read.
  bad = lp;
  bad[2] = NAN;
  EXPECT_NO_THROW(run({.log_probs = bad, .old_log_probs = old, .advantages = adv}));
  std::vector<double> short_grad(3);
  expect_error_naming([&] { (void)cr::gspo_loss(exec::seq, layout, good, short_grad, normalizer); },
                      "grad_out");
}

TEST(GspoLoss, PresetAndName) {
  const auto preset = verl::gspo(3e-4, 4e-4);
  EXPECT_EQ(preset.clip_low, 3e-4);
  EXPECT_EQ(preset.clip_high, 4e-4);
  EXPECT_EQ(preset.log_ratio_bound, 10.0);
  EXPECT_EQ(preset.aggregation, cr::loss_aggregation::seq_mean_token_mean);
  const auto named = std::get<cr::gspo_options>(
      verl::policy_loss("gspo", {.loss_agg_mode = "token-sum", .clip_ratio = 0.1}));
  EXPECT_EQ(named.clip_low, 0.1);
  EXPECT_EQ(named.clip_high, 0.1);
  EXPECT_EQ(named.aggregation, cr::loss_aggregation::seq_mean_token_mean);
  EXPECT_EQ(cr::gspo_options{}.aggregation, cr::loss_aggregation::token_mean);
}

// ---- geo_mean (GMPO) --------------------------------------------------------------------

// veRL's GMPO is the plain mean of the row losses over all N rows, fully masked ones
// included, whatever loss_agg_mode says and ignoring global_batch_info (dp_size too: the
// global_batch_info cases give the local value): the preset with geo_mean_normalizer
// reproduces every case, and clip_ratio_low / high fall back on clip_ratio.
TEST(GeoMeanLoss, VerlV2EveryCase) {
  std::size_t global = 0, weighted = 0;
  for_each_verl_v2_case("geo_mean", [&](const auto& c) {
    const auto options = std::get<cr::geo_mean_options>(verl::policy_loss("geo_mean", c.actor()));
    EXPECT_EQ(options.aggregation, cr::loss_aggregation::seq_mean_token_mean) << c.context;
    const auto layout = c.batch.layout();
    std::vector<typename decltype(c.log_probs)::value_type> grad(layout.tokens(), -7);
    const auto result = cr::geo_mean_loss(exec::seq, layout, c.ratio_inputs(), grad,
                                          verl::geo_mean_normalizer(layout), options);
    c.expect_loss_and_gradient(result.loss, grad, 1.0);
    c.expect_reported_metrics(result.metrics);
    global += c.dp_size() != 1.0;
    weighted += !c.rollout_is_weights.empty();
  });
  EXPECT_GT(global, 0u);
  EXPECT_GT(weighted, 0u);
}

// One row of three tokens, A > 0 on all: x = (0.1, 0.5, -0.6) with clip 0.2: k = (0.1, 0.2,
// -0.6) (A > 0 clips from above only); a second row with A < 0: x = (0.5, -0.6), k = (0.5,
// -0.2). Token-sum: each row's loss times its valid tokens.
TEST(GeoMeanLoss, HandComputedTwoSequences) {
  const std::vector<std::int64_t> offsets{0, 3, 5};
  const cr::token_layout layout(offsets);
  const std::vector<double> old{-1.0, -1.0, -1.0, -1.0, -1.0};
  const std::vector<double> lp{-0.9, -0.5, -1.6, -0.5, -1.6};
  const std::vector<double> adv{1.0, 2.0, 3.0, -1.0, -3.0};
  std::vector<double> grad(5, -7);
  const auto r = cr::geo_mean_loss(
      exec::seq, layout, {.log_probs = lp, .old_log_probs = old, .advantages = adv}, grad,
      cr::loss_normalizer{.mode = cr::loss_aggregation::token_sum},
      cr::geo_mean_options{.aggregation = cr::loss_aggregation::token_sum});
  const double l0 = -2.0 * std::exp((0.1 + 0.2 - 0.6) / 3);
  const double l1 = 2.0 * std::exp((0.5 - 0.2) / 2);
  EXPECT_NEAR(r.loss, 3 * l0 + 2 * l1, 1e-14);
  EXPECT_NEAR(grad[0], l0, 1e-15);
  EXPECT_EQ(grad[1], 0.0);  // held at clip_high
  EXPECT_NEAR(grad[2], l0, 1e-15);
  EXPECT_NEAR(grad[3], l1, 1e-15);
  EXPECT_EQ(grad[4], 0.0);                // held at -clip_low
  EXPECT_EQ(r.metrics.clipped, 2u);       // A > 0 beyond a bound: tokens 1 and 2
  EXPECT_EQ(r.metrics.dual_clipped, 2u);  // A < 0: tokens 3 and 4
}

// GMPO's token form has no stop-gradient: the token gradient is that of the loss's own
// value in every mode, per-token advantages and weights included (each row's tokens
// share one aggregation weight c, so the row enters as n c l_i and d(n c l_i)/dlogp_t =
// c l_i dk_t/dlogp_t). Central differences of geo_mean_loss in double; tokens within
// 1e-4 of a clip edge are skipped. Tolerance as for GSPO's: 1e-7.
TEST(GeoMeanLoss, FiniteDifferencesEveryModeWithAndWithoutWeights) {
  std::uint64_t seed = 17;
  for (const auto mode : cr::testing::all_aggregation_modes) {
    for (const bool weighted : {false, true}) {
      const auto batch = cr::testing::make_random_batch<double>(seed++, {.sequences = 12});
      const auto layout = batch.layout();
      const auto weights =
          weighted ? cr::testing::rollout_is_weights_of(batch) : std::vector<double>{};
      const auto normalizer = cr::local_loss_counts(exec::seq, layout).normalizer(mode, 9.0);
      const cr::geo_mean_options options{.clip_low = 0.1, .clip_high = 0.15, .aggregation = mode};
      const auto loss_at = [&](const std::vector<double>& lp, std::vector<double>& grad) {
        return cr::geo_mean_loss(exec::seq, layout,
                                 {.log_probs = lp,
                                  .old_log_probs = batch.old_log_probs,
                                  .advantages = batch.advantages,
                                  .rollout_is_weights = weights},
                                 grad, normalizer, options)
            .loss;
      };
      std::vector<double> grad(batch.tokens()), scratch(batch.tokens());
      (void)loss_at(batch.log_probs, grad);
      const double h = 1e-6;
      std::size_t checked = 0;
      for (std::size_t t = 0; t < batch.tokens(); ++t) {
        if (!layout.valid(t)) continue;
        const double x = batch.log_probs[t] - batch.old_log_probs[t];
        if (std::abs(x - 0.15) < 1e-4 || std::abs(x + 0.1) < 1e-4) continue;
        auto up = batch.log_probs, down = batch.log_probs;
        up[t] += h;
        down[t] -= h;
        const double fd = (loss_at(up, scratch) - loss_at(down, scratch)) / (2 * h);
        EXPECT_NEAR(grad[t], fd, 1e-7) << cr::to_string(mode) << " token " << t;
        ++checked;
      }
      EXPECT_GT(checked, 20u);
    }
  }
}

// veRL's GMPO is each micro-batch's own mean over its rows (global_batch_info ignored):
// micro-batches of different sizes, averaged, do not give the whole batch's mean.
TEST(GeoMeanLoss, VerlMeanOverRowsIsNotPartitionInvariant) {
  const auto batch = cr::testing::make_random_batch<double>(
      5, {.sequences = 8, .max_length = 10, .masked_probability = 0, .empty_probability = 0});
  const auto layout = batch.layout();
  const auto options = verl::geo_mean();
  const auto run = [&](const cr::testing::batch_slice& s) {
    std::vector<double> grad(s.token_end - s.token_begin);
    return cr::geo_mean_loss(exec::seq, s.layout(),
                             {.log_probs = s.of(batch.log_probs),
                              .old_log_probs = s.of(batch.old_log_probs),
                              .advantages = s.of(batch.advantages)},
                             grad, verl::geo_mean_normalizer(s.layout()), options)
        .loss;
  };
  const double whole = run(cr::testing::slice_sequences(layout, 0, 8));
  const double accumulated = (run(cr::testing::slice_sequences(layout, 0, 1)) +
                              run(cr::testing::slice_sequences(layout, 1, 8))) /
                             2;
  EXPECT_GT(std::abs(accumulated - whole), 1e-3 * (1 + std::abs(whole)));
}

TEST(GeoMeanLoss, RefusesBadOptionsAndInputsNamingArgumentAndIndex) {
  const std::vector<std::int64_t> offsets{0, 3, 5};
  const std::vector<std::uint8_t> mask{1, 1, 0, 1, 1};
  const cr::token_layout layout(offsets, mask);
  const std::vector<double> lp{-1, -1, -1, -1, -1}, old{-1.1, -0.9, -1, -1, -1.2},
      adv{1, 1, 1, -1, -1};
  std::vector<double> grad(5);
  const auto normalizer =
      cr::local_loss_counts(exec::seq, layout).normalizer(cr::loss_aggregation::token_mean);
  const auto run = [&](const cr::policy_ratio_inputs<double>& inputs,
                       const cr::geo_mean_options& options = {}) {
    (void)cr::geo_mean_loss(exec::seq, layout, inputs, grad, normalizer, options);
  };
  const cr::policy_ratio_inputs<double> good{
      .log_probs = lp, .old_log_probs = old, .advantages = adv};
  using cr::testing::expect_error_naming;
  expect_error_naming([&] { run(good, {.clip_low = -0.1}); }, "options.clip_low");
  expect_error_naming([&] { run(good, {.clip_high = NAN}); }, "options.clip_high");
  const std::vector<double> short_v{-1, -1};
  expect_error_naming([&] { run({.log_probs = short_v, .old_log_probs = old, .advantages = adv}); },
                      "log_probs", "one per token");
  expect_error_naming([&] { run({.log_probs = lp, .old_log_probs = lp, .advantages = short_v}); },
                      "advantages", "one per token");
  expect_error_naming(
      [&] {
        run({.log_probs = lp,
             .old_log_probs = old,
             .advantages = adv,
             .rollout_is_weights = short_v});
      },
      "rollout_is_weights", "one per token");
  auto bad = old;
  bad[4] = INFINITY;
  expect_error_naming([&] { run({.log_probs = lp, .old_log_probs = bad, .advantages = adv}); },
                      "old_log_probs[4]", "infinite");
  bad = std::vector<double>(5, 1.0);
  bad[3] = NAN;
  expect_error_naming(
      [&] {
        run({.log_probs = lp, .old_log_probs = old, .advantages = adv, .rollout_is_weights = bad});
      },
      "rollout_is_weights[3]", "NaN");
  bad = lp;
  bad[2] = NAN;  // masked: never read
  EXPECT_NO_THROW(run({.log_probs = bad, .old_log_probs = old, .advantages = adv}));
  std::vector<double> short_grad(3);
  expect_error_naming(
      [&] { (void)cr::geo_mean_loss(exec::seq, layout, good, short_grad, normalizer); },
      "grad_out");
}

TEST(GeoMeanLoss, PresetAndName) {
  const auto named = std::get<cr::geo_mean_options>(
      verl::policy_loss("geo_mean", {.loss_agg_mode = "token-sum", .clip_ratio = 0.1}));
  EXPECT_EQ(named.clip_low, 0.1);
  EXPECT_EQ(named.clip_high, 0.1);
  EXPECT_EQ(named.aggregation, cr::loss_aggregation::seq_mean_token_mean);
  const std::vector<std::int64_t> offsets{0, 2, 2, 5};
  const cr::token_layout layout(offsets);
  EXPECT_EQ(verl::geo_mean_normalizer(layout).sequences, 3.0);  // the empty row counts
  EXPECT_EQ(cr::geo_mean_options{}.aggregation, cr::loss_aggregation::token_mean);
}

// ---- sequence SAPO ----------------------------------------------------------------------

// Two rows by hand, token-sum: row 0's ratio s0 = exp(mean(0.1, 0.5)) with A = 1, -2 (tau
// 1 and 1.05); row 1 has one valid token of its two. Each token's value is -A g(s), and
// every valid token of a row carries the row's summed -A g'(s) times s / n.
TEST(SequenceSapoLoss, HandComputedTwoRows) {
  const std::vector<std::int64_t> offsets{0, 2, 4};
  const std::vector<std::uint8_t> mask{1, 1, 0, 1};
  const cr::token_layout layout(offsets, mask);
  const std::vector<double> old{-1.0, -1.0, -1.0, -1.0};
  const std::vector<double> lp{-0.9, -0.5, 5.0, -1.3};
  const std::vector<double> adv{1.0, -2.0, 9.0, 0.5};
  std::vector<double> grad(4, -7);
  const cr::sequence_sapo_options options{
      .tau_pos = 1.0, .tau_neg = 1.05, .aggregation = cr::loss_aggregation::token_sum};
  const auto r = cr::sequence_sapo_loss(
      exec::seq, layout, {.log_probs = lp, .old_log_probs = old, .advantages = adv}, grad,
      cr::loss_normalizer{.mode = cr::loss_aggregation::token_sum}, options);
  const auto sigmoid = [](double x) { return 1.0 / (1.0 + std::exp(-x)); };
  const double s0 = std::exp((0.1 + 0.5) / 2), s1 = std::exp(-0.3);
  const double g0 = sigmoid(1.0 * (s0 - 1)), g1 = sigmoid(1.05 * (s0 - 1));
  const double g2 = sigmoid(1.0 * (s1 - 1));
  const double loss0 = -1.0 * g0 * 4 / 1.0, loss1 = 2.0 * g1 * 4 / 1.05;
  const double loss3 = -0.5 * g2 * 4 / 1.0;
  EXPECT_NEAR(r.loss, loss0 + loss1 + loss3, 1e-14);
  const double row0 = (-1.0 * 4 * g0 * (1 - g0) + 2.0 * 4 * g1 * (1 - g1)) * s0 / 2;
  const double row1 = -0.5 * 4 * g2 * (1 - g2) * s1 / 1;
  EXPECT_NEAR(grad[0], row0, 1e-14);
  EXPECT_EQ(grad[1], grad[0]);  // the row's gradient on each of its valid tokens
  EXPECT_EQ(grad[2], 0.0);      // masked
  EXPECT_NEAR(grad[3], row1, 1e-14);
  EXPECT_EQ(r.metrics.valid_tokens, 3u);
  EXPECT_EQ(r.metrics.clipped, 0u);
  EXPECT_NEAR(r.metrics.approx_kl_sum, -0.1 - 0.5 + 0.3, 1e-15);
}

// No stop-gradient anywhere: the token gradients are those of the loss's own forward value
// in every mode (each row's tokens share one aggregation weight). Central differences in
// double with per-token advantages of both signs (random_batch's), tolerance 1e-7 as GSPO's.
TEST(SequenceSapoLoss, FiniteDifferencesOfTheForwardValueEveryMode) {
  std::uint64_t seed = 31;
  for (const auto mode : cr::testing::all_aggregation_modes) {
    const auto batch = cr::testing::make_random_batch<double>(seed++, {.sequences = 12});
    const auto layout = batch.layout();
    const auto normalizer = cr::local_loss_counts(exec::seq, layout).normalizer(mode, 9.0);
    const cr::sequence_sapo_options options{.tau_pos = 0.8, .tau_neg = 1.3, .aggregation = mode};
    const auto loss_at = [&](const std::vector<double>& lp, std::vector<double>& grad) {
      return cr::sequence_sapo_loss(
                 exec::seq, layout,
                 {.log_probs = lp, .old_log_probs = batch.old_log_probs, .advantages = batch.advantages},
                 grad, normalizer, options)
          .loss;
    };
    std::vector<double> grad(batch.tokens()), scratch(batch.tokens());
    (void)loss_at(batch.log_probs, grad);
    const double h = 1e-6;
    std::size_t checked = 0;
    for (std::size_t t = 0; t < batch.tokens(); ++t) {
      if (!layout.valid(t)) continue;
      auto up = batch.log_probs, down = batch.log_probs;
      up[t] += h;
      down[t] -= h;
      const double fd = (loss_at(up, scratch) - loss_at(down, scratch)) / (2 * h);
      EXPECT_NEAR(grad[t], fd, 1e-7) << cr::to_string(mode) << " token " << t;
      ++checked;
    }
    EXPECT_GT(checked, 20u);
  }
}

TEST(SequenceSapoLoss, RefusesBadOptionsAndInputsNamingArgumentAndIndex) {
  const std::vector<std::int64_t> offsets{0, 3, 5};
  const std::vector<std::uint8_t> mask{1, 1, 0, 1, 1};
  const cr::token_layout layout(offsets, mask);
  const std::vector<double> lp{-1, -1, -1, -1, -1}, old{-1.1, -0.9, -1, -1, -1.2},
      adv{1, 1, 1, -1, -1}, weights(5, 1.0);
  std::vector<double> grad(5);
  const auto normalizer =
      cr::local_loss_counts(exec::seq, layout).normalizer(cr::loss_aggregation::token_mean);
  const auto run = [&](const cr::policy_ratio_inputs<double>& inputs,
                       const cr::sequence_sapo_options& options = {}) {
    (void)cr::sequence_sapo_loss(exec::seq, layout, inputs, grad, normalizer, options);
  };
  const cr::policy_ratio_inputs<double> good{
      .log_probs = lp, .old_log_probs = old, .advantages = adv};
  using cr::testing::expect_error_naming;
  expect_error_naming([&] { run(good, {.tau_pos = 0}); }, "options.tau_pos");
  expect_error_naming([&] { run(good, {.tau_neg = INFINITY}); }, "options.tau_neg");
  expect_error_naming(
      [&] {
        run({.log_probs = lp, .old_log_probs = old, .advantages = adv, .rollout_is_weights = weights});
      },
      "inputs.rollout_is_weights", "sequence_sapo takes none");
  auto bad = adv;
  bad[3] = NAN;
  expect_error_naming([&] { run({.log_probs = lp, .old_log_probs = old, .advantages = bad}); },
                      "advantages[3]", "NaN");
  bad = lp;
  bad[2] = NAN;  // masked: never read
  EXPECT_NO_THROW(run({.log_probs = bad, .old_log_probs = old, .advantages = adv}));
  // The entry point runs it, and refuses its options as the named function does.
  std::vector<double> via_entry(5);
  const auto r = cr::policy_loss(exec::seq, layout, cr::policy_loss_inputs<double>{
      .log_probs = lp, .old_log_probs = old, .advantages = adv}, via_entry, normalizer,
      cr::sequence_sapo_options{});
  run(good);
  EXPECT_EQ(via_entry, grad);
  EXPECT_TRUE(std::isfinite(r.loss));
  expect_error_naming(
      [&] {
        (void)cr::policy_loss(exec::seq, layout,
                              cr::policy_loss_inputs<double>{.log_probs = lp,
                                                             .old_log_probs = old,
                                                             .advantages = adv,
                                                             .rollout_is_weights = weights},
                              via_entry, normalizer, cr::sequence_sapo_options{});
      },
      "inputs.rollout_is_weights");
}

}  // namespace sequence_ratio_losses_cases
}  // namespace
