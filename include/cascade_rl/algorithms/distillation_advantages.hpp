#pragma once
// Multi-domain on-policy distillation (MOPD, Nemotron-Cascade 2) token advantage:
//   a_t = log pi_teacher(y_t) - log pi_student(y_t)
// on the token the student sampled: the per-token reverse-KL signal of on-policy
// distillation (Agarwal et al. 2024, GKD; Thinking Machines' "On-Policy
// Distillation"). Positive where the teacher likes the sampled token more than the
// student does. 0 on masked tokens; log-probs must be finite on valid tokens only
// (padding often holds -inf or garbage).

#include <concepts>
#include <cstddef>
#include <span>

#include "cascade_rl/core/checks.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/parallel.hpp"
#include "cascade_rl/core/token_layout.hpp"
#include "cascade_rl/terms/distillation_advantage.hpp"

namespace cascade_rl {

template <exec::host_policy Policy, std::floating_point T>
void distillation_advantages(const Policy& policy, std::span<const T> teacher_logp,
                             std::span<const T> student_logp, const token_layout& tokens,
                             std::span<T> advantages) {
  detail::require_size(teacher_logp.size(), tokens.tokens(), "teacher_logp", "one per token");
  detail::require_size(student_logp.size(), tokens.tokens(), "student_logp", "one per token");
  detail::require_size(advantages.size(), tokens.tokens(), "advantages", "one per token");
  detail::require_finite_where_valid(policy, teacher_logp, tokens, "teacher_logp");
  detail::require_finite_where_valid(policy, student_logp, tokens, "student_logp");
  detail::for_each_index(policy, tokens.tokens(), [&](std::size_t t) {
    advantages[t] =
        terms::distillation_advantage(teacher_logp[t], student_logp[t], tokens.valid(t));
  });
}

}  // namespace cascade_rl
