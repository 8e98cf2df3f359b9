// The memory-bandwidth baselines that the kernels' bytes-per-second figures are read
// against: a copy (read one array, write one) and a read-only sum, over arrays the same
// size as the kernels'. Arrays beyond the last-level cache measure DRAM bandwidth.

#include <benchmark/benchmark.h>

#include <cstddef>
#include <vector>

#include "bandwidth.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/parallel.hpp"

namespace {

using cascade_rl::exec::par;

void memory_copy(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  std::vector<float> source(n, 1.0f), target(n, 0.0f);
  cascade_rl::bench::bandwidth_meter meter(state);
  for (auto _ : state) {
    cascade_rl::detail::for_each_index(par, n, [&](std::size_t i) { target[i] = source[i]; });
    benchmark::DoNotOptimize(target.data());
    benchmark::ClobberMemory();
  }
  meter.report(2 * n * sizeof(float));
}

void memory_read_sum(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  std::vector<float> source(n, 1.0f);
  cascade_rl::bench::bandwidth_meter meter(state);
  for (auto _ : state) {
    double sum = cascade_rl::detail::blocked_sum(par, n, [&](std::size_t i) { return source[i]; });
    benchmark::DoNotOptimize(sum);
  }
  meter.report(n * sizeof(float));
}

}  // namespace

BENCHMARK(memory_copy)->Arg(4096)->Arg(1 << 20)->Arg(1 << 25)->UseRealTime();
BENCHMARK(memory_read_sum)->Arg(4096)->Arg(1 << 20)->Arg(1 << 25)->UseRealTime();
