// KL-Cov (veRL compute_policy_loss_kl_cov) on the host executors: every v2 case of
// verl_core_algos_v2.json with our own selection (veRL's topk where no tie sits at the
// boundary) and replaying veRL's tokens, a hand-computed batch (the tie rule, sign(0)),
// finite differences with the selection held fixed, seq/par bitwise, micro-batches (not
// invariant under a per-call topk, invariant under a fixed global selection), refusals.

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <set>
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
namespace kl_cov_loss_cases {  // this file's names, apart in the area's unity build

namespace exec = cascade_rl::exec;
namespace verl = cascade_rl::presets::verl;
using cascade_rl::kl_cov_options;
using cascade_rl::loss_aggregation;
using cascade_rl::policy_ratio_inputs;
using cascade_rl::token_selection;
using cascade_rl::testing::expect_error_naming;

// ---- v2 reference cases ---------------------------------------------------------------

template <class T>
using kl_cov_case = cascade_rl::testing::verl_v2_case<T>;

template <class T>
std::vector<std::size_t> verls_selection(const kl_cov_case<T>& c) {
  std::vector<std::size_t> tokens = c.tokens_of(c.json["selection"]["selected_tokens"]);
  std::sort(tokens.begin(), tokens.end());
  return tokens;
}

// veRL's tokens replayed: loss, ppo_kl, gradient; the reported selection is veRL's.
template <class T>
void check_replayed_case(const kl_cov_case<T>& c) {
  const auto options = std::get<kl_cov_options>(verl::policy_loss("kl_cov", c.actor()));
  const auto layout = c.batch.layout();
  const std::vector<std::size_t> want = verls_selection(c);
  const std::vector<std::size_t> given = c.tokens_of(c.json["selection"]["selected_tokens"]);
  ASSERT_EQ(want.size(), c.json["selection"]["k"].template get<std::size_t>()) << c.context;
  std::vector<T> grad(layout.tokens(), T(-7));
  std::vector<std::size_t> reported(layout.tokens() + 1, 12345);
  const auto result = cascade_rl::kl_cov_loss(
      exec::seq, layout, c.ratio_inputs(), token_selection::replay(given), grad,
      c.normalizer(options.aggregation), options, std::span<std::size_t>(reported));
  c.expect_loss_and_gradient(result.loss, grad);
  c.expect_reported_metrics(result.metrics);
  ASSERT_EQ(result.metrics.clipped, want.size()) << c.context;
  for (std::size_t k = 0; k < want.size(); ++k) EXPECT_EQ(reported[k], want[k]) << c.context;
  EXPECT_EQ(reported[want.size()], 12345u) << c.context << ": wrote past the selection";
}

TEST(KlCov, EveryV2CaseReplayingVerlsSelection) {
  cascade_rl::testing::for_each_verl_v2_case("kl_cov",
                                             [](const auto& c) { check_replayed_case(c); });
}

// Our own topk: where no tie sits at the k-th place it is veRL's set, so the whole case
// is recomputed without replay (a tied case may differ only in which tied token it
// takes: it is covered by the replay above).
template <class T>
void check_own_selection_case(const kl_cov_case<T>& c, std::size_t& checked) {
  if (c.json["selection"]["tie_at_boundary"].template get<bool>()) return;
  ++checked;
  const auto options = std::get<kl_cov_options>(verl::policy_loss("kl_cov", c.actor()));
  const auto layout = c.batch.layout();
  EXPECT_EQ(cascade_rl::kl_cov_selection(exec::seq, layout, c.ratio_inputs(), options),
            verls_selection(c))
      << c.context;
  std::vector<T> grad(layout.tokens(), T(-7));
  const auto result = cascade_rl::kl_cov_loss(exec::seq, layout, c.ratio_inputs(), grad,
                                              c.normalizer(options.aggregation), options);
  c.expect_loss_and_gradient(result.loss, grad);
  c.expect_reported_metrics(result.metrics);
}

TEST(KlCov, EveryUntiedV2CaseWithOurSelection) {
  std::size_t checked = 0;
  cascade_rl::testing::for_each_verl_v2_case(
      "kl_cov", [&](const auto& c) { check_own_selection_case(c, checked); });
  EXPECT_GT(checked, 0u);
}

// ---- hand-computed ----------------------------------------------------------------------

// One sequence of 5 tokens, token 4 masked. A = (1, 1, -1, -1), logp = (-1, -1, -2, -3):
// mean A = 0, mean logp = -1.75, cov = (0.75, 0.75, 0.25, 1.25). k = 2 at ratio 0.5:
// token 3 (1.25), then of the tied 0.75s the smaller index, token 0.
TEST(KlCov, HandComputedWithTheTieRule) {
  const std::vector<std::int64_t> offsets{0, 5};
  const std::vector<std::uint8_t> mask{1, 1, 1, 1, 0};
  const cascade_rl::token_layout layout(offsets, mask);
  const std::vector<double> logp{-1, -1, -2, -3, 9};
  const std::vector<double> old{-1.5, -1, -1.5, -2, 9};  // log-ratios 0.5, 0, -0.5, -1
  const std::vector<double> adv{1, 1, -1, -1, 5};
  const policy_ratio_inputs<double> in{.log_probs = logp, .old_log_probs = old, .advantages = adv};
  const kl_cov_options options{
      .kl_cov_ratio = 0.5, .ppo_kl_coef = 0.3, .aggregation = loss_aggregation::token_sum};
  EXPECT_EQ(cascade_rl::kl_cov_selection(exec::seq, layout, in, options),
            (std::vector<std::size_t>{0, 3}));
  std::vector<double> grad(5, -7);
  const auto counts = cascade_rl::local_loss_counts(exec::seq, layout);
  const auto result = cascade_rl::kl_cov_loss(
      exec::seq, layout, in, grad, counts.normalizer(loss_aggregation::token_sum, 1.0), options);
  const double r0 = std::exp(0.5), r2 = std::exp(-0.5), r3 = std::exp(-1.0);
  const double want = (-r0 + 0.3 * 0.5) + (-1.0) + r2 + (r3 + 0.3 * 1.0);
  EXPECT_NEAR(result.loss, want, 1e-15);
  EXPECT_NEAR(grad[0], -r0 + 0.3, 1e-15);  // sign(+0.5)
  EXPECT_EQ(grad[1], -1.0);                // not selected
  EXPECT_NEAR(grad[2], r2, 1e-15);
  EXPECT_NEAR(grad[3], r3 - 0.3, 1e-15);  // sign(-1)
  EXPECT_EQ(grad[4], 0.0);
  EXPECT_EQ(result.metrics.clipped, 2u);
  EXPECT_NEAR(result.metrics.approx_kl(), (0.5 + 0 + 0.5 + 1) / 4, 1e-15);
  // A selected token at logp == old_logp: |.| adds 0 and its derivative is 0 (torch's).
  std::vector<std::size_t> one{1};
  (void)cascade_rl::kl_cov_loss(exec::seq, layout, in, token_selection::replay(one), grad,
                                counts.normalizer(loss_aggregation::token_sum, 1.0), options);
  EXPECT_EQ(grad[1], -1.0);
  // Signed cov: a large negative cov is not selected. Token 0's cov becomes -3.
  const std::vector<double> adv2{-3, 1, 1, 1, 0};  // mean 0; cov_t = A_t (logp_t + 1.75)
  const policy_ratio_inputs<double> in2{
      .log_probs = logp, .old_log_probs = old, .advantages = adv2};
  // cov = (-2.25, 0.75, -0.25, -1.25): k = 1 picks token 1.
  EXPECT_EQ(
      cascade_rl::kl_cov_selection(exec::seq, layout, in2, kl_cov_options{.kl_cov_ratio = 0.25}),
      (std::vector<std::size_t>{1}));
  // +0 and -0 tie (index order): every cov 0 or -0 when A is constant.
  const std::vector<double> flat{2, 2, 2, 2, 2};
  const policy_ratio_inputs<double> in3{
      .log_probs = logp, .old_log_probs = old, .advantages = flat};
  EXPECT_EQ(
      cascade_rl::kl_cov_selection(exec::seq, layout, in3, kl_cov_options{.kl_cov_ratio = 0.5}),
      (std::vector<std::size_t>{0, 1}));
}

TEST(KlCov, CovarianceKeyOrdersLargestFirst) {
  using cascade_rl::terms::covariance_key;
  const double values[] = {-INFINITY, -1e300, -2.5, -1e-310, 0.0, 1e-310, 3.0, 1e300, INFINITY};
  for (std::size_t i = 0; i + 1 < std::size(values); ++i)
    EXPECT_GT(covariance_key(values[i]), covariance_key(values[i + 1])) << values[i];
  EXPECT_EQ(covariance_key(-0.0), covariance_key(0.0));
  EXPECT_NE(covariance_key(-INFINITY), cascade_rl::terms::not_a_candidate);
}

TEST(KlCov, NoValidTokenSelectsNothing) {
  const std::vector<std::int64_t> offsets{0, 3};
  const std::vector<std::uint8_t> mask{0, 0, 0};
  const cascade_rl::token_layout layout(offsets, mask);
  const std::vector<double> v{-1, -2, -3};
  const policy_ratio_inputs<double> in{.log_probs = v, .old_log_probs = v, .advantages = v};
  EXPECT_TRUE(cascade_rl::kl_cov_selection(exec::seq, layout, in).empty());
  std::vector<double> grad(3, -7);
  const auto result = cascade_rl::kl_cov_loss(
      exec::seq, layout, in, grad,
      cascade_rl::local_loss_counts(exec::seq, layout).normalizer(loss_aggregation::token_mean, 1));
  EXPECT_EQ(result.loss, 0.0);
  EXPECT_EQ(result.metrics.clipped, 0u);
}

// ---- executors, gradient, micro-batches ------------------------------------------------

template <class T>
policy_ratio_inputs<T> inputs_of(const cascade_rl::testing::random_batch<T>& b,
                                 std::span<const T> weights = {}) {
  return {.log_probs = b.log_probs,
          .old_log_probs = b.old_log_probs,
          .advantages = b.advantages,
          .rollout_is_weights = weights};
}

TEST(KlCov, SeqAndParAreBitwiseEqual) {
  const auto b =
      cascade_rl::testing::make_random_batch<double>(52, {.sequences = 300, .max_length = 60});
  const auto layout = b.layout();
  const kl_cov_options base{.kl_cov_ratio = 0.03, .ppo_kl_coef = 0.7};
  const auto selection = cascade_rl::kl_cov_selection(exec::seq, layout, inputs_of(b), base);
  ASSERT_GT(selection.size(), 100u);
  for (const int threads : {2, 3, 8})
    EXPECT_EQ(
        cascade_rl::kl_cov_selection(exec::par.with_threads(threads), layout, inputs_of(b), base),
        selection)
        << threads << " threads";
  cascade_rl::testing::expect_seq_par_bitwise(
      b, 60.0,
      [&](auto policy, const policy_ratio_inputs<double>& in, std::span<double> grad,
          const cascade_rl::loss_normalizer& normalizer, loss_aggregation mode) {
        auto options = base;
        options.aggregation = mode;
        const auto result = cascade_rl::kl_cov_loss(policy, layout, in, grad, normalizer, options);
        EXPECT_EQ(result.metrics.clipped, selection.size());
        return result;
      });
}

// Central differences in double with the selection held fixed (replayed), skipping tokens
// within the step of |logp - old_logp|'s kink at 0. Elsewhere the token loss is smooth
// with second derivative -A r (the |.| term is linear), so the O(h^2) error is below
// |A| r h^2 / 6 / c per token with the aggregation weight c <= 1: h = 1e-5 gives under
// 1e-9, against rounding near 1e-16 * |L| / h (|L| < 10 here: 1e-10).
TEST(KlCov, GradientMatchesFiniteDifferences) {
  auto b = cascade_rl::testing::make_random_batch<double>(53, {.sequences = 12, .max_length = 10});
  const auto layout = b.layout();
  const auto weights = cascade_rl::testing::rollout_is_weights_of(b);
  const auto counts = cascade_rl::local_loss_counts(exec::seq, layout);
  kl_cov_options options{.kl_cov_ratio = 0.3, .ppo_kl_coef = 0.8};
  const auto selected = cascade_rl::kl_cov_selection(exec::seq, layout, inputs_of(b), options);
  ASSERT_GT(selected.size(), 3u);
  for (const loss_aggregation mode : cascade_rl::testing::all_aggregation_modes) {
    options.aggregation = mode;
    const auto normalizer = counts.normalizer(mode, 10.0);
    const auto loss_at = [&](std::vector<double>& log_probs) {
      std::vector<double> grad(layout.tokens());
      const policy_ratio_inputs<double> in{.log_probs = log_probs,
                                           .old_log_probs = b.old_log_probs,
                                           .advantages = b.advantages,
                                           .rollout_is_weights = weights};
      return cascade_rl::kl_cov_loss(exec::seq, layout, in, token_selection::replay(selected), grad,
                                     normalizer, options)
          .loss;
    };
    std::vector<double> grad(layout.tokens());
    (void)cascade_rl::kl_cov_loss(exec::seq, layout, inputs_of(b, std::span<const double>(weights)),
                                  token_selection::replay(selected), grad, normalizer, options);
    const double h = 1e-5;
    std::size_t checked = 0, checked_selected = 0;
    for (std::size_t t = 0; t < layout.tokens(); ++t) {
      if (std::abs(b.log_probs[t] - b.old_log_probs[t]) < 1e-3) continue;
      std::vector<double> plus = b.log_probs, minus = b.log_probs;
      plus[t] += h;
      minus[t] -= h;
      const double numeric = (loss_at(plus) - loss_at(minus)) / (2 * h);
      EXPECT_NEAR(grad[t], numeric, 1e-8) << "token " << t;
      ++checked;
      if (std::binary_search(selected.begin(), selected.end(), t)) ++checked_selected;
    }
    EXPECT_GT(checked, layout.tokens() / 2);
    EXPECT_GT(checked_selected, 2u);
  }
}

// Each of four micro-batches takes at least one token and another top set: the top-k is
// per call; a replayed global selection is invariant.
TEST(KlCov, MicroBatchesChangeTheTopkButNotAFixedSelection) {
  const auto b =
      cascade_rl::testing::make_random_batch<double>(54, {.sequences = 40, .max_length = 20});
  const auto layout = b.layout();
  const kl_cov_options options{.kl_cov_ratio = 0.01, .ppo_kl_coef = 1.0};
  const auto normalizer =
      cascade_rl::local_loss_counts(exec::seq, layout).normalizer(options.aggregation, 20.0);
  cascade_rl::testing::expect_micro_batches_change_the_selection_but_not_a_replayed_one(
      b, cascade_rl::kl_cov_selection(exec::seq, layout, inputs_of(b), options),
      [&](const cascade_rl::token_layout& part, const policy_ratio_inputs<double>& in,
          std::span<double> grad) {
        return cascade_rl::kl_cov_loss(exec::seq, part, in, grad, normalizer, options);
      },
      [&](const cascade_rl::token_layout& part, const policy_ratio_inputs<double>& in,
          std::span<const std::size_t> tokens, std::span<double> grad) {
        return cascade_rl::kl_cov_loss(exec::seq, part, in, token_selection::replay(tokens), grad,
                                       normalizer, options);
      });
}

// ---- refusals ---------------------------------------------------------------------------

TEST(KlCov, RefusalsNameTheArgumentAndIndex) {
  const auto b =
      cascade_rl::testing::make_random_batch<double>(55, {.sequences = 6, .max_length = 8});
  const auto layout = b.layout();
  const auto normalizer = cascade_rl::local_loss_counts(exec::seq, layout)
                              .normalizer(loss_aggregation::token_mean, 1.0);
  std::vector<double> grad(layout.tokens());
  std::size_t masked = layout.tokens(), valid = layout.tokens(), second = layout.tokens();
  for (std::size_t t = 0; t < layout.tokens(); ++t) {
    if (!layout.valid(t) && masked == layout.tokens()) masked = t;
    if (layout.valid(t) && valid != layout.tokens() && second == layout.tokens()) second = t;
    if (layout.valid(t) && valid == layout.tokens()) valid = t;
  }
  ASSERT_LT(masked, layout.tokens());
  ASSERT_LT(second, layout.tokens());
  const auto run = [&](std::vector<std::size_t> tokens, kl_cov_options options = {},
                       std::span<std::size_t> out = {}) {
    (void)cascade_rl::kl_cov_loss(exec::seq, layout, inputs_of(b), token_selection::replay(tokens),
                                  grad, normalizer, options, out);
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
  expect_error_naming([&] { run({second, valid, second}); }, "selection.tokens[2]", "repeats");
  expect_error_naming([&] { run({valid}, {.kl_cov_ratio = 0.0}); }, "options.kl_cov_ratio",
                      "(0, 1]");
  expect_error_naming([&] { run({valid}, {.kl_cov_ratio = 1.5}); }, "options.kl_cov_ratio");
  expect_error_naming([&] { run({valid}, {.kl_cov_ratio = std::nan("")}); },
                      "options.kl_cov_ratio");
  expect_error_naming([&] { run({valid}, {.ppo_kl_coef = -0.1}); }, "options.ppo_kl_coef");
  expect_error_naming([&] { run({valid}, {.ppo_kl_coef = INFINITY}); }, "options.ppo_kl_coef");
  expect_error_naming(
      [&] {
        std::size_t one = 0;
        run({valid, second}, {}, std::span<std::size_t>(&one, 1));
      },
      "selected_out");
  expect_error_naming(
      [&] {
        (void)cascade_rl::kl_cov_loss(exec::seq, layout, inputs_of(b), token_selection::seeded(1),
                                      grad, normalizer);
      },
      "selection", "seeded");
  auto bad = b.advantages;
  bad[second] = std::nan("");
  const policy_ratio_inputs<double> bad_in{
      .log_probs = b.log_probs, .old_log_probs = b.old_log_probs, .advantages = bad};
  expect_error_naming(
      [&] { (void)cascade_rl::kl_cov_loss(exec::seq, layout, bad_in, grad, normalizer); },
      "advantages[" + std::to_string(second) + "]");
  expect_error_naming([&] { (void)cascade_rl::kl_cov_selection(exec::seq, layout, bad_in); },
                      "advantages[" + std::to_string(second) + "]");
}

// KL-Cov's top-k on the same kind of batch, where most tokens tie with others: every
// executor takes the k smallest (covariance_key(cov), index) of the valid tokens (the
// means as the loss takes them), the smaller index first among equal cov, and the loss
// has exec::seq's bits on exec::par.
TEST(KlCov, LargeTiedBatchTakesTheTopKOnEveryExecutor) {
  const auto b = cascade_rl::testing::tied_batch(62);
  const auto layout = b.layout();
  const auto weights = cascade_rl::testing::rollout_is_weights_of(b);
  const auto counts = cascade_rl::local_loss_counts(exec::seq, layout);
  const std::size_t valid = static_cast<std::size_t>(counts.tokens);
  const auto means =
      cascade_rl::detail::checked_covariance_means(exec::seq, layout, inputs_of(b), false);
  ASSERT_EQ(means.valid, valid);
  std::vector<std::pair<std::uint64_t, std::size_t>> keyed;
  std::set<std::uint64_t> distinct;
  for (std::size_t t = 0; t < layout.tokens(); ++t) {
    if (!layout.valid(t)) continue;
    const std::uint64_t key = cascade_rl::terms::covariance_key(cascade_rl::terms::covariance_term(
        b.advantages[t], b.log_probs[t], means.advantage, means.log_prob));
    keyed.emplace_back(key, t);
    distinct.insert(key);
  }
  ASSERT_LT(distinct.size(), 30u);  // ties everywhere
  std::sort(keyed.begin(), keyed.end());
  for (const double ratio : {0.0002, 0.01, 0.3, 1.0}) {
    SCOPED_TRACE("ratio " + std::to_string(ratio));
    const std::size_t k =
        std::max<std::size_t>(static_cast<std::size_t>(ratio * static_cast<double>(valid)), 1);
    std::vector<std::size_t> want;
    for (std::size_t i = 0; i < k; ++i) want.push_back(keyed[i].second);
    std::sort(want.begin(), want.end());
    kl_cov_options options{.kl_cov_ratio = ratio, .ppo_kl_coef = 0.3};
    EXPECT_EQ(cascade_rl::kl_cov_selection(exec::seq, layout, inputs_of(b), options), want);
    for (const int threads : {2, 3, 8})
      EXPECT_EQ(cascade_rl::kl_cov_selection(exec::par.with_threads(threads), layout, inputs_of(b),
                                             options),
                want)
          << threads << " threads";
    const auto normalizer = counts.normalizer(options.aggregation, 700.0);
    const auto in = inputs_of(b, std::span<const float>(weights));
    std::vector<std::size_t> reported(want.size());
    std::vector<float> own_grad(layout.tokens());
    const auto own = cascade_rl::kl_cov_loss(exec::par.with_threads(8), layout, in, own_grad,
                                             normalizer, options, std::span<std::size_t>(reported));
    EXPECT_EQ(reported, want);
    cascade_rl::testing::expect_same_bits_as_seq(
        layout.tokens(), [&](auto policy, std::span<float> grad) {
          return cascade_rl::kl_cov_loss(policy, layout, in, grad, normalizer, options);
        });
    const auto replay = cascade_rl::testing::shuffled(want, 4);
    std::vector<float> replayed_grad(layout.tokens());
    const auto replayed = cascade_rl::kl_cov_loss(
        exec::seq, layout, in, token_selection::replay(replay), replayed_grad, normalizer, options);
    EXPECT_EQ(std::bit_cast<std::uint64_t>(replayed.loss), std::bit_cast<std::uint64_t>(own.loss));
    EXPECT_EQ(replayed_grad, own_grad);
  }
}

TEST(KlCov, VerlNameAndPreset) {
  const auto defaults = std::get<kl_cov_options>(verl::policy_loss("kl_cov"));
  EXPECT_EQ(defaults.kl_cov_ratio, 0.0002);
  EXPECT_EQ(defaults.ppo_kl_coef, 1.0);  // veRL's fallback for an unset field
  EXPECT_EQ(defaults.aggregation, loss_aggregation::token_mean);
  const kl_cov_options ours{};
  EXPECT_EQ(ours.kl_cov_ratio, defaults.kl_cov_ratio);
  EXPECT_EQ(ours.ppo_kl_coef, defaults.ppo_kl_coef);
  const auto set = std::get<kl_cov_options>(verl::policy_loss(
      "kl_cov",
      {.loss_agg_mode = "seq-mean-token-sum-norm", .kl_cov_ratio = 0.05, .ppo_kl_coef = 0.1}));
  EXPECT_EQ(set.kl_cov_ratio, 0.05);
  EXPECT_EQ(set.ppo_kl_coef, 0.1);
  EXPECT_EQ(set.aggregation, loss_aggregation::seq_mean_token_sum_norm);
  const auto preset = verl::kl_cov(loss_aggregation::token_sum, 0.2, 0.3);
  EXPECT_EQ(preset.kl_cov_ratio, 0.2);
  EXPECT_EQ(preset.ppo_kl_coef, 0.3);
  EXPECT_EQ(preset.aggregation, loss_aggregation::token_sum);
}

}  // namespace kl_cov_loss_cases
}  // namespace
