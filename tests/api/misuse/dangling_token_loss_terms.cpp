// Keeping the token_loss_inputs view of a temporary token_loss_terms: the view would point
// into vectors destroyed at the end of the statement, so the conversion from an rvalue is
// deleted; keep the terms in a variable.
// expect: deleted
#include <vector>

#include "cascade_rl/algorithms/token_loss_terms.hpp"

namespace cr = cascade_rl;

cr::token_loss_terms<float> make_terms() { return {std::vector<float>(2), std::vector<float>(2)}; }

float dangling() {
#if defined(CASCADE_RL_CORRECT_USE)
  const auto terms = make_terms();
  const cr::token_loss_inputs<float> view = terms;
#else
  const cr::token_loss_inputs<float> view = make_terms();
#endif
  return view.token_losses.empty() ? 0.0f : 1.0f;
}
