#pragma once
// The update phase of a GRPO-style stage: per-sequence advantages onto tokens, the loss
// and dL/dlogp with normalisers fixed for the whole optimizer step, apply_gradient.
//
//   on_policy  one optimizer step over the whole (filtered) batch; REINFORCE at ratio 1
//              (Cascade RL: strictly on-policy, so PPO's clip would be inert). The
//              normaliser counts every valid token of the batch (local_loss_counts).
//   ppo_clip   `epochs` passes; each pass shuffles the groups (cascade generator) and cuts
//              them into `mini_batches` mini-batches, each one optimizer step with PPO's
//              clipped surrogate against the behaviour log-probs, normalised over that
//              mini-batch (its own optimizer step).

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "cascade_rl/algorithms/broadcast.hpp"
#include "cascade_rl/algorithms/loss_aggregation.hpp"
#include "cascade_rl/algorithms/policy_loss.hpp"
#include "cascade_rl/cascade/concepts.hpp"
#include "cascade_rl/cascade/metrics.hpp"
#include "cascade_rl/cascade/rng.hpp"
#include "cascade_rl/cascade/rollout_batch.hpp"
#include "cascade_rl/cascade/stage_config.hpp"
#include "cascade_rl/core/exec.hpp"

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
  void into(step_metrics& m) const {
    m.updates = updates;
    m.tokens = metrics.valid_tokens;
    m.loss = updates == 0 ? 0.0 : loss_sum / static_cast<double>(updates);
    m.clip_fraction = metrics.clip_fraction();
    m.importance_masked_fraction = metrics.masked_fraction();
    m.importance_truncated_fraction = metrics.truncated_fraction();
  }
};

inline loss_normalizer step_normalizer(const token_layout& layout, const stage_config& config) {
  // seq-mean-token-sum-norm divides by a constant: the maximum response length (veRL
  // uses the padded length).
  return local_loss_counts(exec::par, layout)
      .normalizer(static_cast<double>(config.sampling.max_response_length));
}

template <Policy P>
policy_loss_result on_policy_update(P& policy, const rollout_batch& batch,
                                    std::span<const float> token_advantages,
                                    const stage_config& config, double lr) {
  const token_layout layout = batch.layout();
  std::vector<float> dlogp(batch.token_count());
  const reinforce_options options{.aggregation = config.update.aggregation,
                                  .surrogate = reinforce_surrogate::ratio,
                                  .importance = config.update.importance};
  policy_loss_result result;
  if (options.importance.mode == importance_sampling::none) {
    // At ratio 1 the loss reads the log-probs only for validation: the sampler's serve.
    result = reinforce_loss(exec::par, layout, std::span<const float>(batch.behaviour_log_probs),
                            token_advantages, std::span<float>(dlogp),
                            step_normalizer(layout, config), options);
  } else {
    std::vector<float> log_probs(batch.token_count());
    policy.log_probs(batch, std::span<float>(log_probs));
    result = reinforce_loss(exec::par, layout, std::span<const float>(log_probs), token_advantages,
                            std::span<const float>(batch.behaviour_log_probs),
                            std::span<float>(dlogp), step_normalizer(layout, config), options);
  }
  policy.apply_gradient(batch, std::span<const float>(dlogp), lr);
  return result;
}

template <Policy P>
void ppo_update(P& policy, const rollout_batch& batch, std::span<const float> advantages,
                const stage_config& config, double lr, rng_type& rng, update_totals& totals) {
  const std::size_t groups = batch.prompt_count();
  const std::size_t parts = std::min(config.update.mini_batches, groups);
  std::vector<std::size_t> order(groups);
  for (std::size_t g = 0; g < groups; ++g) order[g] = g;
  for (std::size_t epoch = 0; epoch < config.update.epochs; ++epoch) {
    if (parts > 1) shuffle(order, rng);
    for (std::size_t part = 0; part < parts; ++part) {
      std::vector<std::uint8_t> keep(groups, 0);
      for (std::size_t k = part * groups / parts; k < (part + 1) * groups / parts; ++k)
        keep[order[k]] = 1;
      const group_selection selection = select_groups(batch.groups(), keep);
      const rollout_batch mini = subset(batch, selection);
      std::vector<float> mini_advantages(selection.kept_sequences.size());
      gather_sequences(exec::seq, advantages, selection, std::span<float>(mini_advantages));
      const token_layout layout = mini.layout();
      std::vector<float> token_advantages(mini.token_count()), log_probs(mini.token_count()),
          dlogp(mini.token_count());
      broadcast_to_tokens(exec::par, std::span<const float>(mini_advantages), layout,
                          std::span<float>(token_advantages));
      policy.log_probs(mini, std::span<float>(log_probs));
      ppo_clip_options options = config.update.ppo;
      options.aggregation = config.update.aggregation;
      totals.add(ppo_clip_loss(exec::par, layout, std::span<const float>(log_probs),
                               std::span<const float>(mini.behaviour_log_probs),
                               std::span<const float>(token_advantages), std::span<float>(dlogp),
                               step_normalizer(layout, config), options));
      policy.apply_gradient(mini, std::span<const float>(dlogp), lr);
    }
  }
}

}  // namespace cascade_rl::detail
