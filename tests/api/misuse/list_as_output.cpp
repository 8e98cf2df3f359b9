// A gradient written into a std::list (not contiguous): refused at compile time, and the
// message says which requirement failed.
// expect: contiguous_output
#include <cstdint>
#include <list>
#include <vector>

#include "cascade_rl/algorithms/policy_loss.hpp"

namespace cr = cascade_rl;

void into_a_list(const std::vector<float>& log_probs, const std::vector<float>& advantages) {
  const std::vector<std::int64_t> offsets{0, 2};
  const cr::token_layout layout(offsets);
#if defined(CASCADE_RL_CORRECT_USE)
  std::vector<float> grad(2);
#else
  std::list<float> grad(2);
#endif
  cr::reinforce_loss(cr::exec::seq, layout, {.log_probs = log_probs, .advantages = advantages},
                     grad, cr::loss_normalizer{.tokens = 2});
}
