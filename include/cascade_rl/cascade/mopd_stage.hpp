#pragma once
// Multi-domain on-policy distillation (MOPD, Nemotron-Cascade 2). One step:
//   prompts from the source -> policy.generate (G per prompt)
//   -> student log-probs (policy.log_probs) and teacher log-probs, each prompt routed
//      to its domain's teacher (teacher_registry; an unknown domain is an error)
//   -> token advantage a_t = log pi_teacher(y_t) - log pi_student(y_t)
//      (+ outcome_weight * GRPO advantage, when an outcome reward is mixed in)
//   -> loss -(1/|V|) sum_t w_t a_t log pi_train(y_t), w_t = r_t 1[0.5 <= r_t <= 2],
//      r_t = pi_train / pi_rollout (mopd_options) -> policy.apply_gradient -> metrics.
// Published settings: 128 prompts x 4 rollouts, lr warmed up 2e-7 -> 2e-6 over 30
// steps, about 40-52 steps (see schedules.hpp).
// Data-parallel (step_context::comm): each rank generates and scores its shard of the
// prompts; everything up to dL/dlogp is per token or per group, the normaliser and the
// metrics come from every rank.

#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "cascade_rl/algorithms/broadcast.hpp"
#include "cascade_rl/algorithms/distillation_advantages.hpp"
#include "cascade_rl/algorithms/policy_loss.hpp"
#include "cascade_rl/cascade/concepts.hpp"
#include "cascade_rl/cascade/estimators.hpp"
#include "cascade_rl/cascade/evaluation.hpp"
#include "cascade_rl/cascade/metrics.hpp"
#include "cascade_rl/cascade/rewards.hpp"
#include "cascade_rl/cascade/stage.hpp"
#include "cascade_rl/cascade/stage_config.hpp"
#include "cascade_rl/cascade/step_losses.hpp"
#include "cascade_rl/cascade/prompt_stage.hpp"
#include "cascade_rl/cascade/step_parts.hpp"
#include "cascade_rl/cascade/teacher_registry.hpp"
#include "cascade_rl/cascade/update.hpp"

namespace cascade_rl {

// The reward of a pure-distillation MOPD stage: none.
struct no_reward {};

template <PromptSource Source, class R = no_reward>
  requires std::same_as<R, no_reward> || Reward<R>
class mopd_stage : public detail::prompt_stage<Source> {
  using base = detail::prompt_stage<Source>;
  using base::config_;
  using base::source_;

 public:
  static constexpr bool has_reward = !std::same_as<R, no_reward>;

  mopd_stage(stage_config config, Source source, R reward = {})
      : base(std::move(config), std::move(source)), reward_(std::move(reward)) {
    if (config_.kind == stage_kind::generic) config_.kind = stage_kind::mopd;
  }

  [[nodiscard]] std::vector<std::string> required_teachers() const { return config_.domains; }

  void validate() const {
    detail::validate_mopd_config(config_, has_reward);
    detail::refuse_end_reason_filter(config_);
    const std::set<std::string> domains(config_.domains.begin(), config_.domains.end());
    for (std::size_t i = 0; i < source_.size(); ++i)
      if (!domains.contains(source_.at(i).domain))
        detail::fail_at("stage '" + config_.name + "' prompts", i,
                        "has domain '" + source_.at(i).domain +
                            "', which is not among the stage's domains (" +
                            detail::joined(config_.domains) + ")");
  }

  template <Policy P>
  std::vector<domain_score> evaluate(P& policy, std::uint64_t seed, communicator_ref comm = {}) {
    if constexpr (has_reward)
      return evaluate_sets(policy, reward_, config_.evals, config_.eval_sampling, seed,
                           config_.reward_workers, comm);
    else
      return {};
  }

  template <Policy P>
  step_metrics step(P& policy, step_context<snapshot_t<P>>& context) {
    static_assert(Teacher<snapshot_t<P>>,
                  "MOPD scores tokens with teachers kept as policy snapshots: the policy's "
                  "snapshot_type needs a const member log_probs(const rollout_batch&, std::span<float>)");
    communicator_ref comm = context.comm;
    step_metrics m;
    m.rewarded = has_reward;
    auto start = detail::clock::now();
    std::vector<std::size_t> indices;
    const rollout_batch batch =
        detail::generate_step_batch(policy, source_, config_, context.rng, indices, comm);
    m.generation_seconds = detail::seconds_since(start);

    std::vector<float> rewards;
    if constexpr (has_reward) {
      reward_result scored = score_rewards(reward_, batch, config_.reward_workers);
      m.reward_seconds = scored.seconds;
      rewards = std::move(scored.rewards);
    }
    {
      const detail::step_samples all =
          detail::gather_samples(comm, batch, std::span<const float>(rewards), has_reward);
      if constexpr (has_reward)
        detail::record_curriculum(source_, std::span<const float>(all.rewards), indices,
                                  config_.group_size, config_.success_threshold);
      detail::fill_sample_metrics(m, indices.size(), all, config_.success_threshold);
    }

    start = detail::clock::now();
    const token_layout layout = batch.layout();
    const std::size_t n = batch.token_count();
    std::vector<float> teacher(n), student(n), advantages(n), dlogp(n);
    const reinforce_options loss_options =
        mopd_options(config_.mopd.band_low, config_.mopd.band_high);
    const loss_normalizer normalizer =
        detail::step_normalizer(layout, loss_options.aggregation, config_, comm);
    policy_loss_result loss;
    double kl_sum = 0.0;
    std::uint64_t kl_count = 0;
    if (batch.response_count() != 0) {
      route_teacher_log_probs(context.teachers, batch, std::span<float>(teacher));
      policy.log_probs(batch, std::span<float>(student));
      distillation_advantages(exec::par, layout,
                              {.teacher_log_probs = teacher, .student_log_probs = student},
                              advantages);
      reverse_kl_sum(layout, advantages, kl_sum, kl_count);
      if (config_.mopd.outcome_weight != 0.0) mix_outcome(batch, layout, rewards, advantages);
      loss = detail::step_policy_loss(layout,
                                      {.log_probs = student,
                                       .advantages = advantages,
                                       .behaviour_log_probs = batch.behaviour_log_probs},
                                      std::span<float>(dlogp), normalizer, loss_options);
    }
    kl_sum = sum_in_rank_order(comm, kl_sum);
    kl_count = sum_counts(comm, kl_count);
    m.kl_to_teacher = kl_count == 0 ? 0.0 : kl_sum / static_cast<double>(kl_count);
    policy.apply_gradient(batch, std::span<const float>(dlogp), context.lr);
    detail::update_totals totals;
    totals.add(comm, loss);
    totals.into(m);
    m.update_seconds = detail::seconds_since(start);
    return m;
  }

 private:
  // Sum and count over valid tokens of log pi_student - log pi_teacher = -a_t (the
  // metric is their ratio over every rank).
  static void reverse_kl_sum(const token_layout& layout, const std::vector<float>& advantages,
                             double& sum, std::uint64_t& count) {
    for (std::size_t t = 0; t < advantages.size(); ++t)
      if (layout.valid(t)) {
        sum -= advantages[t];
        ++count;
      }
  }

  void mix_outcome(const rollout_batch& batch, const token_layout& layout,
                   const std::vector<float>& rewards, std::vector<float>& advantages) const {
    std::vector<float> outcome(batch.response_count()), on_tokens(batch.token_count());
    grpo_estimator{}(std::span<const float>(rewards), batch.groups(), std::span<float>(outcome));
    broadcast_to_tokens(exec::par, layout, outcome, on_tokens);
    const auto w = static_cast<float>(config_.mopd.outcome_weight);
    for (std::size_t t = 0; t < advantages.size(); ++t) advantages[t] += w * on_tokens[t];
  }

  [[no_unique_address]] R reward_;
};

template <PromptSource Source>
[[nodiscard]] mopd_stage<Source> make_mopd_stage(stage_config config, Source source) {
  return mopd_stage<Source>(std::move(config), std::move(source));
}

template <PromptSource Source, Reward R>
[[nodiscard]] mopd_stage<Source, R> make_mopd_stage(stage_config config, Source source, R reward) {
  return mopd_stage<Source, R>(std::move(config), std::move(source), std::move(reward));
}

}  // namespace cascade_rl
