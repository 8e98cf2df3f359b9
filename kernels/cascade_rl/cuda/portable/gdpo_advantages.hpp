#pragma once
// GDPO on the portable path: GRPO per reward component (group_advantages.hpp), each added
// with its weight per sequence, then the batch whitening.

#include "cascade_rl/algorithms/gdpo_advantages.hpp"
#include "cascade_rl/cuda/portable/broadcast.hpp"
#include "cascade_rl/cuda/portable/common.hpp"
#include "cascade_rl/cuda/portable/group_advantages.hpp"
#include "cascade_rl/cuda/portable/whitening.hpp"
#include "cascade_rl/terms/weighted_components.hpp"

namespace cascade_rl::cuda::portable::detail {

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

}  // namespace cascade_rl::cuda::portable::detail

namespace cascade_rl::cuda::portable {

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
    detail::group_advantages(exec, component_scores + k * n, groups, component,
                             static_cast<group_statistic*>(nullptr), p);
    detail::for_each_index(exec, n,
                           detail::gdpo_combine_functor<T>{component, weights[k], k == 0,
                                                           k + 1 == components, sums, combined});
  }
  portable::broadcast_to_tokens(exec, static_cast<const T*>(combined), layout, advantages);
  detail::whiten(exec, static_cast<const T*>(advantages), layout, advantages, options.whitening,
                 scratch);
}

}  // namespace cascade_rl::cuda::portable
