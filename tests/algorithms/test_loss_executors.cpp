// exec::par with 1, 2 and 7 threads (and the default) gives exec::seq's bits: losses,
// gradients and metrics, on batches spanning many 4096-token reduction blocks.

#include <gtest/gtest.h>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "cascade_rl/algorithms/importance_weights.hpp"
#include "cascade_rl/algorithms/kl_estimators.hpp"
#include "cascade_rl/algorithms/loss_aggregation.hpp"
#include "cascade_rl/algorithms/policy_loss.hpp"
#include "cascade_rl/algorithms/sequence_ratio_losses.hpp"
#include "cascade_rl/core/exec.hpp"
#include "support/expect_error.hpp"
#include "support/random_batch.hpp"

namespace {
namespace loss_executors_cases {  // this file's names, apart in the area's unity build

using cascade_rl::importance_sampling;
using cascade_rl::kl_estimator;
using cascade_rl::loss_aggregation;
using cascade_rl::testing::all_aggregation_modes;
using cascade_rl::testing::make_random_batch;
using cascade_rl::testing::random_batch;
namespace exec = cascade_rl::exec;


const exec::parallel_policy parallel_policies[] = {exec::par.with_threads(1),
                                                   exec::par.with_threads(2),
                                                   exec::par.with_threads(7), exec::par};

template <class T>
const random_batch<T>& large_batch() {
  // About 600 * 200 = 120k tokens: ~30 reduction blocks, ~600 sequences.
  static const auto batch = make_random_batch<T>(
      42, {.sequences = 600, .max_length = 400, .log_ratio_spread = 0.5});
  return batch;
}

template <class T>
bool same_bits(T a, T b) {
  if constexpr (sizeof(T) == 8)
    return std::bit_cast<std::uint64_t>(a) == std::bit_cast<std::uint64_t>(b);
  else
    return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b);
}

template <class T>
void expect_same_bits(const std::vector<T>& actual, const std::vector<T>& expected,
                      const std::string& context) {
  ASSERT_EQ(actual.size(), expected.size());
  for (std::size_t i = 0; i < actual.size(); ++i)
    if (!same_bits(actual[i], expected[i])) {
      ADD_FAILURE() << context << " [" << i << "]: " << actual[i] << " vs " << expected[i];
      return;
    }
}

void expect_same_metrics(const cascade_rl::policy_loss_metrics& a,
                         const cascade_rl::policy_loss_metrics& b, const std::string& context) {
  EXPECT_EQ(a.valid_tokens, b.valid_tokens) << context;
  EXPECT_EQ(a.clipped, b.clipped) << context;
  EXPECT_EQ(a.dual_clipped, b.dual_clipped) << context;
  EXPECT_TRUE(same_bits(a.approx_kl_sum, b.approx_kl_sum)) << context;
  EXPECT_EQ(a.importance_truncated, b.importance_truncated) << context;
  EXPECT_EQ(a.importance_masked, b.importance_masked) << context;
}

template <class T>
class LossExecutors : public ::testing::Test {};
using value_types = ::testing::Types<double, float>;
TYPED_TEST_SUITE(LossExecutors, value_types);

TYPED_TEST(LossExecutors, LargeBatchSpansManyBlocks) {
  const auto& batch = large_batch<TypeParam>();
  EXPECT_GT(batch.tokens(), 20 * cascade_rl::detail::reduce_block_size);
}

// run(policy, grad) under every parallel policy gives run(exec::seq, grad)'s loss, gradient
// and metrics, bit for bit; returns the sequential result for the caller's own checks.
template <class T, class Run>
cascade_rl::policy_loss_result expect_parallel_matches_seq(const std::string& context,
                                                           std::size_t tokens, const Run& run) {
  std::vector<T> expected_grad(tokens);
  const cascade_rl::policy_loss_result expected = run(exec::seq, expected_grad);
  for (const auto& policy : parallel_policies) {
    const std::string where = context + " threads " + std::to_string(policy.threads);
    std::vector<T> grad(tokens, T(-7));
    const cascade_rl::policy_loss_result actual = run(policy, grad);
    EXPECT_TRUE(same_bits(actual.loss, expected.loss)) << where;
    expect_same_bits(grad, expected_grad, where);
    expect_same_metrics(actual.metrics, expected.metrics, where);
  }
  return expected;
}

TYPED_TEST(LossExecutors, PpoClipBitIdentical) {
  using T = TypeParam;
  const auto& b = large_batch<T>();
  const auto layout = b.layout();
  const auto counts = cascade_rl::local_loss_counts(exec::seq, layout);
  const auto weights = cascade_rl::testing::rollout_is_weights_of(b);
  for (const auto mode : all_aggregation_modes)
    for (const bool weighted : {false, true}) {  // given rollout_is_weights, or none
      const cascade_rl::ppo_clip_options options{
          .clip_high = 0.28,
          .dual_clip = 2.0,
          .aggregation = mode,
          .importance = {.mode = importance_sampling::truncated, .cap = 1.5}};
      const auto expected = expect_parallel_matches_seq<T>(
          (weighted ? "weighted ppo " : "ppo ") + std::string(cascade_rl::to_string(mode)),
          b.tokens(), [&](const auto& policy, std::vector<T>& grad) {
            return cascade_rl::ppo_clip_loss(
                policy, layout,
                {.log_probs = b.log_probs,
                 .old_log_probs = b.old_log_probs,
                 .advantages = b.advantages,
                 .behaviour_log_probs = b.behaviour_log_probs,
                 .rollout_is_weights =
                     weighted ? std::span<const T>(weights) : std::span<const T>{}},
                grad, counts.normalizer(mode, 400), options);
          });
      EXPECT_GT(expected.metrics.clipped, 0u);
    }
}

TYPED_TEST(LossExecutors, ReinforceBitIdentical) {
  using T = TypeParam;
  const auto& b = large_batch<T>();
  const auto layout = b.layout();
  const auto weights = cascade_rl::testing::rollout_is_weights_of(b);
  const auto counts = cascade_rl::local_loss_counts(exec::seq, layout);
  for (const auto mode : all_aggregation_modes) {
    auto options = cascade_rl::mopd_options();
    options.aggregation = mode;
    // veRL's given weights (GPG, compute_policy_loss_reinforce) on odd modes' runs.
    const bool weighted = static_cast<int>(mode) % 2 == 1;
    expect_parallel_matches_seq<T>(
        "reinforce " + std::string(cascade_rl::to_string(mode)), b.tokens(),
        [&](const auto& policy, std::vector<T>& grad) {
          return cascade_rl::reinforce_loss(
              policy, layout,
              {.log_probs = b.log_probs,
               .advantages = b.advantages,
               .behaviour_log_probs = b.behaviour_log_probs,
               .rollout_is_weights = weighted ? std::span<const T>(weights) : std::span<const T>{}},
              grad, counts.normalizer(mode, 400), options);
        });
  }
}

// The ratio losses (CISPO, DPPO-TV/KL, DRO, SAPO, GSPO, GMPO, sequence SAPO), each with and without given
// weights, under every aggregation mode; options that make the clips and truncations engage.
TYPED_TEST(LossExecutors, RatioLossesBitIdentical) {
  using T = TypeParam;
  namespace cr = cascade_rl;
  const auto& b = large_batch<T>();
  const auto layout = b.layout();
  const auto weights = cr::testing::rollout_is_weights_of(b);
  const auto counts = cr::local_loss_counts(exec::seq, layout);
  for (const auto mode : all_aggregation_modes) {
    for (const bool weighted : {false, true}) {
      const cr::policy_ratio_inputs<T> inputs{
          .log_probs = b.log_probs,
          .old_log_probs = b.old_log_probs,
          .advantages = b.advantages,
          .rollout_is_weights = weighted ? std::span<const T>(weights) : std::span<const T>{}};
      const cr::loss_normalizer normalizer = counts.normalizer(mode, 400);
      // Appended, not `" " + std::string(...)`: GCC 12 warns falsely (stringop-overflow)
      // on that concatenation once the losses around it are inlined.
      std::string suffix(" ");
      suffix.append(cr::to_string(mode)).append(weighted ? " weighted" : "");
      const auto check = [&](const std::string& name, const auto& loss, const auto& options) {
        return expect_parallel_matches_seq<T>(
            name + suffix, b.tokens(), [&](const auto& policy, std::vector<T>& grad) {
              return loss(policy, layout, inputs, grad, normalizer, options);
            });
      };
      const auto cispo = [](auto&&... a) {
        return cr::cispo_loss(std::forward<decltype(a)>(a)...);
      };
      const auto dppo = [](auto&&... a) { return cr::dppo_loss(std::forward<decltype(a)>(a)...); };
      EXPECT_GT(check("cispo", cispo, cr::cispo_options{.clip_high = 0.28, .aggregation = mode})
                    .metrics.clipped,
                0u);
      for (const auto divergence :
           {cr::dppo_divergence::total_variation, cr::dppo_divergence::binary_kl}) {
        const auto dppo_result = check("dppo", dppo,
                                       cr::dppo_options{.divergence = divergence,
                                                        .clip_high = 0.05,
                                                        .truncation = 1.5,
                                                        .aggregation = mode});
        EXPECT_GT(dppo_result.metrics.clipped, 0u);
        EXPECT_GT(dppo_result.metrics.dual_clipped, 0u);
      }
      check(
          "dro", [](auto&&... a) { return cr::dro_loss(std::forward<decltype(a)>(a)...); },
          cr::dro_options{.beta = 0.5, .aggregation = mode});
      check(
          "sapo", [](auto&&... a) { return cr::sapo_loss(std::forward<decltype(a)>(a)...); },
          cr::sapo_options{.aggregation = mode});
      // The sequence-level ratios (a per-sequence pre-pass, then the token pass).
      EXPECT_GT(
          check(
              "gspo", [](auto&&... a) { return cr::gspo_loss(std::forward<decltype(a)>(a)...); },
              cr::gspo_options{.clip_low = 0.02, .clip_high = 0.03, .aggregation = mode})
              .metrics.clipped,
          0u);
      EXPECT_GT(check(
                    "geo_mean",
                    [](auto&&... a) { return cr::geo_mean_loss(std::forward<decltype(a)>(a)...); },
                    cr::geo_mean_options{.clip_low = 0.1, .clip_high = 0.15, .aggregation = mode})
                    .metrics.dual_clipped,
                0u);
      if (!weighted)  // sequence SAPO takes no weights (its gradient is the row's sum)
        check(
            "sequence_sapo",
            [](auto&&... a) { return cr::sequence_sapo_loss(std::forward<decltype(a)>(a)...); },
            cr::sequence_sapo_options{.aggregation = mode});
    }
  }
}

TYPED_TEST(LossExecutors, KlBitIdentical) {
  using T = TypeParam;
  const auto& b = large_batch<T>();
  const auto layout = b.layout();
  const auto normalizer_for = [counts = cascade_rl::local_loss_counts(exec::seq, layout)](
                                  cascade_rl::loss_aggregation mode) {
    return counts.normalizer(mode, 400);
  };
  for (const auto estimator :
       {kl_estimator::k1, kl_estimator::abs, kl_estimator::k2, kl_estimator::k3})
    for (const bool straight_through : {false, true}) {
      const cascade_rl::kl_options kl{.estimator = estimator, .straight_through = straight_through};
      std::vector<T> expected_values(b.tokens()), expected_grad(b.tokens());
      const double expected_sum = cascade_rl::kl_penalty(
          exec::seq, layout, {.log_probs = b.log_probs, .ref_log_probs = b.ref_log_probs},
          expected_values, expected_grad, kl);
      std::vector<T> expected_loss_grad(b.tokens());
      const cascade_rl::kl_loss_options loss_options{
          .kl = kl, .coefficient = 0.1, .aggregation = loss_aggregation::seq_mean_token_mean};
      const double expected_loss = cascade_rl::kl_loss(
          exec::seq, layout, {.log_probs = b.log_probs, .ref_log_probs = b.ref_log_probs},
          expected_loss_grad, normalizer_for(loss_options.aggregation), loss_options);
      for (const auto& policy : parallel_policies) {
        const std::string context = std::string(cascade_rl::to_string(estimator)) + " threads " +
                                    std::to_string(policy.threads);
        std::vector<T> values(b.tokens()), grad(b.tokens()), loss_grad(b.tokens());
        const double sum = cascade_rl::kl_penalty(
            policy, layout, {.log_probs = b.log_probs, .ref_log_probs = b.ref_log_probs}, values,
            grad, kl);
        EXPECT_TRUE(same_bits(sum, expected_sum)) << context;
        expect_same_bits(values, expected_values, context + " values");
        expect_same_bits(grad, expected_grad, context + " grad");
        const double loss = cascade_rl::kl_loss(
            policy, layout, {.log_probs = b.log_probs, .ref_log_probs = b.ref_log_probs}, loss_grad,
            normalizer_for(loss_options.aggregation), loss_options);
        EXPECT_TRUE(same_bits(loss, expected_loss)) << context;
        expect_same_bits(loss_grad, expected_loss_grad, context + " loss grad");
      }
    }
}

TYPED_TEST(LossExecutors, AggregationAndImportanceHelpersBitIdentical) {
  using T = TypeParam;
  const auto& b = large_batch<T>();
  const auto layout = b.layout();
  const auto counts = cascade_rl::local_loss_counts(exec::seq, layout);
  const auto normalizer_for = [counts = counts](cascade_rl::loss_aggregation mode) {
    return counts.normalizer(mode, 400);
  };
  std::vector<T> expected_weights(b.tokens()), expected_is(b.tokens()), expected_grad(b.tokens());
  cascade_rl::aggregation_weights(exec::seq, layout, std::span<T>(expected_weights),
                                  normalizer_for(loss_aggregation::seq_mean_token_mean),
                                  loss_aggregation::seq_mean_token_mean);
  const auto expected_counts = cascade_rl::importance_weights(
      exec::seq, layout,
      {.target_log_probs = b.old_log_probs, .behaviour_log_probs = b.behaviour_log_probs},
      expected_is, {.mode = importance_sampling::band_mask});
  const double expected_loss = cascade_rl::aggregate_token_losses(
      exec::seq, layout, {.token_losses = b.ref_log_probs, .token_grads = b.advantages},
      expected_grad, normalizer_for(loss_aggregation::token_mean), loss_aggregation::token_mean);
  for (const auto& policy : parallel_policies) {
    const std::string context = "threads " + std::to_string(policy.threads);
    const auto c = cascade_rl::local_loss_counts(policy, layout);
    EXPECT_EQ(c.tokens, counts.tokens);
    EXPECT_EQ(c.sequences, counts.sequences);
    std::vector<T> weights(b.tokens()), is(b.tokens()), grad(b.tokens());
    cascade_rl::aggregation_weights(policy, layout, std::span<T>(weights),
                                    normalizer_for(loss_aggregation::seq_mean_token_mean),
                                    loss_aggregation::seq_mean_token_mean);
    expect_same_bits(weights, expected_weights, context + " weights");
    const auto is_counts = cascade_rl::importance_weights(
        policy, layout,
        {.target_log_probs = b.old_log_probs, .behaviour_log_probs = b.behaviour_log_probs}, is,
        {.mode = importance_sampling::band_mask});
    expect_same_bits(is, expected_is, context + " importance");
    EXPECT_EQ(is_counts.masked, expected_counts.masked);
    const double loss = cascade_rl::aggregate_token_losses(
        policy, layout, {.token_losses = b.ref_log_probs, .token_grads = b.advantages}, grad,
        normalizer_for(loss_aggregation::token_mean), loss_aggregation::token_mean);
    EXPECT_TRUE(same_bits(loss, expected_loss)) << context;
    expect_same_bits(grad, expected_grad, context + " aggregate");
  }
}

// Validation runs before the parallel loop and names the first bad index whatever the
// thread count.
TYPED_TEST(LossExecutors, ErrorsNameTheFirstBadIndexUnderPar) {
  using T = TypeParam;
  auto b = large_batch<T>();
  std::size_t first = 0, second = 0;
  for (std::size_t t = 50000; t < b.tokens(); ++t)
    if (b.mask[t]) {
      if (first == 0) {
        first = t;
      } else if (t > first + 30000) {
        second = t;
        break;
      }
    }
  ASSERT_GT(second, first);
  b.advantages[second] = std::numeric_limits<T>::quiet_NaN();
  b.advantages[first] = std::numeric_limits<T>::infinity();
  const auto layout = b.layout();
  std::vector<T> grad(b.tokens());
  for (const auto& policy : parallel_policies)
    cascade_rl::testing::expect_error_naming(
        [&] {
          cascade_rl::reinforce_loss(policy, layout,
                                     {.log_probs = b.log_probs, .advantages = b.advantages}, grad,
                                     cascade_rl::loss_normalizer{.tokens = 1});
        },
        "advantages[" + std::to_string(first) + "]");
}

}  // namespace loss_executors_cases
}  // namespace
