// The portable Thrust path (kernels/cascade_rl/cuda/portable.hpp) on a host Thrust
// system, against the host executors. tests.cmake builds this file twice, for
// THRUST_DEVICE_SYSTEM_CPP and THRUST_DEVICE_SYSTEM_OMP, with g++: no GPU needed. The
// path mirrors the host core's blocking, so the results must be the same bits as
// exec::seq, for any OpenMP thread count.

#include <gtest/gtest.h>

#include <thrust/execution_policy.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <vector>

#include <cuda_bf16.h>

#include "cascade_rl/cascade_rl.hpp"
#include "cascade_rl/cuda/portable.hpp"
#include "support/random_batch.hpp"

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
    return offsets.empty() ? cr::group_layout::uniform(groups, group_size) : cr::group_layout(offsets);
  }
  [[nodiscard]] device_group_layout device() const {
    return offsets.empty() ? device_group_layout::uniform(groups, group_size)
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
      cr::grpo_advantages(cr::exec::seq, std::span<const float>(c.rewards), c.host(),
                          std::span<float>(host), options);
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
    cr::grpo_advantages(cr::exec::seq, std::span<const float>(c.rewards), c.host(), std::span<float>(host), g);
    portable::grpo_advantages(system, c.rewards.data(), c.device(), device.data(), nullptr, g);
    expect_same_bits(device, host, "grpo with singletons and NaN");
    cr::rloo_options r{.singleton = singleton, .nonfinite = cr::nonfinite_rule::zero_group};
    cr::rloo_advantages(cr::exec::seq, std::span<const float>(c.rewards), c.host(), std::span<float>(host), r);
    portable::rloo_advantages(system, c.rewards.data(), c.device(), device.data(), nullptr, r);
    expect_same_bits(device, host, "rloo with singletons and NaN");
  }
}

TEST(PortableGroups, RlooAndStatisticsMatchHost) {
  for (const auto& c : group_cases()) {
    std::vector<float> host(c.rewards.size()), device(c.rewards.size());
    cr::rloo_advantages(cr::exec::seq, std::span<const float>(c.rewards), c.host(), std::span<float>(host));
    portable::rloo_advantages(system, c.rewards.data(), c.device(), device.data(), nullptr, cr::rloo_options{});
    expect_same_bits(device, host, "rloo advantages");

    for (auto estimator : {cr::std_estimator::unbiased, cr::std_estimator::biased}) {
      const cr::group_statistics_options options{.estimator = estimator};
      std::vector<cr::group_statistic> hs(c.groups), ds(c.groups);
      cr::group_statistics(cr::exec::seq, std::span<const float>(c.rewards), c.host(),
                           std::span<cr::group_statistic>(hs), options);
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
  // Long enough to span more than detail::sum_lanes reduction blocks of 4096 tokens, so
  // the host's lockstep blocks and its remainder blocks are both compared.
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
  const auto layout = b.layout();
  const auto normalizer = cr::local_loss_counts(cr::exec::seq, layout).normalizer(97.0);
  std::vector<portable::loss_tally> scratch(portable::scratch_tallies(b.tokens()));
  for (auto mode : cr::testing::all_aggregation_modes)
    for (auto surrogate : {cr::reinforce_surrogate::ratio, cr::reinforce_surrogate::log_prob})
      for (const auto& importance : importance_variants()) {
        const cr::reinforce_options options{.aggregation = mode, .surrogate = surrogate, .importance = importance};
        std::vector<float> hg(b.tokens()), dg(b.tokens());
        const auto h = cr::reinforce_loss(cr::exec::seq, layout, std::span<const float>(b.log_probs),
                                          std::span<const float>(b.advantages),
                                          std::span<const float>(b.behaviour_log_probs),
                                          std::span<float>(hg), normalizer, options);
        portable::reinforce_loss(system, device_layout(b), b.log_probs.data(), b.advantages.data(),
                                 b.behaviour_log_probs.data(), dg.data(), normalizer, options,
                                 scratch.data());
        expect_same_metrics(cr::cuda::detail::to_result(scratch[portable::result_index(b.tokens())]), h);
        expect_same_bits(dg, hg, "reinforce dL/dlogp");
      }
}

TEST(PortableLosses, PpoClipEveryModeMatchesHost) {
  const auto b = big_batch(4);
  const auto layout = b.layout();
  const auto normalizer = cr::local_loss_counts(cr::exec::seq, layout).normalizer(64.0);
  std::vector<portable::loss_tally> scratch(portable::scratch_tallies(b.tokens()));
  std::vector<cr::ppo_clip_options> variants(3);
  variants[1].clip_high = 0.28;
  variants[2].dual_clip = 3.0;
  variants[2].log_ratio_clamp = 0.5;
  for (auto mode : cr::testing::all_aggregation_modes)
    for (auto options : variants)
      for (const auto& importance : importance_variants()) {
        options.aggregation = mode;
        options.importance = importance;
        std::vector<float> hg(b.tokens()), dg(b.tokens());
        const auto h = cr::ppo_clip_loss(cr::exec::seq, layout, std::span<const float>(b.log_probs),
                                         std::span<const float>(b.old_log_probs),
                                         std::span<const float>(b.advantages),
                                         std::span<const float>(b.behaviour_log_probs),
                                         std::span<float>(hg), normalizer, options);
        portable::ppo_clip_loss(system, device_layout(b), b.log_probs.data(), b.old_log_probs.data(),
                                b.advantages.data(), b.behaviour_log_probs.data(), dg.data(),
                                normalizer, options, scratch.data());
        const auto d = cr::cuda::detail::to_result(scratch[portable::result_index(b.tokens())]);
        expect_same_metrics(d, h);
        EXPECT_GT(h.metrics.clipped, 0u);
        expect_same_bits(dg, hg, "ppo dL/dlogp");
      }
}

// Without a mask the host runs its branch-free loss loop: the same bits all the same.
TEST(PortableLosses, UnmaskedReinforceAndPpoMatchHost) {
  const auto b = big_batch(6);
  ASSERT_GT(b.tokens(), (cr::detail::sum_lanes + 1) * cr::detail::reduce_block_size);
  const cr::token_layout layout(b.offsets);
  const device_token_layout dlayout{b.offsets.data(), nullptr, b.offsets.size() - 1, b.tokens()};
  const auto normalizer = cr::local_loss_counts(cr::exec::seq, layout).normalizer(50.0);
  std::vector<portable::loss_tally> scratch(portable::scratch_tallies(b.tokens()));
  for (auto mode : cr::testing::all_aggregation_modes)
    for (auto surrogate : {cr::reinforce_surrogate::ratio, cr::reinforce_surrogate::log_prob}) {
      const cr::reinforce_options options{.aggregation = mode, .surrogate = surrogate};
      std::vector<float> hg(b.tokens()), dg(b.tokens());
      const auto h = cr::reinforce_loss(cr::exec::par.with_threads(3), layout,
                                        std::span<const float>(b.log_probs),
                                        std::span<const float>(b.advantages), std::span<float>(hg),
                                        normalizer, options);
      portable::reinforce_loss(system, dlayout, b.log_probs.data(), b.advantages.data(), static_cast<const float*>(nullptr),
                               dg.data(), normalizer, options, scratch.data());
      expect_same_metrics(cr::cuda::detail::to_result(scratch[portable::result_index(b.tokens())]), h);
      expect_same_bits(dg, hg, "unmasked reinforce dL/dlogp");
    }
  const cr::ppo_clip_options ppo{.clip_high = 0.28, .dual_clip = 3.0};
  std::vector<float> hg(b.tokens()), dg(b.tokens());
  const auto h = cr::ppo_clip_loss(cr::exec::par.with_threads(2), layout,
                                   std::span<const float>(b.log_probs),
                                   std::span<const float>(b.old_log_probs),
                                   std::span<const float>(b.advantages), std::span<float>(hg),
                                   normalizer, ppo);
  portable::ppo_clip_loss(system, dlayout, b.log_probs.data(), b.old_log_probs.data(),
                          b.advantages.data(), static_cast<const float*>(nullptr), dg.data(), normalizer, ppo, scratch.data());
  expect_same_metrics(cr::cuda::detail::to_result(scratch[portable::result_index(b.tokens())]), h);
  expect_same_bits(dg, hg, "unmasked ppo dL/dlogp");
}

TEST(PortableLosses, KlEstimatorsAndAggregationMatchHost) {
  const auto b = big_batch(5);
  const auto layout = b.layout();
  const auto normalizer = cr::local_loss_counts(cr::exec::seq, layout).normalizer(10.0);
  std::vector<portable::loss_tally> scratch(portable::scratch_tallies(b.tokens()));
  for (auto estimator : {cr::kl_estimator::k1, cr::kl_estimator::abs, cr::kl_estimator::k2, cr::kl_estimator::k3}) {
    const cr::kl_options kl{.estimator = estimator, .input_clamp = 1.0, .output_clamp = 0.9};
    std::vector<float> hv(b.tokens()), hg(b.tokens()), dv(b.tokens()), dg(b.tokens());
    const double h = cr::kl_penalty(cr::exec::seq, layout, std::span<const float>(b.log_probs),
                                    std::span<const float>(b.ref_log_probs), std::span<float>(hv),
                                    std::span<float>(hg), kl);
    portable::kl_penalty(system, device_layout(b), b.log_probs.data(), b.ref_log_probs.data(),
                         dv.data(), dg.data(), kl, scratch.data());
    EXPECT_EQ(scratch[portable::result_index(b.tokens())].loss, h);
    expect_same_bits(dv, hv, "kl values");
    expect_same_bits(dg, hg, "kl gradient");
    for (auto mode : cr::testing::all_aggregation_modes) {
      const cr::kl_loss_options options{.kl = kl, .coefficient = 0.25, .aggregation = mode};
      const double hl = cr::kl_loss(cr::exec::seq, layout, std::span<const float>(b.log_probs),
                                    std::span<const float>(b.ref_log_probs), std::span<float>(hg),
                                    normalizer, options);
      portable::kl_loss(system, device_layout(b), b.log_probs.data(), b.ref_log_probs.data(),
                        dg.data(), normalizer, options, scratch.data());
      EXPECT_EQ(scratch[portable::result_index(b.tokens())].loss, hl);
      expect_same_bits(dg, hg, "kl loss gradient");

      const double ha = cr::aggregate_token_losses(
          cr::exec::seq, layout, std::span<const float>(b.ref_log_probs),
          std::span<const float>(b.advantages), std::span<float>(hg), normalizer, mode);
      portable::aggregate_token_losses(system, device_layout(b), b.ref_log_probs.data(),
                                       b.advantages.data(), dg.data(), normalizer, mode, scratch.data());
      EXPECT_EQ(scratch[portable::result_index(b.tokens())].loss, ha);
      expect_same_bits(dg, hg, "aggregated gradient");
    }
  }
}

#if THRUST_DEVICE_SYSTEM == THRUST_DEVICE_SYSTEM_OMP
TEST(PortableLosses, SameBitsForAnyThreadCount) {
  const auto b = big_batch(6);
  const auto normalizer = cr::local_loss_counts(cr::exec::seq, b.layout()).normalizer();
  std::vector<portable::loss_tally> scratch(portable::scratch_tallies(b.tokens()));
  std::vector<double> losses;
  for (int threads : {1, 2, 3, 8}) {
    omp_set_num_threads(threads);
    std::vector<float> g(b.tokens());
    portable::ppo_clip_loss(system, device_layout(b), b.log_probs.data(), b.old_log_probs.data(),
                            b.advantages.data(), b.behaviour_log_probs.data(), g.data(), normalizer,
                            cr::ppo_clip_options{}, scratch.data());
    losses.push_back(scratch[portable::result_index(b.tokens())].loss);
  }
  for (double l : losses) EXPECT_EQ(l, losses[0]);
}
#endif

// ---- log-probs -----------------------------------------------------------------------

// log softmax and entropy in double, the slow obvious way.
void reference_row(const std::vector<double>& x, std::int64_t label, double& logp, double& entropy) {
  double m = -std::numeric_limits<double>::infinity();
  for (double v : x) m = std::max(m, v);
  double s = 0;
  for (double v : x) s += std::exp(v - m);
  const double lse = m + std::log(s);
  entropy = 0;
  for (double v : x)
    if (v != -std::numeric_limits<double>::infinity()) entropy -= std::exp(v - lse) * (v - lse);
  logp = x[static_cast<std::size_t>(label)] - lse;
}

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
    const auto host = cr::drop_zero_variance_groups(cr::exec::seq, std::span<const float>(c.rewards), c.host());
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

}  // namespace
