#pragma once
// What every per-token term returns: the token's loss before aggregation and its
// derivative with respect to the token's log-prob. The same types on the host, in the
// Thrust portable path and in the CUDA kernels.

namespace cascade_rl::terms {

struct token_loss {
  double value = 0;
  double grad = 0;
};

// A token loss that also carries its share of a floating-point metric sum (PPO's
// approx_kl: -log ratio). Every executor adds it in the canonical order beside the loss.
struct token_loss_with_kl : token_loss {
  double approx_kl = 0;
};

}  // namespace cascade_rl::terms
