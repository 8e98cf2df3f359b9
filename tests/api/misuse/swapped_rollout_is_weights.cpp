// Passing veRL's rollout_is_weights where the advantages go (same type) in a CISPO call:
// the inputs are named and designators must follow the declaration order, so the swap
// does not compile instead of weighting the loss by the advantages.
// expect: designator order for field .*advantages.* does not match declaration order|field
// designator .* out of order
#include <cstdint>
#include <vector>

#include "cascade_rl/algorithms/policy_loss.hpp"

namespace cr = cascade_rl;

void swapped(const std::vector<float>& log_probs, const std::vector<float>& old_log_probs,
             const std::vector<float>& advantages, const std::vector<float>& weights,
             std::vector<float>& grad) {
  const std::vector<std::int64_t> offsets{0, 2};
  const cr::token_layout layout(offsets);
#if defined(CASCADE_RL_CORRECT_USE)
  cr::cispo_loss(cr::exec::seq, layout,
                 {.log_probs = log_probs,
                  .old_log_probs = old_log_probs,
                  .advantages = advantages,
                  .rollout_is_weights = weights},
                 grad, cr::loss_normalizer{.tokens = 2});
#else
  cr::cispo_loss(cr::exec::seq, layout,
                 {.log_probs = log_probs,
                  .old_log_probs = old_log_probs,
                  .rollout_is_weights = advantages,
                  .advantages = weights},
                 grad, cr::loss_normalizer{.tokens = 2});
#endif
}
