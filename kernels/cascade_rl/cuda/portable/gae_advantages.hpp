#pragma once
// Generalized advantage estimation on the portable path: the host's backward recurrence
// per sequence (terms/generalized_advantage.hpp), then the batch whitening.

#include "cascade_rl/algorithms/gae_advantages.hpp"
#include "cascade_rl/cuda/portable/common.hpp"
#include "cascade_rl/cuda/portable/whitening.hpp"
#include "cascade_rl/terms/generalized_advantage.hpp"

namespace cascade_rl::cuda::portable::detail {

// GAE, one sequence (for_each_sequence): the host's backward recurrence
// (terms/generalized_advantage.hpp).
template <class T>
struct gae_rule {
  const T* rewards;
  const T* values;
  T* advantages;
  T* returns;
  double gamma;
  double gamma_lambda;
  CASCADE_RL_HD void operator()(const device_token_layout& layout, std::size_t s) const {
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

}  // namespace cascade_rl::cuda::portable::detail

namespace cascade_rl::cuda::portable {

// GAE over the valid tokens: advantages whitened (0 on masked tokens), returns the
// unwhitened advantage plus the value on every token. scratch: whitening_scratch(tokens).
template <class ExecPolicy, class T>
void gae_advantages(ExecPolicy&& exec, const T* token_rewards, const T* values,
                    const device_token_layout& layout, T* advantages, T* returns,
                    const gae_options& options, double* scratch) {
  cascade_rl::detail::require_gae_options(options);
  detail::for_each_sequence(exec, layout,
                            detail::gae_rule<T>{token_rewards, values, advantages, returns,
                                                options.gamma, options.gamma * options.lambda});
  detail::whiten(exec, static_cast<const T*>(advantages), layout, advantages, options.whitening,
                 scratch);
}

}  // namespace cascade_rl::cuda::portable
