#pragma once
// Per-token losses and their gradients that a caller computed and owns (the presets' KL
// terms, a custom term), to aggregate with aggregate_token_losses like any loss. An owning
// pair beside the borrowed token_loss_inputs: the terms convert to that view, from an
// lvalue only, so the view cannot outlive them:
//
//   const auto kl = presets::nemo_rl::kl_token_terms<float>(config, layout, ...);
//   if (!kl.empty()) loss += aggregate_token_losses(exec::par, layout, kl, grad, ...);

#include <concepts>
#include <vector>

#include "cascade_rl/algorithms/loss_inputs.hpp"

namespace cascade_rl {

template <std::floating_point T>
struct token_loss_terms {
  std::vector<T> token_losses;  // one per token, 0 where the term does not act
  std::vector<T> token_grads;   // d token_losses[t] / d logp_t

  // Empty: the caller's config has no such term.
  [[nodiscard]] bool empty() const { return token_losses.empty(); }

  // The borrowed view aggregate_token_losses takes.
  operator token_loss_inputs<T>() const& { return {token_losses, token_grads}; }
  operator token_loss_inputs<T>() const&& = delete;  // would dangle: keep the terms in a variable
};

}  // namespace cascade_rl
