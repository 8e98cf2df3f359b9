#pragma once
// OPO (Hao et al. 2025, "On-Policy RL with Optimal Reward Baseline"), as veRL computes it
// (compute_opo_outcome_advantage in verl/trainer/ppo/core_algos.py): the baseline of a
// group is its mean score weighted by response length, the optimal baseline when the
// gradient's norm grows with the length,
//   b_g = sum_i |o_i| s_i / sum_i |o_i|,   A_i = s_i - b_g   on every valid token of i,
// with |o_i| the valid tokens of sequence i. No std scaling, no whitening.
//
// Conventions (terms/length_weighted_baseline.hpp): a zero-variance group gets exactly 0;
// a group of one follows options.singleton (veRL: baseline 0, the score itself, which is
// singleton_rule::raw_score); masked tokens get 0, as in veRL. veRL's score is the sum
// of the sequence's token rewards (padding included); pass that, or the outcome score.

#include <concepts>
#include <cstddef>
#include <span>

#include "cascade_rl/algorithms/group_statistics.hpp"
#include "cascade_rl/algorithms/uniform_group_tiles.hpp"  // uniform_tile_parallel_rewards
#include "cascade_rl/core/checks.hpp"
#include "cascade_rl/core/contiguous_ranges.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/group_layout.hpp"
#include "cascade_rl/core/parallel.hpp"
#include "cascade_rl/core/token_layout.hpp"
#include "cascade_rl/options/group_estimators.hpp"
#include "cascade_rl/terms/length_weighted_baseline.hpp"

namespace cascade_rl {

// Per-token advantages of per-sequence scores; groups of sequences as in GRPO.
template <exec::host_policy Policy, contiguous_output Out>
void opo_advantages(const Policy& policy, const group_layout& groups, const token_layout& tokens,
                    std::span<const output_value_t<Out>> scores, Out&& advantages_out,
                    const opo_options& options = {}) {
  using T = output_value_t<Out>;
  const std::span<T> advantages = output_span(advantages_out);
  detail::require_size(tokens.sequences(), scores.size(), "tokens", "one sequence per score");
  detail::require_size(advantages.size(), tokens.tokens(), "advantages", "one per token");
  groups.require_sequences(scores.size(), "scores");
  if (options.nonfinite == nonfinite_rule::error) detail::require_finite(policy, scores, "scores");
  if (options.singleton == singleton_rule::error) detail::refuse_singleton_groups(groups, "OPO");
  // A group here is whole sequences of tokens: worth a thread from two groups on, once the
  // batch holds enough tokens to pay for starting threads (the group tiles' 65536).
  const std::size_t min_parallel =
      tokens.tokens() >= detail::uniform_tile_parallel_rewards ? 2 : groups.groups() + 1;
  detail::for_each_group(
      policy, scores, groups, options.nonfinite,
      [&](std::size_t first, std::size_t last, bool zero_group) {
        terms::opo_sums sums;
        if (!zero_group)
          for (std::size_t s = first; s < last; ++s)
            terms::opo_add(sums, static_cast<double>(scores[s]), tokens.valid_tokens(s));
        const terms::opo_group g = terms::opo_group_of(sums, options.singleton, zero_group);
        // A sequence's advantage is one value on every valid token (opo_advantage depends
        // on the token only through its mask): computed once, then a branch-free row fill.
        for (std::size_t s = first; s < last; ++s) {
          const T value = terms::opo_advantage(scores[s], g, true);
          for (std::size_t t = tokens.begin(s); t < tokens.end(s); ++t)
            advantages[t] = tokens.valid(t) ? value : T(0);
        }
      },
      min_parallel);
}

}  // namespace cascade_rl
