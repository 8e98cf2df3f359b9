// The positional form of a loss (log-prob spans one after another, the old API) no longer
// exists: same-typed inputs are passed by name.
// expect: no matching function for call to .*reinforce_loss
#include <cstdint>
#include <span>
#include <vector>

#include "cascade_rl/algorithms/policy_loss.hpp"

namespace cr = cascade_rl;

void positional(const std::vector<float>& log_probs, const std::vector<float>& advantages,
                std::vector<float>& grad) {
  const std::vector<std::int64_t> offsets{0, 2};
  const cr::token_layout layout(offsets);
#if defined(CASCADE_RL_CORRECT_USE)
  cr::reinforce_loss(cr::exec::seq, layout, {.log_probs = log_probs, .advantages = advantages},
                     grad, cr::loss_normalizer{.tokens = 2});
#else
  cr::reinforce_loss(cr::exec::seq, layout, std::span<const float>(log_probs),
                     std::span<const float>(advantages), std::span<float>(grad),
                     cr::loss_normalizer{.tokens = 2});
#endif
}
