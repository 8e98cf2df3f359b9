#pragma once
// GPG outcome advantages (Chu et al. 2025), as veRL computes them
// (compute_gpg_outcome_advantage in verl/trainer/ppo/core_algos.py), per sequence:
//   A_i = alpha * (s_i - mean_g(s)) / f_norm,   alpha = N / max(#{i : s_i != 0}, 1)
// with N and the non-zero count over the whole batch (so, like whitening, the batch is
// the normaliser: a caller that splits a batch computes before splitting). No std
// scaling. The output is per sequence, as GRPO's; broadcast_to_tokens puts it on tokens.
//
// Conventions (terms/gpg_advantage.hpp): a zero-variance group gets exactly 0; a group
// of one follows options.singleton (veRL: mean 0, so alpha * s / f_norm, which is
// singleton_rule::raw_score); under nonfinite_rule::zero_group a non-finite score counts
// as non-zero in alpha and its group gets 0.

#include <concepts>
#include <cstddef>
#include <span>
#include <string>

#include "cascade_rl/algorithms/group_statistics.hpp"
#include "cascade_rl/core/checks.hpp"
#include "cascade_rl/core/contiguous_ranges.hpp"
#include "cascade_rl/core/error.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/group_layout.hpp"
#include "cascade_rl/core/parallel.hpp"
#include "cascade_rl/options/group_estimators.hpp"
#include "cascade_rl/terms/gpg_advantage.hpp"

namespace cascade_rl {

namespace detail {

inline void require_gpg_options(const gpg_options& options) {
  if (!(options.f_norm > 0.0) || !std::isfinite(options.f_norm))
    fail("options.f_norm", "must be finite and > 0, got " + std::to_string(options.f_norm));
  if (options.accumulation == mean_accumulation::float32_rounded_sum)
    fail("options.accumulation",
         "float32_rounded_sum is for batch means; a group mean takes double_precision or "
         "float32_sequential");
}

}  // namespace detail

template <exec::host_policy Policy, contiguous_output Out>
void gpg_advantages(const Policy& policy, const group_layout& groups,
                    std::span<const output_value_t<Out>> scores, Out&& advantages_out,
                    const gpg_options& options = {}) {
  using T = output_value_t<Out>;
  const auto advantages = output_span(advantages_out);
  detail::require_gpg_options(options);
  groups.require_sequences(scores.size(), "scores");
  detail::require_size(advantages.size(), scores.size(), "advantages", "one per score");
  if (options.nonfinite == nonfinite_rule::error) detail::require_finite(policy, scores, "scores");
  if (options.singleton == singleton_rule::error) detail::refuse_singleton_groups(groups, "GPG");
  const std::size_t nonzero = detail::blocked_reduce(
      policy, scores.size(), std::size_t{0},
      [&](std::size_t& acc, std::size_t i) { acc += scores[i] != T(0) ? 1 : 0; },
      [](std::size_t& total, std::size_t part) { total += part; });
  const double scale = terms::gpg_scale(scores.size(), nonzero, options.f_norm);
  detail::for_each_group(
      policy, scores, groups, options.nonfinite,
      [&](std::size_t first, std::size_t last, bool zero_group) {
        const detail::group_moments m =
            detail::moments_to_plan(scores, first, last, zero_group, options.accumulation);
        const terms::gpg_plan plan = terms::plan_gpg(m, options.singleton);
        for (std::size_t s = first; s < last; ++s)
          advantages[s] = terms::gpg_advantage(scores[s], m, plan, scale, options.accumulation);
      });
}

}  // namespace cascade_rl
