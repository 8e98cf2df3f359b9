#pragma once
// The memory-bandwidth limits every host kernel is read against, measured once per run
// with the threads exec::par uses, on arrays far beyond the last-level cache (STREAM,
// McCalpin): copy (a = b), triad (a = b + s * c) and read (sum of a). A kernel's
// benchmark reports its bytes per second as a fraction of the matching figure, a user
// counter named fraction_of_<limit> (and fraction_of_limit, whichever it is): the
// fraction is what to read, it holds on a noisy or different machine where raw GB/s do
// not. Bytes are counted as STREAM counts them: each array element read or written
// once, no write-allocate traffic.

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/parallel.hpp"

namespace cascade_rl::bench {

enum class limit { copy, triad, read };

[[nodiscard]] inline const char* name_of(limit l) {
  switch (l) {
    case limit::copy: return "copy";
    case limit::triad: return "triad";
    case limit::read: return "read";
  }
  return "unknown";
}

// Floats per STREAM array: 32 Mi floats = 128 MiB, four times a 32 MiB L3.
inline constexpr std::size_t stream_elements = std::size_t{32} << 20;

// The STREAM kernels on raw arrays, one static OpenMP loop each (vectorised), with the
// thread count of exec::par.
inline void stream_copy(float* a, const float* b, std::size_t n) {
  const auto count = static_cast<std::int64_t>(n);
  [[maybe_unused]] const int threads = detail::thread_count(exec::par);
#pragma omp parallel for simd num_threads(threads) schedule(static)
  for (std::int64_t i = 0; i < count; ++i) a[i] = b[i];
}

inline void stream_triad(float* a, const float* b, const float* c, float s, std::size_t n) {
  const auto count = static_cast<std::int64_t>(n);
  [[maybe_unused]] const int threads = detail::thread_count(exec::par);
#pragma omp parallel for simd num_threads(threads) schedule(static)
  for (std::int64_t i = 0; i < count; ++i) a[i] = b[i] + s * c[i];
}

inline float stream_read(const float* a, std::size_t n) {
  const auto count = static_cast<std::int64_t>(n);
  float sum = 0;
  [[maybe_unused]] const int threads = detail::thread_count(exec::par);
#pragma omp parallel for simd num_threads(threads) schedule(static) reduction(+ : sum)
  for (std::int64_t i = 0; i < count; ++i) sum += a[i];
  return sum;
}

// Bytes per element of each STREAM kernel.
[[nodiscard]] inline double stream_bytes(limit l) {
  switch (l) {
    case limit::copy: return 2.0 * sizeof(float);
    case limit::triad: return 3.0 * sizeof(float);
    case limit::read: return 1.0 * sizeof(float);
  }
  return 0;
}

struct stream_figures {
  double copy = 0, triad = 0, read = 0;  // bytes per second, best of the repeats
  [[nodiscard]] double of(limit l) const {
    return l == limit::copy ? copy : (l == limit::triad ? triad : read);
  }
};

// Best of several repeats of each kernel, after one untimed pass that faults the pages
// in. Measured on first use and kept for the run.
inline const stream_figures& stream() {
  static const stream_figures measured = [] {
    const std::size_t n = stream_elements;
    const std::unique_ptr<float[]> a(new float[n]), b(new float[n]), c(new float[n]);
    // First touch by the threads that will use the pages, as STREAM does.
    {
      const auto count = static_cast<std::int64_t>(n);
      [[maybe_unused]] const int threads = detail::thread_count(exec::par);
      float* pa = a.get();
      float* pb = b.get();
      float* pc = c.get();
#pragma omp parallel for num_threads(threads) schedule(static)
      for (std::int64_t i = 0; i < count; ++i) {
        pa[i] = 1.0f;
        pb[i] = 2.0f;
        pc[i] = 0.5f;
      }
    }
    stream_figures f;
    const auto best_of = [&](limit l, auto&& kernel) {
      double best = 0;
      for (int repeat = 0; repeat < 6; ++repeat) {
        const auto start = std::chrono::steady_clock::now();
        kernel();
        benchmark::ClobberMemory();
        const std::chrono::duration<double> seconds = std::chrono::steady_clock::now() - start;
        best = std::max(best, stream_bytes(l) * static_cast<double>(n) / seconds.count());
      }
      return best;
    };
    f.copy = best_of(limit::copy, [&] { stream_copy(a.get(), b.get(), n); });
    f.triad = best_of(limit::triad, [&] { stream_triad(a.get(), b.get(), c.get(), 3.0f, n); });
    f.read = best_of(limit::read, [&] {
      float s = stream_read(a.get(), n);
      benchmark::DoNotOptimize(s);
    });
    return f;
  }();
  return measured;
}

// The copy figure, for code written against the first version of this header.
inline double copy_bandwidth() { return stream().copy; }

// Measures the wall time of a benchmark's loop. Construct it just before the loop, call
// report(bytes per iteration) after it: sets bytes processed, fraction_of_<limit> and
// fraction_of_limit (1.0 = the STREAM figure of that kind on this machine, this run).
class bandwidth_meter {
 public:
  explicit bandwidth_meter(benchmark::State& state, limit l = limit::copy)
      : state_(state), limit_(l), start_(std::chrono::steady_clock::now()) {
    stream();  // measured before the clock matters: construct before the loop
    start_ = std::chrono::steady_clock::now();
  }

  void report(std::size_t bytes_per_iteration) {
    const std::chrono::duration<double> seconds = std::chrono::steady_clock::now() - start_;
    const double bytes = static_cast<double>(state_.iterations()) * bytes_per_iteration;
    state_.SetBytesProcessed(static_cast<std::int64_t>(bytes));
    const double fraction = bytes / seconds.count() / stream().of(limit_);
    state_.counters[std::string("fraction_of_") + name_of(limit_)] = fraction;
    state_.counters["fraction_of_limit"] = fraction;
  }

 private:
  benchmark::State& state_;
  limit limit_;
  std::chrono::steady_clock::time_point start_;
};

// Counters that name the limit itself, for the STREAM benchmarks' own rows.
inline void report_stream_context(benchmark::State& state) {
  const stream_figures& f = stream();
  state.counters["stream_copy_GBps"] = f.copy / 1e9;
  state.counters["stream_triad_GBps"] = f.triad / 1e9;
  state.counters["stream_read_GBps"] = f.read / 1e9;
}

}  // namespace cascade_rl::bench
