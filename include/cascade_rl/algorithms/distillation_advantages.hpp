#pragma once
// Multi-domain on-policy distillation (MOPD, Nemotron-Cascade 2) token advantage:
//   a_t = log pi_teacher(y_t) - log pi_student(y_t)
// on the token the student sampled: the per-token reverse-KL signal of on-policy
// distillation (Agarwal et al. 2024, GKD; Thinking Machines' "On-Policy
// Distillation"). Positive where the teacher likes the sampled token more than the
// student does. 0 on masked tokens; log-probs must be finite on valid tokens only
// (padding often holds -inf or garbage).

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "cascade_rl/core/checks.hpp"
#include "cascade_rl/core/contiguous_ranges.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/parallel.hpp"
#include "cascade_rl/core/token_layout.hpp"
#include "cascade_rl/terms/distillation_advantage.hpp"

namespace cascade_rl {

// The two log-probs of every sampled token, by name (one type: a swap would compile
// positionally and flip the advantage's sign).
template <std::floating_point T>
struct distillation_inputs {
  std::span<const T> teacher_log_probs;
  std::span<const T> student_log_probs;
};

// a_t = log pi_teacher(y_t) - log pi_student(y_t) on valid tokens, 0 on masked ones.
template <exec::host_policy Policy, contiguous_output Out>
void distillation_advantages(const Policy& policy, const token_layout& tokens,
                             const distillation_inputs<output_value_t<Out>>& inputs,
                             Out&& advantages_out) {
  const auto teacher_logp = inputs.teacher_log_probs;
  const auto student_logp = inputs.student_log_probs;
  const auto advantages = output_span(advantages_out);
  detail::require_size(teacher_logp.size(), tokens.tokens(), "teacher_log_probs", "one per token");
  detail::require_size(student_logp.size(), tokens.tokens(), "student_log_probs", "one per token");
  detail::require_size(advantages.size(), tokens.tokens(), "advantages", "one per token");
  // One pass: each block of tokens writes its advantages and notes whether a valid
  // token's difference is not finite (x - x == 0 fails for inf and NaN; a NaN or an
  // infinite log-prob makes the difference so), in a loop free of branches that
  // vectorises. Only then, and only if a block noted one, the checks that name the first
  // bad input run (the advantages are written by then, as the losses write grad_out).
  // Three passes (two checks, then the map) took 3.3x this time at 16M tokens.
  using T = output_value_t<Out>;
  const std::size_t n = tokens.tokens();
  const std::uint8_t* mask = tokens.has_mask() ? tokens.mask().data() : nullptr;
  constexpr std::size_t block = detail::reduce_block_size;
  std::vector<std::uint8_t> nonfinite((n + block - 1) / block, 0);
  detail::for_each_index(
      policy, nonfinite.size(),
      [&](std::size_t b) {
        const std::size_t last = std::min(n, (b + 1) * block);
        unsigned seen = 0;
        for (std::size_t t = b * block; t < last; ++t) {
          const bool valid = mask == nullptr || mask[t] != 0;
          const T difference = teacher_logp[t] - student_logp[t];
          seen |= static_cast<unsigned>(valid) &
                  static_cast<unsigned>(!(difference - difference == T(0)));
          advantages[t] = terms::distillation_advantage(teacher_logp[t], student_logp[t], valid);
        }
        nonfinite[b] = static_cast<std::uint8_t>(seen);
      },
      /*min_parallel=*/1);
  if (std::find(nonfinite.begin(), nonfinite.end(), std::uint8_t{1}) != nonfinite.end()) {
    detail::require_finite_where_valid(policy, teacher_logp, tokens, "teacher_log_probs");
    detail::require_finite_where_valid(policy, student_logp, tokens, "student_log_probs");
  }
}

}  // namespace cascade_rl
