// Log-probs and entropy from logits [rows, V], fp32 and bf16: every logit is read once,
// so the limit is the STREAM read bandwidth (fraction_of_read). Rows are chosen so that
// the logits fill 128 MiB (fp32) or 64 MiB (bf16), far beyond the last-level cache,
// except at V = 4096, the small size the smoke test runs. The *_in_cache runs take 128
// rows (16 MiB of fp32 logits at V = 32768), which stay in the last-level cache: their
// speed is the kernel's compute ceiling, which scripts/bench_table.py reports beside
// the target.

#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "bandwidth.hpp"
#include "cascade_rl/algorithms/log_probs.hpp"

namespace {

namespace cr = cascade_rl;

template <class L>
std::vector<L> random_logits(std::size_t count, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<L> logits(count);
  for (auto& x : logits) {
    if constexpr (std::is_same_v<L, float>)
      x = normal(rng);
    else
      x = cr::bfloat16::from_float(normal(rng));
  }
  return logits;
}

std::size_t rows_for(std::size_t vocab) {
  return vocab <= 4096 ? 64 : (std::size_t{32} << 20) / vocab;
}

inline constexpr std::size_t in_cache_rows = 128;

template <class L>
void log_probs(benchmark::State& state, std::size_t rows) {
  const auto vocab = static_cast<std::size_t>(state.range(0));
  const auto logits = random_logits<L>(rows * vocab, 5);
  std::vector<std::int64_t> labels(rows);
  for (std::size_t r = 0; r < rows; ++r) labels[r] = static_cast<std::int64_t>((r * 7919) % vocab);
  std::vector<float> logp(rows), entropy(rows);
  state.counters["rows"] = static_cast<double>(rows);
  cascade_rl::bench::bandwidth_meter meter(state, cascade_rl::bench::limit::read);
  for (auto _ : state) {
    cr::log_probs_from_logits(cr::exec::par, {.vocab = vocab}, std::span<const L>(logits),
                              std::span<const std::int64_t>(labels), std::span<float>(logp),
                              std::span<float>(entropy));
    benchmark::DoNotOptimize(logp.data());
    benchmark::ClobberMemory();
  }
  meter.report(rows * vocab * sizeof(L));
}

void log_probs_fp32(benchmark::State& state) {
  log_probs<float>(state, rows_for(static_cast<std::size_t>(state.range(0))));
}
void log_probs_bf16(benchmark::State& state) {
  log_probs<cr::bfloat16>(state, rows_for(static_cast<std::size_t>(state.range(0))));
}
void log_probs_fp32_in_cache(benchmark::State& state) { log_probs<float>(state, in_cache_rows); }
void log_probs_bf16_in_cache(benchmark::State& state) { log_probs<cr::bfloat16>(state, in_cache_rows); }

}  // namespace

BENCHMARK(log_probs_fp32)->Arg(4096)->Arg(32768)->Arg(131072)->Arg(262144)->UseRealTime();
BENCHMARK(log_probs_bf16)->Arg(4096)->Arg(32768)->Arg(131072)->Arg(262144)->UseRealTime();
BENCHMARK(log_probs_fp32_in_cache)->Arg(32768)->UseRealTime();
BENCHMARK(log_probs_bf16_in_cache)->Arg(32768)->UseRealTime();
