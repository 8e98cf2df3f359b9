// The CUB kernels (exec::cuda) against the host executors. Runs only on a machine with
// a CUDA device (ctest label gpu); elsewhere every test skips, naming the reason.

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "cascade_rl/cascade_rl.hpp"
#include "cascade_rl/cuda/cuda.cuh"
#include "support/expect_error.hpp"
#include "support/random_batch.hpp"
#include "support/rollout_correction_values.hpp"

namespace {

namespace cr = cascade_rl;
using cr::cuda::device_group_layout;
using cr::cuda::device_token_layout;

class Gpu : public ::testing::Test {
 protected:
  void SetUp() override {
    int devices = 0;
    const cudaError_t status = cudaGetDeviceCount(&devices);
    if (status != cudaSuccess || devices == 0)
      GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount: " << cudaGetErrorString(status)
                   << ", " << devices << " devices): the gpu tests need one";
  }
};

// A device copy of a host vector.
template <class V>
class device_vector {
 public:
  explicit device_vector(const std::vector<V>& host) : size_(host.size()) {
    cr::cuda::check(cudaMalloc(&data_, std::max<std::size_t>(1, size_) * sizeof(V)), "cudaMalloc");
    if (size_ > 0)
      cr::cuda::check(cudaMemcpy(data_, host.data(), size_ * sizeof(V), cudaMemcpyHostToDevice), "copy");
  }
  explicit device_vector(std::size_t n) : device_vector(std::vector<V>(n)) {}
  device_vector(const device_vector&) = delete;
  ~device_vector() { cudaFree(data_); }
  [[nodiscard]] std::vector<V> host() const {
    std::vector<V> out(size_);
    if (size_ > 0)
      cr::cuda::check(cudaMemcpy(out.data(), data_, size_ * sizeof(V), cudaMemcpyDeviceToHost), "copy");
    return out;
  }
  [[nodiscard]] std::span<V> span() { return {data_, size_}; }
  [[nodiscard]] std::span<const V> cspan() const { return {data_, size_}; }
  [[nodiscard]] V* data() { return data_; }

 private:
  V* data_ = nullptr;
  std::size_t size_;
};

// Losses: the token terms are the host's own (include/cascade_rl/terms/, exp from
// core/elementary_functions.hpp with unfused products on the device), and the kernels add
// in the host's canonical order (core/canonical_sum.hpp) with every product rounded
// alone, so the sums, metrics, per-token values and gradients are the host's bits, on
// the CPU emulator and on a GPU alike. So are the group advantages and statistics (the
// team leader computes a group's moments with the host's function), the discounted
// returns (a thread per sequence runs the host's recurrence) and the whitening
// (terms::whitened rounds its product alone: nvcc has no multiply-add to fuse).
void expect_same_sum(double device, double host, const char* what) {
  EXPECT_EQ(std::memcmp(&device, &host, sizeof device), 0) << what << ": " << device << " vs host " << host;
}

void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  int reported = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0 && reported++ < 5)
      ADD_FAILURE() << what << "[" << i << "]: " << got[i] << " vs host " << want[i];
}

struct groups_case {
  std::vector<float> rewards;
  std::vector<std::int64_t> offsets;
  std::size_t groups, group_size;
};

groups_case make_case(std::uint64_t seed, std::size_t groups, std::size_t g, bool variable) {
  std::mt19937_64 rng(seed);
  std::bernoulli_distribution coin(0.4);
  std::uniform_int_distribution<std::size_t> size(2, 2 * g);
  groups_case c{{}, {}, groups, g};
  std::size_t n = groups * g;
  if (variable) {
    c.offsets.push_back(0);
    for (std::size_t k = 0; k < groups; ++k) c.offsets.push_back(c.offsets.back() + static_cast<std::int64_t>(size(rng)));
    n = static_cast<std::size_t>(c.offsets.back());
  }
  std::normal_distribution<float> normal(0.3f, 1.0f);
  for (std::size_t i = 0; i < n; ++i) c.rewards.push_back(seed % 2 ? (coin(rng) ? 1.f : 0.f) : normal(rng));
  return c;
}

TEST_F(Gpu, GroupAdvantagesMatchHost) {
  std::uint64_t seed = 0;
  for (std::size_t g : {2, 4, 7, 16, 33, 64, 300, 3000})
    for (bool variable : {false, true}) {
      const auto c = make_case(++seed, g > 1000 ? 5 : 203, g, variable);
      const cr::group_layout host_groups =
          variable ? cr::group_layout(c.offsets)
                   : cr::group_layout::uniform({.groups = c.groups, .size = c.group_size});
      device_vector<std::int64_t> d_offsets(c.offsets);
      const device_group_layout groups =
          variable
              ? device_group_layout::variable(d_offsets.data(), c.groups, c.rewards.size(), 2 * g)
              : device_group_layout::uniform({.groups = c.groups, .size = c.group_size});
      device_vector<float> rewards(c.rewards), advantages(c.rewards.size());
      std::vector<float> want(c.rewards.size());
      for (auto accumulation : {cr::mean_accumulation::double_precision,
                                cr::mean_accumulation::float32_sequential}) {
        const cr::grpo_options options{.accumulation = accumulation};
        cr::grpo_advantages(cr::exec::seq, host_groups, c.rewards, want, options);
        cr::grpo_advantages(cr::exec::cuda{}, groups, rewards.cspan(), advantages.span(), options);
        expect_same_bits(advantages.host(), want, "grpo");
        const auto first = advantages.host();
        cr::grpo_advantages(cr::exec::cuda{}, groups, rewards.cspan(), advantages.span(), options);
        EXPECT_EQ(0, std::memcmp(first.data(), advantages.host().data(), first.size() * sizeof(float)))
            << "not deterministic";
      }
      cr::rloo_advantages(cr::exec::seq, host_groups, c.rewards, want);
      cr::rloo_advantages(cr::exec::cuda{}, groups, rewards.cspan(), advantages.span());
      expect_same_bits(advantages.host(), want, "rloo");

      std::vector<cr::group_statistic> hs(c.groups);
      device_vector<cr::group_statistic> ds(c.groups);
      cr::group_statistics(cr::exec::seq, host_groups, c.rewards,
                           std::span<cr::group_statistic>(hs));
      cr::group_statistics(cr::exec::cuda{}, groups, rewards.cspan(), ds.span());
      const auto got = ds.host();
      for (std::size_t k = 0; k < c.groups; ++k) {
        EXPECT_EQ(got[k].mean, hs[k].mean) << "group " << k;
        EXPECT_EQ(got[k].std, hs[k].std) << "group " << k;
        EXPECT_EQ(got[k].min, hs[k].min);
        EXPECT_EQ(got[k].max, hs[k].max);
        EXPECT_EQ(got[k].zero_variance, hs[k].zero_variance);
        EXPECT_EQ(got[k].count, hs[k].count);
      }
    }
}

TEST_F(Gpu, RefusesWhatTheHostRefuses) {
  std::vector<float> r{1, 0, 1, 1, std::numeric_limits<float>::quiet_NaN(), 0};
  device_vector<float> rewards(r), advantages(r.size());
  cr::testing::expect_error_naming(
      [&] {
        cr::grpo_advantages(cr::exec::cuda{},
                            device_group_layout::uniform({.groups = 2, .size = 3}), rewards.cspan(),
                            advantages.span());
      },
      "rewards[4]");
  std::vector<std::int64_t> offsets{0, 1, 6};
  device_vector<std::int64_t> d_offsets(offsets);
  std::vector<float> fine{1, 0, 1, 1, 1, 0};
  device_vector<float> fine_rewards(fine);
  cr::testing::expect_error_naming(
      [&] {
        cr::rloo_advantages(cr::exec::cuda{}, device_group_layout::variable(d_offsets.data(), 2, 6),
                            fine_rewards.cspan(), advantages.span());
      },
      "groups[0]", "RLOO");
}

TEST_F(Gpu, LossesMatchHostInEveryMode) {
  const auto b = cr::testing::make_random_batch<float>(11, {.sequences = 2000, .max_length = 200});
  const auto layout = b.layout();
  device_vector<std::int64_t> offsets(b.offsets);
  device_vector<std::uint8_t> mask(b.mask);
  const device_token_layout d_layout{offsets.data(), mask.data(), b.offsets.size() - 1, b.tokens()};
  device_vector<float> logp(b.log_probs), old(b.old_log_probs), adv(b.advantages),
      behaviour(b.behaviour_log_probs), ref(b.ref_log_probs), grad(b.tokens()), values(b.tokens());
  const auto normalizer_for =
      [counts = cr::local_loss_counts(cr::exec::seq, layout)](cascade_rl::loss_aggregation mode) {
        return counts.normalizer(mode, 128.0);
      };
  std::vector<float> want(b.tokens()), want_values(b.tokens());
  const cr::importance_options importance[] = {
      {}, {.mode = cr::importance_sampling::truncated, .cap = 1.5}, {.mode = cr::importance_sampling::band_mask}};
  for (auto mode : cr::testing::all_aggregation_modes)
    for (const auto& is : importance) {
      const cr::reinforce_options ro{.aggregation = mode, .importance = is};
      const auto h = cr::reinforce_loss(cr::exec::seq, layout,
                                        {.log_probs = b.log_probs,
                                         .advantages = b.advantages,
                                         .behaviour_log_probs = b.behaviour_log_probs},
                                        want, normalizer_for(mode), ro);
      const auto d = cr::reinforce_loss(cr::exec::cuda{}, d_layout,
                                        {.log_probs = logp.cspan(),
                                         .advantages = adv.cspan(),
                                         .behaviour_log_probs = behaviour.cspan()},
                                        grad.span(), normalizer_for(mode), ro);
      expect_same_sum(d.loss, h.loss, "reinforce loss");
      EXPECT_EQ(d.metrics.valid_tokens, h.metrics.valid_tokens);
      EXPECT_EQ(d.metrics.importance_masked, h.metrics.importance_masked);
      EXPECT_EQ(d.metrics.importance_truncated, h.metrics.importance_truncated);
      expect_same_bits(grad.host(), want, "reinforce grad");

      cr::ppo_clip_options po{.clip_high = 0.28, .dual_clip = 3.0, .aggregation = mode, .importance = is};
      const auto hp = cr::ppo_clip_loss(cr::exec::seq, layout,
                                        {.log_probs = b.log_probs,
                                         .old_log_probs = b.old_log_probs,
                                         .advantages = b.advantages,
                                         .behaviour_log_probs = b.behaviour_log_probs},
                                        want, normalizer_for(mode), po);
      const auto dp = cr::ppo_clip_loss(cr::exec::cuda{}, d_layout,
                                        {.log_probs = logp.cspan(),
                                         .old_log_probs = old.cspan(),
                                         .advantages = adv.cspan(),
                                         .behaviour_log_probs = behaviour.cspan()},
                                        grad.span(), normalizer_for(mode), po);
      expect_same_sum(dp.loss, hp.loss, "ppo loss");
      EXPECT_EQ(dp.metrics.clipped, hp.metrics.clipped);
      EXPECT_EQ(dp.metrics.dual_clipped, hp.metrics.dual_clipped);
      expect_same_sum(dp.metrics.approx_kl_sum, hp.metrics.approx_kl_sum, "ppo approx_kl_sum");
      expect_same_bits(grad.host(), want, "ppo grad");
      const auto again = cr::ppo_clip_loss(cr::exec::cuda{}, d_layout,
                                           {.log_probs = logp.cspan(),
                                            .old_log_probs = old.cspan(),
                                            .advantages = adv.cspan(),
                                            .behaviour_log_probs = behaviour.cspan()},
                                           grad.span(), normalizer_for(mode), po);
      EXPECT_EQ(again.loss, dp.loss) << "not deterministic";
    }
  const auto weights = cr::testing::rollout_is_weights_of(b);
  device_vector<float> d_weights(weights);
  for (auto mode : cr::testing::all_aggregation_modes)
    for (const auto& is : importance) {
      const cr::reinforce_options ro{
          .aggregation = mode, .surrogate = cr::reinforce_surrogate::log_prob, .importance = is};
      const auto h = cr::reinforce_loss(cr::exec::seq, layout,
                                        {.log_probs = b.log_probs,
                                         .advantages = b.advantages,
                                         .behaviour_log_probs = b.behaviour_log_probs,
                                         .rollout_is_weights = weights},
                                        want, normalizer_for(mode), ro);
      const auto d = cr::reinforce_loss(cr::exec::cuda{}, d_layout,
                                        {.log_probs = logp.cspan(),
                                         .advantages = adv.cspan(),
                                         .behaviour_log_probs = behaviour.cspan(),
                                         .rollout_is_weights = d_weights.cspan()},
                                        grad.span(), normalizer_for(mode), ro);
      expect_same_sum(d.loss, h.loss, "weighted reinforce loss");
      EXPECT_EQ(d.metrics.valid_tokens, h.metrics.valid_tokens);
      EXPECT_EQ(d.metrics.importance_masked, h.metrics.importance_masked);
      EXPECT_EQ(d.metrics.importance_truncated, h.metrics.importance_truncated);
      expect_same_bits(grad.host(), want, "weighted reinforce grad");

      // The PPO clip with given weights (veRL's vanilla rollout_is_weights, NeMo-RL's
      // precomputed actor importance weights), under every correction too.
      const cr::ppo_clip_options po{
          .clip_high = 0.28, .dual_clip = 3.0, .aggregation = mode, .importance = is};
      const auto hp = cr::ppo_clip_loss(cr::exec::seq, layout,
                                        {.log_probs = b.log_probs,
                                         .old_log_probs = b.old_log_probs,
                                         .advantages = b.advantages,
                                         .behaviour_log_probs = b.behaviour_log_probs,
                                         .rollout_is_weights = weights},
                                        want, normalizer_for(mode), po);
      const auto dp = cr::ppo_clip_loss(cr::exec::cuda{}, d_layout,
                                        {.log_probs = logp.cspan(),
                                         .old_log_probs = old.cspan(),
                                         .advantages = adv.cspan(),
                                         .behaviour_log_probs = behaviour.cspan(),
                                         .rollout_is_weights = d_weights.cspan()},
                                        grad.span(), normalizer_for(mode), po);
      expect_same_sum(dp.loss, hp.loss, "weighted ppo loss");
      EXPECT_EQ(dp.metrics.clipped, hp.metrics.clipped);
      EXPECT_EQ(dp.metrics.dual_clipped, hp.metrics.dual_clipped);
      EXPECT_EQ(dp.metrics.importance_masked, hp.metrics.importance_masked);
      EXPECT_EQ(dp.metrics.importance_truncated, hp.metrics.importance_truncated);
      expect_same_sum(dp.metrics.approx_kl_sum, hp.metrics.approx_kl_sum,
                      "weighted ppo approx_kl_sum");
      expect_same_bits(grad.host(), want, "weighted ppo grad");
    }
  // The ratio losses (CISPO, DPPO-TV/KL, DRO, SAPO), with and without given weights: a row
  // each, host and device called by the same public name.
  for (auto mode : cr::testing::all_aggregation_modes)
    for (const bool weighted : {false, true}) {
      const cr::policy_ratio_inputs<float> host_inputs{
          .log_probs = b.log_probs,
          .old_log_probs = b.old_log_probs,
          .advantages = b.advantages,
          .rollout_is_weights =
              weighted ? std::span<const float>(weights) : std::span<const float>{}};
      const cr::policy_ratio_inputs<float> device_inputs{
          .log_probs = logp.cspan(),
          .old_log_probs = old.cspan(),
          .advantages = adv.cspan(),
          .rollout_is_weights = weighted ? d_weights.cspan() : std::span<const float>{}};
      const auto check = [&](const std::string& name, const auto& loss, const auto& options) {
        SCOPED_TRACE(name + " " + std::string(cr::to_string(mode)) + (weighted ? " weighted" : ""));
        const cr::policy_loss_result h =
            loss(cr::exec::seq, layout, host_inputs, want, normalizer_for(mode), options);
        const cr::policy_loss_result d = loss(cr::exec::cuda{}, d_layout, device_inputs,
                                              grad.span(), normalizer_for(mode), options);
        expect_same_sum(d.loss, h.loss, "loss");
        EXPECT_EQ(d.metrics.valid_tokens, h.metrics.valid_tokens);
        EXPECT_EQ(d.metrics.clipped, h.metrics.clipped);
        EXPECT_EQ(d.metrics.dual_clipped, h.metrics.dual_clipped);
        expect_same_sum(d.metrics.approx_kl_sum, h.metrics.approx_kl_sum, "approx_kl_sum");
        expect_same_bits(grad.host(), want, "grad");
        return h;
      };
      const auto cispo = check(
          "cispo", [](auto&&... a) { return cr::cispo_loss(std::forward<decltype(a)>(a)...); },
          cr::cispo_options{.clip_low = 0.1, .clip_high = 0.28, .aggregation = mode});
      EXPECT_GT(cispo.metrics.clipped, 0u);
      for (const auto divergence :
           {cr::dppo_divergence::total_variation, cr::dppo_divergence::binary_kl}) {
        const auto dppo = check(
            "dppo", [](auto&&... a) { return cr::dppo_loss(std::forward<decltype(a)>(a)...); },
            cr::dppo_options{.divergence = divergence,
                             .clip_high = 0.05,
                             .truncation = 1.5,
                             .aggregation = mode});
        EXPECT_GT(dppo.metrics.dual_clipped, 0u);
      }
      check(
          "dro", [](auto&&... a) { return cr::dro_loss(std::forward<decltype(a)>(a)...); },
          cr::dro_options{.beta = 0.5, .aggregation = mode});
      check(
          "sapo", [](auto&&... a) { return cr::sapo_loss(std::forward<decltype(a)>(a)...); },
          cr::sapo_options{.tau_pos = 2.0, .log_ratio_clamp = 0.5, .aggregation = mode});
      // The sequence-level ratios: a pre-pass kernel per sequence, then the token kernels;
      // tight ranges so the clips engage, and GSPO's log-ratio bound too (a low one).
      for (const double bound : {10.0, 0.05}) {
        const auto gspo = check(
            "gspo bound " + std::to_string(bound),
            [](auto&&... a) { return cr::gspo_loss(std::forward<decltype(a)>(a)...); },
            cr::gspo_options{.clip_low = 0.02,
                             .clip_high = 0.03,
                             .log_ratio_bound = bound,
                             .aggregation = mode});
        EXPECT_GT(gspo.metrics.clipped, 0u);
      }
      const auto geo_mean = check(
          "geo_mean",
          [](auto&&... a) { return cr::geo_mean_loss(std::forward<decltype(a)>(a)...); },
          cr::geo_mean_options{.clip_low = 0.1, .clip_high = 0.15, .aggregation = mode});
      EXPECT_GT(geo_mean.metrics.clipped, 0u);
      EXPECT_GT(geo_mean.metrics.dual_clipped, 0u);
    }
  for (auto estimator :
       {cr::kl_estimator::k1, cr::kl_estimator::abs, cr::kl_estimator::k2, cr::kl_estimator::k3})
    for (const bool straight_through : {false, true}) {
      const cr::kl_options kl{.estimator = estimator,
                              .input_clamp = 1.0,
                              .output_clamp = 0.9,
                              .straight_through = straight_through};
      const double h = cr::kl_penalty(cr::exec::seq, layout,
                                      {.log_probs = b.log_probs, .ref_log_probs = b.ref_log_probs},
                                      want_values, want, kl);
      const double d = cr::kl_penalty(cr::exec::cuda{}, d_layout,
                                      {.log_probs = logp.cspan(), .ref_log_probs = ref.cspan()},
                                      values.span(), grad.span(), kl);
      expect_same_sum(d, h, "kl penalty sum");
      expect_same_bits(values.host(), want_values, "kl values");
      expect_same_bits(grad.host(), want, "kl grad");
      const cr::kl_loss_options lo{
          .kl = kl, .coefficient = 0.1, .aggregation = cr::loss_aggregation::seq_mean_token_mean};
      const double hl = cr::kl_loss(cr::exec::seq, layout,
                                    {.log_probs = b.log_probs, .ref_log_probs = b.ref_log_probs},
                                    want, normalizer_for(lo.aggregation), lo);
      const double dl = cr::kl_loss(cr::exec::cuda{}, d_layout,
                                    {.log_probs = logp.cspan(), .ref_log_probs = ref.cspan()},
                                    grad.span(), normalizer_for(lo.aggregation), lo);
      expect_same_sum(dl, hl, "kl loss");
      expect_same_bits(grad.host(), want, "kl loss grad");
    }
  const double ha = cr::aggregate_token_losses(
      cr::exec::seq, layout, {.token_losses = b.ref_log_probs, .token_grads = b.advantages}, want,
      normalizer_for(cr::loss_aggregation::seq_mean_token_sum_norm),
      cr::loss_aggregation::seq_mean_token_sum_norm);
  const double da = cr::aggregate_token_losses(
      cr::exec::cuda{}, d_layout, {.token_losses = ref.cspan(), .token_grads = adv.cspan()},
      grad.span(), normalizer_for(cr::loss_aggregation::seq_mean_token_sum_norm),
      cr::loss_aggregation::seq_mean_token_sum_norm);
  expect_same_sum(da, ha, "aggregate_token_losses");
  expect_same_bits(grad.host(), want, "aggregate grad");
}

// The device's log-probs against the host's (terms/log_sum_exp.hpp's order on both): the
// same bits, on rows with -inf logits, one row with a NaN logit and one all -inf but
// its label.
template <class L>
void check_log_probs(std::size_t rows, std::size_t vocab, std::size_t stride, float temperature) {
  using host_logit = std::conditional_t<std::is_same_v<L, float>, float, cr::bfloat16>;
  std::mt19937_64 rng(rows + vocab);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::uniform_int_distribution<std::int64_t> pick(0, static_cast<std::int64_t>(vocab) - 1);
  std::vector<float> values(rows * stride);
  for (auto& v : values) v = normal(rng);
  constexpr float minus_inf = -std::numeric_limits<float>::infinity();
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t v = r % 5; v < vocab; v += 5) values[r * stride + v] = minus_inf;
  std::vector<std::int64_t> labels(rows);
  for (auto& l : labels) l = pick(rng);
  for (std::size_t r = 0; r < rows; ++r)
    if (labels[r] % 5 == static_cast<std::int64_t>(r % 5)) labels[r] = (labels[r] + 1) % static_cast<std::int64_t>(vocab);
  if (rows > 2) values[stride + vocab / 2] = std::numeric_limits<float>::quiet_NaN();
  if (rows > 3)
    for (std::size_t v = 0; v < vocab; ++v)
      if (static_cast<std::int64_t>(v) != labels[2]) values[2 * stride + v] = minus_inf;
  std::vector<L> logits(values.size());
  std::vector<host_logit> host_logits(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    logits[i] = static_cast<L>(values[i]);
    std::memcpy(static_cast<void*>(&host_logits[i]), &logits[i], sizeof(L));
  }
  std::vector<float> want_logp(rows), want_entropy(rows);
  cr::log_probs_from_logits(cr::exec::seq, {.vocab = vocab, .row_stride = stride},
                            std::span<const host_logit>(host_logits),
                            std::span<const std::int64_t>(labels), std::span<float>(want_logp),
                            std::span<float>(want_entropy), temperature);
  device_vector<L> d_logits(logits);
  device_vector<std::int64_t> d_labels(labels);
  device_vector<float> logp(rows), entropy(rows);
  cr::log_probs_from_logits(cr::exec::cuda{}, {.vocab = vocab, .row_stride = stride},
                            d_logits.cspan(), d_labels.cspan(), logp.span(), entropy.span(),
                            temperature);
  const std::string what = "vocab " + std::to_string(vocab);
  expect_same_bits(logp.host(), want_logp, ("log_probs, " + what).c_str());
  expect_same_bits(entropy.host(), want_entropy, ("entropy, " + what).c_str());

  // The backward pass with both seeds (the NaN row gives NaN on both sides, compared as
  // bits), padding columns left alone.
  std::vector<float> g(rows), h(rows);
  for (std::size_t r = 0; r < rows; ++r) {
    g[r] = normal(rng);
    h[r] = normal(rng);
  }
  std::vector<float> want_grad(rows * stride, 0.0f);
  cr::log_probs_backward(cr::exec::seq, {.vocab = vocab, .row_stride = stride},
                         std::span<const host_logit>(host_logits),
                         std::span<const std::int64_t>(labels), {.log_probs = g, .entropy = h},
                         std::span<float>(want_grad), temperature);
  device_vector<float> d_g(g), d_h(h), grad(std::vector<float>(rows * stride, 0.0f));
  cr::log_probs_backward(cr::exec::cuda{}, {.vocab = vocab, .row_stride = stride}, d_logits.cspan(),
                         d_labels.cspan(), {.log_probs = d_g.cspan(), .entropy = d_h.cspan()},
                         grad.span(), temperature);
  expect_same_bits(grad.host(), want_grad, ("logits gradient, " + what).c_str());
}

TEST_F(Gpu, LogProbsMatchHost) {
  check_log_probs<float>(37, 1000, 1000, 1.0f);
  check_log_probs<float>(9, 4097, 4099, 0.6f);      // padded chunks, misaligned rows
  check_log_probs<float>(3, 262144, 262144, 1.0f);  // 256k vocabulary
  check_log_probs<float>(17, 17, 19, 1.3f);         // one short chunk, a second block
  check_log_probs<__nv_bfloat16>(21, 3000, 3001, 1.0f);
  check_log_probs<__nv_bfloat16>(4, 151936, 151936, 1.0f);
}

TEST_F(Gpu, FilterMatchesHost) {
  const auto c = make_case(3, 500, 8, true);
  device_vector<std::int64_t> d_offsets(c.offsets);
  device_vector<float> rewards(c.rewards);
  const auto want =
      cr::drop_zero_variance_groups(cr::exec::seq, cr::group_layout(c.offsets), c.rewards);
  const auto got = cr::drop_zero_variance_groups(
      cr::exec::cuda{}, device_group_layout::variable(d_offsets.data(), c.groups, c.rewards.size()),
      rewards.cspan());
  EXPECT_EQ(got.kept_groups, want.kept_groups);
  EXPECT_EQ(got.kept_sequences, want.kept_sequences);
  EXPECT_EQ(got.group_offsets, want.group_offsets);
  EXPECT_EQ(got.dropped_groups, want.dropped_groups);
}

// ---- leave-one-out statistics, zero-variance flags, gather ------------------------------

TEST_F(Gpu, LeaveOneOutAndZeroVarianceMatchHost) {
  std::uint64_t seed = 100;
  for (std::size_t g : {2, 5, 16, 64, 300, 3000})
    for (bool variable : {false, true}) {
      const auto c = make_case(++seed, g > 1000 ? 5 : 150, g, variable);
      const cr::group_layout host_groups =
          variable ? cr::group_layout(c.offsets)
                   : cr::group_layout::uniform({.groups = c.groups, .size = c.group_size});
      device_vector<std::int64_t> d_offsets(c.offsets);
      const device_group_layout groups =
          variable
              ? device_group_layout::variable(d_offsets.data(), c.groups, c.rewards.size(), 2 * g)
              : device_group_layout::uniform({.groups = c.groups, .size = c.group_size});
      const std::size_t n = c.rewards.size();
      device_vector<float> rewards(c.rewards), mean(n), spread(n);
      for (auto estimator : {cr::std_estimator::unbiased, cr::std_estimator::biased}) {
        const cr::leave_one_out_options options{.estimator = estimator};
        std::vector<float> want_mean(n), want_std(n);
        cr::leave_one_out_statistics(cr::exec::seq, host_groups, c.rewards, want_mean, want_std,
                                     options);
        cr::leave_one_out_statistics(cr::exec::cuda{}, groups, rewards.cspan(), mean.span(),
                                     spread.span(), options);
        expect_same_bits(mean.host(), want_mean, "leave-one-out mean");
        expect_same_bits(spread.host(), want_std, "leave-one-out std");
        cr::leave_one_out_statistics(cr::exec::cuda{}, groups, rewards.cspan(), mean.span(),
                                     std::span<float>{}, options);
        expect_same_bits(mean.host(), want_mean, "leave-one-out mean without std");
      }
      std::vector<std::uint8_t> want_flags(c.groups);
      cr::zero_variance_groups(cr::exec::seq, host_groups, c.rewards,
                               std::span<std::uint8_t>(want_flags));
      device_vector<std::uint8_t> flags(c.groups);
      cr::zero_variance_groups(cr::exec::cuda{}, groups, rewards.cspan(), flags.span());
      EXPECT_EQ(flags.host(), want_flags);
    }
}

TEST_F(Gpu, GatherMatchesHost) {
  const auto c = make_case(7, 400, 8, true);
  const cr::group_layout host_groups(c.offsets);
  const auto selection = cr::drop_zero_variance_groups(cr::exec::seq, host_groups, c.rewards);
  const std::size_t kept = selection.kept_sequences.size();
  std::vector<float> want(kept);
  cr::gather_sequences(cr::exec::seq, selection, c.rewards, want);
  device_vector<float> rewards(c.rewards), out(kept);
  cr::gather_sequences(cr::exec::cuda{}, selection, rewards.cspan(), out.span());
  EXPECT_EQ(out.host(), want);
  // With the indices in device memory, as the CUB-style filter writes them.
  const std::vector<std::int64_t> kept64(selection.kept_sequences.begin(), selection.kept_sequences.end());
  device_vector<std::int64_t> d_kept(kept64);
  device_vector<float> out2(kept);
  cr::gather_sequences(cr::exec::cuda{}, d_kept.cspan(), rewards.cspan(), out2.span());
  EXPECT_EQ(out2.host(), want);
}

// ---- loss counts and token advantages ----------------------------------------------------

// A device copy of a batch's layout.
struct device_layout_of {
  device_vector<std::int64_t> offsets;
  device_vector<std::uint8_t> mask;
  device_layout_of(const std::vector<std::int64_t>& o, const std::vector<std::uint8_t>& m) : offsets(o), mask(m) {}
  [[nodiscard]] device_token_layout layout(std::size_t tokens) {
    return {offsets.data(), mask.data(), offsets.host().size() - 1, tokens};
  }
};

TEST_F(Gpu, TokenAdvantagesMatchHost) {
  auto b = cr::testing::make_random_batch<float>(21, {.sequences = 3000, .max_length = 150});
  for (std::size_t t = 0; t < b.tokens(); ++t)
    if (b.mask[t] == 0) b.log_probs[t] = std::numeric_limits<float>::quiet_NaN();  // never read
  const auto layout = b.layout();
  device_layout_of d(b.offsets, b.mask);
  const device_token_layout d_layout = d.layout(b.tokens());
  const auto want_counts = cr::local_loss_counts(cr::exec::seq, layout);
  const auto counts = cr::local_loss_counts(cr::exec::cuda{}, d_layout);
  EXPECT_EQ(counts.tokens, want_counts.tokens);
  EXPECT_EQ(counts.sequences, want_counts.sequences);

  const std::size_t sequences = b.offsets.size() - 1;
  std::vector<float> values(sequences);
  for (std::size_t s = 0; s < sequences; ++s) values[s] = 0.25f * static_cast<float>(s % 13) - 1.0f;
  std::vector<float> want(b.tokens());
  device_vector<float> d_values(values), out(b.tokens()), logp(b.log_probs), ref(b.ref_log_probs);
  cr::broadcast_to_tokens(cr::exec::seq, layout, values, want);
  cr::broadcast_to_tokens(cr::exec::cuda{}, d_layout, d_values.cspan(), out.span());
  EXPECT_EQ(out.host(), want);
  cr::distillation_advantages(
      cr::exec::seq, layout,
      {.teacher_log_probs = b.ref_log_probs, .student_log_probs = b.log_probs}, want);
  cr::distillation_advantages(cr::exec::cuda{}, d_layout,
                              {.teacher_log_probs = ref.cspan(), .student_log_probs = logp.cspan()},
                              out.span());
  EXPECT_EQ(out.host(), want);

  // Every sequence keeps a valid token for place_on_last_valid_token; some are long
  // (several chunks of 32 to search).
  std::vector<std::int64_t> offsets{0};
  std::vector<std::uint8_t> mask;
  std::mt19937_64 rng(5);
  std::uniform_int_distribution<std::size_t> length(1, 300);
  for (std::size_t s = 0; s < 500; ++s) {
    const std::size_t n = length(rng);
    for (std::size_t t = 0; t < n; ++t) mask.push_back(t < n / 3 || (t % 7 == 0) ? 1 : 0);
    offsets.push_back(static_cast<std::int64_t>(mask.size()));
  }
  device_layout_of p(offsets, mask);
  std::vector<float> per_sequence(500, 0.0f), placed(mask.size());
  for (std::size_t s = 0; s < 500; ++s) per_sequence[s] = static_cast<float>(s) + 0.5f;
  cr::place_on_last_valid_token(cr::exec::seq, cr::token_layout(offsets, mask), per_sequence,
                                placed);
  device_vector<float> d_per_sequence(per_sequence), d_placed(mask.size());
  cr::place_on_last_valid_token(cr::exec::cuda{}, p.layout(mask.size()), d_per_sequence.cspan(),
                                d_placed.span());
  EXPECT_EQ(d_placed.host(), placed);
}

TEST_F(Gpu, ReinforcePlusPlusMatchesHost) {
  const auto b = cr::testing::make_random_batch<float>(22, {.sequences = 2000, .max_length = 300});
  const auto layout = b.layout();
  device_layout_of d(b.offsets, b.mask);
  const device_token_layout d_layout = d.layout(b.tokens());
  device_vector<float> rewards(b.advantages), out(b.tokens());
  std::vector<float> want(b.tokens());
  for (const auto masked : {cr::masked_token_return::carry, cr::masked_token_return::cut})
    for (double gamma : {1.0, 0.97, 0.0}) {
      cr::discounted_returns(cr::exec::seq, layout, b.advantages, want, gamma, masked);
      cr::discounted_returns(cr::exec::cuda{}, d_layout, rewards.cspan(), out.span(), gamma,
                             masked);
      expect_same_bits(out.host(), want, "discounted returns");
    }
  std::vector<cr::whitening_options> variants(4);
  variants[1].estimator = cr::std_estimator::biased;
  variants[2].shift_mean = false;
  variants[3].accumulation = cr::mean_accumulation::float32_rounded_sum;
  for (const auto& whitening : variants) {
    cr::masked_whiten(cr::exec::seq, layout, b.advantages, want, whitening);
    cr::masked_whiten(cr::exec::cuda{}, d_layout, rewards.cspan(), out.span(), whitening);
    expect_same_bits(out.host(), want, "whitened");
    const cr::reinforce_plus_plus_options options{.gamma = 0.99,
                                                  .masked = whitening.shift_mean
                                                                ? cr::masked_token_return::carry
                                                                : cr::masked_token_return::cut,
                                                  .whitening = whitening};
    cr::reinforce_plus_plus_advantages(cr::exec::seq, layout, b.advantages, want, options);
    cr::reinforce_plus_plus_advantages(cr::exec::cuda{}, d_layout, rewards.cspan(), out.span(),
                                       options);
    const auto first = out.host();
    expect_same_bits(first, want, "REINFORCE++");
    cr::reinforce_plus_plus_advantages(cr::exec::cuda{}, d_layout, rewards.cspan(), out.span(),
                                       options);
    EXPECT_EQ(0, std::memcmp(first.data(), out.host().data(), first.size() * sizeof(float))) << "not deterministic";
  }
  // REINFORCE++-baseline: uniform groups of 4, and variable groups with singletons.
  const std::size_t sequences = b.offsets.size() - 1;
  const auto uniform = make_case(23, sequences / 4, 4, false);
  device_vector<float> scores(uniform.rewards);
  for (auto accumulation : {cr::mean_accumulation::double_precision, cr::mean_accumulation::float32_sequential}) {
    const cr::reinforce_plus_plus_baseline_options options{.accumulation = accumulation};
    cr::reinforce_plus_plus_baseline_advantages(
        cr::exec::seq, cr::group_layout::uniform({.groups = sequences / 4, .size = 4}), layout,
        uniform.rewards, want, options);
    cr::reinforce_plus_plus_baseline_advantages(
        cr::exec::cuda{}, device_group_layout::uniform({.groups = sequences / 4, .size = 4}),
        d_layout, scores.cspan(), out.span(), options);
    expect_same_bits(out.host(), want, "REINFORCE++-baseline");
  }
  std::vector<std::int64_t> group_offsets{0};
  while (static_cast<std::size_t>(group_offsets.back()) < sequences)
    group_offsets.push_back(std::min(static_cast<std::int64_t>(sequences),
                                     group_offsets.back() + 1 + static_cast<std::int64_t>(group_offsets.size() % 6)));
  device_vector<std::int64_t> d_group_offsets(group_offsets);
  const cr::reinforce_plus_plus_baseline_options raw{.singleton = cr::singleton_rule::raw_score};
  cr::reinforce_plus_plus_baseline_advantages(cr::exec::seq, cr::group_layout(group_offsets),
                                              layout, uniform.rewards, want, raw);
  cr::reinforce_plus_plus_baseline_advantages(
      cr::exec::cuda{},
      device_group_layout::variable(d_group_offsets.data(), group_offsets.size() - 1, sequences, 6),
      d_layout, scores.cspan(), out.span(), raw);
  expect_same_bits(out.host(), want, "REINFORCE++-baseline, variable groups");
}

TEST_F(Gpu, GaeMatchesHost) {
  auto b = cr::testing::make_random_batch<float>(24, {.sequences = 2000, .max_length = 300});
  for (std::size_t t = 0; t < b.tokens(); t += 3)
    if (b.mask[t] == 0) b.advantages[t] = std::numeric_limits<float>::quiet_NaN();  // never read
  const auto layout = b.layout();
  device_layout_of d(b.offsets, b.mask);
  const device_token_layout d_layout = d.layout(b.tokens());
  device_vector<float> rewards(b.advantages), values(b.ref_log_probs), out(b.tokens()),
      returns(b.tokens());
  std::vector<float> want(b.tokens()), want_returns(b.tokens());
  std::vector<cr::whitening_options> variants(3);
  variants[1].estimator = cr::std_estimator::biased;
  variants[1].shift_mean = false;
  variants[2].accumulation = cr::mean_accumulation::float32_rounded_sum;
  for (double lambda : {1.0, 0.95, 0.0})
    for (const auto& whitening : variants) {
      const cr::gae_options options{.gamma = 0.99, .lambda = lambda, .whitening = whitening};
      cr::gae_advantages(cr::exec::seq, layout,
                         {.token_rewards = b.advantages, .values = b.ref_log_probs}, want,
                         want_returns, options);
      cr::gae_advantages(cr::exec::cuda{}, d_layout,
                         {.token_rewards = rewards.cspan(), .values = values.cspan()}, out.span(),
                         returns.span(), options);
      expect_same_bits(out.host(), want, "GAE advantages");
      expect_same_bits(returns.host(), want_returns, "GAE returns");
    }
  // A NaN value on a valid token is named as the host names it.
  auto bad = b.ref_log_probs;
  std::size_t first_valid = 0;
  while (b.mask[first_valid] == 0) ++first_valid;
  bad[first_valid + 0] = std::numeric_limits<float>::quiet_NaN();
  device_vector<float> d_bad(bad);
  cr::testing::expect_error_naming(
      [&] {
        cr::gae_advantages(cr::exec::cuda{}, d_layout,
                           {.token_rewards = rewards.cspan(), .values = d_bad.cspan()}, out.span(),
                           returns.span());
      },
      "values", std::to_string(first_valid), "NaN");
  cr::testing::expect_error_naming(
      [&] {
        cr::gae_advantages(cr::exec::cuda{}, d_layout,
                           {.token_rewards = rewards.cspan(), .values = values.cspan()}, out.span(),
                           returns.span(), {.gamma = -1.0});
      },
      "options.gamma");
}

TEST_F(Gpu, RemaxMatchesHost) {
  auto b = cr::testing::make_random_batch<float>(25, {.sequences = 2000, .max_length = 300});
  for (std::size_t t = 0; t < b.tokens(); t += 3)
    if (b.mask[t] == 0) b.advantages[t] = std::numeric_limits<float>::quiet_NaN();  // never read
  const std::size_t sequences = b.offsets.size() - 1;
  std::vector<float> baselines(sequences);
  for (std::size_t s = 0; s < sequences; ++s)
    baselines[s] = 0.125f * static_cast<float>(s % 11) - 0.5f;
  device_layout_of d(b.offsets, b.mask);
  const device_token_layout d_layout = d.layout(b.tokens());
  device_vector<float> rewards(b.advantages), d_baselines(baselines), out(b.tokens()),
      returns(b.tokens());
  std::vector<float> want(b.tokens()), want_returns(b.tokens());
  cr::remax_advantages(cr::exec::seq, b.layout(),
                       {.token_rewards = b.advantages, .reward_baselines = baselines}, want,
                       want_returns);
  cr::remax_advantages(cr::exec::cuda{}, d_layout,
                       {.token_rewards = rewards.cspan(), .reward_baselines = d_baselines.cspan()},
                       out.span(), returns.span());
  expect_same_bits(out.host(), want, "ReMax advantages");
  expect_same_bits(returns.host(), want_returns, "ReMax returns");
  baselines[7] = std::numeric_limits<float>::infinity();
  device_vector<float> bad(baselines);
  cr::testing::expect_error_naming(
      [&] {
        cr::remax_advantages(cr::exec::cuda{}, d_layout,
                             {.token_rewards = rewards.cspan(), .reward_baselines = bad.cspan()},
                             out.span(), returns.span());
      },
      "reward_baselines", "7", "infinite");
}

TEST_F(Gpu, OpoMatchesHost) {
  const auto b = cr::testing::make_random_batch<float>(26, {.sequences = 2000, .max_length = 300});
  const auto layout = b.layout();
  device_layout_of d(b.offsets, b.mask);
  const device_token_layout d_layout = d.layout(b.tokens());
  const std::size_t sequences = b.offsets.size() - 1;
  std::vector<float> want(b.tokens());
  device_vector<float> out(b.tokens());
  // Uniform groups of 4 (binary scores: zero-variance groups) and variable groups with
  // singletons and a NaN score.
  const auto uniform = make_case(27, sequences / 4, 4, false);
  device_vector<float> scores(uniform.rewards);
  const cr::opo_options verl_like{.singleton = cr::singleton_rule::raw_score};
  cr::opo_advantages(cr::exec::seq, cr::group_layout::uniform({.groups = sequences / 4, .size = 4}),
                     layout, uniform.rewards, want, verl_like);
  cr::opo_advantages(cr::exec::cuda{},
                     device_group_layout::uniform({.groups = sequences / 4, .size = 4}), d_layout,
                     scores.cspan(), out.span(), verl_like);
  expect_same_bits(out.host(), want, "OPO");
  std::vector<std::int64_t> group_offsets{0};
  while (static_cast<std::size_t>(group_offsets.back()) < sequences)
    group_offsets.push_back(
        std::min(static_cast<std::int64_t>(sequences),
                 group_offsets.back() + 1 + static_cast<std::int64_t>(group_offsets.size() % 6)));
  device_vector<std::int64_t> d_group_offsets(group_offsets);
  const auto variable =
      device_group_layout::variable(d_group_offsets.data(), group_offsets.size() - 1, sequences);
  auto nan_scores = uniform.rewards;
  nan_scores[9] = std::numeric_limits<float>::quiet_NaN();
  device_vector<float> d_nan(nan_scores);
  const cr::opo_options zeroing{.singleton = cr::singleton_rule::raw_score,
                                .nonfinite = cr::nonfinite_rule::zero_group};
  cr::opo_advantages(cr::exec::seq, cr::group_layout(group_offsets), layout, nan_scores, want,
                     zeroing);
  cr::opo_advantages(cr::exec::cuda{}, variable, d_layout, d_nan.cspan(), out.span(), zeroing);
  expect_same_bits(out.host(), want, "OPO, variable groups");
  cr::testing::expect_error_naming(
      [&] { cr::opo_advantages(cr::exec::cuda{}, variable, d_layout, scores.cspan(), out.span()); },
      "groups", "group of one", "OPO");
  cr::testing::expect_error_naming(
      [&] {
        cr::opo_advantages(cr::exec::cuda{}, variable, d_layout, d_nan.cspan(), out.span(),
                           verl_like);
      },
      "scores", "9", "NaN");
}

TEST_F(Gpu, GpgMatchesHost) {
  for (std::uint64_t seed : {41, 42})
    for (bool variable : {false, true}) {
      const auto c = make_case(seed, 300, 8, variable);
      device_vector<float> scores(c.rewards), out(c.rewards.size());
      device_vector<std::int64_t> offsets(variable ? c.offsets : std::vector<std::int64_t>{0});
      const cr::group_layout host_groups =
          variable ? cr::group_layout(c.offsets)
                   : cr::group_layout::uniform({.groups = 300, .size = 8});
      const device_group_layout groups =
          variable ? device_group_layout::variable(offsets.data(), 300, c.rewards.size())
                   : device_group_layout::uniform({.groups = 300, .size = 8});
      for (const auto& options : {cr::gpg_options{}, cr::presets::verl::gpg(2.0)}) {
        std::vector<float> want(c.rewards.size());
        cr::gpg_advantages(cr::exec::seq, host_groups, c.rewards, want, options);
        cr::gpg_advantages(cr::exec::cuda{}, groups, scores.cspan(), out.span(), options);
        expect_same_bits(out.host(), want, "GPG");
      }
    }
  std::vector<float> r{1, 0, 1, 1, std::numeric_limits<float>::quiet_NaN(), 0};
  device_vector<float> d(r), out(r.size());
  cr::testing::expect_error_naming(
      [&] {
        cr::gpg_advantages(cr::exec::cuda{}, device_group_layout::uniform({.groups = 3, .size = 2}),
                           d.cspan(), out.span());
      },
      "scores", "4", "NaN");
  cr::testing::expect_error_naming(
      [&] {
        cr::gpg_advantages(cr::exec::cuda{}, device_group_layout::uniform({.groups = 3, .size = 2}),
                           d.cspan(), out.span(), {.f_norm = 0.0});
      },
      "options.f_norm");
}

TEST_F(Gpu, GrpoPasskMatchesHost) {
  for (std::uint64_t seed : {43, 44})
    for (bool variable : {false, true}) {
      const auto c = make_case(seed, 300, 8, variable);
      device_vector<float> scores(c.rewards), out(c.rewards.size());
      device_vector<std::int64_t> offsets(variable ? c.offsets : std::vector<std::int64_t>{0});
      const cr::group_layout host_groups =
          variable ? cr::group_layout(c.offsets)
                   : cr::group_layout::uniform({.groups = 300, .size = 8});
      const device_group_layout groups =
          variable ? device_group_layout::variable(offsets.data(), 300, c.rewards.size())
                   : device_group_layout::uniform({.groups = 300, .size = 8});
      for (const auto& options : {cr::grpo_passk_options{}, cr::presets::verl::grpo_passk(),
                                  cr::presets::verl::grpo_passk(false)}) {
        std::vector<float> want(c.rewards.size());
        cr::grpo_passk_advantages(cr::exec::seq, host_groups, c.rewards, want, options);
        cr::grpo_passk_advantages(cr::exec::cuda{}, groups, scores.cspan(), out.span(), options);
        expect_same_bits(out.host(), want, "GRPO pass@k");
      }
    }
  std::vector<float> r{1, 0, 1, 1, 0};
  device_vector<float> d(r), out(r.size());
  std::vector<std::int64_t> offsets{0, 2, 4, 5};
  device_vector<std::int64_t> d_offsets(offsets);
  cr::testing::expect_error_naming(
      [&] {
        cr::grpo_passk_advantages(cr::exec::cuda{},
                                  device_group_layout::variable(d_offsets.data(), 3, 5), d.cspan(),
                                  out.span());
      },
      "groups", "2", "group of one");
}

TEST_F(Gpu, GdpoMatchesHost) {
  const auto b = cr::testing::make_random_batch<float>(28, {.sequences = 2000, .max_length = 300});
  const auto layout = b.layout();
  device_layout_of d(b.offsets, b.mask);
  const device_token_layout d_layout = d.layout(b.tokens());
  const std::size_t sequences = b.offsets.size() - 1;
  const auto binary = make_case(29, sequences / 4, 4, false);
  const auto continuous = make_case(30, sequences / 4, 4, false);
  std::vector<float> components(binary.rewards);
  components.insert(components.end(), continuous.rewards.begin(), continuous.rewards.end());
  const std::vector<double> weights{0.5, 1.0};
  device_vector<float> d_components(components), out(b.tokens());
  std::vector<float> want(b.tokens());
  for (const auto& options : {cr::presets::verl::gdpo(), cr::presets::verl::gdpo(false)}) {
    cr::gdpo_advantages(cr::exec::seq,
                        cr::group_layout::uniform({.groups = sequences / 4, .size = 4}), layout,
                        {.component_scores = components, .weights = weights}, want, options);
    cr::gdpo_advantages(cr::exec::cuda{},
                        device_group_layout::uniform({.groups = sequences / 4, .size = 4}),
                        d_layout, {.component_scores = d_components.cspan(), .weights = weights},
                        out.span(), options);
    expect_same_bits(out.host(), want, "GDPO");
  }
  components[sequences + 5] = std::numeric_limits<float>::infinity();
  device_vector<float> bad(components);
  cr::testing::expect_error_naming(
      [&] {
        cr::gdpo_advantages(
            cr::exec::cuda{}, device_group_layout::uniform({.groups = sequences / 4, .size = 4}),
            d_layout, {.component_scores = bad.cspan(), .weights = weights}, out.span());
      },
      "component_scores", std::to_string(sequences + 5), "infinite");
}

TEST_F(Gpu, NewAlgorithmsRefuseWhatTheHostRefuses) {
  std::vector<float> r{1, 0, 1, 1, std::numeric_limits<float>::quiet_NaN(), 0};
  device_vector<float> rewards(r), a(r.size()), b(r.size());
  cr::testing::expect_error_naming(
      [&] {
        cr::leave_one_out_statistics(cr::exec::cuda{},
                                     device_group_layout::uniform({.groups = 2, .size = 3}),
                                     rewards.cspan(), a.span(), b.span());
      },
      "rewards[4]");
  std::vector<std::int64_t> offsets{0, 1, 6};
  device_vector<std::int64_t> d_offsets(offsets);
  std::vector<float> fine{1, 0, 1, 1, 1, 0};
  device_vector<float> fine_rewards(fine);
  const auto singleton_first = device_group_layout::variable(d_offsets.data(), 2, 6);
  cr::testing::expect_error_naming(
      [&] {
        cr::leave_one_out_statistics(cr::exec::cuda{}, singleton_first, fine_rewards.cspan(),
                                     a.span(), b.span());
      },
      "groups[0]", "leave-one-out");

  // Tokens: sequences of 3, 0 and 3 tokens, the first with one masked token.
  const std::vector<std::int64_t> token_offsets{0, 3, 3, 6};
  const std::vector<std::uint8_t> mask{1, 0, 1, 1, 1, 1};
  device_layout_of d(token_offsets, mask);
  const device_token_layout layout = d.layout(6);
  device_vector<float> per_sequence(std::vector<float>{1, 2, 3}), out(6);
  cr::testing::expect_error_naming(
      [&] {
        cr::place_on_last_valid_token(cr::exec::cuda{}, layout, per_sequence.cspan(), out.span());
      },
      "per_sequence[1]", "no valid token");
  std::vector<float> logp{-1, std::numeric_limits<float>::quiet_NaN(), -1, -1, -2, std::numeric_limits<float>::infinity()};
  device_vector<float> student(logp), teacher(std::vector<float>(6, -1.0f));
  cr::testing::expect_error_naming(
      [&] {
        cr::distillation_advantages(
            cr::exec::cuda{}, layout,
            {.teacher_log_probs = teacher.cspan(), .student_log_probs = student.cspan()},
            out.span());
      },
      "student_log_probs[5]");
  cr::testing::expect_error_naming(
      [&] { cr::discounted_returns(cr::exec::cuda{}, layout, student.cspan(), out.span(), 1.0); },
      "token_rewards[5]");
  cr::testing::expect_error_naming(
      [&] { cr::discounted_returns(cr::exec::cuda{}, layout, teacher.cspan(), out.span(), 1.5); },
      "gamma");
  cr::testing::expect_error_naming(
      [&] {
        cr::masked_whiten(cr::exec::cuda{}, layout, teacher.cspan(), out.span(), {.epsilon = -1});
      },
      "whitening.epsilon");
  const std::vector<std::uint8_t> one{0, 0, 0, 0, 1, 0};
  device_layout_of single(token_offsets, one);
  cr::testing::expect_error_naming(
      [&] { cr::masked_whiten(cr::exec::cuda{}, single.layout(6), teacher.cspan(), out.span()); },
      "tokens", "has 1 valid token");
  device_vector<float> scores(std::vector<float>{1, 2, 3});
  std::vector<std::int64_t> group_offsets{0, 1, 3};
  device_vector<std::int64_t> d_group_offsets(group_offsets);
  cr::testing::expect_error_naming(
      [&] {
        cr::reinforce_plus_plus_baseline_advantages(
            cr::exec::cuda{}, device_group_layout::variable(d_group_offsets.data(), 2, 3), layout,
            scores.cspan(), out.span());
      },
      "groups[0]", "REINFORCE++-baseline");
  device_vector<std::int64_t> kept(std::vector<std::int64_t>{0, 2, 7});
  device_vector<float> gathered(3);
  cr::testing::expect_error_naming(
      [&] {
        cr::gather_sequences(cr::exec::cuda{}, kept.cspan(), scores.cspan(), gathered.span());
      },
      "in[7]", "past the end");
}

// The CUB-style layer itself: a size query with null storage, storage smaller than the
// query said refused, the report read back from the start of the storage.
TEST_F(Gpu, CubStyleCallsFollowTheTwoPhaseContract) {
  const std::vector<float> r{1, 0, 1, 1, std::numeric_limits<float>::infinity(), 0};
  device_vector<float> rewards(r), advantages(r.size());
  const auto groups = device_group_layout::uniform({.groups = 2, .size = 3});
  std::size_t bytes = 0;
  ASSERT_EQ(cudaSuccess, cr::cuda::grpo_advantages(nullptr, bytes, rewards.data(), groups, advantages.data(),
                                                          nullptr, cr::grpo_options{}));
  ASSERT_GE(bytes, sizeof(cr::cuda::device_report));
  device_vector<unsigned char> temp(bytes);
  std::size_t too_few = bytes - 1;
  EXPECT_EQ(cudaErrorInvalidValue, cr::cuda::grpo_advantages(temp.data(), too_few, rewards.data(), groups,
                                                                    advantages.data(), nullptr, cr::grpo_options{}));
  ASSERT_EQ(cudaSuccess, cr::cuda::grpo_advantages(temp.data(), bytes, rewards.data(), groups,
                                                          advantages.data(), nullptr, cr::grpo_options{}));
  ASSERT_EQ(cudaSuccess, cudaStreamSynchronize(nullptr));
  cr::cuda::device_report report{};
  ASSERT_EQ(cudaSuccess, cudaMemcpy(&report, cr::cuda::report_of(temp.data()), sizeof(report), cudaMemcpyDeviceToHost));
  using report_t = cr::cuda::device_report;
  EXPECT_EQ(report_t::nonfinite_index(report.first_nonfinite[0]), 4u);
  EXPECT_TRUE(report_t::nonfinite_is_infinite(report.first_nonfinite[0]));
  EXPECT_EQ(report.first_nonfinite[1], report_t::none);
  EXPECT_EQ(report.first_singleton, report_t::none);
  EXPECT_EQ(report.first_bad_offset, report_t::none);

  // The finite group {1, 0, 1} still has its advantages: mean 2/3, unbiased std
  // sqrt(1/3), so A = (1/3) / sqrt(1/3) and (-2/3) / sqrt(1/3) (epsilon 1e-6 aside).
  const auto got = advantages.host();
  EXPECT_NEAR(got[0], std::sqrt(1.0 / 3.0), 1e-5);
  EXPECT_NEAR(got[1], -2 * std::sqrt(1.0 / 3.0), 1e-5);
  EXPECT_NEAR(got[2], std::sqrt(1.0 / 3.0), 1e-5);

  // Arguments a kernel cannot use are refused before any work.
  std::vector<float> logits(8, 0.0f);
  device_vector<float> d_logits(logits), logp(2);
  device_vector<std::int64_t> labels(std::vector<std::int64_t>{0, 1});
  std::size_t lp_bytes = 0;
  ASSERT_EQ(cudaSuccess, cr::cuda::log_probs_from_logits(nullptr, lp_bytes, static_cast<const float*>(nullptr), 2,
                                                         4, 4, nullptr, nullptr, nullptr));
  device_vector<unsigned char> lp_temp(lp_bytes);
  EXPECT_EQ(cudaErrorInvalidValue,
            cr::cuda::log_probs_from_logits(lp_temp.data(), lp_bytes, d_logits.data(), 2, 4, 4,
                                                   labels.data(), logp.data(), nullptr, 0.0f));
  EXPECT_EQ(cudaErrorInvalidValue,
            cr::cuda::log_probs_from_logits(lp_temp.data(), lp_bytes, d_logits.data(), 2, 4, 3,
                                                   labels.data(), logp.data(), nullptr));
  EXPECT_EQ(cudaErrorInvalidValue,  // vocab 0: no softmax to take
            cr::cuda::log_probs_from_logits(lp_temp.data(), lp_bytes, d_logits.data(), 2, 0, 4,
                                                   labels.data(), logp.data(), nullptr));
  ASSERT_EQ(cudaSuccess, cr::cuda::log_probs_from_logits(lp_temp.data(), lp_bytes, d_logits.data(), 2, 4, 4,
                                                                labels.data(), logp.data(), nullptr));
  for (float v : logp.host()) EXPECT_NEAR(v, -std::log(4.0f), 1e-6);
}

// The device names a NaN or infinite input as the host does, word for word: the
// report keeps whether the first offending value was NaN or infinite.
template <class Device, class Host>
void expect_same_refusal(Device device, Host host, const char* what) {
  const std::string want = cr::testing::error_message(host);
  EXPECT_TRUE(want.find(" is NaN") != std::string::npos || want.find(" is infinite") != std::string::npos)
      << what << ": the host says '" << want << "'";
  EXPECT_EQ(cr::testing::error_message(device), want) << what;
}

TEST_F(Gpu, NonFiniteInputsAreNamedAsTheHostNamesThem) {
  constexpr float nan = std::numeric_limits<float>::quiet_NaN();
  constexpr float inf = std::numeric_limits<float>::infinity();
  for (const std::vector<float>& r : {std::vector<float>{1, 0, -inf, 1, nan, 0}, std::vector<float>{1, 0, 1, 1, nan, inf}}) {
    const std::span<const float> host_r(r);
    device_vector<float> rewards(r), out(r.size());
    std::vector<float> host_out(r.size());
    const auto host_groups = cr::group_layout::uniform({.groups = 2, .size = 3});
    const auto groups = device_group_layout::uniform({.groups = 2, .size = 3});
    expect_same_refusal(
        [&] { cr::grpo_advantages(cr::exec::cuda{}, groups, rewards.cspan(), out.span()); },
        [&] { cr::grpo_advantages(cr::exec::seq, host_groups, host_r, host_out); },
        "grpo_advantages");
    std::vector<std::uint8_t> host_flags(2);
    device_vector<std::uint8_t> flags(2);
    expect_same_refusal(
        [&] { cr::zero_variance_groups(cr::exec::cuda{}, groups, rewards.cspan(), flags.span()); },
        [&] {
          cr::zero_variance_groups(cr::exec::seq, host_groups, host_r,
                                   std::span<std::uint8_t>(host_flags));
        },
        "zero_variance_groups");
    const std::vector<std::int64_t> group_offsets{0, 3, 6};
    device_vector<std::int64_t> d_group_offsets(group_offsets);
    expect_same_refusal(
        [&] {
          cr::drop_zero_variance_groups(cr::exec::cuda{},
                                        device_group_layout::variable(d_group_offsets.data(), 2, 6),
                                        rewards.cspan());
        },
        [&] {
          cr::drop_zero_variance_groups(cr::exec::seq, cr::group_layout(group_offsets), host_r);
        },
        "drop_zero_variance_groups");

    // Tokens: two sequences of 3, every token valid.
    const std::vector<std::int64_t> offsets{0, 3, 6};
    const std::vector<std::uint8_t> mask(6, 1);
    const cr::token_layout host_layout(offsets, mask);
    device_layout_of d(offsets, mask);
    const device_token_layout layout = d.layout(6);
    const std::vector<float> finite(6, -1.0f);
    const std::span<const float> host_finite(finite);
    device_vector<float> d_finite(finite);
    expect_same_refusal(
        [&] { cr::discounted_returns(cr::exec::cuda{}, layout, rewards.cspan(), out.span(), 1.0); },
        [&] { cr::discounted_returns(cr::exec::seq, host_layout, host_r, host_out, 1.0); },
        "discounted_returns");
    expect_same_refusal(
        [&] { cr::masked_whiten(cr::exec::cuda{}, layout, rewards.cspan(), out.span()); },
        [&] { cr::masked_whiten(cr::exec::seq, host_layout, host_r, host_out); }, "masked_whiten");
    expect_same_refusal(
        [&] {
          cr::distillation_advantages(
              cr::exec::cuda{}, layout,
              {.teacher_log_probs = d_finite.cspan(), .student_log_probs = rewards.cspan()},
              out.span());
        },
        [&] {
          cr::distillation_advantages(
              cr::exec::seq, host_layout,
              {.teacher_log_probs = host_finite, .student_log_probs = host_r}, host_out);
        },
        "distillation_advantages");
    // As the advantages of a loss (its second argument).
    const auto normalizer_for = [counts = cr::local_loss_counts(cr::exec::seq, host_layout)](
                                    cascade_rl::loss_aggregation mode) {
      return counts.normalizer(mode, 1.0);
    };
    expect_same_refusal(
        [&] {
          cr::reinforce_loss(cr::exec::cuda{}, layout,
                             {.log_probs = d_finite.cspan(),
                              .advantages = rewards.cspan(),
                              .behaviour_log_probs = d_finite.cspan()},
                             out.span(), normalizer_for(cr::loss_aggregation::token_mean));
        },
        [&] {
          cr::reinforce_loss(
              cr::exec::seq, host_layout,
              {.log_probs = host_finite, .advantages = host_r, .behaviour_log_probs = host_finite},
              host_out, normalizer_for(cr::loss_aggregation::token_mean));
        },
        "reinforce_loss");
    // As REINFORCE's rollout_is_weights (validated before the behaviour log-probs).
    expect_same_refusal(
        [&] {
          cr::reinforce_loss(cr::exec::cuda{}, layout,
                             {.log_probs = d_finite.cspan(),
                              .advantages = d_finite.cspan(),
                              .behaviour_log_probs = rewards.cspan(),
                              .rollout_is_weights = rewards.cspan()},
                             out.span(), normalizer_for(cr::loss_aggregation::token_mean),
                             cr::mopd_options());
        },
        [&] {
          cr::reinforce_loss(cr::exec::seq, host_layout,
                             {.log_probs = host_finite,
                              .advantages = host_finite,
                              .behaviour_log_probs = host_r,
                              .rollout_is_weights = host_r},
                             host_out, normalizer_for(cr::loss_aggregation::token_mean),
                             cr::mopd_options());
        },
        "reinforce_loss weights");
    // As the PPO clip's rollout_is_weights (after advantages, before the behaviour
    // log-probs: the host core's order, the fifth report slot).
    expect_same_refusal(
        [&] {
          cr::ppo_clip_loss(
              cr::exec::cuda{}, layout,
              {.log_probs = d_finite.cspan(),
               .old_log_probs = d_finite.cspan(),
               .advantages = d_finite.cspan(),
               .behaviour_log_probs = rewards.cspan(),
               .rollout_is_weights = rewards.cspan()},
              out.span(), normalizer_for(cr::loss_aggregation::token_mean),
              cr::ppo_clip_options{.importance = {.mode = cr::importance_sampling::truncated}});
        },
        [&] {
          cr::ppo_clip_loss(
              cr::exec::seq, host_layout,
              {.log_probs = host_finite,
               .old_log_probs = host_finite,
               .advantages = host_finite,
               .behaviour_log_probs = host_r,
               .rollout_is_weights = host_r},
              host_out, normalizer_for(cr::loss_aggregation::token_mean),
              cr::ppo_clip_options{.importance = {.mode = cr::importance_sampling::truncated}});
        },
        "ppo_clip_loss weights");
    // The behaviour log-probs in the fifth slot when the weights are finite.
    expect_same_refusal(
        [&] {
          cr::ppo_clip_loss(
              cr::exec::cuda{}, layout,
              {.log_probs = d_finite.cspan(),
               .old_log_probs = d_finite.cspan(),
               .advantages = d_finite.cspan(),
               .behaviour_log_probs = rewards.cspan(),
               .rollout_is_weights = d_finite.cspan()},
              out.span(), normalizer_for(cr::loss_aggregation::token_mean),
              cr::ppo_clip_options{.importance = {.mode = cr::importance_sampling::truncated}});
        },
        [&] {
          cr::ppo_clip_loss(
              cr::exec::seq, host_layout,
              {.log_probs = host_finite,
               .old_log_probs = host_finite,
               .advantages = host_finite,
               .behaviour_log_probs = host_r,
               .rollout_is_weights = host_finite},
              host_out, normalizer_for(cr::loss_aggregation::token_mean),
              cr::ppo_clip_options{.importance = {.mode = cr::importance_sampling::truncated}});
        },
        "ppo_clip_loss behaviour");
  }
}

// The optimal token baseline: single- and multi-turn, with and without weights and the zero
// tail, variable groups with singletons; NaN on masked tokens is never read.
TEST_F(Gpu, OptimalTokenBaselineMatchesHost) {
  const auto b = cr::testing::make_random_batch<float>(43, {.sequences = 2000, .max_length = 300});
  const std::size_t sequences = b.offsets.size() - 1, n = b.tokens();
  device_layout_of d(b.offsets, b.mask);
  const device_token_layout d_layout = d.layout(n);
  std::vector<std::int64_t> group_offsets{0};
  while (static_cast<std::size_t>(group_offsets.back()) < sequences)
    group_offsets.push_back(
        std::min(static_cast<std::int64_t>(sequences),
                 group_offsets.back() + 1 + static_cast<std::int64_t>(group_offsets.size() % 6)));
  device_vector<std::int64_t> d_group_offsets(group_offsets);
  const auto groups =
      device_group_layout::variable(d_group_offsets.data(), group_offsets.size() - 1, sequences);
  std::mt19937_64 rng(44);
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
  device_vector<float> d_rewards(rewards), d_old(old), d_spi(spi), d_rho(rho), out(n), returns(n);
  for (const bool multi : {false, true})
    for (const bool tail : {false, true})
      for (const bool weighted : {false, true}) {
        const cr::optimal_token_baseline_options options{.handle_zero_tail = tail,
                                                         .multi_turn = multi};
        std::vector<float> want(n), want_returns(n);
        cr::optimal_token_baseline_advantages(
            cr::exec::seq, cr::group_layout(group_offsets), b.layout(),
            {.token_rewards = rewards,
             .old_log_probs = old,
             .sum_pi_squared = spi,
             .rollout_is_weights =
                 weighted ? std::span<const float>(rho) : std::span<const float>()},
            want, want_returns, options);
        cr::optimal_token_baseline_advantages(
            cr::exec::cuda{}, groups, d_layout,
            {.token_rewards = d_rewards.cspan(),
             .old_log_probs = d_old.cspan(),
             .sum_pi_squared = d_spi.cspan(),
             .rollout_is_weights = weighted ? d_rho.cspan() : std::span<const float>()},
            out.span(), returns.span(), options);
        const std::string what = std::string("optimal token baseline") +
                                 (multi ? ", multi-turn" : "") + (tail ? ", zero tail" : "") +
                                 (weighted ? ", weighted" : "");
        expect_same_bits(out.host(), want, what.c_str());
        expect_same_bits(returns.host(), want_returns, (what + " returns").c_str());
      }
  std::size_t bad = 0;
  while (b.mask[bad] == 0) ++bad;
  auto bad_spi = spi;
  bad_spi[bad] = std::numeric_limits<float>::infinity();
  device_vector<float> d_bad(bad_spi);
  cr::testing::expect_error_naming(
      [&] {
        cr::optimal_token_baseline_advantages(cr::exec::cuda{}, groups, d_layout,
                                              {.token_rewards = d_rewards.cspan(),
                                               .old_log_probs = d_old.cspan(),
                                               .sum_pi_squared = d_bad.cspan(),
                                               .rollout_is_weights = {}},
                                              out.span(), returns.span());
      },
      "sum_pi_squared", std::to_string(bad), "infinite");
}

}  // namespace

// ---- the ratio losses' refusals -------------------------------------------------------

namespace {

// Each of a ratio loss's four inputs in turn NaN or infinite: the device names it as the
// host does, the weights too (which GMPO reads only in its per-sequence pre-pass).
TEST_F(Gpu, RatioLossesNameEachNonFiniteInputAsTheHost) {
  constexpr float nan = std::numeric_limits<float>::quiet_NaN();
  constexpr float inf = std::numeric_limits<float>::infinity();
  const std::vector<std::int64_t> small_offsets{0, 3, 6};
  const std::vector<std::uint8_t> small_mask(6, 1);
  const cr::token_layout host_layout(small_offsets, small_mask);
  device_layout_of small(small_offsets, small_mask);
  const device_token_layout small_layout = small.layout(6);
  const std::vector<float> finite(6, -1.0f);
  std::vector<float> bad{-1, -1, -1, -1, nan, inf};
  device_vector<float> d_finite(finite), d_bad(bad), out(6);
  std::vector<float> host_out(6);
  const auto normalizer = cr::local_loss_counts(cr::exec::seq, host_layout)
                              .normalizer(cr::loss_aggregation::token_mean);
  const auto refuses_as_host = [&](const char* name, const auto& loss) {
    for (int k = 0; k < 4; ++k) {
      SCOPED_TRACE(std::string(name) + " input " + std::to_string(k));
      const auto pick = [k](int i, const auto& good, const auto& broken) {
        return i == k ? broken : good;
      };
      expect_same_refusal(
          [&] {
            loss(cr::exec::cuda{}, small_layout,
                 cr::policy_ratio_inputs<float>{
                     .log_probs = pick(0, d_finite.cspan(), d_bad.cspan()),
                     .old_log_probs = pick(1, d_finite.cspan(), d_bad.cspan()),
                     .advantages = pick(2, d_finite.cspan(), d_bad.cspan()),
                     .rollout_is_weights = pick(3, d_finite.cspan(), d_bad.cspan())},
                 out.span(), normalizer);
          },
          [&] {
            const std::span<const float> g(finite), x(bad);
            loss(cr::exec::seq, host_layout,
                 cr::policy_ratio_inputs<float>{.log_probs = pick(0, g, x),
                                                .old_log_probs = pick(1, g, x),
                                                .advantages = pick(2, g, x),
                                                .rollout_is_weights = pick(3, g, x)},
                 std::span<float>(host_out), normalizer);
          },
          name);
    }
  };
  refuses_as_host("cispo_loss",
                  [](auto&&... a) { return cr::cispo_loss(std::forward<decltype(a)>(a)...); });
  refuses_as_host("sapo_loss",
                  [](auto&&... a) { return cr::sapo_loss(std::forward<decltype(a)>(a)...); });
  refuses_as_host("gspo_loss",
                  [](auto&&... a) { return cr::gspo_loss(std::forward<decltype(a)>(a)...); });
  refuses_as_host("geo_mean_loss",
                  [](auto&&... a) { return cr::geo_mean_loss(std::forward<decltype(a)>(a)...); });
}

}  // namespace

// ---- Clip-Cov ---------------------------------------------------------------------------

namespace {

// A covariance loss over one selection in every mode, with and without weights: the
// device's loss, counts, approx_kl sum and gradient bits are the host's, and every selected
// token counts as clipped. host_loss / device_loss(mode, inputs, grad_out, normalizer).
template <class HostLoss, class DeviceLoss>
void expect_selection_loss_matches_host(const char* name, const cr::testing::random_batch<float>& b,
                                        std::span<const float> device_weights,
                                        const cr::policy_ratio_inputs<float>& host_inputs,
                                        const cr::policy_ratio_inputs<float>& device_inputs,
                                        device_vector<float>& grad, std::size_t selection_size,
                                        HostLoss host_loss, DeviceLoss device_loss) {
  const auto layout = b.layout();
  const auto weights = cr::testing::rollout_is_weights_of(b);
  const auto counts = cr::local_loss_counts(cr::exec::seq, layout);
  std::vector<float> want(b.tokens());
  for (auto mode : cr::testing::all_aggregation_modes)
    for (const bool weighted : {false, true}) {
      SCOPED_TRACE(std::string(name) + " " + std::string(cr::to_string(mode)) +
                   (weighted ? " weighted" : ""));
      const auto normalizer = counts.normalizer(mode, 128.0);
      auto hin = host_inputs;
      auto din = device_inputs;
      if (weighted) {
        hin.rollout_is_weights = weights;
        din.rollout_is_weights = device_weights;
      }
      const cr::policy_loss_result h = host_loss(mode, hin, std::span<float>(want), normalizer);
      const cr::policy_loss_result d = device_loss(mode, din, grad.span(), normalizer);
      expect_same_sum(d.loss, h.loss, "loss");
      EXPECT_EQ(d.metrics.valid_tokens, h.metrics.valid_tokens);
      EXPECT_EQ(d.metrics.clipped, h.metrics.clipped);
      EXPECT_EQ(h.metrics.clipped, selection_size);
      expect_same_sum(d.metrics.approx_kl_sum, h.metrics.approx_kl_sum, "approx_kl_sum");
      expect_same_bits(grad.host(), want, "grad");
    }
}

// Our seeded draw on the device selects the host's tokens (CUB's radix sort), and the loss
// over that selection gives the host's bits in every mode, with and without weights.
TEST_F(Gpu, ClipCovMatchesHost) {
  const auto b = cr::testing::make_random_batch<float>(23, {.sequences = 900, .max_length = 120});
  const auto layout = b.layout();
  const std::size_t n = b.tokens();
  device_vector<std::int64_t> offsets(b.offsets);
  device_vector<std::uint8_t> mask(b.mask);
  const device_token_layout d_layout{offsets.data(), mask.data(), b.offsets.size() - 1, n};
  const auto weights = cr::testing::rollout_is_weights_of(b);
  device_vector<float> logp(b.log_probs), old(b.old_log_probs), adv(b.advantages), w(weights),
      grad(n);
  device_vector<std::uint8_t> selected(n);
  const cr::policy_ratio_inputs<float> host_inputs{
      .log_probs = b.log_probs, .old_log_probs = b.old_log_probs, .advantages = b.advantages};
  const cr::policy_ratio_inputs<float> device_inputs{
      .log_probs = logp.cspan(), .old_log_probs = old.cspan(), .advantages = adv.cspan()};
  for (const double ratio : {0.0002, 0.01, 1.0})
    for (const std::uint64_t seed : {1ull, 99ull}) {
      const cr::clip_cov_options options{
          .clip_high = 0.28, .clip_cov_ratio = ratio, .clip_cov_lb = 0.05, .clip_cov_ub = 5.0};
      const auto host =
          cr::clip_cov_seeded_selection(cr::exec::seq, layout, host_inputs, seed, options);
      ASSERT_FALSE(host.empty());
      cr::clip_cov_seeded_selection(cr::exec::cuda{}, d_layout, device_inputs, seed,
                                    selected.span(), options);
      const std::vector<std::uint8_t> flags = selected.host();
      std::vector<std::size_t> device_tokens;
      for (std::size_t t = 0; t < n; ++t)
        if (flags[t] != 0) device_tokens.push_back(t);
      EXPECT_EQ(device_tokens, host) << "ratio " << ratio << " seed " << seed;
    }
  const cr::clip_cov_options drawn{
      .clip_high = 0.28, .clip_cov_ratio = 0.01, .clip_cov_lb = 0.05, .clip_cov_ub = 5.0};
  const auto host_selection =
      cr::clip_cov_seeded_selection(cr::exec::seq, layout, host_inputs, 5, drawn);
  cr::clip_cov_seeded_selection(cr::exec::cuda{}, d_layout, device_inputs, 5, selected.span(),
                                drawn);
  expect_selection_loss_matches_host(
      "clip_cov", b, w.cspan(), host_inputs, device_inputs, grad, host_selection.size(),
      [&](cr::loss_aggregation mode, const auto& in, std::span<float> want,
          const cr::loss_normalizer& normalizer) {
        auto options = drawn;
        options.aggregation = mode;
        return cr::clip_cov_loss(cr::exec::seq, layout, in,
                                 cr::token_selection::replay(host_selection), want, normalizer,
                                 options);
      },
      [&](cr::loss_aggregation mode, const auto& in, std::span<float> out,
          const cr::loss_normalizer& normalizer) {
        auto options = drawn;
        options.aggregation = mode;
        return cr::clip_cov_loss(cr::exec::cuda{}, d_layout, in, selected.cspan(), out, normalizer,
                                 options);
      });
}

// The rollout correction on the kernels: weights, keep bytes and every metric are the
// host's bits in every configuration (none / token / sequence, truncated / IcePop,
// normalised or not, every criterion kind).
TEST_F(Gpu, RolloutCorrectionMatchesHost) {
  const auto b = cr::testing::make_random_batch<float>(31, {.sequences = 700, .max_length = 120});
  const auto layout = b.layout();
  const std::size_t n = b.tokens();
  device_vector<std::int64_t> offsets(b.offsets);
  device_vector<std::uint8_t> mask(b.mask);
  const device_token_layout d_layout{offsets.data(), mask.data(), b.offsets.size() - 1, n};
  device_vector<float> logp(b.log_probs), rollout(b.behaviour_log_probs), weights(n);
  device_vector<std::uint8_t> keep(n);
  std::size_t rejected = 0;
  for (const auto& options : cr::testing::rollout_correction_variants()) {
    SCOPED_TRACE(std::to_string(static_cast<int>(options.is_level)) + " " +
                 std::to_string(options.rejection_count));
    std::vector<float> hw(n, -7.0f);
    std::vector<std::uint8_t> hk(n, 7);
    const auto h = cr::rollout_correction(
        cr::exec::seq, layout,
        cr::rollout_correction_inputs<float>{b.log_probs, b.behaviour_log_probs},
        std::span<float>(hw), std::span<std::uint8_t>(hk), options);
    const auto d =
        cr::rollout_correction(cr::exec::cuda{}, d_layout,
                               cr::rollout_correction_inputs<float>{logp.cspan(), rollout.cspan()},
                               weights.span(), keep.span(), options);
    const auto dv = cr::testing::rollout_correction_values(d);
    const auto hv = cr::testing::rollout_correction_values(h);
    ASSERT_EQ(dv.size(), hv.size());
    for (std::size_t i = 0; i < dv.size(); ++i)
      if (!(std::isnan(dv[i]) && std::isnan(hv[i])))
        expect_same_sum(dv[i], hv[i], "rollout_corr metric");
    EXPECT_EQ(keep.host(), hk);
    if (options.is_level != cr::rollout_is_level::none)
      expect_same_bits(weights.host(), hw, "rollout_is_weights");
    rejected += h.rs_masked_fraction > 0;
  }
  EXPECT_GT(rejected, 1u);
  // Refused by name before any launch, as on the host.
  cr::rollout_correction_options bad;
  bad.is_level = cr::rollout_is_level::token;
  bad.is_upper = -1;
  cr::testing::expect_error_naming(
      [&] {
        (void)cr::rollout_correction(
            cr::exec::cuda{}, d_layout,
            cr::rollout_correction_inputs<float>{logp.cspan(), rollout.cspan()}, weights.span(),
            keep.span(), bad);
      },
      "options.is_upper", "expected a finite value > 0");
  // Non-finite valid inputs by argument and first index, as the host names them; masked
  // ones are never read.
  std::size_t masked = 0, valid = 0;
  while (b.mask[masked] != 0) ++masked;
  while (b.mask[valid] == 0) ++valid;
  std::vector<float> bad_logp(b.log_probs), bad_rollout(b.behaviour_log_probs);
  bad_logp[masked] = NAN;
  bad_rollout[valid] = INFINITY;
  bad_logp[valid + 1 + (b.mask[valid + 1] == 0 ? 1 : 0)] = INFINITY;
  device_vector<float> d_bad_logp(bad_logp), d_bad_rollout(bad_rollout);
  cr::rollout_correction_options fine;
  for (const bool device : {false, true}) {
    const auto call = [&] {
      if (device)
        (void)cr::rollout_correction(
            cr::exec::cuda{}, d_layout,
            cr::rollout_correction_inputs<float>{d_bad_logp.cspan(), d_bad_rollout.cspan()},
            weights.span(), keep.span(), fine);
      else {
        std::vector<float> hw(n);
        std::vector<std::uint8_t> hk(n);
        (void)cr::rollout_correction(cr::exec::seq, layout,
                                     cr::rollout_correction_inputs<float>{bad_logp, bad_rollout},
                                     std::span<float>(hw), std::span<std::uint8_t>(hk), fine);
      }
    };
    const std::size_t bad = valid + 1 + (b.mask[valid + 1] == 0 ? 1 : 0);
    ASSERT_NE(b.mask[bad], 0);
    cr::testing::expect_error_naming(call, "log_probs[" + std::to_string(bad) + "]", "infinite");
  }
}

// The bypass mode on the device pieces: loss, gradient, weights, keep bytes, the loss's
// metrics (REINFORCE's plain approx_kl included) and every rollout_corr metric are the
// host's bits, for both losses, with IS weights and rejected tokens, the normaliser taken
// from the effective mask (veRL's agg_loss) or given; the refusals are the host's.
TEST_F(Gpu, BypassModeMatchesHost) {
  const auto b = cr::testing::make_random_batch<float>(33, {.sequences = 700, .max_length = 120});
  const auto layout = b.layout();
  const std::size_t n = b.tokens();
  device_vector<std::int64_t> offsets(b.offsets);
  device_vector<std::uint8_t> mask(b.mask);
  const device_token_layout d_layout{offsets.data(), mask.data(), b.offsets.size() - 1, n};
  device_vector<float> logp(b.log_probs), rollout(b.behaviour_log_probs), adv(b.advantages);
  device_vector<float> weights(n), grad(n);
  device_vector<std::uint8_t> keep(n);
  const cr::bypass_mode_inputs<float> h_in{.log_probs = b.log_probs,
                                           .rollout_log_probs = b.behaviour_log_probs,
                                           .advantages = b.advantages};
  const cr::bypass_mode_inputs<float> d_in{
      .log_probs = logp.cspan(), .rollout_log_probs = rollout.cspan(), .advantages = adv.cspan()};
  std::size_t cases = 0;
  for (const auto& correction : cr::testing::rollout_correction_variants()) {
    if (correction.is_level == cr::rollout_is_level::none || correction.rejection_count == 0)
      continue;
    for (const auto loss : {cr::bypass_loss::ppo_clip, cr::bypass_loss::reinforce})
      for (const auto mode :
           {cr::loss_aggregation::token_mean, cr::loss_aggregation::seq_mean_token_mean})
        for (const bool given : {false, true}) {
          SCOPED_TRACE(std::to_string(static_cast<int>(correction.is_level)) + " " +
                       (loss == cr::bypass_loss::ppo_clip ? "ppo_clip " : "reinforce ") +
                       std::string(cr::to_string(mode)) + (given ? " given" : " effective"));
          const cr::bypass_mode_options options = cr::presets::verl::bypass_mode(
              correction, loss == cr::bypass_loss::ppo_clip ? "ppo_clip" : "reinforce", mode);
          const cr::loss_normalizer fixed =
              cr::local_loss_counts(cr::exec::seq, layout).normalizer(mode, 120.0);
          std::vector<float> hg(n, -7.0f), hw(n, -7.0f);
          std::vector<std::uint8_t> hk(n, 7);
          const auto h =
              given ? cr::bypass_mode_loss(cr::exec::seq, layout, h_in, hg, fixed, options,
                                           std::span<float>(hw), std::span<std::uint8_t>(hk))
                    : cr::bypass_mode_loss(
                          cr::exec::seq, layout, h_in, hg,
                          [&](const cr::token_layout& effective) {
                            return cr::local_loss_counts(cr::exec::seq, effective)
                                .normalizer(mode, 120.0);
                          },
                          options, std::span<float>(hw), std::span<std::uint8_t>(hk));
          const auto d = given ? cr::bypass_mode_loss(cr::exec::cuda{}, d_layout, d_in, grad.span(),
                                                      fixed, options, weights.span(), keep.span())
                               : cr::bypass_mode_loss(
                                     cr::exec::cuda{}, d_layout, d_in, grad.span(),
                                     [&](const device_token_layout& effective) {
                                       return cr::local_loss_counts(cr::exec::cuda{}, effective)
                                           .normalizer(mode, 120.0);
                                     },
                                     options, weights.span(), keep.span());
          expect_same_sum(d.loss, h.loss, "bypass loss");
          expect_same_sum(d.metrics.approx_kl_sum, h.metrics.approx_kl_sum, "approx_kl_sum");
          EXPECT_EQ(d.metrics.valid_tokens, h.metrics.valid_tokens);
          EXPECT_EQ(d.metrics.clipped, h.metrics.clipped);
          EXPECT_EQ(d.metrics.dual_clipped, h.metrics.dual_clipped);
          expect_same_bits(grad.host(), hg, "bypass dL/dlogp");
          expect_same_bits(weights.host(), hw, "rollout_is_weights");
          EXPECT_EQ(keep.host(), hk);
          const auto dv = cr::testing::rollout_correction_values(d.correction);
          const auto hv = cr::testing::rollout_correction_values(h.correction);
          ASSERT_EQ(dv.size(), hv.size());
          for (std::size_t i = 0; i < dv.size(); ++i)
            if (!(std::isnan(dv[i]) && std::isnan(hv[i])))
              expect_same_sum(dv[i], hv[i], "rollout_corr metric");
          ASSERT_GT(h.correction.rs_masked_fraction, 0.0);
          EXPECT_LT(h.metrics.valid_tokens, cr::local_loss_counts(cr::exec::seq, layout).tokens);
          EXPECT_NE(h.metrics.approx_kl_sum, 0.0);
          ++cases;
        }
  }
  EXPECT_EQ(cases, 6u * 2 * 2 * 2);  // token and sequence level, three rejecting each
  // The host's refusals, by name, before any launch; non-finite inputs by name and index.
  const cr::loss_normalizer normalizer =
      cr::local_loss_counts(cr::exec::seq, layout).normalizer(cr::loss_aggregation::token_mean, 0);
  cr::bypass_mode_options bad;
  bad.correction.is_level = cr::rollout_is_level::token;
  const auto refused = [&](const cr::bypass_mode_inputs<float>& in, const std::string& argument,
                           const std::string& words) {
    cr::testing::expect_error_naming(
        [&] {
          (void)cr::bypass_mode_loss(cr::exec::cuda{}, d_layout, in, grad.span(), normalizer, bad,
                                     weights.span(), keep.span());
        },
        argument, words);
  };
  bad.ppo.importance.mode = cr::importance_sampling::truncated;
  refused(d_in, "options.ppo.importance", "must be none");
  bad.ppo.importance.mode = cr::importance_sampling::none;
  bad.reinforce.importance.mode = cr::importance_sampling::band_mask;
  refused(d_in, "options.reinforce.importance", "must be none");
  bad.reinforce.importance.mode = cr::importance_sampling::none;
  bad.correction.is_upper = 0;
  refused(d_in, "options.is_upper", "expected a finite value > 0");
  bad.correction.is_upper = 2;
  refused({.log_probs = logp.cspan(),
           .rollout_log_probs = rollout.cspan(),
           .advantages = adv.cspan().first(n - 1)},
          "advantages", std::to_string(n - 1) + " entries");
  std::size_t valid = 0;
  while (b.mask[valid] == 0) ++valid;
  std::vector<float> bad_adv(b.advantages);
  bad_adv[valid] = NAN;
  device_vector<float> d_bad_adv(bad_adv);
  refused({.log_probs = logp.cspan(),
           .rollout_log_probs = rollout.cspan(),
           .advantages = d_bad_adv.cspan()},
          "advantages[" + std::to_string(valid) + "]", "NaN");
  std::vector<float> hg(n), hw(n);
  std::vector<std::uint8_t> hk(n);
  cr::testing::expect_error_naming(
      [&] {
        (void)cr::bypass_mode_loss(
            cr::exec::seq, layout,
            cr::bypass_mode_inputs<float>{.log_probs = b.log_probs,
                                          .rollout_log_probs = b.behaviour_log_probs,
                                          .advantages = bad_adv},
            hg, normalizer, bad, std::span<float>(hw), std::span<std::uint8_t>(hk));
      },
      "advantages[" + std::to_string(valid) + "]", "NaN");
}

}  // namespace

// ---- KL-Cov -------------------------------------------------------------------------------

namespace {

// The top-covariance selection on the device is the host's (CUB's stable radix sort over
// covariance_key: three ratios, and one advantage for every token, where every cov is +-0
// and the tie rule alone decides), and the loss over it gives the host's bits in every
// mode, with and without weights; the option refusals are the host's.
TEST_F(Gpu, KlCovMatchesHost) {
  const auto b = cr::testing::make_random_batch<float>(33, {.sequences = 900, .max_length = 120});
  const auto layout = b.layout();
  const std::size_t n = b.tokens();
  device_vector<std::int64_t> offsets(b.offsets);
  device_vector<std::uint8_t> mask(b.mask);
  const device_token_layout d_layout{offsets.data(), mask.data(), b.offsets.size() - 1, n};
  const auto weights = cr::testing::rollout_is_weights_of(b);
  const std::vector<float> constant(n, 0.5f);
  device_vector<float> logp(b.log_probs), old(b.old_log_probs), adv(b.advantages), flat(constant),
      w(weights), grad(n);
  device_vector<std::uint8_t> selected(n);
  for (const bool tied : {false, true})
    for (const double ratio : {0.0002, 0.01, 1.0}) {
      const cr::kl_cov_options options{.kl_cov_ratio = ratio};
      const cr::policy_ratio_inputs<float> host_inputs{
          .log_probs = b.log_probs,
          .old_log_probs = b.old_log_probs,
          .advantages =
              tied ? std::span<const float>(constant) : std::span<const float>(b.advantages)};
      const cr::policy_ratio_inputs<float> device_inputs{
          .log_probs = logp.cspan(),
          .old_log_probs = old.cspan(),
          .advantages = tied ? flat.cspan() : adv.cspan()};
      const auto host = cr::kl_cov_selection(cr::exec::seq, layout, host_inputs, options);
      ASSERT_FALSE(host.empty());
      cr::kl_cov_selection(cr::exec::cuda{}, d_layout, device_inputs, selected.span(), options);
      const std::vector<std::uint8_t> flags = selected.host();
      std::vector<std::size_t> device_tokens;
      for (std::size_t t = 0; t < n; ++t)
        if (flags[t] != 0) device_tokens.push_back(t);
      EXPECT_EQ(device_tokens, host) << "ratio " << ratio << (tied ? " tied" : "");
    }
  const cr::policy_ratio_inputs<float> host_inputs{
      .log_probs = b.log_probs, .old_log_probs = b.old_log_probs, .advantages = b.advantages};
  const cr::policy_ratio_inputs<float> device_inputs{
      .log_probs = logp.cspan(), .old_log_probs = old.cspan(), .advantages = adv.cspan()};
  const cr::kl_cov_options drawn{.kl_cov_ratio = 0.01, .ppo_kl_coef = 0.4};
  const auto host_selection = cr::kl_cov_selection(cr::exec::seq, layout, host_inputs, drawn);
  cr::kl_cov_selection(cr::exec::cuda{}, d_layout, device_inputs, selected.span(), drawn);
  expect_selection_loss_matches_host(
      "kl_cov", b, w.cspan(), host_inputs, device_inputs, grad, host_selection.size(),
      [&](cr::loss_aggregation mode, const auto& in, std::span<float> want,
          const cr::loss_normalizer& normalizer) {
        auto options = drawn;
        options.aggregation = mode;
        return cr::kl_cov_loss(cr::exec::seq, layout, in, want, normalizer, options);
      },
      [&](cr::loss_aggregation mode, const auto& in, std::span<float> out,
          const cr::loss_normalizer& normalizer) {
        auto options = drawn;
        options.aggregation = mode;
        return cr::kl_cov_loss(cr::exec::cuda{}, d_layout, in, selected.cspan(), out, normalizer,
                               options);
      });
  const auto counts = cr::local_loss_counts(cr::exec::seq, layout);
  for (const cr::kl_cov_options bad :
       {cr::kl_cov_options{.kl_cov_ratio = 0.0}, cr::kl_cov_options{.ppo_kl_coef = -1.0}}) {
    const char* name = bad.kl_cov_ratio == 0.0 ? "options.kl_cov_ratio" : "options.ppo_kl_coef";
    cr::testing::expect_error_naming(
        [&] {
          cr::kl_cov_selection(cr::exec::cuda{}, d_layout, device_inputs, selected.span(), bad);
        },
        name);
    cr::testing::expect_error_naming(
        [&] {
          (void)cr::kl_cov_loss(cr::exec::cuda{}, d_layout, device_inputs, selected.cspan(),
                                grad.span(), counts.normalizer(bad.aggregation, 128.0), bad);
        },
        name);
  }
}

// The selections' block sums (a warp per canonical block) are the host's canonical block
// sums bit for bit: three full blocks and a partial one, a mask, values of mixed sign and
// magnitude.
TEST_F(Gpu, CovarianceBlockSumsMatchTheCanonicalSums) {
  const auto b = cr::testing::make_random_batch<double>(37, {.sequences = 110, .max_length = 240});
  const std::size_t n = b.tokens();
  const std::size_t block = cr::detail::reduce_block_size;
  ASSERT_GT(n, 3 * block);
  // Doubles with full significands at mixed scales: their sums round, and another order
  // of addition rounds differently (sums of floats in double are often exact).
  std::vector<double> wide(b.advantages);
  for (std::size_t t = 0; t < n; t += 3) wide[t] *= 1e7;
  device_vector<std::int64_t> offsets(b.offsets);
  device_vector<std::uint8_t> mask(b.mask);
  const device_token_layout d_layout{offsets.data(), mask.data(), b.offsets.size() - 1, n};
  const std::size_t blocks = (n + block - 1) / block;
  device_vector<double> adv(wide), logp(b.log_probs);
  device_vector<double> sums(3 * blocks);
  ASSERT_EQ(cr::cuda::detail::launch(cr::cuda::detail::covariance_block_sums_kernel<double>,
                                     cr::cuda::detail::blocks_for(blocks * 32, 256), 256, nullptr,
                                     d_layout, adv.data(), logp.data(), sums.data(), blocks),
            cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
  const std::vector<double> got = sums.host();
  const auto layout = b.layout();
  for (std::size_t k = 0; k < blocks; ++k) {
    const std::size_t first = k * block, last = std::min(first + block, n);
    // core/canonical_sum.hpp's steps 2 and 3, written out (under nvcc a host lambda cannot
    // be the term of the host-device canonical_block_sum).
    const auto sum_of = [&](const std::vector<double>& v) {
      double lanes[cr::detail::reduce_lanes] = {};
      for (std::size_t t = first; t < last; ++t)
        lanes[(t - first) % cr::detail::reduce_lanes] += layout.valid(t) ? v[t] : 0.0;
      return cr::detail::fold_lanes(lanes, cr::detail::plus{});
    };
    double count = 0;
    for (std::size_t t = first; t < last; ++t) count += layout.valid(t) ? 1.0 : 0.0;
    expect_same_sum(got[3 * k], sum_of(wide), "advantage block sum");
    expect_same_sum(got[3 * k + 1], sum_of(b.log_probs), "log-prob block sum");
    EXPECT_EQ(got[3 * k + 2], count) << "block " << k;
  }
}

// A selection mask that selects a token the layout leaves out is refused, naming the
// token, by both covariance losses (the host core refuses such a replayed token), before
// any loss is computed.
TEST_F(Gpu, CovarianceLossesRefuseAMaskedSelectedToken) {
  const auto b = cr::testing::make_random_batch<float>(35, {.sequences = 40, .max_length = 30});
  const std::size_t n = b.tokens();
  device_vector<std::int64_t> offsets(b.offsets);
  device_vector<std::uint8_t> mask(b.mask);
  const device_token_layout d_layout{offsets.data(), mask.data(), b.offsets.size() - 1, n};
  device_vector<float> logp(b.log_probs), old(b.old_log_probs), adv(b.advantages), grad(n);
  const cr::policy_ratio_inputs<float> inputs{
      .log_probs = logp.cspan(), .old_log_probs = old.cspan(), .advantages = adv.cspan()};
  std::size_t first_masked = 0;
  while (b.mask[first_masked] != 0) ++first_masked;
  std::vector<std::uint8_t> flags(n, 0);
  for (std::size_t t = 0; t < n; t += 7) flags[t] = b.mask[t];  // valid selections are fine
  flags[first_masked] = 1;
  flags[n - 1] = 1;  // a later masked or valid token: the first bad one is named
  device_vector<std::uint8_t> selected(flags);
  const auto normalizer =
      cr::local_loss_counts(cr::exec::seq, b.layout()).normalizer(cr::loss_aggregation::token_mean);
  const std::string needle = "selected[" + std::to_string(first_masked) + "]: selects token " +
                             std::to_string(first_masked);
  cr::testing::expect_error_naming(
      [&] {
        (void)cr::clip_cov_loss(cr::exec::cuda{}, d_layout, inputs, selected.cspan(), grad.span(),
                                normalizer);
      },
      needle, "which the mask leaves out");
  cr::testing::expect_error_naming(
      [&] {
        (void)cr::kl_cov_loss(cr::exec::cuda{}, d_layout, inputs, selected.cspan(), grad.span(),
                              normalizer);
      },
      needle, "which the mask leaves out");
  // Without the masked token the same mask runs.
  flags[first_masked] = 0;
  flags[n - 1] = b.mask[n - 1];
  device_vector<std::uint8_t> fine(flags);
  const auto r =
      cr::kl_cov_loss(cr::exec::cuda{}, d_layout, inputs, fine.cspan(), grad.span(), normalizer);
  EXPECT_TRUE(std::isfinite(r.loss));
  EXPECT_GT(r.metrics.clipped, 0u);
}

// The device's entry point (cuda/policy_loss.cuh) runs every loss's spec on the device
// layer: the host entry's bits for each loss's options (CUDA and host alike take every
// input; each loss reads its own), for Clip-Cov's seeded draw and a replay, KL-Cov's own
// selection and a replay, and a preset-style variant; it refuses what the host entry refuses.
TEST_F(Gpu, PolicyLossEntryMatchesHostEntry) {
  const auto b = cr::testing::make_random_batch<float>(53, {.sequences = 300, .max_length = 90});
  const auto layout = b.layout();
  const std::size_t n = b.tokens();
  device_vector<std::int64_t> offsets(b.offsets);
  device_vector<std::uint8_t> mask(b.mask);
  const device_token_layout d_layout{offsets.data(), mask.data(), b.offsets.size() - 1, n};
  const auto weights = cr::testing::rollout_is_weights_of(b);
  device_vector<float> logp(b.log_probs), old(b.old_log_probs), adv(b.advantages),
      behaviour(b.behaviour_log_probs), w(weights), grad(n);
  const cr::policy_loss_inputs<float> host_inputs{.log_probs = b.log_probs,
                                                  .old_log_probs = b.old_log_probs,
                                                  .advantages = b.advantages,
                                                  .behaviour_log_probs = b.behaviour_log_probs,
                                                  .rollout_is_weights = weights};
  const cr::policy_loss_inputs<float> device_inputs{.log_probs = logp.cspan(),
                                                    .old_log_probs = old.cspan(),
                                                    .advantages = adv.cspan(),
                                                    .behaviour_log_probs = behaviour.cspan(),
                                                    .rollout_is_weights = w.cspan()};
  const auto normalizer = cr::local_loss_counts(cr::exec::seq, layout)
                              .normalizer(cr::loss_aggregation::seq_mean_token_mean);
  std::vector<float> want(n);
  const auto expect_entries_agree = [&](const auto& options, cr::token_selection selection,
                                        const std::string& what) {
    SCOPED_TRACE(what);
    auto hin = host_inputs;
    auto din = device_inputs;
    hin.selection = din.selection = selection;
    const cr::policy_loss_result h =
        cr::policy_loss(cr::exec::seq, layout, hin, std::span<float>(want), normalizer, options);
    const cr::policy_loss_result d =
        cr::policy_loss(cr::exec::cuda{}, d_layout, din, grad.span(), normalizer, options);
    expect_same_sum(d.loss, h.loss, "loss");
    EXPECT_EQ(d.metrics.valid_tokens, h.metrics.valid_tokens);
    EXPECT_EQ(d.metrics.clipped, h.metrics.clipped);
    EXPECT_EQ(d.metrics.dual_clipped, h.metrics.dual_clipped);
    EXPECT_EQ(d.metrics.importance_masked, h.metrics.importance_masked);
    EXPECT_EQ(d.metrics.importance_truncated, h.metrics.importance_truncated);
    expect_same_sum(d.metrics.approx_kl_sum, h.metrics.approx_kl_sum, "approx_kl_sum");
    expect_same_bits(grad.host(), want, "grad");
    return h;
  };
  const auto seeded = cr::token_selection::seeded(17);
  const auto mean = cr::loss_aggregation::seq_mean_token_mean;
  cr::reinforce_options reinforce{.aggregation = mean};
  reinforce.importance.mode = cr::importance_sampling::truncated;
  expect_entries_agree(reinforce, seeded, "reinforce, truncated importance");
  cr::ppo_clip_options ppo{.clip_high = 0.28, .dual_clip = 3.0, .aggregation = mean};
  expect_entries_agree(ppo, seeded, "ppo_clip, dual clip");
  expect_entries_agree(cr::cispo_options{.aggregation = mean}, seeded, "cispo");
  expect_entries_agree(cr::dppo_options{.aggregation = mean}, seeded, "dppo tv");
  expect_entries_agree(
      cr::dppo_options{.divergence = cr::dppo_divergence::binary_kl, .aggregation = mean}, seeded,
      "dppo kl");
  expect_entries_agree(cr::dro_options{.beta = 0.1, .aggregation = mean}, seeded, "dro");
  expect_entries_agree(cr::sapo_options{.aggregation = mean}, seeded, "sapo");
  expect_entries_agree(cr::gspo_options{.aggregation = mean}, seeded, "gspo");
  expect_entries_agree(cr::geo_mean_options{.aggregation = mean}, seeded, "geo_mean");
  // Sequence SAPO takes no weights; every mode, as its row gradient meets each weight.
  for (const auto mode : cr::testing::all_aggregation_modes) {
    const auto counts = cr::local_loss_counts(cr::exec::seq, layout);
    const auto mode_normalizer = counts.normalizer(mode, 128.0);
    auto hin = host_inputs;
    auto din = device_inputs;
    hin.rollout_is_weights = din.rollout_is_weights = {};
    const cr::sequence_sapo_options options{.tau_pos = 0.8, .tau_neg = 1.3, .aggregation = mode};
    const auto h = cr::policy_loss(cr::exec::seq, layout, hin, std::span<float>(want),
                                   mode_normalizer, options);
    const auto d =
        cr::policy_loss(cr::exec::cuda{}, d_layout, din, grad.span(), mode_normalizer, options);
    SCOPED_TRACE(std::string("sequence_sapo ") + std::string(cr::to_string(mode)));
    expect_same_sum(d.loss, h.loss, "loss");
    expect_same_sum(d.metrics.approx_kl_sum, h.metrics.approx_kl_sum, "approx_kl_sum");
    EXPECT_EQ(d.metrics.valid_tokens, h.metrics.valid_tokens);
    expect_same_bits(grad.host(), want, "grad");
  }
  const cr::clip_cov_options clip_cov{.clip_high = 0.28,
                                      .clip_cov_ratio = 0.01,
                                      .clip_cov_lb = 0.05,
                                      .clip_cov_ub = 5.0,
                                      .aggregation = mean};
  const auto drawn = expect_entries_agree(clip_cov, seeded, "clip_cov seeded");
  EXPECT_GT(drawn.metrics.clipped, 0u);
  std::vector<std::size_t> replayed;  // every fifth valid token
  for (std::size_t t = 0; t < n; ++t)
    if (b.mask[t] != 0 && t % 5 == 0) replayed.push_back(t);
  const auto replay = cr::token_selection::replay(replayed);
  EXPECT_EQ(expect_entries_agree(clip_cov, replay, "clip_cov replayed").metrics.clipped,
            replayed.size());
  const cr::kl_cov_options kl_cov{.kl_cov_ratio = 0.02, .ppo_kl_coef = 0.4, .aggregation = mean};
  EXPECT_GT(expect_entries_agree(kl_cov, seeded, "kl_cov own selection").metrics.clipped, 0u);
  EXPECT_EQ(expect_entries_agree(kl_cov, replay, "kl_cov replayed").metrics.clipped,
            replayed.size());
  // A preset's variant runs the loss it holds, through the host header's variant overload.
  const std::variant<cr::cispo_options, cr::kl_cov_options> held = kl_cov;
  {
    auto din = device_inputs;
    din.selection = replay;
    const auto d = cr::policy_loss(cr::exec::cuda{}, d_layout, din, grad.span(), normalizer, held);
    EXPECT_EQ(d.metrics.clipped, replayed.size());
  }
  // Refusals, named as the host names them.
  auto din = device_inputs;
  din.selection = replay;
  cr::testing::expect_error_naming(
      [&] {
        (void)cr::policy_loss(cr::exec::cuda{}, d_layout, din, grad.span(), normalizer,
                              cr::cispo_options{.aggregation = mean});
      },
      "inputs.selection", "cispo selects none");
  const std::vector<std::size_t> beyond{replayed[0], n};
  din.selection = cr::token_selection::replay(beyond);
  cr::testing::expect_error_naming(
      [&] { (void)cr::policy_loss(cr::exec::cuda{}, d_layout, din, grad.span(), normalizer, kl_cov); },
      "selection.tokens[1]", "beyond the");
  const std::vector<std::size_t> repeated{replayed[1], replayed[0], replayed[1]};
  din.selection = cr::token_selection::replay(repeated);
  cr::testing::expect_error_naming(
      [&] {
        (void)cr::policy_loss(cr::exec::cuda{}, d_layout, din, grad.span(), normalizer, clip_cov);
      },
      "selection.tokens[2]", "repeats token");
  // Masked tokens are named as the host names them: the first entry in replay order that
  // holds one (here a later token before the lowest masked one), by both losses.
  std::size_t first_masked = 0;
  while (b.mask[first_masked] != 0) ++first_masked;
  std::size_t last_masked = n - 1;
  while (b.mask[last_masked] != 0) --last_masked;
  ASSERT_LT(first_masked, last_masked);
  const std::vector<std::size_t> masked{replayed[0], last_masked, first_masked};
  din.selection = cr::token_selection::replay(masked);
  const std::string needle =
      "selection.tokens[1]: is token " + std::to_string(last_masked) + ", which the mask leaves out";
  auto hin = host_inputs;
  hin.selection = din.selection;
  const auto expect_named_on_both = [&](const auto& loss) {
    cr::testing::expect_error_naming(
        [&] { (void)cr::policy_loss(cr::exec::cuda{}, d_layout, din, grad.span(), normalizer, loss); },
        needle);
    cr::testing::expect_error_naming(
        [&] {
          (void)cr::policy_loss(cr::exec::seq, layout, hin, std::span<float>(want), normalizer,
                                loss);
        },
        needle);
  };
  expect_named_on_both(kl_cov);
  expect_named_on_both(clip_cov);
}


// ---- tuning policies ----------------------------------------------------------------------

// A non-default policy: 2-warp blocks for the warp-per-item, group and logits kernels (so
// 4 log-prob rows per block, the group kernel's teams and whole-block groups in 64 threads),
// 3-warp blocks for the per-thread kernels, other sizes for the rollout correction's passes.
struct small_tuning {
  static constexpr unsigned warp_item_block_threads = 64;
  static constexpr unsigned thread_item_block_threads = 96;
  static constexpr unsigned group_block_threads = 64;
  static constexpr unsigned logits_block_threads = 64;
  static constexpr unsigned rollout_row_block_threads = 32;
  static constexpr unsigned rollout_sum_block_threads = 128;
};
struct partial_warp_tuning : small_tuning {
  static constexpr unsigned warp_item_block_threads = 48;
};
struct oversized_tuning : small_tuning {
  static constexpr unsigned thread_item_block_threads = 2048;
};

// A CUB-shaped call run(d_temp_storage, temp_storage_bytes): the size query, then the run in
// the storage it asked for, waited for; the storage's bytes afterwards (the report first).
template <class Run>
std::vector<unsigned char> run_two_phases(Run run) {
  std::size_t bytes = 0;
  EXPECT_EQ(cudaSuccess, run(nullptr, bytes));
  device_vector<unsigned char> temp(bytes);
  EXPECT_EQ(cudaSuccess, run(temp.data(), bytes));
  EXPECT_EQ(cudaSuccess, cudaStreamSynchronize(nullptr));
  return temp.host();
}

template <class V>
void expect_same_bytes(const std::vector<V>& a, const std::vector<V>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(V))) << what;
}

// The outputs of a representative set of CUB-shaped calls under one tuning policy.
struct tuned_outputs {
  std::vector<float> loss_grad;
  std::vector<cr::cuda::loss_tally> tally;
  std::vector<cr::loss_counts> counts;
  std::vector<float> grpo_team, grpo_block, rpp_baseline, log_probs, entropy, remax, remax_returns;
  std::vector<float> rollout_weights;
  std::vector<std::uint8_t> rollout_keep;
  std::vector<unsigned char> rollout_scratch;
  std::size_t counts_bytes = 0;
};

template <class Tuning>
tuned_outputs run_tuned(const cr::testing::random_batch<float>& b) {
  namespace cu = cr::cuda;
  tuned_outputs out;
  const std::size_t n = b.tokens(), sequences = b.offsets.size() - 1;
  device_layout_of d(b.offsets, b.mask);
  const device_token_layout layout = d.layout(n);
  device_vector<float> logp(b.log_probs), old(b.old_log_probs), adv(b.advantages),
      rollout(b.behaviour_log_probs), grad(n), weights(n), tokens_a(n), tokens_b(n);
  device_vector<cu::loss_tally> tally(1);
  device_vector<cr::loss_counts> counts(1);

  // A token loss (seq-mean-token-mean: the per-sequence valid counts too) and the counts.
  const auto mode = cr::loss_aggregation::seq_mean_token_mean;
  const float* no_weights = nullptr;
  const cr::loss_normalizer normalizer =
      cr::local_loss_counts(cr::exec::seq, b.layout()).normalizer(mode, 128.0);
  run_two_phases([&](void* temp, std::size_t& bytes) {
    return cu::cispo_loss<Tuning>(temp, bytes, layout, logp.data(), old.data(), adv.data(), no_weights,
                                  grad.data(), normalizer, cr::cispo_options{.aggregation = mode},
                                  tally.data());
  });
  out.loss_grad = grad.host();
  out.tally = tally.host();
  out.counts_bytes = run_two_phases([&](void* temp, std::size_t& bytes) {
                       return cu::local_loss_counts<Tuning>(temp, bytes, layout, counts.data());
                     }).size();
  out.counts = counts.host();

  // GRPO: teams of 8 lanes (groups of 7), and a whole block per group (groups past 1024).
  device_vector<float> rewards(b.advantages), group_out(n);
  const auto teams = device_group_layout::uniform({.groups = n / 7, .size = 7});
  run_two_phases([&](void* temp, std::size_t& bytes) {
    return cu::grpo_advantages<Tuning>(temp, bytes, rewards.data(), teams, group_out.data(), nullptr,
                                       cr::grpo_options{});
  });
  out.grpo_team = group_out.host();
  const std::vector<std::int64_t> big_offsets{0, 1500, 1501, 4000, static_cast<std::int64_t>(n)};
  device_vector<std::int64_t> d_big(big_offsets);
  const auto blocks = device_group_layout::variable(d_big.data(), 4, n, n);
  run_two_phases([&](void* temp, std::size_t& bytes) {
    return cu::grpo_advantages<Tuning>(temp, bytes, rewards.data(), blocks, group_out.data(), nullptr,
                                       cr::grpo_options{.singleton = cr::singleton_rule::zero_advantage});
  });
  out.grpo_block = group_out.host();

  // REINFORCE++-baseline: the group kernel, the broadcast (a warp per sequence) and the
  // whitening (a warp per canonical block, then one thread).
  std::vector<float> scores(sequences);
  for (std::size_t s = 0; s < sequences; ++s) scores[s] = static_cast<float>((s * 7919) % 13) * 0.25f;
  device_vector<float> d_scores(scores);
  const auto sequence_groups = device_group_layout::uniform({.groups = sequences / 4, .size = 4});
  const device_token_layout grouped{layout.offsets, layout.mask, sequences / 4 * 4,
                                    static_cast<std::size_t>(b.offsets[sequences / 4 * 4])};
  run_two_phases([&](void* temp, std::size_t& bytes) {
    return cu::reinforce_plus_plus_baseline_advantages<Tuning>(temp, bytes, d_scores.data(), sequence_groups,
                                                               grouped, tokens_a.data());
  });
  out.rpp_baseline = tokens_a.host();

  // Log-probs from logits: 37 rows (not a whole number of blocks) of 1500 logits (two chunks).
  const std::size_t rows = 37, vocab = 1500;
  std::vector<float> logits(rows * vocab);
  std::vector<std::int64_t> labels(rows);
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (float& x : logits) x = normal(rng);
  for (std::size_t r = 0; r < rows; ++r) labels[r] = static_cast<std::int64_t>((r * 131) % vocab);
  device_vector<float> d_logits(logits), d_logp(rows), d_entropy(rows);
  device_vector<std::int64_t> d_labels(labels);
  run_two_phases([&](void* temp, std::size_t& bytes) {
    return cu::log_probs_from_logits<Tuning>(temp, bytes, static_cast<const float*>(d_logits.data()), rows,
                                             vocab, vocab, d_labels.data(), d_logp.data(), d_entropy.data(),
                                             0.7f);
  });
  out.log_probs = d_logp.host();
  out.entropy = d_entropy.host();

  // ReMax: a thread per sequence.
  std::vector<float> baselines(sequences);
  for (std::size_t s = 0; s < sequences; ++s) baselines[s] = 0.125f * static_cast<float>(s % 11) - 0.5f;
  device_vector<float> d_baselines(baselines);
  run_two_phases([&](void* temp, std::size_t& bytes) {
    return cu::remax_advantages<Tuning>(temp, bytes, adv.data(), d_baselines.data(), layout, tokens_a.data(),
                                        tokens_b.data());
  });
  out.remax = tokens_a.host();
  out.remax_returns = tokens_b.host();

  // The rollout correction's passes, every variant: weights, keep bytes and the whole
  // temporary storage (report, row scratch, each token's row, block sums and extremes).
  device_vector<std::uint8_t> keep(n);
  for (const auto& options : cr::testing::rollout_correction_variants()) {
    const auto scratch = run_two_phases([&](void* temp, std::size_t& bytes) {
      return cu::rollout_correction_passes<Tuning>(temp, bytes, layout, logp.data(), rollout.data(), options,
                                                   weights.data(), keep.data());
    });
    const auto w = weights.host();
    const auto k = keep.host();
    out.rollout_scratch.insert(out.rollout_scratch.end(), scratch.begin(), scratch.end());
    out.rollout_weights.insert(out.rollout_weights.end(), w.begin(), w.end());
    out.rollout_keep.insert(out.rollout_keep.end(), k.begin(), k.end());
  }
  return out;
}

// A tuning policy changes the launches (block sizes, grids, the blocks a temporary storage
// keeps partials for), never the bits: the floating-point sums are per warp in the
// canonical order or on one thread, and only integer counts are reduced across a block.
TEST_F(Gpu, TuningPolicyChangesLaunchesNotBits) {
  static_assert(cr::cuda::tuning_policy<cr::cuda::default_tuning>);
  static_assert(cr::cuda::tuning_policy<small_tuning>);
  static_assert(partial_warp_tuning::warp_item_block_threads == 48 &&
                    !cr::cuda::tuning_policy<partial_warp_tuning>,
                "48 threads: not whole warps");
  static_assert(oversized_tuning::thread_item_block_threads == 2048 &&
                    !cr::cuda::tuning_policy<oversized_tuning>,
                "2048 threads: past CUDA's 1024 (and block_reduce's 32 warps)");
  static_assert(!cr::cuda::tuning_policy<float>);

  const auto b = cr::testing::make_random_batch<float>(41, {.sequences = 300, .max_length = 90});
  ASSERT_GT(b.tokens(), 4000u);
  const tuned_outputs want = run_tuned<cr::cuda::default_tuning>(b);
  const tuned_outputs got = run_tuned<small_tuning>(b);
  expect_same_bytes(got.loss_grad, want.loss_grad, "cispo grad");
  expect_same_bytes(got.tally, want.tally, "cispo loss and metrics");
  expect_same_bytes(got.counts, want.counts, "local_loss_counts");
  EXPECT_GT(got.counts_bytes, want.counts_bytes) << "a partial per block: 4x the blocks";
  expect_same_bytes(got.grpo_team, want.grpo_team, "grpo, teams of 8");
  expect_same_bytes(got.grpo_block, want.grpo_block, "grpo, a block per group");
  expect_same_bytes(got.rpp_baseline, want.rpp_baseline, "reinforce++ baseline");
  expect_same_bytes(got.log_probs, want.log_probs, "log_probs");
  expect_same_bytes(got.entropy, want.entropy, "entropy");
  expect_same_bytes(got.remax, want.remax, "remax advantages");
  expect_same_bytes(got.remax_returns, want.remax_returns, "remax returns");
  expect_same_bytes(got.rollout_weights, want.rollout_weights, "rollout weights");
  expect_same_bytes(got.rollout_keep, want.rollout_keep, "rollout keep");
  expect_same_bytes(got.rollout_scratch, want.rollout_scratch, "rollout scratch");

  // The default policy is what a call without one gets.
  const auto b2 = cr::testing::make_random_batch<float>(42, {.sequences = 50, .max_length = 40});
  device_layout_of d(b2.offsets, b2.mask);
  device_vector<cr::loss_counts> counts(1);
  std::size_t plain = 0, tuned = 0;
  ASSERT_EQ(cudaSuccess, cr::cuda::local_loss_counts(nullptr, plain, d.layout(b2.tokens()), counts.data()));
  ASSERT_EQ(cudaSuccess, cr::cuda::local_loss_counts<cr::cuda::default_tuning>(nullptr, tuned, d.layout(b2.tokens()),
                                                                               counts.data()));
  EXPECT_EQ(plain, tuned);
}

}  // namespace
