#pragma once
// The update phase of a GRPO-style stage: per-sequence advantages onto tokens, the loss
// and dL/dlogp with normalisers fixed for the whole optimizer step, apply_gradient.
//
//   on_policy_update  one optimizer step over the whole (filtered) batch; REINFORCE at
//                     ratio 1 (Cascade RL: strictly on-policy, so PPO's clip would be
//                     inert). The normaliser counts every valid token of the batch.
//   ppo_clip_update   `epochs` passes; each pass shuffles the groups (cascade generator)
//                     and cuts them into `mini_batches` mini-batches, each one optimizer
//                     step with PPO's clipped surrogate against the behaviour log-probs,
//                     normalised over that mini-batch (its own optimizer step).
//   mini_batch_update<Loss>
//                     the same schedule with any loss's options (cispo_update, ...), run
//                     through policy_loss (policy_loss_entry.hpp; the engine's calls are
//                     step_losses.hpp's, which a build may compile once); the covariance losses
//                     select their tokens in each mini-batch's call. Under
//                     bypass_mode_update: the rollout correction of the trainer's
//                     log-probs against the sampler's (the batch's behaviour log-probs),
//                     then PPO clip or REINFORCE on the tokens it keeps, normalised by
//                     the counts of that mask over every rank.
//
// Data-parallel (comm of size R): the batch is this rank's shard of whole groups. The
// normalisers count the tokens of every rank (integers, exact), so each token's
// dL/dlogp is the single-process one; apply_gradient is called on every rank, with an
// empty batch where a rank holds nothing, since the policy's gradient sum is a
// collective. PPO shuffles the global group order (the generator is the same on every
// rank) and each rank takes its groups of each mini-batch.

#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

#include "cascade_rl/algorithms/broadcast.hpp"
#include "cascade_rl/algorithms/covariance_losses.hpp"
#include "cascade_rl/algorithms/loss_aggregation.hpp"
#include "cascade_rl/algorithms/policy_loss.hpp"
#include "cascade_rl/algorithms/policy_loss_entry.hpp"
#include "cascade_rl/algorithms/rollout_correction.hpp"
#include "cascade_rl/cascade/concepts.hpp"
#include "cascade_rl/cascade/data_parallel.hpp"
#include "cascade_rl/cascade/metrics.hpp"
#include "cascade_rl/cascade/rng.hpp"
#include "cascade_rl/cascade/rollout_batch.hpp"
#include "cascade_rl/cascade/stage_config.hpp"
#include "cascade_rl/cascade/step_losses.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/distributed/global_metrics.hpp"
#include "cascade_rl/distributed/global_normalizer.hpp"

namespace cascade_rl::detail {

struct update_totals {
  policy_loss_metrics metrics{};
  double loss_sum = 0.0;
  std::size_t updates = 0;

  void add(const policy_loss_result& r) {
    metrics += r.metrics;
    loss_sum += r.loss;
    ++updates;
  }
  // One update of a data-parallel step: r is this rank's part; the metrics and the
  // loss are summed over ranks (the loss in rank order, so every rank reports the same).
  void add(communicator_ref comm, const policy_loss_result& r) {
    if (comm.size() == 1) return add(r);
    policy_loss_result total;
    total.metrics = global_metrics(comm, r.metrics);
    total.loss = sum_in_rank_order(comm, r.loss);
    add(total);
  }
  void into(step_metrics& m) const {
    m.updates = updates;
    m.tokens = metrics.valid_tokens;
    m.loss = updates == 0 ? 0.0 : loss_sum / static_cast<double>(updates);
    m.clip_fraction = metrics.clip_fraction();
    m.importance_masked_fraction = metrics.masked_fraction();
    m.importance_truncated_fraction = metrics.truncated_fraction();
  }
};

// The step's normaliser for the loss's aggregation mode. seq-mean-token-sum-norm divides by
// a constant too: the maximum response length (veRL uses the padded length).
inline loss_normalizer step_normalizer(const token_layout& layout, loss_aggregation mode,
                                       const stage_config& config, communicator_ref comm = {}) {
  return global_normalizer(comm, local_loss_counts(exec::par, layout), mode,
                           static_cast<double>(config.sampling.max_response_length));
}

// The on_policy_update rule: one optimizer step over the batch.
template <Policy P>
policy_loss_result on_policy_step(P& policy, const rollout_batch& batch,
                                  std::span<const float> token_advantages,
                                  const on_policy_update& rule, const stage_config& config,
                                  double lr, communicator_ref comm = {}) {
  const token_layout layout = batch.layout();
  const loss_normalizer normalizer =
      step_normalizer(layout, config.update.aggregation, config, comm);
  std::vector<float> dlogp(batch.token_count());
  const reinforce_options options = rule.loss_options(config.update.aggregation);
  policy_loss_result result;
  if (batch.response_count() == 0) {
    // Nothing here (data-parallel: other ranks hold the step); still a collective.
  } else if (options.importance.mode == importance_sampling::none) {
    // At ratio 1 the loss reads the log-probs only for validation: the sampler's serve.
    result = step_policy_loss(
        layout, {.log_probs = batch.behaviour_log_probs, .advantages = token_advantages},
        std::span<float>(dlogp), normalizer, options);
  } else {
    std::vector<float> log_probs(batch.token_count());
    policy.log_probs(batch, std::span<float>(log_probs));
    result = step_policy_loss(layout,
                              {.log_probs = log_probs,
                               .advantages = token_advantages,
                               .behaviour_log_probs = batch.behaviour_log_probs},
                              std::span<float>(dlogp), normalizer, options);
  }
  policy.apply_gradient(batch, std::span<const float>(dlogp), lr);
  return result;
}

// veRL's bypass mode on one mini-batch, as plain steps: the correction, the effective
// mask's normaliser over every rank (veRL's agg_loss on the modified mask), the loss. The
// normaliser is a collective, so a rank with no valid token still counts its (empty)
// share.
inline policy_loss_result bypass_mode_mini_batch(const rollout_batch& mini,
                                                 const token_layout& layout,
                                                 std::span<const float> log_probs,
                                                 std::span<const float> advantages,
                                                 std::span<float> dlogp,
                                                 const bypass_mode_options& options,
                                                 const stage_config& config,
                                                 communicator_ref comm) {
  if (mini.response_count() == 0 || local_loss_counts(exec::par, layout).tokens == 0) {
    (void)step_normalizer(layout, config.update.aggregation, config, comm);
    return {};
  }
  const bypass_mode_inputs<float> inputs{.log_probs = log_probs,
                                         .rollout_log_probs = mini.behaviour_log_probs,
                                         .advantages = advantages};
  std::vector<float> weights(mini.token_count());
  std::vector<std::uint8_t> keep(mini.token_count());
  (void)step_bypass_correction(layout, inputs, options, std::span<float>(weights),
                               std::span<std::uint8_t>(keep));
  const token_layout effective = layout.with_mask(keep);
  return step_bypass_loss(effective, inputs, std::span<const float>(weights), dlogp,
                          step_normalizer(effective, config.update.aggregation, config, comm),
                          options);
}

// A mini-batch rule: rule.epochs x rule.mini_batches optimizer steps of its loss, the
// behaviour log-probs as the old log-probs.
template <Policy P, class Loss>
void mini_batch_steps(P& policy, const rollout_batch& batch, std::span<const float> advantages,
                      const mini_batch_update<Loss>& rule, const stage_config& config, double lr,
                      rng_type& rng, update_totals& totals, communicator_ref comm = {}) {
  // This rank's groups are global groups [first, first + local) of the (filtered) step.
  const std::size_t local = batch.prompt_count();
  std::vector<std::uint64_t> counts(static_cast<std::size_t>(comm.size()));
  const std::uint64_t mine = local;
  comm.all_gather(std::span<const std::uint64_t>(&mine, 1), std::span<std::uint64_t>(counts));
  std::size_t groups = 0, first = 0;
  for (std::size_t r = 0; r < counts.size(); ++r) {
    if (r == static_cast<std::size_t>(comm.rank())) first = groups;
    groups += static_cast<std::size_t>(counts[r]);
  }
  const std::size_t parts = std::min(rule.mini_batches, groups);
  const auto options = rule.loss_options(config.update.aggregation);
  constexpr bool bypass = std::is_same_v<Loss, bypass_mode_keys>;
  std::vector<std::size_t> order(groups);
  for (std::size_t g = 0; g < groups; ++g) order[g] = g;
  for (std::size_t epoch = 0; epoch < rule.epochs; ++epoch) {
    if (parts > 1) shuffle(order, rng);
    for (std::size_t part = 0; part < parts; ++part) {
      std::vector<std::uint8_t> keep(local, 0);
      for (std::size_t k = part * groups / parts; k < (part + 1) * groups / parts; ++k)
        if (order[k] >= first && order[k] < first + local) keep[order[k] - first] = 1;
      const group_selection selection = select_groups(batch.groups(), keep);
      const rollout_batch mini = subset(batch, selection);
      std::vector<float> mini_advantages(selection.kept_sequences.size());
      gather_sequences(exec::seq, selection, advantages, mini_advantages);
      const token_layout layout = mini.layout();
      std::vector<float> token_advantages(mini.token_count()), log_probs(mini.token_count()),
          dlogp(mini.token_count());
      if (mini.response_count() != 0) {
        broadcast_to_tokens(exec::par, layout, mini_advantages, token_advantages);
        policy.log_probs(mini, std::span<float>(log_probs));
      }
      policy_loss_result result;
      if constexpr (bypass) {
        result = bypass_mode_mini_batch(mini, layout, log_probs, token_advantages, dlogp, options,
                                        config, comm);
      } else {
        const loss_normalizer normalizer =
            step_normalizer(layout, config.update.aggregation, config, comm);
        // Clip-Cov's draw: a seed per mini-batch, drawn on every rank (responses or not) so
        // that the ranks' generators, and so their shuffles, stay the same.
        const std::uint64_t seed = draws_token_selection<decltype(options)> ? rng() : 0;
        if (mini.response_count() != 0)
          result = step_policy_loss(layout,
                                    policy_loss_inputs<float>{
                                        .log_probs = log_probs,
                                        .old_log_probs = mini.behaviour_log_probs,
                                        .advantages = token_advantages,
                                        .selection = token_selection::seeded(seed)},
                                    std::span<float>(dlogp), normalizer, options);
      }
      totals.add(comm, result);
      policy.apply_gradient(mini, std::span<const float>(dlogp), lr);
    }
  }
}

}  // namespace cascade_rl::detail
