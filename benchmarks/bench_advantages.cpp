// GRPO advantages over groups of 16: each reward is read once and each advantage
// written once, so the limit is the copy bandwidth (fraction_of_copy).

#include <benchmark/benchmark.h>

#include <cstddef>
#include <random>
#include <span>
#include <vector>

#include "bandwidth.hpp"
#include "cascade_rl/algorithms/grpo_advantages.hpp"

namespace {

namespace cr = cascade_rl;

void grpo_advantages_group16(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  constexpr std::size_t group_size = 16;
  std::mt19937 rng(7);
  std::bernoulli_distribution correct(0.4);
  std::vector<float> rewards(n), advantages(n);
  for (auto& r : rewards) r = correct(rng) ? 1.0f : 0.0f;
  const auto groups = cr::group_layout::uniform({.groups = n / group_size, .size = group_size});
  cascade_rl::bench::bandwidth_meter meter(state, cascade_rl::bench::limit::copy);
  for (auto _ : state) {
    cr::grpo_advantages(cr::exec::par, groups, rewards, advantages);
    benchmark::DoNotOptimize(advantages.data());
    benchmark::ClobberMemory();
  }
  meter.report(2 * n * sizeof(float));
}

}  // namespace

BENCHMARK(grpo_advantages_group16)->Arg(4096)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime();
