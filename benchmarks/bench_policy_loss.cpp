// Token losses with dL/dlogp over ragged sequences of 512 tokens: REINFORCE reads the
// log-probs and advantages and writes the gradient (12 bytes per token); PPO clip also
// reads the old log-probs (16 bytes per token). The limit is the copy bandwidth that fraction_of_copy reports against.

#include <benchmark/benchmark.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "bandwidth.hpp"
#include "cascade_rl/algorithms/policy_loss.hpp"

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

}  // namespace

BENCHMARK(reinforce_loss_token_mean)->Arg(4096)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime();
BENCHMARK(ppo_clip_loss_token_mean)->Arg(4096)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime();
