// The advantage estimators. GRPO and RLOO over groups of 16: each reward is read once and
// each advantage written once, so the limit is the copy bandwidth (fraction_of_copy).
// REINFORCE++ over 512-token rows: an outcome reward on each row's last token, the
// discounted return of every token, whitened over the batch (read the rewards, write
// the returns, read them twice more for the batch statistics and the whitening).
//
// The other estimators a trainer calls (veRL's core_algos.py), each counting the arrays
// it must read and write once:
//   per sequence, groups of 16 (as GRPO): GPG and GRPO pass@k read the scores and write
//     the advantages (8 bytes per sequence);
//   per token, rows of 512, groups of 16 rows (one group of 8 rows at the 4096-token
//     smoke size): GAE reads rewards and values and writes advantages and returns (16
//     bytes per token); ReMax reads the rewards and writes advantages and returns (12 per
//     token, and a baseline per row); OPO and REINFORCE++-baseline read a score per row
//     and write the advantages (4 per token, 4 per row); GDPO reads two reward components
//     per row and writes the advantages (4 per token, 8 per row); on-policy distillation
//     reads the teacher's and the student's log-probs and writes the advantages (12 per
//     token); the optimal token baseline reads rewards, old log-probs and sum pi^2 and
//     writes advantages and returns (20 per token). Whitening, GDPO's per-component GRPO
//     and the baseline's double scratch are further passes, which their fraction shows.

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "bandwidth.hpp"
#include "cascade_rl/algorithms/distillation_advantages.hpp"
#include "cascade_rl/algorithms/gae_advantages.hpp"
#include "cascade_rl/algorithms/gdpo_advantages.hpp"
#include "cascade_rl/algorithms/gpg_advantages.hpp"
#include "cascade_rl/algorithms/grpo_advantages.hpp"
#include "cascade_rl/algorithms/grpo_passk_advantages.hpp"
#include "cascade_rl/algorithms/opo_advantages.hpp"
#include "cascade_rl/algorithms/optimal_token_baseline.hpp"
#include "cascade_rl/algorithms/reinforce_plus_plus.hpp"
#include "cascade_rl/algorithms/remax_advantages.hpp"
#include "cascade_rl/algorithms/rloo_advantages.hpp"
#include "cascade_rl/core/group_layout.hpp"
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

// GPG (f_norm 1) and GRPO pass@k (scaled by the group's std, veRL's default), per
// sequence as GRPO.
void gpg_advantages_group16(benchmark::State& state) {
  group_estimator(state, [](const auto& groups, auto rewards, auto advantages) {
    cr::gpg_advantages(cr::exec::par, groups, rewards, advantages);
  });
}

void grpo_passk_advantages_group16(benchmark::State& state) {
  group_estimator(state, [](const auto& groups, auto rewards, auto advantages) {
    cr::grpo_passk_advantages(cr::exec::par, groups, rewards, advantages);
  });
}

// Token-level batches: rows of 512 tokens, groups of 16 rows (8 at the smoke size).
struct token_rows {
  static constexpr std::size_t length = 512;
  std::size_t tokens, rows, group_size;
  std::vector<std::int64_t> offsets;

  explicit token_rows(std::size_t n)
      : tokens(n),
        rows(n / length),
        group_size(std::min<std::size_t>(16, rows)),
        offsets(cr::padded_offsets(rows, length)) {}
  [[nodiscard]] cr::token_layout layout() const { return cr::token_layout(offsets); }
  [[nodiscard]] cr::group_layout groups() const {
    return cr::group_layout::uniform({.groups = rows / group_size, .size = group_size});
  }
  // The outcome (binary, 40% right) on each row's last token, 0 elsewhere.
  [[nodiscard]] std::vector<float> outcome_rewards() const {
    const std::vector<float> outcomes = binary_rewards(rows);
    std::vector<float> token_rewards(tokens, 0.0f);
    for (std::size_t s = 0; s < rows; ++s) token_rewards[(s + 1) * length - 1] = outcomes[s];
    return token_rewards;
  }
};

std::vector<float> normal_values(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> values(n);
  for (auto& v : values) v = normal(rng);
  return values;
}

// Log-probs of sampled tokens: -|N(0, 1)|.
std::vector<float> log_probs(std::size_t n, unsigned seed) {
  std::vector<float> values = normal_values(n, seed);
  for (auto& v : values) v = -std::abs(v);
  return values;
}

// GAE with veRL's defaults (gamma = lambda = 1), a critic's values on every token.
void gae_advantages(benchmark::State& state) {
  const token_rows batch(static_cast<std::size_t>(state.range(0)));
  const cr::token_layout layout = batch.layout();
  const std::vector<float> rewards = batch.outcome_rewards(),
                           values = normal_values(batch.tokens, 3);
  std::vector<float> advantages(batch.tokens), returns(batch.tokens);
  cascade_rl::bench::bandwidth_meter meter(state, cascade_rl::bench::limit::copy);
  for (auto _ : state) {
    cr::gae_advantages(cr::exec::par, layout,
                       cr::gae_inputs<float>{.token_rewards = rewards, .values = values},
                       std::span<float>(advantages), std::span<float>(returns));
    benchmark::DoNotOptimize(advantages.data());
    benchmark::ClobberMemory();
  }
  meter.report(4 * batch.tokens * sizeof(float));
}

// ReMax: the greedy response's reward as each row's baseline.
void remax_advantages(benchmark::State& state) {
  const token_rows batch(static_cast<std::size_t>(state.range(0)));
  const cr::token_layout layout = batch.layout();
  const std::vector<float> rewards = batch.outcome_rewards(),
                           baselines = binary_rewards(batch.rows);
  std::vector<float> advantages(batch.tokens), returns(batch.tokens);
  cascade_rl::bench::bandwidth_meter meter(state, cascade_rl::bench::limit::copy);
  for (auto _ : state) {
    cr::remax_advantages(
        cr::exec::par, layout,
        cr::remax_inputs<float>{.token_rewards = rewards, .reward_baselines = baselines},
        std::span<float>(advantages), std::span<float>(returns));
    benchmark::DoNotOptimize(advantages.data());
    benchmark::ClobberMemory();
  }
  meter.report((3 * batch.tokens + batch.rows) * sizeof(float));
}

// A per-row score put on the tokens by a group estimator: f(groups, layout, scores, out).
template <class Estimator>
void token_group_estimator(benchmark::State& state, std::size_t components,
                           const Estimator& estimator) {
  const token_rows batch(static_cast<std::size_t>(state.range(0)));
  const cr::token_layout layout = batch.layout();
  const cr::group_layout groups = batch.groups();
  const std::vector<float> scores = binary_rewards(components * batch.rows);
  std::vector<float> advantages(batch.tokens);
  cascade_rl::bench::bandwidth_meter meter(state, cascade_rl::bench::limit::copy);
  for (auto _ : state) {
    estimator(groups, layout, std::span<const float>(scores), std::span<float>(advantages));
    benchmark::DoNotOptimize(advantages.data());
    benchmark::ClobberMemory();
  }
  meter.report((batch.tokens + components * batch.rows) * sizeof(float));
}

// OPO: the length-weighted group mean as the baseline.
void opo_advantages_group16(benchmark::State& state) {
  token_group_estimator(state, 1,
                        [](const auto& groups, const auto& layout, auto scores, auto out) {
                          cr::opo_advantages(cr::exec::par, groups, layout, scores, out);
                        });
}

// REINFORCE++-baseline: the group mean as the baseline, whitened over the batch.
void reinforce_plus_plus_baseline_advantages_group16(benchmark::State& state) {
  token_group_estimator(
      state, 1, [](const auto& groups, const auto& layout, auto scores, auto out) {
        cr::reinforce_plus_plus_baseline_advantages(cr::exec::par, groups, layout, scores, out);
      });
}

// GDPO with two reward components of weight 1 (veRL's default weights): GRPO on each,
// the sum on the tokens, whitened over the batch.
void gdpo_advantages_group16_2_components(benchmark::State& state) {
  token_group_estimator(
      state, 2, [](const auto& groups, const auto& layout, auto scores, auto out) {
        static constexpr double weights[] = {1.0, 1.0};
        cr::gdpo_advantages(cr::exec::par, groups, layout,
                            cr::gdpo_inputs<float>{.component_scores = scores, .weights = weights},
                            out);
      });
}

// On-policy distillation: teacher minus student log-prob on every token.
void distillation_advantages(benchmark::State& state) {
  const token_rows batch(static_cast<std::size_t>(state.range(0)));
  const cr::token_layout layout = batch.layout();
  const std::vector<float> teacher = log_probs(batch.tokens, 5),
                           student = log_probs(batch.tokens, 6);
  std::vector<float> advantages(batch.tokens);
  cascade_rl::bench::bandwidth_meter meter(state, cascade_rl::bench::limit::triad);
  for (auto _ : state) {
    cr::distillation_advantages(
        cr::exec::par, layout,
        cr::distillation_inputs<float>{.teacher_log_probs = teacher, .student_log_probs = student},
        std::span<float>(advantages));
    benchmark::DoNotOptimize(advantages.data());
    benchmark::ClobberMemory();
  }
  meter.report(3 * batch.tokens * sizeof(float));
}

// The optimal token baseline, single-turn, as veRL's trainer calls it (handle_zero_tail,
// the function's default there; no rollout IS weights), groups of 16 rows.
void optimal_token_baseline_group16(benchmark::State& state) {
  const token_rows batch(static_cast<std::size_t>(state.range(0)));
  const cr::token_layout layout = batch.layout();
  const cr::group_layout groups = batch.groups();
  const std::vector<float> rewards = batch.outcome_rewards(),
                           old_log_probs = log_probs(batch.tokens, 8);
  // sum over the vocabulary of pi^2: at least the sampled token's pi^2, at most 1.
  std::vector<float> sum_pi_squared(batch.tokens);
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  for (std::size_t t = 0; t < batch.tokens; ++t) {
    const float p = std::exp(old_log_probs[t]);
    sum_pi_squared[t] = p * p + (1.0f - p * p) * uniform(rng);
  }
  std::vector<float> advantages(batch.tokens), returns(batch.tokens);
  const cr::optimal_token_baseline_options options{.handle_zero_tail = true};
  cascade_rl::bench::bandwidth_meter meter(state, cascade_rl::bench::limit::copy);
  for (auto _ : state) {
    cr::optimal_token_baseline_advantages(
        cr::exec::par, groups, layout,
        cr::optimal_token_baseline_inputs<float>{.token_rewards = rewards,
                                                 .old_log_probs = old_log_probs,
                                                 .sum_pi_squared = sum_pi_squared,
                                                 .rollout_is_weights = {}},
        std::span<float>(advantages), std::span<float>(returns), options);
    benchmark::DoNotOptimize(advantages.data());
    benchmark::ClobberMemory();
  }
  meter.report(5 * batch.tokens * sizeof(float));
}

}  // namespace

BENCHMARK(grpo_advantages_group16)->Arg(4096)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime();
BENCHMARK(rloo_advantages_group16)->Arg(4096)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime();
BENCHMARK(reinforce_plus_plus_advantages_outcome)->Arg(4096)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime();
BENCHMARK(gpg_advantages_group16)->Arg(4096)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime();
BENCHMARK(grpo_passk_advantages_group16)->Arg(4096)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime();
BENCHMARK(gae_advantages)->Arg(4096)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime();
BENCHMARK(remax_advantages)->Arg(4096)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime();
BENCHMARK(opo_advantages_group16)->Arg(4096)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime();
BENCHMARK(reinforce_plus_plus_baseline_advantages_group16)
    ->Arg(4096)
    ->Arg(1 << 20)
    ->Arg(1 << 24)
    ->UseRealTime();
BENCHMARK(gdpo_advantages_group16_2_components)
    ->Arg(4096)
    ->Arg(1 << 20)
    ->Arg(1 << 24)
    ->UseRealTime();
BENCHMARK(distillation_advantages)->Arg(4096)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime();
BENCHMARK(optimal_token_baseline_group16)->Arg(4096)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime();
