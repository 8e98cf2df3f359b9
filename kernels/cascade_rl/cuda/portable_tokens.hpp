#pragma once
// The portable Thrust path, continued (included from portable.hpp): token-level
// advantages. broadcast_to_tokens, place_on_last_valid_token, distillation advantages,
// discounted returns, batch whitening, REINFORCE++, REINFORCE++-baseline, GAE,
// ReMax, OPO, GPG (per sequence, with the batch's non-zero count) and GRPO pass@k.
//
// The whitening keeps the host core's order (detail::blocked_sum of parallel.hpp, the
// canonical order of canonical_sum.hpp): one Thrust work item per block of
// reduce_block_size tokens, the block sums added in block order by a single work item. Sequences
// and groups are one work item each, in the host core's order. Under the CPP and OMP
// systems the results are therefore the host core's bits, for any thread count.
//
// As in portable.hpp, data is not validated (the convenience layer over the CUB path does
// that); these functions throw cascade_rl::error, with the host core's message, only
// for options the host core refuses and for a batch of one valid token under the
// unbiased whitening, which they find anyway.

#include <thrust/functional.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/transform_reduce.h>

#include <cstddef>
#include <cstdint>
#include <cuda/std/cmath>

#include "cascade_rl/algorithms/gae_advantages.hpp"
#include "cascade_rl/algorithms/gdpo_advantages.hpp"
#include "cascade_rl/algorithms/gpg_advantages.hpp"
#include "cascade_rl/algorithms/grpo_passk_advantages.hpp"
#include "cascade_rl/algorithms/opo_advantages.hpp"
#include "cascade_rl/algorithms/reinforce_plus_plus.hpp"
#include "cascade_rl/algorithms/remax_advantages.hpp"
#include "cascade_rl/core/parallel.hpp"
#include "cascade_rl/cuda/detail/math.hpp"
#include "cascade_rl/cuda/device_layout.hpp"
#include "cascade_rl/cuda/portable.hpp"
#include "cascade_rl/terms/generalized_advantage.hpp"
#include "cascade_rl/terms/gpg_advantage.hpp"
#include "cascade_rl/terms/length_weighted_baseline.hpp"
#include "cascade_rl/terms/passk_advantage.hpp"
#include "cascade_rl/terms/reward_to_go.hpp"
#include "cascade_rl/terms/weighted_components.hpp"

namespace cascade_rl::cuda::portable {
namespace detail {

using namespace cascade_rl::cuda::detail;

template <class T>
struct broadcast_functor {
  const T* per_sequence;
  device_token_layout layout;
  T* per_token;
  CASCADE_RL_HD void operator()(std::size_t s) const {
    for (std::size_t t = layout.begin(s); t < layout.end(s); ++t)
      per_token[t] = layout.valid(t) ? per_sequence[s] : T(0);
  }
};

template <class T>
struct place_on_last_functor {
  const T* per_sequence;
  device_token_layout layout;
  T* per_token;
  CASCADE_RL_HD void operator()(std::size_t s) const {
    bool placed = false;
    for (std::size_t t = layout.end(s); t-- > layout.begin(s);) {
      const bool here = !placed && layout.valid(t);
      per_token[t] = here ? per_sequence[s] : T(0);
      placed = placed || here;
    }
  }
};

template <class T>
struct distillation_functor {
  const T* teacher;
  const T* student;
  device_token_layout layout;
  T* advantages;
  CASCADE_RL_HD void operator()(std::size_t t) const {
    advantages[t] = distillation_advantage(teacher[t], student[t], layout.valid(t));
  }
};

template <class T>
struct returns_functor {
  const T* rewards;
  device_token_layout layout;
  T* returns;
  double gamma;
  masked_token_return masked;
  CASCADE_RL_HD void operator()(std::size_t s) const {
    double run = 0.0;
    for (std::size_t t = layout.end(s); t-- > layout.begin(s);) {
      const terms::return_step step = terms::discounted_return_step(
          static_cast<double>(rewards[t]), layout.valid(t), gamma, run, masked);
      returns[t] = static_cast<T>(step.value);
      run = step.run;
    }
  }
};

// GAE, one sequence: the host's backward recurrence (terms/generalized_advantage.hpp).
template <class T>
struct gae_functor {
  const T* rewards;
  const T* values;
  device_token_layout layout;
  T* advantages;
  T* returns;
  double gamma;
  double gamma_lambda;
  CASCADE_RL_HD void operator()(std::size_t s) const {
    terms::gae_state state;
    for (std::size_t t = layout.end(s); t-- > layout.begin(s);) {
      const bool valid = layout.valid(t);
      const double value = static_cast<double>(values[t]);
      state = terms::gae_step(valid ? static_cast<double>(rewards[t]) : 0.0, value, valid, gamma,
                              gamma_lambda, state);
      const T advantage = static_cast<T>(state.advantage);
      advantages[t] = advantage;
      returns[t] = static_cast<T>(static_cast<double>(advantage) + value);
    }
  }
};

// ReMax, one sequence: the host's reward-to-go (terms/reward_to_go.hpp).
template <class T>
struct remax_functor {
  const T* rewards;
  const T* baselines;
  device_token_layout layout;
  T* advantages;
  T* returns;
  CASCADE_RL_HD void operator()(std::size_t s) const {
    double run = 0.0;
    for (std::size_t t = layout.end(s); t-- > layout.begin(s);) {
      const bool valid = layout.valid(t);
      run = terms::reward_to_go(valid ? static_cast<double>(rewards[t]) : 0.0, valid, run);
      const T stored = static_cast<T>(run);
      returns[t] = stored;
      advantages[t] = terms::baseline_advantage(stored, baselines[s], valid);
    }
  }
};

// OPO, one group: the host's length-weighted baseline (terms/length_weighted_baseline.hpp)
// in index order, then the advantage on every token of the group.
template <class T>
struct opo_functor {
  const T* scores;
  device_group_layout groups;
  device_token_layout layout;
  T* advantages;
  opo_options options;
  CASCADE_RL_HD std::size_t valid_tokens(std::size_t s) const {
    std::size_t n = 0;
    for (std::size_t t = layout.begin(s); t < layout.end(s); ++t) n += layout.valid(t) ? 1 : 0;
    return n;
  }
  CASCADE_RL_HD void operator()(std::size_t g) const {
    const std::size_t first = groups.begin(g);
    const std::size_t last = groups.end(g);
    bool nonfinite = false;
    for (std::size_t s = first; s < last; ++s)
      nonfinite = nonfinite || !::cuda::std::isfinite(scores[s]);
    const bool zero_group = nonfinite && options.nonfinite == nonfinite_rule::zero_group;
    terms::opo_sums sums;
    if (!zero_group)
      for (std::size_t s = first; s < last; ++s)
        terms::opo_add(sums, static_cast<double>(scores[s]), valid_tokens(s));
    const terms::opo_group plan = terms::opo_group_of(sums, options.singleton, zero_group);
    for (std::size_t s = first; s < last; ++s)
      for (std::size_t t = layout.begin(s); t < layout.end(s); ++t)
        advantages[t] = terms::opo_advantage(scores[s], plan, layout.valid(t));
  }
};

// GPG, one group: the host's moments and terms::gpg_advantage with the batch's scale.
template <class T>
struct gpg_functor {
  const T* scores;
  device_group_layout groups;
  T* advantages;
  double scale;
  gpg_options options;
  CASCADE_RL_HD void operator()(std::size_t g) const {
    const std::size_t first = groups.begin(g);
    const std::size_t last = groups.end(g);
    const group_moments m = sequential_moments(scores, first, last, options.accumulation);
    const terms::gpg_plan plan = terms::plan_gpg(m, options.singleton);
    for (std::size_t i = first; i < last; ++i)
      advantages[i] = terms::gpg_advantage(scores[i], m, plan, scale, options.accumulation);
  }
};

template <class T>
struct is_nonzero {
  const T* values;
  CASCADE_RL_HD unsigned long long operator()(std::size_t i) const {
    return values[i] != T(0) ? 1 : 0;
  }
};

// GRPO pass@k, one group: the host's terms::passk_group.
template <class T>
struct passk_functor {
  const T* scores;
  device_group_layout groups;
  T* advantages;
  grpo_passk_options params;
  CASCADE_RL_HD void operator()(std::size_t g) const {
    const std::size_t first = groups.begin(g);
    const std::size_t last = groups.end(g);
    bool bad = false;
    for (std::size_t s = first; s < last; ++s) bad = bad || !::cuda::std::isfinite(scores[s]);
    terms::passk_group(scores, first, last, bad, params, advantages);
  }
};

// GDPO: one component's advantage added with its weight, one sequence per work item.
template <class T>
struct gdpo_combine_functor {
  const T* component;
  double weight;
  bool first;
  bool last;
  double* sum;
  T* out;
  CASCADE_RL_HD void operator()(std::size_t s) const {
    const double acc = terms::add_weighted_component(first ? 0.0 : sum[s], weight,
                                                     static_cast<double>(component[s]));
    sum[s] = acc;
    if (last) out[s] = static_cast<T>(acc);
  }
};

// REINFORCE++-baseline, one group: score - mean on the valid tokens of its sequences.
template <class T>
struct baseline_functor {
  const T* scores;
  device_group_layout groups;
  device_token_layout layout;
  T* advantages;
  group_params p;
  CASCADE_RL_HD void operator()(std::size_t g) const {
    const std::size_t first = groups.begin(g);
    const std::size_t last = groups.end(g);
    const group_moments m = sequential_moments(scores, first, last, p.accumulation);
    const group_plan plan = plan_group(m, p);
    for (std::size_t s = first; s < last; ++s) {
      const T v = advantage_of(scores[s], m, plan, p);
      for (std::size_t t = layout.begin(s); t < layout.end(s); ++t)
        advantages[t] = layout.valid(t) ? v : T(0);
    }
  }
};

struct is_valid_token {
  device_token_layout layout;
  CASCADE_RL_HD unsigned long long operator()(std::size_t t) const { return layout.valid(t) ? 1 : 0; }
};

// One block of blocked_sum: the valid values (or their squared deviations from
// state[0], the mean) summed in the canonical order (canonical_sum.hpp); masked tokens
// add 0.0 as there.
template <class T, bool Squares>
struct whiten_block_functor {
  device_token_layout layout;
  const T* values;
  double* scratch;  // block sums, then the mean and the inverse scale
  mean_accumulation accumulation;
  CASCADE_RL_HD void operator()(std::size_t b) const {
    const std::size_t first = b * cascade_rl::detail::reduce_block_size;
    const std::size_t last = min_of(first + cascade_rl::detail::reduce_block_size, layout.tokens);
    const std::size_t blocks = (layout.tokens + cascade_rl::detail::reduce_block_size - 1) /
                               cascade_rl::detail::reduce_block_size;
    scratch[b] = cascade_rl::detail::canonical_block_sum(first, last, [&](std::size_t t) {
      if (!layout.valid(t)) return 0.0;
      if constexpr (Squares) {
        const double d = terms::deviation(values[t], scratch[blocks], accumulation);
        return d * d;
      } else {
        return static_cast<double>(values[t]);
      }
    });
  }
};

// The block sums added in block order from 0.0, then the mean (Squares false, into
// scratch[blocks]) or the inverse scale (Squares true, into scratch[blocks + 1]).
template <bool Squares>
struct whiten_total_functor {
  double* scratch;
  std::size_t blocks;
  unsigned long long count;
  whitening_options p;
  CASCADE_RL_HD void operator()(std::size_t) const {
    double total = 0.0;
    for (std::size_t b = 0; b < blocks; ++b) total += scratch[b];
    if constexpr (Squares)
      scratch[blocks + 1] = terms::whitening_inv_scale(total, count, p.estimator, p.epsilon);
    else
      scratch[blocks] = terms::whitening_mean(total, count, p.accumulation);
  }
};

template <class T>
struct whiten_apply_functor {
  device_token_layout layout;
  const T* values;
  T* out;
  const double* state;  // mean, inverse scale
  whitening_options p;
  CASCADE_RL_HD void operator()(std::size_t t) const {
    out[t] = layout.valid(t) ? terms::whitened(values[t], state[0], state[1], p.accumulation, p.shift_mean)
                             : T(0);
  }
};

template <class T>
struct zero_functor {
  T* out;
  CASCADE_RL_HD void operator()(std::size_t t) const { out[t] = T(0); }
};

// detail::whiten_valid_tokens of the host core; values and out may be the same array.
template <class ExecPolicy, class T>
void whiten(ExecPolicy&& exec, const T* values, const device_token_layout& layout, T* out,
            const whitening_options& options, double* scratch) {
  const std::size_t n = layout.tokens;
  const thrust::counting_iterator<std::size_t> index(0);
  const unsigned long long count =
      n == 0 ? 0
             : thrust::transform_reduce(exec, index, index + n, is_valid_token{layout}, 0ull,
                                        thrust::plus<unsigned long long>());
  if (count == 0) {
    for_each_index(exec, n, zero_functor<T>{out});
    return;
  }
  if (options.estimator == std_estimator::unbiased && count < 2)
    cascade_rl::detail::fail("tokens",
                             "has 1 valid token, but whitening with the unbiased variance needs at least 2");
  const whitening_options& p = options;
  const std::size_t blocks =
      (n + cascade_rl::detail::reduce_block_size - 1) / cascade_rl::detail::reduce_block_size;
  for_each_index(exec, blocks, whiten_block_functor<T, false>{layout, values, scratch, p.accumulation});
  for_each_index(exec, 1, whiten_total_functor<false>{scratch, blocks, count, p});
  for_each_index(exec, blocks, whiten_block_functor<T, true>{layout, values, scratch, p.accumulation});
  for_each_index(exec, 1, whiten_total_functor<true>{scratch, blocks, count, p});
  for_each_index(exec, n, whiten_apply_functor<T>{layout, values, out, scratch + blocks, p});
}

inline void require_gamma(double gamma) {
  if (!(gamma >= 0.0 && gamma <= 1.0))
    cascade_rl::detail::fail("gamma", "must lie in [0, 1], got " + std::to_string(gamma));
}

}  // namespace detail

// ---- per-sequence values onto tokens ------------------------------------------------------

template <class ExecPolicy, class T>
void broadcast_to_tokens(ExecPolicy&& exec, const T* per_sequence, const device_token_layout& layout,
                         T* per_token) {
  detail::for_each_index(exec, layout.sequences,
                         detail::broadcast_functor<T>{per_sequence, layout, per_token});
}

// A sequence with no valid token gets zeros (the host core and the CUDA layer refuse it).
template <class ExecPolicy, class T>
void place_on_last_valid_token(ExecPolicy&& exec, const T* per_sequence,
                               const device_token_layout& layout, T* per_token) {
  detail::for_each_index(exec, layout.sequences,
                         detail::place_on_last_functor<T>{per_sequence, layout, per_token});
}

// ---- on-policy distillation ------------------------------------------------------------------

template <class ExecPolicy, class T>
void distillation_advantages(ExecPolicy&& exec, const T* teacher_logp, const T* student_logp,
                             const device_token_layout& layout, T* advantages) {
  detail::for_each_index(exec, layout.tokens,
                         detail::distillation_functor<T>{teacher_logp, student_logp, layout, advantages});
}

// ---- REINFORCE++ ------------------------------------------------------------------------------

// Doubles of scratch a whitening over `tokens` tokens needs.
[[nodiscard]] inline std::size_t whitening_scratch(std::size_t tokens) {
  return (tokens + cascade_rl::detail::reduce_block_size - 1) / cascade_rl::detail::reduce_block_size + 2;
}

// Batch whitening over the valid tokens, 0 on masked tokens; whitened may be values.
template <class ExecPolicy, class T>
void masked_whiten(ExecPolicy&& exec, const T* values, const device_token_layout& layout,
                   T* whitened, const whitening_options& options, double* scratch) {
  cascade_rl::detail::require_whitening_options(options);
  detail::whiten(exec, values, layout, whitened, options, scratch);
}

template <class ExecPolicy, class T>
void discounted_returns(ExecPolicy&& exec, const T* token_rewards,
                        const device_token_layout& layout, T* returns, double gamma = 1.0,
                        masked_token_return masked = masked_token_return::carry) {
  detail::require_gamma(gamma);
  detail::for_each_index(exec, layout.sequences,
                         detail::returns_functor<T>{token_rewards, layout, returns, gamma, masked});
}

// Discounted returns written to advantages, whitened there.
template <class ExecPolicy, class T>
void reinforce_plus_plus_advantages(ExecPolicy&& exec, const T* token_rewards,
                                    const device_token_layout& layout, T* advantages,
                                    const reinforce_plus_plus_options& options, double* scratch) {
  cascade_rl::detail::require_whitening_options(options.whitening);
  portable::discounted_returns(exec, token_rewards, layout, advantages, options.gamma,
                               options.masked);
  detail::whiten(exec, static_cast<const T*>(advantages), layout, advantages, options.whitening, scratch);
}

// score_i - mean_g(score) on the valid tokens of sequence i, whitened over the batch.
template <class ExecPolicy, class T>
void reinforce_plus_plus_baseline_advantages(ExecPolicy&& exec, const T* scores,
                                             const device_group_layout& groups,
                                             const device_token_layout& layout, T* advantages,
                                             const reinforce_plus_plus_baseline_options& options,
                                             double* scratch) {
  cascade_rl::detail::require_whitening_options(options.whitening);
  detail::for_each_index(exec, groups.groups,
                         detail::baseline_functor<T>{scores, groups, layout, advantages,
                                                     detail::group_params_of(options)});
  detail::whiten(exec, static_cast<const T*>(advantages), layout, advantages, options.whitening, scratch);
}

// ---- GAE -----------------------------------------------------------------------------------

// GAE over the valid tokens: advantages whitened (0 on masked tokens), returns the
// unwhitened advantage plus the value on every token. scratch: whitening_scratch(tokens).
template <class ExecPolicy, class T>
void gae_advantages(ExecPolicy&& exec, const T* token_rewards, const T* values,
                    const device_token_layout& layout, T* advantages, T* returns,
                    const gae_options& options, double* scratch) {
  cascade_rl::detail::require_gae_options(options);
  detail::for_each_index(exec, layout.sequences,
                         detail::gae_functor<T>{token_rewards, values, layout, advantages, returns,
                                                options.gamma, options.gamma * options.lambda});
  detail::whiten(exec, static_cast<const T*>(advantages), layout, advantages, options.whitening,
                 scratch);
}

// ---- ReMax ---------------------------------------------------------------------------------

// Advantages (return - baseline on valid tokens, 0 on masked ones) and returns (the
// reward-to-go over the valid tokens, on every token); reward_baselines: one per sequence.
template <class ExecPolicy, class T>
void remax_advantages(ExecPolicy&& exec, const T* token_rewards, const T* reward_baselines,
                      const device_token_layout& layout, T* advantages, T* returns,
                      const remax_options& = {}) {
  detail::for_each_index(
      exec, layout.sequences,
      detail::remax_functor<T>{token_rewards, reward_baselines, layout, advantages, returns});
}

// ---- OPO -----------------------------------------------------------------------------------

// score_i - (sum |o_j| s_j / sum |o_j|) over the group, on every valid token of i.
template <class ExecPolicy, class T>
void opo_advantages(ExecPolicy&& exec, const T* scores, const device_group_layout& groups,
                    const device_token_layout& layout, T* advantages, const opo_options& options) {
  detail::for_each_index(exec, groups.groups,
                         detail::opo_functor<T>{scores, groups, layout, advantages, options});
}

// ---- GPG -----------------------------------------------------------------------------------

// alpha (s_i - mean_g) / f_norm per sequence, alpha = N / max(non-zero scores, 1) over the
// batch.
template <class ExecPolicy, class T>
void gpg_advantages(ExecPolicy&& exec, const T* scores, const device_group_layout& groups,
                    T* advantages, const gpg_options& options = {}) {
  cascade_rl::detail::require_gpg_options(options);
  const std::size_t n = groups.sequences;
  const thrust::counting_iterator<std::size_t> index(0);
  const unsigned long long nonzero =
      n == 0 ? 0
             : thrust::transform_reduce(exec, index, index + n, detail::is_nonzero<T>{scores}, 0ull,
                                        thrust::plus<unsigned long long>());
  const double scale = terms::gpg_scale(n, static_cast<std::size_t>(nonzero), options.f_norm);
  detail::for_each_index(exec, groups.groups,
                         detail::gpg_functor<T>{scores, groups, advantages, scale, options});
}

// ---- GRPO pass@k ----------------------------------------------------------------------------

// The best sequence of each group: (r_max - r_second) [/ (std + eps)]; the others 0.
template <class ExecPolicy, class T>
void grpo_passk_advantages(ExecPolicy&& exec, const T* scores, const device_group_layout& groups,
                           T* advantages, const grpo_passk_options& options = {}) {
  cascade_rl::detail::require_passk_options(options);
  detail::for_each_index(exec, groups.groups,
                         detail::passk_functor<T>{scores, groups, advantages, options});
}

// ---- GDPO ----------------------------------------------------------------------------------

// Elements of scratch (in T) a GDPO over `sequences` sequences needs besides the whitening's.
[[nodiscard]] inline std::size_t gdpo_scratch(std::size_t sequences) { return 2 * sequences; }

// GRPO per component (component_scores: components x sequences, component-major), the
// weighted sum in component order, on the valid tokens, whitened over the batch.
// per_sequence: gdpo_scratch(sequences) values of T; sums: sequences doubles; scratch:
// whitening_scratch(tokens). weights: host memory.
template <class ExecPolicy, class T>
void gdpo_advantages(ExecPolicy&& exec, const T* component_scores, const double* weights,
                     std::size_t components, const device_group_layout& groups,
                     const device_token_layout& layout, T* advantages, const gdpo_options& options,
                     T* per_sequence, double* sums, double* scratch) {
  cascade_rl::detail::require_epsilon(options.grpo.epsilon, "options.grpo.epsilon");
  cascade_rl::detail::require_whitening_options(options.whitening);
  cascade_rl::detail::require_gdpo_weights(std::span<const double>(weights, components));
  const std::size_t n = groups.sequences;
  T* component = per_sequence;
  T* combined = per_sequence + n;
  const terms::group_params p = cascade_rl::detail::group_params_of(options.grpo);
  for (std::size_t k = 0; k < components; ++k) {
    detail::for_each_index(
        exec, groups.groups,
        detail::group_functor<T>{component_scores + k * n, groups, component, nullptr, p});
    detail::for_each_index(exec, n,
                           detail::gdpo_combine_functor<T>{component, weights[k], k == 0,
                                                           k + 1 == components, sums, combined});
  }
  portable::broadcast_to_tokens(exec, static_cast<const T*>(combined), layout, advantages);
  detail::whiten(exec, static_cast<const T*>(advantages), layout, advantages, options.whitening,
                 scratch);
}

}  // namespace cascade_rl::cuda::portable
