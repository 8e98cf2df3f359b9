// The portable Thrust path (kernels/cascade_rl/cuda/portable.hpp) on a host Thrust
// system, against the host executors. tests.cmake builds this file twice, for
// THRUST_DEVICE_SYSTEM_CPP and THRUST_DEVICE_SYSTEM_OMP, with g++: no GPU needed. The
// path mirrors the host core's blocking, so the results must be the same bits as
// exec::seq, for any OpenMP thread count.

#include <cuda_bf16.h>
#include <gtest/gtest.h>
#include <thrust/execution_policy.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "cascade_rl/cascade_rl.hpp"
#include "cascade_rl/cuda/portable.hpp"
#include "support/expect_error.hpp"
#include "support/log_softmax_reference.hpp"
#include "support/random_batch.hpp"
#include "support/rollout_correction_values.hpp"

#if THRUST_DEVICE_SYSTEM == THRUST_DEVICE_SYSTEM_OMP
#include <omp.h>
#endif

namespace {

namespace cr = cascade_rl;
namespace portable = cascade_rl::cuda::portable;
using cr::cuda::device_group_layout;
using cr::cuda::device_token_layout;

// The Thrust "device" system of this build (CPP or OMP): host memory either way.
const auto& system = thrust::device;

struct group_case {
  std::vector<float> rewards;
  std::vector<std::int64_t> offsets;  // empty: uniform
  std::size_t group_size = 0;
  std::size_t groups = 0;

  [[nodiscard]] cr::group_layout host() const {
    return offsets.empty() ? cr::group_layout::uniform({.groups = groups, .size = group_size})
                           : cr::group_layout(offsets);
  }
  [[nodiscard]] device_group_layout device() const {
    return offsets.empty() ? device_group_layout::uniform({.groups = groups, .size = group_size})
                           : device_group_layout::variable(offsets.data(), groups, rewards.size());
  }
};

// Binary rewards (many ties, zero-variance groups) or continuous ones.
group_case make_groups(std::uint64_t seed, std::size_t groups, std::size_t group_size,
                       bool variable, bool binary) {
  std::mt19937_64 rng(seed);
  std::bernoulli_distribution coin(0.3);
  std::normal_distribution<float> normal(0.35f, 1.0f);
  std::uniform_int_distribution<std::size_t> size(2, 2 * group_size);  // singletons: own test
  group_case c;
  c.groups = groups;
  c.group_size = group_size;
  std::size_t n = groups * group_size;
  if (variable) {
    c.offsets.push_back(0);
    for (std::size_t g = 0; g < groups; ++g) c.offsets.push_back(c.offsets.back() + static_cast<std::int64_t>(size(rng)));
    n = static_cast<std::size_t>(c.offsets.back());
  }
  for (std::size_t i = 0; i < n; ++i) c.rewards.push_back(binary ? (coin(rng) ? 1.0f : 0.0f) : normal(rng));
  return c;
}

std::vector<group_case> group_cases() {
  std::vector<group_case> cases;
  std::uint64_t seed = 1;
  for (std::size_t g : {2, 5, 16, 64, 100})
    for (bool variable : {false, true})
      for (bool binary : {false, true}) cases.push_back(make_groups(seed++, 37, g, variable, binary));
  return cases;
}

template <class V>
void expect_same_bits(const std::vector<V>& a, const std::vector<V>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i])))) {
      ADD_FAILURE() << what << "[" << i << "]: " << a[i] << " vs host " << b[i];
      return;
    }
}

TEST(PortableGroups, UniformDeviceLayoutTakesItsShapeByName) {
  const auto groups = device_group_layout::uniform({.groups = 3, .size = 4});
  EXPECT_EQ(groups.groups, 3u);
  EXPECT_EQ(groups.group_size, 4u);
  EXPECT_EQ(groups.sequences, 12u);
  EXPECT_EQ(groups.end(2), 12u);
  cr::testing::expect_error_naming([] { (void)device_group_layout::uniform({.groups = 3}); },
                                   "uniform_groups.size");
}

TEST(PortableGroups, GrpoMatchesHostBitForBit) {
  std::vector<cr::grpo_options> variants(8);
  variants[1].scale_by_std = false;
  variants[2].epsilon_at = cr::epsilon_placement::inside_sqrt;
  variants[3].estimator = cr::std_estimator::biased;
  variants[4].accumulation = cr::mean_accumulation::float32_sequential;
  variants[5].accumulation = cr::mean_accumulation::float32_rounded_sum;
  variants[6].singleton = cr::singleton_rule::raw_score;
  variants[7].singleton = cr::singleton_rule::zero_advantage;
  for (const auto& c : group_cases())
    for (const auto& options : variants) {
      std::vector<float> host(c.rewards.size()), device(c.rewards.size());
      std::vector<cr::group_statistic> stats(c.groups);
      cr::grpo_advantages(cr::exec::seq, c.host(), c.rewards, host, options);
      portable::grpo_advantages(system, c.rewards.data(), c.device(), device.data(), stats.data(), options);
      expect_same_bits(device, host, "grpo advantages");
    }
}

TEST(PortableGroups, SingletonsAndNonFiniteGroups) {
  group_case c = make_groups(99, 20, 3, true, false);
  c.rewards[4] = std::numeric_limits<float>::quiet_NaN();
  c.rewards[c.rewards.size() - 1] = std::numeric_limits<float>::infinity();
  c.offsets.insert(c.offsets.begin() + 3, c.offsets[2] + 1);  // a singleton group
  ++c.groups;
  c.offsets.back() = static_cast<std::int64_t>(c.rewards.size());
  for (auto singleton : {cr::singleton_rule::raw_score, cr::singleton_rule::zero_advantage}) {
    cr::grpo_options g{.singleton = singleton, .nonfinite = cr::nonfinite_rule::zero_group};
    std::vector<float> host(c.rewards.size()), device(c.rewards.size());
    cr::grpo_advantages(cr::exec::seq, c.host(), c.rewards, host, g);
    portable::grpo_advantages(system, c.rewards.data(), c.device(), device.data(), nullptr, g);
    expect_same_bits(device, host, "grpo with singletons and NaN");
    cr::rloo_options r{.singleton = singleton, .nonfinite = cr::nonfinite_rule::zero_group};
    cr::rloo_advantages(cr::exec::seq, c.host(), c.rewards, host, r);
    portable::rloo_advantages(system, c.rewards.data(), c.device(), device.data(), nullptr, r);
    expect_same_bits(device, host, "rloo with singletons and NaN");
  }
}

TEST(PortableGroups, RlooAndStatisticsMatchHost) {
  for (const auto& c : group_cases()) {
    std::vector<float> host(c.rewards.size()), device(c.rewards.size());
    cr::rloo_advantages(cr::exec::seq, c.host(), c.rewards, host);
    portable::rloo_advantages(system, c.rewards.data(), c.device(), device.data(), nullptr, cr::rloo_options{});
    expect_same_bits(device, host, "rloo advantages");

    for (auto estimator : {cr::std_estimator::unbiased, cr::std_estimator::biased}) {
      const cr::group_statistics_options options{.estimator = estimator};
      std::vector<cr::group_statistic> hs(c.groups), ds(c.groups);
      cr::group_statistics(cr::exec::seq, c.host(), c.rewards, std::span<cr::group_statistic>(hs),
                           options);
      portable::group_statistics(system, c.rewards.data(), c.device(), ds.data(), options);
      for (std::size_t g = 0; g < c.groups; ++g) {
        EXPECT_EQ(ds[g].mean, hs[g].mean);
        EXPECT_EQ(ds[g].std, hs[g].std);
        EXPECT_EQ(ds[g].min, hs[g].min);
        EXPECT_EQ(ds[g].max, hs[g].max);
        EXPECT_EQ(ds[g].count, hs[g].count);
        EXPECT_EQ(ds[g].zero_variance, hs[g].zero_variance);
      }
    }
  }
}

// ---- losses -------------------------------------------------------------------------

void expect_same_metrics(const cr::policy_loss_result& d, const cr::policy_loss_result& h) {
  EXPECT_EQ(d.loss, h.loss);
  EXPECT_EQ(d.metrics.valid_tokens, h.metrics.valid_tokens);
  EXPECT_EQ(d.metrics.clipped, h.metrics.clipped);
  EXPECT_EQ(d.metrics.dual_clipped, h.metrics.dual_clipped);
  EXPECT_EQ(d.metrics.approx_kl_sum, h.metrics.approx_kl_sum);
  EXPECT_EQ(d.metrics.importance_truncated, h.metrics.importance_truncated);
  EXPECT_EQ(d.metrics.importance_masked, h.metrics.importance_masked);
}

cr::testing::random_batch<float> big_batch(std::uint64_t seed) {
  // Long enough to span more than eight reduction blocks of 4096 tokens and end in a
  // partial one, so that blocks, lanes and the block order are all compared.
  return cr::testing::make_random_batch<float>(seed, {.sequences = 1200, .max_length = 120});
}

device_token_layout device_layout(const cr::testing::random_batch<float>& b) {
  return {b.offsets.data(), b.mask.data(), b.offsets.size() - 1, b.tokens()};
}

std::vector<cr::importance_options> importance_variants() {
  return {{}, {.mode = cr::importance_sampling::truncated, .cap = 1.5},
          {.mode = cr::importance_sampling::band_mask, .band_low = 0.5, .band_high = 2.0}};
}

TEST(PortableLosses, ReinforceEveryModeMatchesHost) {
  const auto b = big_batch(3);
  const float* const no_weights = nullptr;
  const auto layout = b.layout();
  const auto normalizer_for =
      [counts = cr::local_loss_counts(cr::exec::seq, layout)](cascade_rl::loss_aggregation mode) {
        return counts.normalizer(mode, 97.0);
      };
  std::vector<portable::loss_tally> scratch(portable::scratch_tallies(b.tokens()));
  for (auto mode : cr::testing::all_aggregation_modes)
    for (auto surrogate : {cr::reinforce_surrogate::ratio, cr::reinforce_surrogate::log_prob})
      for (const auto& importance : importance_variants()) {
        const cr::reinforce_options options{.aggregation = mode, .surrogate = surrogate, .importance = importance};
        std::vector<float> hg(b.tokens()), dg(b.tokens());
        const auto h = cr::reinforce_loss(cr::exec::seq, layout,
                                          {.log_probs = b.log_probs,
                                           .advantages = b.advantages,
                                           .behaviour_log_probs = b.behaviour_log_probs},
                                          hg, normalizer_for(mode), options);
        portable::reinforce_loss(system, device_layout(b), b.log_probs.data(), b.advantages.data(),
                                 b.behaviour_log_probs.data(), no_weights, dg.data(),
                                 normalizer_for(mode), options, scratch.data());
        expect_same_metrics(scratch[portable::result_index(b.tokens())], h);
        expect_same_bits(dg, hg, "reinforce dL/dlogp");
      }
}

TEST(PortableLosses, PpoClipEveryModeMatchesHost) {
  const auto b = big_batch(4);
  const auto layout = b.layout();
  const auto normalizer_for =
      [counts = cr::local_loss_counts(cr::exec::seq, layout)](cascade_rl::loss_aggregation mode) {
        return counts.normalizer(mode, 64.0);
      };
  std::vector<portable::loss_tally> scratch(portable::scratch_tallies(b.tokens()));
  std::vector<cr::ppo_clip_options> variants(3);
  variants[1].clip_high = 0.28;
  variants[2].dual_clip = 3.0;
  variants[2].log_ratio_clamp = 0.5;
  // Without and with given weights (veRL's vanilla rollout_is_weights, NeMo-RL's
  // precomputed actor importance weights).
  const std::vector<float> given = cr::testing::rollout_is_weights_of(b);
  for (const std::span<const float> weights : {std::span<const float>{}, std::span(given)})
    for (auto mode : cr::testing::all_aggregation_modes)
      for (auto options : variants)
        for (const auto& importance : importance_variants()) {
          options.aggregation = mode;
          options.importance = importance;
          std::vector<float> hg(b.tokens()), dg(b.tokens());
          const auto h = cr::ppo_clip_loss(cr::exec::seq, layout,
                                           {.log_probs = b.log_probs,
                                            .old_log_probs = b.old_log_probs,
                                            .advantages = b.advantages,
                                            .behaviour_log_probs = b.behaviour_log_probs,
                                            .rollout_is_weights = weights},
                                           hg, normalizer_for(mode), options);
          portable::ppo_clip_loss(system, device_layout(b), b.log_probs.data(),
                                  b.old_log_probs.data(), b.advantages.data(),
                                  b.behaviour_log_probs.data(),
                                  weights.empty() ? nullptr : weights.data(), dg.data(),
                                  normalizer_for(mode), options, scratch.data());
          const auto d = scratch[portable::result_index(b.tokens())];
          expect_same_metrics(d, h);
          EXPECT_GT(h.metrics.clipped, 0u);
          expect_same_bits(dg, hg, weights.empty() ? "ppo dL/dlogp" : "weighted ppo dL/dlogp");
        }
}

// veRL's GPG and compute_policy_loss_reinforce: the log-prob surrogate with given weights,
// alone and under the band mask.
TEST(PortableLosses, ReinforceWithGivenWeightsMatchesHost) {
  const auto b = big_batch(8);
  const auto layout = b.layout();
  const auto weights = cr::testing::rollout_is_weights_of(b);
  const auto normalizer_for =
      [counts = cr::local_loss_counts(cr::exec::seq, layout)](cascade_rl::loss_aggregation mode) {
        return counts.normalizer(mode, 64.0);
      };
  std::vector<portable::loss_tally> scratch(portable::scratch_tallies(b.tokens()));
  for (auto mode : cr::testing::all_aggregation_modes)
    for (const auto& importance : importance_variants()) {
      const cr::reinforce_options options{.aggregation = mode,
                                          .surrogate = cr::reinforce_surrogate::log_prob,
                                          .importance = importance};
      std::vector<float> hg(b.tokens()), dg(b.tokens());
      const auto h = cr::reinforce_loss(cr::exec::seq, layout,
                                        {.log_probs = b.log_probs,
                                         .advantages = b.advantages,
                                         .behaviour_log_probs = b.behaviour_log_probs,
                                         .rollout_is_weights = weights},
                                        hg, normalizer_for(mode), options);
      portable::reinforce_loss(system, device_layout(b), b.log_probs.data(), b.advantages.data(),
                               b.behaviour_log_probs.data(), weights.data(), dg.data(),
                               normalizer_for(mode), options, scratch.data());
      expect_same_metrics(scratch[portable::result_index(b.tokens())], h);
      expect_same_bits(dg, hg, "weighted reinforce dL/dlogp");
    }
}

// The ratio losses (CISPO, DPPO-TV/KL, DRO, SAPO, GSPO, GMPO, sequence SAPO), every mode,
// with and without given weights (sequence SAPO without: it takes none); options that make their clips, truncations and clamps engage. A
// row each.
TEST(PortableLosses, RatioLossesEveryModeMatchHost) {
  const auto b = big_batch(7);
  const auto layout = b.layout();
  const auto weights = cr::testing::rollout_is_weights_of(b);
  const auto counts = cr::local_loss_counts(cr::exec::seq, layout);
  std::vector<portable::loss_tally> scratch(portable::scratch_tallies(b.tokens()));
  std::vector<double> sequence_scratch(layout.sequences());
  for (auto mode : cr::testing::all_aggregation_modes)
    for (const bool weighted : {false, true}) {
      const cr::policy_ratio_inputs<float> inputs{
          .log_probs = b.log_probs,
          .old_log_probs = b.old_log_probs,
          .advantages = b.advantages,
          .rollout_is_weights =
              weighted ? std::span<const float>(weights) : std::span<const float>{}};
      const cr::loss_normalizer normalizer = counts.normalizer(mode, 64.0);
      const auto check = [&](const std::string& name, const auto& host_loss,
                             const auto& portable_loss, const auto& options) {
        SCOPED_TRACE(name + " " + std::string(cr::to_string(mode)) + (weighted ? " weighted" : ""));
        std::vector<float> hg(b.tokens()), dg(b.tokens());
        const cr::policy_loss_result h =
            host_loss(cr::exec::seq, layout, inputs, hg, normalizer, options);
        portable_loss(system, device_layout(b), b.log_probs.data(), b.old_log_probs.data(),
                      b.advantages.data(), weighted ? weights.data() : nullptr, dg.data(),
                      normalizer, options, scratch.data());
        expect_same_metrics(scratch[portable::result_index(b.tokens())], h);
        expect_same_bits(dg, hg, "dL/dlogp");
        return h;
      };
      const auto cispo = check(
          "cispo", [](auto&&... a) { return cr::cispo_loss(std::forward<decltype(a)>(a)...); },
          [](auto&&... a) { portable::cispo_loss(std::forward<decltype(a)>(a)...); },
          cr::cispo_options{
              .clip_low = 0.1, .clip_high = 0.28, .log_ratio_clamp = 0.5, .aggregation = mode});
      EXPECT_GT(cispo.metrics.clipped, 0u);
      for (const auto divergence :
           {cr::dppo_divergence::total_variation, cr::dppo_divergence::binary_kl}) {
        const auto dppo = check(
            "dppo", [](auto&&... a) { return cr::dppo_loss(std::forward<decltype(a)>(a)...); },
            [](auto&&... a) { portable::dppo_loss(std::forward<decltype(a)>(a)...); },
            cr::dppo_options{.divergence = divergence,
                             .clip_high = 0.05,
                             .truncation = 1.5,
                             .aggregation = mode});
        EXPECT_GT(dppo.metrics.clipped, 0u);
        EXPECT_GT(dppo.metrics.dual_clipped, 0u);
      }
      check(
          "dro", [](auto&&... a) { return cr::dro_loss(std::forward<decltype(a)>(a)...); },
          [](auto&&... a) { portable::dro_loss(std::forward<decltype(a)>(a)...); },
          cr::dro_options{.beta = 0.5, .aggregation = mode});
      check(
          "sapo", [](auto&&... a) { return cr::sapo_loss(std::forward<decltype(a)>(a)...); },
          [](auto&&... a) { portable::sapo_loss(std::forward<decltype(a)>(a)...); },
          cr::sapo_options{.tau_pos = 2.0, .log_ratio_clamp = 0.5, .aggregation = mode});
      // The sequence-level ratios: a pre-pass per sequence into the caller's scratch (the
      // weights' geometric mean in GMPO's row losses), then the token pass; tight ranges
      // so the clips engage, and GSPO's log-ratio bound too (a low one).
      const auto with_sequence_scratch = [&sequence_scratch](const auto& loss) {
        return [&sequence_scratch, loss](const auto& sys, const auto& lay, const float* lp,
                                         const float* old, const float* adv, const float* w,
                                         float* g, const cr::loss_normalizer& n, const auto& o,
                                         portable::loss_tally* tallies) {
          loss(sys, lay, lp, old, adv, w, g, n, o, sequence_scratch.data(), tallies);
        };
      };
      for (const double bound : {10.0, 0.05}) {
        const auto gspo = check(
            "gspo bound " + std::to_string(bound),
            [](auto&&... a) { return cr::gspo_loss(std::forward<decltype(a)>(a)...); },
            with_sequence_scratch(
                [](auto&&... a) { portable::gspo_loss(std::forward<decltype(a)>(a)...); }),
            cr::gspo_options{.clip_low = 0.02,
                             .clip_high = 0.03,
                             .log_ratio_bound = bound,
                             .aggregation = mode});
        EXPECT_GT(gspo.metrics.clipped, 0u);
      }
      const auto geo_mean = check(
          "geo_mean",
          [](auto&&... a) { return cr::geo_mean_loss(std::forward<decltype(a)>(a)...); },
          with_sequence_scratch(
              [](auto&&... a) { portable::geo_mean_loss(std::forward<decltype(a)>(a)...); }),
          cr::geo_mean_options{.clip_low = 0.1, .clip_high = 0.15, .aggregation = mode});
      EXPECT_GT(geo_mean.metrics.clipped, 0u);
      EXPECT_GT(geo_mean.metrics.dual_clipped, 0u);
      // Sequence SAPO: its rows (ratio and gradient) into their own scratch; it takes no
      // weights (the host refuses them), so its row runs unweighted only.
      if (!weighted) {
        SCOPED_TRACE(std::string("sequence_sapo ") + std::string(cr::to_string(mode)));
        std::vector<cr::terms::sequence_sapo_row> rows(layout.sequences());
        const cr::sequence_sapo_options options{.tau_pos = 0.8, .tau_neg = 1.3, .aggregation = mode};
        std::vector<float> hg(b.tokens()), dg(b.tokens());
        const auto h = cr::sequence_sapo_loss(cr::exec::seq, layout, inputs, hg, normalizer, options);
        portable::sequence_sapo_loss(system, device_layout(b), b.log_probs.data(),
                                     b.old_log_probs.data(), b.advantages.data(), dg.data(),
                                     normalizer, options, rows.data(), scratch.data());
        expect_same_metrics(scratch[portable::result_index(b.tokens())], h);
        expect_same_bits(dg, hg, "dL/dlogp");
      }
    }
}

// Without a mask the host runs its branch-free loop (CISPO as the ratio losses' witness).
TEST(PortableLosses, UnmaskedCispoMatchesHost) {
  const auto b = big_batch(7);
  const auto weights = cr::testing::rollout_is_weights_of(b);
  std::vector<portable::loss_tally> scratch(portable::scratch_tallies(b.tokens()));
  const cr::token_layout unmasked(b.offsets);
  const device_token_layout dlayout{b.offsets.data(), nullptr, b.offsets.size() - 1, b.tokens()};
  const auto counts = cr::local_loss_counts(cr::exec::seq, unmasked);
  std::vector<float> hg(b.tokens()), dg(b.tokens());
  const auto h = cr::cispo_loss(cr::exec::par.with_threads(3), unmasked,
                                {.log_probs = b.log_probs,
                                 .old_log_probs = b.old_log_probs,
                                 .advantages = b.advantages,
                                 .rollout_is_weights = weights},
                                hg, counts.normalizer(cr::loss_aggregation::token_mean, 1.0));
  portable::cispo_loss(system, dlayout, b.log_probs.data(), b.old_log_probs.data(),
                       b.advantages.data(), weights.data(), dg.data(),
                       counts.normalizer(cr::loss_aggregation::token_mean, 1.0),
                       cr::cispo_options{}, scratch.data());
  expect_same_metrics(scratch[portable::result_index(b.tokens())], h);
  expect_same_bits(dg, hg, "unmasked cispo dL/dlogp");
}

// Without a mask the host runs its branch-free loss loop: the same bits all the same.
TEST(PortableLosses, UnmaskedReinforceAndPpoMatchHost) {
  const auto b = big_batch(6);
  ASSERT_GT(b.tokens(), 8 * cr::detail::reduce_block_size);
  const cr::token_layout layout(b.offsets);
  const device_token_layout dlayout{b.offsets.data(), nullptr, b.offsets.size() - 1, b.tokens()};
  const float* const no_behaviour = nullptr;
  const auto normalizer_for =
      [counts = cr::local_loss_counts(cr::exec::seq, layout)](cascade_rl::loss_aggregation mode) {
        return counts.normalizer(mode, 50.0);
      };
  std::vector<portable::loss_tally> scratch(portable::scratch_tallies(b.tokens()));
  for (auto mode : cr::testing::all_aggregation_modes)
    for (auto surrogate : {cr::reinforce_surrogate::ratio, cr::reinforce_surrogate::log_prob}) {
      const cr::reinforce_options options{.aggregation = mode, .surrogate = surrogate};
      std::vector<float> hg(b.tokens()), dg(b.tokens());
      const auto h = cr::reinforce_loss(cr::exec::par.with_threads(3), layout,
                                        {.log_probs = b.log_probs, .advantages = b.advantages}, hg,
                                        normalizer_for(mode), options);
      portable::reinforce_loss(system, dlayout, b.log_probs.data(), b.advantages.data(),
                               no_behaviour, no_behaviour, dg.data(), normalizer_for(mode), options,
                               scratch.data());
      expect_same_metrics(scratch[portable::result_index(b.tokens())], h);
      expect_same_bits(dg, hg, "unmasked reinforce dL/dlogp");
    }
  const cr::ppo_clip_options ppo{.clip_high = 0.28, .dual_clip = 3.0};
  std::vector<float> hg(b.tokens()), dg(b.tokens());
  const auto h = cr::ppo_clip_loss(
      cr::exec::par.with_threads(2), layout,
      {.log_probs = b.log_probs, .old_log_probs = b.old_log_probs, .advantages = b.advantages}, hg,
      normalizer_for(ppo.aggregation), ppo);
  portable::ppo_clip_loss(system, dlayout, b.log_probs.data(), b.old_log_probs.data(),
                          b.advantages.data(), no_behaviour, no_behaviour, dg.data(),
                          normalizer_for(ppo.aggregation), ppo, scratch.data());
  expect_same_metrics(scratch[portable::result_index(b.tokens())], h);
  expect_same_bits(dg, hg, "unmasked ppo dL/dlogp");
}

TEST(PortableLosses, KlEstimatorsAndAggregationMatchHost) {
  const auto b = big_batch(5);
  const auto layout = b.layout();
  const auto normalizer_for =
      [counts = cr::local_loss_counts(cr::exec::seq, layout)](cascade_rl::loss_aggregation mode) {
        return counts.normalizer(mode, 10.0);
      };
  std::vector<portable::loss_tally> scratch(portable::scratch_tallies(b.tokens()));
  for (auto estimator :
       {cr::kl_estimator::k1, cr::kl_estimator::abs, cr::kl_estimator::k2, cr::kl_estimator::k3})
    for (const bool straight_through : {false, true}) {
      const cr::kl_options kl{.estimator = estimator,
                              .input_clamp = 1.0,
                              .output_clamp = 0.9,
                              .straight_through = straight_through};
      std::vector<float> hv(b.tokens()), hg(b.tokens()), dv(b.tokens()), dg(b.tokens());
      const double h =
          cr::kl_penalty(cr::exec::seq, layout,
                         {.log_probs = b.log_probs, .ref_log_probs = b.ref_log_probs}, hv, hg, kl);
      portable::kl_penalty(system, device_layout(b), b.log_probs.data(), b.ref_log_probs.data(),
                           dv.data(), dg.data(), kl, scratch.data());
      EXPECT_EQ(scratch[portable::result_index(b.tokens())].loss, h);
      expect_same_bits(dv, hv, "kl values");
      expect_same_bits(dg, hg, "kl gradient");
      for (auto mode : cr::testing::all_aggregation_modes) {
        const cr::kl_loss_options options{.kl = kl, .coefficient = 0.25, .aggregation = mode};
        const double hl = cr::kl_loss(cr::exec::seq, layout,
                                      {.log_probs = b.log_probs, .ref_log_probs = b.ref_log_probs},
                                      hg, normalizer_for(mode), options);
        portable::kl_loss(system, device_layout(b), b.log_probs.data(), b.ref_log_probs.data(),
                          dg.data(), normalizer_for(mode), options, scratch.data());
        EXPECT_EQ(scratch[portable::result_index(b.tokens())].loss, hl);
        expect_same_bits(dg, hg, "kl loss gradient");

        const double ha = cr::aggregate_token_losses(
            cr::exec::seq, layout, {.token_losses = b.ref_log_probs, .token_grads = b.advantages},
            hg, normalizer_for(mode), mode);
        portable::aggregate_token_losses(system, device_layout(b), b.ref_log_probs.data(),
                                         b.advantages.data(), dg.data(), normalizer_for(mode), mode,
                                         scratch.data());
        EXPECT_EQ(scratch[portable::result_index(b.tokens())].loss, ha);
        expect_same_bits(dg, hg, "aggregated gradient");
      }
    }
}

#if THRUST_DEVICE_SYSTEM == THRUST_DEVICE_SYSTEM_OMP
TEST(PortableLosses, SameBitsForAnyThreadCount) {
  const auto b = big_batch(6);
  const auto normalizer_for = [counts = cr::local_loss_counts(cr::exec::seq, b.layout())](
                                  cascade_rl::loss_aggregation mode) {
    return counts.normalizer(mode, 1.0);
  };
  std::vector<portable::loss_tally> scratch(portable::scratch_tallies(b.tokens()));
  std::vector<double> losses;
  for (int threads : {1, 2, 3, 8}) {
    omp_set_num_threads(threads);
    std::vector<float> g(b.tokens());
    portable::ppo_clip_loss(
        system, device_layout(b), b.log_probs.data(), b.old_log_probs.data(), b.advantages.data(),
        b.behaviour_log_probs.data(), static_cast<const float*>(nullptr), g.data(),
        normalizer_for(cr::loss_aggregation::token_mean), cr::ppo_clip_options{}, scratch.data());
    losses.push_back(scratch[portable::result_index(b.tokens())].loss);
  }
  for (double l : losses) EXPECT_EQ(l, losses[0]);
}
#endif

// ---- log-probs -----------------------------------------------------------------------

using cascade_rl::testing::reference_row;

template <class L>
void check_log_probs(std::size_t rows, std::size_t vocab, float temperature) {
  std::mt19937_64 rng(rows * 31 + vocab);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::uniform_int_distribution<std::int64_t> pick(0, static_cast<std::int64_t>(vocab) - 1);
  const std::size_t stride = vocab + 3;  // padded rows
  std::vector<L> logits(rows * stride);
  for (auto& v : logits) v = static_cast<L>(normal(rng));
  for (std::size_t r = 0; r < rows; ++r)
    if (vocab > 4) logits[r * stride + 1] = static_cast<L>(-std::numeric_limits<float>::infinity());
  std::vector<std::int64_t> labels(rows);
  for (auto& l : labels) {
    l = pick(rng);
    if (vocab > 4 && l == 1) l = 0;
  }
  std::vector<float> logp(rows), entropy(rows);
  portable::log_probs_from_logits(system, logits.data(), rows, vocab, stride, labels.data(),
                                  logp.data(), entropy.data(), 1.0f / temperature);
  // The host's bits (terms/log_sum_exp.hpp's order on both paths)...
  using host_logit = std::conditional_t<std::is_same_v<L, float>, float, cr::bfloat16>;
  std::vector<host_logit> host_logits(logits.size());
  std::memcpy(static_cast<void*>(host_logits.data()), logits.data(), logits.size() * sizeof(L));
  std::vector<float> host_logp(rows), host_entropy(rows);
  cr::log_probs_from_logits(cr::exec::seq, {.vocab = vocab, .row_stride = stride},
                            std::span<const host_logit>(host_logits),
                            std::span<const std::int64_t>(labels), std::span<float>(host_logp),
                            std::span<float>(host_entropy), temperature);
  EXPECT_EQ(std::memcmp(logp.data(), host_logp.data(), rows * sizeof(float)), 0) << "log_probs, V " << vocab;
  EXPECT_EQ(std::memcmp(entropy.data(), host_entropy.data(), rows * sizeof(float)), 0) << "entropy, V " << vocab;
  // The backward pass with both seeds, the host's bits.
  std::vector<float> g(rows), h(rows);
  for (std::size_t r = 0; r < rows; ++r) {
    g[r] = normal(rng);
    h[r] = normal(rng);
  }
  std::vector<float> grad(rows * stride, 0.0f), host_grad(rows * stride, 0.0f);
  portable::log_probs_backward(system, logits.data(), rows, vocab, stride, labels.data(), g.data(),
                               h.data(), grad.data(), 1.0f / temperature);
  cr::log_probs_backward(cr::exec::seq, {.vocab = vocab, .row_stride = stride},
                         std::span<const host_logit>(host_logits),
                         std::span<const std::int64_t>(labels), {.log_probs = g, .entropy = h},
                         std::span<float>(host_grad), temperature);
  EXPECT_EQ(std::memcmp(grad.data(), host_grad.data(), grad.size() * sizeof(float)), 0)
      << "logits gradient, V " << vocab;
  // ... and near a double-precision log-softmax.
  for (std::size_t r = 0; r < rows; ++r) {
    std::vector<double> x(vocab);
    for (std::size_t v = 0; v < vocab; ++v)
      x[v] = static_cast<double>(static_cast<float>(logits[r * stride + v])) * (1.0 / temperature);
    double want_logp = 0, want_entropy = 0;
    reference_row(x, labels[r], want_logp, want_entropy);
    EXPECT_NEAR(logp[r], want_logp, 2e-5 * (1 + std::abs(want_logp))) << "row " << r << " V " << vocab;
    EXPECT_NEAR(entropy[r], want_entropy, 2e-5 * (1 + std::abs(want_entropy))) << "row " << r << " V " << vocab;
  }
}

TEST(PortableLogProbs, Float32MatchesDoubleReference) {
  for (std::size_t vocab : {1, 7, 8, 1000, 32771}) check_log_probs<float>(5, vocab, 1.0f);
  check_log_probs<float>(3, 5000, 0.7f);
}

TEST(PortableLogProbs, Bfloat16MatchesDoubleReference) {
  for (std::size_t vocab : {3, 64, 4099}) check_log_probs<__nv_bfloat16>(4, vocab, 1.0f);
}

// ---- filtering -------------------------------------------------------------------------

TEST(PortableFilter, DropsTheSameGroupsAsHost) {
  for (const auto& c : group_cases()) {
    const auto host = cr::drop_zero_variance_groups(cr::exec::seq, c.host(), c.rewards);
    std::vector<std::uint8_t> keep_group(c.groups), keep_sequence(c.rewards.size());
    std::vector<std::int64_t> kept(c.rewards.size()), offsets(c.groups + 1), scratch(c.groups);
    const auto counts = portable::drop_zero_variance_groups(
        system, c.rewards.data(), c.device(), keep_group.data(), keep_sequence.data(), kept.data(),
        offsets.data(), scratch.data());
    EXPECT_EQ(keep_group, host.kept_groups);
    ASSERT_EQ(counts.kept_sequences, host.kept_sequences.size());
    for (std::size_t k = 0; k < counts.kept_sequences; ++k)
      EXPECT_EQ(static_cast<std::size_t>(kept[k]), host.kept_sequences[k]);
    ASSERT_EQ(counts.kept_groups + 1, host.group_offsets.size());
    for (std::size_t g = 0; g <= counts.kept_groups; ++g) EXPECT_EQ(offsets[g], host.group_offsets[g]);
  }
}

TEST(PortableFilter, ZeroVarianceFlagsMatchHost) {
  for (const auto& c : group_cases()) {
    std::vector<std::uint8_t> host(c.groups), device(c.groups);
    cr::zero_variance_groups(cr::exec::seq, c.host(), c.rewards, std::span<std::uint8_t>(host));
    portable::zero_variance_groups(system, c.rewards.data(), c.device(), device.data());
    EXPECT_EQ(device, host);
  }
}

TEST(PortableFilter, GatherMatchesHost) {
  for (const auto& c : group_cases()) {
    const auto selection = cr::drop_zero_variance_groups(cr::exec::seq, c.host(), c.rewards);
    const std::size_t kept = selection.kept_sequences.size();
    std::vector<float> host(kept), device(kept);
    cr::gather_sequences(cr::exec::seq, selection, c.rewards, host);
    portable::gather_sequences(system, c.rewards.data(), selection.kept_sequences.data(), kept, device.data());
    expect_same_bits(device, host, "gathered rewards");
    // Any trivially copyable value, with the int64 indices the CUDA filter writes.
    std::vector<std::int64_t> ids(c.rewards.size()), host_ids(kept), device_ids(kept);
    for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int64_t>(1000 + 7 * i);
    const std::vector<std::int64_t> kept64(selection.kept_sequences.begin(), selection.kept_sequences.end());
    cr::gather_sequences(cr::exec::seq, selection, std::span<const std::int64_t>(ids),
                         std::span<std::int64_t>(host_ids));
    portable::gather_sequences(system, ids.data(), kept64.data(), kept, device_ids.data());
    EXPECT_EQ(device_ids, host_ids);
  }
}

TEST(PortableGroups, GpgMatchesHost) {
  std::vector<cr::gpg_options> variants(3);
  variants[1] = cr::presets::verl::gpg(2.0);
  variants[2].accumulation = cr::mean_accumulation::float32_sequential;
  for (const auto& c : group_cases())
    for (const auto& options : variants) {
      std::vector<float> host(c.rewards.size()), device(c.rewards.size(), 7.0f);
      cr::gpg_advantages(cr::exec::seq, c.host(), c.rewards, host, options);
      portable::gpg_advantages(system, c.rewards.data(), c.device(), device.data(), options);
      expect_same_bits(device, host, "GPG");
    }
}

TEST(PortableGroups, GrpoPasskMatchesHost) {
  std::vector<cr::grpo_passk_options> variants(4);
  variants[1] = cr::presets::verl::grpo_passk();
  variants[2].scale_by_std = false;
  variants[3].epsilon_at = cr::epsilon_placement::inside_sqrt;
  variants[3].estimator = cr::std_estimator::biased;
  for (const auto& c : group_cases())
    for (const auto& options : variants) {
      std::vector<float> host(c.rewards.size()), device(c.rewards.size(), 7.0f);
      cr::grpo_passk_advantages(cr::exec::seq, c.host(), c.rewards, host, options);
      portable::grpo_passk_advantages(system, c.rewards.data(), c.device(), device.data(), options);
      expect_same_bits(device, host, "GRPO pass@k");
    }
}

TEST(PortableGroups, LeaveOneOutMatchesHost) {
  for (const auto& c : group_cases())
    for (auto estimator : {cr::std_estimator::unbiased, cr::std_estimator::biased}) {
      const cr::leave_one_out_options options{.estimator = estimator};
      const std::size_t n = c.rewards.size();
      std::vector<float> hm(n), hs(n), dm(n), ds(n);
      cr::leave_one_out_statistics(cr::exec::seq, c.host(), c.rewards, hm, hs, options);
      portable::leave_one_out_statistics(system, c.rewards.data(), c.device(), dm.data(), ds.data(), options);
      expect_same_bits(dm, hm, "leave-one-out mean");
      expect_same_bits(ds, hs, "leave-one-out std");
      // Without the std.
      std::fill(dm.begin(), dm.end(), -1.0f);
      portable::leave_one_out_statistics(system, c.rewards.data(), c.device(), dm.data(),
                                         static_cast<float*>(nullptr), options);
      expect_same_bits(dm, hm, "leave-one-out mean without std");
    }
}

// ---- loss counts and token advantages ----------------------------------------------------

TEST(PortableLosses, LocalLossCountsMatchHost) {
  const auto b = big_batch(7);
  const auto host = cr::local_loss_counts(cr::exec::seq, b.layout());
  const auto device = portable::local_loss_counts(system, device_layout(b));
  EXPECT_EQ(device.tokens, host.tokens);
  EXPECT_EQ(device.sequences, host.sequences);
  const device_token_layout unmasked{b.offsets.data(), nullptr, b.offsets.size() - 1, b.tokens()};
  const auto all = portable::local_loss_counts(system, unmasked);
  EXPECT_EQ(all.tokens, b.tokens());
  EXPECT_EQ(all.sequences, cr::local_loss_counts(cr::exec::seq, cr::token_layout(b.offsets)).sequences);
  const std::vector<std::int64_t> empty_offsets{0};
  const auto none = portable::local_loss_counts(system, device_token_layout{empty_offsets.data(), nullptr, 0, 0});
  EXPECT_EQ(none.tokens, 0u);
  EXPECT_EQ(none.sequences, 0u);
}

// Masked tokens hold NaN: the host core never reads them, nor may the portable path.
cr::testing::random_batch<float> poisoned_batch(std::uint64_t seed) {
  auto b = big_batch(seed);
  for (std::size_t t = 0; t < b.tokens(); ++t)
    if (b.mask[t] == 0) {
      b.log_probs[t] = std::numeric_limits<float>::quiet_NaN();
      b.ref_log_probs[t] = std::numeric_limits<float>::infinity();
    }
  return b;
}

// One value per sequence, distinct and signed.
std::vector<float> per_sequence_values(std::size_t sequences, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.2f, 1.5f);
  std::vector<float> v(sequences);
  for (auto& x : v) x = normal(rng);
  return v;
}

TEST(PortableTokens, BroadcastAndDistillationMatchHost) {
  const auto b = poisoned_batch(8);
  const auto layout = b.layout();
  const std::size_t sequences = b.offsets.size() - 1;
  const auto values = per_sequence_values(sequences, 8);
  std::vector<float> host(b.tokens()), device(b.tokens(), 7.0f);
  cr::broadcast_to_tokens(cr::exec::seq, layout, values, host);
  portable::broadcast_to_tokens(system, values.data(), device_layout(b), device.data());
  expect_same_bits(device, host, "broadcast");

  cr::distillation_advantages(
      cr::exec::seq, layout,
      {.teacher_log_probs = b.ref_log_probs, .student_log_probs = b.log_probs}, host);
  portable::distillation_advantages(system, b.ref_log_probs.data(), b.log_probs.data(), device_layout(b),
                                    device.data());
  expect_same_bits(device, host, "distillation advantages");
}

// Sequences of 1 to 60 tokens, each with at least one valid token (place_on_last_valid_token
// refuses a sequence without one).
struct token_case {
  std::vector<std::int64_t> offsets{0};
  std::vector<std::uint8_t> mask;
  [[nodiscard]] cr::token_layout host() const { return cr::token_layout(offsets, mask); }
  [[nodiscard]] device_token_layout device() const {
    return {offsets.data(), mask.data(), offsets.size() - 1, mask.size()};
  }
};

token_case make_tokens(std::uint64_t seed, std::size_t sequences) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::size_t> length(1, 60);
  std::bernoulli_distribution masked(0.3);
  token_case c;
  for (std::size_t s = 0; s < sequences; ++s) {
    const std::size_t n = length(rng);
    const std::size_t begin = c.mask.size();
    bool any = false;
    for (std::size_t t = 0; t < n; ++t) {
      c.mask.push_back(masked(rng) ? 0 : 1);
      any = any || c.mask.back() != 0;
    }
    if (!any) c.mask[begin + n / 2] = 1;
    c.offsets.push_back(static_cast<std::int64_t>(c.mask.size()));
  }
  return c;
}

TEST(PortableTokens, PlaceOnLastValidTokenMatchesHost) {
  const auto c = make_tokens(9, 700);
  const auto values = per_sequence_values(700, 9);
  std::vector<float> host(c.mask.size()), device(c.mask.size(), 7.0f);
  cr::place_on_last_valid_token(cr::exec::seq, c.host(), values, host);
  portable::place_on_last_valid_token(system, values.data(), c.device(), device.data());
  expect_same_bits(device, host, "place on last valid token");
}

TEST(PortableTokens, DiscountedReturnsMatchHost) {
  auto b = big_batch(10);
  for (std::size_t t = 0; t < b.tokens(); t += 5)
    if (b.mask[t] == 0) b.advantages[t] = std::numeric_limits<float>::quiet_NaN();  // masked: allowed
  for (const auto masked : {cr::masked_token_return::carry, cr::masked_token_return::cut})
    for (double gamma : {1.0, 0.99, 0.5, 0.0}) {
      std::vector<float> host(b.tokens()), device(b.tokens());
      cr::discounted_returns(cr::exec::seq, b.layout(), b.advantages, host, gamma, masked);
      portable::discounted_returns(system, b.advantages.data(), device_layout(b), device.data(),
                                   gamma, masked);
      expect_same_bits(device, host, "discounted returns");
    }
}

std::vector<cr::whitening_options> whitening_variants() {
  std::vector<cr::whitening_options> v(5);
  v[1].estimator = cr::std_estimator::biased;
  v[2].shift_mean = false;
  v[3].accumulation = cr::mean_accumulation::float32_rounded_sum;
  v[4].epsilon = 0.25;
  v[4].shift_mean = false;
  v[4].accumulation = cr::mean_accumulation::float32_rounded_sum;
  return v;
}

TEST(PortableTokens, MaskedWhitenMatchesHost) {
  const auto b = big_batch(11);
  ASSERT_GT(b.tokens(), 8 * cr::detail::reduce_block_size);
  std::vector<double> scratch(portable::whitening_scratch(b.tokens()));
  for (const auto& options : whitening_variants()) {
    std::vector<float> host(b.tokens()), device(b.tokens());
    cr::masked_whiten(cr::exec::seq, b.layout(), b.advantages, host, options);
    portable::masked_whiten(system, b.advantages.data(), device_layout(b), device.data(), options, scratch.data());
    expect_same_bits(device, host, "whitened");
    // In place, and without a mask.
    device = b.advantages;
    portable::masked_whiten(system, device.data(), device_layout(b), device.data(), options, scratch.data());
    expect_same_bits(device, host, "whitened in place");
    const device_token_layout unmasked{b.offsets.data(), nullptr, b.offsets.size() - 1, b.tokens()};
    cr::masked_whiten(cr::exec::seq, cr::token_layout(b.offsets), b.advantages, host, options);
    portable::masked_whiten(system, b.advantages.data(), unmasked, device.data(), options, scratch.data());
    expect_same_bits(device, host, "whitened without a mask");
  }
  // Double values (where a different order of the sums would show in the last bits), and
  // a batch with no valid token (all zeros).
  std::vector<double> values(b.tokens()), host(b.tokens()), device(b.tokens());
  for (std::size_t t = 0; t < b.tokens(); ++t) values[t] = static_cast<double>(b.advantages[t]) / 3.0 + 1e-3 * t;
  for (const auto& options : whitening_variants()) {
    cr::masked_whiten(cr::exec::seq, b.layout(), values, host, options);
    portable::masked_whiten(system, values.data(), device_layout(b), device.data(), options, scratch.data());
    expect_same_bits(device, host, "whitened doubles");
  }
  const std::vector<std::uint8_t> nothing(b.tokens(), 0);
  const device_token_layout none{b.offsets.data(), nothing.data(), b.offsets.size() - 1, b.tokens()};
  portable::masked_whiten(system, values.data(), none, device.data(), cr::whitening_options{}, scratch.data());
  EXPECT_EQ(std::count(device.begin(), device.end(), 0.0), static_cast<std::ptrdiff_t>(b.tokens()));
}

TEST(PortableTokens, ReinforcePlusPlusMatchesHost) {
  const auto b = big_batch(12);
  std::vector<double> scratch(portable::whitening_scratch(b.tokens()));
  // Outcome rewards on the last valid token (veRL's token_level_rewards) and dense ones.
  const auto c = make_tokens(12, 1500);
  const auto scores = per_sequence_values(1500, 12);
  std::vector<float> outcome(c.mask.size());
  cr::place_on_last_valid_token(cr::exec::seq, c.host(), scores, outcome);
  for (double gamma : {1.0, 0.97})
    for (const auto& whitening : whitening_variants()) {
      const cr::reinforce_plus_plus_options options{.gamma = gamma, .whitening = whitening};
      std::vector<float> host(b.tokens()), device(b.tokens());
      cr::reinforce_plus_plus_advantages(cr::exec::seq, b.layout(), b.advantages, host, options);
      portable::reinforce_plus_plus_advantages(system, b.advantages.data(), device_layout(b), device.data(),
                                               options, scratch.data());
      expect_same_bits(device, host, "REINFORCE++ dense");

      std::vector<double> outcome_scratch(portable::whitening_scratch(c.mask.size()));
      std::vector<float> ho(c.mask.size()), dout(c.mask.size());
      cr::reinforce_plus_plus_advantages(cr::exec::seq, c.host(), outcome, ho, options);
      portable::reinforce_plus_plus_advantages(system, outcome.data(), c.device(), dout.data(), options,
                                               outcome_scratch.data());
      expect_same_bits(dout, ho, "REINFORCE++ outcome");

      // Doubles, where the order of every sum shows in the last bits.
      std::vector<double> rewards(b.tokens()), hd(b.tokens()), dd(b.tokens());
      for (std::size_t t = 0; t < b.tokens(); ++t) rewards[t] = static_cast<double>(b.advantages[t]) / 7.0;
      cr::reinforce_plus_plus_advantages(cr::exec::seq, b.layout(), rewards, hd, options);
      portable::reinforce_plus_plus_advantages(system, rewards.data(), device_layout(b), dd.data(), options,
                                               scratch.data());
      expect_same_bits(dd, hd, "REINFORCE++ doubles");
    }
}

TEST(PortableTokens, GaeMatchesHost) {
  const auto b = big_batch(14);
  std::vector<double> scratch(portable::whitening_scratch(b.tokens()));
  // Dense rewards (the advantages) and values (the reference log-probs), masked tokens
  // holding NaN rewards (never read).
  auto rewards = b.advantages;
  for (std::size_t t = 0; t < b.tokens(); t += 3)
    if (b.mask[t] == 0) rewards[t] = std::numeric_limits<float>::quiet_NaN();
  for (double gamma : {1.0, 0.99})
    for (double lambda : {1.0, 0.95, 0.0})
      for (const auto& whitening : whitening_variants()) {
        const cr::gae_options options{.gamma = gamma, .lambda = lambda, .whitening = whitening};
        std::vector<float> host(b.tokens()), device(b.tokens()), host_returns(b.tokens()),
            device_returns(b.tokens());
        cr::gae_advantages(cr::exec::seq, b.layout(),
                           {.token_rewards = rewards, .values = b.ref_log_probs}, host,
                           host_returns, options);
        portable::gae_advantages(system, rewards.data(), b.ref_log_probs.data(), device_layout(b),
                                 device.data(), device_returns.data(), options, scratch.data());
        expect_same_bits(device, host, "GAE advantages");
        expect_same_bits(device_returns, host_returns, "GAE returns");
        // Doubles, where the order of every sum shows in the last bits.
        std::vector<double> r(b.tokens()), v(b.tokens()), hd(b.tokens()), dd(b.tokens()),
            hr(b.tokens()), dr(b.tokens());
        for (std::size_t t = 0; t < b.tokens(); ++t) {
          r[t] = static_cast<double>(b.advantages[t]) / 7.0;
          v[t] = static_cast<double>(b.ref_log_probs[t]) / 3.0;
        }
        cr::gae_advantages(cr::exec::seq, b.layout(), {.token_rewards = r, .values = v}, hd, hr,
                           options);
        portable::gae_advantages(system, r.data(), v.data(), device_layout(b), dd.data(), dr.data(),
                                 options, scratch.data());
        expect_same_bits(dd, hd, "GAE advantages, doubles");
        expect_same_bits(dr, hr, "GAE returns, doubles");
      }
  std::vector<float> a(b.tokens()), ret(b.tokens());
  cr::testing::expect_error_naming(
      [&] {
        portable::gae_advantages(system, rewards.data(), b.ref_log_probs.data(), device_layout(b),
                                 a.data(), ret.data(), cr::gae_options{.lambda = 2.0},
                                 scratch.data());
      },
      "options.lambda");
}

TEST(PortableTokens, RemaxMatchesHost) {
  const auto b = big_batch(15);
  const std::size_t sequences = b.offsets.size() - 1;
  auto rewards = b.advantages;
  for (std::size_t t = 0; t < b.tokens(); t += 3)
    if (b.mask[t] == 0) rewards[t] = std::numeric_limits<float>::quiet_NaN();  // never read
  const auto baselines = per_sequence_values(sequences, 15);
  std::vector<float> host(b.tokens()), device(b.tokens()), host_returns(b.tokens()),
      device_returns(b.tokens());
  cr::remax_advantages(cr::exec::seq, b.layout(),
                       {.token_rewards = rewards, .reward_baselines = baselines}, host,
                       host_returns);
  portable::remax_advantages(system, rewards.data(), baselines.data(), device_layout(b),
                             device.data(), device_returns.data());
  expect_same_bits(device, host, "ReMax advantages");
  expect_same_bits(device_returns, host_returns, "ReMax returns");
  std::vector<double> r(b.tokens()), base(sequences), hd(b.tokens()), dd(b.tokens()),
      hr(b.tokens()), dr(b.tokens());
  for (std::size_t t = 0; t < b.tokens(); ++t) r[t] = static_cast<double>(b.advantages[t]) / 7.0;
  for (std::size_t s = 0; s < sequences; ++s) base[s] = static_cast<double>(baselines[s]) / 3.0;
  cr::remax_advantages(cr::exec::seq, b.layout(), {.token_rewards = r, .reward_baselines = base},
                       hd, hr);
  portable::remax_advantages(system, r.data(), base.data(), device_layout(b), dd.data(), dr.data());
  expect_same_bits(dd, hd, "ReMax advantages, doubles");
  expect_same_bits(dr, hr, "ReMax returns, doubles");
}

TEST(PortableTokens, OpoMatchesHost) {
  const auto b = big_batch(16);
  const std::size_t sequences = b.offsets.size() - 1;  // 1200
  // Uniform groups of 4 with binary scores (zero-variance groups; fully masked sequences
  // weigh nothing), groups of 8 with continuous ones, variable groups with singletons and
  // a NaN group.
  std::vector<group_case> cases;
  cases.push_back(make_groups(31, sequences / 4, 4, false, true));
  cases.push_back(make_groups(32, sequences / 8, 8, false, false));
  {
    group_case v;
    std::mt19937_64 rng(33);
    std::uniform_int_distribution<std::size_t> size(1, 9);
    std::normal_distribution<float> normal(0.5f, 1.0f);
    v.offsets.push_back(0);
    while (static_cast<std::size_t>(v.offsets.back()) < sequences) {
      const auto next =
          std::min<std::size_t>(sequences, static_cast<std::size_t>(v.offsets.back()) + size(rng));
      v.offsets.push_back(static_cast<std::int64_t>(next));
    }
    v.groups = v.offsets.size() - 1;
    for (std::size_t i = 0; i < sequences; ++i) v.rewards.push_back(normal(rng));
    v.rewards[17] = std::numeric_limits<float>::quiet_NaN();
    cases.push_back(v);
  }
  const std::vector<cr::opo_options> variants{
      {.singleton = cr::singleton_rule::raw_score, .nonfinite = cr::nonfinite_rule::zero_group},
      {.singleton = cr::singleton_rule::zero_advantage,
       .nonfinite = cr::nonfinite_rule::zero_group}};
  for (const auto& c : cases) {
    ASSERT_EQ(c.rewards.size(), sequences);
    for (const auto& options : variants) {
      std::vector<float> host(b.tokens()), device(b.tokens(), 7.0f);
      cr::opo_advantages(cr::exec::seq, c.host(), b.layout(), c.rewards, host, options);
      portable::opo_advantages(system, c.rewards.data(), c.device(), device_layout(b),
                               device.data(), options);
      expect_same_bits(device, host, "OPO");
    }
  }
}

TEST(PortableTokens, GdpoMatchesHost) {
  const auto b = big_batch(17);
  const std::size_t sequences = b.offsets.size() - 1;  // 1200
  std::vector<double> scratch(portable::whitening_scratch(b.tokens())), sums(sequences);
  std::vector<float> per_sequence(portable::gdpo_scratch(sequences));
  // Three components: binary, continuous, and a NaN one (zeroed under zero_group).
  const auto binary = make_groups(41, sequences / 4, 4, false, true);
  const auto continuous = make_groups(42, sequences / 4, 4, false, false);
  std::vector<float> components(binary.rewards);
  components.insert(components.end(), continuous.rewards.begin(), continuous.rewards.end());
  for (std::size_t s = 0; s < sequences; ++s)
    components.push_back(0.25f * static_cast<float>(s % 5));
  components[2 * sequences + 9] = std::numeric_limits<float>::quiet_NaN();
  const std::vector<double> weights{0.5, 1.0, 2.0};
  std::vector<cr::gdpo_options> variants{cr::presets::verl::gdpo(), cr::presets::verl::gdpo(false),
                                         cr::gdpo_options{}};
  for (auto& v : variants) v.grpo.nonfinite = cr::nonfinite_rule::zero_group;
  for (const auto& options : variants) {
    std::vector<float> host(b.tokens()), device(b.tokens(), 7.0f);
    cr::gdpo_advantages(cr::exec::seq, binary.host(), b.layout(),
                        {.component_scores = components, .weights = weights}, host, options);
    portable::gdpo_advantages(system, components.data(), weights.data(), weights.size(),
                              binary.device(), device_layout(b), device.data(), options,
                              per_sequence.data(), sums.data(), scratch.data());
    expect_same_bits(device, host, "GDPO");
  }
}

TEST(PortableTokens, ReinforcePlusPlusBaselineMatchesHost) {
  const auto b = big_batch(13);
  const std::size_t sequences = b.offsets.size() - 1;  // 1200
  std::vector<double> scratch(portable::whitening_scratch(b.tokens()));
  // Uniform groups of 4 and 8 with binary (many zero-variance groups) and continuous scores;
  // variable groups with singletons and a NaN group.
  std::vector<group_case> cases;
  cases.push_back(make_groups(21, sequences / 4, 4, false, true));
  cases.push_back(make_groups(22, sequences / 8, 8, false, false));
  {
    group_case v;
    std::mt19937_64 rng(23);
    std::uniform_int_distribution<std::size_t> size(1, 9);
    std::normal_distribution<float> normal(0.5f, 1.0f);
    v.offsets.push_back(0);
    while (static_cast<std::size_t>(v.offsets.back()) < sequences) {
      const auto next = std::min<std::size_t>(sequences, static_cast<std::size_t>(v.offsets.back()) + size(rng));
      v.offsets.push_back(static_cast<std::int64_t>(next));
    }
    v.groups = v.offsets.size() - 1;
    for (std::size_t i = 0; i < sequences; ++i) v.rewards.push_back(normal(rng));
    v.rewards[17] = std::numeric_limits<float>::quiet_NaN();
    cases.push_back(v);
  }
  std::vector<cr::reinforce_plus_plus_baseline_options> variants(6);
  variants[1].accumulation = cr::mean_accumulation::float32_sequential;
  variants[2].accumulation = cr::mean_accumulation::float32_rounded_sum;
  variants[3].whitening = {.estimator = cr::std_estimator::biased, .shift_mean = false};
  variants[4].whitening.accumulation = cr::mean_accumulation::float32_rounded_sum;
  variants[5].singleton = cr::singleton_rule::zero_advantage;
  for (std::size_t k = 0; k < cases.size(); ++k) {
    const auto& c = cases[k];
    ASSERT_EQ(c.rewards.size(), sequences);
    for (auto options : variants) {
      if (k == 2) {  // singletons and a NaN score: the rules that accept them
        options.nonfinite = cr::nonfinite_rule::zero_group;
        if (options.singleton == cr::singleton_rule::error) options.singleton = cr::singleton_rule::raw_score;
      }
      std::vector<float> host(b.tokens()), device(b.tokens());
      cr::reinforce_plus_plus_baseline_advantages(cr::exec::seq, c.host(), b.layout(), c.rewards,
                                                  host, options);
      portable::reinforce_plus_plus_baseline_advantages(system, c.rewards.data(), c.device(), device_layout(b),
                                                        device.data(), options, scratch.data());
      expect_same_bits(device, host, "REINFORCE++-baseline");

      std::vector<double> scores(c.rewards.size()), hd(b.tokens()), dd(b.tokens());
      for (std::size_t i = 0; i < scores.size(); ++i) scores[i] = static_cast<double>(c.rewards[i]) / 3.0;
      cr::reinforce_plus_plus_baseline_advantages(cr::exec::seq, c.host(), b.layout(), scores, hd,
                                                  options);
      portable::reinforce_plus_plus_baseline_advantages(system, scores.data(), c.device(), device_layout(b),
                                                        dd.data(), options, scratch.data());
      expect_same_bits(dd, hd, "REINFORCE++-baseline doubles");
    }
  }
}

using cr::testing::error_message;

TEST(PortableTokens, RefusesWhatTheHostRefusesWithItsMessage) {
  const auto b = big_batch(14);
  std::vector<float> out(b.tokens());
  std::vector<double> scratch(portable::whitening_scratch(b.tokens()));
  std::vector<cr::whitening_options> bad(3);
  bad[0].epsilon = -1.0;
  bad[1].epsilon = std::numeric_limits<double>::infinity();
  bad[2].accumulation = cr::mean_accumulation::float32_sequential;
  for (const auto& options : bad) {
    const std::string host = error_message(
        [&] { cr::masked_whiten(cr::exec::seq, b.layout(), b.advantages, out, options); });
    ASSERT_NE(host, "");
    EXPECT_EQ(error_message([&] {
      portable::masked_whiten(system, b.advantages.data(), device_layout(b), out.data(), options, scratch.data());
    }), host);
    const cr::reinforce_plus_plus_options rpp{.whitening = options};
    EXPECT_EQ(error_message([&] {
                portable::reinforce_plus_plus_advantages(
                    system, b.advantages.data(), device_layout(b), out.data(), rpp, scratch.data());
              }),
              error_message([&] {
                cr::reinforce_plus_plus_advantages(cr::exec::seq, b.layout(), b.advantages, out,
                                                   rpp);
              }));
  }
  for (double gamma : {-0.1, 1.5, std::numeric_limits<double>::quiet_NaN()}) {
    const std::string host = error_message(
        [&] { cr::discounted_returns(cr::exec::seq, b.layout(), b.advantages, out, gamma); });
    ASSERT_NE(host, "");
    EXPECT_EQ(error_message([&] {
      portable::discounted_returns(system, b.advantages.data(), device_layout(b), out.data(), gamma);
    }), host);
  }
  // A single valid token under the unbiased variance.
  std::vector<std::uint8_t> one(b.tokens(), 0);
  one[b.tokens() / 2] = 1;
  const cr::token_layout host_one(b.offsets, one);
  const device_token_layout device_one{b.offsets.data(), one.data(), b.offsets.size() - 1, b.tokens()};
  const std::string host =
      error_message([&] { cr::masked_whiten(cr::exec::seq, host_one, b.advantages, out); });
  EXPECT_NE(host.find("has 1 valid token"), std::string::npos) << host;
  EXPECT_EQ(error_message([&] {
    portable::masked_whiten(system, b.advantages.data(), device_one, out.data(), cr::whitening_options{}, scratch.data());
  }), host);
  std::vector<float> scores(b.offsets.size() - 1, 1.0f);
  scores[0] = 2.0f;
  const group_case uniform{scores, {}, 4, scores.size() / 4};
  EXPECT_EQ(error_message([&] {
              portable::reinforce_plus_plus_baseline_advantages(
                  system, scores.data(), uniform.device(), device_one, out.data(),
                  cr::reinforce_plus_plus_baseline_options{}, scratch.data());
            }),
            error_message([&] {
              cr::reinforce_plus_plus_baseline_advantages(cr::exec::seq, uniform.host(), host_one,
                                                          scores, out);
            }));
  // The biased variance takes one token: (x - x) * 1/sqrt(0 + eps) = 0.
  std::vector<float> hb(b.tokens()), db(b.tokens());
  const cr::whitening_options biased{.estimator = cr::std_estimator::biased};
  cr::masked_whiten(cr::exec::seq, host_one, b.advantages, hb, biased);
  portable::masked_whiten(system, b.advantages.data(), device_one, db.data(), biased, scratch.data());
  expect_same_bits(db, hb, "whitening one token, biased");
}

#if THRUST_DEVICE_SYSTEM == THRUST_DEVICE_SYSTEM_OMP
TEST(PortableTokens, WhiteningSameBitsForAnyThreadCount) {
  const auto b = big_batch(15);
  std::vector<double> scratch(portable::whitening_scratch(b.tokens()));
  std::vector<float> first;
  for (int threads : {1, 2, 3, 8}) {
    omp_set_num_threads(threads);
    std::vector<float> out(b.tokens());
    portable::reinforce_plus_plus_advantages(system, b.advantages.data(), device_layout(b), out.data(),
                                             cr::reinforce_plus_plus_options{.gamma = 0.9}, scratch.data());
    if (first.empty()) first = out;
    expect_same_bits(out, first, "REINFORCE++ across thread counts");
  }
}
#endif

// The optimal token baseline (single- and multi-turn, with and without weights and the zero
// tail) on variable groups with singletons; NaN on masked tokens is never read.
TEST(PortableTokens, OptimalTokenBaselineMatchesHost) {
  const auto b = big_batch(41);
  const std::size_t sequences = b.offsets.size() - 1, n = b.tokens();
  std::vector<std::int64_t> group_offsets{0};
  while (static_cast<std::size_t>(group_offsets.back()) < sequences)
    group_offsets.push_back(
        std::min(static_cast<std::int64_t>(sequences),
                 group_offsets.back() + 1 + static_cast<std::int64_t>(group_offsets.size() % 6)));
  const std::size_t groups = group_offsets.size() - 1;
  std::mt19937_64 rng(42);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  std::vector<float> rewards(n), old(n), spi(n), rho(n);
  for (std::size_t t = 0; t < n; ++t) {
    const bool valid = b.mask[t] != 0;
    const float nan = std::numeric_limits<float>::quiet_NaN();
    rewards[t] = valid ? (unit(rng) < 0.2f ? b.advantages[t] : 0.0f) : nan;
    old[t] = valid ? -4.0f * unit(rng) : nan;
    spi[t] = valid ? 0.1f + 0.8f * unit(rng) : nan;
    rho[t] = valid ? 0.5f + unit(rng) : nan;
  }
  std::vector<double> cumulative(n);
  std::vector<std::size_t> counts(sequences), positions(n);
  for (const bool multi : {false, true})
    for (const bool tail : {false, true})
      for (const bool weighted : {false, true}) {
        const cr::optimal_token_baseline_options options{.handle_zero_tail = tail,
                                                         .multi_turn = multi};
        std::vector<float> host(n), host_returns(n), device(n, 7.0f), device_returns(n, 7.0f);
        cr::optimal_token_baseline_advantages(
            cr::exec::seq, cr::group_layout(group_offsets), b.layout(),
            {.token_rewards = rewards,
             .old_log_probs = old,
             .sum_pi_squared = spi,
             .rollout_is_weights =
                 weighted ? std::span<const float>(rho) : std::span<const float>()},
            host, host_returns, options);
        portable::optimal_token_baseline_advantages(
            system, rewards.data(), old.data(), spi.data(), weighted ? rho.data() : nullptr,
            device_group_layout::variable(group_offsets.data(), groups, sequences),
            device_layout(b), device.data(), device_returns.data(), options, cumulative.data(),
            counts.data(), positions.data());
        const std::string what = std::string("optimal token baseline") +
                                 (multi ? ", multi-turn" : "") + (tail ? ", zero tail" : "") +
                                 (weighted ? ", weighted" : "");
        expect_same_bits(device, host, what.c_str());
        expect_same_bits(device_returns, host_returns, (what + " returns").c_str());
      }
}

}  // namespace

// ---- Clip-Cov ---------------------------------------------------------------------------

namespace {

// A covariance loss over one selection mask in every mode, with and without weights: the
// portable path's metrics and gradient bits are the host's, and every selected token counts
// as clipped. host_loss(mode, inputs, grad_out, normalizer) and portable_loss(mode, weights
// or null, grad_out, normalizer, scratch) run the same selection.
template <class HostLoss, class PortableLoss>
void expect_selection_loss_matches_host(const char* name, const cr::testing::random_batch<float>& b,
                                        std::size_t selection_size, const HostLoss& host_loss,
                                        const PortableLoss& portable_loss) {
  const auto layout = b.layout();
  const auto weights = cr::testing::rollout_is_weights_of(b);
  const auto counts = cr::local_loss_counts(cr::exec::seq, layout);
  const std::size_t n = b.tokens();
  std::vector<portable::loss_tally> scratch(portable::scratch_tallies(n));
  for (auto mode : cr::testing::all_aggregation_modes)
    for (const bool weighted : {false, true}) {
      SCOPED_TRACE(std::string(name) + " " + std::string(cr::to_string(mode)) +
                   (weighted ? " weighted" : ""));
      const cr::loss_normalizer normalizer = counts.normalizer(mode, 64.0);
      std::vector<float> hg(n), dg(n, -7.0f);
      const cr::policy_ratio_inputs<float> in{
          .log_probs = b.log_probs,
          .old_log_probs = b.old_log_probs,
          .advantages = b.advantages,
          .rollout_is_weights =
              weighted ? std::span<const float>(weights) : std::span<const float>{}};
      const cr::policy_loss_result h = host_loss(mode, in, std::span<float>(hg), normalizer);
      portable_loss(mode, weighted ? weights.data() : nullptr, dg.data(), normalizer,
                    scratch.data());
      expect_same_metrics(scratch[portable::result_index(n)], h);
      expect_same_bits(dg, hg, "dL/dlogp");
      EXPECT_EQ(h.metrics.clipped, selection_size);
    }
}

// Our seeded draw selects the host's tokens, and the loss over that selection (replayed on
// the host) gives the host's bits, in every mode, with and without weights.
TEST(PortableLosses, ClipCovMatchesHost) {
  const auto b = big_batch(21);
  const auto layout = b.layout();
  const std::size_t n = b.tokens();
  std::vector<double> sums(portable::covariance_sum_scratch(n));
  std::vector<std::uint8_t> selected(n);
  std::vector<std::uint64_t> keys(n);
  std::vector<std::size_t> indices(n);
  const cr::policy_ratio_inputs<float> plain{
      .log_probs = b.log_probs, .old_log_probs = b.old_log_probs, .advantages = b.advantages};
  for (const double ratio : {0.0002, 0.01, 1.0}) {
    const cr::clip_cov_options options{
        .clip_high = 0.28, .clip_cov_ratio = ratio, .clip_cov_lb = 0.05, .clip_cov_ub = 5.0};
    for (const std::uint64_t seed : {1ull, 99ull}) {
      const auto host = cr::clip_cov_seeded_selection(cr::exec::seq, layout, plain, seed, options);
      portable::clip_cov_seeded_selection(
          system, device_layout(b), b.log_probs.data(), b.old_log_probs.data(), b.advantages.data(),
          seed, options, selected.data(), sums.data(), keys.data(), indices.data());
      ASSERT_GT(host.size(), 0u);
      std::vector<std::size_t> device_tokens;
      for (std::size_t t = 0; t < n; ++t)
        if (selected[t] != 0) device_tokens.push_back(t);
      EXPECT_EQ(device_tokens, host) << "ratio " << ratio << " seed " << seed;
    }
  }
  const cr::clip_cov_options drawn{
      .clip_high = 0.28, .clip_cov_ratio = 0.01, .clip_cov_lb = 0.05, .clip_cov_ub = 5.0};
  const auto host_selection = cr::clip_cov_seeded_selection(cr::exec::seq, layout, plain, 5, drawn);
  std::fill(selected.begin(), selected.end(), std::uint8_t{0});
  for (const std::size_t t : host_selection) selected[t] = 1;
  expect_selection_loss_matches_host(
      "clip_cov", b, host_selection.size(),
      [&](cr::loss_aggregation mode, const cr::policy_ratio_inputs<float>& in,
          std::span<float> grad, const cr::loss_normalizer& normalizer) {
        auto options = drawn;
        options.aggregation = mode;
        return cr::clip_cov_loss(cr::exec::seq, layout, in,
                                 cr::token_selection::replay(host_selection), grad, normalizer,
                                 options);
      },
      [&](cr::loss_aggregation mode, const float* weights, float* grad,
          const cr::loss_normalizer& normalizer, portable::loss_tally* scratch) {
        auto options = drawn;
        options.aggregation = mode;
        portable::clip_cov_loss(system, device_layout(b), b.log_probs.data(),
                                b.old_log_probs.data(), b.advantages.data(), weights,
                                selected.data(), grad, normalizer, options, scratch);
      });
}

// ---- the rollout correction ------------------------------------------------------------

// The passes, the finish and the normalisation give exec::seq's weights, keep bytes and
// metrics bit for bit in every configuration (token and sequence level, truncated and
// IcePop, normalised or not, every criterion kind).
TEST(PortableRolloutCorrection, MatchesHostBitForBit) {
  const auto b = big_batch(21);
  const auto layout = b.layout();
  const std::size_t n = b.tokens(), rows = layout.sequences();
  std::vector<double> row(portable::rollout_row_scratch(rows));
  std::vector<std::size_t> row_of(n);
  std::vector<double> block_sums(portable::rollout_block_sum_scratch(n));
  std::vector<double> block_extremes(portable::rollout_block_extreme_scratch(n));
  std::size_t rejected = 0;
  for (const auto& options : cr::testing::rollout_correction_variants()) {
    SCOPED_TRACE(std::to_string(static_cast<int>(options.is_level)) + " " +
                 std::to_string(options.rejection_count));
    std::vector<float> hw(n, -7.0f), dw(n, -7.0f);
    std::vector<std::uint8_t> hk(n, 7), dk(n, 9);
    const auto h = cr::rollout_correction(
        cr::exec::seq, layout,
        cr::rollout_correction_inputs<float>{b.log_probs, b.behaviour_log_probs},
        std::span<float>(hw), std::span<std::uint8_t>(hk), options);
    portable::rollout_correction_passes(
        system, device_layout(b), b.log_probs.data(), b.behaviour_log_probs.data(), options,
        dw.data(), dk.data(), row.data(), row_of.data(), block_sums.data(), block_extremes.data());
    double factor = 0;
    const auto d = portable::rollout_correction_finish(options, row.data(), rows, block_sums.data(),
                                                       block_extremes.data(), n, factor);
    if (factor != 1.0)
      portable::rollout_correction_normalize(system, device_layout(b), b.log_probs.data(),
                                             b.behaviour_log_probs.data(), options, factor,
                                             dw.data(), dk.data(), row.data(), row_of.data());
    expect_same_bits(cr::testing::rollout_correction_values(d),
                     cr::testing::rollout_correction_values(h), "rollout_corr metrics");
    expect_same_bits(dk, hk, "keep");
    if (options.is_level != cr::rollout_is_level::none) expect_same_bits(dw, hw, "weights");
    rejected += h.rs_masked_fraction > 0;
  }
  EXPECT_GT(rejected, 1u);
}

// The bypass mode composed of the device pieces gives exec::seq's bits: loss, gradient,
// weights, keep bytes, the loss's metrics (REINFORCE's plain approx_kl included) and every
// rollout_corr metric, for both losses, with IS weights (token and sequence level,
// normalised or not) and rejected tokens, the normaliser taken from the effective mask
// (veRL's agg_loss) in every mode or given.
TEST(PortableBypassMode, MatchesHostBitForBit) {
  const auto b = big_batch(23);
  const auto layout = b.layout();
  const std::size_t n = b.tokens(), rows = layout.sequences();
  std::vector<double> row(portable::rollout_row_scratch(rows));
  std::vector<std::size_t> row_of(n);
  std::vector<double> block_sums(portable::rollout_block_sum_scratch(n));
  std::vector<double> block_extremes(portable::rollout_block_extreme_scratch(n));
  std::vector<portable::loss_tally> tallies(portable::scratch_tallies(n));
  std::vector<float> kl(2 * n);
  const portable::bypass_mode_scratch<float> scratch{row.data(),        row_of.data(),
                                                     block_sums.data(), block_extremes.data(),
                                                     tallies.data(),    kl.data()};
  const cr::bypass_mode_inputs<float> inputs{.log_probs = b.log_probs,
                                             .rollout_log_probs = b.behaviour_log_probs,
                                             .advantages = b.advantages};
  std::size_t cases = 0;
  for (const auto& correction : cr::testing::rollout_correction_variants()) {
    if (correction.is_level == cr::rollout_is_level::none || correction.rejection_count == 0)
      continue;
    for (const auto loss : {cr::bypass_loss::ppo_clip, cr::bypass_loss::reinforce})
      for (const auto mode : cr::testing::all_aggregation_modes)
        for (const bool given : {false, true}) {
          SCOPED_TRACE(std::to_string(static_cast<int>(correction.is_level)) + " " +
                       (loss == cr::bypass_loss::ppo_clip ? "ppo_clip " : "reinforce ") +
                       std::string(cr::to_string(mode)) + (given ? " given" : " effective"));
          cr::bypass_mode_options options = cr::presets::verl::bypass_mode(
              correction, loss == cr::bypass_loss::ppo_clip ? "ppo_clip" : "reinforce", mode);
          const cr::loss_normalizer fixed =
              cr::local_loss_counts(cr::exec::seq, layout).normalizer(mode, 120.0);
          std::vector<float> hg(n, -7.0f), dg(n, -7.0f), hw(n, -7.0f), dw(n, -7.0f);
          std::vector<std::uint8_t> hk(n, 7), dk(n, 9);
          const auto h =
              given ? cr::bypass_mode_loss(cr::exec::seq, layout, inputs, hg, fixed, options,
                                           std::span<float>(hw), std::span<std::uint8_t>(hk))
                    : cr::bypass_mode_loss(
                          cr::exec::seq, layout, inputs, hg,
                          [&](const cr::token_layout& effective) {
                            return cr::local_loss_counts(cr::exec::seq, effective)
                                .normalizer(mode, 120.0);
                          },
                          options, std::span<float>(hw), std::span<std::uint8_t>(hk));
          const auto effective_normalizer = [&](const device_token_layout& effective) {
            return portable::local_loss_counts(system, effective).normalizer(mode, 120.0);
          };
          const auto d = given ? portable::bypass_mode_loss(
                                     system, device_layout(b), b.log_probs.data(),
                                     b.behaviour_log_probs.data(), b.advantages.data(), dg.data(),
                                     fixed, options, dw.data(), dk.data(), scratch)
                               : portable::bypass_mode_loss(
                                     system, device_layout(b), b.log_probs.data(),
                                     b.behaviour_log_probs.data(), b.advantages.data(), dg.data(),
                                     effective_normalizer, options, dw.data(), dk.data(), scratch);
          expect_same_metrics({d.loss, d.metrics}, {h.loss, h.metrics});
          expect_same_bits(dg, hg, "bypass dL/dlogp");
          expect_same_bits(dw, hw, "weights");
          expect_same_bits(dk, hk, "keep");
          expect_same_bits(cr::testing::rollout_correction_values(d.correction),
                           cr::testing::rollout_correction_values(h.correction),
                           "rollout_corr metrics");
          // Rejected tokens carry no gradient; IS weights reached REINFORCE's.
          ASSERT_GT(h.correction.rs_masked_fraction, 0.0);
          std::size_t moved = 0;
          for (std::size_t t = 0; t < n; ++t) moved += b.mask[t] != 0 && hk[t] == 0 && hg[t] != 0;
          EXPECT_EQ(moved, 0u);
          EXPECT_NE(h.metrics.approx_kl_sum, 0.0);
          ++cases;
        }
  }
  // Token and sequence level, three corrections each that reject.
  EXPECT_EQ(cases, 6u * 2 * std::size(cr::testing::all_aggregation_modes) * 2);
}

// The options the host refuses, refused by name before anything runs.
TEST(PortableBypassMode, RefusesTheHostsBadOptionsByName) {
  const auto b = big_batch(24);
  const std::size_t n = b.tokens();
  std::vector<float> g(n), w(n), kl(2 * n);
  std::vector<std::uint8_t> k(n);
  std::vector<double> row(portable::rollout_row_scratch(b.offsets.size() - 1));
  std::vector<std::size_t> row_of(n);
  std::vector<double> block_sums(portable::rollout_block_sum_scratch(n));
  std::vector<double> block_extremes(portable::rollout_block_extreme_scratch(n));
  std::vector<portable::loss_tally> tallies(portable::scratch_tallies(n));
  const portable::bypass_mode_scratch<float> scratch{row.data(),        row_of.data(),
                                                     block_sums.data(), block_extremes.data(),
                                                     tallies.data(),    kl.data()};
  const cr::loss_normalizer normalizer = cr::local_loss_counts(cr::exec::seq, b.layout())
                                             .normalizer(cr::loss_aggregation::token_mean, 0);
  const auto refused = [&](const cr::bypass_mode_options& options, const std::string& argument,
                           const std::string& words) {
    const auto device = [&] {
      (void)portable::bypass_mode_loss(system, device_layout(b), b.log_probs.data(),
                                       b.behaviour_log_probs.data(), b.advantages.data(), g.data(),
                                       normalizer, options, w.data(), k.data(), scratch);
    };
    const auto host = [&] {
      (void)cr::bypass_mode_loss(
          cr::exec::seq, b.layout(),
          cr::bypass_mode_inputs<float>{b.log_probs, b.behaviour_log_probs, b.advantages}, g,
          normalizer, options, std::span<float>(w), std::span<std::uint8_t>(k));
    };
    cr::testing::expect_error_naming(host, argument, words);
    cr::testing::expect_error_naming(device, argument, words);
  };
  cr::bypass_mode_options options;
  options.correction.is_level = cr::rollout_is_level::token;
  options.ppo.importance.mode = cr::importance_sampling::truncated;
  refused(options, "options.ppo.importance", "must be none");
  options.ppo.importance.mode = cr::importance_sampling::none;
  options.reinforce.importance.mode = cr::importance_sampling::band_mask;
  refused(options, "options.reinforce.importance", "must be none");
  options.reinforce.importance.mode = cr::importance_sampling::none;
  options.correction.is_upper = 0;
  refused(options, "options.is_upper", "expected a finite value > 0");
  options.correction.is_upper = 2;
  options.correction.rejection[0] = {.level = cr::rollout_rs_level::seq_max,
                                     .statistic = cr::rollout_rs_statistic::k1};
  options.correction.rejection_count = 1;
  refused(options, "options.rejection[0]", "seq_max_k1");
}

}  // namespace

// ---- KL-Cov -------------------------------------------------------------------------------

namespace {

// The top-covariance selection is the host's (three ratios; and with one advantage for
// every token, where every cov is +-0 and the tie rule alone picks the first k valid
// tokens), and the loss over it gives the host's bits in every mode, with and without
// weights.
TEST(PortableLosses, KlCovMatchesHost) {
  const auto b = big_batch(31);
  const auto layout = b.layout();
  const std::size_t n = b.tokens();
  std::vector<double> sums(portable::covariance_sum_scratch(n));
  std::vector<std::uint8_t> selected(n);
  std::vector<std::uint64_t> keys(n);
  std::vector<std::size_t> indices(n);
  const std::vector<float> constant(n, 0.5f);
  for (const bool tied : {false, true})
    for (const double ratio : {0.0002, 0.01, 1.0}) {
      SCOPED_TRACE(std::string(tied ? "tied " : "") + std::to_string(ratio));
      const cr::kl_cov_options options{.kl_cov_ratio = ratio};
      const std::vector<float>& advantages = tied ? constant : b.advantages;
      const cr::policy_ratio_inputs<float> plain{
          .log_probs = b.log_probs, .old_log_probs = b.old_log_probs, .advantages = advantages};
      const auto host = cr::kl_cov_selection(cr::exec::seq, layout, plain, options);
      ASSERT_FALSE(host.empty());
      portable::kl_cov_selection(system, device_layout(b), b.log_probs.data(), advantages.data(),
                                 options, selected.data(), sums.data(), keys.data(),
                                 indices.data());
      std::vector<std::size_t> device_tokens;
      for (std::size_t t = 0; t < n; ++t)
        if (selected[t] != 0) device_tokens.push_back(t);
      EXPECT_EQ(device_tokens, host);
      if (tied) {
        std::vector<std::size_t> first;
        for (std::size_t t = 0; t < n && first.size() < host.size(); ++t)
          if (layout.valid(t)) first.push_back(t);
        EXPECT_EQ(host, first);
      }
    }
  const cr::kl_cov_options drawn{.kl_cov_ratio = 0.01, .ppo_kl_coef = 0.4};
  const cr::policy_ratio_inputs<float> plain{
      .log_probs = b.log_probs, .old_log_probs = b.old_log_probs, .advantages = b.advantages};
  const auto host_selection = cr::kl_cov_selection(cr::exec::seq, layout, plain, drawn);
  portable::kl_cov_selection(system, device_layout(b), b.log_probs.data(), b.advantages.data(),
                             drawn, selected.data(), sums.data(), keys.data(), indices.data());
  expect_selection_loss_matches_host(
      "kl_cov", b, host_selection.size(),
      [&](cr::loss_aggregation mode, const cr::policy_ratio_inputs<float>& in,
          std::span<float> grad, const cr::loss_normalizer& normalizer) {
        auto options = drawn;
        options.aggregation = mode;
        return cr::kl_cov_loss(cr::exec::seq, layout, in, grad, normalizer, options);
      },
      [&](cr::loss_aggregation mode, const float* weights, float* grad,
          const cr::loss_normalizer& normalizer, portable::loss_tally* scratch) {
        auto options = drawn;
        options.aggregation = mode;
        portable::kl_cov_loss(system, device_layout(b), b.log_probs.data(), b.old_log_probs.data(),
                              b.advantages.data(), weights, selected.data(), grad, normalizer,
                              options, scratch);
      });
}

}  // namespace
