#pragma once
// Dropping groups that carry no learning signal. A group whose rewards are all equal
// (max == min, exactly) gets zero advantage under GRPO, Dr. GRPO and RLOO, yet still
// counts in the token normaliser and dilutes the step; IF-RL in Nemotron-Cascade and
// DAPO's dynamic sampling (Yu et al. 2025) drop such groups. A group of one sequence
// is zero-variance too.
//
// Filtering returns a group_selection: which input groups survive, the indices of the
// kept sequences and the offsets of the kept groups over them, so that the caller can
// gather its per-sequence (and per-token) arrays and build the new layouts. The
// selection owns its vectors; group_selection::groups() is a view into it.

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "cascade_rl/algorithms/group_statistics.hpp"
#include "cascade_rl/core/checks.hpp"
#include "cascade_rl/core/contiguous_ranges.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/group_layout.hpp"
#include "cascade_rl/core/parallel.hpp"
#include "cascade_rl/options/advantage_conventions.hpp"
#include "cascade_rl/options/group_estimators.hpp"

namespace cascade_rl {

struct group_selection {
  std::vector<std::uint8_t> kept_groups;    // per input group: 1 kept, 0 dropped
  std::vector<std::size_t> kept_sequences;  // input indices of the kept sequences, in order
  std::vector<std::int64_t> group_offsets{0};  // kept groups over kept_sequences
  std::size_t dropped_groups = 0;
  std::size_t dropped_sequences = 0;

  // The layout of the kept groups. A view into group_offsets: keep the selection alive.
  [[nodiscard]] group_layout groups() const { return group_layout(group_offsets); }
  [[nodiscard]] std::size_t kept_group_count() const { return group_offsets.size() - 1; }
};

// Keeps the sequences whose flag is non-zero; a group left with no sequence is dropped
// (a partially kept group stays, smaller).
inline group_selection select_sequences(const group_layout& groups,
                                        std::span<const std::uint8_t> keep_sequence) {
  groups.require_sequences(keep_sequence.size(), "keep_sequence");
  group_selection selection;
  selection.kept_groups.assign(groups.groups(), 0);
  for (std::size_t g = 0; g < groups.groups(); ++g) {
    const std::size_t before = selection.kept_sequences.size();
    for (std::size_t i = groups.begin(g); i < groups.end(g); ++i) {
      if (keep_sequence[i] != 0)
        selection.kept_sequences.push_back(i);
      else
        ++selection.dropped_sequences;
    }
    if (selection.kept_sequences.size() == before) {
      ++selection.dropped_groups;
      continue;
    }
    selection.kept_groups[g] = 1;
    selection.group_offsets.push_back(static_cast<std::int64_t>(selection.kept_sequences.size()));
  }
  return selection;
}

// Keeps whole groups whose flag is non-zero.
inline group_selection select_groups(const group_layout& groups,
                                     std::span<const std::uint8_t> keep_group) {
  detail::require_size(keep_group.size(), groups.groups(), "keep_group", "one per group");
  std::vector<std::uint8_t> keep_sequence(groups.sequences(), 0);
  for (std::size_t g = 0; g < groups.groups(); ++g)
    for (std::size_t i = groups.begin(g); i < groups.end(g); ++i)
      keep_sequence[i] = keep_group[g] != 0 ? 1 : 0;
  return select_sequences(groups, keep_sequence);
}

// out[k] = in[selection.kept_sequences[k]]: compacts any per-sequence array.
template <exec::host_policy Policy, contiguous_writable_range Out>
void gather_sequences(const Policy& policy, const group_selection& selection,
                      std::span<const std::ranges::range_value_t<Out>> in, Out&& out_range) {
  const auto out = output_span(out_range);
  detail::require_size(out.size(), selection.kept_sequences.size(), "out",
                       "one per kept sequence");
  for (std::size_t k = 0; k < selection.kept_sequences.size(); ++k)
    if (selection.kept_sequences[k] >= in.size())
      detail::fail_at("in", selection.kept_sequences[k],
                      "is past the end: the selection was made for a longer batch");
  detail::for_each_index(policy, out.size(),
                         [&](std::size_t k) { out[k] = in[selection.kept_sequences[k]]; });
}

// flags[g] = 1 where group g's rewards are all equal (a group of one included).
template <exec::host_policy Policy, contiguous_input In>
void zero_variance_groups(const Policy& policy, const group_layout& groups, const In& rewards_in,
                          std::span<std::uint8_t> flags) {
  const auto rewards = input_span(rewards_in);
  groups.require_sequences(rewards.size(), "rewards");
  detail::require_size(flags.size(), groups.groups(), "flags", "one per group");
  detail::require_finite(policy, rewards, "rewards");
  detail::for_each_index(
      policy, groups.groups(),
      [&](std::size_t g) {
        std::uint8_t constant = 1;
        for (std::size_t i = groups.begin(g) + 1; i < groups.end(g); ++i)
          if (rewards[i] != rewards[groups.begin(g)]) constant = 0;
        flags[g] = constant;
      },
      detail::group_parallel_threshold);
}

// The selection without the zero-variance groups (and, under nonfinite = zero_group,
// without the groups holding a non-finite reward).
template <exec::host_policy Policy, contiguous_input In>
group_selection drop_zero_variance_groups(const Policy& policy, const group_layout& groups,
                                          const In& rewards_in,
                                          const zero_variance_filter_options& options = {}) {
  const auto rewards = input_span(rewards_in);
  groups.require_sequences(rewards.size(), "rewards");
  if (options.nonfinite == nonfinite_rule::error) detail::require_finite(policy, rewards, "rewards");
  std::vector<std::uint8_t> keep(groups.groups(), 0);
  detail::for_each_index(
      policy, groups.groups(),
      [&](std::size_t g) {
        const std::size_t first = groups.begin(g);
        const std::size_t last = groups.end(g);
        if (detail::group_has_nonfinite(rewards, first, last)) return;
        for (std::size_t i = first + 1; i < last; ++i)
          if (rewards[i] != rewards[first]) {
            keep[g] = 1;
            return;
          }
      },
      detail::group_parallel_threshold);
  return select_groups(groups, keep);
}

}  // namespace cascade_rl
