#pragma once
// The part of a GRPO-style step after the rewards, shared by grpo_stage (single-turn
// responses) and agentic_stage (episodes): the zero-variance count, the overlong and
// zero-variance filters, the per-sequence advantages (the estimator) and the update rule
// (update.hpp). If the filters leave nothing, no optimizer step is taken.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <variant>
#include <vector>

#include "cascade_rl/algorithms/broadcast.hpp"
#include "cascade_rl/algorithms/group_filters.hpp"
#include "cascade_rl/algorithms/length_filters.hpp"
#include "cascade_rl/cascade/concepts.hpp"
#include "cascade_rl/cascade/estimators.hpp"
#include "cascade_rl/cascade/metrics.hpp"
#include "cascade_rl/cascade/stage.hpp"
#include "cascade_rl/cascade/stage_config.hpp"
#include "cascade_rl/cascade/step_parts.hpp"
#include "cascade_rl/cascade/update.hpp"

namespace cascade_rl::detail {

inline void keep_selected(rollout_batch& batch, std::vector<float>& rewards,
                          const group_selection& selection) {
  std::vector<float> kept(selection.kept_sequences.size());
  gather_sequences(exec::seq, selection, rewards, kept);
  batch = subset(batch, selection);
  rewards = std::move(kept);
}

// Episodes masked or dropped by their end reason (filters.end_reasons); a batch without
// episodes (single-turn) is left as it is. Returns {masked, dropped}.
inline std::pair<std::size_t, std::size_t> filter_end_reasons(rollout_batch& batch,
                                                              std::vector<float>& rewards,
                                                              const end_reason_filter& filter) {
  if (batch.episodes.empty() || filter.keeps_all()) return {0, 0};
  std::vector<std::uint8_t> keep(batch.response_count(), 1);
  std::size_t masked = 0, dropped = 0;
  for (std::size_t i = 0; i < batch.response_count(); ++i) {
    const episode_treatment treatment = filter.of(batch.episodes[i].reason);
    if (treatment == episode_treatment::mask) {
      if (batch.loss_mask.empty()) batch.loss_mask.assign(batch.token_count(), 1);
      std::fill(batch.loss_mask.begin() + batch.token_offsets[i],
                batch.loss_mask.begin() + batch.token_offsets[i + 1], std::uint8_t{0});
      ++masked;
    } else if (treatment == episode_treatment::drop) {
      keep[i] = 0;
      ++dropped;
    }
  }
  if (dropped != 0)
    keep_selected(batch, rewards, select_sequences(batch.groups(), std::span<const std::uint8_t>(keep)));
  return {masked, dropped};
}

// Applies the end-reason, overlong and zero-variance filters, replacing batch and
// rewards by what is kept.
// Data-parallel: each rank filters its groups; the counts are summed over ranks.
inline void filter_batch(rollout_batch& batch, std::vector<float>& rewards,
                         const stage_config& config, step_metrics& m, communicator_ref comm) {
  const std::size_t groups_before = batch.prompt_count();
  const std::size_t responses_before = batch.response_count();
  const auto [masked, dropped] = filter_end_reasons(batch, rewards, config.filters.end_reasons);
  if (config.filters.overlong && batch.response_count() > 0) {
    const overlong_options& options = *config.filters.overlong;
    const std::vector<std::int64_t> lengths = batch.lengths();
    const std::vector<std::uint8_t> truncated = batch.truncated_flags();
    if (options.mode == overlong_mode::mask && batch.loss_mask.empty())
      batch.loss_mask.assign(batch.token_count(), 1);
    const overlong_report report = apply_overlong(
        exec::par, std::span<const std::int64_t>(lengths), std::span<const std::uint8_t>(truncated),
        batch.groups(), batch.layout(), std::span<std::uint8_t>(batch.loss_mask),
        std::span<float>(rewards), options);
    m.overlong = report.overlong;
    if (options.mode == overlong_mode::drop) keep_selected(batch, rewards, report.selection);
  }
  if (config.filters.drop_zero_variance_groups && batch.response_count() > 0)
    keep_selected(batch, rewards, drop_zero_variance_groups(exec::par, batch.groups(), rewards));
  std::uint64_t counts[5] = {groups_before - batch.prompt_count(),
                             responses_before - batch.response_count(), m.overlong, masked,
                             dropped};
  comm.all_reduce(std::span<std::uint64_t>(counts), reduce_op::sum);
  m.filtered_groups = static_cast<std::size_t>(counts[0]);
  m.filtered_sequences = static_cast<std::size_t>(counts[1]);
  m.overlong = static_cast<std::size_t>(counts[2]);
  if (m.episodes) {
    m.episodes->masked = static_cast<std::size_t>(counts[3]);
    m.episodes->dropped = static_cast<std::size_t>(counts[4]);
  }
}

// Filters, advantages and the update of one step; batch and rewards are this rank's.
template <Policy P, AdvantageEstimator E, class Snapshot>
void grpo_update_phase(P& policy, rollout_batch& batch, std::vector<float>& rewards,
                       const stage_config& config, E& estimator, step_context<Snapshot>& context,
                       step_metrics& m) {
  communicator_ref comm = context.comm;
  const auto start = clock::now();
  {
    std::vector<std::uint8_t> flags(batch.prompt_count());
    if (!flags.empty())
      zero_variance_groups(exec::par, batch.groups(), rewards, std::span<std::uint8_t>(flags));
    std::uint64_t zero = 0;
    for (auto f : flags) zero += f;
    m.zero_variance_groups = static_cast<std::size_t>(sum_counts(comm, zero));
    m.zero_variance_fraction =
        static_cast<double>(m.zero_variance_groups) / static_cast<double>(m.prompts);
  }
  filter_batch(batch, rewards, config, m, comm);
  if (sum_counts(comm, batch.response_count()) == 0) {
    m.update_seconds = seconds_since(start);
    return;
  }

  std::vector<float> advantages(batch.response_count());
  if (comm.size() == 1)
    estimator(std::span<const float>(rewards), batch.groups(), std::span<float>(advantages));
  else
    per_sequence_of_batch(
        comm, std::span<const float>(rewards), batch, std::span<float>(advantages),
        [&](auto all, const group_layout& groups, auto out) { estimator(all, groups, out); });
  update_totals totals;
  if (!std::holds_alternative<on_policy_update>(config.update.rule)) {
    std::visit(
        [&]<class Rule>(const Rule& rule) {
          if constexpr (mini_batch_rule<Rule>)
            mini_batch_steps(policy, batch, std::span<const float>(advantages), rule, config,
                             context.lr, context.rng, totals, comm);
        },
        config.update.rule);
  } else {
    const token_layout layout = batch.layout();
    std::vector<float> token_advantages(batch.token_count());
    if (batch.response_count() != 0)
      broadcast_to_tokens(exec::par, layout, advantages, token_advantages);
    totals.add(comm, on_policy_step(policy, batch, std::span<const float>(token_advantages),
                                    std::get<on_policy_update>(config.update.rule), config,
                                    context.lr, comm));
  }
  totals.into(m);
  m.update_seconds = seconds_since(start);
}

}  // namespace cascade_rl::detail
