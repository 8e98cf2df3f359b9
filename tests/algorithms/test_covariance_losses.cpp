// Clip-Cov (veRL compute_policy_loss_clip_cov) on the host executors: every v2 case of
// verl_core_algos_v2.json replaying veRL's own selection (tests/reference/README_v2.md),
// our seeded selection (candidates, determinism, executors), finite differences with the
// selection held fixed, seq/par bitwise, micro-batches (not invariant under a per-call
// draw, invariant under a fixed global selection) and refusals.

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "cascade_rl/algorithms/covariance_losses.hpp"
#include "cascade_rl/algorithms/loss_aggregation.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/presets/verl_losses.hpp"
#include "cascade_rl/presets/verl_names.hpp"
#include "support/covariance_loss_properties.hpp"
#include "support/expect_error.hpp"
#include "support/random_batch.hpp"
#include "support/reference.hpp"
#include "support/verl_v2_case.hpp"

namespace {
namespace covariance_losses_cases {  // this file's names, apart in the area's unity build

namespace exec = cascade_rl::exec;
namespace verl = cascade_rl::presets::verl;
using cascade_rl::clip_cov_options;
using cascade_rl::loss_aggregation;
using cascade_rl::policy_ratio_inputs;
using cascade_rl::token_selection;
using cascade_rl::testing::expect_all_close;
using cascade_rl::testing::expect_close;
using cascade_rl::testing::expect_error_naming;
using cascade_rl::testing::flatten;
using cascade_rl::testing::load_reference;
using cascade_rl::testing::padded_from_mask;

// ---- v2 reference cases ---------------------------------------------------------------

template <class T>
using clip_cov_case = cascade_rl::testing::verl_v2_case<T>;

template <class Check>
void for_each_clip_cov_case(const Check& check) {
  cascade_rl::testing::for_each_verl_v2_case("clip_cov", check);
}

template <class T>
void check_replayed_case(const clip_cov_case<T>& c) {
  const auto options = std::get<clip_cov_options>(verl::policy_loss("clip_cov", c.actor()));
  const auto layout = c.batch.layout();
  const auto& selection = c.json["selection"];
  std::vector<std::size_t> given = c.tokens_of(selection["selected_tokens"]);
  std::vector<T> grad(layout.tokens(), T(-7));
  std::vector<std::size_t> reported(layout.tokens() + 1, 12345);
  const auto result = cascade_rl::clip_cov_loss(
      exec::seq, layout, c.ratio_inputs(), token_selection::replay(given), grad,
      c.normalizer(options.aggregation), options, std::span<std::size_t>(reported));
  c.expect_loss_and_gradient(result.loss, grad);
  c.expect_reported_metrics(result.metrics);
  std::sort(given.begin(), given.end());
  ASSERT_EQ(result.metrics.clipped, given.size()) << c.context;
  for (std::size_t k = 0; k < given.size(); ++k) EXPECT_EQ(reported[k], given[k]) << c.context;
  EXPECT_EQ(reported[given.size()], 12345u) << c.context << ": wrote past the selection";
}

TEST(ClipCov, EveryV2CaseReplayingVerlsSelection) {
  for_each_clip_cov_case([](const auto& c) { check_replayed_case(c); });
}

// Our seeded draw takes every candidate when clip_num covers them: with clip_cov_ratio 1
// the selection is veRL's candidate set (valid, PPO's clip inactive, lb < cov < ub, the
// means over the call's valid tokens), for any seed. Where veRL's case is deterministic
// (every candidate selected or none) our seeded draw with its own options gives veRL's
// selection, so the whole case is recomputed without replay.
template <class T>
void check_seeded_candidates(const clip_cov_case<T>& c) {
  auto options = std::get<clip_cov_options>(verl::policy_loss("clip_cov", c.actor()));
  const auto layout = c.batch.layout();
  const auto& selection = c.json["selection"];
  std::vector<std::size_t> candidates = c.tokens_of(selection["candidate_tokens"]);
  std::sort(candidates.begin(), candidates.end());
  if (selection["deterministic"].template get<bool>()) {
    std::vector<std::size_t> want = c.tokens_of(selection["selected_tokens"]);
    std::sort(want.begin(), want.end());
    for (const std::uint64_t seed : {0ull, 7ull, 0xFFFFFFFFFFFFFFFFull})
      EXPECT_EQ(
          cascade_rl::clip_cov_seeded_selection(exec::seq, layout, c.ratio_inputs(), seed, options),
          want)
          << c.context << " seed " << seed;
    std::vector<T> grad(layout.tokens());
    const auto result =
        cascade_rl::clip_cov_loss(exec::seq, layout, c.ratio_inputs(), token_selection::seeded(3),
                                  grad, c.normalizer(options.aggregation), options);
    expect_close(result.loss * c.dp_size(), c.json["loss"].template get<double>(),
                 c.context + " seeded loss",
                 c.json["batch"] == "P4" ? 1e-5 : cascade_rl::testing::reference_rtol,
                 c.json["batch"] == "P4" ? 0.0 : cascade_rl::testing::reference_atol);
  }
  options.clip_cov_ratio = 1.0;
  EXPECT_EQ(cascade_rl::clip_cov_seeded_selection(exec::seq, layout, c.ratio_inputs(), 11, options),
            candidates)
      << c.context;
}

TEST(ClipCov, SeededSelectionFindsVerlsCandidates) {
  for_each_clip_cov_case([](const auto& c) { check_seeded_candidates(c); });
}

// ---- our seeded selection -------------------------------------------------------------

// A batch with many candidates: wide bounds and a high ratio.
clip_cov_options wide_options(double ratio = 0.1) {
  return {.clip_low = 0.2,
          .clip_high = 0.28,
          .clip_cov_ratio = ratio,
          .clip_cov_lb = -1e9,
          .clip_cov_ub = 1e9,
          .aggregation = loss_aggregation::token_mean};
}

template <class T>
policy_ratio_inputs<T> inputs_of(const cascade_rl::testing::random_batch<T>& b,
                                 std::span<const T> weights = {}) {
  return {.log_probs = b.log_probs,
          .old_log_probs = b.old_log_probs,
          .advantages = b.advantages,
          .rollout_is_weights = weights};
}

TEST(ClipCov, SeededSelectionIsDeterministicAndExecutorIndependent) {
  const auto b =
      cascade_rl::testing::make_random_batch<float>(41, {.sequences = 200, .max_length = 40});
  const auto layout = b.layout();
  const auto options = wide_options(0.05);
  const auto counts = cascade_rl::local_loss_counts(exec::seq, layout);
  const std::size_t valid = static_cast<std::size_t>(counts.tokens);
  const std::size_t clip_num = static_cast<std::size_t>(std::floor(0.05 * valid));
  const auto first =
      cascade_rl::clip_cov_seeded_selection(exec::seq, layout, inputs_of(b), 5, options);
  ASSERT_EQ(first.size(), clip_num);
  EXPECT_TRUE(std::is_sorted(first.begin(), first.end()));
  EXPECT_EQ(cascade_rl::clip_cov_seeded_selection(exec::seq, layout, inputs_of(b), 5, options),
            first);
  for (const std::size_t threads : {2u, 3u, 8u})
    EXPECT_EQ(
        cascade_rl::clip_cov_seeded_selection(exec::par.with_threads(static_cast<int>(threads)),
                                              layout, inputs_of(b), 5, options),
        first)
        << threads << " threads";
  // Another seed draws another subset of the same candidates.
  const auto other =
      cascade_rl::clip_cov_seeded_selection(exec::seq, layout, inputs_of(b), 6, options);
  ASSERT_EQ(other.size(), clip_num);
  EXPECT_NE(other, first);
  auto all = wide_options(1.0);
  const auto candidates =
      cascade_rl::clip_cov_seeded_selection(exec::seq, layout, inputs_of(b), 5, all);
  EXPECT_GT(candidates.size(), clip_num);
  for (const std::size_t t : first)
    EXPECT_TRUE(std::binary_search(candidates.begin(), candidates.end(), t)) << t;
  // The rule itself: the clip_num smallest (key, index) among the candidates.
  std::vector<std::pair<std::uint64_t, std::size_t>> keyed;
  for (const std::size_t t : candidates)
    keyed.emplace_back(cascade_rl::terms::selection_key(5, t), t);
  std::sort(keyed.begin(), keyed.end());
  std::vector<std::size_t> want;
  for (std::size_t k = 0; k < clip_num; ++k) want.push_back(keyed[k].second);
  std::sort(want.begin(), want.end());
  EXPECT_EQ(first, want);
  // The loss reports what it drew.
  std::vector<float> grad(layout.tokens());
  std::vector<std::size_t> reported(clip_num);
  const auto result = cascade_rl::clip_cov_loss(
      exec::seq, layout, inputs_of(b), token_selection::seeded(5), grad,
      counts.normalizer(options.aggregation, 1.0), options, std::span<std::size_t>(reported));
  EXPECT_EQ(result.metrics.clipped, clip_num);
  EXPECT_EQ(reported, first);
}

// SplitMix64's published first outputs for seed 0 and 1234567 (the (t + 1)-th output is
// the key of token t).
TEST(ClipCov, SelectionKeyIsSplitMix64) {
  EXPECT_EQ(cascade_rl::terms::selection_key(0, 0), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(cascade_rl::terms::selection_key(0, 1), 0x6E789E6AA1B965F4ull);
  EXPECT_EQ(cascade_rl::terms::selection_key(1234567, 0), 6457827717110365317ull);
  EXPECT_EQ(cascade_rl::terms::selection_key(1234567, 1), 3203168211198807973ull);
}

// ---- executors, gradient, micro-batches ------------------------------------------------

TEST(ClipCov, SeqAndParAreBitwiseEqual) {
  const auto b =
      cascade_rl::testing::make_random_batch<double>(42, {.sequences = 300, .max_length = 60});
  const auto layout = b.layout();
  cascade_rl::testing::expect_seq_par_bitwise(
      b, 60.0,
      [&](auto policy, const policy_ratio_inputs<double>& in, std::span<double> grad,
          const cascade_rl::loss_normalizer& normalizer, loss_aggregation mode) {
        auto options = wide_options(0.02);
        options.aggregation = mode;
        return cascade_rl::clip_cov_loss(policy, layout, in, token_selection::seeded(9), grad,
                                         normalizer, options);
      });
}

// Central differences in double with the selection held fixed (replayed), skipping
// tokens within the step of the clip's kinks. The loss is piecewise smooth with second
// derivative |A| r / c per token, so the O(h^2) error bound is |A| r h^2 / c with the
// aggregation weight c <= 1: h = 1e-5 gives under 1e-9 against rounding near 1e-11 / h.
TEST(ClipCov, GradientMatchesFiniteDifferences) {
  auto b = cascade_rl::testing::make_random_batch<double>(43, {.sequences = 12, .max_length = 10});
  const auto layout = b.layout();
  const auto weights = cascade_rl::testing::rollout_is_weights_of(b);
  const auto counts = cascade_rl::local_loss_counts(exec::seq, layout);
  auto options = wide_options(0.2);
  const auto selected =
      cascade_rl::clip_cov_seeded_selection(exec::seq, layout, inputs_of(b), 1, options);
  ASSERT_FALSE(selected.empty());
  for (const loss_aggregation mode : cascade_rl::testing::all_aggregation_modes) {
    options.aggregation = mode;
    const auto normalizer = counts.normalizer(mode, 10.0);
    const auto loss_at = [&](std::vector<double>& log_probs) {
      std::vector<double> grad(layout.tokens());
      const policy_ratio_inputs<double> in{.log_probs = log_probs,
                                           .old_log_probs = b.old_log_probs,
                                           .advantages = b.advantages,
                                           .rollout_is_weights = weights};
      return cascade_rl::clip_cov_loss(exec::seq, layout, in, token_selection::replay(selected),
                                       grad, normalizer, options)
          .loss;
    };
    std::vector<double> grad(layout.tokens());
    (void)cascade_rl::clip_cov_loss(exec::seq, layout,
                                    inputs_of(b, std::span<const double>(weights)),
                                    token_selection::replay(selected), grad, normalizer, options);
    const double h = 1e-5;
    std::size_t checked = 0;
    for (std::size_t t = 0; t < layout.tokens(); ++t) {
      const double log_ratio = b.log_probs[t] - b.old_log_probs[t];
      const double near_low = std::abs(std::exp(log_ratio) - (1 - options.clip_low));
      const double near_high = std::abs(std::exp(log_ratio) - (1 + options.clip_high));
      if (std::min(near_low, near_high) < 1e-3) continue;
      std::vector<double> plus = b.log_probs, minus = b.log_probs;
      plus[t] += h;
      minus[t] -= h;
      const double numeric = (loss_at(plus) - loss_at(minus)) / (2 * h);
      EXPECT_NEAR(grad[t], numeric, 1e-6) << "token " << t;
      ++checked;
    }
    EXPECT_GT(checked, layout.tokens() / 2);
  }
}

// Each of four micro-batches draws at least one token where the whole batch draws
// max(floor(0.01 * valid), 1): the draw is per call; a replayed global draw is invariant.
TEST(ClipCov, MicroBatchesChangeTheDrawButNotAFixedSelection) {
  const auto b =
      cascade_rl::testing::make_random_batch<double>(44, {.sequences = 40, .max_length = 20});
  const auto layout = b.layout();
  const auto options = wide_options(0.01);
  const auto normalizer =
      cascade_rl::local_loss_counts(exec::seq, layout).normalizer(options.aggregation, 20.0);
  cascade_rl::testing::expect_micro_batches_change_the_selection_but_not_a_replayed_one(
      b, cascade_rl::clip_cov_seeded_selection(exec::seq, layout, inputs_of(b), 2, options),
      [&](const cascade_rl::token_layout& part, const policy_ratio_inputs<double>& in,
          std::span<double> grad) {
        return cascade_rl::clip_cov_loss(exec::seq, part, in, token_selection::seeded(2), grad,
                                         normalizer, options);
      },
      [&](const cascade_rl::token_layout& part, const policy_ratio_inputs<double>& in,
          std::span<const std::size_t> tokens, std::span<double> grad) {
        return cascade_rl::clip_cov_loss(exec::seq, part, in, token_selection::replay(tokens), grad,
                                         normalizer, options);
      });
}

// ---- refusals ---------------------------------------------------------------------------

TEST(ClipCov, RefusalsNameTheArgumentAndIndex) {
  const auto b =
      cascade_rl::testing::make_random_batch<double>(45, {.sequences = 6, .max_length = 8});
  const auto layout = b.layout();
  const auto counts = cascade_rl::local_loss_counts(exec::seq, layout);
  const auto normalizer = counts.normalizer(loss_aggregation::token_mean, 1.0);
  std::vector<double> grad(layout.tokens());
  std::size_t masked = layout.tokens(), valid = layout.tokens();
  for (std::size_t t = 0; t < layout.tokens(); ++t) {
    if (!layout.valid(t) && masked == layout.tokens()) masked = t;
    if (layout.valid(t) && valid == layout.tokens()) valid = t;
  }
  ASSERT_LT(masked, layout.tokens());
  ASSERT_LT(valid, layout.tokens());
  const auto run = [&](std::vector<std::size_t> tokens, clip_cov_options options = {},
                       std::span<std::size_t> out = {}) {
    (void)cascade_rl::clip_cov_loss(exec::seq, layout, inputs_of(b),
                                    token_selection::replay(tokens), grad, normalizer, options,
                                    out);
  };
  expect_error_naming(
      [&] {
        run({valid, layout.tokens()});
      },
      "selection.tokens[1]", "beyond the " + std::to_string(layout.tokens()) + " tokens");
  expect_error_naming(
      [&] {
        run({valid, masked});
      },
      "selection.tokens[1]", "token " + std::to_string(masked), "mask");
  expect_error_naming([&] { run({valid, valid}); }, "selection.tokens[1]", "repeats");
  expect_error_naming([&] { run({valid}, {.clip_cov_ratio = 0.0}); }, "options.clip_cov_ratio");
  expect_error_naming([&] { run({valid}, {.clip_low = -0.1}); }, "options.clip_low");
  std::vector<std::size_t> none;
  expect_error_naming(
      [&] {
        std::size_t one = 0;
        run({valid, valid + (valid + 1 < layout.tokens() && layout.valid(valid + 1) ? 1 : 0)}, {},
            std::span<std::size_t>(&one, 1));
      },
      "selected_out");
  auto bad = b.advantages;
  bad[valid] = std::nan("");
  expect_error_naming(
      [&] {
        (void)cascade_rl::clip_cov_loss(
            exec::seq, layout,
            policy_ratio_inputs<double>{
                .log_probs = b.log_probs, .old_log_probs = b.old_log_probs, .advantages = bad},
            token_selection::seeded(1), grad, normalizer);
      },
      "advantages[" + std::to_string(valid) + "]");
}

// ---- large batches: the host's selection scan and loss pass ------------------------------

// The seeded draw on a batch of ~140k tokens: every executor draws the rule's tokens (the
// clip_num smallest (key, index) among all candidates, these from a draw of ratio 1 that
// keeps them all), for a few tokens, many and every candidate; the loss has exec::seq's
// bits on exec::par, and a replay of the draw in any order gives the same bits.
TEST(ClipCov, LargeMaskedBatchDrawsTheRuleOnEveryExecutor) {
  const auto b = cascade_rl::testing::tied_batch(61);
  const auto layout = b.layout();
  const auto weights = cascade_rl::testing::rollout_is_weights_of(b);
  ASSERT_GT(layout.tokens(), 8u * 4 * 4096);
  const auto counts = cascade_rl::local_loss_counts(exec::seq, layout);
  const std::size_t valid = static_cast<std::size_t>(counts.tokens);
  for (const clip_cov_options window :
       {wide_options(), clip_cov_options{.clip_cov_lb = -0.05, .clip_cov_ub = 0.3}}) {
    auto all = window;
    all.clip_cov_ratio = 1.0;
    const auto candidates =
        cascade_rl::clip_cov_seeded_selection(exec::seq, layout, inputs_of(b), 8, all);
    ASSERT_GT(candidates.size(), 1000u);
    ASSERT_LT(candidates.size(), valid);
    for (const double ratio : {0.0002, 0.01, 0.3, 2.0}) {
      SCOPED_TRACE("ratio " + std::to_string(ratio) + ", window " +
                   std::to_string(window.clip_cov_lb));
      auto options = window;
      options.clip_cov_ratio = ratio;
      const std::size_t clip_num =
          std::max<std::size_t>(static_cast<std::size_t>(ratio * static_cast<double>(valid)), 1);
      std::vector<std::pair<std::uint64_t, std::size_t>> keyed;
      for (const std::size_t t : candidates)
        keyed.emplace_back(cascade_rl::terms::selection_key(8, t), t);
      std::sort(keyed.begin(), keyed.end());
      std::vector<std::size_t> want;
      for (std::size_t k = 0; k < std::min(clip_num, keyed.size()); ++k)
        want.push_back(keyed[k].second);
      std::sort(want.begin(), want.end());
      EXPECT_EQ(cascade_rl::clip_cov_seeded_selection(exec::seq, layout, inputs_of(b), 8, options),
                want);
      for (const int threads : {2, 3, 8})
        EXPECT_EQ(cascade_rl::clip_cov_seeded_selection(exec::par.with_threads(threads), layout,
                                                        inputs_of(b), 8, options),
                  want)
            << threads << " threads";
      for (const loss_aggregation mode :
           {loss_aggregation::token_mean, loss_aggregation::seq_mean_token_mean}) {
        options.aggregation = mode;
        const auto normalizer = counts.normalizer(mode, 700.0);
        const auto in = inputs_of(b, std::span<const float>(weights));
        std::vector<std::size_t> reported(want.size());
        std::vector<float> seeded_grad(layout.tokens());
        const auto seeded = cascade_rl::clip_cov_loss(
            exec::par.with_threads(3), layout, in, token_selection::seeded(8), seeded_grad,
            normalizer, options, std::span<std::size_t>(reported));
        EXPECT_EQ(seeded.metrics.clipped, want.size());
        EXPECT_EQ(reported, want);
        cascade_rl::testing::expect_same_bits_as_seq(
            layout.tokens(), [&](auto policy, std::span<float> grad) {
              return cascade_rl::clip_cov_loss(policy, layout, in, token_selection::seeded(8), grad,
                                               normalizer, options);
            });
        const auto replay = cascade_rl::testing::shuffled(want, 3);
        std::vector<float> replayed_grad(layout.tokens());
        const auto replayed = cascade_rl::clip_cov_loss(exec::par.with_threads(2), layout, in,
                                                        token_selection::replay(replay),
                                                        replayed_grad, normalizer, options);
        EXPECT_EQ(std::bit_cast<std::uint64_t>(replayed.loss),
                  std::bit_cast<std::uint64_t>(seeded.loss));
        EXPECT_EQ(replayed_grad, seeded_grad);
      }
    }
  }
}

// A NaN or infinite input on a valid token late in a large batch (beyond the first scan
// range of exec::par) is named as before, the first bad input in the order log_probs,
// old_log_probs, advantages, whatever the token order; masked tokens may hold anything.
TEST(ClipCov, LargeBatchNamesTheFirstBadInputOnEveryExecutor) {
  const auto b = cascade_rl::testing::tied_batch(63);
  const auto layout = b.layout();
  const auto normalizer =
      cascade_rl::local_loss_counts(exec::seq, layout).normalizer(loss_aggregation::token_mean, 1);
  std::size_t early = layout.tokens(), late = layout.tokens(), masked = layout.tokens();
  for (std::size_t t = 0; t < layout.tokens(); ++t) {
    if (layout.valid(t) && early == layout.tokens()) early = t;
    if (layout.valid(t)) late = t;
    if (!layout.valid(t) && masked == layout.tokens()) masked = t;
  }
  ASSERT_GT(late, layout.tokens() / 2);
  ASSERT_LT(masked, layout.tokens());
  auto log_probs = b.log_probs, old_log_probs = b.old_log_probs, advantages = b.advantages;
  advantages[masked] = std::numeric_limits<float>::infinity();
  log_probs[masked] = std::nanf("");
  const policy_ratio_inputs<float> in{
      .log_probs = log_probs, .old_log_probs = old_log_probs, .advantages = advantages};
  std::vector<float> grad(layout.tokens());
  const std::vector<std::size_t> replay{early};
  const auto expect_named = [&](const std::string& name) {
    for (const int threads : {1, 3, 8}) {
      SCOPED_TRACE(std::to_string(threads) + " threads");
      const auto policy = exec::par.with_threads(threads);
      expect_error_naming(
          [&] {
            (void)cascade_rl::clip_cov_loss(policy, layout, in, token_selection::seeded(1), grad,
                                            normalizer);
          },
          name);
      expect_error_naming(
          [&] {
            (void)cascade_rl::clip_cov_loss(policy, layout, in, token_selection::replay(replay),
                                            grad, normalizer);
          },
          name);
      expect_error_naming(
          [&] { (void)cascade_rl::kl_cov_loss(policy, layout, in, grad, normalizer); }, name);
      expect_error_naming(
          [&] { (void)cascade_rl::clip_cov_seeded_selection(policy, layout, in, 1); }, name);
    }
  };
  // Masked tokens only: no refusal.
  (void)cascade_rl::clip_cov_loss(exec::par.with_threads(3), layout, in, token_selection::seeded(1),
                                  grad, normalizer);
  old_log_probs[late] = -std::numeric_limits<float>::infinity();
  expect_named("old_log_probs[" + std::to_string(late) + "]: is infinite");
  // KL-Cov's selection reads no old log-probs.
  EXPECT_NO_THROW((void)cascade_rl::kl_cov_selection(exec::par.with_threads(3), layout, in));
  advantages[early] = std::nanf("");
  expect_named("old_log_probs[" + std::to_string(late) + "]");
  log_probs[late] = std::nanf("");
  expect_named("log_probs[" + std::to_string(late) + "]: is NaN");
  expect_error_naming(
      [&] { (void)cascade_rl::kl_cov_selection(exec::par.with_threads(3), layout, in); },
      "log_probs[" + std::to_string(late) + "]: is NaN");
}

// The selection's bytes are a buffer of the calling thread that every call leaves clean,
// refused or not: a loss without a selected token has the same bits before and after
// calls that selected (or began to select) others, on a larger and a smaller batch.
TEST(ClipCov, SelectionsLeaveNoTraceOnLaterCalls) {
  const auto b =
      cascade_rl::testing::make_random_batch<double>(64, {.sequences = 50, .max_length = 30});
  const auto layout = b.layout();
  const auto big = cascade_rl::testing::tied_batch(65);
  const auto big_layout = big.layout();
  const auto normalizer =
      cascade_rl::local_loss_counts(exec::seq, layout).normalizer(loss_aggregation::token_sum, 1);
  auto options = wide_options(0.2);
  options.aggregation = loss_aggregation::token_sum;
  std::vector<std::size_t> valid;
  std::size_t masked = layout.tokens();
  for (std::size_t t = 0; t < layout.tokens(); ++t) {
    if (layout.valid(t))
      valid.push_back(t);
    else if (masked == layout.tokens())
      masked = t;
  }
  ASSERT_GT(valid.size(), 3u);
  ASSERT_LT(masked, layout.tokens());
  const auto unselected = [&] {
    std::vector<double> grad(layout.tokens());
    const std::vector<std::size_t> none;
    const auto result = cascade_rl::clip_cov_loss(
        exec::seq, layout, inputs_of(b), token_selection::replay(none), grad, normalizer, options);
    EXPECT_EQ(result.metrics.clipped, 0u);
    return std::make_pair(result.loss, grad);
  };
  const auto before = unselected();
  std::vector<double> grad(layout.tokens());
  (void)cascade_rl::clip_cov_loss(exec::seq, layout, inputs_of(b), token_selection::seeded(3), grad,
                                  normalizer, options);
  (void)cascade_rl::kl_cov_loss(exec::par.with_threads(2), layout, inputs_of(b), grad, normalizer,
                                {.kl_cov_ratio = 0.5, .aggregation = loss_aggregation::token_sum});
  EXPECT_EQ(unselected(), before);
  // Refused part way: a repeat, a masked token, a token beyond the batch, a short
  // selected_out, a bad normaliser (after the selection).
  const std::vector<std::vector<std::size_t>> refused{
      {valid[0], valid[1], valid[0]}, {valid[2], masked}, {valid[1], layout.tokens()}};
  for (const auto& tokens : refused)
    EXPECT_THROW(
        (void)cascade_rl::clip_cov_loss(exec::seq, layout, inputs_of(b),
                                        token_selection::replay(tokens), grad, normalizer, options),
        cascade_rl::error);
  std::size_t one = 0;
  EXPECT_THROW(
      (void)cascade_rl::clip_cov_loss(exec::seq, layout, inputs_of(b), token_selection::seeded(3),
                                      grad, normalizer, options, std::span<std::size_t>(&one, 1)),
      cascade_rl::error);
  EXPECT_THROW(
      (void)cascade_rl::kl_cov_loss(exec::seq, layout, inputs_of(b), token_selection::replay(valid),
                                    grad, cascade_rl::loss_normalizer{}),
      cascade_rl::error);
  EXPECT_EQ(unselected(), before);
  // A larger batch grows the buffer, a smaller one reuses it.
  std::vector<float> big_grad(big_layout.tokens());
  (void)cascade_rl::clip_cov_loss(exec::seq, big_layout, inputs_of(big), token_selection::seeded(3),
                                  big_grad,
                                  cascade_rl::local_loss_counts(exec::seq, big_layout)
                                      .normalizer(loss_aggregation::token_sum, 1),
                                  options);
  EXPECT_EQ(unselected(), before);
}

TEST(ClipCov, VerlNameAndPreset) {
  const auto defaults = std::get<clip_cov_options>(verl::policy_loss("clip_cov"));
  EXPECT_EQ(defaults.clip_cov_ratio, 0.0002);
  EXPECT_EQ(defaults.clip_cov_lb, 1.0);
  EXPECT_EQ(defaults.clip_cov_ub, 5.0);
  EXPECT_EQ(defaults.clip_low, 0.2);
  EXPECT_EQ(defaults.clip_high, 0.2);
  EXPECT_EQ(defaults.aggregation, loss_aggregation::token_mean);
  const clip_cov_options ours{};
  EXPECT_EQ(ours.clip_cov_ratio, defaults.clip_cov_ratio);
  EXPECT_EQ(ours.clip_cov_lb, defaults.clip_cov_lb);
  EXPECT_EQ(ours.clip_cov_ub, defaults.clip_cov_ub);
  const auto set = std::get<clip_cov_options>(
      verl::policy_loss("clip_cov", {.loss_agg_mode = "seq-mean-token-sum",
                                     .clip_ratio = 0.3,
                                     .clip_ratio_high = 0.28,
                                     .clip_cov_ratio = 0.05,
                                     .clip_cov_lb = 0.02,
                                     .clip_cov_ub = 3.0}));
  EXPECT_EQ(set.clip_low, 0.3);
  EXPECT_EQ(set.clip_high, 0.28);
  EXPECT_EQ(set.clip_cov_ratio, 0.05);
  EXPECT_EQ(set.clip_cov_lb, 0.02);
  EXPECT_EQ(set.clip_cov_ub, 3.0);
  EXPECT_EQ(set.aggregation, loss_aggregation::seq_mean_token_sum);
}

}  // namespace covariance_losses_cases
}  // namespace
