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
#include "cascade_rl/algorithms/uniform_group_tiles.hpp"
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

// What one pass over the scores learns: how many are not 0 (alpha's count; a NaN counts,
// as veRL's `scores != 0` does) and whether one is NaN or infinite.
struct gpg_score_census {
  std::size_t nonzero = 0;
  bool nonfinite = false;
};

template <class Policy, std::floating_point T>
gpg_score_census gpg_census_of(const Policy& policy, std::span<const T> scores) {
  return blocked_reduce(
      policy, scores.size(), gpg_score_census{},
      [&](gpg_score_census& acc, std::size_t i) {
        acc.nonzero += scores[i] != T(0) ? 1 : 0;
        acc.nonfinite |= scores[i] - scores[i] != T(0);  // inf - inf and NaN - NaN are NaN
      },
      [](gpg_score_census& total, const gpg_score_census& part) {
        total.nonzero += part.nonzero;
        total.nonfinite = total.nonfinite || part.nonfinite;
      });
}

}  // namespace detail

// Two passes over the scores: alpha's count (with their finiteness), then the groups. With
// uniform groups of 2 to 64 in double precision and finite scores, the groups go through
// GRPO's group tiles as the plain baseline scaled by alpha / f_norm (uniform_group_tiles.hpp:
// gpg_advantage's scale * (s - mean), the same bits).
template <exec::host_policy Policy, contiguous_output Out>
void gpg_advantages(const Policy& policy, const group_layout& groups,
                    std::span<const output_value_t<Out>> scores, Out&& advantages_out,
                    const gpg_options& options = {}) {
  const auto advantages = output_span(advantages_out);
  detail::require_gpg_options(options);
  groups.require_sequences(scores.size(), "scores");
  detail::require_size(advantages.size(), scores.size(), "advantages", "one per score");
  const detail::gpg_score_census census = detail::gpg_census_of(policy, scores);
  if (census.nonfinite && options.nonfinite == nonfinite_rule::error)
    detail::require_finite(policy, scores, "scores");
  if (options.singleton == singleton_rule::error) detail::refuse_singleton_groups(groups, "GPG");
  const double scale = terms::gpg_scale(scores.size(), census.nonzero, options.f_norm);
  const auto group = [&](std::size_t first, std::size_t last, bool zero_group) {
    const detail::group_moments m =
        detail::moments_to_plan(scores, first, last, zero_group, options.accumulation);
    const terms::gpg_plan plan = terms::plan_gpg(m, options.singleton);
    for (std::size_t s = first; s < last; ++s)
      advantages[s] = terms::gpg_advantage(scores[s], m, plan, scale, options.accumulation);
  };
  terms::group_params baseline;
  baseline.kind = terms::group_kind::baseline;
  baseline.accumulation = options.accumulation;
  if (!census.nonfinite && detail::advantages_of_finite_groups(policy, groups, scores, advantages,
                                                               baseline, options.accumulation,
                                                               group, scale))
    return;
  detail::for_each_group(policy, scores, groups, options.nonfinite, group);
}

}  // namespace cascade_rl
