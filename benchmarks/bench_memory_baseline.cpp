// The STREAM kernels themselves (copy, triad, read-sum), over arrays the size of the
// kernels' inputs. At sizes far beyond the last-level cache they reproduce the limits in
// bandwidth.hpp (fraction close to 1); small sizes run from cache and read above 1.

#include <benchmark/benchmark.h>

#include <cstddef>
#include <vector>

#include "bandwidth.hpp"

namespace {

namespace bench = cascade_rl::bench;

void stream_copy(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  std::vector<float> a(n, 0.0f), b(n, 1.0f);
  bench::bandwidth_meter meter(state, bench::limit::copy);
  for (auto _ : state) {
    bench::stream_copy(a.data(), b.data(), n);
    benchmark::DoNotOptimize(a.data());
    benchmark::ClobberMemory();
  }
  meter.report(2 * n * sizeof(float));
  bench::report_stream_context(state);
}

void stream_triad(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  std::vector<float> a(n, 0.0f), b(n, 1.0f), c(n, 2.0f);
  bench::bandwidth_meter meter(state, bench::limit::triad);
  for (auto _ : state) {
    bench::stream_triad(a.data(), b.data(), c.data(), 3.0f, n);
    benchmark::DoNotOptimize(a.data());
    benchmark::ClobberMemory();
  }
  meter.report(3 * n * sizeof(float));
}

void stream_read(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  std::vector<float> a(n, 1.0f);
  bench::bandwidth_meter meter(state, bench::limit::read);
  for (auto _ : state) {
    float sum = bench::stream_read(a.data(), n);
    benchmark::DoNotOptimize(sum);
  }
  meter.report(n * sizeof(float));
}

}  // namespace

BENCHMARK(stream_copy)->Arg(4096)->Arg(1 << 25)->UseRealTime();
BENCHMARK(stream_triad)->Arg(4096)->Arg(1 << 25)->UseRealTime();
BENCHMARK(stream_read)->Arg(4096)->Arg(1 << 25)->UseRealTime();
