// Swapping log_probs and old_log_probs (same type) in a PPO call: the inputs are named, and
// C++20 designated initializers must follow the declaration order, so the swap does not
// compile instead of training on a reversed ratio.
// expect: designator order for field .*log_probs.* does not match declaration order|field
// designator .* out of order
#include <cstdint>
#include <vector>

#include "cascade_rl/algorithms/policy_loss.hpp"

namespace cr = cascade_rl;

void swapped(const std::vector<float>& log_probs, const std::vector<float>& old_log_probs,
             const std::vector<float>& advantages, std::vector<float>& grad) {
  const std::vector<std::int64_t> offsets{0, 2};
  const cr::token_layout layout(offsets);
#if defined(CASCADE_RL_CORRECT_USE)
  cr::ppo_clip_loss(
      cr::exec::seq, layout,
      {.log_probs = log_probs, .old_log_probs = old_log_probs, .advantages = advantages}, grad,
      cr::loss_normalizer{.tokens = 2});
#else
  cr::ppo_clip_loss(
      cr::exec::seq, layout,
      {.old_log_probs = log_probs, .log_probs = old_log_probs, .advantages = advantages}, grad,
      cr::loss_normalizer{.tokens = 2});
#endif
}
