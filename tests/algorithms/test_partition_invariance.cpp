// Micro-batch partition invariance: a random ragged batch cut at random sequence
// boundaries into k slices, each run with the step's global normaliser, gives the
// whole-batch dL/dlogp bit for bit and slice losses that sum to the whole-batch loss.

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "cascade_rl/algorithms/kl_estimators.hpp"
#include "cascade_rl/algorithms/loss_aggregation.hpp"
#include "cascade_rl/algorithms/policy_loss.hpp"
#include "cascade_rl/algorithms/sequence_ratio_losses.hpp"
#include "cascade_rl/core/exec.hpp"
#include "support/random_batch.hpp"

namespace {
namespace partition_invariance_cases {  // this file's names, apart in the area's unity build

using cascade_rl::importance_sampling;
using cascade_rl::kl_estimator;
using cascade_rl::loss_aggregation;
using cascade_rl::loss_normalizer;
using cascade_rl::token_layout;
using cascade_rl::testing::batch_slice;
using cascade_rl::testing::all_aggregation_modes;
using cascade_rl::testing::make_random_batch;
using cascade_rl::testing::random_batch;
using cascade_rl::testing::random_split;
namespace exec = cascade_rl::exec;


// Runs a loss over the tokens [begin, end) of the batch described by `layout`, writing
// that range of grad_out; returns (loss, an exact-count metric).
struct run_result {
  double loss = 0;
  std::size_t count = 0;
};
using slice_loss = std::function<run_result(const token_layout& layout, std::size_t begin,
                                            std::size_t end, std::span<double> grad_out,
                                            const loss_normalizer& normalizer)>;

void expect_partition_invariant(const random_batch<double>& batch, loss_aggregation mode,
                                const slice_loss& loss, std::uint64_t seed,
                                const std::string& context) {
  const auto layout = batch.layout();
  const std::size_t n = batch.tokens();
  std::vector<double> whole_grad(n);
  const auto counts = cascade_rl::local_loss_counts(exec::seq, layout);
  const auto normalizer_for = [counts = counts](cascade_rl::loss_aggregation mode) {
    return counts.normalizer(mode, 9.0);
  };
  const run_result whole = loss(layout, 0, n, whole_grad, normalizer_for(mode));

  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 4; ++trial) {
    const std::size_t parts = 1 + rng() % 6;
    const auto slices = random_split(layout, parts, rng());
    // The step's normaliser is the sum of the slices' local counts.
    cascade_rl::loss_counts summed{};
    for (const auto& slice : slices) summed += cascade_rl::local_loss_counts(exec::seq, slice.layout());
    ASSERT_EQ(summed.tokens, counts.tokens);
    ASSERT_EQ(summed.sequences, counts.sequences);

    std::vector<double> grad(n, -7.0);
    double loss_sum = 0;
    std::size_t count_sum = 0;
    for (const auto& slice : slices) {
      const run_result part = loss(
          slice.layout(), slice.token_begin, slice.token_end,
          std::span<double>(grad).subspan(slice.token_begin, slice.token_end - slice.token_begin),
          normalizer_for(mode));
      loss_sum += part.loss;
      count_sum += part.count;
    }
    for (std::size_t t = 0; t < n; ++t) {
      if (std::bit_cast<std::uint64_t>(grad[t]) != std::bit_cast<std::uint64_t>(whole_grad[t])) {
        ADD_FAILURE() << context << " (" << parts << " parts): grad[" << t << "] = " << grad[t]
                      << ", whole batch " << whole_grad[t];
        break;
      }
    }
    EXPECT_NEAR(loss_sum, whole.loss, 1e-12 * std::max(1.0, std::abs(whole.loss)))
        << context << " (" << parts << " parts)";
    EXPECT_EQ(count_sum, whole.count) << context;
  }
}

random_batch<double> batch_for(std::uint64_t seed) {
  return make_random_batch<double>(seed, {.sequences = 40, .max_length = 30,
                                          .log_ratio_spread = 0.5});
}

TEST(PartitionInvariance, PpoClipEveryModeAndCorrection) {
  std::uint64_t seed = 1;
  for (const auto mode : all_aggregation_modes) {
    for (const auto correction : {importance_sampling::none, importance_sampling::truncated,
                                  importance_sampling::band_mask}) {
      const auto batch = batch_for(seed);
      const cascade_rl::ppo_clip_options options{
          .clip_high = 0.28, .dual_clip = 2.0, .aggregation = mode,
          .importance = {.mode = correction, .cap = 1.5}};
      const slice_loss loss = [&](const token_layout& layout, std::size_t b, std::size_t e,
                                  std::span<double> grad, const loss_normalizer& normalizer) {
        auto sub = [&](const std::vector<double>& v) {
          return std::span<const double>(v).subspan(b, e - b);
        };
        const auto r =
            cascade_rl::ppo_clip_loss(exec::seq, layout,
                                      {.log_probs = sub(batch.log_probs),
                                       .old_log_probs = sub(batch.old_log_probs),
                                       .advantages = sub(batch.advantages),
                                       .behaviour_log_probs = sub(batch.behaviour_log_probs)},
                                      grad, normalizer, options);
        return run_result{r.loss, r.metrics.clipped + 1000 * r.metrics.dual_clipped +
                                      100000 * r.metrics.importance_masked +
                                      10000000 * r.metrics.importance_truncated};
      };
      expect_partition_invariant(batch, mode, loss, seed++,
                                 "ppo " + std::string(cascade_rl::to_string(mode)));
    }
  }
}

TEST(PartitionInvariance, ReinforceEveryMode) {
  std::uint64_t seed = 100;
  for (const auto mode : all_aggregation_modes) {
    for (const auto& options :
         {cascade_rl::reinforce_options{.aggregation = mode},
          cascade_rl::reinforce_options{
              .aggregation = mode, .surrogate = cascade_rl::reinforce_surrogate::log_prob,
              .importance = {.mode = importance_sampling::band_mask}}}) {
      for (const bool weighted : {false, true}) {  // given weights: veRL's GPG and reinforce
        const auto batch = batch_for(seed);
        const auto weights = cascade_rl::testing::rollout_is_weights_of(batch);
        const slice_loss loss = [&](const token_layout& layout, std::size_t b, std::size_t e,
                                    std::span<double> grad, const loss_normalizer& normalizer) {
          auto sub = [&](const std::vector<double>& v) {
            return std::span<const double>(v).subspan(b, e - b);
          };
          const auto r = cascade_rl::reinforce_loss(
              exec::seq, layout,
              {.log_probs = sub(batch.log_probs),
               .advantages = sub(batch.advantages),
               .behaviour_log_probs = sub(batch.behaviour_log_probs),
               .rollout_is_weights = weighted ? sub(weights) : std::span<const double>{}},
              grad, normalizer, options);
          return run_result{r.loss, r.metrics.valid_tokens + 1000 * r.metrics.importance_masked};
        };
        expect_partition_invariant(batch, mode, loss, seed++,
                                   "reinforce " + std::string(cascade_rl::to_string(mode)));
      }
    }
  }
}

// The ratio losses (CISPO, DPPO-TV/KL, DRO, SAPO, GSPO, GMPO, sequence SAPO) in their global form, every mode over
// the step's normaliser (veRL fixes SAPO's), with and without given weights; a row each.
TEST(PartitionInvariance, RatioLossesEveryModeWithAndWithoutWeights) {
  namespace cr = cascade_rl;
  std::uint64_t seed = 150;
  for (const auto mode : all_aggregation_modes) {
    for (const bool weighted : {false, true}) {
      const auto batch = batch_for(seed);
      const auto weights = cr::testing::rollout_is_weights_of(batch);
      const auto check = [&](const std::string& name, const auto& run_loss, const auto& options) {
        const slice_loss loss = [&](const token_layout& layout, std::size_t b, std::size_t e,
                                    std::span<double> grad, const loss_normalizer& normalizer) {
          auto sub = [&](const std::vector<double>& v) {
            return std::span<const double>(v).subspan(b, e - b);
          };
          const cr::policy_ratio_inputs<double> inputs{
              .log_probs = sub(batch.log_probs),
              .old_log_probs = sub(batch.old_log_probs),
              .advantages = sub(batch.advantages),
              .rollout_is_weights = weighted ? sub(weights) : std::span<const double>{}};
          const cr::policy_loss_result r =
              run_loss(exec::seq, layout, inputs, grad, normalizer, options);
          return run_result{r.loss, r.metrics.valid_tokens + 1000 * r.metrics.clipped +
                                        1000000 * r.metrics.dual_clipped};
        };
        expect_partition_invariant(
            batch, mode, loss, seed++,
            name + " " + std::string(cr::to_string(mode)) + (weighted ? " weighted" : ""));
      };
      check(
          "cispo", [](auto&&... a) { return cr::cispo_loss(std::forward<decltype(a)>(a)...); },
          cr::cispo_options{.clip_high = 0.28, .aggregation = mode});
      for (const auto divergence :
           {cr::dppo_divergence::total_variation, cr::dppo_divergence::binary_kl})
        check(
            "dppo", [](auto&&... a) { return cr::dppo_loss(std::forward<decltype(a)>(a)...); },
            cr::dppo_options{.divergence = divergence,
                             .clip_high = 0.05,
                             .truncation = 1.5,
                             .aggregation = mode});
      check(
          "dro", [](auto&&... a) { return cr::dro_loss(std::forward<decltype(a)>(a)...); },
          cr::dro_options{.beta = 0.5, .aggregation = mode});
      check(
          "sapo", [](auto&&... a) { return cr::sapo_loss(std::forward<decltype(a)>(a)...); },
          cr::sapo_options{.aggregation = mode});
      // The sequence-level ratios: each token's gradient depends only on its sequence and
      // the step's normaliser (veRL's local forms are not invariant:
      // test_sequence_ratio_losses.cpp shows it).
      check(
          "gspo", [](auto&&... a) { return cr::gspo_loss(std::forward<decltype(a)>(a)...); },
          cr::gspo_options{.clip_high = 0.28, .aggregation = mode});
      check(
          "geo_mean",
          [](auto&&... a) { return cr::geo_mean_loss(std::forward<decltype(a)>(a)...); },
          cr::geo_mean_options{.aggregation = mode});
      if (!weighted)  // sequence SAPO takes no weights (its gradient is the row's sum)
        check(
            "sequence_sapo",
            [](auto&&... a) { return cr::sequence_sapo_loss(std::forward<decltype(a)>(a)...); },
            cr::sequence_sapo_options{.aggregation = mode});
    }
  }
}

TEST(PartitionInvariance, KlLossEveryEstimatorAndMode) {
  std::uint64_t seed = 200;
  for (const auto estimator :
       {kl_estimator::k1, kl_estimator::abs, kl_estimator::k2, kl_estimator::k3}) {
    for (const auto mode : all_aggregation_modes) {
      const auto batch = batch_for(seed);
      const cascade_rl::kl_loss_options options{
          .kl = {.estimator = estimator}, .coefficient = 0.01, .aggregation = mode};
      const slice_loss loss = [&](const token_layout& layout, std::size_t b, std::size_t e,
                                  std::span<double> grad, const loss_normalizer& normalizer) {
        auto sub = [&](const std::vector<double>& v) {
          return std::span<const double>(v).subspan(b, e - b);
        };
        return run_result{cascade_rl::kl_loss(exec::seq, layout,
                                              {.log_probs = sub(batch.log_probs),
                                               .ref_log_probs = sub(batch.ref_log_probs)},
                                              grad, normalizer, options),
                          0};
      };
      expect_partition_invariant(batch, mode, loss, seed++,
                                 std::string(cascade_rl::to_string(estimator)) + " " +
                                     std::string(cascade_rl::to_string(mode)));
    }
  }
}

// The classic mistake, for contrast: normalising each micro-batch by its own token
// count changes the gradient as soon as the slices differ in size.
TEST(PartitionInvariance, LocalNormalisersWouldNotBeInvariant) {
  const auto batch = batch_for(300);
  const auto layout = batch.layout();
  const std::size_t n = batch.tokens();
  std::vector<double> whole(n), sliced(n);
  auto run = [&](const token_layout& l, std::size_t b, std::size_t e, std::span<double> grad) {
    const auto normalizer_for =
        [counts = cascade_rl::local_loss_counts(exec::seq, l)](cascade_rl::loss_aggregation mode) {
          return counts.normalizer(mode, 1.0);
        };
    cascade_rl::reinforce_loss(
        exec::seq, l,
        {.log_probs = std::span<const double>(batch.log_probs).subspan(b, e - b),
         .advantages = std::span<const double>(batch.advantages).subspan(b, e - b)},
        grad, normalizer_for(loss_aggregation::token_mean));
  };
  run(layout, 0, n, whole);
  const auto first = cascade_rl::testing::slice_sequences(layout, 0, 3);
  const auto rest = cascade_rl::testing::slice_sequences(layout, 3, layout.sequences());
  for (const auto* slice : {&first, &rest})
    run(slice->layout(), slice->token_begin, slice->token_end,
        std::span<double>(sliced).subspan(slice->token_begin, slice->token_end - slice->token_begin));
  EXPECT_NE(whole, sliced);
}

}  // namespace partition_invariance_cases
}  // namespace
