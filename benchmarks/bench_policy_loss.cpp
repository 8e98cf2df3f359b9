// Token losses with dL/dlogp over sequences of 512 tokens: REINFORCE reads the log-probs
// and advantages and writes the gradient (12 bytes per token); PPO clip and the ratio
// losses (CISPO, SAPO, DPPO, DRO, GSPO, GMPO) also read the old log-probs (16 bytes per
// token, each array counted once as STREAM counts it: the per-sequence pre-pass of GSPO
// and GMPO reads the log-probs twice, which their fraction shows). The rollout correction
// reads the two log-probs and writes the weights and a keep byte (13 bytes per token).
// The covariance losses (Clip-Cov, KL-Cov) read the three arrays and write the gradient
// (16 bytes per token, each array once: their means and their selection read the inputs
// again, which their fraction shows). The bypass mode reads the two log-probs and the
// advantages and writes the weights, the keep byte and the gradient (21 bytes per token).
// The KL losses (k1, abs, k2, k3) read the two log-probs and write the gradient.
// The limit is the triad bandwidth fraction_of_triad reports against.

#include <benchmark/benchmark.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "bandwidth.hpp"
#include "cascade_rl/algorithms/covariance_losses.hpp"
#include "cascade_rl/algorithms/entropy_loss.hpp"
#include "cascade_rl/algorithms/kl_estimators.hpp"
#include "cascade_rl/algorithms/policy_loss.hpp"
#include "cascade_rl/algorithms/rollout_correction.hpp"
#include "cascade_rl/algorithms/sequence_ratio_losses.hpp"

namespace {

namespace cr = cascade_rl;

struct token_batch {
  std::vector<std::int64_t> offsets;
  std::vector<float> log_probs, old_log_probs, advantages, grad;

  explicit token_batch(std::size_t tokens) : log_probs(tokens), old_log_probs(tokens), advantages(tokens), grad(tokens) {
    constexpr std::size_t length = 512;
    offsets = cr::padded_offsets(tokens / length, length);
    std::mt19937 rng(11);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (std::size_t t = 0; t < tokens; ++t) {
      log_probs[t] = -std::abs(normal(rng));
      old_log_probs[t] = log_probs[t] + 0.1f * normal(rng);
      advantages[t] = normal(rng);
    }
  }
};

void reinforce_loss_token_mean(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  token_batch batch(n);
  const cr::token_layout layout(batch.offsets);
  const cr::loss_normalizer normalizer{.tokens = static_cast<double>(n)};
  cascade_rl::bench::bandwidth_meter meter(state, cascade_rl::bench::limit::triad);
  for (auto _ : state) {
    auto result = cr::reinforce_loss(cr::exec::par, layout,
                                     {.log_probs = batch.log_probs, .advantages = batch.advantages},
                                     batch.grad, normalizer);
    benchmark::DoNotOptimize(result);
  }
  meter.report(3 * n * sizeof(float));
}

void ppo_clip_loss_token_mean(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  token_batch batch(n);
  const cr::token_layout layout(batch.offsets);
  const cr::loss_normalizer normalizer{.tokens = static_cast<double>(n)};
  const cr::ppo_clip_options options{.clip_low = 0.2, .clip_high = 0.28, .dual_clip = 3.0};
  cascade_rl::bench::bandwidth_meter meter(state, cascade_rl::bench::limit::triad);
  for (auto _ : state) {
    auto result = cr::ppo_clip_loss(cr::exec::par, layout,
                                    {.log_probs = batch.log_probs,
                                     .old_log_probs = batch.old_log_probs,
                                     .advantages = batch.advantages},
                                    batch.grad, normalizer, options);
    benchmark::DoNotOptimize(result);
  }
  meter.report(4 * n * sizeof(float));
}

// A ratio loss of the four-array shape (policy_ratio_inputs), on exec::par.
template <class Loss, class Options>
void ratio_loss(benchmark::State& state, const Loss& loss, const Options& options) {
  const auto n = static_cast<std::size_t>(state.range(0));
  token_batch batch(n);
  const cr::token_layout layout(batch.offsets);
  const auto normalizer =
      cr::local_loss_counts(cr::exec::par, layout).normalizer(options.aggregation);
  cascade_rl::bench::bandwidth_meter meter(state, cascade_rl::bench::limit::triad);
  for (auto _ : state) {
    auto result = loss(cr::exec::par, layout,
                       cr::policy_ratio_inputs<float>{.log_probs = batch.log_probs,
                                                      .old_log_probs = batch.old_log_probs,
                                                      .advantages = batch.advantages},
                       std::span<float>(batch.grad), normalizer, options);
    benchmark::DoNotOptimize(result);
  }
  meter.report(4 * n * sizeof(float));
}

void cispo_loss_token_mean(benchmark::State& state) {
  ratio_loss(
      state, [](auto&&... a) { return cr::cispo_loss(std::forward<decltype(a)>(a)...); },
      cr::cispo_options{.clip_low = 0.2, .clip_high = 0.28});
}

// GSPO as veRL aggregates it (seq-mean-token-mean).
void gspo_loss_seq_mean_token_mean(benchmark::State& state) {
  ratio_loss(
      state, [](auto&&... a) { return cr::gspo_loss(std::forward<decltype(a)>(a)...); },
      cr::gspo_options{.clip_low = 0.0003,
                       .clip_high = 0.0004,
                       .aggregation = cr::loss_aggregation::seq_mean_token_mean});
}

// The other token-local ratio losses, with veRL's defaults where it has them: SAPO's
// sigmoid gate, DPPO's trust-region masks, DRO's quadratic penalty (beta 1e-3 has no
// veRL default; any positive value costs the same).
void sapo_loss_token_mean(benchmark::State& state) {
  ratio_loss(
      state, [](auto&&... a) { return cr::sapo_loss(std::forward<decltype(a)>(a)...); },
      cr::sapo_options{});
}

void dppo_tv_loss_token_mean(benchmark::State& state) {
  ratio_loss(
      state, [](auto&&... a) { return cr::dppo_loss(std::forward<decltype(a)>(a)...); },
      cr::dppo_options{.divergence = cr::dppo_divergence::total_variation});
}

void dppo_kl_loss_token_mean(benchmark::State& state) {
  ratio_loss(
      state, [](auto&&... a) { return cr::dppo_loss(std::forward<decltype(a)>(a)...); },
      cr::dppo_options{.divergence = cr::dppo_divergence::binary_kl});
}

void dro_loss_token_mean(benchmark::State& state) {
  ratio_loss(
      state, [](auto&&... a) { return cr::dro_loss(std::forward<decltype(a)>(a)...); },
      cr::dro_options{.beta = 1e-3});
}

// GMPO (geometric-mean ratio per sequence), veRL's seq-mean-token-mean.
void geo_mean_loss_seq_mean_token_mean(benchmark::State& state) {
  ratio_loss(
      state, [](auto&&... a) { return cr::geo_mean_loss(std::forward<decltype(a)>(a)...); },
      cr::geo_mean_options{.aggregation = cr::loss_aggregation::seq_mean_token_mean});
}

// veRL's KL loss (use_kl_loss), token-mean: its default estimator low_var_kl (k3, clamped
// to +-10) and the others it offers, k1 ("kl"), abs and k2 ("mse"); and the entropy bonus
// on per-token entropies: what a trainer adds to its policy loss. The KL loss reads two
// arrays of floats and writes the gradient; the entropy bonus reads one and writes one.
void kl_loss_token_mean(benchmark::State& state, cr::kl_estimator estimator) {
  const auto n = static_cast<std::size_t>(state.range(0));
  token_batch batch(n);
  const cr::token_layout layout(batch.offsets);
  const cr::loss_normalizer normalizer{.tokens = static_cast<double>(n)};
  const cr::kl_loss_options options{.kl = {.estimator = estimator}};
  cascade_rl::bench::bandwidth_meter meter(state, cascade_rl::bench::limit::triad);
  for (auto _ : state) {
    const double loss = cr::kl_loss(
        cr::exec::par, layout,
        cr::kl_inputs<float>{.log_probs = batch.log_probs, .ref_log_probs = batch.old_log_probs},
        std::span<float>(batch.grad), normalizer, options);
    benchmark::DoNotOptimize(loss);
  }
  meter.report(3 * n * sizeof(float));
}

void kl_loss_k3_token_mean(benchmark::State& state) {
  kl_loss_token_mean(state, cr::kl_estimator::k3);
}
void kl_loss_k1_token_mean(benchmark::State& state) {
  kl_loss_token_mean(state, cr::kl_estimator::k1);
}
void kl_loss_abs_token_mean(benchmark::State& state) {
  kl_loss_token_mean(state, cr::kl_estimator::abs);
}
void kl_loss_k2_token_mean(benchmark::State& state) {
  kl_loss_token_mean(state, cr::kl_estimator::k2);
}

void entropy_loss_token_mean(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  token_batch batch(n);  // advantages' magnitudes stand in for the entropies
  std::vector<float> entropy(n);
  for (std::size_t t = 0; t < n; ++t) entropy[t] = std::abs(batch.advantages[t]);
  const cr::token_layout layout(batch.offsets);
  const cr::loss_normalizer normalizer{.tokens = static_cast<double>(n)};
  cascade_rl::bench::bandwidth_meter meter(state, cascade_rl::bench::limit::copy);
  for (auto _ : state) {
    const double loss = cr::entropy_loss(cr::exec::par, layout, std::span<const float>(entropy),
                                         std::span<float>(batch.grad), normalizer,
                                         cr::loss_aggregation::token_mean, -1e-3);
    benchmark::DoNotOptimize(loss);
  }
  meter.report(2 * n * sizeof(float));
}

// veRL's rollout correction as its config commonly sets it: sequence-level IS weights
// truncated at 2 and the seq_mean_k3 rejection (threshold 0.01), with every rollout_corr/*
// diagnostic.
cr::rollout_correction_options sequence_is_seq_mean_k3() {
  cr::rollout_correction_options options{.is_level = cr::rollout_is_level::sequence,
                                         .is_upper = 2.0};
  options.rejection[0] = {.level = cr::rollout_rs_level::seq_mean,
                          .statistic = cr::rollout_rs_statistic::k3,
                          .upper = 0.01};
  options.rejection_count = 1;
  return options;
}

// The correction alone reads the two log-probs and writes the weights and one keep byte
// per token (13 bytes per token).
void rollout_correction_sequence_is_seq_mean_k3(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  token_batch batch(n);
  const cr::token_layout layout(batch.offsets);
  const cr::rollout_correction_options options = sequence_is_seq_mean_k3();
  std::vector<std::uint8_t> keep(n);
  cascade_rl::bench::bandwidth_meter meter(state, cascade_rl::bench::limit::triad);
  for (auto _ : state) {
    auto metrics = cr::rollout_correction(
        cr::exec::par, layout,
        cr::rollout_correction_inputs<float>{.log_probs = batch.log_probs,
                                             .rollout_log_probs = batch.old_log_probs},
        std::span<float>(batch.grad), std::span<std::uint8_t>(keep), options);
    benchmark::DoNotOptimize(metrics);
  }
  meter.report(n * (3 * sizeof(float) + 1));
}

// veRL's bypass mode (compute_policy_loss_bypass_mode) with its default loss_type ppo_clip:
// the correction above on (logp, rollout_logp), then PPO's clipped loss (clip-higher 0.28,
// dual clip 3, veRL's clip_ratio_c) against the rollout log-probs on the rejection-masked
// tokens, token-mean over the tokens the rejection keeps (veRL's agg_loss counts the
// modified mask; so does the normaliser, computed from the effective layout). Reads the
// two log-probs and the advantages, writes the weights, the keep byte and the gradient
// (21 bytes per token).
void bypass_mode_ppo_clip_token_mean(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  token_batch batch(n);
  const cr::token_layout layout(batch.offsets);
  cr::bypass_mode_options options{.correction = sequence_is_seq_mean_k3(),
                                  .loss = cr::bypass_loss::ppo_clip};
  options.ppo = {.clip_low = 0.2, .clip_high = 0.28, .dual_clip = 3.0};
  const auto normalizer = [](const cr::token_layout& effective) {
    return cr::local_loss_counts(cr::exec::par, effective)
        .normalizer(cr::loss_aggregation::token_mean);
  };
  std::vector<float> weights(n);
  std::vector<std::uint8_t> keep(n);
  cascade_rl::bench::bandwidth_meter meter(state, cascade_rl::bench::limit::triad);
  for (auto _ : state) {
    auto result =
        cr::bypass_mode_loss(cr::exec::par, layout,
                             cr::bypass_mode_inputs<float>{.log_probs = batch.log_probs,
                                                           .rollout_log_probs = batch.old_log_probs,
                                                           .advantages = batch.advantages},
                             std::span<float>(batch.grad), normalizer, options,
                             std::span<float>(weights), std::span<std::uint8_t>(keep));
    benchmark::DoNotOptimize(result);
  }
  meter.report(n * (5 * sizeof(float) + 1));
}

// veRL's covariance losses with its actor.yaml settings: Clip-Cov (clip 0.2 both ways,
// clip_cov_ratio 2e-4, covariance in (1, 5)) with our seeded draw in place of veRL's
// torch.randperm, and KL-Cov (kl_cov_ratio 2e-4, ppo_kl_coef 0.1) with its own top-k
// selection; token-mean. Each reads the three arrays and writes the gradient (16 bytes
// per token); the batch means and the selection are further passes over the inputs.
void clip_cov_loss_token_mean(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  token_batch batch(n);
  const cr::token_layout layout(batch.offsets);
  const cr::loss_normalizer normalizer{.tokens = static_cast<double>(n)};
  const cr::clip_cov_options options{};
  cascade_rl::bench::bandwidth_meter meter(state, cascade_rl::bench::limit::triad);
  for (auto _ : state) {
    auto result = cr::clip_cov_loss(
        cr::exec::par, layout,
        cr::policy_ratio_inputs<float>{.log_probs = batch.log_probs,
                                       .old_log_probs = batch.old_log_probs,
                                       .advantages = batch.advantages},
        cr::token_selection::seeded(7), std::span<float>(batch.grad), normalizer, options);
    benchmark::DoNotOptimize(result);
  }
  meter.report(4 * n * sizeof(float));
}

void kl_cov_loss_token_mean(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  token_batch batch(n);
  const cr::token_layout layout(batch.offsets);
  const cr::loss_normalizer normalizer{.tokens = static_cast<double>(n)};
  const cr::kl_cov_options options{.kl_cov_ratio = 0.0002, .ppo_kl_coef = 0.1};
  cascade_rl::bench::bandwidth_meter meter(state, cascade_rl::bench::limit::triad);
  for (auto _ : state) {
    auto result =
        cr::kl_cov_loss(cr::exec::par, layout,
                        cr::policy_ratio_inputs<float>{.log_probs = batch.log_probs,
                                                       .old_log_probs = batch.old_log_probs,
                                                       .advantages = batch.advantages},
                        std::span<float>(batch.grad), normalizer, options);
    benchmark::DoNotOptimize(result);
  }
  meter.report(4 * n * sizeof(float));
}

}  // namespace

BENCHMARK(rollout_correction_sequence_is_seq_mean_k3)
    ->Arg(4096)
    ->Arg(1 << 20)
    ->Arg(1 << 24)
    ->UseRealTime();
BENCHMARK(cispo_loss_token_mean)->Arg(4096)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime();
BENCHMARK(kl_loss_k3_token_mean)->Arg(4096)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime();
BENCHMARK(entropy_loss_token_mean)->Arg(4096)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime();
BENCHMARK(gspo_loss_seq_mean_token_mean)->Arg(4096)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime();
BENCHMARK(reinforce_loss_token_mean)->Arg(4096)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime();
BENCHMARK(ppo_clip_loss_token_mean)->Arg(4096)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime();
BENCHMARK(sapo_loss_token_mean)->Arg(4096)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime();
BENCHMARK(dppo_tv_loss_token_mean)->Arg(4096)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime();
BENCHMARK(dppo_kl_loss_token_mean)->Arg(4096)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime();
BENCHMARK(dro_loss_token_mean)->Arg(4096)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime();
BENCHMARK(geo_mean_loss_seq_mean_token_mean)->Arg(4096)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime();
BENCHMARK(kl_loss_k1_token_mean)->Arg(4096)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime();
BENCHMARK(kl_loss_abs_token_mean)->Arg(4096)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime();
BENCHMARK(kl_loss_k2_token_mean)->Arg(4096)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime();
BENCHMARK(clip_cov_loss_token_mean)->Arg(4096)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime();
BENCHMARK(kl_cov_loss_token_mean)->Arg(4096)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime();
BENCHMARK(bypass_mode_ppo_clip_token_mean)->Arg(4096)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime();
