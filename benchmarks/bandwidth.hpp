#pragma once
// Reports a kernel's throughput as bytes processed and as a fraction of this machine's
// copy bandwidth, measured once per run with the same threads. The fraction is what to
// read: it holds on a noisy or different machine where raw GB/s do not.

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/parallel.hpp"

namespace cascade_rl::bench {

// Best of several exec::par copies of 64 MiB (far beyond the last-level cache), in
// bytes per second counting the read and the write.
inline double copy_bandwidth() {
  static const double measured = [] {
    const std::size_t n = std::size_t{16} << 20;  // floats: 64 MiB per array
    std::vector<float> source(n, 1.0f), target(n, 0.0f);
    double best = 0;
    for (int repeat = 0; repeat < 7; ++repeat) {
      const auto start = std::chrono::steady_clock::now();
      detail::for_each_index(exec::par, n, [&](std::size_t i) { target[i] = source[i] + 1.0f; });
      benchmark::DoNotOptimize(target.data());
      benchmark::ClobberMemory();
      const std::chrono::duration<double> seconds = std::chrono::steady_clock::now() - start;
      best = std::max(best, 2.0 * n * sizeof(float) / seconds.count());
    }
    return best;
  }();
  return measured;
}

// Measures the wall time of a benchmark's loop. Construct it just before the loop, call
// report(bytes per iteration) after it: sets bytes processed and the user counter
// `fraction_of_copy`, this run's bandwidth over copy_bandwidth() (1.0 = the copy limit).
class bandwidth_meter {
 public:
  explicit bandwidth_meter(benchmark::State& state)
      : state_(state), start_(std::chrono::steady_clock::now()) {
    copy_bandwidth();  // measured before the clock matters: construct before the loop
    start_ = std::chrono::steady_clock::now();
  }

  void report(std::size_t bytes_per_iteration) {
    const std::chrono::duration<double> seconds = std::chrono::steady_clock::now() - start_;
    const double bytes = static_cast<double>(state_.iterations()) * bytes_per_iteration;
    state_.SetBytesProcessed(static_cast<std::int64_t>(bytes));
    state_.counters["fraction_of_copy"] = bytes / seconds.count() / copy_bandwidth();
  }

 private:
  benchmark::State& state_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace cascade_rl::bench
