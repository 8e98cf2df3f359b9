// The advantage estimators. GRPO and RLOO over groups of 16: each reward is read once and
// each advantage written once, so the limit is the copy bandwidth (fraction_of_copy).
// REINFORCE++ over 512-token rows: an outcome reward on each row's last token, the
// discounted return of every token, whitened over the batch (read the rewards, write
// the returns, read them twice more for the batch statistics and the whitening).

#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "bandwidth.hpp"
#include "cascade_rl/algorithms/grpo_advantages.hpp"
#include "cascade_rl/algorithms/reinforce_plus_plus.hpp"
#include "cascade_rl/algorithms/rloo_advantages.hpp"
#include "cascade_rl/core/token_layout.hpp"

namespace {

namespace cr = cascade_rl;

// Binary rewards, 40% right (the torch renderings draw the same shape).
std::vector<float> binary_rewards(std::size_t n) {
  std::mt19937 rng(7);
  std::bernoulli_distribution correct(0.4);
  std::vector<float> rewards(n);
  for (auto& r : rewards) r = correct(rng) ? 1.0f : 0.0f;
  return rewards;
}

template <class Estimator>
void group_estimator(benchmark::State& state, const Estimator& estimator) {
  const auto n = static_cast<std::size_t>(state.range(0));
  constexpr std::size_t group_size = 16;
  const std::vector<float> rewards = binary_rewards(n);
  std::vector<float> advantages(n);
  const auto groups = cr::group_layout::uniform({.groups = n / group_size, .size = group_size});
  cascade_rl::bench::bandwidth_meter meter(state, cascade_rl::bench::limit::copy);
  for (auto _ : state) {
    estimator(groups, std::span<const float>(rewards), std::span<float>(advantages));
    benchmark::DoNotOptimize(advantages.data());
    benchmark::ClobberMemory();
  }
  meter.report(2 * n * sizeof(float));
}

void grpo_advantages_group16(benchmark::State& state) {
  group_estimator(state, [](const auto& groups, auto rewards, auto advantages) {
    cr::grpo_advantages(cr::exec::par, groups, rewards, advantages);
  });
}

void rloo_advantages_group16(benchmark::State& state) {
  group_estimator(state, [](const auto& groups, auto rewards, auto advantages) {
    cr::rloo_advantages(cr::exec::par, groups, rewards, advantages);
  });
}

void reinforce_plus_plus_advantages_outcome(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  constexpr std::size_t length = 512;
  const std::vector<std::int64_t> offsets = cr::padded_offsets(n / length, length);
  const cr::token_layout layout(offsets);
  const std::vector<float> outcomes = binary_rewards(n / length);
  std::vector<float> token_rewards(n, 0.0f), advantages(n);
  for (std::size_t s = 0; s < outcomes.size(); ++s) token_rewards[(s + 1) * length - 1] = outcomes[s];
  cascade_rl::bench::bandwidth_meter meter(state, cascade_rl::bench::limit::copy);
  for (auto _ : state) {
    cr::reinforce_plus_plus_advantages(cr::exec::par, layout, std::span<const float>(token_rewards),
                                       std::span<float>(advantages));
    benchmark::DoNotOptimize(advantages.data());
    benchmark::ClobberMemory();
  }
  meter.report(2 * n * sizeof(float));
}

}  // namespace

BENCHMARK(grpo_advantages_group16)->Arg(4096)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime();
BENCHMARK(rloo_advantages_group16)->Arg(4096)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime();
BENCHMARK(reinforce_plus_plus_advantages_outcome)->Arg(4096)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime();
