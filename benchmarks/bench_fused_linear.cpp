// The fused linear -> log-prob path (hidden [T, H] x weight [H, V], never the [T, V]
// logits) against the materialised one (Eigen's matrix product into [T, V], then
// log_probs_from_logits; for the backward pass also dL/dlogits and both products), at
// the same thread count. Counters: extra_memory_fraction, the fused path's scratch over
// the [T, V] logits it avoids (from its allocations, see fused_extra_floats); flops.
// scripts/bench_table.py divides the fused time by the materialised one.

#include <benchmark/benchmark.h>

#include <Eigen/Core>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "cascade_rl/algorithms/fused_linear_log_probs.hpp"

namespace {

namespace cr = cascade_rl;
constexpr std::size_t hidden_size = 64;

struct problem {
  std::size_t tokens, vocab;
  std::vector<float> hidden, weight, grad_logp, logp, entropy, lse;
  std::vector<std::int64_t> labels;

  problem(std::size_t t, std::size_t v)
      : tokens(t), vocab(v), hidden(t * hidden_size), weight(hidden_size * v), grad_logp(t, 1.0f / t),
        logp(t), entropy(t), lse(t), labels(t) {
    std::mt19937 rng(3);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (auto& x : hidden) x = normal(rng);
    for (auto& x : weight) x = 0.25f * normal(rng);
    for (std::size_t i = 0; i < t; ++i) labels[i] = static_cast<std::int64_t>((i * 7919) % v);
  }
};

using row_major = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using const_map = Eigen::Map<const row_major>;

// The fused path's allocations, in floats. Forward: a [chunk, tile] block per thread,
// a log-sum-exp state (a float and two doubles: 6 floats) and a label logit per row.
// Backward: the chunk's [chunk, V] logits and a [chunk, H] share of grad_hidden per
// vocabulary tile.
double fused_extra_floats(const problem& p, bool backward) {
  const cr::fused_linear_options o{};
  const auto threads = static_cast<double>(cr::detail::thread_count(cr::exec::par));
  const double forward =
      threads * static_cast<double>(o.chunk_rows * o.vocab_tile) + 7.0 * static_cast<double>(p.tokens);
  if (!backward) return forward;
  const auto tiles = static_cast<double>((p.vocab + o.vocab_tile - 1) / o.vocab_tile);
  const double backward_floats =
      static_cast<double>(o.chunk_rows * p.vocab) + tiles * static_cast<double>(o.chunk_rows * hidden_size);
  return std::max(forward, backward_floats);
}

void report(benchmark::State& state, const problem& p, double products, bool backward) {
  state.counters["extra_memory_fraction"] = fused_extra_floats(p, backward) / static_cast<double>(p.tokens * p.vocab);
  state.counters["flops"] = benchmark::Counter(
      products * 2.0 * static_cast<double>(p.tokens * hidden_size * p.vocab),
      benchmark::Counter::kIsIterationInvariantRate);
}

void fused_linear_forward(benchmark::State& state) {
  problem p(static_cast<std::size_t>(state.range(1)), static_cast<std::size_t>(state.range(0)));
  for (auto _ : state) {
    cr::fused_linear_log_probs(cr::exec::par, std::span<const float>(p.hidden),
                               std::span<const float>(p.weight), hidden_size, p.vocab,
                               std::span<const std::int64_t>(p.labels), std::span<float>(p.logp),
                               std::span<float>(p.entropy), std::span<float>(p.lse));
    benchmark::DoNotOptimize(p.logp.data());
  }
  report(state, p, 1, false);
}

void materialised_forward(benchmark::State& state) {
  problem p(static_cast<std::size_t>(state.range(1)), static_cast<std::size_t>(state.range(0)));
  row_major logits(p.tokens, p.vocab);
  const const_map H(p.hidden.data(), p.tokens, hidden_size), W(p.weight.data(), hidden_size, p.vocab);
  for (auto _ : state) {
    logits.noalias() = H * W;
    cr::log_probs_from_logits(cr::exec::par, {.vocab = p.vocab},
                              std::span<const float>(logits.data(), logits.size()),
                              std::span<const std::int64_t>(p.labels), std::span<float>(p.logp),
                              std::span<float>(p.entropy));
    benchmark::DoNotOptimize(p.logp.data());
  }
  report(state, p, 1, false);
}

void fused_linear_forward_backward(benchmark::State& state) {
  problem p(static_cast<std::size_t>(state.range(1)), static_cast<std::size_t>(state.range(0)));
  std::vector<float> grad_hidden(p.tokens * hidden_size), grad_weight(hidden_size * p.vocab);
  for (auto _ : state) {
    cr::fused_linear_log_probs(cr::exec::par, std::span<const float>(p.hidden),
                               std::span<const float>(p.weight), hidden_size, p.vocab,
                               std::span<const std::int64_t>(p.labels), std::span<float>(p.logp),
                               std::span<float>(p.entropy), std::span<float>(p.lse));
    cr::fused_linear_log_probs_backward(
        cr::exec::par, std::span<const float>(p.hidden), std::span<const float>(p.weight),
        hidden_size, p.vocab, std::span<const std::int64_t>(p.labels), std::span<const float>(p.lse),
        std::span<const float>(p.grad_logp), std::span<float>(grad_hidden), std::span<float>(grad_weight));
    benchmark::DoNotOptimize(grad_weight.data());
  }
  report(state, p, 4, true);
}

void materialised_forward_backward(benchmark::State& state) {
  problem p(static_cast<std::size_t>(state.range(1)), static_cast<std::size_t>(state.range(0)));
  row_major logits(p.tokens, p.vocab), grad_hidden(p.tokens, hidden_size), grad_weight(hidden_size, p.vocab);
  const const_map H(p.hidden.data(), p.tokens, hidden_size), W(p.weight.data(), hidden_size, p.vocab);
  for (auto _ : state) {
    logits.noalias() = H * W;
    cr::log_probs_from_logits(cr::exec::par, {.vocab = p.vocab},
                              std::span<const float>(logits.data(), logits.size()),
                              std::span<const std::int64_t>(p.labels), std::span<float>(p.logp),
                              std::span<float>(p.entropy));
    // dL/dlogits = g (onehot - softmax), in place, then both products.
    cr::detail::for_each_index(cr::exec::par, p.tokens, [&](std::size_t t) {
      float* z = logits.data() + t * p.vocab;
      const float lse = z[p.labels[t]] - p.logp[t];
      for (std::size_t v = 0; v < p.vocab; ++v) {
        float clamped;
        z[v] = -p.grad_logp[t] * cr::detail::exp_nonpositive(z[v] - lse, clamped);
      }
      z[p.labels[t]] += p.grad_logp[t];
    }, 2);
    grad_hidden.noalias() = logits * W.transpose();
    grad_weight.noalias() = H.transpose() * logits;
    benchmark::DoNotOptimize(grad_weight.data());
  }
  report(state, p, 3, true);
}

}  // namespace

// Args: vocab, tokens. 4000 tokens with chunks of 32 rows: the scratch is 0.8% of the
// logits. The small size (vocab 4096, 64 tokens) is the smoke test's.
BENCHMARK(fused_linear_forward)->Args({4096, 64})->Args({32768, 4000})->Args({131072, 4000})->Args({262144, 4000})->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(materialised_forward)->Args({4096, 64})->Args({32768, 4000})->Args({131072, 4000})->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(fused_linear_forward_backward)->Args({4096, 64})->Args({32768, 4000})->Args({262144, 4000})->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(materialised_forward_backward)->Args({4096, 64})->Args({32768, 4000})->UseRealTime()->Unit(benchmark::kMillisecond);
