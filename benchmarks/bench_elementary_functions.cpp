// The elementary functions of core/elementary_functions.hpp in a plain loop over 16M
// values on one thread, next to std::exp: out[i] = exp(in[i]) in double (the PPO ratio
// exp(logp - old_logp)) and in float (the logits' log-sum-exp). Bytes count one read and
// one write per element; items_per_second is the exp throughput of one core, and
// fraction_of_copy compares one core with the copy bandwidth of all of exec::par's
// threads. This file is built with the library's baseline flags, not -march=native
// (benchmarks/CMakeLists.txt): what a user gets by default (SSE2 vectors on x86-64).

#include <benchmark/benchmark.h>

#include <cmath>
#include <cstddef>
#include <random>
#include <vector>

#include "bandwidth.hpp"
#include "cascade_rl/core/elementary_functions.hpp"

namespace {

template <class T, class F>
void run(benchmark::State& state, T lo, T hi, F f) {
  const auto n = static_cast<std::size_t>(state.range(0));
  std::vector<T> in(n), out(n);
  std::mt19937 rng(5);
  std::uniform_real_distribution<T> uniform(lo, hi);
  for (T& x : in) x = uniform(rng);
  cascade_rl::bench::bandwidth_meter meter(state, cascade_rl::bench::limit::copy);
  for (auto _ : state) {
    const T* src = in.data();
    T* dst = out.data();
    for (std::size_t i = 0; i < n; ++i) dst[i] = f(src[i]);
    benchmark::DoNotOptimize(dst);
    benchmark::ClobberMemory();
  }
  meter.report(2 * n * sizeof(T));
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * n));
}

void exp_double_cascade_rl(benchmark::State& state) {
  run<double>(state, -10.0, 10.0, [](double x) { return cascade_rl::math::exp(x); });
}
void exp_double_std(benchmark::State& state) {
  run<double>(state, -10.0, 10.0, [](double x) { return std::exp(x); });
}
void exp_float_cascade_rl(benchmark::State& state) {
  run<float>(state, -20.0f, 0.0f, [](float x) { return cascade_rl::math::exp(x); });
}
void exp_float_std(benchmark::State& state) {
  run<float>(state, -20.0f, 0.0f, [](float x) { return std::exp(x); });
}
void log_double_cascade_rl(benchmark::State& state) {
  run<double>(state, 1e-3, 1e3, [](double x) { return cascade_rl::math::log(x); });
}
void log_double_std(benchmark::State& state) {
  run<double>(state, 1e-3, 1e3, [](double x) { return std::log(x); });
}

}  // namespace

BENCHMARK(exp_double_cascade_rl)->Arg(4096)->Arg(1 << 24)->UseRealTime();
BENCHMARK(exp_double_std)->Arg(4096)->Arg(1 << 24)->UseRealTime();
BENCHMARK(exp_float_cascade_rl)->Arg(4096)->Arg(1 << 24)->UseRealTime();
BENCHMARK(exp_float_std)->Arg(4096)->Arg(1 << 24)->UseRealTime();
BENCHMARK(log_double_cascade_rl)->Arg(4096)->Arg(1 << 24)->UseRealTime();
BENCHMARK(log_double_std)->Arg(4096)->Arg(1 << 24)->UseRealTime();
